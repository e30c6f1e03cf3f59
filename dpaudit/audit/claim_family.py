"""The one-run proof against a claimed mechanism's own trade-off curve, on guess counts planned from the claim.

Steinke, Nasr & Jagielski's (2023) one-run bound refutes (epsilon, delta)-DP for ANY mechanism, so it can
use no more than the (epsilon, delta) envelope of the claim; a DP-SGD claim is much more: a whole privacy
profile, the trade-off curve of its Poisson-subsampled Gaussian steps (:mod:`dpaudit.audit.tradeoff`).
Mahloujifar, Melis & Chaudhuri (2024) test guesses with abstentions against any trade-off curve f; here f is
the claim's, and within the family of the claim with every noise multiplier scaled
(:func:`dpaudit.audit.claim_curves.lower_bound`) the bound is the epsilon of the least
private member the guesses reject. What it proves:

- the claim itself (scale 1, ``EpsilonBound.scale <= 1``) rejected: the mechanism is not f-DP for the claimed
  curve f, so it is not the mechanism the claim states. That is all it proves: a mechanism within the claim's
  (epsilon, delta) but of another form (a full-batch Gaussian, say) can be rejected too, so the figure is then no
  lower bound of its epsilon; the headline prints Steinke's bound on the same guesses instead
  (:mod:`dpaudit.verdict.headline`);
- otherwise: a lower bound for mechanisms of the claimed form (the claimed sampling rates and steps, any
  noise).

One pair of guess counts (k+, k-) is tested, at the full risk, and it is chosen before any score is seen:
:func:`planned_pair` simulates what an attack would observe under the claim (a function of public inputs
only: the claim and m, a fixed seed), takes for each candidate pair the expected correct count less
:data:`PLAN_SPREAD` standard deviations, and keeps the pair whose planned count rejects the least private
scaled claim. Trying several pairs on the scores would cost a Bonferroni correction (14 pairs: each at
alpha / 14), which held the white-box proof near half the claim before it was planned.

For a black-box audit of released weights (:func:`planned_last_iterate_pair`) the simulation is the claim's
last iterate: a perfectly aligned canary adds 1 (in units of its sensitivity) at each of the steps that
sample it and every step adds N(0, sigma_t^2), so a member's score is Binomial-sum + noise and a
non-member's noise alone; its separation q sqrt(T) / sigma is the most any black-box canary attack of the
last iterate can reach under the claim.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpaudit.audit.bounds import EpsilonBound
from dpaudit.audit.checks import _check_unit, _scores
from dpaudit.audit.claim_curves import FamilyBound, StatedMechanism, best_test, lower_bound
from dpaudit.audit.one_run import _one_run_guesses, _thresholds_for
from dpaudit.audit.thresholds import guess_pairs
from dpaudit.audit.tradeoff import TradeOff, one_run_margin

__all__ = [
    "GUARANTEE_CLAIM",
    "PLAN_FRACTIONS",
    "candidate_pairs",
    "claim_family_test",
    "epsilon_lower_bound_one_run_claim",
    "planned_last_iterate_pair",
    "planned_pair",
]

#: What a claim-family bound refutes (the ``guarantee`` of its :class:`~dpaudit.audit.bounds.EpsilonBound`).
GUARANTEE_CLAIM = "the claimed mechanism's trade-off curve (the figure: mechanisms of the claimed form)"
#: Shares of the m canaries guessed that a plan considers: each one-sided (k+ = f m) and two-sided (k+ = k- = f m / 2).
PLAN_FRACTIONS = tuple(float(f) for f in np.geomspace(0.004, 0.5, 22))
#: Standard deviations of the correct count a plan gives up (a one-run audit must not count on a lucky draw).
PLAN_SPREAD = 1.0
#: A pair's guesses: (guesses, correct, t_plus, t_minus) of "member" on the scores >= t_plus, "non-member" on the
#: scores <= t_minus.
GuessCounts: TypeAlias = tuple[int, int, float, float]
#: The last-iterate plan's simulated canaries per class, and its own seed (the plan is a fixed function of the claim).
LAST_ITERATE_PLAN_CANARIES = 200_000
PLAN_SEED = 20240527


def candidate_pairs(m: int) -> tuple[tuple[int, int], ...]:
    """The (k+, k-) pairs a plan chooses among for m canaries."""
    return guess_pairs(PLAN_FRACTIONS, m)


def _expected_counts(
    member: NDArray[np.float64],
    nonmember: NDArray[np.float64],
    pooled: NDArray[np.float64],
    m: int,
    k_plus: int,
    k_minus: int,
) -> tuple[int, int]:
    """(r, v): the guesses and the planned correct ones (expected less :data:`PLAN_SPREAD` standard deviations),
    from sorted simulated ``member`` and ``nonmember`` scores and ``pooled``, both sorted together."""
    n = pooled.size
    v_mean, v_var = 0.0, 0.0
    if k_plus:
        t = pooled[n - min(n, max(1, round(k_plus / m * n)))]  # the population share k+ / m from the top
        tp = member.size - np.searchsorted(member, t, side="left")
        fp = nonmember.size - np.searchsorted(nonmember, t, side="left")
        p = tp / max(tp + fp, 1)
        v_mean, v_var = v_mean + k_plus * p, v_var + k_plus * p * (1 - p)
    if k_minus:
        t = pooled[min(n, max(1, round(k_minus / m * n))) - 1]  # ... and k- / m from the bottom
        tn = np.searchsorted(nonmember, t, side="right")
        fn = np.searchsorted(member, t, side="right")
        p = tn / max(tn + fn, 1)
        v_mean, v_var = v_mean + k_minus * p, v_var + k_minus * p * (1 - p)
    return k_plus + k_minus, int(np.floor(v_mean - PLAN_SPREAD * np.sqrt(v_var)))


def _rejects(m: int, r: int, v: int, alpha: float) -> Callable[[TradeOff], bool]:
    """The test: v correct of r guesses on m canaries reject a curve at significance ``alpha``."""
    return lambda curve: one_run_margin(curve.blow_up_inverse, m, r, v, alpha) > 0


def planned_pair(
    claim: StatedMechanism, member: NDArray[np.float64], nonmember: NDArray[np.float64], m: int, alpha: float
) -> tuple[int, int]:
    """The (k+, k-) whose planned correct count, on simulated ``member`` / ``nonmember`` scores (sorted) of the
    claimed mechanism, rejects the least private scaled claim at significance ``alpha`` (the largest pair when
    none rejects any)."""
    pooled = np.sort(np.concatenate([member, nonmember]))
    pairs: list[tuple[int, int]] = []
    tests: list[Callable[[TradeOff], bool]] = []
    for k_plus, k_minus in candidate_pairs(m):
        r, v = _expected_counts(member, nonmember, pooled, m, k_plus, k_minus)
        if v > 0:
            pairs.append((k_plus, k_minus))
            tests.append(_rejects(m, r, v, alpha))
    best, _ = best_test(claim, tests)
    return pairs[best] if best is not None else candidate_pairs(m)[-1]


def _last_iterate_scores(claim: StatedMechanism, n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """n simulated member and non-member last-iterate scores of the claim (sorted), in units of one privacy
    unit's sensitivity (each segment's noise multiplier is the noise std in those units)."""
    rng = np.random.default_rng(PLAN_SEED)
    counts = np.zeros(n)
    for seg in claim.segments:  # one binomial draw per canary and segment: the steps that sampled it
        counts += rng.binomial(seg.steps, seg.sampling_probability, size=n)
    noise = float(np.sqrt(sum(seg.steps * seg.noise_multiplier**2 for seg in claim.segments)))
    member = counts + rng.standard_normal(n) * noise
    nonmember = rng.standard_normal(n) * noise
    return np.sort(member), np.sort(nonmember)


@functools.lru_cache(maxsize=64)
def planned_last_iterate_pair(claim: StatedMechanism, m: int, alpha: float) -> tuple[int, int]:
    """The (k+, k-) a one-run black-box proof on m canaries tests under ``claim`` at significance ``alpha``:
    planned on the claim's ideal last-iterate attack (module docstring). A function of public inputs only;
    cached, so that the audits of one claim plan once."""
    member, nonmember = _last_iterate_scores(claim, LAST_ITERATE_PLAN_CANARIES)
    return planned_pair(claim, member, nonmember, m, alpha)


def _guess_counts(member: NDArray[np.float64], nonmember: NDArray[np.float64], pair: tuple[int, int]) -> GuessCounts:
    """(guesses, correct, t_plus, t_minus) of "member" on the k+ highest and "non-member" on the k- lowest scores."""
    desc = np.sort(np.concatenate([member, nonmember]))[::-1]
    t_plus, t_minus = _thresholds_for(desc, *pair)
    guesses, correct = _one_run_guesses(member, nonmember, t_plus, t_minus)
    return guesses, correct, t_plus, t_minus


def claim_family_test(
    member: NDArray[np.float64],
    nonmember: NDArray[np.float64],
    claim: StatedMechanism,
    pairs: Sequence[tuple[int, int]],
    alpha: float,
    *,
    min_scale: float | None = None,
) -> tuple[FamilyBound, list[GuessCounts]]:
    """The family bound of guesses on ``pairs`` (each at ``alpha / len(pairs)``, Bonferroni) and each pair's
    (guesses, correct, t_plus, t_minus); ``min_scale`` as :func:`dpaudit.audit.claim_curves.lower_bound`'s."""
    m = member.size + nonmember.size
    counts = [_guess_counts(member, nonmember, pair) for pair in pairs]
    each = alpha / len(pairs)
    useful = [(r, v) for r, v, _, _ in counts if v > 0]

    def rejects(curve: TradeOff) -> bool:
        return any(one_run_margin(curve.blow_up_inverse, m, r, v, each) > 0 for r, v in useful)

    return lower_bound(claim, rejects, min_scale=min_scale), counts


