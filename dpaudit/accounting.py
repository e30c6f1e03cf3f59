"""Privacy accounting for every mechanism dpaudit trains with, built on ``dp_accounting``.

A privacy claim is a ``DpEvent`` (never a bare float): the trainers build one per run, ``privacy.json``
stores it (:func:`event_to_json`), and every epsilon printed anywhere is recomputed from it by
:func:`epsilon`. The privacy-loss mathematics is ``dp_accounting``'s (see "Speed" for the one
vectorized restatement, checked bit for bit against the library).

Mechanisms (DESIGN.md section 5, "Honest accounting rules"):

- per-example DP-SGD: ``steps`` Poisson-subsampled Gaussian steps, add/remove-one adjacency
  (:func:`dpsgd_event`);
- batch-size schedules (Anil et al. 2021) and per-epoch noise schedules (eDP-SGD's linear and
  exponential decay): a ``ComposedDpEvent`` of one ``SelfComposedDpEvent`` per segment
  (:func:`schedule_event`, :func:`batch_schedule_segments`, :func:`noise_schedule_segments`);
- micro-batch clipping: one example moves one clipped micro-batch gradient by up to 2C, so the
  effective noise multiplier is sigma / 2 unless the micro-batch size is 1
  (:func:`microbatch_sensitivity_factor`); per-layer clip norms combine as sqrt(sum C_l^2)
  (:func:`combined_clip_norm`);
- fixed-size batches sampled without replacement, for users who insist: replace-one adjacency
  (sensitivity 2C, so the event carries sigma / 2), RDP only, and labelled as such
  (:func:`fixed_size_event`, :data:`FIXED_SIZE_LABEL`);
- delta defaults well below 1/N (:func:`default_delta`) and a canary repeated f times is covered
  only by group privacy (:func:`group_privacy`).

Speed: one PLD evaluation of a 20K-step run at the default discretization costs seconds, most of it
building the single-step privacy loss distribution in a Python loop over ~160K grid points. That
loop is the one place where dp_accounting's formulas are restated here, as numpy array operations
(:class:`_VectorizedGaussianPrivacyLoss`), and tests check that the distribution it yields is
bit-identical to the library's. :func:`epsilon` composes the same ``dp_accounting`` objects as
``PLDAccountant`` (bit-identical results) and caches single steps,
self-composed segments and composed prefixes, and memoizes results. :func:`calibrate_noise` and
the reverse searches walk a ladder of accountants, cheap to exact (RDP on a few orders, PLD at a
coarse discretization, then the accountant of record), so that the accountant of record is called
about once.

References:
  Anil et al. 2021, "Large-Scale Differentially Private BERT", section 3.
  Sander et al. 2023, "TAN Without a Burn: Scaling Laws of DP-SGD", section 3.
  McMahan et al. 2018 / TF Privacy ``used_microbatching``: sensitivity 2C for micro-batches.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import math
import numbers
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import attr
import numpy as np
from absl import logging as absl_logging
from dp_accounting import dp_event
from dp_accounting.dp_event import (
    ComposedDpEvent,
    DpEvent,
    GaussianDpEvent,
    NonPrivateDpEvent,
    NoOpDpEvent,
    PoissonSampledDpEvent,
    SampledWithoutReplacementDpEvent,
    SelfComposedDpEvent,
)
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from dp_accounting.privacy_accountant import NeighboringRelation
from dp_accounting.rdp import rdp_privacy_accountant

from dpaudit.errors import UserInputError

__all__ = [
    "ACCOUNTANTS",
    "Accountant",
    "DEFAULT_DELTA_RULE",
    "FIXED_SIZE_LABEL",
    "GROUP_PRIVACY_BOUND",
    "REPLACE_ONE_FACTOR",
    "PLD_DISCRETIZATION",
    "PLD_MAX_GRID_POINTS",
    "PLD_MIN_DELTA",
    "PldGridTooLargeError",
    "SIMULATION_LABEL",
    "Segment",
    "TAN_VALID_ABOVE",
    "TanSimulation",
    "TanValidityWarning",
    "batch_schedule_segments",
    "calibrate_noise",
    "clear_caches",
    "combined_clip_norm",
    "default_delta",
    "delta_for_epsilon",
    "delta_warning",
    "dpsgd_event",
    "epsilon",
    "event_from_json",
    "event_to_json",
    "exponential_decay_sigmas",
    "fixed_size_event",
    "group_privacy",
    "is_fixed_size",
    "linear_decay_sigmas",
    "max_batch_size",
    "max_steps",
    "microbatch_sensitivity_factor",
    "noise_schedule_segments",
    "schedule_event",
    "sliced_microbatch_sensitivity_factor",
    "subsampled_gaussian_pld",
    "tan_epsilon",
    "tan_eta",
    "tan_eta_segments",
    "tan_simulate",
]

Accountant = Literal["pld", "rdp"]
ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")

#: ``PLDAccountant``'s default value discretization: the final epsilon is always computed at it.
PLD_DISCRETIZATION = 1e-4
#: Coarser PLD used only to locate roots before the accountant of record is called.
_PLD_MEDIUM_DISCRETIZATION = 1e-3
#: A few RDP orders: a valid (looser) upper bound on epsilon, ~20x cheaper than the default 156.
_BRACKET_RDP_ORDERS = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0,
                       32.0, 48.0, 64.0, 128.0, 256.0)
#: Most points any one PLD array may hold while an event is accounted (single step, self-composed
#: segment, or the composition of segments). Composing costs ~85 bytes per point at its peak, so this
#: bounds one PLD evaluation at ~0.4 GB and a few seconds. Realistic runs stay far below it (Anil et
#: al.'s 20K steps at sigma 0.49: ~0.5M points; q = 0.01, sigma 0.5, 10K steps, epsilon 43: 1.2M);
#: it is passed only at small noise multipliers, where the privacy loss spans ~1 / (sigma^2 x
#: discretization) points and epsilon is in the hundreds (q = 0.3, sigma 0.6, 1K steps: RDP 665).
PLD_MAX_GRID_POINTS = 2**22
#: dp_accounting's tail mass truncated at each (self-)composition (its default).
_TAIL_MASS_TRUNCATION = 1e-15
#: Smallest delta at which PLD epsilons are computed. dp_accounting composes PLDs by FFT in double
#: precision: each grid point carries round-off of ~1e-16, summed over up to millions of points, and
#: every truncated tail (1e-15 per composition) is sent to infinite loss. Below ~1e-10 these errors
#: reach a visible share of delta. Checked against the closed form of a composed Gaussian (q = 1):
#: at delta 1e-12 and 1e-15 PLD gave epsilons BELOW the exact value (unsound), and at delta <= 1e-15
#: "inf" for runs with plenty of noise (issue 16 item 5). There RDP (exact arithmetic of a valid bound,
#: at any delta) is the accountant of record; PLD refuses with this reason.
PLD_MIN_DELTA = 1e-10
#: The TAN approximation of Sander et al. holds only above this noise multiplier ("privacy wall").
TAN_VALID_ABOVE = 2.0

FIXED_SIZE_LABEL = ("fixed-size batches sampled without replacement: replace-one adjacency (sensitivity 2C: "
                    "the accountant sees sigma / 2), RDP accountant only; NOT the add/remove Poisson guarantee "
                    "the rest of dpaudit reports")
SIMULATION_LABEL = ("NON-PRIVATE TAN simulation: same per-step signal-to-noise ratio and steps as the "
                    "reference run, but its own epsilon is far larger; never report it as private")

#: Replace-one adjacency: one example swapped for another moves the clipped sum by up to 2C.
REPLACE_ONE_FACTOR = 2.0

_ADD_OR_REMOVE = NeighboringRelation.ADD_OR_REMOVE_ONE
_REPLACE_ONE = NeighboringRelation.REPLACE_ONE


class PldGridTooLargeError(UserInputError):
    """The PLD of an event would exceed :data:`PLD_MAX_GRID_POINTS` (a noise multiplier far too small).

    A :class:`UserInputError`: the command line shows it as a one-line error instead of letting the
    accountant exhaust memory.
    """

    def __init__(self, points: int, discretization: float, sigma: float) -> None:
        super().__init__(
            f"PLD accounting of this run would need ~{points:,} grid points (limit {PLD_MAX_GRID_POINTS:,}) at "
            f"discretization {discretization:g}: noise multiplier {sigma:.4g} is too small for it (its epsilon is "
            f"enormous anyway); add noise, or use the RDP accountant.")
        self.points = points


class TanValidityWarning(UserWarning):
    """eps_TAN was asked for a noise multiplier at or below 2, where Sander et al.'s approximation fails."""


