"""The one-backward ghost clipper equals the vmap clippers; devices; gradient-SNR telemetry."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.edp_sgd.trainer import _Plugin
from dpaudit.trainers.torch_common import distributed, noise
from dpaudit.trainers.torch_common.clipping.ghost import GhostClipper, UnsupportedModel
from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper, trainable
from dpaudit.trainers.torch_common.model import layer_groups, per_example_losses
from tests.trainers.edp_sgd.ghost_oracle import MICROBATCHES, microbatch_sums
from tests.trainers.edp_sgd.ghost_oracle import max_error as _max_error

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("task", ["classify", "mlm"])
@pytest.mark.parametrize("clip", [1e-3, 1e6])  # every example clipped / none clipped
def test_ghost_per_example_sum_equals_vmap(tiny_batches, task, clip):
    clf, clf_batch, mlm, mlm_batch = tiny_batches
    model, batch = (clf, clf_batch) if task == "classify" else (mlm, mlm_batch)  # mlm: decoder tied to embeddings
    _, params = trainable(model)
    want = PerExampleClipper(model, per_example_losses, clip_norm=clip, physical_batch=6).clipped_sum(batch)
    ghost = GhostClipper(model, per_example_losses, bounds=[clip], param_groups=[0] * len(params))
    got = ghost.clipped_sum(batch, np.arange(6), 6)
    assert _max_error(got.grads, want.grads) < 1e-5
    assert float(got.loss_sum) == pytest.approx(float(want.loss_sum), rel=1e-6)
    assert int(got.clipped) == int(want.clipped) == (6 if clip < 1 else 0)


@pytest.mark.parametrize("task", ["classify", "mlm"])
@pytest.mark.parametrize("scale", [1e-3, 1e6])
@pytest.mark.parametrize("form", ["auto", "gram", "direct"])  # forced: every Linear one way
def test_ghost_per_layer_microbatch_sum_equals_vmap(tiny_batches, task, scale, form, monkeypatch):
    """Also with every Linear and Embedding through the batched Gram norms, or every Linear through
    kept unit gradients whose weighted sum is the clipped sum (the direct form, large micro-batches)
    and every Embedding through its units' gradient tables."""
    from dpaudit.trainers.torch_common.clipping import ghost as ghost_module

    gram = form == "gram"
    if form != "auto":  # the tiny model's layers are too narrow for the Gram form to be the cheaper one
        monkeypatch.setattr(ghost_module, "_gram_is_cheaper", lambda rows, d, p: gram)
        # Embeddings too: the Gram form with the id-equality mask, or the units' gradient tables
        monkeypatch.setattr(ghost_module, "_embedding_gram_is_cheaper", lambda rows, vocab: gram)
    kept = []
    linear_sq = ghost_module._Units.linear_sq

    def counting_linear_sq(self, *args):
        out = linear_sq(self, *args)
        kept.append(len(self.kept))
        return out

    monkeypatch.setattr(ghost_module._Units, "linear_sq", counting_linear_sq)
    tables = []
    embedding_sq = ghost_module._Units.embedding_sq
    monkeypatch.setattr(
        ghost_module._Units, "embedding_sq", lambda self, *args: tables.append(args[-1]) or embedding_sq(self, *args)
    )
    ran = []
    gram_norms = ghost_module._Units.gram_norms
    monkeypatch.setattr(
        ghost_module._Units,
        "gram_norms",
        lambda self, entries, r, seq: ran.append(entries) or gram_norms(self, entries, r, seq),
    )
    clf, clf_batch, mlm, mlm_batch = tiny_batches
    model, batch = (clf, clf_batch) if task == "classify" else (mlm, mlm_batch)
    names, _ = trainable(model)
    group_names, groups = layer_groups(names)
    bounds = [scale * (i + 1) / 10 for i in range(len(group_names))]  # a different C_l per layer
    got, want = microbatch_sums(model, batch, bounds, groups)
    assert _max_error(got.grads, want.grads) < 1e-5
    assert int(got.clipped) == int(want.clipped)
    if gram:  # forced: all 2 layers x 6 Linear and the 3 Embeddings of the token rows in one batched call
        assert [is_embedding for _, is_embedding, *_ in ran[0]].count(False) == 12
        assert [is_embedding for _, is_embedding, *_ in ran[0]].count(True) == 3 and not tables
    if form == "direct":  # the word, position and token-type tables
        assert len(tables) == 3
    if form == "direct":  # every Linear weight kept its unit gradients (2 layers x 6, pooler, head)
        assert kept[-1] == 14  # classify: + pooler and classifier; mlm: + transform and tied decoder


