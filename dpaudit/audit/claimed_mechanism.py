"""The mechanism a trainer claims, read from its ``privacy.json``, and the family an audit bounds within.

The claim of a DP-SGD run is a sequence of Poisson-subsampled Gaussian steps (q_t, sigma_t), each
noising a clipped sum whose one-unit bound is ``sensitivity_factor x C``. :class:`ClaimedMechanism`
holds exactly that, step by step, so the audit's scores can use the claimed q_t and noise std, and
gives the trade-off curve of the claim scaled by s (every sigma_t times s; s = 1 is the claim): the
family :func:`lower_bound` searches for the least private member the evidence rejects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit import accounting
from dpaudit.accounting.events import Segment
from dpaudit.audit.tradeoff import TradeOff

__all__ = ["CEILING_MIN_SCALE", "ClaimedMechanism", "FamilyBound"]

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


@dataclass(frozen=True)
class ClaimedMechanism:
    """A run's claim: its accounting segments, delta, epsilon, clip norm and sensitivity factor."""

    segments: tuple[Segment, ...]
    delta: float
    epsilon: float
    clip_norm: float
    sensitivity_factor: float

    @classmethod
    def from_record(cls, record: Any) -> ClaimedMechanism:
        """The claim of a :class:`~dpaudit.training.privacy_record.PrivacyRecord` (private runs only)."""
        if not record.private or record.epsilon is None or not record.segments:
            raise ValueError("the run is not private: there is no claim to audit.")
        return cls.from_segments(record.segments, delta=record.delta, epsilon=record.epsilon,
                                 clip_norm=record.clip_norm, sensitivity_factor=record.sensitivity_factor)

    @classmethod
    def from_segments(cls, segments: Sequence[Mapping[str, Any]], *, delta: float, epsilon: float,
                      clip_norm: float = 1.0, sensitivity_factor: float = 1.0) -> ClaimedMechanism:
        """The claim of stored segments (``privacy.json``'s, or an attack result's copy of them). The trade-off
        curve needs only the segments and delta; ``clip_norm`` and ``sensitivity_factor`` matter only to scores
        in units of C (the white-box audit), so a black-box claim leaves them at 1."""
        steps = tuple(Segment(steps=int(s["steps"]), sampling_probability=float(s["sampling_probability"]),
                              noise_multiplier=float(s["noise_multiplier"]),
                              sensitivity_factor=float(s.get("sensitivity_factor", 1.0))) for s in segments)
        return cls(segments=steps, delta=float(delta), epsilon=float(epsilon), clip_norm=float(clip_norm),
                   sensitivity_factor=float(sensitivity_factor))

    @property
    def steps(self) -> int:
        return sum(s.steps for s in self.segments)

    def per_step(self) -> tuple[np.ndarray, np.ndarray]:
        """(q_t, noise std_t) of every step: the claimed sampling rate and the claimed noise std on the
        clipped sum (sigma_t x sensitivity_factor x C)."""
        q = np.concatenate([np.full(s.steps, s.sampling_probability) for s in self.segments])
        std = np.concatenate([np.full(s.steps, s.noise_multiplier * self.sensitivity_factor * self.clip_norm)
                              for s in self.segments])
        return q, std

    def scaled_event(self, scale: float) -> Any:
        return accounting.schedule_event([Segment(steps=s.steps, sampling_probability=s.sampling_probability,
                                                  noise_multiplier=s.noise_multiplier * scale,
                                                  sensitivity_factor=s.sensitivity_factor) for s in self.segments])

    def epsilon_at(self, scale: float) -> float:
        """A LOWER estimate of the epsilon at the claim's delta of the claim with every sigma scaled by
        ``scale``: dp_accounting's optimistic PLD (``pessimistic_estimate=False``), so that a lower bound
        read from it never over-states (the accountant of record rounds the other way)."""
        return _optimistic_epsilon(self, float(scale))

    def curve(self, scale: float = 1.0) -> TradeOff:
        """The trade-off curve of the scaled claim, from its PLD privacy profile (never above the true one)."""
        return _curve(self, float(scale))

    def lower_bound(self, rejects: Callable[[TradeOff], bool], *, min_scale: float | None = None) -> FamilyBound:
        """The least private scaled claim that ``rejects`` (a test, monotone: a rejected curve's more
        private scalings are rejected too) rejects: a binary search over :data:`SCALES` (a fixed grid,
        so that audits of the same claim share their curves). The bound is the epsilon of the smallest
        REJECTED grid scale: the grid only ever lowers it. ``min_scale`` stops the search there (a ceiling:
        :data:`CEILING_MIN_SCALE`); a bound that reaches it is ``capped``."""
        def rejected(i: int) -> bool:  # a scale too small for a PLD counts as not rejected (conservative)
            return _curve_fits(self, SCALES[i]) and rejects(self.curve(SCALES[i]))

        lo = 0 if min_scale is None else next(i for i, s in enumerate(SCALES) if s >= min_scale)
        hi = len(SCALES) - 1
        if not rejected(hi):
            return FamilyBound(epsilon=0.0, scale=None)
        if rejected(lo):
            return FamilyBound(epsilon=self.epsilon_at(SCALES[lo]), scale=SCALES[lo], capped=True)
        while hi - lo > 1:  # SCALES[lo] is not rejected, SCALES[hi] is
            mid = (lo + hi) // 2
            if rejected(mid):
                hi = mid
            else:
                lo = mid
        return FamilyBound(epsilon=self.epsilon_at(SCALES[hi]), scale=SCALES[hi])

    def best_test(self, tests: Sequence[Callable[[TradeOff], bool]]) -> tuple[int | None, float | None]:
        """Which of several monotone ``tests`` (as :meth:`lower_bound`'s) rejects the least private scaled
        claim: (its index, that smallest rejected grid scale), (None, None) when none rejects any. One binary
        search for all of them (at each scale only the tests that still reject go on), so it builds as few
        curves as one :meth:`lower_bound`; no epsilon is computed (:meth:`epsilon_at` of the scale gives it)."""
        def rejecting(i: int, alive: list[int]) -> list[int]:
            if not alive or not _curve_fits(self, SCALES[i]):
                return []
            curve = self.curve(SCALES[i])
            return [j for j in alive if tests[j](curve)]

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
def _curve_fits(mechanism: ClaimedMechanism, scale: float) -> bool:
    if scale >= 1.0:  # the claim itself was accounted at a finer discretization: anything noisier fits
        return True
    try:
        mechanism.curve(scale)
    except accounting.PldGridTooLargeError:
        return False
    return True


@functools.lru_cache(maxsize=256)
def _curve(mechanism: ClaimedMechanism, scale: float) -> TradeOff:
    grid, deltas = accounting.privacy_profile(mechanism.scaled_event(scale), reach_delta=mechanism.delta,
                                              points=CURVE_POINTS, discretization=CURVE_DISCRETIZATION)
    return TradeOff(grid, deltas)


@functools.lru_cache(maxsize=64)
def _optimistic_epsilon(mechanism: ClaimedMechanism, scale: float) -> float:
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    total = None
    for seg in mechanism.segments:
        step = pld_lib.from_gaussian_mechanism(standard_deviation=seg.noise_multiplier * scale,
                                               sampling_prob=seg.sampling_probability, pessimistic_estimate=False,
                                               use_connect_dots=False,
                                               value_discretization_interval=EPSILON_DISCRETIZATION).self_compose(seg.steps)
        total = step if total is None else total.compose(step)
    return float(max(0.0, total.get_epsilon_for_delta(mechanism.delta)))
