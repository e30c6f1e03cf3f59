"""The typed, versioned results of ``dpaudit attack`` (``results.json``, schema ``dpaudit.attack/1``).

Frozen dataclasses with ``to_json``/``from_json``; nothing is an ad-hoc dictionary. Each attack has
its own result class, registered by attack name with :func:`register_result`; the built-in ones
(exposure, reconstruction and the membership-inference attacks) are all defined here, so reading
``results.json`` imports no attack module.

``results.json`` holds the summaries (parameters, statistics by frequency, warnings, the claimed
epsilon); the per-canary rows go to ``scores/canaries.jsonl`` as :class:`CanaryScore` records.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dpaudit.audit.intervals import Interval, OneSidedTest
from dpaudit.claim import Claim

SCHEMA = "dpaudit.attack/1"

GROUP_PRIVACY_NOTE = (
    "A canary inserted f times is f rows of train.jsonl. The model's (epsilon, delta) guarantee is per row, so it "
    "covers a canary of frequency f only through group privacy: roughly (f*epsilon, f*exp((f-1)*epsilon)*delta). "
    "High exposure of frequent canaries under DP is therefore not by itself a violation."
)


# -- generic (de)serialization of nested frozen dataclasses ---------------------------------------


def _to_json(value: Any) -> Any:
    if not isinstance(value, (type, JsonRecord)) and callable(getattr(value, "to_json", None)):
        return value.to_json()  # a record with its own format (e.g. dpaudit.audit.AuditResult), as _from_json reads it
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value) if f.metadata.get("json", True)
        }
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    return value


def _from_json(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _from_json(options[0], value) if len(options) == 1 else value
    if origin is tuple:
        (inner, *_rest) = typing.get_args(tp)
        return tuple(_from_json(inner, v) for v in value)
    if origin is dict:
        _key, inner = typing.get_args(tp)
        return {k: _from_json(inner, v) for k, v in value.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if hasattr(tp, "from_json") and tp.from_json.__func__ is not JsonRecord.from_json.__func__:  # type: ignore[attr-defined]
            return tp.from_json(value)
        hints = typing.get_type_hints(tp)
        kwargs = {
            f.name: _from_json(hints[f.name], value[f.name])
            for f in dataclasses.fields(tp)
            if f.init and f.metadata.get("json", True) and f.name in value
        }
        return tp(**kwargs)
    if tp is float and value is not None:
        return float(value)
    return value


class JsonRecord:
    """Mixin: ``to_json`` / ``from_json`` for a frozen dataclass of JSON types and nested records."""

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]):  # noqa: ANN206
        return _from_json(cls, obj)


# -- shared pieces ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class HeldoutUtility(JsonRecord):
    """A model's held-out utility as ``dpaudit attack`` measured it, beside its trivial baseline on the same targets.

    A dpaudit train run logs its own evaluation (``metrics.jsonl``); a model trained elsewhere has none, so the attack
    measures it on the inject run's ``heldout.jsonl`` (:mod:`dpaudit.attacks.utility`) and the report shows it in the
    same place, named as measured here.

    Attributes:
        name, rule: the figure's and its baseline's words (:data:`dpaudit.training.baselines.UTILITY_KINDS`).
        value, baseline: the model's accuracy and the best constant prediction's on the same targets.
        rows: the ``heldout.jsonl`` rows it was computed on, of ``heldout_rows``; ``left_out`` says why the others
            were left out (None: none was).
        predictions: the predictions scored (one per row for a classifier, the scored tokens for a language model).
    """

    name: str
    value: float
    baseline: float | None
    rule: str
    rows: int
    heldout_rows: int
    predictions: int
    left_out: str | None = None

    def where(self) -> str:
        """Where the figure comes from, in words (the terminal, the report)."""
        left = f"; {self.left_out}" if self.left_out else ""
        return (
            f"measured by dpaudit attack on {self.rows} of {self.heldout_rows} heldout.jsonl rows "
            f"({self.predictions} predictions{left})"
        )

    def text(self) -> str:
        """One line: the figure, its trivial baseline and where it comes from."""
        baseline = "" if self.baseline is None else f" (trivial baseline {self.baseline:.1%}: {self.rule})"
        return f"{self.name} {self.value:.1%}{baseline}, {self.where()}"


@dataclass(frozen=True, kw_only=True)
class ModelInfo(JsonRecord):
    """The audited model: where it is and what kind; ``utility``: its held-out utility as the attack measured it (a
    model trained elsewhere; None for a dpaudit run, whose train run logged its own, or without held-out rows)."""

    path: str
    kind: str
    architecture: str
    utility: HeldoutUtility | None = None


@dataclass(frozen=True, kw_only=True)
class DataInfo(JsonRecord):
    """The inject run the canaries come from."""

    path: str
    secret_format: str
    log2_space_size: float | None
    canaries: int
    controls: int
    template: str | None


@dataclass(frozen=True, kw_only=True)
class CanaryScore(JsonRecord):
    """One line of ``scores/canaries.jsonl``; fields of an attack that did not run stay None.

    The rank interval is [better + 1, better + tied + 1] (ties within the tolerance counted both
    ways); ``exposure_low``/``exposure_high`` are log2|R| - log2 of its high/low end.
    """

    id: str
    frequency: int
    secret: str
    reveal: int = 0
    fill: str | None = None
    exact: bool | None = None
    edit_distance: int | None = None
    normalized_edit_distance: float | None = None
    top_k_rank: int | None = None
    rank_low: int | None = None
    rank_high: int | None = None
    rank_method: str | None = None
    exposure_low: float | None = None
    exposure_high: float | None = None
    #: A causal LM's sampled exposure: the skew-normal extrapolation beside the interpolated rank (Carlini et al. 2019).
    exposure_skewnorm: float | None = None


# -- per-attack results ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ExposureRow(JsonRecord):
    """Exposure of the canaries inserted ``frequency`` times (0 = controls, the baseline)."""

    frequency: int
    n: int
    mean: float
    mean_ci: Interval | None
    median: float
    median_ci: Interval | None
    max: float
    vs_controls: OneSidedTest | None


@dataclass(frozen=True, kw_only=True)
class ExposureParameters(JsonRecord):
    secret_format: str
    log2_space_size: float | None
    reveal: int
    tolerance: float
    statistic: str = "exposure_low: the lower end of each canary's exposure interval (ties counted against it)"
    bootstrap_seed: int = 0


@dataclass(frozen=True, kw_only=True)
class AttackResult(JsonRecord):
    """Base of every attack's summary; ``attack`` names it (and picks the class when reading)."""

    attack: ClassVar[str] = ""
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"attack": self.attack, **_to_json(self)}


