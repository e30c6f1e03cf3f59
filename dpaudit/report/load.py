"""Read what a report shows: one attack directory and the upstream files its manifest names.

The report is a pure function of attack directories (no model is loaded). It reads the attack
directory itself (verified against its manifest: a changed file is refused) and, through the
manifest's ``inputs`` (path -> sha256), the few upstream files it shows: the train run's
``metrics.jsonl`` and ``privacy.json`` (through the one reader,
:func:`dpaudit.scoring.source.read_privacy_record`) and the inject run's ``canaries.jsonl``. An upstream file that is
gone (a report rendered on another machine) is shown as unavailable; one whose hash no longer
matches is refused, since the page would otherwise describe a different run.

The held-out utility (:class:`Utility`) is the train run's last evaluation in ``metrics.jsonl``, else its
manifest's summary, with the trivial baseline the trainer logged beside it
(:mod:`dpaudit.training.baselines`); a run written before baselines were logged has none, and the page
then shows the figure alone. A model trained elsewhere has no train run: its utility is the one ``dpaudit
attack`` measured on ``heldout.jsonl`` (``results.json``'s ``model.utility``, :mod:`dpaudit.attacks.utility`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.attacks.results import SCHEMA as ATTACK_SCHEMA
from dpaudit.attacks.results import AttackResults
from dpaudit.claim import Claim, PrivacyRecord
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import MANIFEST_NAME, load_manifest, sha256_file
from dpaudit.training.baselines import UTILITY_KINDS, eval_rows_text

#: Files of the attack directory that the report does not show the hash of (it is the report itself).
REPORT_FILE = "index.html"


@dataclass(frozen=True, kw_only=True)
class MetricRow:
    """One ``metrics.jsonl`` row as the report plots it (None: not logged at that step)."""

    step: int
    loss: float | None = None
    accuracy: float | None = None
    grad_snr: float | None = None
    epsilon: float | None = None
    heldout: float | None = None
    heldout_baseline: float | None = None


@dataclass(frozen=True, kw_only=True)
class Utility:
    """A train run's held-out utility and its trivial baseline (the best constant prediction on the same rows and
    positions; None for a run written before trainers logged it).

    Attributes:
        step: the evaluation's step in ``metrics.jsonl``; None when read from the manifest summary.
        rows: on how many held-out rows the trainer evaluated it (the first ``--eval-examples``:
            :func:`dpaudit.training.baselines.eval_rows_text`); None for a run that did not record them.
        measured: for a model trained elsewhere, where ``dpaudit attack`` measured it (``results.json``'s
            ``model.utility``: on how many ``heldout.jsonl`` rows); None for a train run's own evaluation.
    """

    name: str
    value: float
    baseline: float | None
    rule: str
    step: int | None = None
    rows: str | None = None
    measured: str | None = None

    @property
    def beats_baseline(self) -> bool | None:
        """Whether the model does better than always predicting the constant (None: no baseline)."""
        return None if self.baseline is None else self.value > self.baseline


def utility_of(row: Mapping[str, Any], *, step: int | None = None) -> Utility | None:
    """The held-out utility of one evaluation row or manifest summary (None: it holds no held-out figure)."""
    for kind in UTILITY_KINDS:
        value = next((_finite(row.get(key)) for key in kind.keys if _finite(row.get(key)) is not None), None)
        if value is not None:
            return Utility(
                name=kind.name,
                value=value,
                baseline=_finite(row.get(kind.baseline_key)),
                rule=kind.rule,
                step=step,
                rows=eval_rows_text(row),
            )
    return None


@dataclass(frozen=True, kw_only=True)
class CanaryText:
    """The inject run's text of one canary (``canaries.jsonl``), for the per-canary table."""

    prefix: str
    suffix: str


@dataclass(frozen=True, kw_only=True)
class Upstream:
    """An upstream file the report reads: where it was, whether it could be read, and its hash."""

    role: str
    path: str
    sha256: str
    status: str  # "read", "missing" or "not recorded"


