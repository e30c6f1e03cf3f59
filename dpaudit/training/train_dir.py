"""The train run directory (the run-directory contract), as helpers every trainer calls.

A trainer owns its model, its step and its checkpoint format; everything else about the directory
is the same for every trainer and lives here, so the attack stage and the report can rely on it:

- :func:`check_out_dir` / :func:`check_resume`: an ``--out`` is new, empty, or holds a resumable run
  of the same trainer, settings, seed and data — anything else is refused before a byte is written;
- :class:`MetricsLog`: ``metrics.jsonl`` rows, kept in ``checkpoints/`` while the run goes (so a
  resumed run keeps the rows its checkpoint covers) and published at the end;
- :func:`finish_run`: ``privacy.json`` (a :class:`~dpaudit.claim.record.PrivacyRecord`),
  ``metrics.jsonl`` and, last, ``manifest.json`` (a train directory with a manifest is complete);
- :func:`remove_checkpoints`: checkpoints hold the secret noise state, so a finished run deletes
  them unless asked to keep them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import (
    DIR_MODE,
    FILE_MODE,
    MANIFEST_NAME,
    atomic_write_json,
    atomic_write_text,
    build_manifest,
    dumps_jsonl_line,
    file_hashes,
    load_manifest,
    read_jsonl,
    replace_directory,
    sha256_file,
    write_manifest,
)
from dpaudit.training.api import TrainResult

__all__ = [
    "CHECKPOINT_DIR",
    "KEEP_CHECKPOINTS_WARNING",
    "TRAIN_SCHEMA",
    "MetricsLog",
    "check_checkpoint_arrays",
    "check_out_dir",
    "check_resume",
    "finish_run",
    "finished_result",
    "finished_run",
    "list_checkpoints",
    "remove_checkpoints",
    "same_data",
    "step_dir_name",
    "write_checkpoint",
]

TRAIN_SCHEMA = "dpaudit.train/1"
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_ARRAYS = "arrays.safetensors"  # a checkpoint's tensors (safetensors: never pickle)
CHECKPOINT_STATE = "state.json"  # a checkpoint's JSON state (ledger, secret noise state, config)
_STEP_DIR = re.compile(r"^step_(\d{8})$")
PARTIAL_METRICS = "metrics.partial.jsonl"  # inside checkpoints/: kept on failure like the checkpoints
KEEP_CHECKPOINTS_WARNING = (
    "warning: --keep-checkpoints: {path} holds the secret sampling and noise state of this run; anyone "
    "who reads it can undo the noise. Keep it with the training data, never publish it."
)


def step_dir_name(step: int) -> str:
    """The folder of checkpoint ``step`` inside ``checkpoints/`` (zero-padded so names sort by step)."""
    return f"step_{step:08d}"


def list_checkpoints(directory: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """Complete checkpoints in ``directory`` as ``(step, path)``, oldest first.

    A checkpoint is complete when both its arrays and its state file exist; every trainer writes it
    under a temporary name and renames it into place, so a killed write is never listed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for child in directory.iterdir():
        match = _STEP_DIR.match(child.name)
        if match and (child / CHECKPOINT_STATE).is_file() and (child / CHECKPOINT_ARRAYS).is_file():
            found.append((int(match.group(1)), child))
    return sorted(found)


