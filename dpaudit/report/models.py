"""One model, one row: attack directories of the same model merged, and the short label each model gets.

A user often attacks one model twice (``--attacks exposure,reconstruction`` into one directory, then
``--attacks loss,lira`` into another): the page shows them as ONE model (one row of the comparison table,
one verdict). Two attack directories are of the same model when the model weights they read are the same
files: the sha256 of every ``*.safetensors`` input in their manifests (the model's path when none is
recorded). They are merged only when they ran different attacks; the same attack run twice on one model
(e.g. exposure with and without ``--reveal``) stays two rows, each named by its directory.

The merged run's headline is recomputed over the audits of every merged directory (the Bonferroni
correction then counts all of them), so its bound stays valid at 95% over everything it was chosen from.

Labels: ``--label NAME=DIR`` names a model; otherwise the model's own directory name (``runs/np`` -> ``np``),
else the attack directory's name when two models share a directory name, numbered when still equal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath

from dpaudit.attacks.results import CanaryScore
from dpaudit.report.load import ReportRun

__all__ = ["label_runs", "merge_models", "model_key"]


def model_key(run: ReportRun) -> str:
    """The identity of the model a run attacked: the sha256 of its weight files as the attack manifest records them,
    else the model's path."""
    inputs = run.manifest.get("inputs") or {}
    weights = sorted(str(digest) for path, digest in inputs.items() if str(path).endswith(".safetensors"))
    if weights:
        return "sha256:" + ",".join(weights)
    return "path:" + PurePath(run.results.model.path).as_posix()


def _merge_canaries(runs: Sequence[ReportRun]) -> tuple[CanaryScore, ...]:
    """Per-canary records of every run, one per canary id, each field taken from the first run that has it."""
    merged: dict[str, CanaryScore] = {}
    for run in runs:
        for c in run.results.canaries:
            if c.id not in merged:
                merged[c.id] = c
                continue
            old = merged[c.id]
            fill = {
                f.name: getattr(c, f.name)
                for f in dataclasses.fields(c)
                if getattr(old, f.name) is None and getattr(c, f.name) is not None
            }
            if fill:
                merged[c.id] = dataclasses.replace(old, **fill)
    return tuple(merged.values())


def _merge(group: Sequence[ReportRun]) -> ReportRun:
    first = group[0]
    if len(group) == 1:
        return first
    attacks = tuple(a for run in group for a in run.results.attacks)
    warnings = tuple(dict.fromkeys(w for run in group for w in run.results.warnings))
    # headline=None: the merged page's headline is over every audit of the group (its own correction), computed anew
    results = dataclasses.replace(
        first.results,
        attacks=attacks,
        warnings=warnings,
        canaries=_merge_canaries(group),
        headline=None,
        score_files={k: v for run in reversed(group) for k, v in run.results.score_files.items()},
    )

    def first_of(name: str):  # noqa: ANN202
        return next((getattr(r, name) for r in group if getattr(r, name)), getattr(first, name))

    return dataclasses.replace(
        first,
        results=results,
        metrics=first_of("metrics"),
        canary_text=first_of("canary_text"),
        privacy=first_of("privacy"),
        upstream_manifests=first_of("upstream_manifests"),
        utility=first_of("utility"),
        upstream=tuple(dict.fromkeys(u for r in group for u in r.upstream)),
        parts=tuple(p for r in group for p in (r.parts or (r,))),
    )


def merge_models(runs: Sequence[ReportRun]) -> list[ReportRun]:
    """The runs with every set of attack directories of one model (:func:`model_key`) that ran different attacks
    merged into one run, in the order each model first appears."""
    groups: dict[str, list[ReportRun]] = {}
    for run in runs:
        groups.setdefault(model_key(run), []).append(run)
    out: list[ReportRun] = []
    for group in groups.values():
        # runs of one model: a run joins the first set whose attacks it does not repeat
        merged: list[list[ReportRun]] = []
        for run in group:
            names = {a.attack for a in run.results.attacks}
            target = next((m for m in merged if not names & {a.attack for r in m for a in r.results.attacks}), None)
            if target is None:
                merged.append([run])
            else:
                target.append(run)
        out.extend(_merge(m) for m in merged)
    order = {id(r): i for i, r in enumerate(runs)}
    return sorted(out, key=lambda r: order.get(id((r.parts or (r,))[0]), len(order)))


def _directory(run: ReportRun) -> str:
    return run.parts[0].label if run.parts else run.label


def label_runs(runs: Sequence[ReportRun], labels: Mapping[str, str] | None = None) -> list[ReportRun]:
    """Each run with its page label: the user's (``labels``: directory as given or resolved -> name; any merged
    directory's name names the model), else the model directory's name, the attack directory's name when two models
    share it, numbered when still equal."""
    given = {}
    for directory, name in (labels or {}).items():
        given[str(directory)] = name
        given[str(Path(directory).resolve())] = name

    def user_label(run: ReportRun) -> str | None:
        for part in run.parts or (run,):
            for key in (part.label, str(Path(part.label).resolve())):
                if key in given:
                    return given[key]
        return None

    def model_name(run: ReportRun) -> str:
        return PurePath(run.results.model.path).name or run.results.model.path

    def dir_name(run: ReportRun) -> str:
        return PurePath(_directory(run)).name or _directory(run)

    names = {id(r): user_label(r) for r in runs}
    defaults = [model_name(r) for r in runs if names[id(r)] is None]
    for r in runs:
        if names[id(r)] is None:
            name = model_name(r)
            names[id(r)] = name if defaults.count(name) == 1 else dir_name(r)
    seen: dict[str, int] = {}
    out = []
    for r in runs:
        name = names[id(r)] or dir_name(r)
        seen[name] = seen.get(name, 0) + 1
        label = name if seen[name] == 1 else f"{name} ({seen[name]})"
        out.append(dataclasses.replace(r, label=label, parts=r.parts or (r,)))
    return out
