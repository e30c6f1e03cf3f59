"""The ceilings and the canaries a perfect attack needs of Steinke et al.'s bound, its f-DP (mu-GDP) reading and the
Clopper-Pearson (epsilon, delta) bound (:mod:`dpaudit.audit.one_run`, :mod:`dpaudit.audit.bounds`).

Synthetic numbers only. For each bound: (a) its ceiling is the bound's own function on a perfect outcome (every member
scored 1, every non-member 0: every canary guessed, every guess right), and a perfect attack with distinct scores
proves no more; (b) the canaries needed, m*, is the first grid point (2^(k/4)) whose perfect attack rejects the claim:
it does at m*, and no smaller grid point does (the search walks the grid up, so this is what it guarantees, for
Steinke's bound too, whose perfect attack is not monotone in m); (c) m* does not fall as the claim grows.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.special

from dpaudit.audit.bounds import (
    clopper_pearson_canaries_needed,
    clopper_pearson_ceiling,
    epsilon_lower_bound_clopper_pearson,
)
from dpaudit.audit.gdp import gdp_epsilon
from dpaudit.audit.one_run import (
    _fdp_mu,
    _steinke_epsilon,
    _steinke_pvalue,
    epsilon_lower_bound_one_run,
    epsilon_lower_bound_one_run_fdp,
    fdp_canaries_needed,
    fdp_ceiling,
    steinke_canaries_needed,
    steinke_ceiling,
)
from dpaudit.audit.order_stats import MOST_CANARIES, fewest_on_grid
from dpaudit.audit.thresholds import BonferroniThresholds, GuessGrid

DELTA = 1e-5
LEVEL = 0.975  # each white-box bound's confidence


def _grid_below(n: int) -> list[int]:
    """The search grid's points below n (fewest_on_grid's grid from 2)."""
    return [g for g in sorted({int(round(2 ** (k / 4))) for k in range(4, int(4 * math.log2(n)) + 1)}) if g < n]


def _perfect(m: int, *, distinct: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A perfect attack on m canaries, half members: every member above every non-member (at two values, or
    ``distinct`` scores)."""
    members, nonmembers = m - m // 2, m // 2
    if distinct:
        return 1.0 + np.arange(members), -np.arange(nonmembers, dtype=float)
    return np.ones(members), np.zeros(nonmembers)


