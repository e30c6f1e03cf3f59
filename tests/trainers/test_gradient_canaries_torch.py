"""White-box gradient canaries in the torch trainers (Nasr et al. 2023; dpaudit.training.gradient_canaries).

The audit block is a trained tensor no real row touches; audit row r's gradient is ``gain[r] e_j`` on
it, clipped by the trainer's own rule. Measured here on the trainers' own step code:

- noise off: the block's observed clipped sum is the clipped shift of the sampled audit rows (C per
  canary in the per-example modes; in eDP-SGD's micro-batches, a canary of gain +1e6 beside a partner
  of gain -1e3 reads +C, the partner alone -C, and the canary's micro-batch clip factor scales the
  real rows that share it);
- noise off: audit rows leave the real parameters' clipped sum bit for bit as it was (per-example modes);
- noise on: the block's noise std over many coordinates and steps is sigma x sensitivity of
  ``privacy.json`` (a 5% tolerance against a ~0.5% standard error: 10 standard errors);
- both plug-ins implement :class:`~dpaudit.training.gradient_canaries.GradientCanaryHost`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.training.api import load_trainer
from dpaudit.training.gradient_canaries import (
    UNIT_EXAMPLE,
    UNIT_MICROBATCH,
    GradientCanaries,
    GradientCanaryHost,
)

CLIP = 0.5  # not 1: a factor computed against the wrong bound shows
PER_EXAMPLE = {
    "dp-sgd-ghost": ("edp-sgd", {"mode": "dp-sgd", "clip_engine": "ghost"}),
    "dp-sgd-vmap": ("edp-sgd", {"mode": "dp-sgd", "clip_engine": "vmap"}),
    "rgp": ("rgp", {}),
}
MICROBATCH = {
    "edp-sgd-ghost": ("edp-sgd", {"mode": "edp-sgd", "clip_engine": "ghost"}),
    "edp-sgd-vmap": ("edp-sgd", {"mode": "edp-sgd", "clip_engine": "vmap"}),
}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread(one_torch_thread):
    """One torch thread (tests/trainers/conftest.py says why)."""


class _Observed:
    """The audit's sink: every ``observe(step, values)`` call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, np.ndarray]] = []

    def __call__(self, step: int, values: np.ndarray) -> None:
        self.calls.append((step, values))


def _plugin(data_dir: Path, out: Path, name: str, settings: dict, canaries: GradientCanaries, **overrides):
    """The trainer's plug-in hosting ``canaries``, as the white-box harness creates it."""
    trainer = load_trainer(name)
    config = trainer.tiny_config(clip_norm=CLIP, noise_seed=3, **settings, **overrides)
    plugin = trainer.Plugin(data_dir, out, config, seed=5)
    plugin.host_gradient_canaries(canaries)
    return plugin


def _model_part(grads) -> list:
    return [g.detach().clone() for g in grads[:-1]]


def test_both_torch_plugins_are_gradient_canary_hosts(data_dir, tmp_path):
    for name, settings, unit in (
        ("edp-sgd", {"mode": "dp-sgd"}, (UNIT_EXAMPLE, 1)),
        ("edp-sgd", {"mode": "edp-sgd", "micro_batches": 3}, (UNIT_MICROBATCH, 3)),
        ("edp-sgd", {"mode": "sgd", "noise_multiplier": None}, (UNIT_EXAMPLE, 1)),
        ("rgp", {}, (UNIT_EXAMPLE, 1)),
    ):
        trainer = load_trainer(name)
        plugin = trainer.Plugin(data_dir, tmp_path / "out", trainer.tiny_config(**settings), seed=0)
        assert isinstance(plugin, GradientCanaryHost)
        assert plugin.gradient_canary_unit() == unit


def test_micro_batch_clipping_refuses_audit_rows_without_a_slot(data_dir, tmp_path):
    trainer = load_trainer("edp-sgd")
    plugin = trainer.Plugin(data_dir, tmp_path / "out", trainer.tiny_config(micro_batches=4), seed=0)
    with pytest.raises(ValueError, match="slot"):
        plugin.host_gradient_canaries(GradientCanaries(size=1, coordinate=[0], gain=[1.0]))
    with pytest.raises(ValueError, match="slot"):
        plugin.host_gradient_canaries(GradientCanaries(size=1, coordinate=[0], gain=[1.0], slot=[4]))


def test_a_coordinate_s_audit_rows_must_share_one_slot():
    """The micro-batch audit keeps one sum and one micro-batch per coordinate: a split coordinate is refused."""
    with pytest.raises(ValueError, match="coordinate 1 has audit rows in slots \\[0, 2\\]"):
        GradientCanaries(size=3, coordinate=[0, 1, 1, 2], gain=[1.0, 1.0, -1.0, 1.0], slot=[0, 0, 2, 1])