# --------------------------------------------------------------------------------------------------
# Mechanisms as DpEvents
# --------------------------------------------------------------------------------------------------


def _require_real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}.")
    return value


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


@dataclass(frozen=True, kw_only=True)
class Segment:
    """`steps` consecutive steps with the same mechanism.

    Attributes:
      steps: number of DP-SGD steps in the segment (>= 1).
      sampling_probability: q of Poisson sampling (expected batch / N), in (0, 1]. For fixed-size
        shuffled batches it is batch / N and the epsilon assumes Poisson sampling (the ledger's
        ``sampling`` label says so).
      noise_multiplier: noise std on the SUM of clipped gradients divided by the clip norm C; 0 means
        no noise (epsilon is infinite).
      sensitivity_factor: how many C one example can move the clipped sum: 1 for per-example
        clipping, 2 for micro-batch clipping (see :func:`microbatch_sensitivity_factor`). The
        accountant sees noise_multiplier / sensitivity_factor.
    """

    steps: int
    sampling_probability: float
    noise_multiplier: float
    sensitivity_factor: float = 1.0

    def __post_init__(self) -> None:
        _require_int("steps", self.steps, 1)
        q = _require_real("sampling_probability", self.sampling_probability)
        if not 0.0 < q <= 1.0:
            raise ValueError(f"sampling_probability must be in (0, 1], got {self.sampling_probability}.")
        sigma = _require_real("noise_multiplier", self.noise_multiplier)
        if sigma < 0.0:
            raise ValueError(f"noise_multiplier must be >= 0, got {self.noise_multiplier}.")
        factor = _require_real("sensitivity_factor", self.sensitivity_factor)
        if factor < 1.0:
            raise ValueError(f"sensitivity_factor must be >= 1 (1 per-example, 2 micro-batch), "
                             f"got {self.sensitivity_factor}.")
        # Store plain Python numbers so that JSON and equality behave (numpy scalars, ints for floats).
        object.__setattr__(self, "steps", int(self.steps))
        object.__setattr__(self, "sampling_probability", q)
        object.__setattr__(self, "noise_multiplier", sigma)
        object.__setattr__(self, "sensitivity_factor", factor)

    @property
    def effective_noise_multiplier(self) -> float:
        """The noise multiplier the accountant sees: noise_multiplier / sensitivity_factor."""
        return self.noise_multiplier / self.sensitivity_factor

    @property
    def mechanism(self) -> tuple[float, float]:
        """(q, effective sigma): two segments with equal mechanisms compose like one longer segment."""
        return (self.sampling_probability, self.effective_noise_multiplier)

    def step_event(self) -> DpEvent:
        """One step of this segment as a DpEvent."""
        return PoissonSampledDpEvent(self.sampling_probability, GaussianDpEvent(self.effective_noise_multiplier))

    def event(self) -> DpEvent:
        """All `steps` steps: ``SelfComposedDpEvent(PoissonSampledDpEvent(q, Gaussian(sigma_eff)), steps)``."""
        return SelfComposedDpEvent(self.step_event(), self.steps)

    def with_steps(self, steps: int) -> Segment:
        return dataclasses.replace(self, steps=steps)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Any, *, where: str = "segment") -> Segment:
        """Inverse of :meth:`to_json`; bad input raises :class:`UserInputError` naming `where`."""
        if not isinstance(obj, dict):
            raise UserInputError(f"{where}: expected an object with steps, sampling_probability, "
                                 f"noise_multiplier, got {obj!r}.")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(obj) - names)
        if unknown:
            raise UserInputError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(names))}.")
        try:
            return cls(**obj)
        except (TypeError, ValueError) as err:
            raise UserInputError(f"{where}: {err}") from None


def dpsgd_event(*, noise_multiplier: float, sampling_probability: float, steps: int,
                sensitivity_factor: float = 1.0) -> DpEvent:
    """Per-example DP-SGD: `steps` Poisson-subsampled Gaussian steps (add/remove-one adjacency).

    With micro-batch clipping pass ``sensitivity_factor=2`` (see :func:`microbatch_sensitivity_factor`).
    """
    return Segment(steps=steps, sampling_probability=sampling_probability, noise_multiplier=noise_multiplier,
                   sensitivity_factor=sensitivity_factor).event()


def _merge_adjacent(segments: Sequence[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for segment in segments:
        if not isinstance(segment, Segment):
            raise TypeError(f"segments must be Segment instances, got {type(segment).__name__}.")
        if merged and merged[-1].mechanism == segment.mechanism:
            merged[-1] = merged[-1].with_steps(merged[-1].steps + segment.steps)
        else:
            merged.append(segment)
    return merged


def schedule_event(segments: Sequence[Segment]) -> DpEvent:
    """A ``ComposedDpEvent`` of one ``SelfComposedDpEvent`` per segment (variable batch or sigma).

    Consecutive segments with the same (q, effective sigma) are merged first, which is exact (they
    are the same mechanism) and makes PLD accounting cheaper. An empty schedule is an empty
    composition (epsilon 0).
    """
    return ComposedDpEvent([segment.event() for segment in _merge_adjacent(segments)])


def batch_schedule_segments(*, dataset_size: int, schedule: Sequence[tuple[int, int]], noise_multiplier: float,
                            sensitivity_factor: float = 1.0) -> list[Segment]:
    """Segments for a batch-size schedule ``[(steps, expected_batch_size), ...]`` at one sigma (q = B / N)."""
    n = _require_int("dataset_size", dataset_size, 1)
    segments = []
    for index, item in enumerate(schedule):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"schedule[{index}] must be (steps, expected_batch_size), got {item!r}.")
        steps, batch = item
        batch = _require_int(f"schedule[{index}] batch size", batch, 1)
        if batch > n:
            raise ValueError(f"schedule[{index}] batch size must be <= dataset_size {n}, got {batch}.")
        segments.append(Segment(steps=steps, sampling_probability=batch / n, noise_multiplier=noise_multiplier,
                                sensitivity_factor=sensitivity_factor))
    return segments


def noise_schedule_segments(*, sampling_probability: float, steps_per_epoch: int, sigmas: Sequence[float],
                            sensitivity_factor: float = 1.0) -> list[Segment]:
    """One segment per epoch (or per stage) with its own sigma, e.g. eDP-SGD's decayed sigmas."""
    return [Segment(steps=steps_per_epoch, sampling_probability=sampling_probability, noise_multiplier=sigma,
                    sensitivity_factor=sensitivity_factor) for sigma in sigmas]


def _check_decay(sigma0: float, k: float, epochs: int) -> tuple[float, float, int]:
    """Validated (sigma0 > 0, k >= 0, epochs >= 1) of a noise-decay schedule."""
    sigma0 = _require_real("sigma0", sigma0)
    k = _require_real("k", k)
    epochs = _require_int("epochs", epochs, 1)
    if sigma0 <= 0.0:
        raise ValueError(f"sigma0 must be > 0, got {sigma0}.")
    if k < 0.0:
        raise ValueError(f"k must be >= 0, got {k}.")
    return sigma0, k, epochs


def linear_decay_sigmas(sigma0: float, k: float, epochs: int, sigma_min: float) -> list[float]:
    """eDP-SGD linear decay fixed in advance: sigma_e = max(sigma0 * (1 - k * e), sigma_min), e = 0..epochs-1.

    The floor must be positive: zero noise is not differentially private.
    """
    sigma0, k, epochs = _check_decay(sigma0, k, epochs)
    sigma_min = _require_real("sigma_min", sigma_min)
    if sigma_min <= 0.0:
        raise ValueError(f"sigma_min must be > 0 (zero noise is not DP), got {sigma_min}.")
    return [max(sigma0 * (1.0 - k * e), sigma_min) for e in range(epochs)]


def exponential_decay_sigmas(sigma0: float, k: float, epochs: int) -> list[float]:
    """eDP-SGD exponential decay fixed in advance: sigma_e = sigma0 * exp(-k * e), e = 0..epochs-1."""
    sigma0, k, epochs = _check_decay(sigma0, k, epochs)
    return [sigma0 * math.exp(-k * e) for e in range(epochs)]


def microbatch_sensitivity_factor(microbatch_size: int) -> float:
    """1.0 for per-example clipping (micro-batch size 1), else 2.0.

    Adding or removing one example changes one clipped micro-batch gradient by up to 2C, not C
    (TF Privacy's ``used_microbatching=True``). This assumes examples are assigned to micro-batches
    by a rule that does not depend on other examples (hash of the id, or Poisson sampling per
    shard); slicing a shuffled batch into k pieces needs :func:`sliced_microbatch_sensitivity_factor`.
    """
    size = _require_int("microbatch_size", microbatch_size, 1)
    return 1.0 if size == 1 else 2.0


def sliced_microbatch_sensitivity_factor(num_microbatches: int) -> float:
    """2k: a shuffled batch sliced into k micro-batches lets one example shift others across all k."""
    return 2.0 * _require_int("num_microbatches", num_microbatches, 1)


def combined_clip_norm(layer_clip_norms: Sequence[float]) -> float:
    """The clip norm C of per-layer clipping: sqrt(sum_l C_l^2); the sensitivity uses this C."""
    norms = [_require_real("layer clip norm", c) for c in layer_clip_norms]
    if not norms:
        raise ValueError("layer_clip_norms must not be empty.")
    if any(c <= 0.0 for c in norms):
        raise ValueError(f"layer clip norms must be > 0, got {norms}.")
    return math.sqrt(math.fsum(c * c for c in norms))


def fixed_size_event(*, dataset_size: int, batch_size: int, steps: int, noise_multiplier: float,
                     sensitivity_factor: float = 1.0) -> DpEvent:
    """Fixed-size batches sampled WITHOUT replacement. Labelled: see :data:`FIXED_SIZE_LABEL`.

    ``dp_accounting`` accounts for this only with RDP under replace-one adjacency, a different
    neighbouring relation from the add/remove Poisson guarantee; :func:`epsilon` refuses it with PLD.
    Under replace-one, swapping one example moves the clipped sum from one clipped vector to another:
    L2 sensitivity 2C (:data:`REPLACE_ONE_FACTOR`), while ``dp_accounting``'s Gaussian takes std /
    sensitivity. So the event carries ``noise_multiplier / (2 * sensitivity_factor)``: the clipping's
    own factor (2 for micro-batches, 2k for sliced ones) multiplies the replace-one 2, a conservative
    bound (a replaced example may land in another micro-batch and move two micro-batch sums).
    """
    n = _require_int("dataset_size", dataset_size, 1)
    b = _require_int("batch_size", batch_size, 1)
    if b > n:
        raise ValueError(f"batch_size must be <= dataset_size {n}, got {b}.")
    s = _require_int("steps", steps, 1)
    sigma = _require_real("noise_multiplier", noise_multiplier)
    if sigma < 0.0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}.")
    factor = _require_real("sensitivity_factor", sensitivity_factor)
    if factor < 1.0:
        raise ValueError(f"sensitivity_factor must be >= 1, got {sensitivity_factor}.")
    effective = sigma / (REPLACE_ONE_FACTOR * factor)
    return SelfComposedDpEvent(SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(effective)), s)


