"""``dpaudit audit-trainer`` loses no finished run, and is checked before its first run.

Before: the runs trained in a temporary directory and no lock was taken, so Ctrl-C after the runs, a killed
worker (whose message says "Finished models are kept."), a read-only ``--out`` (found only when the audit was
written, after every run) or a second audit on the same ``--out`` threw every finished run away. Now the audit
holds the lock of ``--out`` (as train does), checks that ``--out`` is writable before any run, keeps its dataset
and each finished run in ``--out/runs/`` and resumes them when the same command is run again; a run that had not
finished trains again from its first step (its observations before the kill were never written).

The trainer is tests/bad_inputs/audit_fake.py's numpy stand-in (runs of microseconds), except for the read-only
case, a child process that must load a registered trainer (it is refused before that trainer trains).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import lock_path, verify_run_dir
from tests.bad_inputs import audit_fake

REPO_ROOT = Path(__file__).resolve().parents[2]
#: A small audit of the stand-in trainer: 2 runs of 2 steps, 100 canaries each.
AUDIT = [
    "audit-trainer",
    "--trainer",
    audit_fake.NAME,
    "--canaries",
    "100",
    "--steps",
    "2",
    "--runs",
    "2",
    "--seed",
    "3",
]


def _child_env() -> dict[str, str]:
    return dict(
        os.environ,
        TOKENIZERS_PARALLELISM="false",
        PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


def _entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture()
def fake(monkeypatch):
    return audit_fake.install(monkeypatch)


def test_ctrl_c_keeps_the_finished_run_and_the_same_command_resumes_it(fake, tmp_path):
    out = tmp_path / "audit"
    fake.fail_at, fake.fail_with = "run-1", KeyboardInterrupt()  # Ctrl-C as the second run starts
    first = _invoke(*AUDIT, "--out", out)
    assert first.exit_code == 130, first.output
    assert f"interrupted: 1 of 2 audit runs finished and are kept in {out / 'runs'}" in first.output
    assert fake.trained == ["run-0"]
    kept = np.load(out / "runs" / "run-0.evidence.npz")["member"]
    assert not (out / "manifest.json").exists() and not lock_path(out).exists()

    # Another audit on this --out does not discard them without --overwrite.
    other = _invoke(*[a if a != "100" else "120" for a in AUDIT], "--out", out)
    assert other.exit_code == 2, other.output
    line = _one_error_line(other)
    assert f"--out {out} keeps the finished runs of an audit with other settings" in line and "--overwrite" in line
    assert (out / "runs" / "run-0.evidence.npz").is_file()

    # The same command resumes: run 0 is read back, only run 1 trains.
    fake.fail_at = None
    resumed = _invoke(*AUDIT, "--out", out)
    assert resumed.exit_code == 0, resumed.output
    assert fake.trained == ["run-0", "run-1"]
    manifest = verify_run_dir(out, schema_prefix="dpaudit.whitebox/")
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "manifest.json", "scores", "whitebox.json"]
    assert set(manifest["outputs"]) == {"index.html", "scores/whitebox.jsonl", "whitebox.json"}
    import json

    rows = [json.loads(line) for line in (out / "scores" / "whitebox.jsonl").read_text().splitlines()]
    assert [r["member"] for r in rows if r["run"] == 0] == kept.tolist()  # the kept run is in the audit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit"]  # no lock, staging or work folder beside it


def test_a_worker_that_died_keeps_the_finished_runs_and_the_rerun_trains_only_the_rest(fake, tmp_path, monkeypatch):
    """--workers: the runs are fleet jobs (here the inline engine); a worker that dies is the fleet's one-line error,
    which now also says where the finished runs are, and they are really kept."""
    import dpaudit.fleet.fleet as fleet

    monkeypatch.setattr(fleet, "_choose_engine", lambda *args, **kwargs: "inline")
    out = tmp_path / "audit"
    fake.fail_at = "run-1"
    fake.fail_with = UserInputError(
        "its worker process died (exit code -9); if it ran out of memory, train fewer "
        "models at once (--workers). Finished models are kept."
    )
    first = _invoke(*AUDIT, "--workers", "2", "--out", out)
    assert first.exit_code == 2, first.output
    line = _one_error_line(first)
    assert "audit run 2/2: its worker process died" in line and "Finished models are kept." in line
    assert f"1 of 2 audit runs finished and are kept in {out / 'runs'}" in line
    assert (out / "runs" / "run-0.evidence.npz").is_file() and not (out / "runs" / "run-1").exists()

    fake.fail_at = None
    resumed = _invoke(*AUDIT, "--workers", "2", "--out", out)
    assert resumed.exit_code == 0, resumed.output
    assert fake.trained == ["run-0", "run-1"]  # run 0 was not trained again
    verify_run_dir(out, schema_prefix="dpaudit.whitebox/")
    assert not (out / "runs").exists()


def test_a_failure_before_any_run_finished_leaves_nothing(fake, tmp_path):
    out = tmp_path / "new" / "audit"
    fake.fail_at, fake.fail_with = "run-0", UserInputError("the trainer refused its config")
    result = _invoke(*AUDIT, "--out", out)
    assert result.exit_code == 2, result.output
    assert "the trainer refused its config" in _one_error_line(result)
    assert _entries(tmp_path) == []  # not the dataset, not --out, not the folders made for it, no lock


def test_a_second_audit_on_the_same_out_is_refused(fake, tmp_path):
    out = tmp_path / "audit"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom dpaudit.files.run_dirs import run_dir_lock\n"
            "with run_dir_lock(sys.argv[1], stage='audit-trainer'):\n"
            "    print('locked', flush=True)\n    sys.stdin.read()\n",
            str(out),
        ],
        cwd=REPO_ROOT,
        env=_child_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        result = _invoke(*AUDIT, "--out", out)
        assert result.exit_code == 2, result.output
        assert f"--out {out} is in use by another process (pid {holder.pid}" in _one_error_line(result)
        assert fake.trained == [] and not out.exists()
    finally:
        holder.stdin.close()
        holder.wait()


def test_a_read_only_out_is_refused_before_any_run(tmp_path):
    """A real read-only folder: the child drops the capabilities that let root write anywhere (as
    tests/bad_inputs/file_faults.py does), then runs dpaudit on a registered trainer."""
    pytest.importorskip("torch")
    launcher = (
        "import ctypes, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "for cap in (1, 2, 3) if os.geteuid() == 0 else ():  # CAP_DAC_OVERRIDE, _DAC_READ_SEARCH, _FOWNER\n"
        "    if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP\n"
        "        raise OSError(ctypes.get_errno(), 'prctl(PR_CAPBSET_DROP)')\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'dpaudit', *sys.argv[1:]])\n"
    )
    out = tmp_path / "audit"
    out.mkdir()
    out.chmod(0o555)
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                launcher,
                "audit-trainer",
                "--trainer",
                "edp-sgd",
                "--set",
                "mode=dp-sgd",
                "--canaries",
                "20",
                "--steps",
                "2",
                "--out",
                str(out),
            ],
            cwd=tmp_path,
            env=_child_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        out.chmod(0o755)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines  # one line: no progress bar of a run
    assert f"--out {out}: cannot write in it (Permission denied)" in lines[0], lines
    assert _entries(tmp_path) == ["audit"] and not any(out.iterdir())
