"""Rerunning a finished ``attack``, ``inject`` or ``audit-trainer`` with its own command returns its result.

Before: the same command on its own finished ``--out`` was refused ("exists and is not empty; pass
--overwrite"), unlike ``train`` and ``demo``, which return a finished run of the same command. Now each stage
compares the manifest's recorded config (and its inputs' content) with this command's: the same command prints
what it printed (stdout byte for byte, a note on stderr), exits 0 and touches nothing; another config on the same
``--out`` is refused as before unless ``--overwrite``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from tests.bad_inputs import audit_fake


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def tree(root: Path) -> dict[str, int]:
    """Every entry under ``root`` with its mtime: a rerun that rewrites anything changes it."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def _refused_as_not_empty(result, out: Path) -> None:
    assert result.exit_code == 2, result.output
    assert f"Error: --out {out} exists and is not empty; pass --overwrite" in result.output, result.output


def test_inject_rerun_returns_the_finished_run(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"please set an alarm for {h} in the morning number {i}\n" for i in range(40)
                              for h in (6, 7)), encoding="utf-8")
    out = tmp_path / "data"
    args = ["inject", "--corpus", corpus, "--frequencies", "1,2", "--per-frequency", "2", "--seed", "4", "--out", out]
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    before = tree(out)
    again = _invoke(*args)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout and "note: --out" in again.stderr and "nothing was written" in again.stderr
    assert tree(out) == before
    as_json = _invoke(*args, "--json")  # the summary as JSON, read back from the manifest
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["counts"]["canaries"] == 2 * 2 + 2
    assert "already_done" not in as_json.stdout and tree(out) == before
    # Other options, or the same options on a corpus that changed: refused as before.
    _refused_as_not_empty(_invoke(*args[:-3], "5", "--out", out), out)
    corpus.write_text(corpus.read_text(encoding="utf-8") + "one more line\n", encoding="utf-8")
    _refused_as_not_empty(_invoke(*args), out)
    assert tree(out) == before


def test_attack_rerun_returns_the_finished_results(tiny_causal_dir, data_dir, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "attack"
    args = ["attack", "--model", tiny_causal_dir, "--data", data_dir, "--attacks", "loss", "--out", out]
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    before = tree(out)
    again = _invoke(*args)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout  # the same summary, notes and "wrote" line
    assert "note: --out" in again.stderr and "nothing was recomputed or written" in again.stderr
    assert tree(out) == before
    _refused_as_not_empty(_invoke(*args, "--seed", "1"), out)  # another config
    assert tree(out) == before


@pytest.fixture()
def fake(monkeypatch):
    return audit_fake.install(monkeypatch)


def test_audit_trainer_rerun_returns_the_finished_audit(fake, tmp_path):
    out = tmp_path / "audit"
    args = ["audit-trainer", "--trainer", audit_fake.NAME, "--canaries", "100", "--steps", "2", "--seed", "5",
            "--out", out]
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    assert fake.trained == ["run-0"]
    before = tree(out)
    again = _invoke(*args, "--workers", "1")  # how many run at once is no setting of the audit
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout and "verdict:" in again.stdout
    assert "note: --out" in again.stderr and "nothing was run or written" in again.stderr
    assert fake.trained == ["run-0"] and tree(out) == before
    _refused_as_not_empty(_invoke(*args[:-2], "--confidence", "0.9", "--out", out), out)
    assert fake.trained == ["run-0"] and tree(out) == before