# --------------------------------------------------------------------------------------------------
# Delta and group privacy
# --------------------------------------------------------------------------------------------------

#: The default-delta rule, as stated in every ``--help``.
DEFAULT_DELTA_RULE = ("default min(1e-5, 1/(10 N)): well below 1/N, since a mechanism that publishes one "
                      "random row verbatim already satisfies delta = 1/N")


def default_delta(dataset_size: int) -> float:
    """min(1e-5, 1 / (10 N)): delta well below 1/N (see :data:`DEFAULT_DELTA_RULE`).

    A delta of 1/N admits "publish a random row verbatim" as (0, 1/N)-DP, so delta must be much
    smaller than 1/N (Dwork & Roth 2014, section 2.3; Ponomareva et al. 2023, "How to DP-fy ML",
    section 5.2); 1e-5 caps it for small N.
    """
    n = _require_int("dataset_size", dataset_size, 1)
    return min(1e-5, 1.0 / (10.0 * n))


def delta_warning(delta: float, dataset_size: int | None) -> str | None:
    """A one-line warning when ``delta >= 1/N`` (None when delta is small enough or N is unknown)."""
    if dataset_size is None or delta < 1.0 / dataset_size:
        return None
    return (f"delta {delta:.3g} >= 1/N = {1.0 / dataset_size:.3g}: a mechanism that publishes one random training row "
            f"verbatim satisfies this delta; use a delta well below 1/N ({DEFAULT_DELTA_RULE}).")


#: Which group-privacy bound :func:`group_privacy` gives (stated next to every figure it produces).
GROUP_PRIVACY_BOUND = ("group privacy of (epsilon, delta)-DP for a group of f rows, by chaining the definition f "
                       "times: (f * epsilon, delta * sum_{i<f} e^(i * epsilon)), which is at most "
                       "(f * epsilon, f * e^((f-1) * epsilon) * delta) (Dwork & Roth 2014, Thm 2.2; Vadhan 2017, "
                       "Lemma 2.2); a delta >= 1 means no guarantee")


def group_privacy(epsilon: float, delta: float, group_size: int) -> tuple[float, float]:
    """(epsilon, delta) for ``group_size`` rows changed together: see :data:`GROUP_PRIVACY_BOUND`.

    A canary inserted f times is f rows of the training data: the per-row guarantee protects it only
    through this bound. Composing the per-row event f times in an accountant would NOT be group
    privacy (it models f independent releases, not f rows inside one release). The returned delta
    may exceed 1, meaning no guarantee (callers print it as such).
    """
    eps = _require_real("epsilon", epsilon)
    d = _require_real("delta", delta)
    f = _require_int("group_size", group_size, 1)
    if eps < 0 or not 0 <= d <= 1:
        raise ValueError(f"need epsilon >= 0 and delta in [0, 1], got ({epsilon}, {delta}).")
    if eps == 0:
        return 0.0, d * f
    log_geometric = f * eps + math.log(-math.expm1(-f * eps)) - math.log(math.expm1(eps))  # log sum_{i<f} e^(i eps)
    return f * eps, (math.inf if log_geometric + math.log(d or 1e-300) > 700 else d * math.exp(log_geometric))


def _walk(event: DpEvent):
    yield event
    if isinstance(event, (SelfComposedDpEvent, PoissonSampledDpEvent, SampledWithoutReplacementDpEvent)):
        yield from _walk(event.event)
    elif isinstance(event, ComposedDpEvent):
        for sub in event.events:
            yield from _walk(sub)


def is_fixed_size(event: DpEvent) -> bool:
    """True if the event contains sampling without replacement (replace-one, RDP-only accounting)."""
    return any(isinstance(e, SampledWithoutReplacementDpEvent) for e in _walk(event))


# --------------------------------------------------------------------------------------------------
# JSON round trip
# --------------------------------------------------------------------------------------------------


def _to_json_value(value: Any, path: str) -> Any:
    if isinstance(value, DpEvent):
        return _event_to_json(value, path)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{path} is {value}; JSON cannot hold it.")
        return value
    if isinstance(value, (list, tuple)):
        return [_to_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise ValueError(f"{path}: cannot serialize {type(value).__name__} {value!r}.")


def _event_to_json(event: DpEvent, path: str) -> dict[str, Any]:
    cls = type(event)
    if getattr(dp_event, cls.__name__, None) is not cls:
        raise ValueError(f"{path}: only dp_accounting.dp_event classes serialize, got {cls.__module__}.{cls.__name__}.")
    out: dict[str, Any] = {"class_name": cls.__name__}
    for field in attr.fields(cls):
        out[field.name] = _to_json_value(getattr(event, field.name), f"{path}.{field.name}")
    return out


def event_to_json(event: DpEvent) -> dict[str, Any]:
    """A JSON-ready dict: ``{"class_name": "ComposedDpEvent", "events": [...]}``, recursively.

    Only classes of ``dp_accounting.dp_event`` are written (and read back), so loading a
    ``privacy.json`` never imports arbitrary code. Floats are written by ``json`` with ``repr``,
    which round-trips them exactly, so the recomputed epsilon equals the original.
    """
    if not isinstance(event, DpEvent):
        raise TypeError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}.")
    return _event_to_json(event, "event")


