"""The one-run proof's guess counts, planned from the claim before any score is seen.

The one-run f-DP recursion (Mahloujifar, Melis & Chaudhuri 2024; :func:`dpaudit.audit.tradeoff.one_run_margin`)
tests ONE choice of guesses: "member" on the k+ highest scores, "non-member" on the k- lowest. Trying a grid
of (k+, k-) on the scores costs a Bonferroni correction (14 pairs: each tested at alpha / 14), and that
correction, not the attack, is what held the proof near half the claim. In a white-box audit the auditor
knows, before training, exactly what a correct trainer's canaries look like: the claimed mechanism
(:class:`dpaudit.claim.Claim`: q_t, the noise std, C) and the layout's mixtures.
:func:`planned_guesses` picks the pair from that alone, so the proof tests it at the full alpha:

1. simulate the claimed mechanism's per-canary scores (a fixed seed; the same Neyman-Pearson score
   :func:`~dpaudit.whitebox.scores.all_iterates_scores` gives the real canaries);
2. (:func:`dpaudit.audit.claim_family.planned_pair`, shared with the black-box proof) for each candidate pair,
   the expected number of correct guesses v among r = k+ + k- on m fair-coin
   canaries (the precision of the population's top k+ / m and bottom k- / m), less one standard
   deviation (a pair whose count varies less is preferred: the audit has one run);
3. the pair whose planned (r, v) gives the largest claim-family bound at the full alpha.

Validity needs only that the pair is a function of public inputs (the claim, the layout's clipping unit and
partners, m) and not of the coins or the noise: the claim never depends on the coins (see
:meth:`~dpaudit.whitebox.layout.CanaryLayout.canaries`), so the recursion's guarantee holds for the pair as
for any pair fixed in advance. A wrong claim (a broken trainer) only makes the plan less than optimal.

The same simulation plans the order-statistics test (Xiang et al. 2025; :mod:`dpaudit.audit.order_stats`): how many
of the most confident guesses to release (r), and, for the verdict's one-run bound, which of the two one-run tests to
run: the one whose planned counts reject the least private scaled claim (:func:`planned_one_run`). Either way ONE test
is run at the full alpha, chosen before any score is seen. The last iterate's plan simulates each canary's final
value (the sum of its observations) and guesses around the pooled scores' median (a function of the run's output,
which keeps the test valid).

The Gaussian-pair bound (:mod:`dpaudit.audit.gauss_pair`) is planned the same way (:func:`planned_gauss_pair`): its
projection (all iterates: the likelihood ratio or the sum of the canary's observations; last iterate: the final
value) and its planned figure, the bound the simulated population's moments give at m canaries. It joins the choice
of the verdict's one test (:func:`planned_one_run`) when the claim is of its form (every step samples every canary,
q = 1) and its planned figure is strictly the largest.

With R > 1 runs the pooled verdict bound is planned too (:func:`planned_pooled`), from the claim, m and R alone: the
order statistics over the R x m canaries as one game (valid for any trainer: each canary sits in one run, so the R
runs together are f-DP for it as its own run is) or the Clopper-Pearson points below the claimed curve (valid when the
canaries are independent trials), whichever's planned counts reject the less private scaled claim (ties: the order
statistics). One test, so the pooled bound pays no correction for the choice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpaudit.audit import gauss_pair
from dpaudit.audit.claim_family import PLAN_SPREAD, candidate_pairs, planned_pair
from dpaudit.audit.order_stats_claim import order_beats_pair, order_test, planned_mistakes
from dpaudit.audit.tradeoff import TradeOff
from dpaudit.claim import Claim
from dpaudit.whitebox.bounds import points_test
from dpaudit.whitebox.layout import CanaryLayout
from dpaudit.whitebox.scores import all_iterates_scores

__all__ = [
    "GaussPairPlan",
    "OrderStatsPlan",
    "candidate_pairs",
    "planned_gauss_pair",
    "planned_guesses",
    "planned_one_run",
    "planned_order_stats",
    "planned_pooled",
    "simulated_scores",
]

#: Simulated observations per class (members, non-members; canaries x steps) the plan estimates the score
#: distributions from: the planned count moves by about one standard deviation per 1% of precision, so the
#: tail's precision must be estimated to a fraction of that (250,000 canaries at 4 steps, 50,000 at 20).
PLAN_OBSERVATIONS = 1_000_000
#: ... and at most this many canaries per class (a one-step claim).
PLAN_CANARIES = 250_000
#: The plan's own seed: the plan is a fixed function of the claim (reproducible, and never the auditor's coins).
PLAN_SEED = 20240527


def simulated_scores(
    claim: Claim, unit: str, partners: int, n: int, rng: np.random.Generator, view: str = "all_iterates"
) -> tuple[np.ndarray, np.ndarray]:
    """Scores of n simulated member and n non-member canaries of the claimed mechanism, drawn from ``rng`` (sorted):
    the all-iterates likelihood ratio, or (``view="last_iterate"``) the sum of the canary's observations (its final
    value's move). What a correct trainer's canaries read: the plan's input, and a benchmark's ideal audit."""
    q, std = claim.per_step()
    layout = CanaryLayout(member=np.zeros(n, dtype=bool), unit=unit, partners=partners)
    shifts, inside, outside = layout.mixtures(q, claim.clip_norm)
    out = []
    for weights in (inside, outside):
        cumulative = np.cumsum(weights, axis=1)  # (T, K)
        u = rng.random((q.size, n))
        component = (u[:, :, None] >= cumulative[:, None, :]).sum(axis=2).clip(0, shifts.size - 1)
        y = shifts[component] + rng.standard_normal((q.size, n)) * std[:, None]
        if view == "last_iterate":
            out.append(np.sort(y.sum(axis=0)))
        else:
            out.append(np.sort(all_iterates_scores(y, layout, q, std, claim.clip_norm)))
    return out[0], out[1]


@functools.lru_cache(maxsize=16)
def _simulated_scores(
    claim: Claim, unit: str, partners: int, n: int, view: str = "all_iterates"
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`simulated_scores` drawn with the plan's own seed (the plan is a fixed function of the claim)."""
    return simulated_scores(claim, unit, partners, n, np.random.default_rng(PLAN_SEED), view)


