"""``privacy.json``: the one typed, versioned record of what a training run's guarantee is.

Every trainer writes it through :class:`PrivacyRecord` (never a hand-built dict), and the attack
stage and the report read it back with :meth:`PrivacyRecord.from_json`, so the file has one shape
whichever trainer wrote it. The record stores the ``dp_accounting`` DpEvent of what actually ran;
every epsilon shown anywhere is recomputed from it (:meth:`PrivacyRecord.recompute_epsilon`).

Names say exactly one thing each:

- ``sampling``: ``"poisson"`` (what the accountant assumes), ``"shuffle"`` (fixed-size shuffled
  batches: NOTHING is proven; :attr:`epsilon` is None and :attr:`epsilon_if_poisson` is the figure a
  Poisson run would have), or ``"without_replacement"`` (fixed-size batches sampled without
  replacement, accounted under replace-one adjacency).
- ``adjacency``: ``"add_remove"`` or ``"replace_one"``.
- ``proven``: True exactly when ``epsilon`` is a proven guarantee; readers show "no proven epsilon"
  whenever it is False (shuffle and non-private runs), never the as-if-Poisson figure as a claim.
- ``n_public``: True when the real number of rows N set q (and the steps): N is then released and
  *treated as public*, ``dataset_size`` holds it, and ``epsilon_replace_one`` is the guarantee that
  holds against an adversary who knows N (the add/remove ``epsilon`` alone does not: adding or removing
  the target changes N). False when the user declared a public size (``--dataset-size``): q and the
  steps come from ``declared_dataset_size`` and the real N is not written anywhere in this file.
- ``noise_multipliers`` and ``segments[*].noise_multiplier``: sigma, ``dp_accounting``'s noise
  multiplier (noise std on the summed clipped gradients over the bound on one example's contribution,
  ``sensitivity_factor * C``); the two agree, and ``dpaudit account --noise-multiplier`` takes them
  as they are. The noise std over C is sigma x ``sensitivity_factor`` (each segment keeps its factor).
  Schema /2 files stored std / C in ``segments[*].noise_multiplier``: :meth:`PrivacyRecord.from_json`
  converts them (the event, and so every epsilon, is the same).
- ``data_split``, ``public_data_only`` and ``init_from`` (what the run trained on and where it started,
  :mod:`dpaudit.training.starting_point`) were added to schema /3 with defaults: a /3 file written before
  them reads as a run on ``train.jsonl`` from a fresh init, which is what it was.
- ``delta`` is the delta the claim states, and from schema /4 it holds the float noise sampler's tail
  figure (:mod:`dpaudit.accounting.noise_tail`): ``delta >= accountant_delta + noise_tail_delta``, where
  ``accountant_delta`` is the delta ``epsilon`` was computed at from the event and ``noise_tail_delta`` is the
  run's tail figure (equal unless the run stopped before its plan: the plan's whole tail stays reserved).
  :meth:`PrivacyRecord.delta_parts` returns the three. A /3 file stated its tail as a caveat beside delta;
  :meth:`PrivacyRecord.from_json` reads it with the tail counted in: its delta becomes the old delta plus the
  old figure (the accountant's delta is the old delta), its guarantee says so.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple, TypedDict, cast

from dpaudit.common.errors import UserInputError

if TYPE_CHECKING:
    from dpaudit.accounting.serialization import Json

__all__ = [
    "DeltaParts",
    "GroupPrivacyRow",
    "PRIVATE_FILES",
    "PrivacyRecord",
    "RELEASED_FILES",
    "SCHEMA",
    "group_privacy_rows",
    "group_privacy_text",
]

SCHEMA = "dpaudit.privacy/4"
#: Schema /3: ``delta`` was the accountant's, the noise tail a caveat beside it (``noise_tail["figure"]``).
_SCHEMA_V3 = "dpaudit.privacy/3"
#: Schema /2: as /3 but for ``segments[*].noise_multiplier``, which held std / C (sigma x factor).
_SCHEMA_V2 = "dpaudit.privacy/2"
Sampling = Literal["poisson", "shuffle", "without_replacement"]
Adjacency = Literal["add_remove", "replace_one"]
DataSplit = Literal["train", "public"]

#: What the (epsilon, delta) guarantee covers: functions of the noised mechanism's output and of
#: public facts (config, N) only.
RELEASED_FILES = ("model/", "privacy.json")
#: Computed from the private data without noise: for the data owner only, never to be published.
PRIVATE_FILES = ("manifest.json", "metrics.jsonl", "checkpoints/")
COVERAGE_NOTE = (
    "The guarantee covers model/ and privacy.json (a function of the public config and N only). "
    "manifest.json (sha256 of the training data: a hash confirms a guessed canary), metrics.jsonl "
    "(loss and realized batch sizes on private data) and checkpoints/ (the secret noise state) are for "
    "the data owner only and are NOT covered."
)
#: What ``public_parameters`` says when N came from the data.
N_PUBLIC_TEXT = (
    "N is treated as public: q = expected batch / N{steps} computed from the number of training rows "
    "N = {n}, which privacy.json states and the release reveals. The add/remove epsilon holds only "
    "against an adversary who does not know N; against one who knows N (and the other rows), the "
    "guarantee is the replace-one epsilon. Declare a public size with --dataset-size to fix q{and_steps} "
    "in advance instead."
)
#: What ``public_parameters`` says when a public size was declared.
N_DECLARED_TEXT = (
    "q = expected batch / {n}{steps} computed from the declared public --dataset-size {n}, fixed in advance; "
    "the real number of training rows is private and not written here."
)


class DeltaParts(NamedTuple):
    """A record's delta and its parts (:meth:`PrivacyRecord.delta_parts`): ``delta`` the claim states,
    ``accountant`` the delta epsilon was computed at, ``noise_tail`` the float noise sampler's tail figure of the
    run (None when the sampler is not characterised: nothing counted). ``delta >= accountant + noise_tail``."""

    delta: float
    accountant: float
    noise_tail: float | None


class GroupPrivacyRow(TypedDict):
    """One ``group_privacy`` row (:func:`group_privacy_rows`): the group bound for a canary inserted ``frequency``
    times; ``delta`` None with an epsilon: the group delta reaches 1 (no guarantee); ``epsilon`` None: nothing
    proven."""

    frequency: int
    epsilon: float | None
    delta: float | None
    bound: str


TELEMETRY_NOTE = (
    "loss, accuracy, gradient-SNR, clip fraction, gradient norms and examples/s in metrics.jsonl are "
    "computed on private training data and are NOT covered by the epsilon; they are for the data "
    "owner's eyes only."
)


@dataclass(frozen=True, kw_only=True)
class PrivacyRecord:
    """The content of ``privacy.json``.

    Attributes:
        trainer: the registered trainer name that ran.
        private: False for a non-private run (no clipping or no noise).
        mechanism: the mechanism in words (sampling, clipping unit, noise).
        privacy_unit: what one neighbouring dataset adds, removes or replaces ("example").
        adjacency: ``"add_remove"`` or ``"replace_one"``.
        sampling: ``"poisson"``, ``"shuffle"`` or ``"without_replacement"``.
        accountant: ``"pld"`` or ``"rdp"`` (None when non-private).
        event: the serialized DpEvent of what ran (None when non-private).
        epsilon: the proven epsilon at ``delta``; None when nothing is proven (non-private, shuffle).
        epsilon_if_poisson: with ``sampling="shuffle"``: the epsilon a Poisson-sampled run would have.
        delta: the delta of the guarantee, the float noise sampler's tail included (schema /4):
            ``accountant_delta + noise_tail_delta`` or a little more (see :meth:`delta_parts`).
        accountant_delta: the delta the accountant computed ``epsilon`` at from ``event`` (``delta`` minus the
            reserved tail; equal to ``delta`` when no tail is counted). Every epsilon recomputed from the event
            uses it (:meth:`recompute_epsilon`).
        noise_tail_delta: the run's noise tail figure, sum over its steps of q P(Z > z_max - 1/sigma), counted
            inside ``delta`` (:mod:`dpaudit.accounting.noise_tail`); None when non-private or when the
            sampler is not characterised (``noise_tail`` null).
        target_epsilon: the budget the run was not allowed to exceed.
        clip_norm: the clip norm C (combined sqrt(sum C_l^2) for per-layer clipping).
        sensitivity_factor: clip norms one example can move the noised sum by (1 per-example,
            2 micro-batch); the accountant saw sigma, the noise std over C was sigma x this factor.
        noise_multipliers: sigma of each stage, ``dp_accounting``'s noise multiplier (noise std on the
            sum = sigma * sensitivity_factor * C; the convention of :mod:`dpaudit.training.privacy_plan`).
        noise_calibrated: True when sigma was calibrated for ``target_epsilon``.
        steps, planned_steps: what ran, what was planned.
        dataset_size: the real N when it is treated as public (``n_public``), else None (never released).
        n_public: True when q (and the steps) came from the real N, which is then treated as public.
        declared_dataset_size: the public size given with ``--dataset-size`` (None when not declared).
        public_parameters: one sentence saying from which values q and the steps were computed.
        epsilon_replace_one: the epsilon under replace-one adjacency (PLD, same event), stated when
            N is treated as public: the guarantee against an adversary who knows N.
        proven: True exactly when ``epsilon`` is a proven guarantee (False: shuffle, non-private);
            derived on construction.
        noise_tail: the floating-point noise sampler that drew the noise, its reach and the formula of
            ``noise_tail_delta`` (:func:`dpaudit.accounting.noise_tail_entry`: ``sampler``, ``sampler_text``,
            ``z_max``, ``formula``, ``text``; a /3 file's keeps its ``figure``); None when non-private or
            when the sampler is not characterised.
        stopped_at_budget: the ledger refused a step: the run stopped at the target.
        segments: the ledger's accounting segments (steps, q, sigma, factor) of what ran; their sigma
            is the same noise multiplier as ``noise_multipliers``.
        randomness: where the sampling and noise randomness came from, and the condition it puts on
            the guarantee (see :mod:`dpaudit.training.noise_source`).
        noise_seed_explicit: True when ``--noise-seed`` was given.
        group_privacy: per canary repetition count f of the inject manifest, the group bound for f
            rows: ``{"frequency", "epsilon", "delta", "bound"}``.
        paper_claim: what the method's paper would have claimed for this run, when it differs (e.g.
            eDP-SGD's sensitivity C instead of 2C): ``{"epsilon", "assumption"}``.
        unaccounted_releases: releases of private information that the epsilon does not cover.
        guarantee: one sentence stating the guarantee actually proven.
        notes: further caveats, each one sentence.
        details: trainer-specific facts of the mechanism that have no field of their own (e.g.
            edp-sgd's mode, micro-batches and per-layer clip norms); JSON values, read by people.
        data_split: the inject split the run trained on: ``"train"`` (``train.jsonl``, the private data) or
            ``"public"`` (``public.jsonl``, ``--data-split public``).
        public_data_only: True when the run saw public data only (the public split, and no start or a
            start whose own record says the same): its model holds no private data and needs no epsilon.
        init_from: the starting point (``--init-from``), or None for a fresh init: ``path`` as given,
            ``weights_sha256`` (file -> sha256), ``dpaudit_run``, ``trainer``, ``trained_on`` (the start
            run's split file, None when unknown), ``public_data_only`` (its record's, None when unknown) and
            ``requirement`` (the start must be public for the guarantee to mean what it says).
    """

    SCHEMA: ClassVar[str] = SCHEMA

    trainer: str
    private: bool
    mechanism: str
    privacy_unit: str = "example"
    adjacency: Adjacency = "add_remove"
    sampling: Sampling = "poisson"
    accountant: str | None = None
    event: Json | None = None
    epsilon: float | None = None
    epsilon_if_poisson: float | None = None
    delta: float | None = None
    accountant_delta: float | None = None
    noise_tail_delta: float | None = None
    target_epsilon: float | None = None
    clip_norm: float | None = None
    sensitivity_factor: float | None = None
    noise_multipliers: list[float] | None = None
    noise_calibrated: bool | None = None
    steps: int = 0
    planned_steps: int = 0
    dataset_size: int | None = None
    n_public: bool = True
    declared_dataset_size: int | None = None
    public_parameters: str = ""
    epsilon_replace_one: float | None = None
    proven: bool | None = None
    noise_tail: Json | None = None
    stopped_at_budget: bool = False
    segments: list[Json] = field(default_factory=list)
    randomness: str = ""
    noise_seed_explicit: bool = False
    group_privacy: list[GroupPrivacyRow] = field(default_factory=list)
    paper_claim: Json | None = None
    unaccounted_releases: list[str] = field(default_factory=list)
    guarantee: str = ""
    notes: list[str] = field(default_factory=list)
    covers: str = COVERAGE_NOTE
    released_files: list[str] = field(default_factory=lambda: list(RELEASED_FILES))
    private_files: list[str] = field(default_factory=lambda: list(PRIVATE_FILES))
    telemetry: str = TELEMETRY_NOTE
    details: Json = field(default_factory=dict)
    data_split: DataSplit = "train"
    public_data_only: bool = False
    init_from: Json | None = None

    def __post_init__(self) -> None:
        if self.data_split not in ("train", "public"):
            raise ValueError(f"data_split must be train or public, got {self.data_split!r}.")
        if self.public_data_only and self.data_split != "public":
            raise ValueError("public_data_only needs data_split public: a run on train.jsonl saw private data.")
        if self.adjacency not in ("add_remove", "replace_one"):
            raise ValueError(f"adjacency must be add_remove or replace_one, got {self.adjacency!r}.")
        if self.sampling not in ("poisson", "shuffle", "without_replacement"):
            raise ValueError(f"sampling must be poisson, shuffle or without_replacement, got {self.sampling!r}.")
        if self.private and self.event is None:
            raise ValueError("a private record needs the DpEvent of what ran.")
        if self.sampling == "shuffle" and self.epsilon is not None:
            raise ValueError("shuffled fixed-size batches prove no epsilon: store it as epsilon_if_poisson.")
        if not self.n_public and self.dataset_size is not None:
            raise ValueError(
                "dataset_size must be None when N is private (n_public false): the real N is never released."
            )
        if self.n_public and self.declared_dataset_size is not None:
            raise ValueError("a declared --dataset-size makes N private: n_public must be false.")
        proven = bool(self.private and self.epsilon is not None)
        if self.proven is None:
            object.__setattr__(self, "proven", proven)
        elif self.proven != proven:
            raise ValueError(
                f"proven must be {proven} for this record (a private run with a proven epsilon), got {self.proven}."
            )
        for name in ("epsilon", "epsilon_if_poisson", "epsilon_replace_one"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be finite or None, got {value}.")
        if self.delta is not None and self.accountant_delta is None:
            object.__setattr__(self, "accountant_delta", self.delta - (self.noise_tail_delta or 0.0))
        if self.delta is not None:
            tail = self.noise_tail_delta or 0.0
            accountant = self.accountant_delta  # set just above
            if not (
                accountant is not None
                and 0.0 < accountant
                and tail >= 0.0
                and accountant + tail <= self.delta * (1.0 + 1e-9)
            ):
                raise ValueError(
                    f"delta {self.delta!r} must hold accountant_delta {self.accountant_delta!r} and "
                    f"noise_tail_delta {self.noise_tail_delta!r} (delta >= their sum > 0)."
                )

    def delta_parts(self) -> DeltaParts | None:
        """(delta stated, the accountant's delta, the noise tail figure) of a record with a delta; None without
        one (non-private). The one reader of the split: the claim's delta is ``delta``, an epsilon
        recomputed from the event is at ``accountant``, and ``noise_tail`` is what the float sampler's reach
        costs (None: not characterised)."""
        if self.delta is None or self.accountant_delta is None:  # __post_init__ sets the second with the first
            return None
        return DeltaParts(
            delta=float(self.delta),
            accountant=float(self.accountant_delta),
            noise_tail=None if self.noise_tail_delta is None else float(self.noise_tail_delta),
        )

    @property
    def claimed_epsilon(self) -> float | None:
        """The epsilon a reader may quote: the proven one (None when nothing is proven)."""
        return self.epsilon

    def recompute_epsilon(self) -> float | None:
        """Epsilon recomputed from the stored event by the stored accountant at the accountant's delta (None when
        non-private).

        For ``sampling="shuffle"`` this is the as-if-Poisson figure, not a proven one.
        """
        if self.event is None or self.delta is None or self.accountant_delta is None:
            return None
        from dpaudit import accounting  # dp_accounting is heavy: only when asked

        return float(
            accounting.epsilon(
                accounting.event_from_json(self.event),
                self.accountant_delta,
                cast("accounting.Accountant", self.accountant or "pld"),
            )
        )  # epsilon() checks it

    def to_json(self) -> Json:
        """A JSON-serializable dict with ``schema`` first."""
        return {"schema": SCHEMA, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, obj: object, *, where: str = "privacy.json") -> PrivacyRecord:
        """Inverse of :meth:`to_json`; a wrong schema or a bad field is a one-line UserInputError.

        A schema /2 file is converted (:func:`_from_v2`): its segments' noise_multiplier was std / C; a /3 file
        (:func:`_from_v3`) gets its noise tail counted inside delta.
        """
        if not isinstance(obj, dict):
            raise UserInputError(f"{where}: expected a JSON object, got {type(obj).__name__}.")
        if obj.get("schema") == _SCHEMA_V2:
            obj = _from_v2(obj, where)
        if obj.get("schema") == _SCHEMA_V3:
            obj = _from_v3(obj, where)
        if obj.get("schema") != SCHEMA:
            raise UserInputError(
                f"{where}: schema {obj.get('schema')!r} is not {SCHEMA!r}; retrain with this dpaudit version."
            )
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in obj.items() if k != "schema"}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UserInputError(
                f"{where}: unknown field(s) {', '.join(unknown)}; the file was edited or is from another version."
            )
        try:
            return cls(**values)  # type: ignore[arg-type]  # the file's values: __post_init__ checks what must agree
        except (TypeError, ValueError) as err:
            raise UserInputError(f"{where}: {err}") from None


def _from_v2(obj: Mapping[str, object], where: str) -> dict[str, object]:
    """A /2 record in /3 terms: each segment's noise_multiplier (std / C there) divided by its
    sensitivity_factor, so that it is sigma, as ``noise_multipliers`` always was. The event is unchanged."""
    segments = obj.get("segments", [])
    if not isinstance(segments, list):
        raise UserInputError(f"{where}: segments must be a list, got {type(segments).__name__}.")
    converted = []
    for index, seg in enumerate(segments):
        seg = seg if isinstance(seg, dict) else {}
        sigma, factor = seg.get("noise_multiplier"), seg.get("sensitivity_factor", 1.0)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (sigma, factor)) or factor < 1.0:
            raise UserInputError(
                f"{where}: segments[{index}] of a {_SCHEMA_V2} file needs numeric noise_multiplier and "
                f"sensitivity_factor >= 1 to convert; retrain with this dpaudit version."
            )
        converted.append({**seg, "noise_multiplier": sigma / factor})
    return {**obj, "schema": _SCHEMA_V3, "segments": converted}


#: What a converted /3 record's guarantee adds: the claim with its old tail caveat counted in.
V3_TAIL_NOTE = (
    " [Read from a {schema} file, which stated the float noise sampler's tail figure {tail} as a caveat "
    "beside delta {old}: counted inside delta, the claim is ({eps}, {new})-DP.]"
)


def _from_v3(obj: Mapping[str, object], where: str) -> dict[str, object]:
    """A /3 record in /4 terms: its delta was the accountant's, and its ``noise_tail`` caveat (when it had one)
    held the run's figure beside it. The stated delta becomes the sum (what held), the guarantee says so and the
    group rows are recomputed at it; the event, and so the epsilon, are unchanged."""
    obj = dict(obj, schema=SCHEMA)
    delta, tail = obj.get("delta"), obj.get("noise_tail")
    if delta is None:
        return obj
    if not isinstance(delta, (int, float)) or isinstance(delta, bool):
        raise UserInputError(f"{where}: delta must be a number, got {delta!r}; retrain with this dpaudit version.")
    figure = tail.get("figure") if isinstance(tail, dict) else None
    obj["accountant_delta"] = float(delta)
    if not isinstance(figure, (int, float)) or isinstance(figure, bool) or figure < 0:
        return obj
    from dpaudit.common.figures import format_up

    stated = math.nextafter(float(delta) + float(figure), math.inf)  # the sum rounded up: it holds both parts
    obj.update(delta=stated, noise_tail_delta=float(figure))
    epsilon = obj.get("epsilon")
    if isinstance(epsilon, (int, float)) and not isinstance(epsilon, bool):
        obj["guarantee"] = str(obj.get("guarantee", "")) + V3_TAIL_NOTE.format(
            schema=_SCHEMA_V3,
            tail=format_up(float(figure), 3),
            old=format_up(float(delta), 2),
            eps=format_up(epsilon),
            new=format_up(stated, 3),
        )
        rows = obj.get("group_privacy")
        if isinstance(rows, list) and all(isinstance(r, dict) and isinstance(r.get("frequency"), int) for r in rows):
            obj["group_privacy"] = group_privacy_rows(float(epsilon), stated, [r["frequency"] for r in rows])
    return obj


def group_privacy_text(row: GroupPrivacyRow) -> str:
    """One ``group_privacy`` row in words, rounded up: ``(eps_f, delta_f)``, ``no guarantee`` when the
    group delta reaches 1 (stored as ``delta=None`` with an epsilon), ``none proven`` when the run
    proves no epsilon (``epsilon=None``)."""
    from dpaudit.common.figures import format_up

    if row.get("epsilon") is None:
        return "none proven"
    if row.get("delta") is None:
        return "no guarantee (group delta >= 1)"
    return f"({format_up(row['epsilon'])}, {format_up(row['delta'], 2)})"


def group_privacy_rows(epsilon: float | None, delta: float | None, frequencies: Sequence[int]) -> list[GroupPrivacyRow]:
    """The group bound for each canary frequency f: ``{"frequency", "epsilon", "delta", "bound"}``.

    A canary inserted f times is f rows, covered only by group privacy. ``delta`` is None with an
    epsilon when the group delta reaches 1 (no guarantee); epsilon None when nothing is proven.
    """
    from dpaudit import accounting  # dp_accounting is heavy: only when asked

    rows: list[GroupPrivacyRow] = []
    for f in frequencies:
        if epsilon is None or delta is None:
            rows.append({"frequency": f, "epsilon": None, "delta": None, "bound": accounting.GROUP_PRIVACY_BOUND})
            continue
        eps_f, delta_f = accounting.group_privacy(epsilon, delta, f)
        rows.append(
            {
                "frequency": f,
                "epsilon": eps_f,
                "delta": None if delta_f >= 1.0 else delta_f,
                "bound": accounting.GROUP_PRIVACY_BOUND,
            }
        )
    return rows


def read_privacy_record(path: str | os.PathLike[str]) -> PrivacyRecord:
    """``privacy.json`` as a :class:`PrivacyRecord`: the one file reader (train CLI, attacks, report, demo).

    Raises:
        UserInputError: one line naming the file: unreadable, not JSON, or not a record of this
            dpaudit's schema (:meth:`PrivacyRecord.from_json`).
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: not valid JSON ({err}); rerun dpaudit train.") from None
    except OSError as err:
        raise UserInputError(f"{path}: unreadable ({err.strerror or err}); rerun dpaudit train.") from None
    return PrivacyRecord.from_json(raw, where=str(path))