def _from_json_value(value: Any, path: str) -> Any:
    if isinstance(value, dict):
        return _event_from_json(value, path)
    if isinstance(value, list):
        return [_from_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _event_from_json(obj: dict[str, Any], path: str) -> DpEvent:
    name = obj.get("class_name")
    cls = getattr(dp_event, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and issubclass(cls, DpEvent) and attr.has(cls)):
        raise UserInputError(f"{path}: unknown DpEvent class_name {name!r}; expected a dp_accounting.dp_event class.")
    fields = [f.name for f in attr.fields(cls)]
    given = set(obj) - {"class_name"}
    if given != set(fields):
        raise UserInputError(f"{path}: {name} needs fields {sorted(fields)}, got {sorted(given)}.")
    values = {f: _from_json_value(obj[f], f"{path}.{f}") for f in fields}
    try:
        return cls(**values)
    except (TypeError, ValueError) as err:
        raise UserInputError(f"{path}: cannot build {name}: {err}") from None


def event_from_json(obj: dict[str, Any]) -> DpEvent:
    """Inverse of :func:`event_to_json`; malformed input raises :class:`UserInputError`."""
    if not isinstance(obj, dict):
        raise UserInputError(f"event: expected a JSON object with class_name, got {type(obj).__name__}.")
    return _event_from_json(obj, "event")


def _event_key(event: DpEvent) -> str:
    return json.dumps(event_to_json(event), sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------------------------------
# Epsilon and delta
# --------------------------------------------------------------------------------------------------


class _Lru:
    """A tiny least-recently-used map (functools.lru_cache cannot key on unhashable DpEvents)."""

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self.data: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    def get(self, key: Any) -> Any:
        if key in self.data:
            self.data.move_to_end(key)
            return self.data[key]
        return None

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        while len(self.data) > self.maxsize:
            self.data.popitem(last=False)

    def clear(self) -> None:
        self.data.clear()


_RESULTS = _Lru(512)          # (event key, kind, value, accountant/level) -> float
_SINGLE_STEP_PLDS = _Lru(32)  # (q, sigma, discretization) -> PLD of one step
_SEGMENT_PLDS = _Lru(16)      # (q, sigma, count, discretization) -> PLD of `count` steps
_PREFIX_PLDS = _Lru(8)        # (tuple of items, discretization) -> composed PLD
_GRID_POINTS = _Lru(256)      # item -> its privacy-loss span (no PLD built; see _item_loss_span)


def clear_caches() -> None:
    """Forget every cached PLD and result (benchmarks use this to time cold calls)."""
    for cache in (_RESULTS, _SINGLE_STEP_PLDS, _SEGMENT_PLDS, _PREFIX_PLDS, _GRID_POINTS):
        cache.clear()


class _NotFlat(Exception):
    pass


def _flatten_for_pld(event: DpEvent, count: int, out: list[tuple]) -> None:
    """Mirror ``PLDAccountant._maybe_compose``: the composition items it would build, in order.

    Items: ("poisson", q, sigma, count), ("gaussian", sigma, count) or ("nonprivate",).
    """
    if isinstance(event, NoOpDpEvent):
        return
    if isinstance(event, NonPrivateDpEvent):
        out.append(("nonprivate",))
    elif isinstance(event, SelfComposedDpEvent):
        _flatten_for_pld(event.event, event.count * count, out)
    elif isinstance(event, ComposedDpEvent):
        for sub in event.events:
            _flatten_for_pld(sub, count, out)
    elif isinstance(event, GaussianDpEvent):
        out.append(("nonprivate",) if event.noise_multiplier == 0 else ("gaussian", float(event.noise_multiplier), count))
    elif isinstance(event, PoissonSampledDpEvent) and type(event.event) is GaussianDpEvent:
        if event.sampling_probability == 0:
            return
        if event.event.noise_multiplier == 0:
            out.append(("nonprivate",))
        else:
            out.append(("poisson", float(event.sampling_probability), float(event.event.noise_multiplier), count))
    else:
        raise _NotFlat


class _VectorizedGaussianPrivacyLoss(plm.GaussianPrivacyLoss):
    """``GaussianPrivacyLoss`` whose hockey-stick divergence is evaluated on a whole grid at once.

    Building the single-step PLD of a Poisson-subsampled Gaussian is ~90% one Python-level list
    comprehension in ``AdditiveNoisePrivacyLoss.get_delta_for_epsilon``: a scalar
    ``inverse_privacy_loss`` call per grid point (~160K of them at discretization 1e-4). This class
    performs the same floating-point operations as that scalar path (dp_accounting 0.6's
    ``_inverse_privacy_loss_add/remove`` and ``common.log_a_times_exp_b_plus_c``, transcribed
    operation for operation) over numpy arrays, then hands the cutoffs to dp_accounting's own
    ``mu_upper_cdf``/``mu_lower_log_cdf``. The resulting PLD is bit-identical to
    ``from_gaussian_mechanism``'s (``tests/test_accounting.py`` compares every probability), 7-15x
    sooner. Anything other than a subsampled add/remove grid goes to the library's own code.
    """

    def get_delta_for_epsilon(self, epsilon):  # same contract as the parent
        q = self.sampling_prob
        add = self.adjacency_type == plm.AdjacencyType.ADD
        if q == 1.0 or not (add or self.adjacency_type == plm.AdjacencyType.REMOVE) or np.ndim(epsilon) != 1:
            return super().get_delta_for_epsilon(epsilon)
        epsilons = np.asarray(epsilon, dtype=float)
        deltas = np.zeros_like(epsilons)
        if add:
            inverse = epsilons < -math.log1p(-q)
        else:
            inverse = epsilons > math.log1p(-q)
            deltas[~inverse] = -np.expm1(epsilons[~inverse])
        eps = epsilons[inverse]
        cutoffs = self._inverse_privacy_losses(eps, add)
        deltas[inverse] = self.mu_upper_cdf(cutoffs) - np.exp(eps + self.mu_lower_log_cdf(cutoffs))
        return np.clip(deltas, 0, 1)

    def _inverse_privacy_losses(self, losses: np.ndarray, add: bool) -> np.ndarray:
        q = self.sampling_prob
        edge = -math.log(1 - q) if add else math.log(1 - q)
        # loss without subsampling = +-log(a exp(b) + c) with a = 1/q, b = -+loss, c = 1 - 1/q < 0.
        b = -losses if add else losses
        a, c = 1 / q, 1 - 1 / q
        d = b + np.log(a)
        log_minus_c = np.log(-c)
        if np.any(log_minus_c >= d[b != 0]):
            raise ValueError("privacy loss outside the subsampled Gaussian's range")
        with np.errstate(divide="ignore"):
            unsampled = np.where(b == 0, np.log(a + c), d + np.log1p(-np.exp(log_minus_c - d)))
        close = np.abs(losses - edge) <= 1e-9 * np.maximum(np.abs(losses), abs(edge))  # math.isclose
        if add:
            return self._inverse_privacy_loss_without_subsampling_add(np.where(close, math.inf, -unsampled))
        return self._inverse_privacy_loss_without_subsampling_remove(np.where(close, -math.inf, unsampled))


#: dp_accounting's own PMF construction from a monotone privacy loss (private; absent -> slow path).
_CREATE_PMF = getattr(pld_lib, "_create_pld_pmf_from_monotone_privacy_loss", None)


def subsampled_gaussian_pld(noise_multiplier: float, sampling_probability: float,
                            discretization: float = PLD_DISCRETIZATION) -> pld_lib.PrivacyLossDistribution:
    """``pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q)`` (add/remove, connect-the-dots,
    pessimistic), bit for bit, built with :class:`_VectorizedGaussianPrivacyLoss`."""
    sigma, q = float(noise_multiplier), float(sampling_probability)
    if q == 1.0 or _CREATE_PMF is None:
        return pld_lib.from_gaussian_mechanism(standard_deviation=sigma, value_discretization_interval=discretization,
                                               sampling_prob=q, neighboring_relation=_ADD_OR_REMOVE)

    def pmf(adjacency: plm.AdjacencyType):
        loss = _VectorizedGaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency)
        return _CREATE_PMF(loss, pessimistic_estimate=True, value_discretization_interval=discretization, use_connect_dots=True)

    return pld_lib.PrivacyLossDistribution(pmf(plm.AdjacencyType.REMOVE), pmf(plm.AdjacencyType.ADD))


def _chernoff_range(probs: np.ndarray, count: int, tail_mass: float) -> int:
    """Length of the range ``pld_common.compute_self_convolve_bounds`` keeps when self-composing `probs`
    `count` times (same orders and bound, all orders in one array operation)."""
    n = len(probs)
    orders = np.concatenate((np.arange(-20, 0), np.arange(1, 21))) / n
    with np.errstate(divide="ignore"):
        log_probs = np.log(np.asarray(probs, dtype=float))
    exponents = orders[:, None] * np.arange(n)[None, :] + log_probs[None, :]
    peak = exponents.max(axis=1, keepdims=True)
    log_mgf = (peak + np.log(np.exp(exponents - peak).sum(axis=1, keepdims=True)))[:, 0]
    with np.errstate(over="ignore", invalid="ignore"):
        bounds = (count * log_mgf + math.log(2.0 / tail_mass)) / orders
    upper = min([(n - 1) * count, *(math.ceil(b) for b, o in zip(bounds, orders) if o > 0 and math.isfinite(b))])
    lower = max([0, *(math.floor(b) for b, o in zip(bounds, orders) if o < 0 and math.isfinite(b))])
    return upper - lower + 1


#: Relative grid of the sigmas at which :func:`_item_loss_span` is measured.
_SPAN_SIGMA_STEP = math.log1p(0.04)


def _item_loss_span(item: tuple) -> tuple[float, float, float]:
    """(lowest, highest single-step privacy loss on the PLD grid, width in loss units of the self-composed
    PLD's kept range). No PLD is built at the accountant's discretization: the single step's bounds are
    dp_accounting's connect-the-dots bounds, and the composed width is dp_accounting's Chernoff range
    (:func:`_chernoff_range`) measured on the same PLD built on a grid of ~1K points and scaled back."""
    cached = _GRID_POINTS.get(item)
    if cached is not None:
        return cached
    if item[0] == "gaussian":
        losses = [plm.GaussianPrivacyLoss(item[1] / math.sqrt(item[2]))]
        count, q = 1, 1.0
    else:
        _, q, sigma, count = item
        losses = [_VectorizedGaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency)
                  for adjacency in (plm.AdjacencyType.REMOVE, plm.AdjacencyType.ADD)]
    bounds = [loss.connect_dots_bounds() for loss in losses]
    low = min(b.epsilon_lower for b in bounds)
    high = max(b.epsilon_upper for b in bounds)
    width = (high - low) * count
    if count > 1 and _CREATE_PMF is not None and q < 1.0:
        coarse = (high - low) / 1024
        width = 0.0
        for loss in losses:
            pmf = _CREATE_PMF(loss, pessimistic_estimate=True, value_discretization_interval=coarse,
                              use_connect_dots=True)
            dense = pmf if hasattr(pmf, "_probs") else pmf.to_dense_pmf()
            probs = dense._probs  # pylint: disable=protected-access
            width = max(width, _chernoff_range(probs, count, _TAIL_MASS_TRUNCATION) * coarse)
    span = (low, high, width)
    _GRID_POINTS.put(item, span)
    return span


