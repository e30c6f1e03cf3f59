"""TAN (Sander et al. 2023): eps_TAN(eta), its validity wall, and the labelled non-private simulation."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from dpaudit.accounting.segment import Segment, _require_int, _require_real
from dpaudit.accounting.serialization import Json

#: The TAN approximation of Sander et al. holds only above this noise multiplier ("privacy wall").
TAN_VALID_ABOVE = 2.0


SIMULATION_LABEL = (
    "NON-PRIVATE TAN simulation: same per-step signal-to-noise ratio and steps as the "
    "reference run, but its own epsilon is far larger; never report it as private"
)


class TanValidityWarning(UserWarning):
    """eps_TAN was asked for a noise multiplier at or below 2, where Sander et al.'s approximation fails."""


def tan_eta(*, sampling_probability: float, steps: int, noise_multiplier: float) -> float:
    """Individual signal-to-noise ratio eta = q sqrt(S / 2) / sigma (eta^2 = q^2 S / (2 sigma^2), Def. 3.1)."""
    q = _require_real("sampling_probability", sampling_probability)
    s = _require_int("steps", steps, 0)
    sigma = _require_real("noise_multiplier", noise_multiplier)
    if sigma <= 0.0:
        raise ValueError(f"noise_multiplier must be > 0, got {noise_multiplier}.")
    return q * math.sqrt(s / 2.0) / sigma


def tan_eta_segments(segments: Sequence[Segment]) -> float:
    """eta of a schedule: eta^2 adds over steps, eta^2 = sum_i q_i^2 S_i / (2 sigma_i^2) (sigma: the accountant's)."""
    total = 0.0
    for segment in segments:
        if segment.noise_multiplier <= 0.0:
            return math.inf
        total += segment.sampling_probability**2 * segment.steps / (2.0 * segment.noise_multiplier**2)
    return math.sqrt(total)


def _tan_epsilon_of_eta(eta: float, delta: float) -> float:
    return eta * eta + 2.0 * eta * math.sqrt(math.log(1.0 / delta))


def _wall_message(sigma: float) -> str:
    return (
        f"eps_TAN is only valid for sigma > {TAN_VALID_ABOVE:g} (Sander et al.'s privacy wall); here sigma = "
        f"{sigma:.4g}, so the true epsilon can be far larger. Use epsilon()."
    )


def _warn_wall(sigma: float) -> None:
    if sigma <= TAN_VALID_ABOVE:
        warnings.warn(_wall_message(sigma), TanValidityWarning, stacklevel=3)


@dataclass(frozen=True)
class TanReport:
    """eta and eps_TAN of a schedule, with their validity (Sander et al. 2023, eq. 4)."""

    eta: float
    epsilon_tan: float | None  # None when infinite (a segment without noise)
    valid: bool  # every segment's effective sigma is above the privacy wall
    warning: str | None


def tan_report(segments: Sequence[Segment], delta: float) -> TanReport:
    """eta (composed over segments, :func:`tan_eta_segments`) and eps_TAN at ``delta``; the one place both
    and the privacy-wall warning are computed for a schedule."""
    delta = _require_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}.")
    eta = tan_eta_segments(segments)
    sigma_min = min(s.noise_multiplier for s in segments)
    eps = _tan_epsilon_of_eta(eta, delta) if math.isfinite(eta) else math.inf
    valid = sigma_min > TAN_VALID_ABOVE
    return TanReport(
        eta=eta,
        epsilon_tan=eps if math.isfinite(eps) else None,
        valid=valid,
        warning=None if valid else _wall_message(sigma_min),
    )


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

    def to_json(self) -> Json:
        out = dataclasses.asdict(self)
        out["reference_sampling_probability"] = self.reference_sampling_probability
        out["simulated_sampling_probability"] = self.simulated_sampling_probability
        return out


def tan_simulate(
    *, dataset_size: int, batch_size: int, noise_multiplier: float, steps: int, simulated_batch_size: int
) -> TanSimulation:
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
    return TanSimulation(
        dataset_size=n,
        steps=s,
        reference_batch_size=b_ref,
        reference_noise_multiplier=sigma,
        simulated_batch_size=b,
        simulated_noise_multiplier=sigma * b / b_ref,
        eta_step=eta_step,
        eta=eta_step * math.sqrt(s),
        compute_saving=b_ref / b,
    )
