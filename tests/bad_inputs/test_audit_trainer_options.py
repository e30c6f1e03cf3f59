"""``dpaudit audit-trainer`` names the option the user gave when the trainer's config refuses a value
(hardening): it used to prefix every refusal with ``--set:``, also for its own ``--target-epsilon``,
``--sampling-rate`` and ``--steps``."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.cli.audit_trainer import audit_config
from dpaudit.common.errors import UserInputError


@pytest.mark.parametrize(
    ("args", "expected", "absent"),
    [
        (["--target-epsilon", "inf"], "Error: --target-epsilon must be > 0, got inf.", "--set"),
        (
            ["--set", "clip_norm=-1"],
            "Error: --set clip_norm=-1: --clip-norm must be a finite number > 0, got -1.0.",
            None,
        ),
        (["--set", "non_private=true"], "Error: --set non_private=true with --target-epsilon 4: ", None),
        (
            ["--set", "batch_size=abc"],
            "Error: --set 'batch_size=abc': batch_size must be an integer, got 'abc'.",
            "--set:",
        ),
    ],
    ids=["own-option", "set-item", "set-with-own-option", "set-not-a-number"],
)
def test_audit_trainer_names_the_option_given(tmp_path, args, expected, absent):
    out = tmp_path / "audit"
    result = CliRunner().invoke(
        cli, ["audit-trainer", "--trainer", "edp-sgd", "--out", str(out), "--canaries", "2", *args]
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert result.output.startswith(expected), result.output
    assert absent is None or absent not in result.output
    assert list(tmp_path.iterdir()) == []


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Config:
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    noise_seed: int | None = None
    batch_size: int = 8
    epochs: int = 1
    clip_norm: float = 1.0

    def __post_init__(self):
        if self.batch_size > 64:
            raise ValueError(f"--batch-size must be at most 64, got {self.batch_size}.")
        if self.epochs > 3:
            raise ValueError(f"--epochs must be at most 3, got {self.epochs}.")


class _Trainer:
    """Just what audit_config reads: the Config and tiny_config (limits that the plan's values can cross)."""

    Config = _Config

    @staticmethod
    def tiny_config(**kw):
        return _Config(**kw)


def test_planned_values_name_the_audit_option_they_come_from():
    with pytest.raises(
        UserInputError,
        match=r"^--sampling-rate 0\.5 \(the audit's batch size 100 of 200 rows\): "
        r"--batch-size must be at most 64, got 100\.$",
    ):
        audit_config(_Trainer, target_epsilon=4.0, rows=200, noise_seed=None, settings=())
    with pytest.raises(UserInputError, match=r"^--steps 40 \(20 epochs of 2 steps\): --epochs must be at most 3"):
        audit_config(_Trainer, target_epsilon=4.0, rows=100, noise_seed=None, settings=(), steps=40)
    # A --set value wins over the plan, and is then what the message names.
    with pytest.raises(UserInputError, match=r"^--set epochs=9: --epochs must be at most 3, got 9\.$"):
        audit_config(_Trainer, target_epsilon=4.0, rows=100, noise_seed=None, settings=("epochs=9",))
    assert (
        audit_config(_Trainer, target_epsilon=4.0, rows=100, noise_seed=None, settings=("clip_norm=2",)).clip_norm == 2
    )
