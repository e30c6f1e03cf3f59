"""Read what the white-box page shows: one ``dpaudit audit-trainer`` directory, as typed records.

The directory holds ``whitebox.json`` (schema ``dpaudit.whitebox/1``: the claim, every bound, the
verdict), ``scores/whitebox.jsonl`` (one row per canary per run: its coin and its score in each view)
and ``manifest.json``. :func:`load_whitebox` verifies the directory against its manifest first (a
changed file is refused, as for attack directories); :func:`read_whitebox` reads the files without a
manifest, for ``dpaudit audit-trainer``, which renders ``index.html`` in the staged directory before
the manifest is written. Values of the wrong type (a file edited and re-hashed, or written by another
program) are refused with a one-line error naming the field, never a traceback from the renderer.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.claim import Claim
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import MANIFEST_NAME, load_manifest, sha256_file
from dpaudit.report.load import type_problem
from dpaudit.whitebox.bounds import Bound

__all__ = [
    "RESULTS_FILE",
    "SCHEMA",
    "SCORES_FILE",
    "VIEWS",
    "WhiteboxRun",
    "WhiteboxScores",
    "is_whitebox_dir",
    "load_whitebox",
    "read_whitebox",
]

#: The schema of ``whitebox.json`` (and of the directory's manifest) this dpaudit reads.
SCHEMA = "dpaudit.whitebox/1"
RESULTS_FILE = "whitebox.json"
SCORES_FILE = "scores/whitebox.jsonl"
#: What the auditor sees: every step's noisy sum, or only the final parameters (the order shown).
VIEWS = ("all_iterates", "last_iterate")
#: The verdict's two kinds of bound.
KINDS = ("one-run", "pooled")


@dataclass(frozen=True, kw_only=True)
class WhiteboxScores:
    """Every canary's score: ``run[i]``, ``member[i]`` and, per view, ``values[view][i]`` of row i."""

    run: np.ndarray
    member: np.ndarray
    values: Mapping[str, np.ndarray]

    def of(self, view: str, *, member: bool) -> np.ndarray:
        return self.values[view][self.member == member]


@dataclass(frozen=True, kw_only=True)
class WhiteboxRun:
    """Everything the white-box page shows about one audit directory.

    Attributes:
        label: how a comparison page names the audit (the directory as given).
        trainer, config, settings: the trainer audited, its public config, the audit's options.
        unit, slots, partners: the clipping unit, micro-batches per step, partner rows per canary.
        canaries, runs: m canaries per run, R runs.
        claim: the claim under test.
        confidence: the verdict's; each bound holds at ``bound_confidence``.
        primary_kind, primary_view, primary: the verdict's bound (the larger of its two).
        refuted: the claimed (epsilon, delta) is contradicted by a bound valid for any mechanism (``any_mechanism``).
        mechanism_refuted: the primary bound rejects the claimed curve: the trainer is not the stated mechanism
            (files written before this was recorded read their ``refuted`` as this, the weaker statement).
        any_mechanism: when the curve is refuted, the same test's bound valid for any mechanism (the figure printed).
        ceilings: the verdict bounds' values for a perfect attack at the audit's sizes ("one-run", "pooled").
        auc: per view, over the pooled canaries of every run.
        one_run: per view, per run, method -> bound. pooled: per view, method -> bound.
        scores: the per-canary scores (None when not read).
        manifest: the verified manifest (None: rendered before it was written).
        files: (name, sha256) of the files the page was rendered from.
    """

    label: str
    trainer: str
    config: Mapping[str, Any]
    settings: Mapping[str, Any]
    unit: str
    slots: int
    partners: int
    canaries: int
    runs: int
    claim: Claim
    confidence: float
    bound_confidence: float
    primary_kind: str
    primary_view: str
    primary: Bound
    refuted: bool
    auc: dict[str, float]
    mechanism_refuted: bool = False
    any_mechanism: Bound | None = None
    ceilings: dict[str, float] = dataclasses.field(default_factory=dict)
    #: The one-run bound the verdict rests on (planned from the claim): "claim_family", "order_stats" or "gauss_pair".
    one_run_method: str = "claim_family"
    #: The pooled bound the verdict rests on (planned from the claim, m and R): "claim_family" or "order_stats".
    pooled_method: str = "claim_family"
    one_run: dict[str, tuple[dict[str, Bound], ...]]
    pooled: dict[str, dict[str, Bound]]
    scores: WhiteboxScores | None
    manifest: Mapping[str, Any] | None
    files: tuple[tuple[str, str], ...]

    @property
    def claimed_epsilon(self) -> float:
        """The claim's epsilon (a white-box audit always states one: :func:`read_whitebox_dir` checks it)."""
        if self.claim.epsilon is None:
            raise ValueError("the white-box claim states no epsilon")
        return self.claim.epsilon

    @property
    def claimed_delta(self) -> float:
        """The claim's delta (checked on read, as :attr:`claimed_epsilon`)."""
        if self.claim.delta is None:
            raise ValueError("the white-box claim states no delta")
        return self.claim.delta

    @property
    def verdict_bounds(self) -> tuple[tuple[str, Bound], ...]:
        """The verdict's two bounds, fixed before the audit ran: (kind, bound) of the one-run claimed
        curve of the first run and the pooled test planned from the claim, all iterates."""
        out = []
        method = self.one_run_method
        if self.one_run.get("all_iterates") and method in self.one_run["all_iterates"][0]:
            out.append(("one-run", self.one_run["all_iterates"][0][method]))
        if self.pooled_method in self.pooled.get("all_iterates", {}):
            out.append(("pooled", self.pooled["all_iterates"][self.pooled_method]))
        return tuple(out)


