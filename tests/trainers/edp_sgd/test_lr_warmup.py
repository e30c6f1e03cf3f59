"""``--lr-warmup-steps`` (the torch trainers' linear learning-rate warm-up): the rate each step takes, that it
reaches the optimizer, that a resumed run takes the straight run's rates, and the refusal of a warm-up as long as
the run."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer
from dpaudit.trainers.torch_common.loop import warmup_learning_rate


def test_the_rate_climbs_linearly_to_its_peak_then_holds():
    assert [warmup_learning_rate(t, 1e-3, 4) for t in range(6)] == pytest.approx(
        [2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3]
    )
    assert [warmup_learning_rate(t, 1e-3, 0) for t in range(3)] == [1e-3] * 3


def _rates(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["learning_rate"] for r in rows if "learning_rate" in r]


def test_each_step_takes_its_warmup_rate_and_a_resumed_run_the_same(
    data_dir, tmp_path, edp_config, killed_after_checkpoint, assert_same_model
):
    # 96 rows of 16: 6 steps an epoch, 12 in all; a warm-up of 5 steps, killed inside it at step 4.
    config = edp_config(mode="dp-sgd", epochs=2, lr_warmup_steps=5, checkpoint_every=2, log_every=1)
    straight = EdpSgdTrainer().train(data_dir, tmp_path / "straight", config, seed=5)
    assert straight.steps == 12
    assert _rates(tmp_path / "straight") == pytest.approx([1e-3 * (t + 1) / 5 for t in range(5)] + [1e-3] * 7)
    # The rate reaches the optimizer: the same run at the full rate from its first step ends elsewhere.
    EdpSgdTrainer().train(data_dir, tmp_path / "flat", edp_config(mode="dp-sgd", epochs=2, log_every=1), seed=5)
    assert _rates(tmp_path / "flat") == pytest.approx([1e-3] * 12)
    with pytest.raises(AssertionError):
        assert_same_model(tmp_path / "straight", tmp_path / "flat", atol=1e-6, rtol=0)
    killed_after_checkpoint(lambda: EdpSgdTrainer().train(data_dir, tmp_path / "resumed", config, seed=5), step=4)
    EdpSgdTrainer().train(data_dir, tmp_path / "resumed", config, seed=5)
    assert_same_model(tmp_path / "straight", tmp_path / "resumed", atol=0, rtol=0)  # bit for bit
    assert _rates(tmp_path / "resumed") == _rates(tmp_path / "straight")


@pytest.mark.parametrize(("trainer", "mode"), [("edp-sgd", ["--mode", "sgd"]), ("rgp", ["--noise-multiplier", "1"])])
def test_a_warmup_as_long_as_the_run_is_refused_in_one_line(data_dir, tmp_path, trainer, mode):
    out = tmp_path / "x"
    args = ["train", "--trainer", trainer, "--data", str(data_dir), "--out", str(out), *mode]
    args += ["--epochs", "2", "--batch-size", "16", "--lr-warmup-steps", "12", "--preset", "tiny"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert "--lr-warmup-steps 12 is not shorter than the run's 12 steps (2 epochs of 6)" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not out.exists()
