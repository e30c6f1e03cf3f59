"""The machinery of the file-fault cases (hardening, items 3, 4, 6, 7, 8; moved from tests/test_bad_inputs_files.py):
each case is a one-line error, exit code 2, naming the culprit, and leaves nothing behind.

Cases that need a real process limit run ``python -m dpaudit`` in a subprocess that first limits itself:
a file-size limit (``RLIMIT_FSIZE`` with SIGXFSZ ignored, as ``ulimit -f`` in a shell) and a read-only
parent directory (as root, chmod does not stop writes, so the child drops the capabilities that override
directory permissions before it execs dpaudit). Used by test_inject_files.py, test_train_files.py and
test_account_options.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from dpaudit.cli import cli

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--frequencies", "1,2", "--per-frequency", "2", "--holdout", "1"]
TINY = [
    "--preset",
    "tiny",
    "--max-length",
    "16",
    "--vocab-size",
    "128",
    "--physical-batch",
    "8",
    "--eval-examples",
    "16",
    "--log-every",
    "2",
    "--eval-every",
    "3",
    "--checkpoint-every",
    "3",
    "--steps",
    "6",
    "--batch-size",
    "16",
]
# argv: FILE_SIZE_LIMIT DROP_ROOT_OVERRIDES DPAUDIT_ARGS...: applies the limits to this process, then execs
# `python -m dpaudit ARGS` (limits and ignored signals survive exec). Root ignores directory permissions, so
# it drops the capabilities that let it from the bounding set: the exec'd dpaudit never has them.
LAUNCHER = """
import ctypes, os, resource, signal, sys
limit, drop = int(sys.argv[1]), sys.argv[2] == "1"
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
if drop and os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
os.execv(sys.executable, [sys.executable, "-m", "dpaudit", *sys.argv[3:]])
"""
# Holds the run-directory lock of argv[1] as stage argv[2] until killed or its stdin closes.
HOLDER = """
import sys
from dpaudit.files.run_dirs import run_dir_lock
with run_dir_lock(sys.argv[1], stage=sys.argv[2]):
    print("locked", flush=True)
    sys.stdin.read()
"""


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def small_corpus(d: Path, lines: int = 300) -> str:
    path = d / "corpus.txt"
    path.write_text("".join(f"line {i} of the small test corpus\n" for i in range(lines)), encoding="utf-8")
    return str(path)


def _child_env(devices: int = 1) -> dict[str, str]:
    """This process's environment for a child ``dpaudit``: ``devices`` CPU devices (this process has two: a child
    with two compiles the same programs as an in-process run, so it loads them from the session's XLA cache)."""
    env = dict(
        os.environ,
        TOKENIZERS_PARALLELISM="false",
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    env.pop("JAX_COORDINATOR_ADDRESS", None)
    return env


@dataclass(frozen=True)
class Limits:
    """What the child process runs under: a file-size limit in bytes, and/or no root permission overrides."""

    file_size: int = 0
    drop_root_overrides: bool = False


def _file_size_limit(limit: int) -> Limits:
    return Limits(file_size=limit)


_READ_ONLY = Limits(drop_root_overrides=True)


@dataclass
class Outcome:
    exit_code: int
    text: str  # what the user saw (stdout + stderr)


def run_cli(
    args: list[str], *, subprocess_with: Limits | None = None, cwd: Path | None = None, devices: int = 1
) -> Outcome:
    """``dpaudit ARGS`` in this process (CliRunner), or in a child process under ``subprocess_with`` with ``devices``
    CPU devices.

    The child applies the limits to itself and then execs ``python -m dpaudit`` (like ``ulimit -f N; dpaudit``):
    no ``preexec_fn``, which would fork this multithreaded (JAX) process.
    """
    if subprocess_with is None:
        result = CliRunner().invoke(cli, args)
        return Outcome(result.exit_code, result.output)
    launcher = [
        sys.executable,
        "-c",
        LAUNCHER,
        str(subprocess_with.file_size),
        str(int(subprocess_with.drop_root_overrides)),
    ]
    proc = subprocess.run(
        [*launcher, *args], cwd=cwd or REPO_ROOT, env=_child_env(devices), capture_output=True, text=True, timeout=300
    )
    return Outcome(proc.returncode, proc.stdout + proc.stderr)


def assert_one_line_error(outcome: Outcome, *needles: str) -> str:
    assert outcome.exit_code == 2, outcome.text[-3000:]
    assert "Traceback" not in outcome.text, outcome.text[-3000:]
    # Progress bars go to stderr with carriage returns; the error is the one line starting "Error: ".
    lines = [line.strip() for chunk in outcome.text.splitlines() for line in chunk.split("\r") if line.strip()]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], outcome.text[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


# ------------------------------------------------------------------------------------------------
# Shared inputs (the scratch folder fixture is in tests/bad_inputs/conftest.py).


@dataclass
class Ctx:
    base: Path  # this case's folder: the tree under it must not change
    scratch: Path
    data_dir: Path
    trained_run: Path | None


def _copy_data(ctx: Ctx) -> Path:
    copy = ctx.base / "data"
    shutil.copytree(ctx.data_dir, copy)
    return copy


def _edit_manifest(data: Path, edit: Callable[[dict], None]) -> None:
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    edit(manifest)
    (data / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _train_args(data: Path, out: Path) -> list[str]:
    return [
        "train",
        "--trainer",
        "jax-bert",
        "--data",
        str(data),
        "--out",
        str(out),
        "--seed",
        "3",
        "--noise-multiplier",
        "1.0",
        *TINY,
    ]


# Each case: ctx -> (dpaudit args, needles, how to run: None in-process, else the limits of a child process).
Case = Callable[[Ctx], tuple[list[str], list[str], Limits | None]]


def _start_holder(out: Path, stage: str) -> subprocess.Popen:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out), stage],
        cwd=REPO_ROOT,
        env=_child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder
