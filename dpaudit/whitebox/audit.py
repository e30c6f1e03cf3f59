"""The whole white-box audit: R training runs with canaries, their analysis, and what is written.

Each run trains in its own fresh directory under a work folder (a run directory with the audit block is
not a model anyone should use): a temporary one removed at the end, or the caller's, where every finished
run leaves its evidence beside its run directory and is read back by a rerun instead of trained again
(``dpaudit audit-trainer`` keeps them in ``OUT/runs/`` until the audit directory is written). The output
directory holds ``whitebox.json`` (the summary: claim, every bound, the verdict), ``scores/whitebox.jsonl``
(each canary's coin and scores, per run) and ``manifest.json``, written atomically.
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
from dpaudit.whitebox.harness import (
    PluginFactory,
    RunEvidence,
    evidence_path,
    load_evidence,
    run_with_canaries,
    save_evidence,
)

#: The fleet runner of one audit run (:func:`dpaudit.whitebox.harness.run_job`).
RUNNER = "dpaudit.whitebox.harness:run_job"

__all__ = ["PATH_COOPERATIVE", "PATH_LABELS", "SCHEMA", "RegisteredRuns", "audit_trainer", "run_config", "write_audit"]

SCHEMA = "dpaudit.whitebox/1"
#: ``whitebox.json``'s ``settings.canary_path`` of the cooperative audit: the trainer's own audit block writes each
#: canary's clipped gradient onto its reserved coordinate (the gradient path writes ``"gradient-path"``).
PATH_COOPERATIVE = "cooperative"
#: The settings :func:`write_audit` adds that describe the canaries' path, not the command that ran: a rerun of the
#: same command compares the manifest's settings without them.
PATH_LABELS = ("canary_path", "canary_paths")


@dataclass(frozen=True)
class RegisteredRuns:
    """The audit's runs as jobs of the model fleet (:func:`dpaudit.fleet.fleet.run_fleet`), trained at once.

    Attributes:
        trainer: the registered trainer's name.
        config: its Config's fields (rebuilt in each worker).
        data_dir: the audit's dataset (an inject directory).
        workers, ray_address, engine: as :func:`~dpaudit.fleet.fleet.run_fleet`'s.
    """

    trainer: str
    config: dict[str, Any]
    data_dir: Path
    workers: int | None = None
    ray_address: str | None = None
    engine: str = "auto"


def audit_trainer(
    factory: PluginFactory | RegisteredRuns,
    *,
    canaries: int = 1000,
    runs: int = 1,
    partners: int = 16,
    confidence: float = 0.95,
    seed: int | None = None,
    workdir: Path | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Analysis, list[RunEvidence]]:
    """Run the audit: ``runs`` trainings, each with ``canaries`` coin-flip gradient canaries.

    Args:
        factory: builds the trainer's plug-in for an output directory (the runs train one after another in this
            process), or a :class:`RegisteredRuns`: a registered trainer's runs trained as jobs of the model fleet
            (in parallel, on Ray or a process pool). Either way run r's coins come from its own child of the
            auditor's seed sequence (:func:`run_coins`), so a run is the same run whichever way it trains.
        canaries: m, the canaries per run (block coordinates).
        runs: R; more than one adds the pooled many-run bounds and makes them the verdict.
        partners: partner rows per canary when the trainer clips micro-batches.
        confidence: of every bound.
        seed: the auditor's coin flips (None: OS entropy). Not the trainer's randomness.
        workdir: where the runs train (default: a temporary folder, removed afterwards). A given ``workdir`` is
            kept: a run whose evidence file is there (:func:`~dpaudit.whitebox.harness.save_evidence`, written
            once the run finished) is read back instead of trained again, and a run without one is trained
            afresh (its observations before a kill were never written), so an interrupted audit resumes.
    """
    own = workdir is None
    base = Path(tempfile.mkdtemp(prefix="dpaudit-whitebox-")) if workdir is None else Path(workdir)
    try:
        base.mkdir(parents=True, exist_ok=True)
        coins = run_coins(seed, runs)
        kept = {r: load_evidence(base / f"run-{r}") for r in range(runs) if finished_run(base, r)}
        for r in range(runs):
            if r not in kept:
                clear_run(base, r)
        if progress is not None and kept:
            progress(len(kept), runs)
        if isinstance(factory, RegisteredRuns):
            todo = [r for r in range(runs) if r not in kept]
            _fleet_runs(
                factory, base, todo, canaries=canaries, runs=runs, partners=partners, coins=coins, progress=progress
            )
            if progress is not None and todo:
                progress(runs, runs)  # every run is in: the analysis starts (the caller may say so)
            evidence = [kept[r] if r in kept else load_evidence(base / f"run-{r}") for r in range(runs)]
        else:
            for r in range(runs):
                if r in kept:
                    continue
                rng = np.random.default_rng(np.random.SeedSequence(coins[r]))
                out = base / f"run-{r}"
                kept[r] = run_with_canaries(factory, out, canaries=canaries, partners=partners, rng=rng)
                if not own:
                    save_evidence(out, kept[r])
                if progress is not None:
                    progress(len(kept), runs)
            evidence = [kept[r] for r in range(runs)]
        return analyse(evidence, confidence=confidence), evidence
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)


def run_coins(seed: int | None, runs: int) -> list[list[int]]:
    """The entropy of each run's coin generator: run r's own child of the auditor's seed sequence (OS entropy without
    ``seed``), so the runs are independent whatever order (or process) they train in, and an audit resumed after a
    kill draws the coins its unfinished runs would have drawn."""
    return [[int(x) for x in child.generate_state(4)] for child in np.random.SeedSequence(seed).spawn(runs)]


def finished_run(base: Path, run: int) -> bool:
    """Whether run ``run`` under ``base`` finished: its evidence file was written (last, atomically) and its run
    directory still verifies against its manifest."""
    from dpaudit.common.errors import UserInputError
    from dpaudit.files.run_dirs import verify_run_dir

    out = base / f"run-{run}"
    if not evidence_path(out).is_file():
        return False
    try:
        verify_run_dir(out)
        load_evidence(out)
    except (UserInputError, OSError, ValueError, KeyError):
        return False
    return True


def clear_run(base: Path, run: int) -> None:
    """Remove what an unfinished run ``run`` left under ``base`` (its run directory, checkpoints included, and a
    partial evidence file): it trains again from its first step, so that every step is observed."""
    out = base / f"run-{run}"
    shutil.rmtree(out, ignore_errors=True)
    for path in (evidence_path(out), evidence_path(out).with_name(evidence_path(out).name + ".tmp.npz")):
        path.unlink(missing_ok=True)


def run_config(config: dict[str, Any], run: int) -> dict[str, Any]:
    """Run ``run``'s config: a fixed ``noise_seed`` (reproducible audits) becomes one seed per run, derived from it
    and the run index, so that R runs never draw the same noise and sampling (the pooled many-run bound counts them
    as independent trials)."""
    config = dict(config)
    if config.get("noise_seed") is not None:
        config["noise_seed"] = int(
            np.random.SeedSequence([int(config["noise_seed"]), run]).generate_state(1, np.uint64)[0] >> np.uint64(1)
        )
    return config


def _fleet_runs(
    spec: RegisteredRuns,
    base: Path,
    todo: list[int],
    *,
    canaries: int,
    runs: int,
    partners: int,
    coins: list[list[int]],
    progress: Callable[[int, int], None] | None,
) -> None:
    """Train runs ``todo`` as fleet jobs, each leaving its evidence beside its run directory (each run's coins from
    :func:`run_coins`)."""
    from dpaudit.fleet.fleet import FleetJob, run_fleet

    jobs = [
        FleetJob(
            trainer=spec.trainer,
            config=run_config(spec.config, r),
            data_dir=Path(spec.data_dir),
            out_dir=base / f"run-{r}",
            seed=0,
            label=f"audit run {r + 1}/{runs}",
            runner=RUNNER,
            runner_args={"canaries": canaries, "partners": partners, "coins": coins[r]},
        )
        for r in todo
    ]
    if jobs:
        run_fleet(
            jobs,
            workers=spec.workers,
            ray_address=spec.ray_address,
            engine=spec.engine,
            progress=progress is not None,
            desc="audit runs",
        )  # the fleet's own bar


def score_rows(analysis: Analysis, evidence: list[RunEvidence]) -> list[dict[str, Any]]:
    """One row per canary per run: its coin and its score in each view."""
    rows: list[dict[str, Any]] = []
    for r, run in enumerate(evidence):
        member = run.layout.member
        per_view = {}
        for view in VIEWS:
            s = np.empty(member.size)
            s[member] = analysis.scores[view].member[r]
            s[~member] = analysis.scores[view].nonmember[r]
            per_view[view] = s
        rows.extend(
            {"run": r, "canary": j, "member": bool(member[j]), **{view: float(per_view[view][j]) for view in VIEWS}}
            for j in range(member.size)
        )
    return rows


def write_audit(
    out_dir: Path,
    analysis: Analysis,
    evidence: list[RunEvidence],
    *,
    trainer: str,
    config: dict[str, Any],
    settings: dict[str, Any],
    overwrite: bool = False,
    command: list[str] | None = None,
    page: Callable[[Path], Any] | None = None,
    work: str | None = None,
) -> Path:
    """Write the audit directory (staged, then renamed into place: nothing half-written on failure).

    ``page(staged_dir)``, when given, renders ``index.html`` from the staged files (the CLI passes the
    report's renderer: the report sits above this package). ``config`` and ``settings`` are written with every
    secret redacted (:func:`dpaudit.files.run_dirs.redact_config`), the command line too (:func:`dpaudit.files.run_dirs.redact_command`).

    ``work``: the folder inside ``out_dir`` where the runs were kept (``dpaudit audit-trainer``'s ``runs/``): it goes
    with the directory it is in when the audit replaces it, and everything else there must be dpaudit's (with
    ``overwrite``) or absent."""
    from dpaudit.files.run_dirs import (
        atomic_write_json,
        build_manifest,
        file_hashes,
        redact_config,
        staged_directory,
        write_jsonl,
        write_manifest,
    )

    # Secrets (a noise seed given by --noise-seed or --set noise_seed=N) never reach a written file.
    config, settings = redact_config(dict(config)), redact_config(dict(settings))
    if "canary_path" not in settings:  # every canary kind names its path (the gradient path's settings carry theirs)
        settings["canary_path"] = PATH_COOPERATIVE
        settings["canary_paths"] = {PATH_COOPERATIVE: sum(run.layout.size for run in evidence)}
    body = {
        "schema": SCHEMA,
        "trainer": trainer,
        "config": config,
        "settings": settings,
        "unit": evidence[0].layout.unit,
        "slots": evidence[0].layout.slots,
        "partners": evidence[0].layout.partners,
        "canaries": evidence[0].layout.size,
        "runs": len(evidence),
        **summary(analysis),
    }
    names = ["whitebox.json", "scores/whitebox.jsonl"]
    only_own = True
    if work is not None and (Path(out_dir) / work).is_dir():
        from dpaudit.common.errors import UserInputError
        from dpaudit.files.run_dirs import refuse_foreign

        if not overwrite and any(p.name != work for p in Path(out_dir).iterdir()):
            raise UserInputError(
                f"--out {out_dir} exists and is not empty; pass --overwrite to replace it or choose another path."
            )
        refuse_foreign(out_dir, ignore=(work,))
        overwrite, only_own = True, False  # the kept runs are replaced with the rest, once the audit is written
    with staged_directory(out_dir, overwrite=overwrite, only_own=only_own) as stage:
        atomic_write_json(stage / "whitebox.json", body)
        (stage / "scores").mkdir()
        write_jsonl(stage / "scores" / "whitebox.jsonl", score_rows(analysis, evidence))
        if page is not None:
            page(stage)
            names.append("index.html")
        write_manifest(
            stage,
            build_manifest(
                schema=SCHEMA,
                config={"trainer": trainer, **settings},
                seed=settings.get("seed"),
                inputs={},
                outputs=file_hashes(stage, names),
                command=command,
            ),
        )
    return Path(out_dir)
