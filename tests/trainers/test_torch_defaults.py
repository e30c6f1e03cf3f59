"""Mode-dependent defaults of the torch trainers: private runs default to batch 512, 20 epochs and a
larger step (rgp: 5e-3, rank 16); sgd keeps 32 / 3 / 1e-3. The values are resolved once, on
construction, so the stored Config (manifest, resume check) holds what ran, --help says both, and a
default batch larger than the data is refused in one line."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
from dpaudit.trainers.rgp.config import RgpConfig


@pytest.mark.parametrize(
    ("mode", "expected"), [("sgd", (32, 3, 1e-3)), ("dp-sgd", (512, 20, 2e-3)), ("edp-sgd", (512, 20, 2e-3))]
)
def test_edp_sgd_defaults_follow_the_mode(mode, expected):
    config = EdpSgdConfig(mode=mode) if mode == "sgd" else EdpSgdConfig(mode=mode, target_epsilon=8.0)
    assert (config.batch_size, config.epochs, config.learning_rate) == expected
    stored = config.to_dict()
    assert (stored["batch_size"], stored["epochs"], stored["learning_rate"]) == expected
    # Spelling the defaults out is the same run (resume identity), and explicit values win.
    assert EdpSgdConfig(**{**stored, "noise_seed": None}).to_dict() == stored
    explicit = EdpSgdConfig(
        mode=mode, batch_size=64, epochs=2, learning_rate=5e-4, **({} if mode == "sgd" else {"target_epsilon": 8.0})
    )
    assert (explicit.batch_size, explicit.epochs, explicit.learning_rate) == (64, 2, 5e-4)


def test_rgp_defaults_are_the_private_ones_with_its_own_step_and_rank():
    config = RgpConfig(target_epsilon=8.0)
    assert (config.batch_size, config.epochs, config.learning_rate, config.rank) == (512, 20, 5e-3, 16)


def _help(trainer: str) -> str:
    result = CliRunner().invoke(cli, ["train", "--trainer", trainer, "--help"], terminal_width=400)
    assert result.exit_code == 0, result.output
    return re.sub(r"\s+", " ", result.output)


def test_help_states_the_mode_dependent_defaults():
    text = _help("edp-sgd")
    assert "Default 512 for private modes" in text and "32 for sgd" in text
    assert "Default 20 for private modes, 3 for sgd" in text and "Default 2e-3 for private modes, 1e-3 for sgd" in text
    rgp = _help("rgp")
    assert "sgd" not in rgp.split("--batch-size", 1)[1].split("--learning-rate", 1)[0]  # rgp has no sgd mode
    assert "[default: 512]" in rgp and "[default: 0.005]" in rgp and "[default: 16]" in rgp


def test_default_private_batch_larger_than_the_data_is_refused_in_one_line(data_dir, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "edp-sgd",
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "x"),
            "--mode",
            "dp-sgd",
            "--target-epsilon",
            "8",
            "--vocab-size",
            "300",
            "--max-length",
            "16",
        ],
    )
    assert result.exit_code == 2, result.output
    line = [ln for ln in result.output.splitlines() if "exceeds" in ln]
    assert len(line) == 1 and "--batch-size: expected batch 512 exceeds the" in line[0] and "use a batch <=" in line[0]
    assert not (tmp_path / "x").exists()
