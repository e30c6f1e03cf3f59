"""Run the demo's stages in order; a rerun skips every stage whose output is complete and valid.

Each stage writes its output the way its command always does (inject and attack in a staged
directory renamed into place, train with checkpoints it resumes from, the report atomically), so
Ctrl-C never leaves a half-written run that looks finished. What this module adds is the memory of
*which command* produced an output: before a stage runs, a record of its command line and of its
inputs' manifests is written to ``<out>/.demo/<stage>.json``. On a rerun a stage is skipped when

- its record names the same command and the same input manifests (nothing upstream changed), and
- its output verifies against its own manifest (every file present with the recorded sha256).

A command that wrote its whole output and then failed (``dpaudit attack`` writes its directory even when one of
its attacks failed, then exits with the error) leaves no record: a rerun redoes it. A stage whose record matches but
whose output does not verify was interrupted: it is rerun with the
same command, so training resumes from its last checkpoint and the shadow models from their cache. A
stage whose record differs (other sizes, ``--quick`` switched, new upstream data) starts over: its
output is removed first, if dpaudit wrote all of it. The demo never adopts a folder it did not write:
a non-empty ``--out`` without the ``.demo/`` state folder is refused (:func:`check_out`), and an output
folder holding a file that no manifest lists is a one-line error, never deleted.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.common.errors import UserInputError
from dpaudit.demo.plan import Stage
from dpaudit.files.run_dirs import (
    MANIFEST_NAME,
    atomic_write_json,
    redact_command,
    refuse_foreign,
    sha256_file,
    verify_run_dir,
)

STATE_DIR = ".demo"


@dataclass(frozen=True, kw_only=True)
class StageTime:
    """How long a stage took (``skipped``: its output was complete; times are then 0)."""

    name: str
    title: str
    skipped: bool
    wall_s: float
    cpu_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "skipped": self.skipped,
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
        }


def _input_hashes(stage: Stage) -> dict[str, str | None]:
    """sha256 of each input's manifest.json (None while it does not exist)."""
    hashes: dict[str, str | None] = {}
    for path in stage.inputs:
        manifest = path / MANIFEST_NAME
        hashes[str(path)] = sha256_file(manifest) if manifest.is_file() else None
    return hashes


def _record(stage: Stage) -> dict[str, Any]:
    # secrets redacted as in every manifest (the demo's --noise-seed reaches train's command line)
    return {"args": redact_command(stage.args), "inputs": _input_hashes(stage)}


def _record_path(state: Path, stage: Stage) -> Path:
    return state / f"{stage.name}.json"


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def is_complete(stage: Stage, state: Path) -> bool:
    """Whether ``stage``'s output was written by this very command on these inputs and verifies."""
    if stage.schema_prefix is None:  # a file (the report): cheap, always rewritten
        return False
    if _read_record(_record_path(state, stage)) != _record(stage):
        return False
    try:
        verify_run_dir(stage.output, schema_prefix=stage.schema_prefix)
    except (UserInputError, OSError, ValueError, KeyError):
        return False
    return True


def check_out(out: Path) -> None:
    """Refuse an ``--out`` the demo may not write into: a file, or a non-empty folder that is not an
    earlier demo run (no ``.demo/`` state folder). The demo replaces its stages' folders (``data/``,
    ``model-*/``...) when their command changed, so it must never adopt a folder of the user's own."""
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {out} is a file, not a folder; choose a folder path.")
    if out.is_dir() and any(out.iterdir()) and not (out / STATE_DIR).is_dir():
        raise UserInputError(
            f"--out {out} exists, is not empty and is not an earlier dpaudit demo run (no {STATE_DIR}/ "
            "in it); choose a new or empty folder."
        )


def _prepare(stage: Stage, state: Path) -> None:
    """Remove an output left by another command (or by nothing this demo recorded), then record this one.

    Only what dpaudit wrote is removed (:func:`dpaudit.files.run_dirs.refuse_foreign`): an output folder holding a
    file no manifest lists (the user's own) is a one-line error, and nothing is deleted.
    """
    path = _record_path(state, stage)
    if _read_record(path) != _record(stage) and stage.schema_prefix is not None and stage.output.exists():
        if not stage.output.is_dir():
            raise UserInputError(
                f"{stage.output} is a file, where the demo writes its {stage.name} folder; move it away "
                "or choose another --out."
            )
        refuse_foreign(stage.output, option=f"the demo's {stage.name} folder")
        shutil.rmtree(stage.output)
    atomic_write_json(path, _record(stage))


def run_stages(
    stages: Sequence[Stage],
    *,
    state: Path,
    run: Callable[[Stage], None],
    echo: Callable[[str], None],
    compact: bool = False,
    header: str | None = None,
) -> list[StageTime]:
    """Run ``stages`` in order, skipping complete ones; ``run(stage)`` executes one stage's command.

    Prints a stage line (``[i/n] title``) before each stage and its wall/CPU time after it; ``compact``: a skipped
    stage in one line; ``header`` (what is about to run) is printed first, once the state folder could be made.
    """
    state.mkdir(parents=True, exist_ok=True)
    if header:
        echo(header)
    times = []
    for i, stage in enumerate(stages, 1):
        complete = is_complete(stage, state)
        if complete and compact:
            echo(f"[{i}/{len(stages)}] {stage.title}: complete in {stage.output} (verified): skipped")
        else:
            echo(f"[{i}/{len(stages)}] {stage.title}")
        if complete:
            if not compact:
                echo(f"      complete in {stage.output} (verified): skipped")
            times.append(StageTime(name=stage.name, title=stage.title, skipped=True, wall_s=0.0, cpu_s=0.0))
            continue
        _prepare(stage, state)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            run(stage)
        except BaseException as error:  # Ctrl-C after a complete output leaves it complete
            if not isinstance(error, KeyboardInterrupt) and is_complete(stage, state):  # written in full, then failed
                _record_path(state, stage).unlink(missing_ok=True)  # so a rerun redoes it rather than skipping it
            raise
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if stage.schema_prefix is not None:
            verify_run_dir(
                stage.output, schema_prefix=stage.schema_prefix
            )  # the stage's own contract, checked once more
        echo(f"      done in {wall:.1f} s (CPU {cpu:.1f} s)")
        times.append(StageTime(name=stage.name, title=stage.title, skipped=False, wall_s=wall, cpu_s=cpu))
    return times
