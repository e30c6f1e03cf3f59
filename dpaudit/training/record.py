"""The one ``privacy.json`` builder: a :class:`~dpaudit.claim.record.PrivacyRecord` from what ran.

The skeleton (:mod:`dpaudit.training.skeleton`) calls :func:`build_record` once, at the end of a run,
with the plan, the ledger of the steps that ran and the step's own sensitivity (its clip norm and
sensitivity factor: read from the step object, never recomputed). A plug-in contributes only words
and trainer-specific facts (:class:`RecordParts`): what its mechanism clips and noises, its notes and
``details``. Every figure comes from the ledger, a real ``dp_accounting`` computation of the
mechanism composed over the steps that ran; the stored event lets any reader recompute the epsilon
(:meth:`PrivacyRecord.recompute_epsilon`; docs/privacy.md, "The mechanism that ran is the mechanism accounted").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpaudit import accounting
from dpaudit.accounting.noise_tail import FORMULA as TAIL_FORMULA
from dpaudit.accounting.noise_tail import RETIRED_MIN_REACH
from dpaudit.claim.record import PrivacyRecord, Sampling, group_privacy_rows
from dpaudit.common.figures import format_up
from dpaudit.training.noise_source import NoiseSource
from dpaudit.training.privacy_plan import PrivacyPlan
from dpaudit.training.starting_point import (
    DP_ON_PUBLIC_NOTE,
    PUBLIC_START_REQUIREMENT,
    StartingPoint,
    public_data_only,
)

__all__ = ["RecordParts", "RunFacts", "build_record", "delta_of_run", "segments_json"]

NONPRIVATE_GUARANTEE = "none: non-private training (no clipping, no noise); epsilon = inf."
NONPRIVATE_NOTE = "non-private run: no guarantee for any file."
PUBLIC_GUARANTEE = (
    "none needed: a public run, trained on public data only (public.jsonl, --data-split public{start}); "
    "its model holds no private data. No (epsilon, delta) guarantee is claimed."
)
PUBLIC_SPLIT_GUARANTEE = (
    "none: trained on public.jsonl (--data-split public) from {start}, whose record does not show "
    "public data only; the model holds public data only if that start does. Non-private: "
    "epsilon = inf."
)
PUBLIC_NOTE = "public run: trained on public data only; no guarantee is needed for any file."
UNCHARACTERISED_SAMPLER = (
    "the floating-point Gaussian sampler of this trainer is not characterised "
    "(dpaudit.accounting.NOISE_SAMPLERS): its bounded-support tail is not counted in delta "
    "(noise_tail null)."
)
#: The guarantee's words on delta when the noise sampler's tail is counted inside it.
TAIL_INSIDE_DELTA = (
    " Delta includes the float noise sampler's tail figure {tail} ({formula}, z_max = {z_max:g}): "
    "epsilon is the accountant's at delta minus that figure ({accountant})."
)
TAIL_ACCEPTED = (
    " --accept-noise-tail: the float noise sampler's tail figure {tail} ({formula}, z_max = {z_max:g}) "
    "alone exceeds the requested delta {accountant}, so the stated delta is their sum."
)
SHUFFLE_GUARANTEE = (
    "no proven epsilon: fixed-size shuffled batches (--sampling shuffle). If the batches had been "
    "Poisson-sampled, the run would be ({eps}, {delta})-DP (epsilon_if_poisson)."
)


@dataclass(frozen=True, kw_only=True)
class RecordParts:
    """What a plug-in says about its mechanism in ``privacy.json`` (words and facts, no figures).

    Attributes:
        mechanism: the mechanism in words (sampling, clipping unit, noise); for a non-private run,
            what ran instead (``nonprivate_mechanism``).
        noise_sampler: the :data:`dpaudit.accounting.NOISE_SAMPLERS` key of the Gaussian sampler
            that drew the noise (``noise_tail`` names it; its tail figure is counted inside delta); None
            for a sampler that table does not characterise: ``noise_tail`` is then null and a note says so.
            The plan's sampler (``PrivacyPlan.noise_sampler``) when None here.
        guarantee_mechanism: how the guarantee sentence names the mechanism, after "(add/remove)";
            default ``": " + mechanism``.
        notes: caveats, after the delta warning.
        details: trainer-specific facts with no field of their own.
        steps_from_n: the step count came from N (epochs x ceil(N / batch)).
        sampling: ``"poisson"`` or ``"shuffle"`` (nothing proven: the figure is ``epsilon_if_poisson``).
        paper_claim, unaccounted_releases: the :class:`PrivacyRecord` fields of those names.
    """

    mechanism: str
    noise_sampler: str | None = None
    guarantee_mechanism: str | None = None
    notes: Sequence[str] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    steps_from_n: bool = True
    sampling: Sampling = "poisson"
    nonprivate_mechanism: str = "non-private training: no clipping, no noise."
    nonprivate_notes: Sequence[str] = ()
    paper_claim: dict[str, Any] | None = None
    unaccounted_releases: Sequence[str] = ()


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What the skeleton knows of the run: the plan, the ledger (None when non-private), the step's
    sensitivity, the secret source, what ran and the canary frequencies of the inject manifest."""

    trainer: str
    plan: PrivacyPlan
    ledger: Any
    epsilon: float | None
    clip_norm: float | None
    sensitivity_factor: float
    noise_source: NoiseSource
    steps: int
    stopped_at_budget: bool
    frequencies: Sequence[int]
    data_split: str = "train"
    start: StartingPoint | None = None

    @property
    def public_data_only(self) -> bool:
        return public_data_only(self.data_split, self.start)

    def provenance(self) -> dict[str, Any]:
        """The record fields of what the run trained on and where it started."""
        return {
            "data_split": self.data_split,
            "public_data_only": self.public_data_only,
            "init_from": self.start.record() if self.start is not None else None,
        }


