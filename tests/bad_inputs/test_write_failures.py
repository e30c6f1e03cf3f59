"""A write that fails (hardening, round two; moved from tests/test_bad_inputs_round2.py): disk full, a failing disk,
a file-size limit, a read-only folder, ``--out`` under a file, for ``dpaudit report`` and ``dpaudit attack``, and a
results.json with wrong types read by the report. Each is a one-line error naming the path or field, exit code 2,
and nothing left behind (no output, no temporary file, no staging folder, no lock, no folder made for the output).

Faults are injected in-process where a real one needs privileges: the tests run as root, and root ignores
permission bits, so a read-only folder and a failing disk (EIO) are simulated by making the one system call raise
the error the kernel would give. A file-size limit is real: a child process sets ``RLIMIT_FSIZE`` (as ``ulimit -f``)
before it runs dpaudit.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.claim import Claim
from dpaudit.cli import cli

REPO_ROOT = Path(__file__).resolve().parents[2]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_line_error(args: list[str], *needles: str, cwd: Path | None = None) -> str:
    """Run ``dpaudit ARGS`` in this process and return its one error line, checking exit code 2 and the needles."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _raise(code: int, filename: str | None = None):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), filename)

    return fail


# ------------------------------------------------------------------------------------------------
# An attack directory to report on: written by the product's own writer from minimal typed results
# (no model is trained), one canary.


def _results():
    from dpaudit.attacks.results import AttackResults, CanaryScore, DataInfo, ModelInfo

    return AttackResults(
        model=ModelInfo(path="m", kind="masked-lm", architecture="BertForMaskedLM"),
        data=DataInfo(
            path="d",
            secret_format="digits:4",
            log2_space_size=13.3,
            canaries=1,
            controls=0,
            template="{name} has {secret}",
        ),
        claimed=Claim(known=False),
        attacks=(),
        canaries=(CanaryScore(id="c0000", frequency=1, secret="1 2 3 4"),),
    )


def _write_attack(out: Path) -> Path:
    from dpaudit.attacks.run import write_attack_dir

    return write_attack_dir(
        out, _results(), config={}, inputs={}, seed=0, overwrite=False, command=["dpaudit", "attack"]
    )


@pytest.fixture(scope="module")
def attack_dir(tmp_path_factory) -> Path:
    return _write_attack(tmp_path_factory.mktemp("round2") / "attack")


# ------------------------------------------------------------------------------------------------
# Disk full, file-size limit, read-only folder, --out under a file: one line, nothing left.


@pytest.mark.parametrize(
    ("code", "reason"), [(errno.ENOSPC, "No space left on device"), (errno.EIO, "Input/output error")]
)
def test_report_write_failure_is_one_line_and_leaves_nothing(attack_dir, tmp_path, monkeypatch, code, reason):
    out = tmp_path / "pages" / "deep" / "page.html"
    monkeypatch.setattr(os, "fsync", _raise(code))  # the page's data never reaches the disk
    one_line_error(["report", str(attack_dir), "--out", str(out)], "dpaudit report: cannot", f"{out}: {reason}")
    assert tree(tmp_path) == []  # no page, no temporary file, not even the folders made for it


@pytest.mark.parametrize(
    ("code", "needles"),
    [
        (errno.EACCES, ["Permission denied", "fix its permissions"]),
        (errno.EROFS, ["Read-only file system", "choose a writable location"]),
    ],
)
def test_report_into_a_folder_it_may_not_write_is_one_line(attack_dir, tmp_path, monkeypatch, code, needles):
    """A read-only folder (EACCES) or file system (EROFS): creating the temporary file fails; the error names
    the page, not the temporary file."""
    import tempfile

    out = tmp_path / "page.html"
    monkeypatch.setattr(tempfile, "mkstemp", _raise(code, str(tmp_path / ".page.html.x1y2.tmp")))
    line = one_line_error(["report", str(attack_dir), "--out", str(out)], "dpaudit report: cannot", str(out), *needles)
    assert ".tmp" not in line
    assert tree(tmp_path) == []


def test_report_out_under_a_file_is_refused_before_rendering(attack_dir, tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    out = tmp_path / "notes.txt" / "sub" / "page.html"
    one_line_error(
        ["report", str(attack_dir), "--out", str(out)], f"--out {out}", f"{tmp_path / 'notes.txt'} is a file"
    )
    assert tree(tmp_path) == ["notes.txt"]


def test_report_under_a_real_file_size_limit(attack_dir, tmp_path):
    """RLIMIT_FSIZE in a child process (SIGXFSZ ignored, as the shell's ulimit -f): the write gets EFBIG."""
    launcher = (
        "import resource, signal, sys, runpy; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); sys.argv = ['dpaudit', *sys.argv[1:]]; "
        "runpy.run_module('dpaudit', run_name='__main__')"
    )
    out = tmp_path / "r" / "page.html"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", launcher, "report", str(attack_dir), "--out", str(out)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and f"cannot write {out}: File too large" in lines[0] and "ulimit -f" in lines[0], lines
    assert tree(tmp_path) == []


def test_attack_disk_full_leaves_no_directory_staging_or_lock(tmp_path, monkeypatch):
    """``dpaudit attack`` through its real lock, staged directory and writers; only the scoring is replaced
    (by the minimal results above), and the disk fills while scores/canaries.jsonl is written."""
    import dpaudit.attacks.run as run
    import dpaudit.files.run_dirs as rundir

    def fake_attack(model, data, attacks, *, out, overwrite, **_):
        write_attack_dir = run.write_attack_dir
        return write_attack_dir(out, _results(), config={}, inputs={}, seed=0, overwrite=overwrite, command=None)

    def full(record):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(run, "_attack", fake_attack)
    monkeypatch.setattr(rundir, "dumps_jsonl_line", full)
    out = tmp_path / "attack"
    one_line_error(
        ["attack", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--out", str(out)],
        f"dpaudit attack: cannot write {out / 'scores' / 'canaries.jsonl'}: No space left on device",
        "free disk space",
    )
    assert tree(tmp_path) == []


def test_atomic_write_removes_its_temporary_file_and_new_folders(tmp_path, monkeypatch):
    from dpaudit.files.run_dirs import atomic_write_text

    monkeypatch.setattr(os, "fsync", _raise(errno.EFBIG))
    with pytest.raises(OSError) as info:
        atomic_write_text(tmp_path / "a" / "b" / "x.json", "{}")
    assert info.value.errno == errno.EFBIG and info.value.filename == str(tmp_path / "a" / "b" / "x.json")
    assert tree(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# Report on a results.json with wrong types, the manifest re-hashed to match.


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        (("model",), 5, "field model must be an object, got 5"),
        (("data", "canaries"), "ten", 'field data.canaries must be an integer, got "ten"'),
        (("claimed_privacy", "private"), "no", "field claimed_privacy.private must be true or false"),
        (("attacks",), {"a": 1}, "field attacks must be a list"),
        (("warnings",), [3], "field warnings[0] must be a string, got 3"),
    ],
)
def test_report_on_results_with_wrong_types_names_the_field(attack_dir, tmp_path, field, value, needle):
    import shutil

    copy = Path(shutil.copytree(attack_dir, tmp_path / "copy"))
    results = json.loads((copy / "results.json").read_text())
    target = results
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = value
    (copy / "results.json").write_text(json.dumps(results))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["outputs"]["results.json"] = hashlib.sha256((copy / "results.json").read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "page.html"
    one_line_error(
        ["report", str(copy), "--out", str(out)], f"{copy / 'results.json'}: {needle}", "rerun dpaudit attack"
    )
    assert not out.exists()
