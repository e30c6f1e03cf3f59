"""``dpaudit demo --quick`` and ``dpaudit demo`` write to different folders by default (hardening): both used
``runs/demo`` (and ``reports/demo/index.html``), so a quick demo after the full one silently replaced the full
demo's stages, whose commands differ. The stages are not run here: the stage runner is replaced by one that
records where the plan writes and stops."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli


class _Planned(Exception):
    pass


@pytest.fixture
def planned(monkeypatch, tmp_path):
    """Run `dpaudit demo ARGS` in an empty folder up to its stages: (state folder, stage outputs, report)."""
    import dpaudit.demo.stages as stages

    monkeypatch.chdir(tmp_path)
    seen = {}

    def record(plan_stages, *, state, run, echo, **_options):
        seen.update(
            state=state,
            outputs=[s.output for s in plan_stages if s.schema_prefix is not None],
            report=next(s.output for s in plan_stages if s.name == "report"),
        )
        raise _Planned

    monkeypatch.setattr(stages, "run_stages", record)

    def plan(*args: str) -> dict:
        seen.clear()
        result = CliRunner().invoke(cli, ["demo", *args])
        assert isinstance(result.exception, _Planned), result.output
        return dict(seen)

    return plan


def test_quick_and_full_demo_have_their_own_default_folders(planned, tmp_path):
    full = planned()
    quick = planned("--quick")
    assert full["state"].parent == Path("runs/demo") and quick["state"].parent == Path("runs/demo-quick")
    assert all(p.is_relative_to("runs/demo") and not p.is_relative_to("runs/demo-quick") for p in full["outputs"])
    assert all(p.is_relative_to("runs/demo-quick") for p in quick["outputs"])
    assert full["report"] == Path("reports/demo/index.html")
    assert quick["report"] == Path("reports/demo-quick/index.html")
    assert list(tmp_path.iterdir()) == []  # nothing written before the stages


def test_a_demo_of_the_other_size_never_replaces_a_finished_one(planned, tmp_path):
    """A full demo's folder is refused to --quick (and a quick one's to the full demo) before any stage, in one line:
    every stage's command differs, so the demo would have replaced them all."""
    import json

    full = tmp_path / "runs" / "demo"
    (full / ".demo").mkdir(parents=True)
    (full / "stage-times.json").write_text(json.dumps({"quick": False, "stages": []}))
    before = tree(tmp_path)
    one_line_error(["demo", "--quick", "--out", str(full)], "holds a full demo", "runs/demo-quick")
    assert tree(tmp_path) == before
    planned("--out", str(full))  # the full demo itself resumes there
    quick = tmp_path / "q"
    (quick / ".demo").mkdir(parents=True)
    (quick / ".demo" / "size.json").write_text(json.dumps({"quick": True}))
    one_line_error(["demo", "--out", str(quick)], "holds a quick demo")
    planned("--quick", "--out", str(quick))


def test_given_folders_are_kept(planned):
    given = planned("--quick", "--out", "mine", "--report", "page.html")
    assert given["state"].parent == Path("mine") and given["report"] == Path("page.html")


# ------------------------------------------------------------------------------------------------
# --report under a file and a read-only --out: one line before any stage (hardening, round two; moved from
# tests/test_bad_inputs_round2.py).


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


def test_demo_report_under_a_file_is_refused_before_any_stage(tmp_path, monkeypatch):
    pytest.importorskip("jax")
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    one_line_error(
        ["demo", "--quick", "--out", "runs", "--report", "notes.txt/index.html"],
        "--report notes.txt/index.html",
        "is a file, not a folder",
    )
    assert tree(tmp_path) == ["notes.txt"]


def test_demo_into_a_read_only_folder_is_one_line(tmp_path, monkeypatch):
    """As root a chmod 0555 folder stops nothing: the demo's first write (its .demo state folder) is made to
    fail as it would for a user: EACCES."""
    pytest.importorskip("jax")
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path / "ro")):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    one_line_error(
        ["demo", "--quick", "--out", str(tmp_path / "ro" / "demo")],
        "dpaudit demo: cannot access",
        str(tmp_path / "ro"),
        "Permission denied",
    )
    assert tree(tmp_path) == []