@dataclass(frozen=True, kw_only=True)
class StartPoint:
    """The ``--init-from`` start of the model a run attacked, as its ``privacy.json`` records it.

    Attributes:
        path: the start's directory as recorded.
        key: its identity: the sha256 of its weight files (``weights_sha256``), else its path.
        public: the start trained on public data only (its record says so).
        utility: its own last held-out evaluation (its ``metrics.jsonl``, hash-checked against its manifest, whose
            weights must be the ones recorded); None when it is not a dpaudit run, is gone or changed.
    """

    path: str
    key: str
    public: bool
    utility: Utility | None = None


@dataclass(frozen=True, kw_only=True)
class ReportRun:
    """Everything the report shows about one attack directory.

    Attributes:
        label: how the page names the run (as read: the directory as given by the user; on a page: its short
            label, :func:`dpaudit.report.models.label_runs`).
        results: the typed attack results.
        manifest: the attack directory's verified manifest.
        metrics: the training telemetry, or None when unavailable.
        canary_text: canary id -> prefix/suffix from the inject run (empty when unavailable).
        privacy: facts from ``privacy.json`` (None for a bare model or when unavailable).
        upstream_manifests: role ("train", "inject") -> that run's manifest, when readable.
        upstream: the upstream files looked for, with their status.
        utility: the model's held-out utility and its trivial baseline (None: not logged or unavailable).
        parts: the attack directories this run shows, each as read (one, or several of one model merged by
            :func:`dpaudit.report.models.merge_models`; empty before labelling: the run itself).
        data_key: the sha256 of the inject run's ``train.jsonl`` the attack read (None: not recorded); runs with the
            same data and the same start are one family (:mod:`dpaudit.report.answers`).
        start: the model's ``--init-from`` start (None: a fresh initialization, or no ``privacy.json``).
    """

    label: str
    results: AttackResults
    manifest: Mapping[str, Any]
    metrics: tuple[MetricRow, ...] | None = None
    canary_text: Mapping[str, CanaryText] = field(default_factory=dict)
    privacy: Claim | None = None
    upstream_manifests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    upstream: tuple[Upstream, ...] = ()
    utility: Utility | None = None
    parts: tuple[ReportRun, ...] = ()
    data_key: str | None = None
    start: StartPoint | None = None

    @property
    def directories(self) -> tuple[str, ...]:
        """The attack directories shown as this run, as the user gave them."""
        return tuple(p.label for p in self.parts) if self.parts else (self.label,)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _metric_row(row: Mapping[str, Any]) -> MetricRow:
    accuracy = row.get("accuracy", row.get("train_mlm_accuracy", row.get("train_accuracy")))
    utility = utility_of(row)
    return MetricRow(
        step=int(row["step"]),
        loss=_finite(row.get("loss")),
        accuracy=_finite(accuracy),
        grad_snr=_finite(row.get("grad_snr")),
        epsilon=_finite(row.get("epsilon")),
        heldout=utility.value if utility else None,
        heldout_baseline=utility.baseline if utility else None,
    )


def run_utility(
    metrics: Sequence[Mapping[str, Any]] | None, train_manifest: Mapping[str, Any] | None
) -> Utility | None:
    """The held-out utility at the end of training: the last evaluation row of ``metrics.jsonl`` (hash-checked), else
    the train manifest's summary; None when neither holds one."""
    for row in reversed(metrics or ()):
        utility = utility_of(row, step=row.get("step") if isinstance(row.get("step"), int) else None)
        if utility is not None:
            return utility
    summary = (train_manifest or {}).get("summary")
    return utility_of(summary) if isinstance(summary, Mapping) else None


def measured_utility(results: AttackResults) -> Utility | None:
    """The held-out utility ``dpaudit attack`` measured for a model trained elsewhere (``results.json``), or None."""
    measured = getattr(results.model, "utility", None)
    if measured is None:
        return None
    return Utility(
        name=measured.name,
        value=measured.value,
        baseline=measured.baseline,
        rule=measured.rule,
        measured=measured.where(),
    )