def test_the_micro_batch_block_matches_a_dense_per_micro_batch_table():
    """The O(canaries) block against the straightforward ``[micro-batches x size]`` table it replaced:
    3 groups, 5 micro-batches of which this process gets 4 (in a shuffled order), several canaries per
    micro-batch with partners, micro-batches with and without real rows (engine factors given for the
    former), rows of another process's micro-batch and coordinates without rows (all 0)."""
    import torch

    from dpaudit.trainers.torch_common.canary_block import AuditBlock

    k, size, n = 5, 9, 100
    coordinate = np.array([0, 1, 2, 3, 4, 5, 6, 0, 0, 1, 3, 5, 6])  # 7 canaries (7, 8 unused), then partners
    gain = np.array([1e6, 3.0, 0.0, 1e6, -2.5, 0.7, 1e6, -1e3, -1e3, -1e3, -1e3, -4.0, -0.5])
    slot_of = np.array([1, 1, 3, 2, 1, 4, 0, 0, 0])  # slot 1: canaries 0, 1, 4; slot 4: another process's
    canaries = GradientCanaries(size=size, coordinate=coordinate, gain=gain, slot=slot_of[coordinate])
    block = AuditBlock(canaries, n, groups=3, device=torch.device("cpu"))
    bounds = np.array([0.3, 0.2, 0.1])
    block.clip_microbatches(k, bounds)
    units, engine = [3, 1, 0, 2], np.array([1, 3])  # places 1 and 3 (slots 1 and 2) also hold real rows
    rows = np.array([0, 1, 3, 4, 5, 6, 7, 9, 10, 11])  # sampled: canary 2 (slot 3) and partner 8 are out
    engine_factors = torch.tensor([[0.5, 0.25], [1.0, 0.125], [0.75, 1.0]])

    audit = block.microbatches(rows, units, engine)
    weights = bounds / np.sqrt((bounds**2).sum())
    dense = np.zeros((len(units), size))  # b_s: the summed gains of micro-batch s per coordinate
    for r in rows:
        if canaries.slot[r] in units:
            dense[units.index(canaries.slot[r]), coordinate[r]] += gain[r]
    sq = weights[:, None] ** 2 * (dense**2).sum(1)[None, :]
    np.testing.assert_allclose(audit.sq.numpy(), sq, rtol=1e-6)
    np.testing.assert_allclose(audit.engine_sq().numpy(), sq[:, engine], rtol=1e-6)
    factors = np.minimum(1.0, bounds[:, None] / np.maximum(np.sqrt(sq), 1e-12))
    factors[:, engine] = engine_factors.numpy()
    want = weights[:, None] * (factors @ dense)
    got = audit.clipped(engine_factors)
    assert got.shape == (3, size) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-12)
    assert not got[:, [2, 5, 7, 8]].any()  # not sampled, another process's micro-batch, no rows
    alone = audit.clipped(None)  # no real rows anywhere: every micro-batch clipped by the block alone
    factors = np.minimum(1.0, bounds[:, None] / np.maximum(np.sqrt(sq), 1e-12))
    np.testing.assert_allclose(alone.numpy(), weights[:, None] * (factors @ dense), rtol=1e-6, atol=1e-12)
    # a lone clipped canary (slot 0: canary 6 and its partner 12) projects to C
    np.testing.assert_allclose(block.project(alone)[6], np.sqrt((bounds**2).sum()), rtol=1e-6)
    assert not block.microbatches(rows, [], np.zeros(0, np.int64)).clipped(None).any()  # no micro-batch here


@pytest.mark.parametrize("case", [*PER_EXAMPLE, "sgd"])
def test_per_example_audit_rows_move_the_block_by_their_clipped_gradient_and_nothing_else(case, data_dir, tmp_path):
    """Each audit row is one unit clipped to C (sgd: unclipped); the real rows' sum is unchanged bit for bit."""
    name, settings = PER_EXAMPLE.get(case, ("edp-sgd", {"mode": "sgd", "noise_multiplier": None}))
    gain = np.array([5.0, -3.0, -7.0, 0.25])
    observed = _Observed()
    canaries = GradientCanaries(size=4, coordinate=[0, 1, 1, 2], gain=gain, observe=observed)
    run = _plugin(data_dir, tmp_path / "out", name, settings, canaries)
    run._setup()
    n = run.real_rows
    real = np.arange(0, 40, 3)
    with_audit = np.sort(np.concatenate([real, n + np.arange(4)]))  # audit rows among the real ones' order
    plain, _ = run.aggregate(0, real, sigma=0.0)
    plain = [g.detach().clone() for g in plain]
    both, _ = run.aggregate(0, with_audit, sigma=0.0)
    for a, b in zip(plain[:-1], _model_part(both)):
        assert np.array_equal(a.numpy(), b.numpy())  # the real rows' clipped sum, bit for bit
    assert not plain[-1].any()  # no real row touches the block
    shift = gain if case == "sgd" else gain * np.minimum(1.0, CLIP / np.abs(gain))
    want = np.array([shift[0], shift[1] + shift[2], shift[3], 0.0])
    np.testing.assert_allclose(run.audit.project(both[-1]), want, rtol=1e-6, atol=1e-7)
    run.step(0, with_audit, sigma=0.0, expected_batch=16.0)  # the observation happens in the step
    ((step, values),) = observed.calls
    assert step == 0 and values.dtype == np.float64 and values.shape == (4,)
    np.testing.assert_allclose(values, want, rtol=1e-6, atol=1e-7)