def write_checkpoint(
    directory: str | os.PathLike[str],
    *,
    step: int,
    write_arrays: Callable[[Path], None],
    state: Mapping[str, Any],
    keep: int = 2,
) -> Path:
    """Commit checkpoint ``step`` into ``directory`` atomically and keep only the newest ``keep``.

    The trainer owns the format of its tensors: ``write_arrays(path)`` writes them to
    :data:`CHECKPOINT_ARRAYS` (safetensors). This commits them the same way for every trainer: in a
    staging folder with the modes of every other output, ``state`` plus ``step`` and the arrays' hash
    in :data:`CHECKPOINT_STATE`, both fsynced, then one directory swap (a rerun may rewrite the same
    step). A full disk or file-size limit is a one-line error that says how to resume.
    """
    from safetensors import SafetensorError

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / step_dir_name(step)
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=directory))
    try:
        os.chmod(staging, DIR_MODE)  # mkdtemp and safetensors make their outputs private
        arrays = staging / CHECKPOINT_ARRAYS
        try:
            write_arrays(arrays)
        except SafetensorError as err:  # the Rust writer's disk-full / file-size-limit error
            raise UserInputError(
                f"{final / CHECKPOINT_ARRAYS}: could not write the checkpoint ({err}); free disk space or raise the "
                "file-size limit (ulimit -f), then rerun the same command to resume."
            ) from None
        full = {**state, "step": step, "arrays_sha256": sha256_file(arrays)}
        (staging / CHECKPOINT_STATE).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for path in (arrays, staging / CHECKPOINT_STATE):
            os.chmod(path, FILE_MODE)
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        replace_directory(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    for _, old in list_checkpoints(directory)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def check_checkpoint_arrays(path: Path, state: Mapping[str, Any]) -> None:
    """Refuse checkpoint ``path`` when its arrays are not the ones :func:`write_checkpoint` committed.

    Two checks, neither of which loads an array: the file's sha256 against the one recorded in
    ``state``, and the safetensors header against the file (a truncated file whose recorded hash was
    rewritten to match is caught here). A resume runs them before the model is built, so a damaged
    checkpoint fails in a second instead of after the model's initialization and the step's compile
    (docs/run-directories.md). The trainer's own restore still checks names, shapes and dtypes.
    """
    from safetensors import SafetensorError, safe_open

    arrays = path / CHECKPOINT_ARRAYS
    try:
        digest = sha256_file(arrays)
    except OSError as err:
        raise UserInputError(
            f"{arrays}: unreadable checkpoint arrays ({err}); delete {path} to resume from an older one."
        ) from None
    if digest != state.get("arrays_sha256"):
        raise UserInputError(f"{arrays} does not match its state.json hash; delete {path} to resume from an older one.")
    try:
        with safe_open(str(arrays), framework="numpy"):  # parses and checks the header only
            pass
    except (SafetensorError, OSError) as err:
        raise UserInputError(
            f"{arrays}: unreadable checkpoint arrays ({err}); delete {path} to resume from an older one."
        ) from None


def check_out_dir(out: Path, *, trainer: str, resumable: bool) -> None:
    """Refuse an ``--out`` that is a file, or non-empty without a checkpoint of this trainer to resume
    (or a manifest: a finished run, which :func:`finished_run` checks).

    A run killed before its first checkpoint leaves only ``checkpoints/`` (partial metrics): that
    directory starts over.
    """
    if out.exists() and not out.is_dir():
        raise UserInputError(f"--out {out} is a file, not a directory; choose a directory path.")
    entries = {p.name for p in out.iterdir()} if out.is_dir() else set()
    if MANIFEST_NAME in entries:  # a finished run: finished_run() returns it, or says why it cannot
        return
    if not entries <= {CHECKPOINT_DIR} and not resumable:
        raise UserInputError(
            f"--out {out} exists, is not empty and holds no {trainer} checkpoint to resume; choose a new or empty directory."
        )


def check_resume(
    *, out: Path, checkpoint: Path, trainer: str, stored: Mapping[str, Any], current: Mapping[str, Any]
) -> None:
    """Refuse to resume a checkpoint whose identity (trainer, config, seed, data) differs from this run's.

    ``stored``/``current`` are ``{"trainer", "config", "seed", "data"}`` dicts; ``config`` maps
    field names to values.
    """
    if stored.get("trainer") != trainer:
        raise UserInputError(f"--out {out}: {checkpoint} was not written by the {trainer} trainer; choose a new --out.")
    mine, theirs = dict(current.get("config", {})), dict(stored.get("config", {}))
    differing = [name for name in sorted(set(mine) | set(theirs)) if mine.get(name) != theirs.get(name)]
    if differing:
        detail = ", ".join(f"--{n.replace('_', '-')} {theirs.get(n)!r} -> {mine.get(n)!r}" for n in differing[:4])
        raise UserInputError(
            f"--out {out} holds a run with different settings ({detail}); rerun with the same options or use a new --out."
        )
    if stored.get("seed") != current.get("seed"):
        raise UserInputError(
            f"--out {out} holds a run with --seed {stored.get('seed')}, not {current.get('seed')}; use the same seed or a new --out."
        )
    if stored.get("data") != current.get("data"):
        raise UserInputError(f"--out {out} was trained on different --data (inject manifest changed); use a new --out.")


def same_data(stored: Mapping[str, str], current: Mapping[str, str]) -> bool:
    """Whether two manifests' ``inputs`` (path -> sha256) name the same data: the same file names with the
    same content hashes, wherever the directory was (``--data d`` and ``--data /abs/d`` are one data set)."""

    def by_name(inputs: Mapping[str, str]) -> list[tuple[str, str]]:
        return sorted((Path(path).name, str(digest)) for path, digest in inputs.items())

    return by_name(stored) == by_name(current)


def finished_run(
    out: Path,
    *,
    trainer: str,
    config: Mapping[str, Any],
    seed: int,
    inputs: Mapping[str, str],
    run_only: Iterable[str] = (),
) -> dict[str, Any] | None:
    """The manifest of a finished run of this very command in ``out``, or None when ``out`` holds none.

    A run is finished when its ``manifest.json`` is written (last) and its checkpoints are gone (they held
    the secret noise state, so it cannot be continued). Rerunning its command returns it without training
    (:func:`finished_result`); anything else is a one-line error: another trainer or stage, different
    settings (``config`` is what the manifest records, secrets redacted; ``run_only`` fields may differ),
    seed or data (compared by content, :func:`same_data`), or a file changed since it was written.
    """
    if list_checkpoints(out / CHECKPOINT_DIR) or not (out / MANIFEST_NAME).is_file():
        return None
    manifest = load_manifest(out)
    stored = dict(manifest.get("config") or {}) if isinstance(manifest.get("config"), dict) else {}
    if not str(manifest["schema"]).startswith("dpaudit.train/"):
        raise UserInputError(
            f"--out {out} holds a {manifest['schema']} run directory, not a train run; choose a new --out."
        )
    if stored.pop("trainer", None) != trainer:
        raise UserInputError(f"--out {out} holds a finished run of another trainer; choose a new --out.")
    outputs = manifest.get("outputs")
    if not isinstance(outputs, dict):
        raise UserInputError(f"{out / MANIFEST_NAME}: no 'outputs' map; the run directory is damaged, use a new --out.")
    for name, expected in sorted(outputs.items()):
        path = out / str(name)
        actual = sha256_file(path) if path.is_file() else None
        if actual != expected:
            what = (
                "is missing"
                if actual is None
                else f"was changed (sha256 {actual[:12]} != manifest {str(expected)[:12]})"
            )
            raise UserInputError(
                f"--out {out} holds a finished run whose {path} {what} since it was trained; "
                "restore it or use a new --out."
            )
    skip = set(run_only)
    from dpaudit.files.run_dirs import redact_config  # the manifest holds secrets redacted: compare like with like

    mine = {k: v for k, v in redact_config(dict(config)).items() if k not in skip}
    stored = {k: v for k, v in stored.items() if k not in skip}
    differing = sorted(n for n in set(mine) | set(stored) if mine.get(n) != stored.get(n))
    if differing:
        detail = ", ".join(f"--{n.replace('_', '-')} {stored.get(n)!r} -> {mine.get(n)!r}" for n in differing[:4])
        raise UserInputError(
            f"--out {out} holds a finished run with different settings ({detail}); "
            "rerun with the same options or use a new --out."
        )
    if manifest.get("seed") != seed:
        raise UserInputError(
            f"--out {out} holds a finished run with --seed {manifest.get('seed')}, not {seed}; "
            "use the same seed or a new --out."
        )
    if not same_data(dict(manifest.get("inputs") or {}), inputs):
        raise UserInputError(f"--out {out} was trained on different --data (inject files changed); use a new --out.")
    return manifest


def finished_result(out: Path, manifest: Mapping[str, Any]) -> TrainResult:
    """The result of a finished run (:func:`finished_run`), read back from its files: nothing is trained or written."""
    path = out / "privacy.json"
    try:
        record = PrivacyRecord.from_json(json.loads(path.read_text(encoding="utf-8")), where=str(path))
    except (OSError, json.JSONDecodeError) as err:
        raise UserInputError(f"{path}: unreadable ({err}); use a new --out.") from None
    rows = list(read_jsonl(out / "metrics.jsonl"))
    return TrainResult(
        out_dir=out,
        steps=int(manifest.get("steps") or 0),
        epsilon=record.epsilon,
        delta=record.delta,
        final_loss=last_value(rows, "loss"),
        summary=dict(manifest.get("summary") or {}),
    )


class MetricsLog:
    """``metrics.jsonl`` rows of a run, durable across kills.

    Rows are appended (and fsynced) to ``checkpoints/metrics.partial.jsonl`` at each flush; on resume
    :meth:`restore` drops the rows past the checkpoint's step (they are recomputed), and
    :meth:`publish` writes the final ``metrics.jsonl`` atomically.
    """

    def __init__(self, checkpoint_dir: Path, *, writer: bool = True) -> None:
        self.path = checkpoint_dir / PARTIAL_METRICS
        self.writer = writer
        self.pending: list[dict[str, Any]] = []
        self.unwritten: list[dict[str, Any]] = []  # rows of a process that does not write (multi-host)

    def append(self, row: dict[str, Any]) -> None:
        self.pending.append(row)

    def flush(self) -> None:
        if not self.pending:
            return
        if not self.writer:
            self.unwritten.extend(self.pending)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.writelines(dumps_jsonl_line(row) for row in self.pending)
                handle.flush()
                os.fsync(handle.fileno())
        self.pending = []

    def restore(self, step: int) -> None:
        """Keep only the rows of steps ``<= step`` (those the resumed checkpoint covers)."""
        if not self.writer or not self.path.is_file():
            return
        rows = [row for row in read_jsonl(self.path) if row.get("step", 0) <= step]
        atomic_write_text(self.path, "".join(dumps_jsonl_line(row) for row in rows))

    def rows(self) -> list[dict[str, Any]]:
        """Every row written so far (this process's rows when it is not the writer)."""
        self.flush()
        if not self.writer:
            return list(self.unwritten)
        return list(read_jsonl(self.path)) if self.path.is_file() else []

    def publish(self, out: Path) -> list[dict[str, Any]]:
        """Write ``out/metrics.jsonl`` atomically and return its rows."""
        rows = self.rows()
        atomic_write_text(out / "metrics.jsonl", "".join(dumps_jsonl_line(row) for row in rows))
        return rows


def last_value(rows: Iterable[Mapping[str, Any]], key: str) -> Any:
    """The last non-null ``key`` in metric rows (e.g. the final loss), or None."""
    return next((row[key] for row in reversed(list(rows)) if row.get(key) is not None), None)


def finish_run(
    out: Path,
    *,
    trainer: str,
    config: Mapping[str, Any],
    seed: int,
    inputs: Mapping[str, str],
    record: PrivacyRecord,
    model_dir: str = "model",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``privacy.json`` then ``manifest.json`` (last) for a run whose model and metrics are written.

    ``config`` is what the manifest records: the caller redacts secrets (``noise_seed``) first.
    Returns the manifest.
    """
    atomic_write_json(out / "privacy.json", record.to_json())
    outputs = [p.relative_to(out).as_posix() for p in sorted((out / model_dir).rglob("*")) if p.is_file()]
    outputs += ["metrics.jsonl", "privacy.json"]
    manifest = build_manifest(
        schema=TRAIN_SCHEMA,
        config={"trainer": trainer, **config},
        seed=seed,
        inputs=inputs,
        outputs=file_hashes(out, outputs),
        extra=dict(extra or {}),
    )
    write_manifest(out, manifest)
    return manifest


def remove_checkpoints(out: Path, *, keep: bool) -> None:
    """Delete ``out/checkpoints`` (secret noise state) unless ``keep``, which warns on stderr."""
    path = out / CHECKPOINT_DIR
    if not path.exists():
        return
    if keep:
        print(KEEP_CHECKPOINTS_WARNING.format(path=path), file=sys.stderr)
        return
    shutil.rmtree(path)
