"""Claims of a known mechanism for the audit tests: Poisson-subsampled Gaussian steps, one segment."""

from __future__ import annotations

from dpaudit.accounting.segment import Segment
from dpaudit.claim import Claim


def poisson_claim(
    q: float,
    steps: int,
    sigma: float,
    *,
    epsilon: float | None = None,
    delta: float = 1e-5,
    clip_norm: float = 1.0,
    **fields: object,
) -> Claim:
    """The claim of ``steps`` Poisson-subsampled Gaussian steps (rate ``q``, noise multiplier ``sigma``).

    ``epsilon``: the stated epsilon; None: dpaudit's accountant's at ``delta`` (the claim as a trainer states it).
    ``fields``: any other :class:`~dpaudit.claim.Claim` field (e.g. ``accountant``, ``recorded_epsilon``)."""
    segment = Segment(steps=steps, sampling_probability=q, noise_multiplier=sigma)
    if epsilon is None:
        from dpaudit import accounting

        epsilon = float(accounting.epsilon(accounting.schedule_event([segment]), delta))
    return Claim(
        known=True,
        private=True,
        segments=(segment,),
        epsilon=epsilon,
        delta=delta,
        clip_norm=clip_norm,
        **fields,  # type: ignore[arg-type]
    )
