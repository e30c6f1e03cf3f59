"""One segment of a DP-SGD run: ``steps`` Poisson-subsampled Gaussian steps with the same (q, sigma).

Its own module, importable without ``dp_accounting`` (imported only when a segment becomes a DpEvent), so that the
claim type (:mod:`dpaudit.claim`), which holds segments, stays light to import for commands that never account.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dpaudit.common.errors import UserInputError

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent

    from dpaudit.accounting.serialization import Json

__all__ = ["Segment"]


def _require_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}.")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {number}.")
    return number


def _require_int(name: str, value: object, minimum: int) -> int:
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
      noise_multiplier: ``dp_accounting``'s sigma: the noise std on the SUM of clipped gradients
        divided by the L2 bound on one privacy unit's contribution to that sum, ``sensitivity_factor
        * C``. It is what the accountant sees (``GaussianDpEvent(noise_multiplier)``) whatever the
        clipping unit. 0 means no noise (epsilon is infinite).
      sensitivity_factor: how many C one example can move the clipped sum: 1 for per-example
        clipping, 2 for micro-batch clipping (see :func:`microbatch_sensitivity_factor`). It does not
        enter the accounting (sigma already divides it out); it is kept so that the noise that ran,
        :attr:`noise_std_over_clip` = sigma x factor, is derivable from a stored segment.
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
            raise ValueError(
                f"sensitivity_factor must be >= 1 (1 per-example, 2 micro-batch), got {self.sensitivity_factor}."
            )
        # Store plain Python numbers so that JSON and equality behave (numpy scalars, ints for floats).
        object.__setattr__(self, "steps", int(self.steps))
        object.__setattr__(self, "sampling_probability", q)
        object.__setattr__(self, "noise_multiplier", sigma)
        object.__setattr__(self, "sensitivity_factor", factor)

    @property
    def noise_std_over_clip(self) -> float:
        """The noise std on the clipped sum divided by the clip norm C: sigma x sensitivity_factor.

        What the trainer draws (std = this x C); NOT a noise multiplier (it is Dupuy et al.'s and
        Opacus's "noise multiplier" only when the sensitivity is C).
        """
        return self.noise_multiplier * self.sensitivity_factor

    @property
    def mechanism(self) -> tuple[float, float]:
        """(q, sigma): two segments with equal mechanisms compose like one longer segment."""
        return (self.sampling_probability, self.noise_multiplier)

    def step_event(self) -> DpEvent:
        """One step of this segment as a DpEvent."""
        from dp_accounting.dp_event import GaussianDpEvent, PoissonSampledDpEvent

        return PoissonSampledDpEvent(self.sampling_probability, GaussianDpEvent(self.noise_multiplier))

    def event(self) -> DpEvent:
        """All `steps` steps: ``SelfComposedDpEvent(PoissonSampledDpEvent(q, Gaussian(sigma)), steps)``."""
        from dp_accounting.dp_event import SelfComposedDpEvent

        return SelfComposedDpEvent(self.step_event(), self.steps)

    def with_steps(self, steps: int) -> Segment:
        return dataclasses.replace(self, steps=steps)

    def to_json(self) -> Json:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: object, *, where: str = "segment") -> Segment:
        """Inverse of :meth:`to_json`; bad input raises :class:`UserInputError` naming `where`."""
        if not isinstance(obj, dict):
            raise UserInputError(
                f"{where}: expected an object with steps, sampling_probability, noise_multiplier, got {obj!r}."
            )
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(obj) - names)
        if unknown:
            raise UserInputError(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(names))}.")
        try:
            return cls(**obj)
        except (TypeError, ValueError) as err:
            raise UserInputError(f"{where}: {err}") from None