def is_whitebox_dir(manifest: Mapping[str, Any]) -> bool:
    """Whether a run directory's manifest is an audit-trainer directory's (any version)."""
    return str(manifest.get("schema", "")).startswith("dpaudit.whitebox/")


def _problem(path: Path, field: str, expected: str, value: Any) -> UserInputError:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None), list, dict)) else repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return UserInputError(
        f"{path}: field {field} must be {expected}, got {text}; rerun dpaudit audit-trainer (the files "
        "were edited or written by another program)."
    )


def _field(obj: dict[str, Any], key: str) -> Any:
    """``obj[key]``, None when absent: the record's types are checked after the read (:func:`type_problem`)."""
    return obj.get(key)


def _bound(obj: Any) -> Bound:
    if not isinstance(obj, dict):
        raise TypeError("a bound must be an object")
    return Bound(
        method=_field(obj, "method"),  # type_problem checks every field's type after the read
        proves=_field(obj, "proves"),
        epsilon=_field(obj, "epsilon"),
        confidence=_field(obj, "confidence"),
        guesses=_field(obj, "guesses"),
        correct=_field(obj, "correct"),
        scale=_field(obj, "scale"),
        selection=_field(obj, "selection"),
        capped=obj.get("capped", False),
        ceiling=obj.get("ceiling"),
        canaries_needed=obj.get("canaries_needed"),
    )


def _bounds(obj: Any) -> dict[str, Bound]:
    if not isinstance(obj, dict):
        raise TypeError("bounds must be an object of method -> bound")
    return {str(k): _bound(v) for k, v in sorted(obj.items())}


def _fields(raw: Mapping[str, Any]) -> dict[str, Any]:
    claim = raw["claim"]
    primary = raw["primary"]
    return {
        "trainer": raw["trainer"],
        "config": raw.get("config", {}),
        "settings": raw.get("settings", {}),
        "unit": raw["unit"],
        "slots": raw["slots"],
        "partners": raw["partners"],
        "canaries": raw["canaries"],
        "runs": raw["runs"],
        "claim": Claim.from_json(claim, where="whitebox.json: claim"),
        "confidence": raw["confidence"],
        "bound_confidence": raw["bound_confidence"],
        "primary_kind": primary["kind"],
        "primary_view": primary["view"],
        "primary": _bound(primary),
        # a file from before mechanism_refuted was recorded: its "refuted" meant the curve was rejected
        "refuted": raw["refuted"] if "mechanism_refuted" in raw else False,
        "mechanism_refuted": raw.get("mechanism_refuted", raw["refuted"]),
        "any_mechanism": None if raw.get("any_mechanism") is None else _bound(raw["any_mechanism"]),
        "ceilings": {str(k): float(v) for k, v in (raw.get("ceilings") or {}).items()},
        "one_run_method": raw.get("one_run_method", "claim_family"),
        "pooled_method": raw.get("pooled_method", "claim_family"),
        "auc": dict(raw["auc"]),
        "one_run": {str(view): tuple(_bounds(run) for run in runs) for view, runs in raw["one_run"].items()},
        "pooled": {str(view): _bounds(bounds) for view, bounds in raw["pooled"].items()},
    }


def _check(path: Path, run: WhiteboxRun) -> None:
    problem = type_problem(run)
    if problem is not None:
        raise _problem(path, *problem)
    finite: list[tuple[str, float | None]] = [
        ("claim.epsilon", run.claim.epsilon),
        ("claim.delta", run.claim.delta),
        ("primary.epsilon", run.primary.epsilon),
    ]
    for where, value in finite:
        if value is None or not math.isfinite(value) or value < 0:
            raise _problem(path, where, "a finite number >= 0", value)
    if run.primary_kind not in KINDS:
        raise _problem(path, "primary.kind", "one of " + ", ".join(map(repr, KINDS)), run.primary_kind)
    if run.runs < 1 or run.canaries < 2:
        raise _problem(
            path,
            "runs" if run.runs < 1 else "canaries",
            "a count of runs >= 1 and canaries >= 2",
            run.runs if run.runs < 1 else run.canaries,
        )
    for view, runs in run.one_run.items():
        if len(runs) != run.runs:
            raise _problem(path, f"one_run.{view}", f"a list of {run.runs} runs' bounds", f"{len(runs)} runs")


