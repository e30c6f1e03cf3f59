"""The one privacy claim type: what a model claims, read once from ``privacy.json`` (or stated for a model trained
elsewhere), and what every reader uses: the attacks and ``results.json``, the headline, the white-box audit, the report.

A :class:`Claim` is frozen and typed. Its epsilon is recomputed from the DpEvent ``privacy.json`` stores (never copied
from the file), its :attr:`Claim.segments` are derived from that event and checked on read against the sigmas the file
states twice more (``noise_multipliers`` and ``segments``): a file whose three copies disagree is refused, so no reader
can be handed one sigma and account another. A claim that states its mechanism (Poisson-subsampled Gaussian steps) is
also what the audits test: it satisfies :class:`dpaudit.audit.claim_curves.StatedMechanism`, and its trade-off curve,
scaled family and the family's lower bound are methods here (:mod:`dpaudit.audit.claim_curves` computes them).

Constructors: :func:`claim_of_record` (a ``privacy.json``), :func:`stated_claim` (``--claimed-epsilon``/``-delta``),
:func:`dpaudit.claim.opacus.opacus_claim` (an Opacus accountant's history), :func:`unknown_claim` (a bare model).
``results.json`` stores a claim as :meth:`Claim.to_json` (``claimed_privacy``); :meth:`Claim.from_json` reads every
earlier form of that object too.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from dpaudit.accounting.segment import Segment
from dpaudit.common.errors import UserInputError
from dpaudit.common.figures import format_up

if TYPE_CHECKING:
    import numpy as np
    from dp_accounting.dp_event import DpEvent
    from numpy.typing import NDArray

    from dpaudit.accounting.serialization import Json
    from dpaudit.audit.claim_curves import FamilyBound
    from dpaudit.audit.tradeoff import TradeOff
    from dpaudit.claim.record import PrivacyRecord

__all__ = [
    "Claim",
    "SOURCES",
    "TAIL_SHOWN_ABOVE",
    "claim_conditions",
    "claim_of_record",
    "replace_one_epsilon",
    "stated_claim",
    "unknown_claim",
]

#: Where a claim comes from.
SOURCES = ("privacy.json", "stated", "opacus", "none")
#: A noise-tail figure above this share of delta is named in the claim line (below it, it is negligible).
TAIL_SHOWN_ABOVE = 0.01
#: Relative tolerance of the check that the sigmas a privacy.json states three times agree.
_SIGMA_RTOL = 1e-9


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A model's privacy claim.

    Attributes:
        known: False for a bare model directory (no ``privacy.json``, nothing stated): the claim is unknown.
        private: whether DP training ran (None: unknown).
        source: where it comes from, one of :data:`SOURCES`.
        epsilon: the PROVEN epsilon at ``delta`` (recomputed from the event, rounded nowhere); None when nothing is
            proven (non-private, shuffled batches) or unknown.
        delta: the delta the claim states (a dpaudit run's includes its noise sampler's tail).
        accountant_delta: the delta ``epsilon`` was computed at (``delta`` less the reserved tail; = ``delta`` for a
            stated claim).
        recorded_epsilon: the figure the source states, for comparison (None: nothing stated).
        accountant: the accountant that recomputed it (``pld``, ``rdp``; ``stated`` for a stated claim).
        guarantee: the source's one-sentence statement.
        sampling: ``poisson``, ``shuffle`` (nothing proven) or ``without_replacement``.
        epsilon_if_poisson: a shuffle run's as-if-Poisson figure, never a claim.
        n_public: the run derived q and its steps from the real N, then treated as public.
        epsilon_replace_one: with N public, the replace-one epsilon (the guarantee against an adversary who knows N).
        segments: the claimed mechanism, Poisson-subsampled Gaussian steps (q, sigma, steps; each with its clipping
            unit's sensitivity factor); () when none is stated (non-private, a stated epsilon, sampling without
            replacement).
        clip_norm, sensitivity_factor: the clip norm C and how many C one example moves the noised sum (1 per
            example, 2 micro-batch): scores in units of C (the white-box audit) need them; 1 when not stated.
        conditions: what the epsilon holds only under, said in the claim line wherever it appears
            (:func:`claim_conditions`).
        trainer, privacy_unit, adjacency, mechanism_words, notes, telemetry, unaccounted_releases, scale_from_private:
            what ``privacy.json`` says beside the figures (the report's provenance, caveats and unaccounted releases).
    """

    known: bool
    private: bool | None = None
    source: str = "privacy.json"
    epsilon: float | None = None
    delta: float | None = None
    accountant_delta: float | None = None
    recorded_epsilon: float | None = None
    accountant: str | None = None
    guarantee: str | None = None
    sampling: str | None = None
    epsilon_if_poisson: float | None = None
    n_public: bool | None = None
    epsilon_replace_one: float | None = None
    segments: tuple[Segment, ...] = ()
    clip_norm: float = 1.0
    sensitivity_factor: float = 1.0
    conditions: tuple[str, ...] = ()
    trainer: str | None = None
    privacy_unit: str | None = None
    adjacency: str | None = None
    mechanism_words: str | None = None
    notes: tuple[str, ...] = ()
    telemetry: str | None = None
    unaccounted_releases: tuple[str, ...] = ()
    scale_from_private: bool = False

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {', '.join(SOURCES)}, got {self.source!r}.")
        if self.accountant_delta is None and self.delta is not None:
            object.__setattr__(self, "accountant_delta", float(self.delta))
        object.__setattr__(self, "segments", tuple(self.segments))
        object.__setattr__(self, "conditions", tuple(self.conditions))

    # -- what it says ------------------------------------------------------------------------------

    @property
    def proven(self) -> bool:
        """A private claim with a proven epsilon."""
        return bool(self.private) and self.epsilon is not None

    @property
    def states_mechanism(self) -> bool:
        """A proven claim that states its mechanism: the one-run proofs can test its trade-off curve."""
        return self.proven and self.delta is not None and bool(self.segments)

    @property
    def curve_delta(self) -> float:
        """The delta the claim's epsilon belongs to on its privacy profile (the accountant's)."""
        if self.accountant_delta is None:
            raise ValueError("this claim states no delta.")
        return float(self.accountant_delta)

    def text(self) -> str:
        """The claim in words, rounded up: "epsilon = 3.89 at delta = 1.0e-5 (...conditions)", "no proven epsilon
        (as-if-Poisson: 0.149)"; with N treated as public the replace-one epsilon follows the add/remove one."""
        if not self.known:
            return "unknown (a bare model directory: no privacy.json)"
        if not self.private:
            return "none: non-private training (epsilon = infinity)"
        delta = "" if self.delta is None else f" at delta = {format_up(self.delta, 2)}"
        if self.epsilon is None:
            poisson = (
                "" if self.epsilon_if_poisson is None else f" (as-if-Poisson: {format_up(self.epsilon_if_poisson)})"
            )
            return f"no proven epsilon{poisson}"
        notes = list(self.conditions)  # what it holds only under first (a start it does not cover leads)
        if self.epsilon_replace_one is not None:
            notes.append(
                f"add/remove; N treated as public: replace-one epsilon = {format_up(self.epsilon_replace_one)}"
            )
        return f"epsilon = {format_up(self.epsilon)}{delta}" + (f" ({'; '.join(notes)})" if notes else "")

    def short(self) -> str:
        """For a table cell: the proven epsilon rounded up, "none" or "inf" ("?" when unknown)."""
        if not self.known:
            return "?"
        if not self.private:
            return "inf"
        return "none" if self.epsilon is None else format_up(self.epsilon)

    def unproven(self) -> Claim:
        """This claim read as proving nothing (a shuffle run): its figure becomes the as-if-Poisson one."""
        if not self.private or self.epsilon is None:
            return self
        return dataclasses.replace(
            self,
            epsilon=None,
            epsilon_if_poisson=self.epsilon,
            epsilon_replace_one=None,
            sampling=self.sampling or "shuffle",
            segments=(),
        )

    # -- the mechanism, as the audits test it -----------------------------------------------------------

    @property
    def steps(self) -> int:
        return sum(s.steps for s in self.segments)

    def mechanism_key(self) -> tuple[tuple[Segment, ...], float | None, float | None, float | None, float, float]:
        """What makes two claims the same mechanism under test (segments, deltas, epsilon, C and its factor)."""
        return (self.segments, self.delta, self.accountant_delta, self.epsilon, self.clip_norm, self.sensitivity_factor)

    def per_step(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(q_t, noise std_t in units of C) of every step (:func:`dpaudit.audit.claim_curves.per_step`)."""
        from dpaudit.audit import claim_curves

        return claim_curves.per_step(self)

    def scaled_event(self, scale: float) -> DpEvent:
        from dpaudit.audit import claim_curves

        return claim_curves.scaled_event(self, scale)

    def epsilon_at(self, scale: float) -> float:
        """A lower estimate of the epsilon of this claim with every sigma scaled (:mod:`dpaudit.audit.claim_curves`)."""
        from dpaudit.audit import claim_curves

        return claim_curves.epsilon_at(self, scale)

    def curve(self, scale: float = 1.0) -> TradeOff:
        """The trade-off curve of the claim with every sigma scaled by ``scale`` (1: the claim)."""
        from dpaudit.audit import claim_curves

        return claim_curves.curve(self, scale)

    def lower_bound(self, rejects: Callable[[TradeOff], bool], *, min_scale: float | None = None) -> FamilyBound:
        """The least private scaled claim that ``rejects`` rejects (:func:`dpaudit.audit.claim_curves.lower_bound`)."""
        from dpaudit.audit import claim_curves

        return claim_curves.lower_bound(self, rejects, min_scale=min_scale)

    def best_test(self, tests: Sequence[Callable[[TradeOff], bool]]) -> tuple[int | None, float | None]:
        from dpaudit.audit import claim_curves

        return claim_curves.best_test(self, tests)

    # -- results.json ---------------------------------------------------------------------------------------

    def to_json(self) -> Json:
        """``results.json``'s ``claimed_privacy`` (and ``whitebox.json``'s ``claim``)."""
        out = dataclasses.asdict(self)
        out["segments"] = [s.to_json() for s in self.segments] or None
        out["conditions"], out["notes"] = list(self.conditions), list(self.notes)
        out["unaccounted_releases"] = list(self.unaccounted_releases)
        out["steps"] = self.steps
        return out

    @classmethod
    def from_json(cls, obj: object, *, where: str = "results.json") -> Claim:
        """Inverse of :meth:`to_json`; also reads the claim objects written before this type (``results.json``'s
        ``claimed_privacy`` without ``source``; ``whitebox.json``'s ``claim``, which held a proven claim's epsilon,
        delta, steps, clip norm, sensitivity factor and segments). A result written before shuffle runs were
        marked (no sampling, no recorded epsilon) reads as proving nothing, as it did."""
        if not isinstance(obj, Mapping):
            raise UserInputError(f"{where}: the claim must be an object, got {type(obj).__name__}.")
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in obj.items() if k in names}
        whitebox = "known" not in obj and "segments" in obj and "epsilon" in obj  # whitebox.json's claim object
        if whitebox:
            values.update(known=True, private=True, recorded_epsilon=obj.get("epsilon"))
        segments = obj.get("segments") or ()
        try:
            values["segments"] = tuple(
                Segment.from_json(
                    {k: v for k, v in dict(s).items() if k != "expected_batch_size"}, where=f"{where}: segment {i}"
                )
                for i, s in enumerate(segments)
            )
            for name in ("conditions", "notes", "unaccounted_releases"):
                values[name] = tuple(str(x) for x in (obj.get(name) or ()))
            claim = cls(**values)
        except (TypeError, ValueError) as err:
            raise UserInputError(
                f"{where}: the claim does not read ({err}); rerun the command that wrote it."
            ) from None
        legacy = "source" not in obj and not whitebox
        if legacy and claim.private and claim.sampling is None and claim.recorded_epsilon is None:
            return claim.unproven()
        if claim.private and claim.sampling == "shuffle":
            return claim.unproven()
        return claim


# -- constructors ----------------------------------------------------------------------------------------------


def unknown_claim() -> Claim:
    """A bare model directory: no ``privacy.json``, nothing stated."""
    return Claim(known=False, source="none", guarantee="unknown: a bare model directory has no privacy.json.")


def stated_claim(epsilon: float, delta: float) -> Claim:
    """The claim of a model trained elsewhere as its trainer states it (``--claimed-epsilon E --claimed-delta D``):
    tested as given; dpaudit did not account it and knows no mechanism."""
    return Claim(
        known=True,
        private=True,
        source="stated",
        epsilon=float(epsilon),
        recorded_epsilon=float(epsilon),
        delta=float(delta),
        accountant="stated",
        sampling=None,
        guarantee=(
            f"({epsilon:g}, {delta:g})-DP as stated with --claimed-epsilon/--claimed-delta for a model "
            "trained elsewhere; dpaudit did not account it (no privacy.json): the attacks test the claim "
            "as given."
        ),
    )


def replace_one_epsilon(record: PrivacyRecord) -> float | None:
    """Epsilon of the stored event under replace-one adjacency (PLD, at the accountant's delta; None when non-private):
    what holds against an adversary who knows N (:func:`dpaudit.accounting.epsilon_replace_one`)."""
    parts = record.delta_parts()
    if record.event is None or parts is None:
        return None
    from dpaudit import accounting  # dp_accounting is heavy: only when asked

    return float(accounting.epsilon_replace_one(accounting.event_from_json(record.event), parts.accountant))


def claim_conditions(record: PrivacyRecord) -> tuple[str, ...]:
    """What a private run's epsilon holds only under, in the words of the claim line: a start declared private first
    (the epsilon does not cover what it learned), then a start not known to be public, an explicit noise seed, and a
    noise-sampler tail that is not negligible beside delta (it is inside delta, and said so)."""
    out = []
    start = record.init_from or {}
    if record.init_from is not None:
        where = start.get("path") or "the --init-from start"
        if start.get("accepted_private"):
            trained = start.get("trained_on") or "private data"
            out.append(
                f"it does NOT cover what the --init-from start {where} learned: that start trained on {trained}, "
                "not public data only (declared with --accept-private-start)"
            )
        elif start.get("unrecorded_base"):
            out.append(
                f"it holds only if the Hugging Face model {start['unrecorded_base']}, from which the --init-from "
                f"start {where} was trained on public.jsonl, was trained on public data only"
            )
        elif start.get("public_data_only") is not True:
            out.append(f"it holds only if the --init-from start {where} was trained on public data only")
    if record.noise_seed_explicit:
        out.append("it holds only while the --noise-seed given to training stays secret")
    tail, delta = record.noise_tail_delta, record.delta
    if tail is not None and delta and tail > TAIL_SHOWN_ABOVE * delta:
        out.append(f"its delta includes the float noise sampler's tail, {format_up(tail, 2)}")
    return tuple(out)


def _stated_segments(record: PrivacyRecord, where: str) -> tuple[Segment, ...]:
    """The record's segments derived from its event, checked against the two other places the file states sigma.

    Raises:
        UserInputError: the event, ``segments`` and ``noise_multipliers`` disagree (an edited or damaged file).
    """
    from dpaudit import accounting

    try:
        event = accounting.event_from_json(record.event)
    except (KeyError, TypeError, ValueError) as err:
        raise UserInputError(f"{where}: cannot read the DpEvent ({err}); rerun dpaudit train.") from None
    derived = accounting.segments_of_event(event)
    if derived is None:  # not Poisson-subsampled Gaussian steps (sampling without replacement): no curve to test
        return ()
    stored: list[Segment] = []
    for i, raw in enumerate(record.segments):
        try:
            stored.append(
                Segment.from_json(
                    {k: v for k, v in dict(raw).items() if k != "expected_batch_size"}, where=f"{where}: segments[{i}]"
                )
            )
        except TypeError:
            raise UserInputError(f"{where}: segments[{i}] is not an object; rerun dpaudit train.") from None

    def steps_by_mechanism(segments: Sequence[Segment]) -> list[tuple[float, float, int]]:
        merged: list[tuple[float, float, int]] = []
        for seg in segments:
            if (
                merged
                and math.isclose(merged[-1][0], seg.sampling_probability, rel_tol=_SIGMA_RTOL)
                and math.isclose(merged[-1][1], seg.noise_multiplier, rel_tol=_SIGMA_RTOL)
            ):
                q, sigma, steps = merged[-1]
                merged[-1] = (q, sigma, steps + seg.steps)
            else:
                merged.append((seg.sampling_probability, seg.noise_multiplier, seg.steps))
        return merged

    def same(a: Sequence[tuple[float, float, int]], b: Sequence[tuple[float, float, int]]) -> bool:
        return len(a) == len(b) and all(
            math.isclose(x[0], y[0], rel_tol=_SIGMA_RTOL)
            and math.isclose(x[1], y[1], rel_tol=_SIGMA_RTOL)
            and x[2] == y[2]
            for x, y in zip(a, b)
        )

    if stored and not same(steps_by_mechanism(stored), steps_by_mechanism(derived)):
        raise UserInputError(
            f"{where}: its segments disagree with its DpEvent (the (q, sigma, steps) they state differ); "
            "the file was edited or damaged: rerun dpaudit train."
        )
    sigmas = {round(s.noise_multiplier, 12) for s in derived}
    listed = [float(x) for x in (record.noise_multipliers or ())]
    if any(not any(math.isclose(x, s, rel_tol=_SIGMA_RTOL) for s in sigmas) for x in listed) and derived:
        raise UserInputError(
            f"{where}: its noise_multipliers {listed} are not the sigmas of its DpEvent "
            f"{sorted(sigmas)}; the file was edited or damaged: rerun dpaudit train."
        )
    if stored:  # each stored segment keeps its clipping unit's factor (the event divides it out)
        factors = {(s.sampling_probability, s.noise_multiplier): s.sensitivity_factor for s in stored}
        derived = tuple(
            dataclasses.replace(s, sensitivity_factor=factors.get(s.mechanism, s.sensitivity_factor)) for s in derived
        )
    return derived


class _RecordFacts(TypedDict):
    """What the claim of a record says beside its figures (the report's provenance, caveats and releases)."""

    trainer: str | None
    privacy_unit: str | None
    adjacency: str | None
    mechanism_words: str | None
    notes: tuple[str, ...]
    telemetry: str | None
    unaccounted_releases: tuple[str, ...]
    scale_from_private: bool
    sampling: str | None


class _PrivateRecordFacts(_RecordFacts):
    """The facts, and what the claim of a private record states whether it proves an epsilon or not."""

    known: bool
    private: bool
    source: str
    delta: float
    accountant_delta: float
    accountant: str
    clip_norm: float
    sensitivity_factor: float
    conditions: tuple[str, ...]
    guarantee: str


def claim_of_record(record: PrivacyRecord | None, *, where: str = "privacy.json") -> Claim:
    """The claim of a training run's ``privacy.json``: epsilon recomputed from its DpEvent (never copied), its segments
    derived from the event and checked against the file's other statements of sigma, its conditions, and the facts
    the report shows. ``None`` (a bare model directory) is :func:`unknown_claim`.

    Raises:
        UserInputError: naming ``where``: a private record without delta, an event dpaudit cannot account, or sigmas
            that disagree.
    """
    if record is None:
        return unknown_claim()
    facts: _RecordFacts = {
        "trainer": record.trainer,
        "privacy_unit": record.privacy_unit,
        "adjacency": record.adjacency,
        "mechanism_words": record.mechanism,
        "notes": tuple(str(n) for n in record.notes),
        "telemetry": record.telemetry,
        "unaccounted_releases": tuple(str(r) for r in record.unaccounted_releases),
        "scale_from_private": _scale_from_private(record),
        "sampling": record.sampling,
    }
    if not record.private:
        return Claim(known=True, private=False, guarantee=record.guarantee or "non-private: epsilon = inf.", **facts)
    parts = record.delta_parts()
    if parts is None:
        raise UserInputError(f"{where}: a private run's record has no delta; rerun dpaudit train.")
    segments = _stated_segments(record, where)
    try:
        recomputed = record.recompute_epsilon()
        replace_one = replace_one_epsilon(record) if record.n_public and record.proven else None
    except (KeyError, TypeError, ValueError) as err:
        raise UserInputError(f"{where}: cannot read the DpEvent ({err}); rerun dpaudit train.") from None
    common: _PrivateRecordFacts = {
        **facts,
        "known": True,
        "private": True,
        "source": "privacy.json",
        "delta": float(parts.delta),
        "accountant_delta": float(parts.accountant),
        "accountant": record.accountant or "pld",
        "clip_norm": float(record.clip_norm or 1.0),
        "sensitivity_factor": float(record.sensitivity_factor or 1.0),
        "conditions": claim_conditions(record),
        "guarantee": record.guarantee,
    }
    if not record.proven:  # shuffled fixed-size batches: the figure is as-if-Poisson, never a claim
        return Claim(**common, epsilon=None, recorded_epsilon=None, epsilon_if_poisson=recomputed)
    return Claim(
        **common,
        epsilon=recomputed,
        recorded_epsilon=record.epsilon,
        n_public=record.n_public,
        epsilon_replace_one=replace_one,
        segments=segments,
    )


def _scale_from_private(record: PrivacyRecord) -> bool:
    """eDP-SGD's per-layer clip norms computed on private data (``--scale-from private``): a release the epsilon
    does not cover."""
    norms_from = str(record.details.get("layer_clip_norms_from") or "")
    return norms_from.startswith("train.jsonl") or record.details.get("scale_from") == "private"