def _find_input(manifest: Mapping[str, Any], suffix: str) -> tuple[str, str] | None:
    """The (path, sha256) of the manifest input whose path ends with ``suffix`` (first in sorted order)."""
    inputs = manifest.get("inputs") or {}
    for path in sorted(inputs):
        if Path(path).as_posix().endswith(suffix):
            return path, str(inputs[path])
    return None


def _locate(recorded: str, attack_dir: Path) -> Path | None:
    """The recorded input path as given, else relative to the attack directory's parent."""
    for candidate in (Path(recorded), attack_dir.parent / recorded):
        if candidate.is_file():
            return candidate
    return None


def _read_upstream(
    role: str, suffix: str, manifest: Mapping[str, Any], attack_dir: Path
) -> tuple[Upstream, Path | None]:
    found = _find_input(manifest, suffix)
    if found is None:
        return Upstream(role=role, path="", sha256="", status="not recorded"), None
    recorded, digest = found
    path = _locate(recorded, attack_dir)
    if path is None:
        return Upstream(role=role, path=recorded, sha256=digest, status="missing"), None
    actual = sha256_file(path)
    if actual != digest:
        raise UserInputError(
            f"{path} changed after {attack_dir} was computed (sha256 {actual[:12]} != attack manifest "
            f"{digest[:12]}); rerun dpaudit attack on the current run."
        )
    return Upstream(role=role, path=recorded, sha256=digest, status="read"), path


def _read_manifest_near(path: Path | None) -> dict[str, Any] | None:
    """The manifest of the run directory holding ``path`` (best effort: provenance only)."""
    if path is None:
        return None
    for directory in (path.parent, path.parent.parent):
        if (directory / MANIFEST_NAME).is_file():
            try:
                return json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                return None
    return None


