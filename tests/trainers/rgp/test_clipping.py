"""Per-example carrier gradients against a batch-size-1 autograd loop, the joint clip bound, the
C = inf / full-rank limit (plain summed gradient), and per-example memory that grows with r, not p d."""

from __future__ import annotations

import math

import pytest
import torch

from dpaudit.trainers.rgp.carriers import power_method, reconstruct
from dpaudit.trainers.rgp.clipping import CarrierClipper, Reparametrization
from dpaudit.trainers.torch_common.model import per_example_losses


def _sub(batch, idx):
    idx = torch.as_tensor(idx, dtype=torch.long)
    return {k: v[idx] for k, v in batch.items()}


def _carriers(reparam, rank, seed=1):
    gen = torch.Generator().manual_seed(seed)
    pairs = [power_method(reparam.matrix(i, w), rank, 1, gen) for i, w in enumerate(reparam.matrices)]
    return [left for left, _ in pairs], [right for _, right in pairs]


def _loop_grads(model, batch, i):
    """Gradient of example i's loss for every parameter of an ordinary (not reparametrized) model."""
    params = dict(model.named_parameters())
    for p in params.values():
        p.grad = None
    loss, _ = per_example_losses(model, _sub(batch, [i]))
    loss.sum().backward()
    return {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in params.items()}


@pytest.mark.parametrize("task", ["classify", "mlm", "clm"])  # clm: GPT-2's Conv1D weights, transposed
def test_per_example_carrier_gradients_equal_a_batch_size_one_loop(make_model, tiny_batches, task):
    batch = tiny_batches[task]
    model, reference = make_model(task), make_model(task)
    reparam = Reparametrization(model)
    clipper = CarrierClipper(model, per_example_losses, reparam, clip_norm=1.0, physical_batch=4)
    lefts, rights = _carriers(reparam, rank=3)
    units, losses, _ = clipper.per_example_grads(batch, lefts, rights)
    torch.testing.assert_close(losses, per_example_losses(reference, batch)[0].detach(), atol=1e-5, rtol=1e-5)
    k = len(reparam.matrices)
    # MLM and CLM: the decoder weight; its loop gradient adds the lookup's
    tied = {"bert.embeddings.word_embeddings.weight", "transformer.wte.weight"}
    checked = 0
    for i in range(batch["input_ids"].shape[0]):
        loop = _loop_grads(reference, batch, i)
        for j, name in enumerate(reparam.names):
            if j < k:  # Theorem 2.1 per example: dL_i = dW_i R^T, dR_i = L^T dW_i
                if name in tied:
                    continue
                grad = reparam.matrix(j, loop[name])  # p x d (a Conv1D's gradient transposed)
                torch.testing.assert_close(units[2 * j][i], grad @ rights[j].T, atol=2e-6, rtol=1e-4, msg=name)
                torch.testing.assert_close(units[2 * j + 1][i], lefts[j].T @ grad, atol=2e-6, rtol=1e-4, msg=name)
            else:  # non-matrix parameters: their exact per-example gradient
                torch.testing.assert_close(units[k + j][i], loop[name], atol=2e-6, rtol=1e-4, msg=name)
            checked += 1
    assert checked >= 6 * (len(reparam.names) - 1)
    assert not any(p.requires_grad for p in reparam.matrices)  # no p x d gradient is ever computed


def test_what_is_trained_clipped_and_frozen(make_model):
    reparam = Reparametrization(make_model("classify"))
    matrices = reparam.names[: len(reparam.matrices)]
    assert "bert.encoder.layer.0.attention.self.query.weight" in matrices and "classifier.weight" in matrices
    assert "bert.pooler.dense.weight" in matrices and len(matrices) == 2 * 6 + 2
    assert all(n.endswith((".bias", "LayerNorm.weight")) for n in reparam.names[len(reparam.matrices) :])
    assert reparam.frozen == [
        "bert.embeddings.position_embeddings.weight",
        "bert.embeddings.token_type_embeddings.weight",
        "bert.embeddings.word_embeddings.weight",
    ]


def _norm(tensors):
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in tensors))