def _item_grid_points(item: tuple, discretization: float) -> int:
    """Points of the item's PLD at `discretization` once self-composed, estimated without building it.

    The span is measured at sigma rounded down to a 4% grid: a slight over-estimate (the grid grows as
    sigma falls), shared by the nearby sigmas a calibration evaluates, so that it is measured about
    once per calibration.
    """
    sigma = item[-2]
    rounded = math.exp(math.floor(math.log(sigma) / _SPAN_SIGMA_STEP) * _SPAN_SIGMA_STEP)
    low, high, width = _item_loss_span((*item[:-2], rounded, item[-1]))
    single = math.ceil(high / discretization) - math.floor(low / discretization) + 1
    count = item[-1] if item[0] == "poisson" else 1
    return min(max(single, math.ceil(width / discretization) + 1), (single - 1) * count + 1)


def _check_grid(items: Sequence[tuple], discretization: float) -> None:
    """Raise :class:`PldGridTooLargeError` if some PLD array of this composition would be too large.

    Composing two PMFs convolves them (the lengths add before the tails are truncated), so the running
    sum of the items' sizes bounds every array along the way.
    """
    total = 1
    for item in items:
        if item[0] == "nonprivate":
            continue
        total += _item_grid_points(item, discretization) - 1
        if total > PLD_MAX_GRID_POINTS:
            sigma = min(it[-2] for it in items if it[0] != "nonprivate")
            raise PldGridTooLargeError(total, discretization, sigma)


def _item_pld(item: tuple, discretization: float):
    if item[0] == "gaussian":
        _, sigma, count = item
        return pld_lib.from_gaussian_mechanism(standard_deviation=sigma / math.sqrt(count),
                                               value_discretization_interval=discretization,
                                               neighboring_relation=_ADD_OR_REMOVE)
    _, q, sigma, count = item
    key = (q, sigma, count, discretization)
    composed = _SEGMENT_PLDS.get(key)
    if composed is None:
        single = _SINGLE_STEP_PLDS.get((q, sigma, discretization))
        if single is None:
            single = subsampled_gaussian_pld(sigma, q, discretization)
            _SINGLE_STEP_PLDS.put((q, sigma, discretization), single)
        composed = single.self_compose(count)
        _SEGMENT_PLDS.put(key, composed)
    return composed


def _composed_pld(items: tuple[tuple, ...], discretization: float):
    """identity.compose(item_1).compose(item_2)... exactly as PLDAccountant does, reusing prefixes."""
    start, pld = 0, None
    for end in range(len(items), 0, -1):
        pld = _PREFIX_PLDS.get((items[:end], discretization))
        if pld is not None:
            start = end
            break
    if pld is None:
        pld = pld_lib.identity(value_discretization_interval=discretization)
    for end in range(start + 1, len(items) + 1):
        pld = pld.compose(_item_pld(items[end - 1], discretization))
        if end >= len(items) - 1:  # keep the full run and the run minus its last segment (ledger growth)
            _PREFIX_PLDS.put((items[:end], discretization), pld)
    return pld


def _check_pld_delta(delta: float) -> None:
    if delta < PLD_MIN_DELTA:
        raise UserInputError(
            f"delta {delta:g} is below {PLD_MIN_DELTA:g}, where the PLD accountant is not reliable (its FFT "
            f"round-off, ~1e-16 per grid point, can exceed delta and even make epsilon too small); use the RDP "
            f"accountant, a valid bound at any delta, or a larger delta.")


def _pld_value(event: DpEvent, kind: str, value: float, discretization: float) -> float:
    if kind == "epsilon":
        _check_pld_delta(value)
    items: list[tuple] = []
    try:
        _flatten_for_pld(event, 1, items)
    except _NotFlat:
        from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

        accountant = PLDAccountant(_ADD_OR_REMOVE, value_discretization_interval=discretization)
        accountant.compose(event)
        return float(accountant.get_epsilon(value) if kind == "epsilon" else accountant.get_delta(value))
    if any(item[0] == "nonprivate" for item in items):
        return math.inf if kind == "epsilon" else 1.0
    if _PREFIX_PLDS.get((tuple(items), discretization)) is None:
        _check_grid(items, discretization)
    pld = _composed_pld(tuple(items), discretization)
    return float(pld.get_epsilon_for_delta(value) if kind == "epsilon" else pld.get_delta_for_epsilon(value))


def _rdp_value(event: DpEvent, kind: str, value: float, orders: Sequence[float] | None) -> float:
    relation = _REPLACE_ONE if is_fixed_size(event) else _ADD_OR_REMOVE
    accountant = rdp_privacy_accountant.RdpAccountant(list(orders) if orders else None, relation)
    if not accountant.supports(event):
        raise UserInputError("the RDP accountant cannot account for this event (sampling without replacement "
                             "cannot be mixed with Poisson sampling in one run).")
    with _quiet_absl():
        accountant.compose(event)
        return float(accountant.get_epsilon(value) if kind == "epsilon" else accountant.get_delta(value))


@contextlib.contextmanager
def _quiet_absl():
    """Silence dp_accounting's absl warnings while RDP is evaluated.

    At small sigma the fractional-order series can fail to converge; RdpAccountant then drops that
    order (the minimum over the remaining orders is still a valid bound) and logs a warning per
    order, which floods the terminal during calibration without telling the user anything.
    """
    level = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(level)


def _check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise UserInputError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}.")