def test_steinkes_ceiling_is_its_bound_on_a_perfect_outcome_and_needs_the_fewest_grid_canaries():
    m = 2000
    ceiling = steinke_ceiling(m - m // 2, m // 2, delta=DELTA, confidence=LEVEL)
    each = (1 - LEVEL) / len(GuessGrid().resolve(m))
    assert ceiling == _steinke_epsilon(m, m, m, DELTA, each)  # all m guessed, all right, at the grid's Bonferroni share
    distinct = epsilon_lower_bound_one_run(*_perfect(m, distinct=True), delta=DELTA, confidence=LEVEL)
    assert distinct.correct == distinct.guesses and distinct.epsilon <= ceiling  # the tied outcome is the strongest
    for claim in (1.0, 2.0, 4.0):
        needed = steinke_canaries_needed(claim, delta=DELTA, confidence=LEVEL)
        assert needed is not None
        at = epsilon_lower_bound_one_run(*_perfect(needed), delta=DELTA, confidence=LEVEL).epsilon
        assert at > claim, (claim, needed, at)
        assert all(
            steinke_ceiling(n - n // 2, n // 2, delta=DELTA, confidence=LEVEL) <= claim for n in _grid_below(needed)
        )
    # not monotone in m: the delta term 2 m delta grows, so the perfect attack's bound peaks and falls; a claim above
    # the peak gets None although a grid point near the peak reads more than far larger ones
    peak = max(steinke_ceiling(n - n // 2, n // 2, delta=DELTA, confidence=LEVEL) for n in (1024, 1722, 2896))
    assert steinke_ceiling(50_000, 50_000, delta=DELTA, confidence=LEVEL) < peak < 5.0
    assert steinke_canaries_needed(peak + 0.01, delta=DELTA, confidence=LEVEL) is None


def test_the_fdp_readings_ceiling_is_its_bound_on_a_perfect_outcome_and_needs_the_fewest_grid_canaries():
    m = 2000
    ceiling = fdp_ceiling(m - m // 2, m // 2, delta=DELTA, confidence=LEVEL)
    each = (1 - LEVEL) / len(GuessGrid().resolve(m))
    assert ceiling == gdp_epsilon(_fdp_mu(m, m, m, DELTA, each), DELTA)
    distinct = epsilon_lower_bound_one_run_fdp(*_perfect(m, distinct=True), delta=DELTA, confidence=LEVEL)
    assert distinct.epsilon <= ceiling
    for claim in (1.0, 4.0, 8.0):
        needed = fdp_canaries_needed(claim, delta=DELTA, confidence=LEVEL)
        assert needed is not None
        assert epsilon_lower_bound_one_run_fdp(*_perfect(needed), delta=DELTA, confidence=LEVEL).epsilon > claim
        assert all(fdp_ceiling(n - n // 2, n // 2, delta=DELTA, confidence=LEVEL) <= claim for n in _grid_below(needed))


def test_the_clopper_pearson_ceiling_is_its_bound_on_a_perfect_outcome_and_needs_the_fewest_grid_canaries():
    kw = dict(delta=DELTA, confidence=LEVEL, selection=BonferroniThresholds(), one_sided=False)
    for members, nonmembers in ((7, 5), (1000, 1000), (30_000, 29_000)):
        ceiling = clopper_pearson_ceiling(members, nonmembers, delta=DELTA, confidence=LEVEL, one_sided=False)
        perfect = np.ones(members), np.zeros(nonmembers)
        assert ceiling == epsilon_lower_bound_clopper_pearson(*perfect, **kw).epsilon
        distinct = 1.0 + np.arange(members), -np.arange(nonmembers, dtype=float)
        assert epsilon_lower_bound_clopper_pearson(*distinct, **kw).epsilon == ceiling  # the same cut between them
    for claim in (1.0, 4.0, 8.0):
        needed = clopper_pearson_canaries_needed(claim, delta=DELTA, confidence=LEVEL, one_sided=False)
        assert needed is not None
        assert epsilon_lower_bound_clopper_pearson(*_perfect(needed), **kw).epsilon > claim
        below = _grid_below(needed)
        assert epsilon_lower_bound_clopper_pearson(*_perfect(below[-1]), **kw).epsilon <= claim
        assert all(
            clopper_pearson_ceiling(n - n // 2, n // 2, delta=DELTA, confidence=LEVEL, one_sided=False) <= claim
            for n in below
        )


def test_the_canaries_needed_never_fall_as_the_claim_grows():
    claims = (0.5, 1.0, 2.0, 3.0, 4.0, 4.8, 6.0, 8.0, 12.0)
    for needed in (steinke_canaries_needed, fdp_canaries_needed, clopper_pearson_canaries_needed):
        found = [needed(c, delta=DELTA, confidence=LEVEL) for c in claims]
        counts = [math.inf if n is None else n for n in found]
        assert counts == sorted(counts), (needed.__name__, found)
        assert all(n is None or n <= MOST_CANARIES for n in found)


def test_the_grid_walk_returns_the_first_grid_point_of_a_test_that_is_not_monotone():
    def proves(n: int) -> bool:  # true on [10, 100] only
        return 10 <= n <= 100

    assert fewest_on_grid(proves, smallest=2, most=10**6, monotone=False) == 10
    assert fewest_on_grid(proves, smallest=2, most=10**6) is None  # bisection assumes true from some n on


def test_steinkes_pvalue_reads_the_delta_terms_maximum_exactly_on_a_window():
    """The windowed maximum of the delta term is the same float as the maximum over all v terms at once."""

    def over_every_term(eps: float, m: int, r: int, v: int, delta: float) -> float:
        q = float(scipy.special.expit(eps))
        beta = float(scipy.special.bdtrc(v - 1, r, q))
        i = np.arange(1, v + 1)
        tail = (scipy.special.bdtrc(v - i - 1, r, q) - beta) / i
        return min(beta + 2 * m * delta * float(np.max(tail, initial=0.0)), 1.0)

    for m in (40, 3000, 200_000):
        for r in (m, m // 20 or 1):
            for v in (r, int(0.9 * r) or 1, int(0.6 * r) or 1):
                for eps in (0.3, 3.0, 9.0):
                    assert _steinke_pvalue(eps, m, r, v, DELTA) == over_every_term(eps, m, r, v, DELTA), (eps, m, r, v)
