"""A claimed mechanism's trade-off curves, and the family an audit bounds within.

The claim of a DP-SGD run is a sequence of Poisson-subsampled Gaussian steps (q_t, sigma_t), each noising a clipped
sum whose one-unit bound is ``sensitivity_factor x C``. Any object that states that much (:class:`StatedMechanism`;
in practice :class:`dpaudit.claim.Claim`, the one claim type, whose methods call these functions) gives the audit the
claimed q_t and noise std per step (:func:`per_step`), and the trade-off curve of the claim scaled by s (every sigma_t
times s; s = 1 is the claim, :func:`curve`): the family :func:`lower_bound` searches for the least private member the
evidence rejects. Curves and epsilons depend only on the segments and delta, and are cached on them, so audits of one
claim share them. This module never imports the claim package (it sits below it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from dp_accounting.dp_event import DpEvent
from numpy.typing import NDArray

from dpaudit import accounting
from dpaudit.accounting.events import Segment
from dpaudit.audit.tradeoff import TradeOff

__all__ = [
    "CEILING_MIN_SCALE",
    "FamilyBound",
    "StatedMechanism",
    "best_test",
    "curve",
    "epsilon_at",
    "first_true",
    "lower_bound",
    "per_step",
    "scaled_event",
]

#: PLD discretization of the audit's trade-off curves: dp_accounting's pessimistic PLD over-states
#: every delta at any discretization, so a coarse one is valid, faster, and looser by ~1e-3 in epsilon.
CURVE_DISCRETIZATION = 1e-3
#: Discretization of the optimistic PLD a bound's epsilon is read from (a lower estimate at any
#: discretization; 1e-4 keeps it within ~0.01 of the accountant of record).
EPSILON_DISCRETIZATION = 1e-4
#: Profile points per curve (epsilon from 0 to 3 x the curve's own epsilon at delta + 4).
CURVE_POINTS = 200
#: The scales searched: sigma x 2^(k/64), 1/16 .. 16 (steps of 1.1%; a scale whose PLD grid would be
#: too large is skipped: its epsilon is in the hundreds).
SCALES = tuple(2.0 ** (k / 64) for k in range(-256, 257))
#: A bound's last grid step is searched again on this many sub-steps (2^(1/256): 0.27% of sigma, about 0.3% of
#: epsilon): one grid step is 1.2% of a claim's epsilon, which a many-run audit at 10^6 canaries resolves. Each
#: sub-step tested is a test of its own scaled claim at the same significance; the bound stays the epsilon of a
#: rejected scale (a finer search only lifts it toward the smallest rejected one, never past a scale not rejected).
REFINE = 4
#: The least scale a ceiling (the bound of a perfect attack) searches: half the claimed noise. A perfect attack on many
#: canaries rejects every scale, and the epsilon of sigma / 16 costs minutes of PLD; a ceiling that reaches this scale
#: is reported as at least its epsilon (``FamilyBound.capped``), already well above the claim.
CEILING_MIN_SCALE = 0.5


@dataclass(frozen=True)
class FamilyBound:
    """The family lower bound: ``epsilon`` of the least private rejected member (scale ``scale``);
    0 when no member of the range is rejected; ``capped`` when even the least private one is."""

    epsilon: float
    scale: float | None
    capped: bool = False


class StatedMechanism(Protocol):
    """What an audit needs of a claim that states its mechanism (:class:`dpaudit.claim.Claim` is one): its
    Poisson-subsampled Gaussian ``segments``, its ``epsilon`` and the ``delta`` it states, the delta that epsilon
    is at on the privacy profile (``curve_delta``), its clip norm and the clipping unit's ``sensitivity_factor``.
    Read only, and hashable: the plans of one claim are cached on it."""

    @property
    def segments(self) -> tuple[Segment, ...]: ...

    @property
    def epsilon(self) -> float | None: ...

    @property
    def delta(self) -> float | None: ...

    @property
    def clip_norm(self) -> float: ...

    @property
    def sensitivity_factor(self) -> float: ...

    @property
    def curve_delta(self) -> float: ...

    def __hash__(self) -> int: ...


def per_step(mechanism: StatedMechanism) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(q_t, noise std_t) of every step: the claimed sampling rate and the claimed noise std on the clipped sum
    (sigma_t x sensitivity_factor x C)."""
    q = np.concatenate([np.full(s.steps, s.sampling_probability) for s in mechanism.segments])
    std = np.concatenate(
        [
            np.full(s.steps, s.noise_multiplier * mechanism.sensitivity_factor * mechanism.clip_norm)
            for s in mechanism.segments
        ]
    )
    return q, std


def scaled_event(mechanism: StatedMechanism, scale: float) -> DpEvent:
    """The DpEvent of the claim with every sigma times ``scale``."""
    return _scaled_event(tuple(mechanism.segments), float(scale))


def _scaled_event(segments: tuple[Segment, ...], scale: float) -> DpEvent:
    return accounting.schedule_event(
        [
            Segment(
                steps=s.steps,
                sampling_probability=s.sampling_probability,
                noise_multiplier=s.noise_multiplier * scale,
                sensitivity_factor=s.sensitivity_factor,
            )
            for s in segments
        ]
    )


def epsilon_at(mechanism: StatedMechanism, scale: float) -> float:
    """A LOWER estimate of the epsilon at the claim's delta of the claim with every sigma scaled by ``scale``:
    dp_accounting's optimistic PLD (``pessimistic_estimate=False``), so that a lower bound read from it never
    over-states (the accountant of record rounds the other way)."""
    return _optimistic_epsilon(tuple(mechanism.segments), float(mechanism.curve_delta), float(scale))