def _value(event: DpEvent, kind: str, value: float, level: tuple) -> float:
    """epsilon (kind="epsilon", value=delta) or delta (kind="delta", value=epsilon) at one accountant level.

    level: ("pld", discretization) or ("rdp", orders or None for dp_accounting's defaults).
    """
    if not isinstance(event, DpEvent):
        raise TypeError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}.")
    if level[0] == "pld" and is_fixed_size(event):
        raise UserInputError("PLD cannot account for fixed-size sampling without replacement in dp_accounting; "
                             "use the RDP accountant (replace-one adjacency) or Poisson sampling.")
    key = (_event_key(event), kind, value, level)
    cached = _RESULTS.get(key)
    if cached is None:
        cached = _pld_value(event, kind, value, level[1]) if level[0] == "pld" else _rdp_value(event, kind, value, level[1])
        _RESULTS.put(key, cached)
    return cached


def _level(accountant: str) -> tuple:
    return ("pld", PLD_DISCRETIZATION) if accountant == "pld" else ("rdp", None)


def epsilon(event: DpEvent, delta: float, accountant: Accountant = "pld") -> float:
    """Epsilon of `event` at `delta`, by ``dp_accounting``'s PLD (default) or RDP accountant.

    PLD uses ``PLDAccountant``'s defaults (add/remove-one, discretization 1e-4) and returns exactly
    what it returns; RDP uses ``RdpAccountant``'s default orders. Events with sampling without
    replacement are accounted by RDP under replace-one adjacency (PLD refuses them). A run with a
    non-private step has epsilon ``inf``. Results are memoized: recomputing is free.

    PLD refuses (:class:`UserInputError`) a delta below :data:`PLD_MIN_DELTA`, where its FFT round-off
    makes the result unreliable, and an event whose PLD would exceed :data:`PLD_MAX_GRID_POINTS`
    (:class:`PldGridTooLargeError`: a tiny noise multiplier); RDP handles both.
    """
    _check_accountant(accountant)
    delta = _require_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise UserInputError(f"delta must be in (0, 1), got {delta}.")
    return _value(event, "epsilon", delta, _level(accountant))


def delta_for_epsilon(event: DpEvent, epsilon: float, accountant: Accountant = "pld") -> float:
    """The smallest delta for which `event` is (epsilon, delta)-DP, by the chosen accountant."""
    _check_accountant(accountant)
    eps = _require_real("epsilon", epsilon)
    if eps < 0.0:
        raise UserInputError(f"epsilon must be >= 0, got {eps}.")
    return _value(event, "delta", eps, _level(accountant))


# --------------------------------------------------------------------------------------------------
# TAN (Sander et al. 2023, section 3)
# --------------------------------------------------------------------------------------------------


def tan_eta(*, sampling_probability: float, steps: int, noise_multiplier: float) -> float:
    """Individual signal-to-noise ratio eta = q sqrt(S / 2) / sigma (eta^2 = q^2 S / (2 sigma^2), Def. 3.1)."""
    q = _require_real("sampling_probability", sampling_probability)
    s = _require_int("steps", steps, 0)
    sigma = _require_real("noise_multiplier", noise_multiplier)
    if sigma <= 0.0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}.")
    return q * math.sqrt(s / 2.0) / sigma


def tan_eta_segments(segments: Sequence[Segment]) -> float:
    """eta of a schedule: eta^2 adds over steps, eta^2 = sum_i q_i^2 S_i / (2 sigma_eff,i^2)."""
    total = 0.0
    for segment in segments:
        if segment.effective_noise_multiplier <= 0.0:
            return math.inf
        total += segment.sampling_probability ** 2 * segment.steps / (2.0 * segment.effective_noise_multiplier ** 2)
    return math.sqrt(total)


def _tan_epsilon_of_eta(eta: float, delta: float) -> float:
    return eta * eta + 2.0 * eta * math.sqrt(math.log(1.0 / delta))


def _warn_wall(sigma: float) -> None:
    if sigma <= TAN_VALID_ABOVE:
        warnings.warn(f"eps_TAN is only valid for sigma > {TAN_VALID_ABOVE:g} (Sander et al.'s privacy wall); "
                      f"sigma = {sigma:.4g}: the true epsilon can be far larger. Use epsilon().",
                      TanValidityWarning, stacklevel=3)


def tan_epsilon(*, sampling_probability: float, steps: int, noise_multiplier: float, delta: float) -> float:
    """eps_TAN = eta^2 + 2 eta sqrt(log(1/delta)) (Sander et al. eq. 4), an approximation of RDP's epsilon.

    Warns with :class:`TanValidityWarning` when sigma <= 2, where the approximation breaks down.
    """
    delta = _require_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}.")
    eta = tan_eta(sampling_probability=sampling_probability, steps=steps, noise_multiplier=noise_multiplier)
    _warn_wall(float(noise_multiplier))
    return _tan_epsilon_of_eta(eta, delta)


def _tan_eta_for_epsilon(target_epsilon: float, delta: float) -> float:
    """Invert eps_TAN: the eta with eta^2 + 2 eta sqrt(L) = eps, L = log(1/delta)."""
    root_l = math.sqrt(math.log(1.0 / delta))
    return math.sqrt(root_l * root_l + target_epsilon) - root_l


@dataclass(frozen=True, kw_only=True)
class TanSimulation:
    """A cheap stand-in for a reference DP run at equal eta_step = q / (sqrt(2) sigma) and equal steps.

    Labelled non-private everywhere (Sander et al. 3.4): at the smaller batch its own epsilon is far
    above the reference's; it only predicts the reference run's accuracy.
    """

    dataset_size: int
    steps: int
    reference_batch_size: int
    reference_noise_multiplier: float
    simulated_batch_size: int
    simulated_noise_multiplier: float
    eta_step: float
    eta: float
    compute_saving: float
    private: bool = False
    label: str = SIMULATION_LABEL

    @property
    def reference_sampling_probability(self) -> float:
        return self.reference_batch_size / self.dataset_size

    @property
    def simulated_sampling_probability(self) -> float:
        return self.simulated_batch_size / self.dataset_size

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["reference_sampling_probability"] = self.reference_sampling_probability
        out["simulated_sampling_probability"] = self.simulated_sampling_probability
        return out


def tan_simulate(*, dataset_size: int, batch_size: int, noise_multiplier: float, steps: int,
                 simulated_batch_size: int) -> TanSimulation:
    """The (B, sigma) that keeps eta_step and steps of a reference run: sigma_B = sigma * B / B_ref."""
    n = _require_int("dataset_size", dataset_size, 1)
    b_ref = _require_int("batch_size", batch_size, 1)
    b = _require_int("simulated_batch_size", simulated_batch_size, 1)
    s = _require_int("steps", steps, 1)
    if b_ref > n or b > n:
        raise ValueError(f"batch sizes must be <= dataset_size {n}, got {b_ref} and {b}.")
    sigma = _require_real("noise_multiplier", noise_multiplier)
    if sigma <= 0.0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}.")
    eta_step = (b_ref / n) / (math.sqrt(2.0) * sigma)
    return TanSimulation(dataset_size=n, steps=s, reference_batch_size=b_ref, reference_noise_multiplier=sigma,
                         simulated_batch_size=b, simulated_noise_multiplier=sigma * b / b_ref, eta_step=eta_step,
                         eta=eta_step * math.sqrt(s), compute_saving=b_ref / b)


# --------------------------------------------------------------------------------------------------
# Calibration and reverse searches: a ladder of accountants, cheap to exact
# --------------------------------------------------------------------------------------------------


@dataclass
class _Point:
    x: float       # search coordinate; epsilon decreases as x grows (feasible side is high x)
    param: float   # the parameter value actually evaluated
    g: float       # log(epsilon / target); <= 0 means within budget