@dataclass(frozen=True, kw_only=True)
class ExposureResult(AttackResult):
    """Exposure (Carlini et al. 2019) by frequency, with the control canaries as the baseline row."""

    attack: ClassVar[str] = "exposure"
    parameters: ExposureParameters
    rows: tuple[ExposureRow, ...] = ()
    slope_per_doubling: float | None = None


@dataclass(frozen=True, kw_only=True)
class ReconstructionRow(JsonRecord):
    """Masked-secret reconstruction of the canaries inserted ``frequency`` times (Anil et al., Figure 7)."""

    frequency: int
    n: int
    exact_matches: int
    exact_match_rate: float
    exact_match_ci: Interval | None
    edit_distance_mean: float
    normalized_edit_distance_mean: float
    normalized_edit_distance_ci: Interval | None
    top_k_hits: int | None
    vs_controls: OneSidedTest | None


@dataclass(frozen=True, kw_only=True)
class ReconstructionParameters(JsonRecord):
    secret_format: str
    reveal: int
    top_k: int | None
    fill: str
    edit_distance: str = (
        "Levenshtein over the secret's symbols (digits or words), normalized by the true secret's length "
        "in symbols (1.0: every symbol wrong)"
    )
    bootstrap_seed: int = 0


@dataclass(frozen=True, kw_only=True)
class ReconstructionResult(AttackResult):
    """Top-1 fills of the masked secret: exact-match rate and edit distance by frequency."""

    attack: ClassVar[str] = "reconstruction"
    parameters: ReconstructionParameters
    rows: tuple[ReconstructionRow, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ExtractionRow(ReconstructionRow):
    """Extraction of the secrets of the canaries inserted ``frequency`` times from their prefix (a causal LM).

    The inherited fields read as for reconstruction with the greedy continuation as the fill: ``exact_matches``
    counts the secrets greedy decoding emits (extractable, Carlini et al. 2021/2023), ``top_k_hits`` those in the
    final beam. ``beam_exact_matches`` counts the beam's best continuation; ``fisher_vs_controls`` tests that the
    group's greedy extraction rate exceeds the controls' (one-sided Fisher exact test).
    """

    beam_exact_matches: int | None = None
    beam_exact_match_ci: Interval | None = None
    fisher_vs_controls: OneSidedTest | None = None


@dataclass(frozen=True, kw_only=True)
class ExtractionParameters(ReconstructionParameters):
    beam_width: int = 5
    decoding: str = ""
    context_tokens_min: int | None = None
    context_tokens_max: int | None = None
    extractable: str = (
        "greedy decoding from the canary's prefix (its k context tokens, k from context_tokens_min to "
        "context_tokens_max) emits the secret exactly: Carlini et al. 2021's extraction, k-extractable in "
        "Carlini et al. 2023's terms"
    )


@dataclass(frozen=True, kw_only=True)
class ExtractionResult(ReconstructionResult):
    """Greedy and beam extraction of each secret from its prefix (causal LMs): the reconstruction of a causal target,
    so every reader of :class:`ReconstructionResult` (report, summary, demo verdict) renders it."""

    attack: ClassVar[str] = "extraction"
    parameters: ExtractionParameters
    rows: tuple[ExtractionRow, ...] = ()


_RESULT_TYPES: dict[str, type[AttackResult]] = {}


def register_result(cls: type[AttackResult]) -> type[AttackResult]:
    """Make ``cls`` readable from ``results.json`` under its ``attack`` name (usable as a decorator)."""
    if not cls.attack:
        raise ValueError(f"{cls.__name__}.attack must name the attack.")
    _RESULT_TYPES[cls.attack] = cls
    return cls


register_result(ExposureResult)
register_result(ReconstructionResult)
register_result(ExtractionResult)


# -- membership inference (the attacks in dpaudit.attacks.mia and the modules it names) -------------


@dataclass(frozen=True, kw_only=True)
class MiaTaskResult(JsonRecord):
    """One attack on one membership task: the headline numbers and the full :class:`dpaudit.audit.AuditResult`.

    The flat fields are what a report shows; ``audit`` is everything (``AuditResult.to_json()``).
    """

    task: str
    n_members: int
    n_nonmembers: int
    auc: float
    auc_ci: tuple[float, float]
    tpr_at: tuple[dict[str, Any], ...]
    advantage: float
    roc: dict[str, Any]
    epsilon_lower_bound: float
    bound_methods: tuple[str, ...]
    bound_is_proof: bool
    bound_note: str
    claimed_epsilon: float | None
    delta: float
    exceeds_claim: bool
    coin_flip: bool
    scores_file: str
    info: dict[str, Any]
    warnings: tuple[str, ...] = ()
    audit: dict[str, Any]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MiaTaskResult:
        kw = dict(obj)
        kw["auc_ci"] = tuple(kw["auc_ci"])
        for name in ("tpr_at", "bound_methods", "warnings"):
            kw[name] = tuple(kw.get(name, ()))
        return cls(**kw)

    def audit_result(self) -> Any:
        """The full :class:`dpaudit.audit.AuditResult`."""
        from dpaudit.audit import AuditResult

        return AuditResult.from_json(self.audit)


@dataclass(frozen=True, kw_only=True)
class ShadowModel(JsonRecord):
    """One shadow or reference model an attack used: its cache entry (or ``--shadow-dirs`` directory), how it
    trained, and its held-out accuracy (its trainer's last evaluation; None when it logged none)."""

    index: int
    path: str
    train_rows: int
    steps: int | None = None
    batch_size: int | None = None
    heldout_accuracy: float | None = None
    cached: bool = False
    #: For a ``--peft lora`` model, what it trained (rank, alpha, targets, adapted modules, modules trained in full,
    #: the base's state sha256: :func:`dpaudit.scoring.adapters.layout`); None for a model that trained every weight.
    lora: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class ShadowModelsInfo(JsonRecord):
    """How an attack's shadow or reference models were made and how they compare with the target
    (``dpaudit.shadows/1``; absent from results written before it, read back as None).

    Attributes:
        role: ``"shadow"`` or ``"reference"``.
        origin: where the recipe came from (the target's manifest, ``--shadow-trainer``, ``--shadow-dirs``).
        trainer: the registered trainer that trained them (None for ``--shadow-dirs``).
        data: how each model's rows were drawn, in words.
        utility: the held-out figure compared (``"held-out accuracy"`` or ``"held-out MLM accuracy"``).
        target_heldout_accuracy, mean_heldout_accuracy: the target's and the models' mean.
        margin: the absolute difference above which ``mismatch`` is set and the result warns.
        target_rows, target_steps, target_batch_size: what the models were matched to.
        models: one :class:`ShadowModel` each.
        differences: each way the models train differently from the target (also in the warnings).
        target_lora: the target's LoRA layout when it is a ``--peft lora`` run (the models then train adapters of the
            same layout over the same base, each model's ``lora``); None otherwise.
        scored_as_adapters: the models were scored as adapters over one copy of their base in memory
            (:mod:`dpaudit.scoring.adapters`), not as k merged models.
    """

    schema: str = "dpaudit.shadows/1"
    role: str
    origin: str
    trainer: str | None
    data: str
    utility: str | None = None
    target_heldout_accuracy: float | None = None
    mean_heldout_accuracy: float | None = None
    margin: float
    mismatch: bool = False
    target_rows: int | None = None
    target_steps: int | None = None
    target_batch_size: int | None = None
    models: tuple[ShadowModel, ...] = ()
    differences: tuple[str, ...] = ()
    target_lora: dict[str, Any] | None = None
    scored_as_adapters: bool = False


@dataclass(frozen=True, kw_only=True)
class MiaResult(AttackResult):
    """A membership-inference attack's result: one :class:`MiaTaskResult` per task, and its parameters."""

    attack: ClassVar[str] = ""
    reference: ClassVar[str] = ""
    #: True for a baseline that never queries the model (the blind one): its audits are about the data, not the
    #: model, so the headline and the strongest-attack summaries leave them out.
    baseline: ClassVar[bool] = False
    parameters: dict[str, Any]
    tasks: tuple[MiaTaskResult, ...] = ()
    claimed_epsilon: float | None = None
    exceeds_claim: bool = False
    shadow_models: ShadowModelsInfo | None = None

    def to_json(self) -> dict[str, Any]:
        obj = {
            "attack": self.attack,
            "kind": "membership-inference",
            "reference": self.reference,
            "parameters": self.parameters,
            "claimed_epsilon": self.claimed_epsilon,
            "exceeds_claim": self.exceeds_claim,
            "warnings": list(self.warnings),
            "tasks": [t.to_json() for t in self.tasks],
        }
        if self.shadow_models is not None:
            obj["shadow_models"] = self.shadow_models.to_json()
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]):
        shadows = obj.get("shadow_models")
        return cls(
            parameters=obj["parameters"],
            tasks=tuple(MiaTaskResult.from_json(t) for t in obj["tasks"]),
            claimed_epsilon=obj.get("claimed_epsilon"),
            exceeds_claim=bool(obj.get("exceeds_claim")),
            warnings=tuple(obj.get("warnings", ())),
            shadow_models=None if shadows is None else ShadowModelsInfo.from_json(shadows),
        )

    def membership_audits(self) -> dict[str, Any]:
        """task -> :class:`dpaudit.audit.AuditResult` (what the report's membership section renders)."""
        return {t.task: t.audit_result() for t in self.tasks}

    def __getitem__(self, task: str) -> MiaTaskResult:
        for t in self.tasks:
            if t.task == task:
                return t
        raise KeyError(f"no {task!r} task in the {self.attack} result.")