def curve(mechanism: StatedMechanism, scale: float = 1.0) -> TradeOff:
    """The trade-off curve of the scaled claim, from its PLD privacy profile (never above the true one)."""
    return _curve(tuple(mechanism.segments), float(mechanism.curve_delta), float(scale))


def lower_bound(
    mechanism: StatedMechanism, rejects: Callable[[TradeOff], bool], *, min_scale: float | None = None
) -> FamilyBound:
    """The least private scaled claim that ``rejects`` (a test, monotone: a rejected curve's more private scalings
    are rejected too) rejects: a binary search over :data:`SCALES` (a fixed grid, so that audits of the same claim
    share their curves), then over :data:`REFINE` sub-steps of the last grid step. The bound is the epsilon of the
    smallest REJECTED scale searched: the grid only ever lowers it.
    ``min_scale`` stops the search there (a ceiling: :data:`CEILING_MIN_SCALE`); a bound that reaches it is
    ``capped``."""
    segments, delta = tuple(mechanism.segments), float(mechanism.curve_delta)

    def rejected_at(scale: float) -> bool:  # a scale too small for a PLD counts as not rejected (conservative)
        return _curve_fits(segments, delta, scale) and rejects(_curve(segments, delta, scale))

    def rejected(i: int) -> bool:
        return rejected_at(SCALES[i])

    lo = 0 if min_scale is None else next(i for i, s in enumerate(SCALES) if s >= min_scale)
    hi = len(SCALES) - 1
    if not rejected(hi):
        return FamilyBound(epsilon=0.0, scale=None)
    if rejected(lo):
        return FamilyBound(epsilon=_optimistic_epsilon(segments, delta, SCALES[lo]), scale=SCALES[lo], capped=True)
    hi = first_true(rejected, lo, hi)  # SCALES[hi - 1] is not rejected, SCALES[hi] is
    fine = [SCALES[hi - 1] * 2.0 ** (j / (64 * REFINE)) for j in range(1, REFINE)] + [SCALES[hi]]
    b = first_true(lambda j: rejected_at(fine[j]), -1, len(fine) - 1)  # -1: SCALES[hi - 1], not rejected
    return FamilyBound(epsilon=_optimistic_epsilon(segments, delta, fine[b]), scale=fine[b])


def first_true(holds: Callable[[int], bool], lo: int, hi: int) -> int:
    """The least index in (``lo``, ``hi``] at which the monotone ``holds`` is true, given that it is false at ``lo``
    (-1: before the range, untested) and true at ``hi``: a bisection, the one of every monotone search here."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi


def best_test(
    mechanism: StatedMechanism, tests: Sequence[Callable[[TradeOff], bool]]
) -> tuple[int | None, float | None]:
    """Which of several monotone ``tests`` (as :func:`lower_bound`'s) rejects the least private scaled claim: (its
    index, that smallest rejected grid scale), (None, None) when none rejects any. One binary search for all of them
    (at each scale only the tests that still reject go on), so it builds as few curves as one :func:`lower_bound`;
    no epsilon is computed (:func:`epsilon_at` of the scale gives it)."""
    segments, delta = tuple(mechanism.segments), float(mechanism.curve_delta)

    def rejecting(i: int, alive: list[int]) -> list[int]:
        if not alive or not _curve_fits(segments, delta, SCALES[i]):
            return []
        found = _curve(segments, delta, SCALES[i])
        return [j for j in alive if tests[j](found)]

    lo, hi = 0, len(SCALES) - 1
    alive = rejecting(hi, list(range(len(tests))))
    if not alive:
        return None, None
    at_lo = rejecting(lo, alive)
    if at_lo:
        return at_lo[0], SCALES[lo]
    while hi - lo > 1:  # every test in ``alive`` rejects SCALES[hi]; none rejects SCALES[lo]
        mid = (lo + hi) // 2
        still = rejecting(mid, alive)
        if still:
            hi, alive = mid, still
        else:
            lo = mid
    return alive[0], SCALES[hi]


@functools.lru_cache(maxsize=4096)
def _curve_fits(segments: tuple[Segment, ...], delta: float, scale: float) -> bool:
    if scale >= 1.0:  # the claim itself was accounted at a finer discretization: anything noisier fits
        return True
    try:
        _curve(segments, delta, scale)
    except accounting.PldGridTooLargeError:
        return False
    return True


@functools.lru_cache(maxsize=256)
def _curve(segments: tuple[Segment, ...], delta: float, scale: float) -> TradeOff:
    grid, deltas = accounting.privacy_profile(
        _scaled_event(segments, scale), reach_delta=delta, points=CURVE_POINTS, discretization=CURVE_DISCRETIZATION
    )
    return TradeOff(grid, deltas)


@functools.lru_cache(maxsize=64)
def _optimistic_epsilon(segments: tuple[Segment, ...], delta: float, scale: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    total: pld_lib.PrivacyLossDistribution | None = None
    for seg in segments:  # dp_accounting's optimistic privacy-buckets PLD, built bit for bit on whole arrays
        step = accounting.self_compose(
            accounting.optimistic_subsampled_gaussian_pld(
                seg.noise_multiplier * scale, seg.sampling_probability, EPSILON_DISCRETIZATION
            ),
            seg.steps,
        )
        total = step if total is None else total.compose(step)
    if total is None:
        raise ValueError("a claim without segments states no mechanism to account.")
    return float(max(0.0, accounting.epsilon_for_delta(total, delta)))  # dp_accounting's walk, bit for bit
