"""Run directories: the files every stage hands to the next, written atomically and hash-checked.

Each stage (inject, train, attack) writes one directory with a ``manifest.json`` that records the
schema, the dpaudit version, the command line, the full config, the seed and the sha256 of every
input and output file. The next stage calls :func:`verify_run_dir` before it reads anything, so an
edited or truncated file is refused instead of silently audited.

Writes are atomic: :func:`staged_directory` builds the whole directory under a temporary name beside
the destination and renames it into place only when the stage succeeded, so a failed or killed
stage leaves nothing half-written. Single files use :func:`atomic_write_bytes` /
:func:`atomic_write_text` (temp file in the same directory, fsync, ``os.replace``).

Each stage holds :func:`run_dir_lock` on its output directory for its whole run: an exclusive
``fcntl.flock`` on a lock file beside the directory (``PARENT/.NAME.lock``). A second process aiming at
the same directory gets a one-line error naming the holder's pid instead of silently interleaving its
writes. The kernel drops the lock when the holder exits, however it exits (SIGKILL included), so a
crash never leaves a directory locked; and because no other live process can be working on the target
while the lock is held, the holder removes staging folders that a killed run of the same target left.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from dpaudit import __version__
from dpaudit.common.errors import UserInputError

MANIFEST_NAME = "manifest.json"
_HASH_CHUNK = 1 << 20


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# tempfile creates private (0600/0700) entries; finished outputs get the usual umask-based modes.
#: Mode of every finished output file (0644 under the usual umask 022), whoever wrote it.
FILE_MODE = 0o666 & ~_umask()
#: Mode of every finished output directory (0755 under the usual umask 022).
DIR_MODE = 0o777 & ~_umask()
_FILE_MODE, _DIR_MODE = FILE_MODE, DIR_MODE


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks (never the whole file in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see either the old file or the whole new one."""
    path = Path(path)
    created = [p for p in reversed(path.parents) if not p.exists()][::-1]  # deepest first: removed again on failure
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        _remove_empty(created)
        raise _naming(err, path) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        _remove_empty(created)
        if isinstance(err, OSError):
            raise _naming(err, path) from None
        raise
    return path


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) that a failed write created, while they are still empty."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            break


def _naming(err: OSError, path: str | os.PathLike[str]) -> OSError:
    """``err`` (same type, errno and reason) naming ``path``, the output the user knows, instead of a
    temporary file or nothing (a failed write on an open file names no file)."""
    renamed = OSError(err.errno, err.strerror, os.fspath(path)) if err.errno is not None else err
    if renamed is not err:
        renamed.__cause__ = err.__cause__
    return renamed


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as indented, key-sorted JSON (stable bytes for stable inputs)."""
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def dumps_jsonl_line(record: Mapping[str, Any]) -> str:
    """One JSON Lines record: compact, non-ASCII kept, newline-terminated."""
    return json.dumps(record, ensure_ascii=False, separators=(", ", ": ")) + "\n"


def write_jsonl(path: str | os.PathLike[str], records: Iterable[Mapping[str, Any]]) -> int:
    """Stream ``records`` into ``path`` (not atomic by itself: use inside a staged directory).

    Returns the number of records written.
    """
    count = 0
    try:
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            for record in records:
                handle.write(dumps_jsonl_line(record))
                count += 1
    except OSError as err:
        raise _naming(err, path) from None
    return count


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Yield the records of a JSON Lines file, naming the file and line of any bad record."""
    path = Path(path)
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserInputError(f"{path}:{lineno}: not valid JSON ({err.msg}); fix or remove that line.") from None
            if not isinstance(record, dict):
                raise UserInputError(f"{path}:{lineno}: expected a JSON object per line, got {type(record).__name__}.")
            yield record