def epsilon_lower_bound_one_run_claim(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    claim: StatedMechanism,
    *,
    confidence: float = 0.95,
    pair: tuple[int, int] | None = None,
    min_scale: float | None = None,
) -> EpsilonBound:
    """One-run lower bound against the claim's own trade-off curve on coin-flip canaries (module docstring).

    Args:
        member_scores, nonmember_scores: scores of the canaries the coin put in training, and of the others
            (higher: more likely a member).
        claim: the claimed mechanism (its segments and delta).
        confidence: e.g. 0.95.
        pair: the (k+, k-) guess counts, fixed before the scores were seen; None: :func:`planned_last_iterate_pair`.
        min_scale: the least noise scale searched (a ceiling's :data:`~dpaudit.audit.claim_curves.CEILING_MIN_SCALE`);
            None: all of them.

    Returns:
        An :class:`~dpaudit.audit.bounds.EpsilonBound` with ``method="one_run_claim"``, ``guarantee`` =
        :data:`GUARANTEE_CLAIM`, ``selection="planned"`` and the claim's delta.
    """
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    confidence = _check_unit(confidence, "confidence")
    m = member.size + nonmember.size
    alpha = 1 - confidence
    if pair is None:
        pair = planned_last_iterate_pair(claim, m, round(alpha, 12))
    if pair[0] < 0 or pair[1] < 0 or pair[0] + pair[1] > m:
        raise ValueError(f"the guess counts {pair} do not fit {m} canaries.")
    found, counts = claim_family_test(member, nonmember, claim, [pair], alpha, min_scale=min_scale)
    guesses, correct, t_plus, t_minus = counts[0]
    if claim.delta is None:
        raise ValueError("the claim states no delta: no one-run bound against it.")
    return EpsilonBound(
        method="one_run_claim",
        selection="planned",
        guarantee=GUARANTEE_CLAIM,
        epsilon=float(max(0.0, found.epsilon)),
        delta=claim.delta,
        confidence=confidence,
        num_hypotheses=1,
        threshold=t_plus,
        threshold_minus=t_minus,
        n_members=member.size,
        n_nonmembers=nonmember.size,
        true_positives=int(np.sum(member >= t_plus)),
        false_positives=int(np.sum(nonmember >= t_plus)),
        guesses=guesses,
        correct=correct,
        scale=found.scale,
    )
