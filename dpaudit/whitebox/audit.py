"""The whole white-box audit: R training runs with canaries, their analysis, and what is written.

Each run trains in its own fresh directory under a private work folder that is removed at the end
(a run directory with the audit block is not a model anyone should use); the output directory holds
``whitebox.json`` (the summary: claim, every bound, the verdict), ``scores/whitebox.jsonl`` (each
canary's coin and scores, per run) and ``manifest.json``, written atomically.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.whitebox.analysis import VIEWS, Analysis, analyse, summary
from dpaudit.whitebox.harness import PluginFactory, RunEvidence, load_evidence, run_with_canaries

#: The fleet runner of one audit run (:func:`dpaudit.whitebox.harness.run_job`).
RUNNER = "dpaudit.whitebox.harness:run_job"

__all__ = ["SCHEMA", "RegisteredRuns", "audit_trainer", "run_config", "write_audit"]

SCHEMA = "dpaudit.whitebox/1"


@dataclass(frozen=True)
class RegisteredRuns:
    """The audit's runs as jobs of the model fleet (:func:`dpaudit.training.fleet.run_fleet`), trained at once.

    Attributes:
        trainer: the registered trainer's name.
        config: its Config's fields (rebuilt in each worker).
        data_dir: the audit's dataset (an inject directory).
        workers, ray_address, engine: as :func:`~dpaudit.training.fleet.run_fleet`'s.
    """

    trainer: str
    config: dict[str, Any]
    data_dir: Path
    workers: int | None = None
    ray_address: str | None = None
    engine: str = "auto"


def audit_trainer(factory: PluginFactory | RegisteredRuns, *, canaries: int = 1000, runs: int = 1, partners: int = 16,
                  confidence: float = 0.95, seed: int | None = None, workdir: Path | None = None,
                  progress: Callable[[int, int], None] | None = None) -> tuple[Analysis, list[RunEvidence]]:
    """Run the audit: ``runs`` trainings, each with ``canaries`` coin-flip gradient canaries.

    Args:
        factory: builds the trainer's plug-in for an output directory (the runs train one after another in this
            process), or a :class:`RegisteredRuns`: a registered trainer's runs trained as jobs of the model fleet
            (in parallel, on Ray or a process pool), each run with its own coin generator.
        canaries: m, the canaries per run (block coordinates).
        runs: R; more than one adds the pooled many-run bounds and makes them the verdict.
        partners: partner rows per canary when the trainer clips micro-batches.
        confidence: of every bound.
        seed: the auditor's coin flips (None: OS entropy). Not the trainer's randomness.
        workdir: where the runs train (default: a temporary folder, removed afterwards).
    """
    own = workdir is None
    base = Path(tempfile.mkdtemp(prefix="dpaudit-whitebox-")) if own else Path(workdir)
    try:
        if isinstance(factory, RegisteredRuns):
            evidence = _fleet_runs(factory, base, canaries=canaries, runs=runs, partners=partners, seed=seed,
                                   progress=progress)
        else:
            rng = np.random.default_rng(seed)
            evidence = []
            for r in range(runs):
                evidence.append(run_with_canaries(factory, base / f"run-{r}", canaries=canaries, partners=partners,
                                                  rng=rng))
                if progress is not None:
                    progress(r + 1, runs)
        return analyse(evidence, confidence=confidence), evidence
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)


def run_config(config: dict[str, Any], run: int) -> dict[str, Any]:
    """Run ``run``'s config: a fixed ``noise_seed`` (reproducible audits) becomes one seed per run, derived from it
    and the run index, so that R runs never draw the same noise and sampling (the pooled many-run bound counts them
    as independent trials)."""
    config = dict(config)
    if config.get("noise_seed") is not None:
        config["noise_seed"] = int(np.random.SeedSequence([int(config["noise_seed"]), run]).generate_state(1, np.uint64)[0]
                                   >> np.uint64(1))
    return config


def _fleet_runs(spec: RegisteredRuns, base: Path, *, canaries: int, runs: int, partners: int, seed: int | None,
                progress: Callable[[int, int], None] | None) -> list[RunEvidence]:
    """The R runs as fleet jobs: each run's coins from its own child of the auditor's seed sequence (OS entropy
    without ``seed``), so the runs are independent whatever order the workers finish them in."""
    from dpaudit.training.fleet import FleetJob, run_fleet

    children = np.random.SeedSequence(seed).spawn(runs)
    jobs = [FleetJob(trainer=spec.trainer, config=run_config(spec.config, r), data_dir=Path(spec.data_dir),
                     out_dir=base / f"run-{r}", seed=0, label=f"audit run {r + 1}/{runs}", runner=RUNNER,
                     runner_args={"canaries": canaries, "partners": partners,
                                  "coins": [int(x) for x in children[r].generate_state(4)]})
            for r in range(runs)]
    outcomes = run_fleet(jobs, workers=spec.workers, ray_address=spec.ray_address, engine=spec.engine,
                         progress=progress is not None, desc="audit runs")  # the fleet's own bar
    evidence = [load_evidence(outcome.job.out_dir) for outcome in outcomes]
    return evidence


def score_rows(analysis: Analysis, evidence: list[RunEvidence]) -> list[dict[str, Any]]:
    """One row per canary per run: its coin and its score in each view."""
    rows = []
    for r, run in enumerate(evidence):
        member = run.layout.member
        per_view = {}
        for view in VIEWS:
            s = np.empty(member.size)
            s[member] = analysis.scores[view].member[r]
            s[~member] = analysis.scores[view].nonmember[r]
            per_view[view] = s
        rows.extend({"run": r, "canary": j, "member": bool(member[j]),
                     **{view: float(per_view[view][j]) for view in VIEWS}} for j in range(member.size))
    return rows


def write_audit(out_dir: Path, analysis: Analysis, evidence: list[RunEvidence], *, trainer: str,
                config: dict[str, Any], settings: dict[str, Any], overwrite: bool = False,
                command: list[str] | None = None, page: Callable[[Path], Any] | None = None) -> Path:
    """Write the audit directory (staged, then renamed into place: nothing half-written on failure).

    ``page(staged_dir)``, when given, renders ``index.html`` from the staged files (the CLI passes the
    report's renderer: the report sits above this package)."""
    from dpaudit.rundir import atomic_write_json, build_manifest, file_hashes, staged_directory, write_jsonl, \
        write_manifest

    body = {"schema": SCHEMA, "trainer": trainer, "config": config, "settings": settings,
            "unit": evidence[0].layout.unit, "slots": evidence[0].layout.slots,
            "partners": evidence[0].layout.partners, "canaries": evidence[0].layout.size, "runs": len(evidence),
            **summary(analysis)}
    names = ["whitebox.json", "scores/whitebox.jsonl"]
    with staged_directory(out_dir, overwrite=overwrite) as stage:
        atomic_write_json(stage / "whitebox.json", body)
        (stage / "scores").mkdir()
        write_jsonl(stage / "scores" / "whitebox.jsonl", score_rows(analysis, evidence))
        if page is not None:
            page(stage)
            names.append("index.html")
        write_manifest(stage, build_manifest(schema=SCHEMA, config={"trainer": trainer, **settings},
                                             seed=settings.get("seed"), inputs={}, outputs=file_hashes(stage, names),
                                             command=command))
    return Path(out_dir)