@pytest.mark.parametrize("task", ["classify", "mlm"])
def test_ghost_in_chunks_is_the_one_pass_clipped_sum(tiny_batches, task):
    """--ghost-chunk: whole units per forward and backward pass, summed, is the one-pass sum (gradients, loss, clipped
    count, clip factors), per example and per micro-batch (unequal, interleaved ones with a white-box block's extra
    norms; a unit larger than the chunk runs alone)."""
    clf, clf_batch, mlm, mlm_batch = tiny_batches
    model, batch = (clf, clf_batch) if task == "classify" else (mlm, mlm_batch)
    names, _ = trainable(model)
    group_names, groups = layer_groups(names)
    bounds = [0.02 * (i + 1) for i in range(len(group_names))]  # a different C_l per layer
    ghost = GhostClipper(model, per_example_losses, bounds=bounds, param_groups=groups)
    owner = np.zeros(6, dtype=np.int64)
    for unit, members in enumerate(MICROBATCHES):
        owner[members] = unit
    extra = torch.rand(len(bounds), len(MICROBATCHES), generator=torch.Generator().manual_seed(0)) * 1e-3
    for own, units, extra_sq in ((np.arange(6), 6, None), (owner, len(MICROBATCHES), extra)):
        whole = ghost.clipped_sum(batch, own, units, extra_sq=extra_sq)
        assert float(whole.factors.min()) < 1.0  # the factors the chunks must reproduce are not all 1
        for chunk in (1, 2, 4):
            got = ghost.clipped_sum(batch, own, units, extra_sq=extra_sq, chunk=chunk)
            assert _max_error(got.grads, whole.grads) < 1e-5
            assert float(got.loss_sum) == pytest.approx(float(whole.loss_sum), rel=1e-6)
            assert (int(got.clipped), got.units) == (int(whole.clipped), units)
            assert torch.allclose(got.factors, whole.factors, rtol=1e-5, atol=1e-7)


def test_the_pass_estimate_counts_each_modules_input_output_and_output_gradient():
    """An Embedding's input is one id; a Linear's its input width; a norm's input, output and gradient are its width."""
    from dpaudit.trainers.torch_common.pass_size import PASS_BYTES, pass_budget, row_floats

    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    model[0].weight.requires_grad_(False)  # frozen modules hold their rows too (the backward runs through them)
    assert row_floats(model) == (1 + 2 * 4) + (4 + 2 * 3) + 3 * 3
    assert pass_budget(torch.device("cpu")) == pass_budget(None) == PASS_BYTES  # a GPU's is a share of its memory
    if torch.cuda.is_available():
        assert pass_budget(torch.device("cuda")) >= PASS_BYTES


