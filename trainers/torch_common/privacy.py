"""What the torch trainers' ``privacy.json`` records share: the rate and schedule words, the guarantee
sentence, the delta warning and the :class:`~dpaudit.privacy_record.PrivacyRecord` of a private run.

Each trainer's ``privacy`` module writes only the sentence saying what its mechanism clips and
noises (and its own notes or paper claim); the figures come from the ledger of the steps that ran
(a real ``dp_accounting`` computation of that mechanism, composed over the steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit import accounting
from dpaudit.figures import format_up
from dpaudit.privacy_plan import PrivacyPlan
from dpaudit.privacy_record import PrivacyRecord, group_privacy_rows
from dpaudit.secret_rng import NoiseSource
from dpaudit.trainers.torch_common import noise, philox

__all__ = ["noise_sampler", "private_record", "sampling_rate", "schedule_text"]


def sampling_rate(plan: PrivacyPlan) -> float:
    """Poisson sampling rate q of the first stage: expected batch / dataset size (the declared public one if given)."""
    return plan.sampling_probability(0)


def noise_sampler(device: str) -> str:
    """The :data:`dpaudit.accounting.NOISE_SAMPLERS` key of the Gaussian sampler a run on ``device`` uses
    (:func:`trainers.torch_common.noise.describe`)."""
    if device == "cuda":
        return "torch-cuda"
    return "philox-c" if philox.available() else "torch-cpu"


def _device_of(clipper: Any) -> str:
    try:
        return next(clipper.model.parameters()).device.type
    except (AttributeError, StopIteration):
        return "cpu"


def schedule_text(plan: PrivacyPlan) -> str:
    """How sigma_e varies over the run, in words."""
    return "constant" if len(set(plan.sigmas or ())) <= 1 else "decayed per epoch, fixed in advance"


def private_record(*, trainer: str, mechanism: str, plan: PrivacyPlan, steps: int, ledger: Any, clipper: Any,
                   noise_source: NoiseSource, stopped_at_budget: bool, frequencies: Sequence[int],
                   notes: Sequence[str] = (), details: Mapping[str, Any] | None = None,
                   **extra: Any) -> PrivacyRecord:
    """The record of a finished (or budget-stopped) private run of ``steps`` steps of ``mechanism``.

    ``notes`` follow a delta warning when delta is not well below 1/N; ``extra`` are further
    :class:`PrivacyRecord` fields (``paper_claim``, ``unaccounted_releases``).
    """
    epsilon = float(ledger.epsilon()) if ledger.steps else 0.0
    delta = float(ledger.delta)
    event = ledger.event()
    public = plan.public_fields(steps_from_n=True, event=event if ledger.steps else None, delta=delta)
    guarantee = (f"({format_up(epsilon, 4)}, {format_up(delta, 3)})-DP for one training example "
                 f"(add/remove): {mechanism}, composed over {steps} steps ({ledger.accountant.upper()} accountant), for "
                 f"the released model/.")
    if public["n_public"]:
        eps_ro = public.get("epsilon_replace_one") or 0.0
        guarantee += (f" N = {plan.dataset_size} is treated as public (q and the steps come from it): against an "
                      f"adversary who knows N, ({format_up(eps_ro, 4)}, {format_up(delta, 3)})-DP (replace-one).")
    unaccounted = list(extra.get("unaccounted_releases") or ())
    if unaccounted:
        guarantee += f" NOT covered (unaccounted release{'s' if len(unaccounted) > 1 else ''}): " + " ".join(unaccounted)
    guarantee += f" Condition: {noise_source.note}"
    tail = accounting.noise_tail_caveat(noise_sampler(_device_of(clipper)), ledger.segments, delta)
    # The randomness note is the record's own field (printed once by the CLI), not also a note.
    warning = accounting.delta_warning(delta, plan.accounting_size)
    all_notes = (["warning: " + warning] if warning else []) + list(notes) + ["caveat: " + tail["caveat"]]
    return PrivacyRecord(
        trainer=trainer, private=True, mechanism=mechanism, accountant=ledger.accountant,
        event=accounting.event_to_json(event), epsilon=epsilon, delta=delta,
        target_epsilon=ledger.target_epsilon, clip_norm=float(clipper.clip_norm),
        sensitivity_factor=float(clipper.sensitivity_factor), noise_multipliers=[float(s) for s in plan.sigmas],
        noise_calibrated=plan.noise_calibrated, steps=steps, planned_steps=plan.total_steps,
        **public, noise_tail=tail, stopped_at_budget=stopped_at_budget,
        segments=[s.to_json() for s in ledger.segments], randomness=noise_source.note,
        noise_seed_explicit=noise_source.explicit, group_privacy=group_privacy_rows(epsilon, delta, frequencies),
        guarantee=guarantee, notes=all_notes, details={**dict(details or {}), "noise_generator": noise.describe()},
        **extra)
