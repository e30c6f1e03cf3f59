"""Held-out figures say on how many held-out rows they stand (hardening): the trainers evaluate the first
``--eval-examples`` rows of heldout.jsonl (512 by default) and the figure was printed as if it covered all of
them. Train's output, its metrics rows and summary, the report's utility section and the demo's verdict lines
now read "on 8 of 24 held-out rows"."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

ROWS = "on 8 of 24 held-out rows"  # data_dir's heldout.jsonl has 24 rows; --eval-examples 8


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    """A tiny edp-sgd intent classifier evaluated on 8 held-out rows, and a loss attack on it (its report)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model on a shared 2-core machine: one thread is fastest
    try:
        root = tmp_path_factory.mktemp("heldout")
        model, attack = root / "model", root / "attack"
        train = CliRunner().invoke(
            cli,
            [
                "train",
                "--trainer",
                "edp-sgd",
                "--mode",
                "sgd",
                "--epochs",
                "1",
                "--batch-size",
                "32",
                "--max-length",
                "16",
                "--preset",
                "tiny",
                "--eval-examples",
                "8",
                "--data",
                str(data_dir),
                "--out",
                str(model),
                "--seed",
                "0",
            ],
        )
        assert train.exit_code == 0, train.output
        result = CliRunner().invoke(
            cli, ["attack", "--model", str(model), "--data", str(data_dir), "--out", str(attack), "--attacks", "loss"]
        )
        assert result.exit_code == 0, result.output
    finally:
        torch.set_num_threads(threads)
    return train.output, model, attack


def test_train_output_metrics_and_summary_say_how_many_rows(trained):
    output, model, _ = trained
    (line,) = [ln for ln in output.splitlines() if "held-out accuracy" in ln]
    assert ROWS in line and "trivial baseline" in line
    rows = [json.loads(ln) for ln in (model / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    evaluations = [r for r in rows if "eval_accuracy" in r]
    assert evaluations and all(r["heldout_rows_evaluated"] == 8 and r["heldout_rows"] == 24 for r in evaluations)
    summary = json.loads((model / "manifest.json").read_text(encoding="utf-8"))["summary"]
    assert summary["heldout_rows_evaluated"] == 8 and summary["heldout_rows"] == 24


def test_report_and_demo_verdict_say_how_many_rows(trained):
    from dpaudit.cli.demo import _model_summary
    from dpaudit.demo.verdict import read_utility

    _, model, attack = trained
    page = (attack / "index.html").read_text(encoding="utf-8")
    assert page.count(ROWS) >= 2  # the verdict's held-out utility and the utility section's table
    assert ROWS in read_utility(attack)
    assert re.search(r"held-out accuracy \d+\.\d% " + ROWS + r" \(always the majority class", _model_summary(model))


def test_a_run_that_did_not_record_its_rows_prints_the_figure_as_before():
    from dpaudit.demo.verdict import utility_text
    from dpaudit.training.baselines import eval_rows_text

    assert eval_rows_text({"eval_accuracy": 0.5}) is None
    assert utility_text({"eval_accuracy": 0.5, "heldout_accuracy_baseline": 0.25}) == (
        "held-out accuracy 50.0% (trivial baseline 25.0%: always the majority class)"
    )
    assert utility_text(
        {"eval_accuracy": 0.5, "heldout_accuracy_baseline": 0.25, "heldout_rows_evaluated": 512, "heldout_rows": 880}
    ) == ("held-out accuracy 50.0% on 512 of 880 held-out rows (trivial baseline 25.0%: always the majority class)")
