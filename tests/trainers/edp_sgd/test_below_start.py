"""`dpaudit train` warns when a private run ends below its public start: the --init-from model is evaluated on the
same held-out rows before the first private step (summary ``start_eval``), and a final figure under it is a
warning line beside the utility figures."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.cli.train import utility_lines
from dpaudit.training.baselines import CLASSIFY_BASELINE_KEY, CLM_BASELINE_KEY


def test_a_final_figure_below_the_start_s_is_a_warning_and_one_at_or_above_it_is_not():
    summary = {"eval_accuracy": 0.61, CLASSIFY_BASELINE_KEY: 0.2, "start_eval": {"eval_accuracy": 0.70}}
    lines = utility_lines(summary)
    assert lines[0].startswith("held-out accuracy 0.6100")
    assert lines[1].startswith("warning: this private run ends below its public start: held-out accuracy 0.6100 < ")
    assert "the start's 0.7000" in lines[1] and "--data-split public" in lines[1]
    for start in ({"eval_accuracy": 0.61}, {"eval_accuracy": 0.61004}, {"eval_accuracy": 0.5}, {}, None):
        assert len(utility_lines({**summary, "start_eval": start})) == 1
    assert len(utility_lines({k: v for k, v in summary.items() if k != "start_eval"})) == 1
    # Each figure against its own kind: a causal LM's next-token accuracy.
    clm = {"next_token_accuracy": 0.1, CLM_BASELINE_KEY: 0.05, "start_eval": {"next_token_accuracy": 0.2}}
    assert "next-token accuracy 0.1000 < the start's 0.2000" in utility_lines(clm)[1]


def test_a_private_run_from_a_start_records_the_start_s_figure_and_warns_exactly_when_below(
    data_dir, tiny_causal_dir, tmp_path
):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "edp-sgd",
            "--task",
            "clm",
            "--mode",
            "dp-sgd",
            "--noise-multiplier",
            "1",
            "--init-from",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--epochs",
            "1",
            "--batch-size",
            "32",
            "--max-length",
            "16",
            "--eval-examples",
            "8",
            "--learning-rate",
            "0.05",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output[-2000:]
    summary = json.loads((out / "manifest.json").read_text())["summary"]
    start, end = summary["start_eval"]["next_token_accuracy"], summary["next_token_accuracy"]
    assert 0.0 <= start <= 1.0 and summary["start_eval"]["heldout_rows_evaluated"] == 8
    assert ("ends below its public start" in result.output) == (end < start)


def test_a_run_resumed_from_a_checkpoint_keeps_its_start_s_figure(
    data_dir, tiny_causal_dir, tmp_path, edp_config, killed_after_checkpoint
):
    """The start is evaluated before step 0 only: the checkpoint carries the figure to the resumed run's summary."""
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    config = edp_config(
        task="clm", mode="dp-sgd", init_from=str(tiny_causal_dir), vocab_size=None, epochs=1, checkpoint_every=2
    )
    straight = EdpSgdTrainer().train(data_dir, tmp_path / "straight", config, seed=5)
    killed_after_checkpoint(lambda: EdpSgdTrainer().train(data_dir, tmp_path / "resumed", config, seed=5), step=2)
    resumed = EdpSgdTrainer().train(data_dir, tmp_path / "resumed", config, seed=5)
    assert resumed.summary["resumed_from_step"] == 2
    assert resumed.summary["start_eval"] == straight.summary["start_eval"]
    assert straight.summary["start_eval"]["heldout_rows_evaluated"] == config.eval_examples