class _Ladder:
    """Finds the boundary of {p : epsilon(p) <= target} for a parameter p on which epsilon is monotone.

    Works in x = log p (or -log p when epsilon grows with p), so that epsilon always decreases in x.
    Each rung is an epsilon function, cheap ones first; they are all upper bounds of similar shape,
    so a root found on one rung is an excellent start on the next, and the local slope carries over.
    Only the last rung (the accountant of record) decides feasibility.
    """

    def __init__(self, evaluate: Callable[[float, tuple], float], target: float, *, increasing: bool,
                 rtol: float, integer: bool, bounds: tuple[float, float]) -> None:
        self.evaluate = evaluate
        self.target = target
        self.sign = -1.0 if increasing else 1.0
        self.xtol = math.log1p(rtol)
        self.integer = integer
        xs = sorted(self.sign * math.log(b) for b in bounds)
        self.x_min, self.x_max = xs
        self.evaluations: list[tuple[tuple, float, float]] = []

    # p <-> x -----------------------------------------------------------------------------------------
    def _param(self, x: float, toward_feasible: bool) -> float:
        x = min(max(x, self.x_min), self.x_max)
        p = math.exp(self.sign * x)
        if not self.integer:
            return p
        # Rounding toward the feasible side keeps a point aimed at "just feasible" feasible.
        feasible_up = self.sign > 0
        p = math.ceil(p - 1e-9) if toward_feasible == feasible_up else math.floor(p + 1e-9)
        lo, hi = sorted(math.exp(self.sign * b) for b in (self.x_min, self.x_max))
        return float(min(max(p, round(lo)), round(hi)))

    def _point(self, level: tuple, p: float) -> _Point:
        eps = self.evaluate(p, level)
        self.evaluations.append((level, p, eps))
        if eps <= 0.0:
            g = -math.inf
        elif math.isinf(eps):
            g = math.inf
        else:
            g = math.log(eps / self.target)
        return _Point(self.sign * math.log(p), p, g)

    # one rung ------------------------------------------------------------------------------------------
    def solve(self, level: tuple, x0: float, slope: float, *, final: bool, certify: bool = False,
              root_tol: float = 0.0, max_evals: int = 60) -> tuple[_Point | None, _Point | None, float, float]:
        """Returns (feasible point closest to the boundary, infeasible point, root estimate, slope).

        A rung that is not `final` only locates the root: it evaluates at its root estimates and stops
        once an update moves the estimate by less than `root_tol`. The final rung aims just on the
        feasible side of the root and stops once a feasible point is within xtol of the boundary.
        """
        points: dict[float, _Point] = {}
        lo: _Point | None = None  # largest x seen infeasible
        hi: _Point | None = None  # smallest x seen feasible
        x_next, toward_feasible = x0, True
        root = x0
        for _ in range(max_evals):
            p = self._param(x_next, toward_feasible)
            x = self.sign * math.log(p)
            if x in points and self.integer:  # rounded onto a known point: try rounding the other way
                p = self._param(x_next, not toward_feasible)
                x = self.sign * math.log(p)
                if lo is not None and hi is not None and not lo.x < x < hi.x:
                    break
            if x in points:  # nothing new to learn at this resolution
                break
            point = points[x] = self._point(level, p)
            if point.g > 0 and (lo is None or point.x > lo.x):
                lo = point
            if point.g <= 0 and (hi is None or point.x < hi.x):
                hi = point
            slope = self._slope(points, slope)
            root = self._root(lo, hi, point, slope)
            width = (hi.x - lo.x) if (lo and hi) else math.inf
            adjacent = self.integer and lo is not None and hi is not None and abs(lo.param - hi.param) <= 1
            if width <= self.xtol or adjacent:
                break
            if not final:
                if math.isfinite(point.g) and abs(root - point.x) <= root_tol:
                    break
                x_next, toward_feasible = root, True
            elif hi is not None and not certify and hi.x - root <= 0.9 * self.xtol:
                break
            elif hi is not None and hi.x - root <= 0.9 * self.xtol:
                x_next, toward_feasible = hi.x - 0.95 * self.xtol, False  # certify: close the bracket from below
            else:
                x_next, toward_feasible = root + 0.4 * self.xtol, True
            if lo is not None and hi is not None:  # stay strictly inside the bracket
                inner_lo, inner_hi = lo.x + 0.05 * width, hi.x - 0.05 * width
                x_next = min(max(x_next, inner_lo), inner_hi)
            if (x_next >= self.x_max and hi is None and point.x >= self.x_max) or \
               (x_next <= self.x_min and lo is None and point.x <= self.x_min):
                break  # the whole search range lies on one side of the boundary
        else:
            raise RuntimeError(f"search did not converge in {max_evals} evaluations at {level}.")
        return hi, lo, root, slope

    @staticmethod
    def _nearest_pair(points: dict[float, _Point]) -> tuple[_Point, _Point] | None:
        """The two finite points closest to the boundary (one on each side when possible)."""
        finite = sorted((p for p in points.values() if math.isfinite(p.g)), key=lambda p: abs(p.g))
        if len(finite) < 2:
            return None
        first = finite[0]
        other_side = [p for p in finite[1:] if (p.g > 0) != (first.g > 0)]
        return first, (other_side[0] if other_side and abs(other_side[0].g) < 4 * abs(finite[1].g) + 0.05
                       else finite[1])

    def _slope(self, points: dict[float, _Point], previous: float) -> float:
        pair = self._nearest_pair(points)
        if pair is not None:
            a, b = pair
            k = -(a.g - b.g) / (a.x - b.x)
            if math.isfinite(k) and k > 0:
                return min(max(k, 0.02), 50.0)
        return previous

    def _root(self, lo: _Point | None, hi: _Point | None, last: _Point, slope: float) -> float:
        """Newton from the point nearest the boundary with the local slope, kept inside the bracket."""
        if math.isinf(last.g) and (lo is None or hi is None):
            return last.x + (math.log(4.0) if last.g > 0 else -math.log(4.0))
        candidates = [p for p in (lo, hi, last) if p is not None and math.isfinite(p.g)]
        if not candidates:
            return 0.5 * (lo.x + hi.x)
        anchor = min(candidates, key=lambda p: abs(p.g))
        step = max(min(anchor.g / slope, math.log(8.0)), -math.log(8.0))  # at most x8 per step
        root = anchor.x + step
        if lo is not None and hi is not None and not lo.x < root < hi.x:
            root = 0.5 * (lo.x + hi.x)
        return root


def _ladder_levels(accountant: str, *, medium: bool) -> list[tuple]:
    levels: list[tuple] = [("rdp", _BRACKET_RDP_ORDERS)]
    if accountant == "pld":
        if medium:
            levels.append(("pld", _PLD_MEDIUM_DISCRETIZATION))
        levels.append(("pld", PLD_DISCRETIZATION))
    else:
        levels.append(("rdp", None))
    return levels


def _run_ladder(ladder: _Ladder, levels: list[tuple], p0: float, *, certify: bool) -> _Point | None:
    x, slope = ladder.sign * math.log(p0), 1.5
    hi: _Point | None = None
    for index, level in enumerate(levels):
        final = index == len(levels) - 1
        # The first rung (RDP, a few % off PLD) only needs ~1%; a rung just below the final one must
        # pin its root well inside the final tolerance so that one final evaluation suffices.
        root_tol = ladder.xtol / 16 if index == len(levels) - 2 else 1e-2
        hi, _lo, root, slope = ladder.solve(level, x, slope, final=final, certify=certify, root_tol=root_tol)
        if not final:
            # Start the next rung just on the feasible side of this rung's root: the rungs above are
            # upper bounds of the next one, so its root lies at or below this one.
            x = root + ladder.xtol / 16
    return hi


def _check_target(target_epsilon: float, delta: float, tolerance: float) -> tuple[float, float, float]:
    if isinstance(target_epsilon, bool) or not isinstance(target_epsilon, numbers.Real) \
            or not math.isfinite(target_epsilon):
        raise UserInputError(f"target epsilon must be a finite number > 0, got {target_epsilon!r} (an infinite "
                             f"budget is no privacy guarantee: train without privacy instead).")
    target = float(target_epsilon)
    if target <= 0.0:
        raise UserInputError(f"target epsilon must be > 0, got {target}.")
    delta = _require_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise UserInputError(f"delta must be in (0, 1), got {delta}.")
    tolerance = _require_real("tolerance", tolerance)
    if not 0.0 < tolerance < 0.5:
        raise ValueError(f"tolerance must be in (0, 0.5), got {tolerance}.")
    return target, delta, tolerance


def _poisson_items(event: DpEvent) -> list[tuple] | None:
    items: list[tuple] = []
    try:
        _flatten_for_pld(event, 1, items)
    except _NotFlat:
        return None
    return items


