"""``dpaudit inject`` and the files around it (hardening, items 3, 4 and 6; moved from tests/test_bad_inputs_files.py
and tests/test_bad_inputs_round2.py): canaries that swamp the corpus, ``--out .``, a read-only parent, a file-size
limit, a corpus that cannot be read: each is a one-line error, exit code 2, naming the culprit, and leaves nothing
behind. Run-directory locks and stale staging folders are tested with real second processes; the canary share is
printed and ``--force`` accepts it.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import lock_path
from tests.bad_inputs.file_faults import (
    _READ_ONLY,
    REPO_ROOT,
    SMALL,
    Case,
    Ctx,
    _child_env,
    _file_size_limit,
    _start_holder,
    assert_one_line_error,
    run_cli,
    small_corpus,
    tree,
)


def _inject_swamped(ctx: Ctx):
    return (
        [
            "inject",
            "--corpus",
            small_corpus(ctx.base),
            "--out",
            str(ctx.base / "out" / "run"),
            "--frequencies",
            "1000000",
            "--per-frequency",
            "20",
        ],
        [
            "--frequencies",
            "99.999% of train.jsonl",
            "20,000,000 insertions among 210 corpus rows",
            "50% limit",
            "--force",
        ],
        None,
    )


def _inject_cwd_overwrite(ctx: Ctx):
    return (
        ["inject", "--corpus", small_corpus(ctx.base), "--out", ".", "--overwrite", *SMALL],
        ["--out . is the current directory"],
        None,
    )


def _inject_read_only_parent(ctx: Ctx):
    corpus = small_corpus(ctx.base)
    (ctx.base / "ro").mkdir()
    (ctx.base / "ro").chmod(0o555)
    return (
        ["inject", "--corpus", corpus, "--out", str(ctx.base / "ro" / "run"), *SMALL],
        [f"--out {ctx.base / 'ro' / 'run'}: cannot write in {ctx.base / 'ro'}", "Permission denied"],
        _READ_ONLY,
    )


def _inject_file_size_limit(ctx: Ctx):
    return (
        ["inject", "--corpus", "builtin:assistant", "--corpus-size", "3000", "--out", str(ctx.base / "run"), *SMALL],
        [f"--out {ctx.base / 'run'}: writing train.jsonl failed", "File too large", "ulimit -f"],
        _file_size_limit(16 * 1024),
    )


CASES: dict[str, Case] = {
    "inject: canaries swamp the corpus": _inject_swamped,
    "inject: --out . --overwrite": _inject_cwd_overwrite,
    "inject: read-only parent": _inject_read_only_parent,
    "inject: file-size limit": _inject_file_size_limit,
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(name, scratch, data_dir, monkeypatch):
    base = scratch / name.replace(" ", "_").replace(":", "").replace("'", "").replace("/", "_")
    base.mkdir()
    ctx = Ctx(base=base, scratch=scratch, data_dir=data_dir, trained_run=None)
    args, needles, limits = CASES[name](ctx)
    monkeypatch.chdir(base)
    before = tree(scratch)
    outcome = run_cli(args, subprocess_with=limits, cwd=base)
    assert_one_line_error(outcome, *needles)
    assert tree(scratch) == before  # no output, no staging folder, no lock file


# ------------------------------------------------------------------------------------------------
# Item 3: run-directory locks, with real second processes.


def test_inject_is_refused_while_another_process_holds_the_lock_and_runs_once_it_died(tmp_path):
    out = tmp_path / "run"
    corpus = small_corpus(tmp_path)
    holder = _start_holder(out, "inject")
    try:
        live = tmp_path / f".{out.name}.staging-live"  # the holder's own staging folder: not stale, must survive
        live.mkdir()
        (live / "train.jsonl").write_text("{}\n")
        before = tree(tmp_path)
        outcome = run_cli(["inject", "--corpus", corpus, "--out", str(out), *SMALL])
        assert_one_line_error(outcome, f"--out {out} is in use by another process (pid {holder.pid}", "dpaudit inject")
        assert tree(tmp_path) == before
    finally:
        holder.kill()  # SIGKILL: no cleanup runs, the kernel drops the lock
        holder.wait()
    assert lock_path(out).exists()  # the dead holder's file is left, but it locks nothing
    result = CliRunner().invoke(cli, ["inject", "--corpus", corpus, "--out", str(out), *SMALL], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "run"]  # stale staging and lock file gone


def test_two_concurrent_injects_into_one_directory_write_it_once(tmp_path):
    out = tmp_path / "run"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dpaudit",
                "inject",
                "--corpus",
                "builtin:assistant",
                "--corpus-size",
                "3000",
                "--out",
                str(out),
                "--seed",
                str(seed),
                *SMALL,
            ],
            cwd=REPO_ROOT,
            env=_child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (1, 2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], outputs
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    message = outputs[loser][1].strip().splitlines()[-1]
    assert (
        f"is in use by another process (pid {procs[winner].pid}" in message
        or f"--out {out} exists and is not empty" in message
    ), message  # it may also start after the winner ended
    assert "Wrote" not in outputs[loser][0]
    assert json.loads((out / "manifest.json").read_text())["seed"] == winner + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


# ------------------------------------------------------------------------------------------------
# Item 4: a killed inject's staging folder is removed by the next run of the same target.


def test_killed_inject_leaves_staging_that_the_next_run_removes(tmp_path):
    corpus = tmp_path / "big.txt"
    corpus.write_text(
        "".join(f"utterance number {i} of a long corpus for the staging test\n" for i in range(200_000)),
        encoding="utf-8",
    )
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dpaudit",
            "inject",
            "--corpus",
            str(corpus),
            "--out",
            str(out),
            "--heldout-size",
            "10",
            "--public-size",
            "10",
        ],
        cwd=REPO_ROOT,
        env=_child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    staging: list[Path] = []
    while not staging and proc.poll() is None and time.monotonic() < deadline:
        staging = list(tmp_path.glob(".run.staging-*"))
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert staging and staging[0].is_dir() and not out.exists(), "the inject finished before it could be killed"
    result = CliRunner().invoke(
        cli, ["inject", "--corpus", small_corpus(tmp_path), "--out", str(out), *SMALL], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "corpus.txt", "run"]


# ------------------------------------------------------------------------------------------------
# Item 6: the canary share.


def test_canary_share_is_printed_and_force_accepts_it(tmp_path):
    corpus = small_corpus(tmp_path)  # 300 rows: 210 members
    args = ["inject", "--corpus", corpus, "--frequencies", "100", "--per-frequency", "3", "--holdout", "1"]
    refused = run_cli([*args, "--out", str(tmp_path / "a")])
    assert_one_line_error(refused, f"{300 / 510:.2%} of train.jsonl", "300 insertions among 210 corpus rows")
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "b"), "--force"], catch_exceptions=False)
    assert result.exit_code == 0 and f"{300 / 510:.2%} canary rows" in result.output
    normal = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            corpus,
            "--out",
            str(tmp_path / "c"),
            "--frequencies",
            "1,2",
            "--per-frequency",
            "2",
            "--holdout",
            "0",
        ],
        catch_exceptions=False,
    )
    assert f"{6 / 216:.2%} canary rows" in normal.output


# ------------------------------------------------------------------------------------------------
# Unreadable corpus (mode 000, simulated: root reads anything) and a read that fails (EIO).


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


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"line {i} of a corpus\n" for i in range(60)), encoding="utf-8")
    return path


def test_unreadable_corpus_is_one_line(tmp_path, monkeypatch):
    import dpaudit.corpus.readers as readers

    corpus = _corpus(tmp_path)
    monkeypatch.setattr(readers, "open", _raise(errno.EACCES, str(corpus)), raising=False)
    out = tmp_path / "out"
    one_line_error(
        ["inject", "--corpus", str(corpus), "--out", str(out), "--frequencies", "1", "--per-frequency", "1"],
        f"--corpus {corpus}: cannot read it (Permission denied)",
        "chmod u+r",
    )
    assert tree(tmp_path) == ["corpus.txt"]


def test_corpus_whose_read_fails_is_one_line_naming_the_line(tmp_path, monkeypatch):
    import io

    import dpaudit.corpus.readers as readers

    corpus = _corpus(tmp_path)

    class FailingDisk(io.BytesIO):
        def readline(self, *args):
            if self.tell() > 40:  # three 19-byte lines read
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return super().readline(*args)

    monkeypatch.setattr(readers, "open", lambda path, mode="r": FailingDisk(Path(path).read_bytes()), raising=False)
    out = tmp_path / "out"
    one_line_error(
        ["inject", "--corpus", str(corpus), "--out", str(out), "--frequencies", "1", "--per-frequency", "1"],
        f"--corpus {corpus} (after line 3): cannot read it (Input/output error)",
        "healthy disk",
    )
    assert tree(tmp_path) == ["corpus.txt"]
