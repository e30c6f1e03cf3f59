"""jax-bert hosts white-box gradient canaries (dpaudit.training.gradient_canaries; Nasr et al. 2023).

A Dirac canary's gradient is ``gain * e_c`` on the audit block: after per-example clipping it moves its
coordinate by exactly C (its gain when below C) and nothing else, the block's noise has the std of every
other trained coordinate (sigma x sensitivity), and audit rows leave the real rows' clipped sum as it
was. Every check runs the plug-in's own step (its batch packing, masking and jitted engine), both clip
engines, with audit rows in any chunk and micro-step, data parallel and not.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from dpaudit.training import RunSkeleton
from dpaudit.training.api import load_trainer
from dpaudit.training.gradient_canaries import UNIT_EXAMPLE, GradientCanaries, GradientCanaryHost, canary_host

CLIP, SIGMA = 3.0, 0.7  # noise std sigma * C = 2.1: neither sigma nor C alone
SIZE = 512  # block coordinates; the canary-free ones sample the block's noise
COORDINATE = [1, 3, 2, 0]
GAIN = [1e3, -1e3, 0.5, 1e3]  # clipped to +C, clipped to -C, below C (kept), never sampled in the noise-off steps


def _config(**overrides):
    """The tiny config every test here shares (one compilation per engine and mesh)."""
    return load_trainer("jax-bert").tiny_config(clip_norm=CLIP, noise_multiplier=SIGMA, noise_seed=3, **overrides)


def _canaries(seen: list[tuple[int, np.ndarray]]) -> GradientCanaries:
    return GradientCanaries(
        size=SIZE,
        coordinate=np.array(COORDINATE),
        gain=np.array(GAIN),
        observe=lambda step, values: seen.append((step, values)),
    )


def _audited_plugin(data_dir: Path, out: Path, seen: list, **overrides):
    """A jax-bert plug-in hosting the canaries, as the white-box harness creates it."""
    plugin = load_trainer("jax-bert").Plugin(data_dir, out, _config(**overrides), seed=0)
    canary_host(plugin).host_gradient_canaries(_canaries(seen))
    return plugin


@pytest.fixture(scope="module", params=[("ghost", True), ("vmap", False)], ids=["ghost-data-parallel", "vmap"])
def noise_off(request, data_dir, tmp_path_factory):
    """A set-up plug-in per engine (ghost on the 2-device mesh, vmap on one device) and the block's
    observations of three steps run with sigma = 0: audit rows 0-2 after all N real rows (overflow
    chunks), alone (a micro-step without real rows), and sharing a micro-step with 5 real rows."""
    engine, parallel = request.param
    seen: list[tuple[int, np.ndarray]] = []
    plugin = _audited_plugin(
        data_dir, tmp_path_factory.mktemp("noise-off") / "out", seen, clip_engine=engine, data_parallel=parallel
    )
    plugin._setup()
    n = plugin.real_size
    audit = n + np.arange(3)
    batches = [np.r_[np.arange(n), audit], audit, np.r_[np.arange(5), audit]]
    for step, indices in enumerate(batches):
        plugin.skeleton.step_fn(step, indices.astype(np.int64), 0.0, 16.0)
    return plugin, batches, seen


def test_plugin_is_a_gradient_canary_host_clipping_each_example(data_dir, tmp_path):
    plugin = load_trainer("jax-bert").Plugin(data_dir, tmp_path / "out", _config(), seed=0)
    assert isinstance(plugin, GradientCanaryHost)
    assert plugin.gradient_canary_unit() == (UNIT_EXAMPLE, 1)


def test_hosting_refuses_non_private_runs_overflowing_gains_and_late_calls(data_dir, tmp_path):
    trainer = load_trainer("jax-bert")
    non_private = trainer.Plugin(
        data_dir, tmp_path / "a", trainer.tiny_config(non_private=True, noise_multiplier=None), seed=0
    )
    with pytest.raises(ValueError, match="non-private"):
        non_private.host_gradient_canaries(_canaries([]))
    plugin = trainer.Plugin(data_dir, tmp_path / "b", _config(), seed=0)
    for gain in (2.0**64, np.inf):  # its float32 square overflows: clipping would add 0, not C
        with pytest.raises(ValueError, match="gain"):
            plugin.host_gradient_canaries(GradientCanaries(size=1, coordinate=[0], gain=[gain]))
    plugin.host_gradient_canaries(GradientCanaries(size=1, coordinate=[0], gain=[1.8e19]))
    with pytest.raises(RuntimeError, match="once"):
        plugin.host_gradient_canaries(_canaries([]))


def test_load_data_appends_the_audit_rows_to_the_real_rows(noise_off):
    plugin, _, _ = noise_off
    assert plugin.real_size == 96 and plugin.plan.dataset_size == 96 + len(GAIN)


def test_noise_off_a_sampled_canary_moves_its_coordinate_by_exactly_c(noise_off):
    """Each step's observation is the block's clipped sum exactly: +C and -C for gains of +-1e3, the
    gain itself below C, 0 for the unsampled canary's coordinate and every coordinate without one."""
    _, batches, seen = noise_off
    want = np.zeros(SIZE)
    want[[1, 3, 2]] = [CLIP, -CLIP, 0.5]
    assert [step for step, _ in seen] == list(range(len(batches)))
    for _, values in seen:
        assert values.dtype == np.float64 and values.shape == (SIZE,)
        np.testing.assert_array_equal(values, want)