def prepare_output_dir(
    out: str | os.PathLike[str], *, overwrite: bool, option: str = "--out", only_own: bool = True
) -> Path:
    """Check that ``out`` may be written: not a file, and empty unless ``overwrite``.

    With ``overwrite`` a non-empty ``out`` is replaced only when dpaudit wrote everything in it
    (:func:`foreign_files`): a folder holding a file that no manifest lists is never replaced.
    ``only_own=False`` is for a trainer's own ``model/`` inside the train directory it holds locked.

    Raises:
        UserInputError: naming ``option`` and the fix.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserInputError(f"{option} {out} is a file, not a directory; choose a directory path.")
    resolved, cwd = out.resolve(), Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise UserInputError(
            f"{option} {out} is the current directory (or contains it); a run directory is replaced as a whole, "
            f"so name a new subdirectory instead, e.g. {option} runs/NAME."
        )
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserInputError(
            f"{option} {out} exists and is not empty; pass --overwrite to replace it or choose another path."
        )
    if overwrite and only_own and out.is_dir():
        refuse_foreign(out, option=option)
    parent = out.resolve().parent
    if parent.exists() and not parent.is_dir():
        raise UserInputError(f"{option} {out}: parent {parent} is not a directory.")
    return out


#: What a train directory holds before its manifest is written (dpaudit.training.train_dir): checkpoints,
#: their partial metrics and the staging folders of a killed checkpoint write.
_CHECKPOINT_ENTRY = re.compile(
    r"^checkpoints(/(metrics\.partial\.jsonl|step_\d{8}(/(state\.json|arrays\.safetensors))?|\.[^/]+(/.*)?))?$"
)


def foreign_files(directory: str | os.PathLike[str], *, ignore: Iterable[str] = ()) -> list[Path]:
    """Entries of ``directory`` that dpaudit did not write (empty: dpaudit may replace or remove it).

    dpaudit wrote a file when the directory's ``manifest.json`` (a dpaudit schema) lists it among its
    outputs, or it is that manifest; before the manifest exists, a train directory holds only its
    ``checkpoints/`` (step folders, partial metrics). Everything else (a user's notes, a folder of
    their own data, a manifest of another program) is foreign, and names the reason to refuse.
    ``ignore``: top-level entries the caller has checked itself (an audit's kept ``runs/``), skipped with
    everything under them.
    """
    directory = Path(directory)
    skipped = set(ignore)
    listed: set[str] = set()
    try:
        manifest = json.loads((directory / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = None
    if (
        isinstance(manifest, dict)
        and str(manifest.get("schema", "")).startswith("dpaudit.")
        and isinstance(manifest.get("outputs"), dict)
    ):
        listed = {MANIFEST_NAME, *map(str, manifest["outputs"])}
    parents = {parent.as_posix() for name in listed for parent in Path(name).parents}
    foreign = []
    for path in sorted(directory.rglob("*")):
        name = path.relative_to(directory).as_posix()
        if name.split("/", 1)[0] in skipped or name in listed or _CHECKPOINT_ENTRY.match(name):
            continue
        if path.is_dir() and not path.is_symlink() and name in parents:
            continue
        foreign.append(path)
    return foreign


def refuse_foreign(directory: str | os.PathLike[str], *, option: str = "--out", ignore: Iterable[str] = ()) -> None:
    """Raise a one-line error when ``directory`` holds anything dpaudit did not write (:func:`foreign_files`)."""
    foreign = foreign_files(directory, ignore=ignore)
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UserInputError(
            f"{option} {directory} holds {foreign[0]}{more}, which no dpaudit manifest lists; dpaudit never replaces "
            "a folder it did not write: move your files away or choose another path."
        )


@contextlib.contextmanager
def staged_directory(
    out: str | os.PathLike[str], *, overwrite: bool, option: str = "--out", only_own: bool = True
) -> Iterator[Path]:
    """Build a run directory under a temporary name and move it into place only on success.

    Yields the temporary directory to write into. On any exception it is deleted and ``out`` is left
    as it was; on success an existing ``out`` (allowed only with ``overwrite``) is replaced.
    """
    out = prepare_output_dir(out, overwrite=overwrite, option=option, only_own=only_own)
    try:
        out.resolve().parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=_staging_prefix(out), dir=out.resolve().parent))
    except OSError as err:
        raise _naming(err, out) from None
    os.chmod(staging, _DIR_MODE)
    try:
        yield staging
        replace_directory(staging, out)
    except BaseException as err:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(err, OSError):  # name the output, not the staging folder that is now gone
            name = os.fsdecode(err.filename) if err.filename is not None else None
            if name is not None and (name == str(staging) or name.startswith(str(staging) + os.sep)):  # inside
                raise _naming(err, out / name[len(str(staging)) + 1 :]) from None
            raise _naming(err, name or out) from None
        raise


def replace_directory(staging: Path, final: Path) -> None:
    """Move a finished ``staging`` directory to ``final``, replacing an existing one.

    The old directory is first renamed aside (one rename each way), so at every instant ``final``
    is either the complete old directory or the complete new one.
    """
    if final.exists():
        trash = Path(tempfile.mkdtemp(prefix=_trash_prefix(final), dir=final.resolve().parent))
        os.replace(final, trash / "old")
        os.replace(staging, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(staging, final)


def _staging_prefix(out: Path) -> str:
    return f".{out.resolve().name}.staging-"


def _trash_prefix(out: Path) -> str:
    return f".{out.resolve().name}.old-"


def lock_path(out: str | os.PathLike[str]) -> Path:
    """The lock file of run directory ``out``: ``PARENT/.NAME.lock``, beside it (never inside it, so
    replacing the directory as a whole cannot drop the lock)."""
    resolved = Path(out).resolve()
    if resolved == resolved.parent:
        raise UserInputError(f"{out} is a filesystem root; name a run directory below it.")
    return resolved.parent / f".{resolved.name}.lock"


#: Lock files this process holds -> nesting depth (a stage may call another function that locks the same target).
_HELD: dict[Path, int] = {}


def _read_holder(fd: int, *, wait_s: float = 1.0) -> str:
    """Who holds the lock, from the file's text. A holder writes it just after ``flock``: an empty file
    means it is in between, so read again for up to ``wait_s`` before calling it unknown."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            text = os.pread(fd, 400, 0).decode("utf-8", "replace").split(maxsplit=2)
        except OSError:
            text = []
        if text or time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    if not text:
        return "pid unknown (it is starting up)"
    return (
        f"pid {text[0]}"
        + (f" on {text[1]}" if len(text) > 1 else "")
        + (f", dpaudit {text[2].strip()}" if len(text) > 2 else "")
    )


def remove_stale_lock(out: str | os.PathLike[str]) -> bool:
    """Delete ``out``'s lock file when no process holds it (a worker killed, or interrupted between creating the
    file and entering :func:`run_dir_lock`'s cleanup, leaves it behind); True when it was removed. The file is
    locked here first, so a lock some live process holds is never removed."""
    path = lock_path(out)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # held: a live process is using it
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False
        if same and path not in _HELD:
            os.unlink(path)  # while locked, as run_dir_lock unlinks: a waiting process re-checks the inode
            return True
        return False
    finally:
        os.close(fd)


def remove_stale_staging(out: str | os.PathLike[str]) -> list[Path]:
    """Delete ``.NAME.staging-*`` and ``.NAME.old-*`` folders that a killed stage left beside ``out``.

    Only safe while holding :func:`run_dir_lock` on ``out`` (no other live process is writing them);
    :func:`run_dir_lock` calls it. Returns what it removed.
    """
    resolved = Path(out).resolve()
    parent = resolved.parent
    if not parent.is_dir():
        return []
    removed = []
    for prefix in (_staging_prefix(resolved), _trash_prefix(resolved)):
        for leftover in parent.glob(_glob_escape(prefix) + "*"):
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
                removed.append(leftover)
    return removed


def _glob_escape(text: str) -> str:
    """``text`` with glob metacharacters escaped (a run directory may be called ``a[1]``)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


@contextlib.contextmanager
def run_dir_lock(out: str | os.PathLike[str], *, stage: str, option: str = "--out") -> Iterator[Path]:
    """Hold an exclusive lock on run directory ``out`` for the whole ``stage`` (inject, train, attack...).

    The lock is ``fcntl.flock`` on ``PARENT/.NAME.lock`` (created, with any missing parents, and removed
    again on exit together with the parents this call created if they are still empty). The file holds
    the holder's pid, host and stage, for the error message. On entry, stale staging folders of ``out``
    (a killed earlier run) are removed. Re-entering the lock of the same target in the same process nests.

    Args:
        out: the run directory the stage will write (it need not exist).
        stage: the stage's name, shown to a second process (e.g. ``"inject"``).
        option: the option that named ``out``, for error messages.

    Yields:
        The lock file's path.

    Raises:
        UserInputError: another live process holds the lock (naming its pid), or the parent directory
            cannot be written (read-only, permission denied, ...).
    """
    path = lock_path(out)
    if path in _HELD:
        _HELD[path] += 1
        try:
            yield path
        finally:
            _HELD[path] -= 1
        return
    created = [p for p in reversed(path.parents) if not p.exists()][::-1]  # deepest first
    fd = -1
    try:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as err:
                    if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                    holder = _read_holder(fd)
                    os.close(fd)
                    fd = -1
                    raise UserInputError(
                        f"{option} {out} is in use by another process ({holder}, lock file {path}); "
                        "wait for it to finish or choose another path."
                    ) from None
                # A holder that just finished unlinks the file before unlocking: make sure we locked the
                # file that is at the path now, not an unlinked one (else two processes could both hold it).
                try:
                    same = os.stat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)
                fd = -1
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} {os.uname().nodename} {stage}\n".encode(), 0)
        except OSError as err:
            raise UserInputError(
                f"{option} {out}: cannot write in {path.parent} ({err.strerror or err}); choose a writable location."
            ) from None
        _HELD[path] = 1
        try:
            remove_stale_staging(out)
            yield path
        finally:
            del _HELD[path]
            with contextlib.suppress(OSError):
                os.unlink(path)  # while still locked: a waiting process re-checks the inode (above)
    finally:
        if fd >= 0:
            os.close(fd)
        for parent in created:  # folders this call created, if nothing else was put in them
            try:
                parent.rmdir()
            except OSError:
                break


def file_hashes(directory: str | os.PathLike[str], names: Iterable[str]) -> dict[str, str]:
    """sha256 of each named file in ``directory`` (relative names, posix separators)."""
    directory = Path(directory)
    return {name: sha256_file(directory / name) for name in sorted(names)}


#: Config fields whose value is a secret: the guarantee holds only while they stay unknown (``noise_seed`` seeds
#: the Poisson sampling and the DP noise). The one list every redaction below reads (a trainer Config's
#: ``to_dict``, manifests, ``--set KEY=VALUE`` words, the report's provenance): a new secret is added here.
SECRET_FIELDS = ("noise_seed",)
#: What a released file records instead of a secret value.
REDACTED = "<given: secret>"


def is_secret_name(name: str) -> bool:
    """Whether ``name`` names a secret: a field (``noise_seed``), its option (``--noise-seed``) or a ``--set`` key as a
    user may spell it (``noise-seed``, `` noise_seed ``)."""
    return str(name).strip().lstrip("-").replace("-", "_").lower() in SECRET_FIELDS


def redact_assignment(text: str) -> str:
    """``KEY=VALUE`` (a ``--set`` word) with the value of a secret KEY replaced by ``<given: secret>``; other text as is."""
    key, sep, _ = str(text).partition("=")
    return f"{key}={REDACTED}" if sep and is_secret_name(key) else str(text)


def redact_command(argv: Iterable[str]) -> list[str]:
    """``argv`` with every secret value replaced by ``<given: secret>``.

    The manifest's ``command`` is printed in the report's provenance, which people share: a
    ``--noise-seed`` there would let anyone regenerate the noise and the sampling (the guarantee would
    be void). Redacted wherever they appear (the demo passes its own ``--noise-seed`` down to train):
    ``--noise-seed N`` and ``--noise-seed=N``; a ``KEY=VALUE`` word with a secret KEY, as
    ``audit-trainer --set noise_seed=N`` passes one (``--set=noise_seed=N`` too).
    """
    out: list[str] = []
    hide_next = False
    for arg in map(str, argv):
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if arg.startswith("-"):
            name, sep, value = arg.partition("=")
            if is_secret_name(name):
                if sep:
                    out.append(f"{name}={REDACTED}")
                else:
                    out.append(arg)
                    hide_next = True
            else:
                out.append(f"{name}={redact_assignment(value)}" if sep else arg)
            continue
        out.append(redact_assignment(arg))
    return out


def redact_config(value: Any) -> Any:
    """``value`` (a config, settings, a manifest's fields: JSON-like) with every secret redacted: the value of a
    mapping key that names one (unless it is None: nothing was given), and each ``KEY=VALUE`` string with a secret
    KEY (the ``--set`` words an audit records). An older manifest may hold a secret verbatim: the report shows it
    through here too."""
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if is_secret_name(str(k)) and v is not None else redact_config(v)) for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_config(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_config(v) for v in value)
    if isinstance(value, str):
        return redact_assignment(value)
    return value


def build_manifest(
    *,
    schema: str,
    config: Mapping[str, Any],
    seed: int | None,
    inputs: Mapping[str, str],
    outputs: Mapping[str, str],
    command: list[str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest every stage writes (the run-directory contract).

    Args:
        schema: e.g. ``"dpaudit.inject/1"``.
        config: the full, JSON-serializable configuration of the stage.
        seed: the seed that makes the stage reproducible.
        inputs: input path (as given) -> sha256.
        outputs: output file name relative to the run directory -> sha256.
        command: the command line; defaults to ``sys.argv``. Secret values are redacted (:func:`redact_command`),
            and so are they in ``config`` and ``extra`` (:func:`redact_config`).
        extra: stage-specific fields (counts, word lists, ...).
    """
    manifest: dict[str, Any] = {
        "schema": schema,
        "dpaudit_version": __version__,
        "command": redact_command(sys.argv if command is None else command),
        "config": redact_config(dict(config)),
        "seed": seed,
        "inputs": dict(inputs),
        "outputs": dict(outputs),
    }
    if extra:
        manifest.update(redact_config(dict(extra)))
    return manifest


def write_manifest(directory: str | os.PathLike[str], manifest: Mapping[str, Any]) -> Path:
    """Write ``manifest.json`` atomically into ``directory``."""
    return atomic_write_json(Path(directory) / MANIFEST_NAME, manifest)


def load_manifest(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run directory's manifest, with a one-line error if it is missing or unreadable."""
    path = Path(directory) / MANIFEST_NAME
    if not Path(directory).is_dir():
        raise UserInputError(f"{directory} is not a directory; pass a run directory written by dpaudit.")
    if not path.is_file():
        raise UserInputError(f"{path} is missing; {directory} is not a dpaudit run directory (or it was not finished).")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserInputError(
            f"{path}: not valid JSON ({err}); the run directory is damaged, rerun the stage."
        ) from None
    if not isinstance(manifest, dict) or "schema" not in manifest:
        raise UserInputError(f"{path}: no 'schema' field; not a dpaudit manifest.")
    return manifest


def verify_run_dir(directory: str | os.PathLike[str], *, schema_prefix: str | None = None) -> dict[str, Any]:
    """Check a run directory against its manifest and return the manifest.

    Every output listed in the manifest must exist with the recorded sha256. ``schema_prefix``
    (e.g. ``"dpaudit.inject/"``) checks that the directory was written by the expected stage.

    Raises:
        UserInputError: naming the file that is missing or changed.
    """
    directory = Path(directory)
    manifest = load_manifest(directory)
    schema = str(manifest["schema"])
    if schema_prefix is not None and not schema.startswith(schema_prefix):
        raise UserInputError(
            f"{directory}: manifest schema is {schema!r}, expected {schema_prefix}*; pass the output directory of the right stage."
        )
    outputs = manifest.get("outputs", {})
    if not isinstance(outputs, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in outputs.items()):
        raise UserInputError(
            f"{directory / MANIFEST_NAME}: 'outputs' must map each file name to its sha256, got "
            f"{type(outputs).__name__}; the run directory is damaged, rerun the stage that wrote it."
        )
    for name, expected in sorted(outputs.items()):
        path = directory / name
        if not path.is_file():
            raise UserInputError(
                f"{path} is listed in the manifest but missing; rerun the stage that wrote {directory}."
            )
        actual = sha256_file(path)
        if actual != expected:
            raise UserInputError(
                f"{path} was changed after it was written (sha256 {actual[:12]} != manifest {expected[:12]}); rerun the stage."
            )
    return manifest


# -- a finished run of the same command; report pages -------------------------------------------------


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON-like values are equal as a manifest stores them (tuples as lists, secrets redacted, keys whose
    value is None the same as absent ones: a field added later with its default matches an older manifest)."""

    def norm(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {str(k): norm(v) for k, v in value.items() if v is not None}
        if isinstance(value, (list, tuple)):
            return [norm(v) for v in value]
        return value

    return norm(json.loads(json.dumps(redact_config(a), default=str))) == norm(
        json.loads(json.dumps(redact_config(b), default=str))
    )


def finished_output(out: str | os.PathLike[str], *, schema_prefix: str) -> dict[str, Any] | None:
    """The manifest of the finished run directory ``out`` of one stage (``schema_prefix``, e.g. ``"dpaudit.attack/"``),
    or None: no manifest, another stage's, a file missing or changed since it was written, or a file no manifest
    lists. The stages call it before refusing a non-empty ``--out``: when the manifest also records this very
    command (its config, and inputs of the same content), a rerun returns the finished result and writes nothing,
    as a finished train run does."""
    out = Path(out)
    if not (out / MANIFEST_NAME).is_file():
        return None
    try:
        manifest = verify_run_dir(out, schema_prefix=schema_prefix)
    except (UserInputError, OSError, ValueError):
        return None
    return None if foreign_files(out) else manifest


def inputs_unchanged(inputs: Mapping[str, str]) -> bool:
    """Whether every input a manifest lists (path as given -> sha256) still holds the recorded content. An entry whose
    value is no sha256 describes a generated input (``builtin:assistant``: its version, seed and size), which the
    stage's config fixes."""
    for path, digest in inputs.items():
        if not re.fullmatch(r"[0-9a-f]{64}", str(digest)):
            continue
        try:
            if not Path(path).is_file() or sha256_file(path) != digest:
                return False
        except OSError:
            return False
    return True


#: What the ``<head>`` of every HTML page dpaudit writes holds (the report templates' generator tag): how a page
#: dpaudit wrote is told from a user's file before it is replaced.
PAGE_GENERATOR = '<meta name="generator" content="dpaudit '
_PAGE_HEAD_BYTES = 4096


def written_page(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a report page dpaudit wrote: an HTML file whose head carries :data:`PAGE_GENERATOR`."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_PAGE_HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    return head.lstrip().lower().startswith("<!doctype html>") and PAGE_GENERATOR in head


def enclosing_run_dir(path: str | os.PathLike[str]) -> Path | None:
    """The dpaudit run directory ``path`` lies in (the nearest folder above it, links resolved, whose
    ``manifest.json`` has a dpaudit schema), or None."""
    for folder in Path(os.path.realpath(path)).parents:
        manifest = folder / MANIFEST_NAME
        if not manifest.is_file():
            continue
        try:
            schema = json.loads(manifest.read_text(encoding="utf-8")).get("schema", "")
        except (OSError, ValueError, AttributeError):
            continue
        if str(schema).startswith("dpaudit."):
            return folder
    return None


def check_page_target(out: str | os.PathLike[str], *, option: str = "--out") -> bool:
    """Check that a report page may be written at ``out``; True when a page dpaudit wrote is there already.

    Never a file dpaudit did not write (a user's CSV, notes, a link), and never a path inside a run directory,
    whatever ``--overwrite`` says: a run's manifest lists its inputs and outputs by hash, so a page written over
    one of them (an attack directory's ``results.json``, an inject directory's ``train.jsonl``) or beside them
    changes that run (a later stage refuses it, ``--overwrite`` no longer replaces it). The caller replaces an
    existing page only with ``--overwrite`` (or when it would write the same bytes).

    Raises:
        UserInputError: naming ``option``, the file and what to do.
    """
    out = Path(out)
    run_dir = enclosing_run_dir(out)
    if run_dir is not None:
        name = Path(os.path.realpath(out)).relative_to(run_dir).as_posix()
        manifest = load_manifest(run_dir)
        listed = name == MANIFEST_NAME or name in (manifest.get("outputs") or {})
        what = "a file its manifest lists" if listed else "a page there would be a file its manifest does not list"
        raise UserInputError(
            f"{option} {out} is inside the dpaudit run directory {run_dir} ({what}); dpaudit never "
            "writes a report into a run directory: choose a path outside it, e.g. reports/NAME.html."
        )
    if out.is_symlink():
        raise UserInputError(f"{option} {out} is a symbolic link; dpaudit does not replace links: choose another path.")
    if not out.exists():
        return False
    if out.is_dir():
        raise UserInputError(f"{option} {out} is a directory; pass a file name such as {out / 'report.html'}.")
    if not written_page(out):
        raise UserInputError(
            f"{option} {out} exists and is not a report page dpaudit wrote; dpaudit never replaces a "
            "file it did not write: choose another path or move that file away."
        )
    return True
