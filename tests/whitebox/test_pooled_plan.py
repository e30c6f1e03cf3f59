"""The pooled verdict test (R runs of m canaries) is ONE test planned from the claim, m and R, and it is valid.

:func:`dpaudit.whitebox.plan.planned_pooled` picks, before any score is seen, the order statistics over the R x m
canaries as one game or the Clopper-Pearson points below the claimed curve. Validity: 500 simulated audits per
mechanism of R = 10 runs x 50 coin-flip canaries (numpy; scored with the audit's own all-iterates score), at the
verdict's per-bound significance (0.025 at 95%): the planned test rejects the true mechanism's curve, that is its
bound exceeds the truth, in a share whose one-sided 95% Clopper-Pearson upper limit is at most 5%. Mechanisms: the
Gaussian mechanism (q = 1, one step), the Poisson-subsampled Gaussian of the claim (q = 0.5, 4 steps), and randomized
response more private than that claim (another form: a pure-DP bit whose curve lies above the claim's). Each canary
sits in one run, so the R runs together are f-DP for it as its own run is; the simulation draws the R runs'
canaries independently and pools them.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special
import scipy.stats

from dpaudit.audit import order_stats as ost
from dpaudit.audit.gdp import gdp_epsilon
from dpaudit.claim import Claim
from dpaudit.whitebox.bounds import multi_run_family, points_canaries_needed
from dpaudit.whitebox.layout import CanaryLayout
from dpaudit.whitebox.plan import (
    _plan_size,
    _planned_points_test,
    _simulated_scores,
    planned_order_stats,
    planned_pooled,
)
from dpaudit.whitebox.scores import all_iterates_scores
from tests.audit.test_order_stats import _fixed_point
from tests.claims import poisson_claim

ALPHA = 0.025  # each verdict bound's significance at the verdict's 95%
TRIALS = 500
RUNS, M = 10, 50


GAUSSIAN = poisson_claim(1.0, 1, 1.0, epsilon=gdp_epsilon(1.0, 1e-5))  # mu-GDP with mu = 1
SUBSAMPLED = poisson_claim(0.5, 4, 1.0, epsilon=3.0)


def _scores(claim: Claim, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(coins, scores) of TRIALS audits, each R x M canaries of ``claim``'s mechanism, scored as the audit scores."""
    q, std = claim.per_step()
    n = RUNS * M
    coins = rng.random((TRIALS, n)) < 0.5
    sampled = rng.random((TRIALS, q.size, n)) < q[None, :, None]
    y = (coins[:, None, :] & sampled) + rng.standard_normal((TRIALS, q.size, n)) * std[None, :, None]
    flat = y.transpose(1, 0, 2).reshape(q.size, TRIALS * n)  # every audit's canaries scored in one call
    layout = CanaryLayout(member=np.zeros(TRIALS * n, dtype=bool), unit="example")
    return coins, all_iterates_scores(flat, layout, q, std, claim.clip_norm).reshape(TRIALS, n)


def _randomized_response(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    p = _fixed_point(SUBSAMPLED.curve(1.0))
    epsilon = math.log((1 - p) / p) - 1e-6  # RR through the claim's fixed point: f-DP for the claim's curve
    coins = rng.random((TRIALS, RUNS * M)) < 0.5
    keep = rng.random(coins.shape) < scipy.special.expit(epsilon)
    return coins, np.where(keep, coins, ~coins) * 2.0 - 1.0  # +-1 around the all-iterates center 0


def _exceedances(claim: Claim, coins: np.ndarray, scores: np.ndarray) -> int:
    """Audits whose planned pooled test rejects ``claim``'s own curve (its bound above the truth)."""
    assert planned_pooled(claim, "example", 0, M, RUNS, ALPHA) == "order_stats"
    plan = planned_order_stats(claim, "example", 0, RUNS * M, ALPHA)
    conf = np.abs(scores - plan.center) + 1e-12 * np.random.default_rng(1).random(scores.shape[1])
    top = np.argsort(-conf, axis=1, kind="stable")[:, : plan.r]
    wrong = (np.take_along_axis(scores, top, 1) > plan.center) != np.take_along_axis(coins, top, 1)
    pvalues = ost.pvalue(ost.curve_profile(claim.curve(1.0)), RUNS * M, plan.r, wrong.sum(axis=1))
    return int((pvalues < ALPHA).sum())


def _cp_upper(k: int, n: int, level: float = 0.95) -> float:
    return 1.0 if k == n else float(scipy.stats.beta.ppf(level, k + 1, n - k))


def test_the_pooled_test_exceeds_the_truth_in_at_most_5_percent_of_500_audits():
    rng = np.random.default_rng(20261129)
    counts = {
        "gaussian": _exceedances(GAUSSIAN, *_scores(GAUSSIAN, rng)),
        "subsampled": _exceedances(SUBSAMPLED, *_scores(SUBSAMPLED, rng)),
        "randomized response (more private, another form)": _exceedances(SUBSAMPLED, *_randomized_response(rng)),
    }
    for name, k in counts.items():
        print(f"{name}: {k}/{TRIALS} above the truth (CP 95% upper {_cp_upper(k, TRIALS):.3f})")
    assert all(_cp_upper(k, TRIALS) <= 0.05 for k in counts.values()), counts


def test_the_count_can_fail():
    """Half the claimed noise is rejected in most audits: the count above is not vacuous."""
    rng = np.random.default_rng(7)
    assert _exceedances(SUBSAMPLED, *_scores(poisson_claim(0.5, 4, 0.5, epsilon=3.0), rng)) > TRIALS // 2


def test_the_plan_is_a_function_of_the_claim_m_and_r_and_picks_the_stronger_test():
    first = planned_pooled(SUBSAMPLED, "example", 0, M, RUNS, ALPHA)
    planned_pooled.cache_clear()
    assert planned_pooled(SUBSAMPLED, "example", 0, M, RUNS, ALPHA) == first == "order_stats"
    # the order statistics' planned counts reject a less private scaled claim than the Clopper-Pearson points' do
    order = planned_order_stats(SUBSAMPLED, "example", 0, RUNS * M, ALPHA)
    member, nonmember = _simulated_scores(SUBSAMPLED, "example", 0, _plan_size(SUBSAMPLED))
    half = RUNS * M // 2
    _, points = SUBSAMPLED.best_test([_planned_points_test(member, nonmember, half, half, ALPHA)])
    assert order.scale is not None and points is not None and order.scale < points


def test_the_pooled_points_canaries_needed_is_the_fewest_whose_perfect_attack_rejects_the_claim():
    needed = points_canaries_needed(SUBSAMPLED, confidence=1 - ALPHA)
    assert needed is not None
    fewer = int(round(needed / 2 ** (1 / 4)))  # the grid's previous point
    found, short = (
        multi_run_family(np.ones(n - n // 2), np.zeros(n // 2), SUBSAMPLED, confidence=1 - ALPHA, min_scale=1.0)
        for n in (needed, fewer)
    )
    assert found.scale is not None and found.scale <= 1.0  # the claim itself rejected
    assert short.scale is None or short.scale > 1.0