def test_audit_rows_leave_the_real_clipped_sum_unchanged(noise_off):
    """The same real rows with and without audit rows (which take the slots after them, here in an
    overflow chunk): the model's clipped sum and stats are bit-identical; the block gets only the canaries."""
    plugin, batches, _ = noise_off
    engine = plugin.fns.step
    real, with_audit = np.arange(plugin.real_size), batches[0]
    plain_sum, plain_stats = engine._clipped_sums(plugin.params, plugin._chunks(0, real))
    chunks, audit_rows = plugin._audit_chunks(0, with_audit)
    assert len(chunks) > 1 and sum(float(np.sum(rows.mask)) for rows in audit_rows) == 3
    audit_sum, audit_stats = engine._clipped_sums(plugin.params, chunks)
    for a, b in zip(jax.tree.leaves(plain_sum), jax.tree.leaves(audit_sum), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(plain_stats, audit_stats, strict=True):
        assert float(a) == float(b)
    assert float(audit_stats.batch_size) == plugin.real_size  # audit slots are not real examples


def _block_noise(seen: list[tuple[int, np.ndarray]]) -> np.ndarray:
    """The observed block values on the coordinates no canary owns: noise alone."""
    free = np.setdiff1d(np.arange(SIZE), COORDINATE)
    return np.concatenate([values[free] for _, values in seen])


def test_noise_on_the_block_noise_std_is_sigma_times_c_and_runs_end_to_end(data_dir, tmp_path):
    """A whole run on the plug-in's execute(): one observation per step, noise of std sigma * C on the
    block (3048 draws: the 8% tolerance is over 6 standard errors; sigma or C alone is 67% or 43% off),
    and a model export without the block."""
    seen: list[tuple[int, np.ndarray]] = []
    plugin = _audited_plugin(data_dir, tmp_path / "out", seen)
    result = plugin.execute()
    assert result.steps == 6 and [step for step, _ in seen] == list(range(6))
    noise = _block_noise(seen)
    assert noise.size == 6 * (SIZE - len(COORDINATE))
    assert abs(np.std(noise) / (SIGMA * CLIP) - 1.0) < 0.08
    assert abs(np.mean(noise)) < 5 * SIGMA * CLIP / np.sqrt(noise.size)
    block = plugin.canary_parameters()
    assert block.dtype == np.float64 and block.shape == (SIZE,) and np.all(np.isfinite(block)) and np.any(block != 0)
    exported = load_file(str(tmp_path / "out" / "model" / "model.safetensors"))
    assert sum(v.size for v in exported.values()) == sum(int(np.size(x)) for x in jax.tree.leaves(plugin.params))


def test_a_skeleton_of_the_harness_runs_the_plugin_as_its_own_execute_does(data_dir, tmp_path):
    """``RunSkeleton(plugin, out).execute()`` (the harness's path) gives the same observations and block
    as ``plugin.execute()`` (same seeds: same sampling, noise and updates)."""
    runs = []
    for name in ("own", "harness"):
        seen: list[tuple[int, np.ndarray]] = []
        plugin = _audited_plugin(data_dir, tmp_path / name, seen)
        (plugin if name == "own" else RunSkeleton(plugin, tmp_path / name)).execute()
        runs.append((np.stack([values for _, values in seen]), plugin.canary_parameters()))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])
