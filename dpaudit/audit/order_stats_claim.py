"""The black-box one-run proof against a claimed mechanism with the order statistics, planned from the claim.

A coin-flip canary audit of released weights tests ONE planned test per audit (:mod:`dpaudit.audit.claim_family`):
before any score is seen, the claim's ideal last-iterate attack is simulated (a perfectly aligned canary adds 1 per
step that samples it, every step adds N(0, sigma_t^2): ``claim_family._last_iterate_scores``) and two tests are
planned on it:

- the f-DP recursion of Mahloujifar et al. on a planned guess-count pair (:func:`~dpaudit.audit.claim_family.
  planned_last_iterate_pair`);
- the order statistics of Xiang et al. (2025; :mod:`dpaudit.audit.order_stats`): every canary guessed around the
  median of the pooled scores (a function of the run's output), the r most confident released, r planned.

:func:`planned_last_iterate_test` keeps the one whose planned counts reject the less private scaled claim, so the
headline tests one planned bound per audit and pays no correction for the choice. When the order statistics reject
the claimed curve itself, :func:`order_stats_any_mechanism` gives the same guesses' (epsilon, delta) reading, valid
for any mechanism.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpaudit.audit import order_stats
from dpaudit.audit.bounds import GUARANTEE_DP, EpsilonBound
from dpaudit.audit.checks import _check_unit, _scores
from dpaudit.audit.claim_curves import StatedMechanism, best_test
from dpaudit.audit.claim_family import (
    GUARANTEE_CLAIM,
    LAST_ITERATE_PLAN_CANARIES,
    PLAN_FRACTIONS,
    PLAN_SPREAD,
    _expected_counts,
    _last_iterate_scores,
    _rejects,
    planned_last_iterate_pair,
)
from dpaudit.audit.tradeoff import TradeOff

__all__ = [
    "METHOD_ORDER_CLAIM",
    "METHOD_ORDER_DP",
    "ORDER_FRACTIONS",
    "epsilon_lower_bound_order_stats_claim",
    "order_beats_pair",
    "order_stats_any_mechanism",
    "planned_last_iterate_order",
    "planned_last_iterate_test",
]

METHOD_ORDER_CLAIM = "order_stats_claim"
METHOD_ORDER_DP = "order_stats_dp"
#: Shares of the m canaries a plan considers releasing (1: every guess).
ORDER_FRACTIONS = (*PLAN_FRACTIONS, 0.7, 1.0)


def planned_mistakes(
    member: NDArray[np.float64], nonmember: NDArray[np.float64], center: float | None, m: int
) -> list[tuple[int, int]]:
    """(r, planned mistakes) per share of :data:`ORDER_FRACTIONS`: the error rate of the simulated population's most
    confident share (guesses around ``center``; None: the pooled median) times r, plus
    :data:`~dpaudit.audit.claim_family.PLAN_SPREAD` binomial standard deviations."""
    pooled = np.concatenate([member, nonmember])
    c = float(np.median(pooled)) if center is None else center
    truth = np.concatenate([np.ones(member.size, bool), np.zeros(nonmember.size, bool)])
    order = np.argsort(-np.abs(pooled - c), kind="stable")
    wrong = np.cumsum((pooled[order] > c) != truth[order])
    out: list[tuple[int, int]] = []
    for f in ORDER_FRACTIONS:
        r = max(1, min(m, round(f * m)))
        k = max(1, min(pooled.size, round(r / m * pooled.size)))
        e = float(wrong[k - 1]) / k
        out.append((r, int(min(r, math.ceil(r * e + PLAN_SPREAD * math.sqrt(r * e * (1 - e)))))))
    return list(dict.fromkeys(out))


def order_test(m: int, r: int, u: int, alpha: float) -> Callable[[TradeOff], bool]:
    """The test: u mistakes among the r released of m reject a curve at significance ``alpha``."""
    return lambda curve: bool(order_stats.pvalue(order_stats.curve_profile(curve), m, r, [u])[0] < alpha)


@functools.lru_cache(maxsize=64)
def planned_last_iterate_order(claim: StatedMechanism, m: int, alpha: float) -> tuple[int, int]:
    """(r, planned mistakes) of the order-statistics test of m canaries on the claim's ideal last-iterate attack."""
    member, nonmember = _last_iterate_scores(claim, LAST_ITERATE_PLAN_CANARIES)
    candidates = planned_mistakes(member, nonmember, None, m)
    best, _ = best_test(claim, [order_test(m, r, u, alpha) for r, u in candidates])
    return candidates[best] if best is not None else candidates[-1]