def _clipped_shift(run, indices: np.ndarray) -> tuple[np.ndarray, list]:
    """The block's observed value (noise off) and the model's clipped sum of one aggregate of ``indices``."""
    grads, _ = run.aggregate(0, indices, sigma=0.0)
    return run.audit.project(grads[-1]), _model_part(grads)


@pytest.mark.parametrize("case", MICROBATCH)
def test_a_micro_batch_canary_is_clipped_with_its_micro_batch(case, data_dir, tmp_path):
    """A canary (gain +1e6) and its partner (-1e3) share a coordinate and a slot: with both the block
    reads +C, with the partner alone -C; the canary's clip factor also scales the real rows of its
    micro-batch to ~0 (it is summed with them BEFORE the micro-batch is clipped)."""
    name, settings = MICROBATCH[case]
    canaries = GradientCanaries(size=2, coordinate=[0, 0], gain=[1e6, -1e3], slot=[1, 1])
    run = _plugin(data_dir, tmp_path / "out", name, settings, canaries, micro_batches=4)
    run._setup()
    n, c = run.real_rows, run.clipper.clip_norm
    assert c == pytest.approx(CLIP) and run.audit.param.shape == (len(run.layer_norms), 2)
    real = np.arange(40)
    in_slot, others = real[run.slots[real] == 1], real[run.slots[real] != 1]
    assert len(in_slot) and len(others)
    canary, partner = n + np.array([0]), n + np.array([1])

    # The slot also holds real rows: their group norms are ~1e-3 of the audit gradient's.
    both, model_both = _clipped_shift(run, np.concatenate([real, canary, partner]))
    alone, _ = _clipped_shift(run, np.concatenate([real, partner]))
    np.testing.assert_allclose(both, [c, 0.0], rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(alone, [-c, 0.0], rtol=1e-3, atol=1e-6)
    _, model_others = _clipped_shift(run, others)  # the sum without slot 1's real rows
    _, model_real = _clipped_shift(run, real)
    gap = np.sqrt(sum(float((a - b).double().pow(2).sum()) for a, b in zip(model_both, model_others)))
    slot_part = np.sqrt(sum(float((a - b).double().pow(2).sum()) for a, b in zip(model_real, model_others)))
    assert slot_part > 0.1 * c  # slot 1's real rows alone do move the sum ...
    assert gap < 1e-4 * c  # ... but beside the canary their micro-batch is scaled to ~nothing

    # A slot of audit rows only: exactly the clip norm, up to float32.
    both, model_both = _clipped_shift(run, np.concatenate([others, canary, partner]))
    alone, _ = _clipped_shift(run, np.concatenate([others, partner]))
    np.testing.assert_allclose(both, [c, 0.0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(alone, [-c, 0.0], rtol=1e-5, atol=1e-7)
    for a, b in zip(model_others, model_both):  # other micro-batches' real rows: as without audit rows
        assert np.array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("case", [*PER_EXAMPLE, *MICROBATCH])
def test_the_block_is_noised_with_sigma_times_the_sensitivity_of_privacy_json(case, data_dir, tmp_path):
    """A whole run as the harness drives it: one observation per step; on the 2,996 block coordinates
    no audit row points at, the observed values are pure noise of std sigma x sensitivity."""
    name, settings = {**PER_EXAMPLE, **MICROBATCH}[case]
    size, used = 3000, 4
    observed = _Observed()
    slot = [0, 1, 2, 3] if case in MICROBATCH else None
    canaries = GradientCanaries(
        size=size, coordinate=np.arange(used), gain=np.full(used, 1e3), slot=slot, observe=observed
    )
    out = tmp_path / "out"
    run = (
        _plugin(data_dir, out, name, settings, canaries, micro_batches=4)
        if case in MICROBATCH
        else _plugin(data_dir, out, name, settings, canaries)
    )
    result = run.skeleton.execute()
    record = json.loads((out / "privacy.json").read_text())
    assert record["dataset_size"] == run.real_rows + used  # the audit rows are sampled like the real ones
    assert [s for s, _ in observed.calls] == list(range(result.steps)) and result.steps >= 5
    noise = np.stack([v for _, v in observed.calls])[:, used:]
    want = record["noise_multipliers"][0] * record["sensitivity_factor"] * record["clip_norm"]
    std = float(np.sqrt(np.mean(noise**2)))
    assert abs(std / want - 1.0) < 0.05, (std, want)  # SE 1 / sqrt(2 x ~15,000) ~ 0.6%
    assert abs(float(noise.mean())) < 5 * want / np.sqrt(noise.size)  # nothing but zero-mean noise there
    last = run.canary_parameters()
    assert last.shape == (size,) and last.dtype == np.float64 and np.all(np.isfinite(last)) and np.any(last != 0)
    from safetensors import safe_open

    with safe_open(str(out / "model" / "model.safetensors"), "pt") as exported:  # audit machinery, not the model
        assert not any("canar" in key or "audit" in key for key in exported.keys())