def _grid_floor(build_event: Callable[[float], DpEvent], low: float, high: float) -> float | None:
    """Smallest sigma in (low, high] (to 0.1%) whose PLD at the accountant of record's discretization
    fits in :data:`PLD_MAX_GRID_POINTS`; None if not even `high` fits. Size estimates only, no PLD built."""

    def fits(sigma: float) -> bool:
        try:
            _check_grid(_poisson_items(build_event(sigma)) or [], PLD_DISCRETIZATION)
        except PldGridTooLargeError:
            return False
        return True

    if not fits(high):
        return None
    lo, hi = math.log(low), math.log(high)
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fits(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def calibrate_noise(build_event: Callable[[float], DpEvent], target_epsilon: float, delta: float, *,
                    accountant: Accountant = "pld", tolerance: float = 1e-3, certify_minimal: bool = False,
                    sigma_bounds: tuple[float, float] = (1e-2, 1e6)) -> float:
    """Smallest noise multiplier sigma whose epsilon (by `accountant`) is at most `target_epsilon`.

    `build_event(sigma)` must give an event whose epsilon falls as sigma grows. The returned sigma's
    epsilon was computed by the accountant of record (PLD at its default discretization, or RDP at its
    default orders) and is <= target: that part is guaranteed. Minimality is to within `tolerance`
    (relative): the smallest feasible sigma is > sigma / (1 + tolerance), which is predicted from the
    local slope of epsilon(sigma), or, with ``certify_minimal=True``, proven by one more evaluation.

    The search climbs a ladder: RDP on 20 orders (a cheap upper bound) locates the root, PLD at a
    10x coarser discretization refines it, and the accountant of record is then called about once.

    Bounded in memory and time for any input: the PLD of a sigma whose grid would exceed
    :data:`PLD_MAX_GRID_POINTS` is never built (its size is estimated first). If the answer lies
    below that floor (huge targets: the privacy loss of a tiny sigma spans ~1 / (sigma^2 x
    discretization) grid points), or below ``sigma_bounds[0]``, the target is refused with a
    :class:`UserInputError` that says which sigma already meets it, rather than returning a sigma
    whose minimality is unknown.
    """
    _check_accountant(accountant)
    target, delta, tolerance = _check_target(target_epsilon, delta, tolerance)
    final_level = _level(accountant)
    if accountant == "pld":
        _check_pld_delta(delta)

    def evaluate(sigma: float, level: tuple) -> float:
        event = build_event(sigma)
        if level[0] == "pld" and final_level[0] == "pld":
            # Refuse before any rung builds a PLD for a sigma the accountant of record cannot evaluate.
            items = _poisson_items(event)
            if items is not None:
                _check_grid(items, final_level[1])
        return _value(event, "epsilon", delta, level)

    probe = build_event(1.0)
    if accountant == "pld" and is_fixed_size(probe):
        raise UserInputError("PLD cannot account for fixed-size sampling without replacement; use accountant='rdp'.")
    sigma0 = 1.0
    items = _poisson_items(probe)
    if items and all(item[0] == "poisson" for item in items):
        eta_at_one = math.sqrt(sum(c * q * q / (2.0 * s * s) for _, q, s, c in items))
        if eta_at_one > 0:
            sigma0 = eta_at_one / _tan_eta_for_epsilon(target, delta)
    low, high = sigma_bounds
    levels = _ladder_levels(accountant, medium=True)

    def too_large_target(sigma: float, eps: float, how: str, why: str) -> UserInputError:
        return UserInputError(
            f"target epsilon {target:g} at delta {delta:g} is met by noise multipliers below {sigma:.4g} ({how} "
            f"gives epsilon {eps:.4g} there), {why}; a guarantee this weak protects no one: lower the target, "
            f"or set the noise multiplier yourself.")

    try:
        ladder = _Ladder(evaluate, target, increasing=False, rtol=tolerance, integer=False, bounds=(low, high))
        best = _run_ladder(ladder, levels, min(max(sigma0, low), high), certify=certify_minimal)
    except PldGridTooLargeError:
        # The root lies at a sigma so small that the PLD of record would not fit: find where it stops
        # fitting, and decide on which side of that floor the root is with the 10x coarser PLD.
        floor = _grid_floor(build_event, low, high)
        if floor is None:
            raise
        floor = floor * (1.0 + 1e-9)
        coarse = ("pld", _PLD_MEDIUM_DISCRETIZATION)
        eps_floor = _value(build_event(floor), "epsilon", delta, coarse)
        why = (f"where PLD accounting would need more than {PLD_MAX_GRID_POINTS:,} grid points at discretization "
               f"{PLD_DISCRETIZATION:g}")
        if eps_floor <= target:
            raise too_large_target(floor, eps_floor, f"PLD at discretization {_PLD_MEDIUM_DISCRETIZATION:g}",
                                   why) from None
        low = floor
        try:
            ladder = _Ladder(evaluate, target, increasing=False, rtol=tolerance, integer=False, bounds=(low, high))
            best = _run_ladder(ladder, levels, min(max(sigma0, low), high), certify=certify_minimal)
        except PldGridTooLargeError:
            best = None
        if best is None or best.param <= low * (1.0 + tolerance):
            raise UserInputError(f"target epsilon {target:g} at delta {delta:g} needs a noise multiplier close to "
                                 f"{floor:.4g} or below, {why}; lower the target, or set the noise multiplier "
                                 f"yourself.") from None
    if best is None:
        raise UserInputError(f"no noise multiplier up to {high:g} reaches epsilon {target:g} at "
                             f"delta {delta:g}; raise the target or lower the sampling rate or steps.")
    if best.param <= low * (1.0 + tolerance):
        raise too_large_target(best.param, _value(build_event(best.param), "epsilon", delta, final_level),
                               accountant.upper(), f"the lower end of the search ({low:g})")
    return best.param


def max_steps(*, sampling_probability: float, noise_multiplier: float, target_epsilon: float, delta: float,
              sensitivity_factor: float = 1.0, accountant: Accountant = "pld",
              preceding: Sequence[Segment] = (), tolerance: float = 1e-3, limit: int = 10**9) -> int:
    """Largest number of steps of one mechanism, after `preceding` segments, within the budget.

    The returned count is certified (its epsilon by the accountant of record is <= target) and is
    within `tolerance` (relative, at least one step) of the largest such count. 0 if not even one
    step fits; `limit` if that many fit.
    """
    _check_accountant(accountant)
    target, delta, tolerance = _check_target(target_epsilon, delta, tolerance)
    step = Segment(steps=1, sampling_probability=sampling_probability, noise_multiplier=noise_multiplier,
                   sensitivity_factor=sensitivity_factor)
    preceding = list(preceding)

    def evaluate(steps: float, level: tuple) -> float:
        return _value(schedule_event([*preceding, step.with_steps(int(steps))]), "epsilon", delta, level)

    eta_t = _tan_eta_for_epsilon(target, delta)
    s0 = 2.0 * (eta_t * step.effective_noise_multiplier / step.sampling_probability) ** 2 if step.effective_noise_multiplier else 1.0
    s0 = min(max(s0, 1.0), float(limit))
    ladder = _Ladder(evaluate, target, increasing=True, rtol=tolerance, integer=True, bounds=(1.0, float(limit)))
    # Single steps are cached, so the accountant of record is cheap here: no medium rung needed.
    best = _run_ladder(ladder, _ladder_levels(accountant, medium=False), s0, certify=False)
    return 0 if best is None else int(best.param)


def max_batch_size(*, dataset_size: int, steps: int, noise_multiplier: float, target_epsilon: float, delta: float,
                   sensitivity_factor: float = 1.0, accountant: Accountant = "pld",
                   tolerance: float = 1e-3) -> int:
    """Largest expected batch size B (q = B / N) for `steps` steps at sigma within the budget.

    Certified like :func:`max_steps`; 0 if not even B = 1 fits, N if everything fits.
    """
    _check_accountant(accountant)
    target, delta, tolerance = _check_target(target_epsilon, delta, tolerance)
    n = _require_int("dataset_size", dataset_size, 1)
    Segment(steps=steps, sampling_probability=1.0, noise_multiplier=noise_multiplier,
            sensitivity_factor=sensitivity_factor)  # validates the rest

    def evaluate(batch: float, level: tuple) -> float:
        return _value(dpsgd_event(noise_multiplier=noise_multiplier, sampling_probability=int(batch) / n, steps=steps,
                                  sensitivity_factor=sensitivity_factor), "epsilon", delta, level)

    sigma_eff = noise_multiplier / sensitivity_factor
    b0 = n * _tan_eta_for_epsilon(target, delta) * sigma_eff * math.sqrt(2.0 / steps) if sigma_eff else 1.0
    b0 = min(max(b0, 1.0), float(n))
    ladder = _Ladder(evaluate, target, increasing=True, rtol=tolerance, integer=True, bounds=(1.0, float(n)))
    best = _run_ladder(ladder, _ladder_levels(accountant, medium=True), b0, certify=False)
    return 0 if best is None else int(best.param)
