"""The demo's stage runner: a complete stage is skipped on rerun, an interrupted or changed one is redone.

Uses a real `dpaudit inject` stage on a tiny corpus (a second), never a training.
"""

from __future__ import annotations

import json

import pytest

from dpaudit.cli import cli
from dpaudit.demo.plan import Stage
from dpaudit.demo.stages import is_complete, run_stages


def _inject(out, size=150):
    return Stage(
        name="inject",
        title="inject",
        output=out,
        schema_prefix="dpaudit.inject/",
        args=(
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            str(size),
            "--out",
            str(out),
            "--frequencies",
            "1",
            "--per-frequency",
            "2",
            "--overwrite",
        ),
    )


class Runner:
    """Runs a stage's command in-process and counts the runs; ``interrupt`` simulates Ctrl-C mid-stage."""

    def __init__(self):
        self.ran, self.interrupt = [], False

    def __call__(self, stage):
        self.ran.append(stage.name)
        if self.interrupt:
            staging = stage.output.parent / f".{stage.output.name}.staging-killed"  # what a kill leaves behind
            staging.mkdir(parents=True, exist_ok=True)
            (staging / "train.jsonl").write_text("half\n")
            raise KeyboardInterrupt
        cli.main(args=list(stage.args), prog_name="dpaudit", standalone_mode=False)


def test_complete_stage_is_skipped_changed_or_tampered_is_redone(tmp_path):
    state, data = tmp_path / ".demo", tmp_path / "data"
    runner, lines = Runner(), []
    times = run_stages([_inject(data)], state=state, run=runner, echo=lines.append)
    assert runner.ran == ["inject"] and not times[0].skipped and times[0].wall_s > 0
    assert lines[0] == "[1/1] inject" and is_complete(_inject(data), state)

    times = run_stages([_inject(data)], state=state, run=runner, echo=lines.append)  # rerun: nothing to do
    assert runner.ran == ["inject"] and times[0].skipped and "skipped" in lines[-1]

    (data / "train.jsonl").write_text("tampered\n")  # no longer matches its manifest: redone
    run_stages([_inject(data)], state=state, run=runner, echo=lines.append)
    assert runner.ran == ["inject", "inject"] and is_complete(_inject(data), state)

    bigger = _inject(data, size=160)  # another command (e.g. --quick switched): the old output is not reused
    assert not is_complete(bigger, state)
    run_stages([bigger], state=state, run=runner, echo=lines.append)
    assert runner.ran[-1] == "inject" and len(runner.ran) == 3
    assert json.loads((data / "manifest.json").read_text())["config"]["corpus_size"] == 160


def test_interrupted_stage_leaves_nothing_complete_and_a_rerun_finishes_it(tmp_path):
    state, data = tmp_path / ".demo", tmp_path / "data"
    runner = Runner()
    runner.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        run_stages([_inject(data)], state=state, run=runner, echo=lambda _: None)
    assert not is_complete(_inject(data), state)  # half-written output is never taken for a finished one
    runner.interrupt = False
    run_stages([_inject(data)], state=state, run=runner, echo=lambda _: None)
    assert runner.ran == ["inject", "inject"] and is_complete(_inject(data), state)


def test_stage_is_stale_when_its_input_changes(tmp_path):
    state, data = tmp_path / ".demo", tmp_path / "data"
    runner = Runner()
    run_stages([_inject(data)], state=state, run=runner, echo=lambda _: None)
    downstream = Stage(
        name="copy",
        title="copy",
        output=tmp_path / "copy",
        schema_prefix="dpaudit.inject/",
        args=(
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "150",
            "--out",
            str(tmp_path / "copy"),
            "--frequencies",
            "1",
            "--per-frequency",
            "2",
            "--overwrite",
        ),
        inputs=(data,),
    )
    run_stages([downstream], state=state, run=runner, echo=lambda _: None)
    assert is_complete(downstream, state)
    run_stages([_inject(data, size=170)], state=state, run=runner, echo=lambda _: None)  # upstream redone
    assert not is_complete(downstream, state)


def test_a_stage_that_wrote_its_output_and_then_failed_is_redone(tmp_path):
    """``dpaudit attack`` writes its directory even when one of its attacks failed, then exits with the error: the
    rerun must redo that stage, not skip it as complete."""
    state, data = tmp_path / ".demo", tmp_path / "data"

    def written_then_failed(stage):
        cli.main(args=list(stage.args), prog_name="dpaudit", standalone_mode=False)
        raise RuntimeError("one of its attacks failed")

    with pytest.raises(RuntimeError):
        run_stages([_inject(data)], state=state, run=written_then_failed, echo=lambda line: None)
    assert not is_complete(_inject(data), state)
    runner = Runner()
    times = run_stages([_inject(data)], state=state, run=runner, echo=lambda line: None)
    assert runner.ran == ["inject"] and not times[0].skipped and is_complete(_inject(data), state)