def test_each_example_is_clipped_jointly_to_c(make_model, tiny_batches):
    batch = tiny_batches["classify"]
    model = make_model("classify")
    reparam = Reparametrization(model)
    c = 0.05
    clipper = CarrierClipper(model, per_example_losses, reparam, clip_norm=c, physical_batch=4)
    assert clipper.sensitivity == c and clipper.sensitivity_factor == 1.0
    lefts, rights = _carriers(reparam, rank=2)
    units, _, _ = clipper.per_example_grads(batch, lefts, rights)
    raw = [_norm([u[i] for u in units]) for i in range(6)]
    assert min(raw) > c  # every example is clipped at this C
    for i in range(6):
        one = clipper.clipped_sum(_sub(batch, [i]), lefts, rights)
        assert _norm(one.grads) == pytest.approx(c, rel=1e-5)  # scaled to exactly C, jointly over all units
        assert one.clipped == 1
    whole = clipper.clipped_sum(batch, lefts, rights)  # chunks of 4 + 2: the same sum
    parts = [clipper.clipped_sum(_sub(batch, [i]), lefts, rights).grads for i in range(6)]
    for a, *b in zip(whole.grads, *parts):
        torch.testing.assert_close(a, sum(b), atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("task", ["classify", "clm"])
def test_no_clipping_at_full_rank_is_the_plain_batch_gradient(make_model, tiny_batches, task):
    """C = inf and r = min(p, d): Eq. 3 of the carrier sums is the summed gradient of every weight (clm: a
    GPT-2 Conv1D's in its stored [in, out] layout, as the trainer applies it)."""
    batch = tiny_batches[task]
    model, reference = make_model(task), make_model(task)
    reparam = Reparametrization(model)
    clipper = CarrierClipper(model, per_example_losses, reparam, clip_norm=math.inf, physical_batch=4)
    lefts, rights = _carriers(reparam, rank=10**6)
    sums = clipper.clipped_sum(batch, lefts, rights)
    assert sums.clipped == 0
    for p in reference.parameters():
        p.grad = None
    per_example_losses(reference, batch)[0].sum().backward()
    params = dict(reference.named_parameters())
    k = len(reparam.matrices)
    checked = 0
    for j, name in enumerate(reparam.names):
        if name == "transformer.wte.weight":  # lm_head's; the reference adds the input lookup's gradient
            continue
        got = (
            reparam.matrix(j, reconstruct(sums.grads[2 * j], sums.grads[2 * j + 1], lefts[j], rights[j]))
            if j < k
            else sums.grads[k + j]
        )
        torch.testing.assert_close(got, params[name].grad, atol=1e-5, rtol=1e-4, msg=name)
        checked += 1
    assert checked == len(reparam.names) - (task == "clm")


def _per_example_bytes(model, batch, rank):
    reparam = Reparametrization(model)
    clipper = CarrierClipper(model, per_example_losses, reparam, clip_norm=1.0, physical_batch=6)
    lefts, rights = _carriers(reparam, rank)
    units, _, _ = clipper.per_example_grads(batch, lefts, rights)
    carrier = (
        sum(u.numel() * u.element_size() for u in units[: 2 * len(reparam.matrices)]) / batch["input_ids"].shape[0]
    )
    dense = sum(w.numel() * w.element_size() for w in reparam.matrices)  # what one dp-sgd per-example gradient holds
    return carrier, dense


def test_per_example_memory_grows_with_rank_not_with_the_weight_size(make_model, tiny_batches):
    batch = tiny_batches["classify"]
    sizes = {r: _per_example_bytes(make_model("classify"), batch, r) for r in (1, 2, 4)}
    mini = {r: _per_example_bytes(make_model("classify", preset="mini"), batch, r) for r in (1, 2)}
    carrier = {r: s[0] for r, s in sizes.items()}
    # Linear in r: sum_l min(r, p_l, d_l) (p_l + d_l) floats per example; at r = 4 the 3 x 64
    # classifier is capped at rank 3 (its full rank).
    assert carrier[1] == 4 * sum(w.shape[0] + w.shape[1] for w in Reparametrization(make_model("classify")).matrices)
    assert carrier[2] == 2 * carrier[1] and carrier[4] == 4 * carrier[1] - 4 * (3 + 64)
    # tiny (2 layers, width 64, ffn 128) -> mini (4 layers, width 312, ffn 1200): the dense per-example
    # gradient grows like sum p d (x 67), the carrier gradients like sum (p + d) (x 12).
    dense_growth = mini[1][1] / sizes[1][1]
    carrier_growth = mini[1][0] / carrier[1]
    assert dense_growth > 5 * carrier_growth
    assert mini[2][0] * 10 < mini[2][1]  # rank 2 on mini: < 1/10 of a dp-sgd per-example gradient