def segments_json(ledger: Any, plan: PrivacyPlan) -> list[dict[str, Any]]:
    """The ledger's segments, each with its expected batch size q x N (N the accounting size)."""
    return [
        dict(seg.to_json(), expected_batch_size=seg.sampling_probability * plan.accounting_size)
        for seg in ledger.segments
    ]


def build_record(facts: RunFacts, parts: RecordParts) -> PrivacyRecord:
    """The :class:`PrivacyRecord` of a finished (or budget-stopped) run."""
    if facts.ledger is None:
        return _nonprivate_record(facts, parts)
    return _private_record(facts, parts)


def _nonprivate_record(facts: RunFacts, parts: RecordParts) -> PrivacyRecord:
    start = facts.start
    if facts.public_data_only:
        guarantee = PUBLIC_GUARANTEE.format(start=f", from {start.describe()}" if start is not None else "")
        first = PUBLIC_NOTE
    elif facts.data_split == "public" and start is not None:  # (public split, not public only: a private start)
        guarantee, first = PUBLIC_SPLIT_GUARANTEE.format(start=start.describe()), NONPRIVATE_NOTE
    else:
        guarantee, first = NONPRIVATE_GUARANTEE, NONPRIVATE_NOTE
        if start is not None:
            guarantee += f" Started from {start.describe()}."
    return PrivacyRecord(
        trainer=facts.trainer,
        private=False,
        sampling=parts.sampling,
        steps=facts.steps,
        planned_steps=facts.plan.total_steps,
        **facts.plan.public_fields(steps_from_n=parts.steps_from_n),
        mechanism=parts.nonprivate_mechanism,
        guarantee=guarantee,
        randomness=facts.noise_source.note,
        noise_seed_explicit=facts.noise_source.explicit,
        group_privacy=group_privacy_rows(None, None, facts.frequencies),
        details=dict(parts.details),
        notes=[first, *parts.nonprivate_notes],
        **facts.provenance(),
    )


def delta_of_run(plan: PrivacyPlan, ledger: Any, sampler: str | None) -> tuple[float, float, float | None]:
    """(stated delta, the accountant's delta, the noise tail figure of the steps that ran) of a private run.

    The accountant's delta is the ledger's (the plan's ``delta - reserved tail``); the figure is the sampler's
    over the ledger's segments (None: the sampler is not characterised), plus, for steps an earlier dpaudit
    drew before a resume (``ledger.former_segments``), their figure at the shortest former reach. The stated
    delta is the plan's when the two parts fit inside it (always, for a ledger this plan made: the reserved
    tail covers every planned step), else their sum (a ledger resumed from an older checkpoint).
    """
    accountant = float(ledger.delta)
    if sampler is None:
        return accountant, accountant, None
    tail = accounting.tail_figure(ledger.segments, accounting.sampler_reach(sampler))
    former = list(getattr(ledger, "former_segments", ()))
    if former:
        tail = min(1.0, tail + accounting.tail_figure(former, RETIRED_MIN_REACH))
    stated = float(plan.delta) if plan.delta is not None else accountant
    if accountant + tail > stated * (1.0 + 1e-12):
        stated = accountant + tail
    return stated, accountant, tail