def load_run(path: str | os.PathLike[str], *, label: str | None = None) -> ReportRun:
    """Read and verify one attack directory for the report.

    Args:
        path: the attack directory (``dpaudit attack --out``).
        label: the name shown on the page (default: ``path`` as given).

    Raises:
        UserInputError: not an attack directory, a file changed since it was written, results of an
            unknown schema version, or an upstream file that changed.
    """
    from dpaudit.attacks.run import read_attack_dir
    from dpaudit.files.run_dirs import verify_run_dir

    directory = Path(path)
    manifest = load_manifest(directory)
    if not str(manifest["schema"]).startswith("dpaudit.attack/"):
        raise UserInputError(
            f"{directory} is a {manifest['schema']!r} directory, not an attack directory; pass the --out "
            "of dpaudit attack."
        )
    verify_run_dir(directory, schema_prefix="dpaudit.attack/")  # hashes first: a changed file is named as such
    try:
        raw = json.loads((directory / "results.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        raw = None
    results_schema = raw.get("schema") if isinstance(raw, dict) else None
    if isinstance(raw, dict):  # the top-level shape first: a number where an object belongs names the field
        for key, expected_type, kind in (
            ("model", dict, "an object"),
            ("data", dict, "an object"),
            ("claimed_privacy", dict, "an object"),
            ("attacks", list, "a list"),
        ):
            if key in raw and not isinstance(raw[key], expected_type):
                raise UserInputError(
                    f"{directory / 'results.json'}: field {key} must be {kind}, got {_short(raw[key])}; "
                    "rerun dpaudit attack (the files were edited or written by another program)."
                )
        for i, item in enumerate(raw.get("attacks") or ()):
            if not isinstance(item, dict):
                raise UserInputError(
                    f"{directory / 'results.json'}: field attacks[{i}] must be an object, got {_short(item)}; "
                    "rerun dpaudit attack (the files were edited or written by another program)."
                )
    if results_schema is not None and results_schema != ATTACK_SCHEMA:
        raise UserInputError(
            f"{directory / 'results.json'}: results schema {results_schema!r} is not {ATTACK_SCHEMA!r}, "
            "the version this dpaudit reads; render it with the dpaudit that wrote it or rerun dpaudit attack."
        )
    try:
        results = read_attack_dir(directory)
    except UserInputError:
        raise
    except (
        ValueError,
        KeyError,
        TypeError,
        AttributeError,
        IndexError,
    ) as err:  # e.g. a number where an object belongs
        raise UserInputError(
            f"{directory / 'results.json'}: cannot read the results ({err}); rerun dpaudit attack with "
            "this dpaudit version."
        ) from None
    problem = type_problem(results)
    if problem is not None:
        where, expected, value = problem
        name = "scores/canaries.jsonl" if where.startswith("canaries[") else "results.json"
        if where.startswith("canaries["):  # one record per line of scores/canaries.jsonl
            index, _, rest = where[len("canaries[") :].partition("]")
            where = f"{rest.lstrip('.')} (line {int(index) + 1})"
        elif where.split(".")[0] == "claimed":  # the JSON key of AttackResults.claimed
            where = "claimed_privacy" + where[len("claimed") :]
        raise UserInputError(
            f"{directory / name}: field {where} must be {expected}, got {_short(value)}; rerun dpaudit "
            "attack (the files were edited or written by another program)."
        )
    return _with_upstream(directory, results, manifest, label=str(path) if label is None else label)


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None), list, dict)) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def type_problem(value: Any, tp: Any = None, where: str = "") -> tuple[str, str, Any] | None:
    """The first field of a typed record whose value does not have its annotated type, as
    ``(field path, expected type in words, value)``; None when every field checks.

    ``results.json`` is read into dataclasses without converting types (a string stays a string
    where a count belongs), and the hash check passes whenever the manifest was re-hashed after an
    edit, so the report checks the types itself: otherwise a wrong type surfaces as a traceback
    deep inside the renderer. Annotations it cannot check (``Any``, arrays) are skipped.
    """
    if tp is None:
        tp = type(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or isinstance(tp, typing.TypeVar) or origin is typing.ClassVar:
        return None
    if origin in (typing.Union, types.UnionType):
        fits = [a for a in args if type_problem(value, a, where) is None]
        return None if fits else (where, " or ".join(_words(a) for a in args), value)
    if origin is typing.Literal:
        return None if value in args else (where, "one of " + ", ".join(map(repr, args)), value)
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            return where, _words(tp), value
        inner = list(args)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(value) != len(args):
                return where, _words(tp), value
        else:
            inner = [args[0] if args else Any] * len(value)
        for i, (item, item_tp) in enumerate(zip(value, inner)):
            found = type_problem(item, item_tp, f"{where}[{i}]")
            if found:
                return found
        return None
    if origin is dict:
        if not isinstance(value, dict):
            return where, "an object", value
        for key, item in value.items():
            found = type_problem(item, args[1] if len(args) == 2 else Any, f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None
    if tp is type(None):
        return None if value is None else (where, "null", value)
    if tp is bool:
        return None if isinstance(value, (bool, np.bool_)) else (where, _words(tp), value)
    if tp is int:
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
        return None if ok else (where, _words(tp), value)
    if tp is float:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        return None if ok else (where, _words(tp), value)
    if tp is str:
        return None if isinstance(value, str) else (where, _words(tp), value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, tp):
            return where, _words(tp), value
        try:
            hints = typing.get_type_hints(type(value))
        except Exception:  # noqa: BLE001  (an annotation this module cannot resolve: not checked)
            return None
        for f in dataclasses.fields(value):
            found = type_problem(
                getattr(value, f.name), hints.get(f.name, Any), f"{where}.{f.name}" if where else f.name
            )
            if found:
                return found
        return None
    return None  # arrays and other types: not checked here


def _words(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        return "a list"
    if origin is dict or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return "an object"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string", type(None): "null"}.get(
        tp, str(tp)
    )


def run_claim(results: AttackResults, record: PrivacyRecord | None) -> Claim | None:
    """The claim the report shows beside the results: the one ``results.json`` stores (the attack read it from
    ``privacy.json``), or, for results written before the claim carried ``privacy.json``'s facts, the claim of the
    record read now (:func:`dpaudit.claim.claim_of_record`); None without a record."""
    if results.claimed.trainer is not None:
        return results.claimed
    if record is None:
        return None
    from dpaudit.claim import claim_of_record

    return claim_of_record(record)


def run_from_results(
    directory: str | os.PathLike[str], results: AttackResults, manifest: Mapping[str, Any], *, label: str
) -> ReportRun:
    """A :class:`ReportRun` of results still in memory (``dpaudit attack`` renders its ``index.html``
    in the staged directory, before the manifest is final)."""
    return _with_upstream(Path(directory), results, manifest, label=label)


def read_start(init_from: Mapping[str, Any] | None, attack_dir: Path) -> StartPoint | None:
    """The :class:`StartPoint` of a record's ``init_from`` (None without one). Its utility is read only when the start
    is a dpaudit train run whose manifest lists the recorded weights and whose ``metrics.jsonl`` still matches it."""
    if not isinstance(init_from, Mapping) or not isinstance(init_from.get("path"), str):
        return None
    recorded = init_from["path"]
    weights = init_from.get("weights_sha256")
    weights = {str(k): str(v) for k, v in weights.items()} if isinstance(weights, Mapping) else {}
    key = "sha256:" + ",".join(sorted(weights.values())) if weights else "path:" + recorded
    start = StartPoint(path=recorded, key=key, public=init_from.get("public_data_only") is True)
    folder = next((c for c in (Path(recorded), attack_dir.parent / recorded) if (c / MANIFEST_NAME).is_file()), None)
    if folder is None or not weights:
        return start
    try:
        outputs = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8")).get("outputs") or {}
        if any(outputs.get(f"model/{name}") != digest for name, digest in weights.items()):
            return start  # another model than the one this run started from
        metrics = folder / "metrics.jsonl"
        if not metrics.is_file() or outputs.get("metrics.jsonl") != sha256_file(metrics):
            return start
        from dpaudit.files.run_dirs import read_jsonl

        rows = [r for r in read_jsonl(metrics) if isinstance(r, dict)]
    except (OSError, ValueError, AttributeError):
        return start
    return dataclasses.replace(start, utility=run_utility(rows, None))


def _with_upstream(directory: Path, results: AttackResults, manifest: Mapping[str, Any], *, label: str) -> ReportRun:
    metrics_up, metrics_path = _read_upstream("training telemetry", "metrics.jsonl", manifest, directory)
    privacy_up, privacy_path = _read_upstream("privacy record", "privacy.json", manifest, directory)
    canary_up, canary_path = _read_upstream("canaries", "canaries.jsonl", manifest, directory)
    metrics = None
    rows: list[dict[str, Any]] = []
    if metrics_path is not None:
        from dpaudit.files.run_dirs import read_jsonl

        rows = [r for r in read_jsonl(metrics_path) if isinstance(r, dict) and isinstance(r.get("step"), int)]
        metrics = tuple(_metric_row(r) for r in rows)
    record = None
    if privacy_path is not None:
        from dpaudit.scoring.source import read_privacy_record

        record = read_privacy_record(privacy_path)  # read (and schema-checked) whatever the results hold
    privacy = run_claim(results, record)
    canary_text: dict[str, CanaryText] = {}
    if canary_path is not None:
        from dpaudit.files.run_dirs import read_jsonl

        canary_text = {
            str(r["id"]): CanaryText(prefix=str(r.get("prefix", "")), suffix=str(r.get("suffix", "")))
            for r in read_jsonl(canary_path)
        }
    upstream_manifests = {
        role: m
        for role, m in (
            ("train", _read_manifest_near(privacy_path or metrics_path)),
            ("inject", _read_manifest_near(canary_path)),
        )
        if m is not None
    }
    return ReportRun(
        label=label,
        results=results,
        manifest=manifest,
        metrics=metrics,
        canary_text=canary_text,
        privacy=privacy,
        upstream_manifests=upstream_manifests,
        upstream=(metrics_up, privacy_up, canary_up),
        utility=run_utility(rows, upstream_manifests.get("train")) or measured_utility(results),
        data_key=(_find_input(manifest, "train.jsonl") or (None, None))[1],
        start=read_start(record.init_from if record is not None else None, directory),
    )
