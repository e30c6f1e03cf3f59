"""``dpaudit demo --quick`` and ``dpaudit demo`` write to different folders by default (hardening): both used
``runs/demo`` (and ``reports/demo/index.html``), so a quick demo after the full one silently replaced the full
demo's stages, whose commands differ. The stages are not run here: the stage runner is replaced by one that
records where the plan writes and stops."""

from __future__ import annotations

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

    def record(plan_stages, *, state, run, echo):
        seen.update(state=state, outputs=[s.output for s in plan_stages if s.schema_prefix is not None],
                    report=next(s.output for s in plan_stages if s.name == "report"))
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


def test_given_folders_are_kept(planned):
    given = planned("--quick", "--out", "mine", "--report", "page.html")
    assert given["state"].parent == Path("mine") and given["report"] == Path("page.html")
