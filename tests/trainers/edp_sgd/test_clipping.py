"""Clipping oracles: per-example gradients vs a loop, clip bounds, sensitivity, and the sgd limit."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from dpaudit.trainers.torch_common.clipping.microbatch import MicrobatchClipper, layer_clip_norms
from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper, trainable
from dpaudit.trainers.torch_common.model import layer_groups, per_example_losses
from dpaudit.trainers.torch_common.sampling import example_slots, split_microbatches


def _sub(batch, idx):
    idx = torch.as_tensor(idx, dtype=torch.long)
    return {k: v[idx] for k, v in batch.items()}


def _loop_grads(model, batch, i):
    names, params = trainable(model)
    for p in params:
        p.grad = None
    loss, _ = per_example_losses(model, _sub(batch, [i]))
    loss.sum().backward()
    out = {n: (p.grad.clone() if p.grad is not None else torch.zeros_like(p)) for n, p in zip(names, params)}
    for p in params:
        p.grad = None
    return out


@pytest.mark.parametrize("task", ["classify", "mlm"])
def test_per_example_gradients_equal_batch_size_one_loop(tiny_batches, task):
    clf, clf_batch, mlm, mlm_batch = tiny_batches
    model, batch = (clf, clf_batch) if task == "classify" else (mlm, mlm_batch)
    clipper = PerExampleClipper(model, per_example_losses, clip_norm=1.0, physical_batch=4)
    grads, losses, _ = clipper.per_example_grads(batch)
    direct, _ = per_example_losses(model, batch)
    torch.testing.assert_close(losses, direct.detach(), atol=1e-5, rtol=1e-5)
    for i in range(batch["input_ids"].shape[0]):
        loop = _loop_grads(model, batch, i)
        for name in clipper.names:
            torch.testing.assert_close(grads[name][i], loop[name], atol=2e-5, rtol=1e-4, msg=f"{name} example {i}")


def _norm(tensors):
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in tensors))


def test_each_example_is_clipped_to_c(tiny_batches):
    clf, batch, _, _ = tiny_batches
    c = 0.05
    clipper = PerExampleClipper(clf, per_example_losses, clip_norm=c, physical_batch=4)
    assert clipper.sensitivity == c
    for i in range(batch["input_ids"].shape[0]):
        raw = _norm(list(_loop_grads(clf, batch, i).values()))
        clipped = _norm(clipper.clipped_sum(_sub(batch, [i])).grads)
        assert clipped <= c * (1 + 1e-5)
        assert clipped == pytest.approx(min(raw, c), rel=1e-4)


def test_micro_batch_is_clipped_per_layer(tiny_batches):
    clf, batch, _, _ = tiny_batches
    names, params = trainable(clf)
    group_names, groups = layer_groups(names)
    assert "bert.encoder.layer.0" in group_names and "classifier" in group_names
    norms = layer_clip_norms(
        clf, per_example_losses, batch, clip_norm=0.5, param_groups=groups, num_groups=len(group_names)
    )
    assert math.fsum(c * c for c in norms) == pytest.approx(0.25)
    small = [c * 0.1 for c in norms]  # force clipping of every layer
    clipper = MicrobatchClipper(clf, per_example_losses, layer_clip_norms=small, param_groups=groups)
    assert clipper.sensitivity == pytest.approx(2 * 0.05)
    acc = [torch.zeros_like(p) for p in params]
    clipper.add_clipped_(acc, _sub(batch, [0, 1, 2]))
    for g, bound in enumerate(small):
        layer = [a for a, gi in zip(acc, groups) if gi == g]
        assert _norm(layer) <= bound * (1 + 1e-5)
        assert _norm(layer) == pytest.approx(bound, rel=1e-4)  # every layer was above its bound
    assert _norm(acc) <= 0.05 * (1 + 1e-5)


def test_micro_batch_sensitivity_is_2c_whatever_the_occupancy(tiny_batches):
    """The factor belongs to the clipping function: 2 even if every micro-batch held one row (a neighbour
    with one more row can put two in one), never read off the private slot occupancy."""
    clf, *_ = tiny_batches
    names, _ = trainable(clf)
    _, groups = layer_groups(names)
    clipper = MicrobatchClipper(
        clf, per_example_losses, layer_clip_norms=[0.3, 0.4] + [0.0001] * (max(groups) - 1), param_groups=groups
    )
    assert clipper.sensitivity_factor == 2.0 and clipper.sensitivity == pytest.approx(2 * clipper.clip_norm)


def _edp_aggregate(model, batch, slots, k, norms, groups):
    _, params = trainable(model)
    clipper = MicrobatchClipper(model, per_example_losses, layer_clip_norms=norms, param_groups=groups)
    acc = [torch.zeros_like(p) for p in params]
    for members in split_microbatches(np.arange(len(slots)), slots, k):
        if len(members):
            clipper.add_clipped_(acc, _sub(batch, members))
    return acc, clipper.sensitivity


def test_removing_one_example_moves_the_aggregate_by_at_most_the_sensitivity(tiny_batches):
    clf, batch, _, _ = tiny_batches
    n, k = batch["input_ids"].shape[0], 2
    texts = [f"utterance {i}" for i in range(n)]
    labels = batch["labels"].tolist()
    slots = example_slots(texts, labels, k, salt=0)
    names, _ = trainable(clf)
    group_names, groups = layer_groups(names)
    c = 0.2
    norms = layer_clip_norms(
        clf, per_example_losses, batch, clip_norm=c, param_groups=groups, num_groups=len(group_names)
    )
    full, sensitivity = _edp_aggregate(clf, batch, slots, k, norms, groups)
    assert sensitivity == pytest.approx(2 * c)  # worked out: both micro-batch gradients have norm <= C
    dp = PerExampleClipper(clf, per_example_losses, clip_norm=c, physical_batch=4)
    dp_full = dp.clipped_sum(batch).grads
    largest = 0.0
    for x in range(n):
        keep = [i for i in range(n) if i != x]
        # The other examples keep their micro-batch: the rule depends on each example alone.
        np.testing.assert_array_equal(
            example_slots([texts[i] for i in keep], [labels[i] for i in keep], k, salt=0), slots[keep]
        )
        reduced, _ = _edp_aggregate(clf, _sub(batch, keep), slots[keep], k, norms, groups)
        moved = _norm([a - b for a, b in zip(full, reduced)])
        assert moved <= 2 * c * (1 + 1e-5)
        largest = max(largest, moved)
        dp_moved = _norm([a - b for a, b in zip(dp_full, dp.clipped_sum(_sub(batch, keep)).grads)])
        assert dp_moved <= c * (1 + 1e-5)
    assert largest > 0.0


def test_zero_noise_and_infinite_clip_equal_sgd_step_for_step(tiny_batches):
    clf, batch, _, _ = tiny_batches
    n, k = batch["input_ids"].shape[0], 3
    slots = example_slots([str(i) for i in range(n)], None, k, salt=1)
    models = {mode: copy.deepcopy(clf) for mode in ("sgd", "dp-sgd", "edp-sgd")}
    # Plain SGD: Adam would turn float round-off in gradients that are exactly zero in exact arithmetic
    # (e.g. attention key biases) into full-size steps; the optimizer is the same code in every mode.
    optimizers = {mode: torch.optim.SGD(trainable(m)[1], lr=0.5) for mode, m in models.items()}
    for step in range(3):
        idx = [i for i in range(n) if (i + step) % 4 != 0]  # a different batch each step
        sub = _sub(batch, idx)
        for mode, model in models.items():
            names, params = trainable(model)
            if mode == "sgd":
                for p in params:
                    p.grad = None
                per_example_losses(model, sub)[0].sum().backward()
                agg = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
            elif mode == "dp-sgd":
                agg = (
                    PerExampleClipper(model, per_example_losses, clip_norm=math.inf, physical_batch=4)
                    .clipped_sum(sub)
                    .grads
                )
            else:
                _, groups = layer_groups(names)
                agg, _ = _edp_aggregate(model, sub, slots[idx], k, [math.inf] * (max(groups) + 1), groups)
            for p, a in zip(params, agg):
                p.grad = a / 6.0
            optimizers[mode].step()
        reference = dict(models["sgd"].named_parameters())
        for mode in ("dp-sgd", "edp-sgd"):
            for name, p in models[mode].named_parameters():
                torch.testing.assert_close(p, reference[name], atol=2e-5, rtol=1e-4, msg=f"{mode} {name} step {step}")


@pytest.mark.parametrize("task", ["classify", "mlm"])
def test_vectorized_micro_batches_equal_sequential_backward_passes(tiny_batches, task):
    clf, clf_batch, mlm, mlm_batch = tiny_batches
    model, batch = (clf, clf_batch) if task == "classify" else (mlm, mlm_batch)
    names, params = trainable(model)
    group_names, groups = layer_groups(names)
    norms = layer_clip_norms(
        model, per_example_losses, batch, clip_norm=0.3, param_groups=groups, num_groups=len(group_names)
    )
    clipper = MicrobatchClipper(model, per_example_losses, layer_clip_norms=norms, param_groups=groups)
    microbatches = [np.array([0, 3, 5]), np.array([], dtype=np.int64), np.array([1]), np.array([2, 4])]
    sequential = [torch.zeros_like(p) for p in params]
    for members in microbatches:
        if len(members):
            clipper.add_clipped_(sequential, _sub(batch, members))
    vectorized = clipper.clipped_sum(batch, microbatches, chunk_examples=4)  # one padded micro-batch per chunk
    assert vectorized.units == 3
    for name, a, b in zip(names, vectorized.grads, sequential):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)
