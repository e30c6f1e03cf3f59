"""What the torch trainers' ``privacy.json`` words share: the rate and schedule words and the noise sampler.

Each trainer's ``privacy`` module writes only the sentence saying what its mechanism clips and
noises (and its own notes or paper claim) as :class:`~dpaudit.training.RecordParts`; the record is
the core's one builder (:func:`dpaudit.training.build_record`), whose figures come from the ledger
of the steps that ran (a real ``dp_accounting`` computation of that mechanism, composed over the steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit.trainers.torch_common import philox
from dpaudit.training.privacy_plan import PrivacyPlan
from dpaudit.training.record import RecordParts

__all__ = ["noise_sampler", "private_parts", "sampling_rate", "schedule_text"]


def sampling_rate(plan: PrivacyPlan) -> float:
    """Poisson sampling rate q of the first stage: expected batch / dataset size (the declared public one if given)."""
    return plan.sampling_probability(0)


def noise_sampler(device: str) -> str:
    """The :data:`dpaudit.accounting.NOISE_SAMPLERS` key of the Gaussian sampler a run on ``device`` uses
    (:func:`trainers.torch_common.noise.describe`): Box-Muller with a 96-bit radius uniform on every path
    (reach 11.596 sigma), its words from the C Philox on the CPU, else from torch's generator (CPU or CUDA)."""
    if device == "cuda":
        return "torch-cuda-bm96"
    return "philox-c-bm96" if philox.available() else "torch-cpu-bm96"


def _device_of(clipper: Any) -> str:
    try:
        return next(clipper.model.parameters()).device.type
    except (AttributeError, StopIteration):
        return "cpu"


def schedule_text(plan: PrivacyPlan) -> str:
    """How sigma_e varies over the run, in words."""
    return "constant" if len(set(plan.sigmas or ())) <= 1 else "decayed per epoch, fixed in advance"


def private_parts(
    *, mechanism: str, clipper: Any, notes: Sequence[str] = (), details: Mapping[str, Any] | None = None, **extra: Any
) -> RecordParts:
    """The :class:`~dpaudit.training.RecordParts` of a private torch run of ``mechanism`` (the record
    itself is the core's one builder, :func:`dpaudit.training.build_record`).

    ``notes`` follow a delta warning when delta is not well below 1/N; ``extra`` are further
    :class:`RecordParts` fields (``paper_claim``, ``unaccounted_releases``).
    """
    return RecordParts(
        mechanism=mechanism,
        noise_sampler=noise_sampler(_device_of(clipper)),
        notes=list(notes),
        details=dict(details or {}),
        steps_from_n=True,
        **extra,
    )
