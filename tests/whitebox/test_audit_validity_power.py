"""The white-box audit's promises, counted over seeded runs.

Validity: a correct DP-SGD trainer's claim is refuted in at most the stated 5% of runs (20 runs per
clipping unit). Power: each deliberately broken trainer (noise at sigma / 2; micro-batch clipping
accounted as sensitivity C; a sampling rate reported at half its true value; noise drawn once and reused at every
step, per-example and micro-batch) is flagged, lower bound above the claimed epsilon, in ONE run, in at least 9 of 10
seeds; noise at 0.8 sigma in at least 8 of 10. The trainer is the numpy one of
:mod:`tests.whitebox.linear_audit` (real skeleton, real accounting, real secret sampling; microseconds
per step), so the counts cost seconds.

Counts with the planned pooled test and the refined scale search (``pytest -s tests/whitebox/test_audit_validity_power.py``
prints them; load 9-16): a correct trainer 2 alarms in 20 runs in each layout (the same seeds as before); noise at
sigma / 2, the sampling rate at half, 2C accounted as C, noise reused (per-example and micro-batch) and noise at
0.8 sigma each flagged in 10 of 10 seeds.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from dpaudit.whitebox.analysis import analyse
from dpaudit.whitebox.harness import run_with_canaries
from tests.whitebox.linear_audit import (
    HalfSamplingRate,
    LinearAuditPlugin,
    MicrobatchAccountedAsC,
    NoiseEightTenths,
    NoiseHalf,
    NoiseReused,
)

#: (canaries, micro-batches, expected batch, steps) of each layout: per-example clipping, and eDP-SGD
#: with one canary per micro-batch (each with 16 partners).
PER_EXAMPLE = dict(canaries=4000, microbatches=0, batch=512, steps=20)
MICROBATCH = dict(canaries=4096, microbatches=4096, batch=16384, steps=20)
CLAIM = 2.0


def _audit(plugin_cls, layout: dict, seed: int, tmp_path):
    settings = dict(layout)
    m = settings.pop("canaries")
    evidence = run_with_canaries(
        lambda out: plugin_cls(target_epsilon=CLAIM, noise_seed=10_000 + seed, **settings),
        tmp_path / f"run-{seed}",
        canaries=m,
        partners=16,
        rng=np.random.default_rng(seed),
    )
    return analyse([evidence], confidence=0.95, full=False)


@pytest.mark.parametrize(
    "layout",
    [PER_EXAMPLE, dict(MICROBATCH, canaries=1024, microbatches=1024, batch=4096)],
    ids=["per-example", "micro-batch"],
)
def test_a_correct_trainer_is_refuted_in_at_most_5_percent_of_20_runs(layout, tmp_path):
    results = [_audit(LinearAuditPlugin, layout, seed, tmp_path) for seed in range(20)]
    claims = {round(a.claim.epsilon, 6) for a in results}
    assert len(claims) == 1 and abs(claims.pop() - CLAIM) < 0.01  # the claim never depends on the coins
    refuted = sum(a.alarm for a in results)
    print(f"correct trainer, {len(results)} runs: {refuted} alarms")  # pytest -s prints the count measured
    # At most 5% in expectation: a count of 20 that the one-sided 99% Clopper-Pearson interval places above 5% fails
    # (5 or more). Measured: seeds 0-59 (per-example) 2 alarms, 0-69 (micro-batch) 2, both in seeds 0-19; the ideal
    # mechanism through the same analysis: 1 of 60.
    assert scipy.stats.beta.ppf(0.01, refuted, 20 - refuted + 1) <= 0.05 if refuted else True, [
        round(a.primary[1].epsilon, 3) for a in results
    ]
    # ... and the audit is not vacuous: a correct trainer's bound is a real fraction of its claim.
    assert np.median([a.primary[1].epsilon for a in results]) > 0.25 * CLAIM


@pytest.mark.parametrize(
    "broken, layout",
    [
        (NoiseHalf, PER_EXAMPLE),
        (HalfSamplingRate, PER_EXAMPLE),
        (MicrobatchAccountedAsC, MICROBATCH),
        (NoiseReused, PER_EXAMPLE),
        (NoiseReused, MICROBATCH),
    ],
    ids=[
        "noise-at-half-sigma",
        "sampling-rate-reported-at-half",
        "2C-accounted-as-C",
        "noise-reused-every-step",
        "noise-reused-every-step-micro-batch",
    ],
)
def test_a_broken_trainer_is_flagged_in_one_run_in_9_of_10_seeds(broken, layout, tmp_path):
    results = [_audit(broken, layout, seed, tmp_path) for seed in range(10)]
    flagged = [a.alarm for a in results]
    print(f"{broken.__name__}: flagged in {sum(flagged)} of {len(results)} seeds")
    assert sum(flagged) >= 9, [round(a.primary[1].epsilon, 3) for a in results]


#: The layout where one-run audits are tightest: q near 1, few steps (10,000 canaries, q = 0.9, 4 steps).
TIGHT = dict(canaries=10_000, microbatches=0, batch=9058, steps=4)


def test_noise_at_eight_tenths_of_sigma_is_flagged_in_one_run_in_8_of_10_seeds(tmp_path):
    """A subtler fault (true epsilon about 1.3 x the claim): the all-iterates one-run verdict (order statistics, its
    released count planned from the claim) flags it on the tight layout (measured: 10 of 10; the correct trainer on
    the same layout: 0 of 10, bound 0.76-0.98 of the claim)."""
    results = [_audit(NoiseEightTenths, TIGHT, seed, tmp_path) for seed in range(10)]
    print(f"NoiseEightTenths: flagged in {sum(a.alarm for a in results)} of {len(results)} seeds")
    assert sum(a.alarm for a in results) >= 8, [round(a.primary[1].epsilon, 3) for a in results]