def test_without_ghost_chunk_a_batch_over_the_pass_budget_runs_in_passes(tiny_batches, monkeypatch):
    """--ghost-chunk not given: passes of the most examples whose estimated activations stay within PASS_BYTES (the
    estimate grows with the examples and with the length), summed to the one-pass sum."""
    from dpaudit.trainers.torch_common import pass_size

    _, _, mlm, batch = tiny_batches
    _, params = trainable(mlm)
    ghost = GhostClipper(mlm, per_example_losses, bounds=[0.05], param_groups=[0] * len(params))
    length = int(batch["input_ids"].shape[1])
    one = ghost.pass_size.bytes(1, length)
    assert ghost.pass_size.bytes(4, length) == 4 * one and ghost.pass_size.bytes(1, 2 * length) == 2 * one
    assert ghost.pass_size.examples(length) >= 6  # the tiny model's batch fits the default budget: one pass
    whole = ghost.clipped_sum(batch, np.arange(6), 6, chunk=6)
    passes = []
    once = GhostClipper._clipped_sum_once
    monkeypatch.setattr(
        GhostClipper,
        "_clipped_sum_once",
        lambda self, part, *a, **k: passes.append(len(part["input_ids"])) or once(self, part, *a, **k),
    )
    monkeypatch.setattr(pass_size, "PASS_BYTES", 2 * one + 1)
    got = ghost.clipped_sum(batch, np.arange(6), 6)
    assert passes == [2, 2, 2]
    assert _max_error(got.grads, whole.grads) < 1e-5
    assert float(got.loss_sum) == pytest.approx(float(whole.loss_sum), rel=1e-6)
    monkeypatch.setattr(pass_size, "PASS_BYTES", one // 2)  # under one example's estimate: one at a time
    assert ghost.pass_size.examples(length) == 1


@pytest.mark.parametrize("task", ["classify", "mlm", "clm"])
def test_the_non_private_sum_in_passes_is_the_one_pass_sum(data_dir, tmp_path, edp_config, task, monkeypatch):
    """--mode sgd: a batch over the pass estimate's bound runs in passes whose gradients accumulate to the one-pass
    gradient sum (loss and correct counts too)."""
    from dpaudit.trainers.torch_common import pass_size

    run = _Plugin(data_dir, tmp_path / "out", edp_config(mode="sgd", task=task), seed=0)
    run._setup()
    from dpaudit.trainers.edp_sgd import trainer as trainer_module

    sizes = []
    losses = trainer_module.per_example_losses
    monkeypatch.setattr(
        trainer_module,
        "per_example_losses",
        lambda model, part: sizes.append(len(part["input_ids"])) or losses(model, part),
    )
    whole, whole_stats = run.aggregate(2, np.arange(12))
    assert sizes == [12]
    monkeypatch.setattr(pass_size, "PASS_BYTES", 1)  # under one example's estimate: passes of one
    sizes.clear()
    parts, part_stats = run.aggregate(2, np.arange(12))
    assert sizes == [1] * 12
    assert _max_error(parts, whole) < 1e-5
    assert torch.allclose(part_stats[:2], whole_stats[:2], rtol=1e-6)


@pytest.mark.parametrize("mode", ["dp-sgd", "edp-sgd"])
def test_the_trainer_passes_ghost_chunk_and_its_step_is_the_same(data_dir, tmp_path, edp_config, mode, monkeypatch):
    """--ghost-chunk reaches the ghost engine from both modes' steps, and the step it takes (clipped sum and noise)
    is the one-pass step's."""
    chunks = []
    clipped_sum = GhostClipper.clipped_sum
    monkeypatch.setattr(
        GhostClipper, "clipped_sum", lambda self, *a, **k: chunks.append(k.get("chunk")) or clipped_sum(self, *a, **k)
    )
    steps = []
    for chunk in (None, 3):
        run = _Plugin(data_dir, tmp_path / f"out-{chunk}", edp_config(mode=mode, ghost_chunk=chunk), seed=0)
        run._setup()
        steps.append(run.aggregate(2, np.arange(12))[0])
    assert chunks == [None, 3]
    assert _max_error(steps[1], steps[0]) < 1e-5
    for where in ({"mode": "sgd"}, {"mode": mode, "clip_engine": "vmap"}):  # no ghost pass: refused, not ignored
        with pytest.raises(ValueError, match="--ghost-chunk applies to the ghost engine"):
            edp_config(**where, ghost_chunk=3)


def test_a_layer_outside_linear_layernorm_embedding_is_refused():
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.gain = torch.nn.Parameter(torch.ones(2))  # a parameter no supported module owns

        def forward(self, x):
            return self.lin(x) * self.gain

    with pytest.raises(UnsupportedModel, match="gain"):
        GhostClipper(Scaled(), per_example_losses, bounds=[1.0], param_groups=[0, 0, 0])


def test_device_cuda_without_a_gpu_is_a_user_error_and_auto_picks_what_exists():
    assert distributed.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert distributed.resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(UserInputError, match="--device cuda"):
            distributed.resolve_device("cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_grad_snr_is_the_clipped_sum_norm_over_the_noise_norm(data_dir, tmp_path, edp_config, device):
    """dp-sgd on ONE example clipped to C: the clipped sum has norm exactly C; the noise is sigma C z with
    z the step's keyed standard normal draw, so SNR = 1 / (sigma ||z||) ~ 1 / (sigma sqrt(D))."""
    sigma, clip = 0.7, 1e-4  # C so small that the example is certainly clipped
    run = _Plugin(
        data_dir,
        tmp_path / "out",
        edp_config(mode="dp-sgd", noise_multiplier=sigma, clip_norm=clip, device=device),
        seed=0,
    )
    run._setup()
    step = 3
    grads, stats = run.aggregate(step, np.array([5]))
    z = noise.gaussian_sum(run.params, [(1.0, (step,))], run.noise_source.seed)
    z_norm = math.sqrt(sum(float(t.double().pow(2).sum()) for t in z))
    dim = sum(p.numel() for p in run.params)
    values = stats.cpu().tolist()
    assert values[2:4] == [1.0, 1.0]  # one unit, clipped
    assert values[4] == pytest.approx(clip, rel=1e-4)
    assert values[5] == pytest.approx(sigma * clip * z_norm, rel=1e-5)
    row = run._telemetry({"batch_size": 1, "sigma": sigma, "learning_rate": 1e-3}, values)
    assert row["grad_snr"] == pytest.approx(1.0 / (sigma * z_norm), rel=1e-4)
    assert row["grad_snr"] == pytest.approx(1.0 / (sigma * math.sqrt(dim)), rel=5 / math.sqrt(2 * dim))
    assert all(g.device.type == device for g in grads)


def test_metrics_rows_carry_grad_snr_at_every_step(data_dir, tmp_path, edp_config):
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    out = tmp_path / "run"
    result = EdpSgdTrainer().train(data_dir, out, edp_config(mode="edp-sgd", epochs=1, log_every=4), seed=0)

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == result.steps
    assert all(r["grad_snr"] is not None and r["grad_snr"] >= 0 for r in steps)
    assert all(r["grad_snr"] == pytest.approx(r["clipped_sum_norm"] / r["noise_norm"]) for r in steps)


def test_batched_gram_norms_equal_each_units_gradient_norm(monkeypatch):
    """_Units.gram_norms against ||x_u^T g_u||_F^2 and the embedding gradient norm, unit by unit: units
    of 0, 1 and many rows, padding rows (zero output gradient), inputs shared by several captures
    (as q, k and v share theirs), two feature widths and repeated ids; and the embedding norms from
    the units' gradient tables (the form for large units) equal the Gram form's."""
    from dpaudit.trainers.torch_common.clipping import ghost as ghost_module
    from dpaudit.trainers.torch_common.clipping.ghost import _Units

    gen = torch.Generator().manual_seed(0)
    r, owner = 6, [0, 0, 2, 3, 3, 3, 0]  # unit 1 holds no example
    valid = torch.rand(len(owner), r, generator=gen) < 0.7
    valid[2] = False
    valid[2, 0] = True  # unit 2: exactly one real row
    n = len(owner) * r
    x_shared, x_wide = (
        torch.randn(n, 5, generator=gen, dtype=torch.float64),
        torch.randn(n, 9, generator=gen, dtype=torch.float64),
    )
    gs = [torch.randn(n, w, generator=gen, dtype=torch.float64) * valid.reshape(-1, 1) for w in (5, 4, 9, 5)]
    ids = torch.randint(0, 3, (n,), generator=gen)
    entries = [
        (0, False, x_shared, gs[0]),
        (1, False, x_shared, gs[1]),
        (2, False, x_wide, gs[2]),
        (3, True, ids, gs[3]),
    ]
    units = _Units(torch.tensor(owner), 4, valid, group=None, device=torch.device("cpu"))
    got, bias = units.gram_norms(entries, r, True)
    assert sorted(bias) == [0, 1, 2]  # a bias norm for each Linear capture
    row_unit = torch.tensor(owner).repeat_interleave(r)
    for j, is_emb, x, g in entries:
        want, want_bias = [], []
        for u in range(4):
            rows = (row_unit == u) & valid.reshape(-1)
            grad = (
                torch.zeros(3, g.shape[1], dtype=g.dtype).index_add_(0, x[rows], g[rows])
                if is_emb
                else x[rows].T @ g[rows]
            )
            want.append(float(grad.pow(2).sum()))
            want_bias.append(float(g[rows].sum(0).pow(2).sum()))  # a bias gradient: the sum of the rows
        assert got[j].tolist() == pytest.approx(want, rel=1e-9, abs=1e-12)
        if not is_emb:
            assert bias[j].tolist() == pytest.approx(want_bias, rel=1e-9, abs=1e-12)
    assert got[0][1] == 0.0 and got[0][2] > 0.0
    for keep_bytes in (1 << 29, 1):  # one table for all units, or one unit per slice
        monkeypatch.setattr(ghost_module, "_KEEP_BYTES", keep_bytes)
        direct = units.embedding_sq(r, True, ids, gs[3], 3)
        assert direct.tolist() == pytest.approx(got[3].tolist(), rel=1e-9, abs=1e-12)


def test_a_process_whose_micro_batches_are_all_empty_adds_zeros(data_dir, tmp_path, edp_config):
    """With k micro-batches spread over processes a process can hold only empty ones while the batch is
    not empty: the ghost clipper then gets no rows and returns zeros and no units."""
    run = _Plugin(data_dir, tmp_path / "out", edp_config(mode="edp-sgd"), seed=0)
    run._setup()
    assert run.ghost is not None
    cpu = run._batch("train", np.arange(4), generator=None)
    result = run._ghost_sum(cpu, run._on_device(cpu), [np.zeros(0, np.int64)] * 2)
    assert result.units == 0 and float(result.loss_sum) == 0.0 and float(result.clipped) == 0.0
    assert all(torch.count_nonzero(g) == 0 and g.shape == p.shape for g, p in zip(result.grads, run.params))