@functools.lru_cache(maxsize=64)
def planned_last_iterate_test(claim: StatedMechanism, m: int, alpha: float) -> str:
    """ "order_stats" or "pair": which planned test a black-box one-run proof of m canaries runs (ties: the order
    statistics). A function of public inputs only."""
    member, nonmember = _last_iterate_scores(claim, LAST_ITERATE_PLAN_CANARIES)
    order = planned_last_iterate_order(claim, m, alpha)
    pair = planned_last_iterate_pair(claim, m, alpha)
    order_wins, _ = order_beats_pair(claim, member, nonmember, m, order, pair, alpha)
    return "order_stats" if order_wins else "pair"


def order_beats_pair(
    claim: StatedMechanism,
    member: NDArray[np.float64],
    nonmember: NDArray[np.float64],
    m: int,
    order: tuple[int, int],
    pair: tuple[int, int],
    alpha: float,
) -> tuple[bool, float | None]:
    """Whether the planned order-statistics test ``order`` = (r, mistakes) rejects a less private scaled claim than
    the f-DP recursion's planned guess-count ``pair`` does on the simulated ``member`` / ``nonmember`` scores (ties: the
    order statistics), and the winner's smallest rejected scale (None: neither rejects any). The one choice between
    the two one-run tests, black-box and white-box alike."""
    r, v = _expected_counts(member, nonmember, np.sort(np.concatenate([member, nonmember])), m, *pair)
    tests: list[Callable[[TradeOff], bool]] = [order_test(m, *order, alpha)]
    tests.append(_rejects(m, r, v, alpha) if v > 0 else (lambda curve: False))
    best, scale = best_test(claim, tests)
    return best != 1, scale


def _record(
    found: order_stats.OrderStatsBound,
    member: NDArray[np.float64],
    nonmember: NDArray[np.float64],
    center: float,
    method: str,
    guarantee: str,
) -> EpsilonBound:
    return EpsilonBound(
        method=method,
        selection="planned",
        guarantee=guarantee,
        epsilon=found.epsilon,
        delta=found.delta,
        confidence=found.confidence,
        num_hypotheses=1,
        threshold=center,
        n_members=member.size,
        n_nonmembers=nonmember.size,
        true_positives=0,
        false_positives=0,
        guesses=found.r,
        correct=found.r - found.mistakes,
        scale=found.theta if found.family == order_stats.FAMILY_CLAIM else None,
    )


def epsilon_lower_bound_order_stats_claim(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    claim: StatedMechanism,
    *,
    confidence: float = 0.95,
    r: int | None = None,
    min_scale: float | None = None,
) -> EpsilonBound:
    """The order-statistics one-run bound against the claim's scaled curve (module docstring): guesses around the
    pooled median, the ``r`` most confident released (None: :func:`planned_last_iterate_order`). ``method`` is
    :data:`METHOD_ORDER_CLAIM`, ``guarantee`` the claim family's, ``threshold`` the center."""
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    confidence = _check_unit(confidence, "confidence")
    if claim.delta is None:
        raise ValueError("the claim states no delta: no one-run bound against it.")
    m = member.size + nonmember.size
    if r is None:
        r, _ = planned_last_iterate_order(claim, m, round(1 - confidence, 12))
    center = float(np.median(np.concatenate([member, nonmember])))
    found = order_stats.order_stats_bound(
        member,
        nonmember,
        r=r,
        center=center,
        family=order_stats.FAMILY_CLAIM,
        delta=claim.delta,
        confidence=confidence,
        claim=claim,
        min_scale=min_scale,
    )
    return _record(found, member, nonmember, center, METHOD_ORDER_CLAIM, GUARANTEE_CLAIM)


def order_stats_any_mechanism(
    member_scores: ArrayLike, nonmember_scores: ArrayLike, *, r: int, delta: float, confidence: float
) -> EpsilonBound:
    """The same guesses' (epsilon, delta) reading (valid for any mechanism): method :data:`METHOD_ORDER_DP`."""
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    center = float(np.median(np.concatenate([member, nonmember])))
    found = order_stats.order_stats_bound(
        member, nonmember, r=r, center=center, family=order_stats.FAMILY_DP, delta=delta, confidence=confidence
    )
    return _record(found, member, nonmember, center, METHOD_ORDER_DP, GUARANTEE_DP)