def _private_record(facts: RunFacts, parts: RecordParts) -> PrivacyRecord:
    plan, ledger = facts.plan, facts.ledger
    assert facts.clip_norm is not None  # a private run's step clips (only a non-private one has no C)
    shuffle = parts.sampling == "shuffle"
    sampler = parts.noise_sampler if parts.noise_sampler is not None else plan.noise_sampler
    delta, accountant_delta, tail = delta_of_run(plan, ledger, sampler)
    event = ledger.event()
    public = plan.public_fields(
        steps_from_n=parts.steps_from_n, event=event if (ledger.steps and not shuffle) else None, delta=accountant_delta
    )
    warning = accounting.delta_warning(delta, plan.accounting_size)
    proven = None if shuffle else facts.epsilon
    return PrivacyRecord(
        trainer=facts.trainer,
        private=True,
        sampling=parts.sampling,
        mechanism=parts.mechanism,
        accountant=ledger.accountant,
        event=accounting.event_to_json(event),
        epsilon=proven,
        epsilon_if_poisson=facts.epsilon if shuffle else None,
        delta=delta,
        accountant_delta=accountant_delta,
        noise_tail_delta=tail,
        target_epsilon=ledger.target_epsilon,
        clip_norm=float(facts.clip_norm),
        sensitivity_factor=float(facts.sensitivity_factor),
        noise_multipliers=[float(s) for s in plan.sigmas or ()],
        noise_calibrated=plan.noise_calibrated,
        steps=facts.steps,
        planned_steps=plan.total_steps,
        **public,
        noise_tail=accounting.noise_tail_entry(sampler) if sampler is not None else None,
        stopped_at_budget=facts.stopped_at_budget,
        segments=segments_json(ledger, plan),
        randomness=facts.noise_source.note,
        noise_seed_explicit=facts.noise_source.explicit,
        group_privacy=group_privacy_rows(proven, delta, facts.frequencies),
        guarantee=_guarantee(
            facts, parts, public, delta, _tail_words(sampler, plan.noise_tail_accepted, accountant_delta, tail)
        ),
        notes=(["warning: " + warning] if warning else [])
        + list(parts.notes)
        + _former_note(ledger, sampler)
        + (["note: " + DP_ON_PUBLIC_NOTE] if facts.data_split == "public" else [])
        + ([] if sampler is not None else ["caveat: " + UNCHARACTERISED_SAMPLER]),
        details=dict(parts.details),
        paper_claim=parts.paper_claim,
        unaccounted_releases=list(parts.unaccounted_releases),
        **facts.provenance(),
    )


def _former_note(ledger: Any, sampler: str | None) -> list[str]:
    """A note for a run resumed from a checkpoint of an earlier dpaudit, whose first steps drew the former sampler."""
    former = sum(seg.steps for seg in getattr(ledger, "former_segments", ()))
    if not former or sampler is None:
        return []
    return [
        f"noise tail: the first {former} steps were drawn by an earlier dpaudit's float sampler (reach >= "
        f"{RETIRED_MIN_REACH:g} sigma) before this run resumed; their tail figure at that reach is in noise_tail_delta."
    ]


def _tail_words(sampler: str | None, accepted: bool, accountant_delta: float, tail: float | None) -> str:
    """What the guarantee says about the noise tail inside its delta (nothing when no tail is counted)."""
    if sampler is None or tail is None:
        return ""
    words = TAIL_ACCEPTED if accepted else TAIL_INSIDE_DELTA
    return words.format(
        tail=format_up(tail, 2),
        formula=TAIL_FORMULA,
        z_max=accounting.sampler_reach(sampler),
        accountant=format_up(accountant_delta, 3),
    )


def _guarantee(
    facts: RunFacts, parts: RecordParts, public: Mapping[str, Any], delta: float, tail_words: str = ""
) -> str:
    """The one sentence stating what is proven (and under which condition); ``tail_words`` say what its delta
    holds of the noise sampler's tail."""
    eps_text, delta_text = format_up(facts.epsilon), format_up(delta, 2)
    if parts.sampling == "shuffle":
        text = SHUFFLE_GUARANTEE.format(eps=eps_text, delta=delta_text)
    else:
        named = parts.guarantee_mechanism if parts.guarantee_mechanism is not None else f": {parts.mechanism}"
        text = (
            f"({eps_text}, {delta_text})-DP for one training example (add/remove){named}, composed over "
            f"{facts.steps} steps ({facts.ledger.accountant.upper()} accountant), for the released model/."
        )
        if public["n_public"] and public.get("epsilon_replace_one") is not None:
            how = "q and the steps come from it" if parts.steps_from_n else "q = batch / N"
            text += (
                f" N = {facts.plan.dataset_size} is treated as public ({how}): against an adversary who knows N, "
                f"({format_up(public['epsilon_replace_one'])}, {delta_text})-DP (replace-one)."
            )
    if facts.start is not None:
        text += f" Starting point: {facts.start.describe()}; {PUBLIC_START_REQUIREMENT}"
    if facts.data_split == "public":
        text += f" {DP_ON_PUBLIC_NOTE}"
    unaccounted = list(parts.unaccounted_releases)
    if unaccounted:
        text += f" NOT covered (unaccounted release{'s' if len(unaccounted) > 1 else ''}): " + " ".join(unaccounted)
    if facts.start is not None and facts.start.accepted_private:  # said first: the epsilon does not cover the start
        text = (
            f"This epsilon does NOT cover what the --init-from start {facts.start.given} learned: it trained on "
            f"{facts.start.trained_on or 'private data'}, not public data only (declared with --accept-private-start). "
            + text
        )
    return text + tail_words + f" Condition: {facts.noise_source.note}"