def _scores(path: Path, *, canaries: int, runs: int) -> WhiteboxScores:
    from dpaudit.files.run_dirs import read_jsonl

    run: list[int] = []
    member: list[bool] = []
    values: dict[str, list[float]] = {view: [] for view in VIEWS}
    try:
        for line, row in enumerate(read_jsonl(path), start=1):
            if not (
                isinstance(row.get("run"), int)
                and isinstance(row.get("member"), bool)
                and all(isinstance(row.get(v), (int, float)) and not isinstance(row.get(v), bool) for v in VIEWS)
            ):
                raise UserInputError(
                    f"{path}: line {line} must have an integer run, a true/false member and a number "
                    f"per view ({', '.join(VIEWS)}); rerun dpaudit audit-trainer."
                )
            run.append(row["run"])
            member.append(row["member"])
            for view in VIEWS:
                values[view].append(float(row[view]))
    except (OSError, ValueError) as err:
        raise UserInputError(f"{path}: cannot read the canary scores ({err}); rerun dpaudit audit-trainer.") from None
    if len(run) != canaries * runs:
        raise UserInputError(
            f"{path}: {len(run)} score rows, expected {canaries} canaries x {runs} runs = "
            f"{canaries * runs}; rerun dpaudit audit-trainer."
        )
    return WhiteboxScores(
        run=np.asarray(run, int),
        member=np.asarray(member, bool),
        values={view: np.asarray(v, float) for view, v in values.items()},
    )


def read_whitebox(
    directory: str | os.PathLike[str], *, label: str | None = None, manifest: Mapping[str, Any] | None = None
) -> WhiteboxRun:
    """Read an audit directory's ``whitebox.json`` and scores (no hash check: see :func:`load_whitebox`).

    Raises:
        UserInputError: a missing or unreadable file, another schema version, or a field of the wrong type.
    """
    directory = Path(directory)
    path = directory / RESULTS_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserInputError(f"{path} is missing; {directory} is not a dpaudit audit-trainer directory.") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(f"{path}: not valid JSON ({err}); rerun dpaudit audit-trainer.") from None
    if not isinstance(raw, dict):
        raise UserInputError(f"{path}: not a JSON object; rerun dpaudit audit-trainer.")
    if raw.get("schema") != SCHEMA:
        raise UserInputError(
            f"{path}: schema {raw.get('schema')!r} is not {SCHEMA!r}, the version this dpaudit reads; "
            "render it with the dpaudit that wrote it or rerun dpaudit audit-trainer."
        )
    try:
        claim = raw["claim"]
        if (
            isinstance(claim, dict)
            and "steps" in claim
            and (not isinstance(claim["steps"], int) or isinstance(claim["steps"], bool))
        ):
            raise _problem(path, "claim.steps", "an integer", claim["steps"])
        fields = _fields(raw)
    except KeyError as err:
        raise UserInputError(f"{path}: field {err.args[0]} is missing; rerun dpaudit audit-trainer.") from None
    except (TypeError, AttributeError, ValueError) as err:
        raise UserInputError(f"{path}: cannot read the audit ({err}); rerun dpaudit audit-trainer.") from None
    names = [RESULTS_FILE, SCORES_FILE]
    run = WhiteboxRun(
        label=str(directory) if label is None else label, scores=None, manifest=manifest, files=(), **fields
    )
    _check(path, run)
    scores = _scores(directory / SCORES_FILE, canaries=run.canaries, runs=run.runs)
    files = tuple((name, sha256_file(directory / name)) for name in names)
    return dataclasses.replace(run, scores=scores, files=files)


def load_whitebox(path: str | os.PathLike[str], *, label: str | None = None) -> WhiteboxRun:
    """Read and verify one audit-trainer directory for the report (hashes first, as for attack directories).

    Raises:
        UserInputError: not an audit-trainer directory, a file changed since it was written, or results of
            another schema version.
    """
    from dpaudit.files.run_dirs import verify_run_dir

    directory = Path(path)
    manifest = load_manifest(directory)
    if not is_whitebox_dir(manifest):
        raise UserInputError(
            f"{directory} is a {manifest['schema']!r} directory, not an audit-trainer directory; pass the "
            "--out of dpaudit audit-trainer."
        )
    verify_run_dir(directory, schema_prefix="dpaudit.whitebox/")  # a changed file is named as such
    outputs = manifest.get("outputs") or {}
    for name in (RESULTS_FILE, SCORES_FILE):
        if name not in outputs:
            raise UserInputError(
                f"{directory / MANIFEST_NAME} does not list {name}; the directory is damaged, rerun "
                "dpaudit audit-trainer."
            )
    return read_whitebox(directory, label=str(path) if label is None else label, manifest=manifest)