def _plan_size(claim: Claim) -> int:
    return max(1_000, min(PLAN_CANARIES, PLAN_OBSERVATIONS // claim.steps))


@functools.lru_cache(maxsize=64)
def planned_guesses(claim: Claim, unit: str, partners: int, m: int, alpha: float) -> tuple[int, int]:
    """The (k+, k-) the one-run proof of m canaries under ``claim`` tests at significance ``alpha``.

    A function of public inputs only (see the module docstring); cached, so that the R runs of an audit (and
    the seeds of a test) plan once.
    """
    member, nonmember = _simulated_scores(claim, unit, partners, _plan_size(claim))
    return planned_pair(claim, member, nonmember, m, alpha)


@dataclass(frozen=True)
class OrderStatsPlan:
    """The order-statistics test planned from the claim: release the ``r`` most confident guesses, "member" above
    ``center`` (None: the median of the run's pooled scores); ``mistakes`` and ``scale``: the planned mistake count and
    the least private scaled claim it rejects (None: none)."""

    r: int
    center: float | None
    mistakes: int
    scale: float | None


@functools.lru_cache(maxsize=64)
def planned_order_stats(
    claim: Claim, unit: str, partners: int, m: int, alpha: float, view: str = "all_iterates"
) -> OrderStatsPlan:
    """The order-statistics test of m canaries under ``claim`` at significance ``alpha`` for ``view``: the share r
    whose planned mistakes reject the least private scaled claim. All iterates guess around 0 (the likelihood
    ratio's sign: the MAP guess under the claim); the last iterate around the pooled median."""
    center = 0.0 if view == "all_iterates" else None
    member, nonmember = _simulated_scores(claim, unit, partners, _plan_size(claim), view)
    candidates = planned_mistakes(member, nonmember, center, m)
    best, scale = claim.best_test([order_test(m, r, u, alpha) for r, u in candidates])
    r, u = candidates[best] if best is not None else candidates[-1]
    return OrderStatsPlan(r=r, center=center, mistakes=u, scale=scale)


@dataclass(frozen=True)
class GaussPairPlan:
    """The Gaussian-pair bound planned from the claim: the canaries' ``projection`` ("ratio": the all-iterates
    likelihood ratio; "sum": the sum of the canary's observations; "final": the last iterate's value) and the
    ``epsilon`` the simulated population's moments give at m canaries (a plan's figure, not a bound)."""

    projection: str
    epsilon: float


def _gauss_pair_figure(member: np.ndarray, nonmember: np.ndarray, m: int, alpha: float, delta: float) -> float:
    """The Gaussian-pair bound of m canaries (half members) whose sample moments are the simulated population's."""

    def at(x: np.ndarray, n: int) -> gauss_pair.Moments:
        pop = gauss_pair.moments(x)
        return gauss_pair.Moments(n=n, mean=pop.mean, var=pop.var, m4=pop.m4)

    mu = gauss_pair.mu_lower(at(member, m - m // 2), at(nonmember, m // 2), alpha)
    return gauss_pair.epsilon_of(mu, delta)


@functools.lru_cache(maxsize=64)
def planned_gauss_pair(
    claim: Claim, unit: str, partners: int, m: int, alpha: float, view: str = "all_iterates"
) -> GaussPairPlan:
    """The Gaussian-pair bound of m canaries under ``claim`` for ``view``: all iterates read the projection ("ratio" or
    "sum") whose planned figure is larger (ties: the ratio); the last iterate reads the final value."""
    assert claim.delta is not None  # an audited claim states its mechanism
    size = _plan_size(claim)
    summed = _gauss_pair_figure(*_simulated_scores(claim, unit, partners, size, "last_iterate"), m, alpha, claim.delta)
    if view == "last_iterate":
        return GaussPairPlan(projection="final", epsilon=summed)
    ratio = _gauss_pair_figure(*_simulated_scores(claim, unit, partners, size), m, alpha, claim.delta)
    return GaussPairPlan("sum", summed) if summed > ratio else GaussPairPlan("ratio", ratio)


def _gauss_pair_form(claim: Claim) -> bool:
    """Whether the claimed mechanism's canary projections are Gaussian pairs, the form the Gaussian-pair bound holds
    for: every step samples every canary (q = 1). A Poisson-subsampled step's projection is a mixture; the bound read
    below its epsilon in the simulations of docs/auditing.md, "Gaussian pair", but nothing proves it there, so a
    verdict never rests on it."""
    return bool(claim.segments) and all(s.sampling_probability >= 1.0 for s in claim.segments)


@functools.lru_cache(maxsize=64)
def planned_one_run(claim: Claim, unit: str, partners: int, m: int, alpha: float) -> str:
    """Which one-run test the verdict runs on the first run's canaries (all iterates): "order_stats" or
    "claim_family" (the f-DP recursion), whichever's planned counts reject the less private scaled claim (ties: the
    order statistics); then "gauss_pair" instead when its planned figure is strictly larger than the winner's. A
    function of the claim and the layout alone."""
    order = planned_order_stats(claim, unit, partners, m, alpha)
    member, nonmember = _simulated_scores(claim, unit, partners, _plan_size(claim))
    pair = planned_guesses(claim, unit, partners, m, alpha)
    chosen, scale = order_beats_pair(claim, member, nonmember, m, (order.r, order.mistakes), pair, alpha)
    best = claim.epsilon_at(scale) if scale is not None else 0.0  # the winner's planned figure
    if _gauss_pair_form(claim) and planned_gauss_pair(claim, unit, partners, m, alpha).epsilon > best:
        return "gauss_pair"
    return "order_stats" if chosen else "claim_family"


#: Thresholds at which the pooled Clopper-Pearson points are planned: quantiles of the simulated scores.
POOLED_PLAN_THRESHOLDS = 2_000


def _planned_points_test(
    member: np.ndarray, nonmember: np.ndarray, n_m: int, n_n: int, alpha: float
) -> Callable[[TradeOff], bool]:
    """The pooled Clopper-Pearson points' test (:func:`dpaudit.whitebox.bounds.multi_run_family`) on planned counts:
    at quantiles of the simulated scores, the expected false positives and false negatives of n_n non-members and n_m
    members plus :data:`~dpaudit.audit.claim_family.PLAN_SPREAD` binomial standard deviations, each bounded at
    ``alpha`` / 2 / n as the real test bounds them."""
    pooled = np.concatenate([member, nonmember])
    thresholds = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, POOLED_PLAN_THRESHOLDS)))
    fpr = 1 - np.searchsorted(nonmember, thresholds, side="left") / nonmember.size  # non-members scoring >= t
    fnr = np.searchsorted(member, thresholds, side="left") / member.size  # members scoring < t

    def planned(rate: np.ndarray, n: int) -> np.ndarray:
        return np.minimum(n, np.ceil(n * rate + PLAN_SPREAD * np.sqrt(n * rate * (1 - rate))))

    return points_test(planned(fpr, n_n), n_n, planned(fnr, n_m), n_m, alpha)


@functools.lru_cache(maxsize=64)
def planned_pooled(claim: Claim, unit: str, partners: int, m: int, runs: int, alpha: float) -> str:
    """Which pooled test the verdict runs on R = ``runs`` runs of m canaries each (all iterates): "order_stats" (over
    the R x m canaries as one game, its released count :func:`planned_order_stats` of R x m) or "claim_family" (the
    Clopper-Pearson points below the claimed curve), whichever's planned counts reject the less private scaled claim
    (ties: the order statistics, which need no independence between canaries). A function of the claim, the layout,
    m and R alone."""
    total = m * runs
    order = planned_order_stats(claim, unit, partners, total, alpha)
    member, nonmember = _simulated_scores(claim, unit, partners, _plan_size(claim))
    tests = [
        order_test(total, order.r, order.mistakes, alpha),
        _planned_points_test(member, nonmember, total - total // 2, total // 2, alpha),
    ]
    best, _ = claim.best_test(tests)
    return "claim_family" if best == 1 else "order_stats"