@dataclass(frozen=True, kw_only=True)
class LeakingToken(JsonRecord):
    """One token of a member and how far fine-tuning moved it: ``llr`` = log p_target(x_t) - log p_base(x_t), in nats;
    ``secret``: the token covers part of a canary's secret."""

    token: str
    llr: float
    secret: bool = False


@dataclass(frozen=True, kw_only=True)
class LeakingMember(JsonRecord):
    """A top-scoring member of a task (its row id, never its text) and its most leaking tokens, largest ``llr``
    first."""

    task: str
    id: str
    score: float
    tokens: tuple[LeakingToken, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SecretTokenShift(JsonRecord):
    """The canaries inserted ``frequency`` times (0: controls, the baseline) of a task: the mean per-token ratio of
    their secret tokens beside that of their other tokens (None: no such token)."""

    task: str
    frequency: int
    canaries: int
    secret_tokens: int
    mean_secret_llr: float | None = None
    mean_other_llr: float | None = None


@dataclass(frozen=True, kw_only=True)
class TokenLeaks(JsonRecord):
    """Token-level leakage (``dpaudit.token-leaks/1``; after Tao & Shokri 2025, InfoRMIA): what the report shows of the
    per-token ratios, whose full table is ``file`` (``scores/tokens.jsonl``, a row per candidate).

    Attributes:
        top_members: per task, its top-scoring members and each one's most leaking tokens (secret tokens marked).
        secrets: per task and insertion count, the canaries' secret tokens beside their other tokens.
    """

    schema: str = "dpaudit.token-leaks/1"
    what: str = "per-token log-likelihood ratio log p_target(x_t) - log p_base(x_t), in nats"
    file: str = "scores/tokens.jsonl"
    top_members: tuple[LeakingMember, ...] = ()
    secrets: tuple[SecretTokenShift, ...] = ()


@dataclass(frozen=True, kw_only=True)
class TokenLeakMiaResult(MiaResult):
    """A membership result that also localizes the leak to tokens (``token_leaks``; None on a classifier, whose label
    has no tokens, and in results written before it)."""

    token_leaks: TokenLeaks | None = None

    def to_json(self) -> dict[str, Any]:
        obj = super().to_json()
        if self.token_leaks is not None:
            obj["token_leaks"] = self.token_leaks.to_json()
        return obj

    @classmethod
    def from_json(cls, obj: dict[str, Any]):  # noqa: ANN206
        leaks = obj.get("token_leaks")
        base = super().from_json(obj)
        return dataclasses.replace(base, token_leaks=None if leaks is None else _from_json(TokenLeaks, leaks))


def _result_class(
    name: str, reference: str, *, baseline: bool = False, base: type[MiaResult] = MiaResult
) -> type[MiaResult]:
    cls = type(
        f"{name.capitalize()}MiaResult",
        (base,),
        {"attack": name, "reference": reference, "baseline": baseline, "__module__": __name__},
    )
    cls = dataclass(frozen=True, kw_only=True)(cls)
    register_result(cls)
    return cls


LossResult = _result_class("loss", "Yeom et al. 2018, 'Privacy Risk in Machine Learning'")
ShadowResult = _result_class("shadow", "Shokri et al. 2017, as in Dupuy et al. 2021 (eDP-SGD), section 5")
RefResult = _result_class("ref", "Mireshghallah et al. 2022, 'Quantifying Privacy Risks of Masked Language Models'")
LiraResult = _result_class("lira", "Carlini et al. 2022, 'Membership Inference Attacks From First Principles'")
RmiaResult = _result_class("rmia", "Zarifzadeh et al. 2024, 'Low-Cost High-Power Membership Inference Attacks'")
CanaryResult = _result_class(
    "canary",
    "Panda et al. 2025, 'Privacy Auditing of Large Language Models' (designed canaries); Steinke et al. 2023 (one run)",
)
BlindResult = _result_class(
    "blind",
    "Das, Zhang & Tramer 2024, 'Blind Baselines Beat Membership Inference Attacks for Foundation Models'",
    baseline=True,
)
ZlibResult = _result_class(
    "zlib", "Carlini et al. 2021, 'Extracting Training Data from Large Language Models', section 5.1"
)
MinKResult = _result_class(
    "min-k", "Shi et al. 2024, 'Detecting Pretraining Data from Large Language Models' (Min-K% Prob)"
)
MinKPlusPlusResult = _result_class(
    "min-k++",
    "Zhang et al. 2024, 'Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large Language Models'",
)
_EZ_MIA = (
    "Ilic, Stanojevic & Cvejoski 2026, 'Powerful Training-Free Membership Inference Against Autoregressive Language "
    "Models' (EZ-MIA, arXiv 2601.12104)"
)
BaseRatioResult = _result_class(
    "base-ratio",
    "Mireshghallah et al. 2022 (likelihood ratio against a reference model), the target's base as the reference "
    "(as in " + _EZ_MIA + "); token level after Tao & Shokri 2025, InfoRMIA (arXiv 2510.05582)",
    base=TokenLeakMiaResult,
)
ErrorZoneResult = _result_class("error-zone", _EZ_MIA)
MinKPlusPlusBaseResult = _result_class(
    "min-k++-base", "Zhang et al. 2024, 'Min-K%++', calibrated against the target's base (" + _EZ_MIA + ")"
)
RESULT_CLASSES: dict[str, type[MiaResult]] = {
    c.attack: c
    for c in (
        LossResult,
        ShadowResult,
        RefResult,
        LiraResult,
        RmiaResult,
        CanaryResult,
        BlindResult,
        ZlibResult,
        MinKResult,
        MinKPlusPlusResult,
        BaseRatioResult,
        ErrorZoneResult,
        MinKPlusPlusBaseResult,
    )
}


def result_from_json(obj: dict[str, Any]) -> AttackResult:
    """Read one attack's summary, dispatching on its ``attack`` field."""
    name = obj.get("attack")
    if name not in _RESULT_TYPES:
        raise ValueError(f"unknown attack result {name!r}; known: {', '.join(sorted(_RESULT_TYPES))}.")
    body = {k: v for k, v in obj.items() if k != "attack"}
    return _from_json(_RESULT_TYPES[name], body)


@dataclass(frozen=True, kw_only=True)
class AttackResults:
    """Everything one ``dpaudit attack`` run found (``results.json`` + ``scores/canaries.jsonl``)."""

    model: ModelInfo
    data: DataInfo
    claimed: Claim
    attacks: tuple[AttackResult, ...]
    warnings: tuple[str, ...] = ()
    #: Attacks that failed while the others ran: ``{"attack", "error"}`` each (their results are absent).
    errors: tuple[dict[str, str], ...] = ()
    group_privacy: str = GROUP_PRIVACY_NOTE
    #: The headline lower bound and verdict (:class:`dpaudit.verdict.headline.Headline`), computed once when the attacks ran
    #: (:meth:`with_headline`) and stored in ``results.json``; None: not computed (read it with
    #: :func:`dpaudit.verdict.headline.headline_of`, which computes it then).
    headline: Any = None
    canaries: tuple[CanaryScore, ...] = field(default=(), metadata={"json": False})
    score_files: dict[str, Any] = field(default_factory=dict, metadata={"json": False})
    schema: str = SCHEMA

    def __getitem__(self, name: str) -> AttackResult:
        for result in self.attacks:
            if result.attack == name:
                return result
        raise KeyError(f"no {name!r} attack in these results (ran: {', '.join(r.attack for r in self.attacks)}).")

    def to_json(self) -> dict[str, Any]:
        """The ``results.json`` object (per-canary rows are written separately)."""
        return {
            "schema": self.schema,
            "model": self.model.to_json(),
            "data": self.data.to_json(),
            "claimed_privacy": self.claimed.to_json(),
            "group_privacy": self.group_privacy,
            "warnings": list(self.warnings),
            "errors": [dict(e) for e in self.errors],
            "attacks": [a.to_json() for a in self.attacks],
            **({} if self.headline is None else {"headline": self.headline.to_json()}),
        }

    def with_headline(self) -> AttackResults:
        """These results with their headline computed (:func:`dpaudit.verdict.headline.headline_of`) and stored."""
        from dpaudit.verdict.headline import audit_sources, headline

        head = headline(audit_sources(self), self.claimed)
        return dataclasses.replace(self, headline=head)

    @classmethod
    def from_json(cls, obj: dict[str, Any], canaries: tuple[CanaryScore, ...] = ()) -> AttackResults:
        schema = obj.get("schema")
        if schema != SCHEMA:
            raise ValueError(f"results schema is {schema!r}, this dpaudit reads {SCHEMA!r}.")
        claimed = Claim.from_json(obj["claimed_privacy"])
        head = None
        if obj.get("headline") is not None:
            from dpaudit.verdict.headline import Headline

            head = Headline.from_json(obj["headline"], claimed)
        return cls(
            schema=schema,
            headline=head,
            model=ModelInfo.from_json(obj["model"]),
            data=DataInfo.from_json(obj["data"]),
            claimed=claimed,
            group_privacy=obj["group_privacy"],
            warnings=tuple(obj.get("warnings", ())),
            errors=tuple(dict(e) for e in obj.get("errors", ())),
            attacks=tuple(result_from_json(a) for a in obj["attacks"]),
            canaries=tuple(canaries),
        )
