"""Numbers the accountants and trainers cannot take are refused where the option is parsed, with the accepted range.

A noise multiplier has one range everywhere (``dpaudit.training.config_types.check_noise_multiplier``: 0 or
1e-10..1e10 for ``account``, 1e-10..1e10 for every trainer's Config): ``1e-300`` ended in ``ValueError: cannot
convert float NaN to integer``, ``1e200`` in ``OverflowError``, and ``account`` called a sigma above ~1e155 "too small
... add noise" although its epsilon is about 0. ``audit-trainer --target-epsilon 1e-6`` ended in ``ZeroDivisionError``
(a claim rounded to 0) and ``--set sampling=shuffle`` (no proven epsilon) in ``ValueError: the run is not private``,
after training.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

ACCOUNT = ["account", "-N", "1000", "-B", "10", "-S", "100"]


def _one_line(args: list[str], *needles: str, absent: tuple[str, ...] = ()) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    for needle in absent:
        assert needle not in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--noise-multiplier", "1e-300", "no privacy"),
        ("--noise-multiplier", "1e200", "epsilon is ~0"),
        ("--noise-multiplier", "1e155", "epsilon is ~0"),
        ("--noise-std-over-clip", "1e-300", "no privacy"),
        ("--noise-std-over-clip", "1e200", "epsilon is ~0"),
    ],
)
def test_account_noise_out_of_range_names_the_range(option, value, why):
    _one_line(
        [*ACCOUNT, option, value],
        f"{option} must be 0 (no noise) or between 1e-10 and 1e10",
        f"got {float(value)!r}",
        why,
        absent=("add noise",) if float(value) > 1 else (),
    )


def test_account_schedule_and_decay_floor_take_the_same_range(tmp_path):
    schedule = tmp_path / "schedule.json"
    schedule.write_text(json.dumps([{"steps": 10, "batch_size": 10, "noise_multiplier": 1e200}]), encoding="utf-8")
    _one_line(
        ["account", "-N", "1000", "--schedule", str(schedule)],
        f"--schedule {schedule}: segment 1:",
        "noise_multiplier must be 0 (no noise) or between 1e-10 and 1e10",
    )
    _one_line(
        [
            "account",
            "-N",
            "1000",
            "-B",
            "10",
            "--epochs",
            "3",
            "--noise-multiplier",
            "1",
            "--noise-decay",
            "linear:0.1:1e-300",
        ],
        "--noise-decay linear:0.1:1e-300: SIGMA_MIN must be between 1e-10 and 1e10",
    )


def test_account_huge_noise_in_range_is_epsilon_zero():
    """The largest accepted sigma is accounted, not refused: epsilon ~0 (never "add noise")."""
    result = CliRunner().invoke(cli, [*ACCOUNT, "--noise-multiplier", "1e10", "--accountant", "both", "--json"])
    assert result.exit_code == 0, result.output
    assert all(value < 1e-6 for value in json.loads(result.stdout)["epsilon"].values())


def test_account_overflow_of_huge_noise_never_says_add_noise(monkeypatch):
    """Should dp_accounting overflow for a large sigma (its sigma^2), the line says epsilon is ~0, not "add noise"."""
    import dpaudit.cli.account as account

    def overflow(options):
        raise OverflowError(34, "Numerical result out of range")

    monkeypatch.setattr(account, "_run", overflow)
    _one_line(
        [*ACCOUNT, "--noise-multiplier", "1e9"],
        "--noise-multiplier 1e+09 is too large",
        "epsilon is effectively 0",
        absent=("add noise", "too small"),
    )
    _one_line([*ACCOUNT, "--noise-multiplier", "1e-9"], "too small", "add noise")


TRAINERS = ["edp-sgd", "rgp", "jax-bert"]


@pytest.mark.parametrize("trainer", TRAINERS)
@pytest.mark.parametrize("value", ["1e-300", "1e200"])
def test_train_noise_out_of_range_is_refused_before_anything(data_dir, tmp_path, trainer, value):
    out = tmp_path / "model"
    _one_line(
        ["train", "--trainer", trainer, "--data", str(data_dir), "--out", str(out), "--noise-multiplier", value],
        "--noise-multiplier must be between 1e-10 and 1e10",
        f"got {float(value)!r}",
        absent=("0 (no noise)",),
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_trainer_config_shares_the_range(trainer):
    """One validator: every registered trainer's Config refuses the same values with the same words."""
    from dpaudit.training.api import load_trainer

    loaded = load_trainer(trainer)
    for value in (1e-300, 1e200):
        with pytest.raises(ValueError, match=r"--noise-multiplier must be between 1e-10 and 1e10"):
            loaded.tiny_config(noise_multiplier=value, target_epsilon=None)
    assert loaded.tiny_config(noise_multiplier=1e10, target_epsilon=None).noise_multiplier == 1e10


def test_audit_trainer_tiny_target_epsilon_is_refused_before_anything(tmp_path):
    out = tmp_path / "audit"
    _one_line(
        ["audit-trainer", "--trainer", "edp-sgd", "--out", str(out), "--target-epsilon", "1e-6"],
        "--target-epsilon 1e-06 is below 0.001",
        "at least 0.001",
    )
    assert list(tmp_path.iterdir()) == []


def test_audit_trainer_shuffled_batches_are_refused_before_any_run(tmp_path):
    pytest.importorskip("jax")
    out = tmp_path / "audit"
    _one_line(
        ["audit-trainer", "--trainer", "jax-bert", "--out", str(out), "--canaries", "2", "--set", "sampling=shuffle"],
        "--set sampling=shuffle",
        "no proven epsilon",
        "--set sampling=poisson",
    )
    assert list(tmp_path.iterdir()) == []


def test_verdict_of_a_zero_claim_has_no_share(tmp_path):
    from dpaudit.cli.audit_trainer import _verdict_text

    body = {
        "claim": {"epsilon": 0.0, "delta": 1e-5, "steps": 4},
        "primary": {"kind": "one-run", "epsilon": 0.0},
        "confidence": 0.95,
        "refuted": False,
    }
    text = _verdict_text(body, "edp-sgd", tmp_path)
    assert "the claim is 0: no share" in text


# ------------------------------------------------------------------------------------------------
# Numbers of inject, attack and account, and --frequencies '' (hardening, round two; moved from
# tests/test_bad_inputs_round2.py).


SMALL = ["--corpus", "builtin:assistant", "--corpus-size", "60", "--frequencies", "1", "--per-frequency", "2"]


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


NUMBER_CASES = [
    (
        "unicode superscript",
        ["inject", *SMALL, "--frequencies", "\u00b2"],
        ["--frequencies '\u00b2'", "not a positive integer in the digits 0-9"],
    ),
    ("arabic-indic digit", ["inject", *SMALL, "--frequencies", "\u0661"], ["--frequencies", "digits 0-9"]),
    ("empty frequencies", ["inject", *SMALL, "--frequencies", ""], ["--frequencies is empty"]),
    ("empty item", ["inject", *SMALL, "--frequencies", "1,,2"], ["--frequencies '1,,2'", "an empty item"]),
    (
        "frequency 1e9",
        ["inject", *SMALL, "--frequencies", "1000000000", "--force"],
        ["--frequencies '1000000000'", "1,000,000,000 is above the limit of 1,000,000"],
    ),
    (
        "total insertions",
        ["inject", *SMALL, "--frequencies", "1000000", "--per-frequency", "101", "--force"],
        ["101,000,000 canary rows", "limit of 100,000,000"],
    ),
    (
        "format digits superscript",
        ["inject", *SMALL, "--format", "digits:\u00b2"],
        ["--format", "an integer from 1 to 64"],
    ),
    (
        "heldout nan",
        ["inject", *SMALL, "--heldout-fraction", "nan"],
        ["--heldout-fraction must be a finite number, got nan", "not a number", "[0, 1)"],
    ),
    ("public inf", ["inject", *SMALL, "--public-fraction", "inf"], ["--public-fraction", "got inf", "infinite"]),
    (
        "attack fpr nan",
        ["attack", "--model", "m", "--data", "d", "--out", "o", "--fpr", "nan"],
        ["--fpr must be a finite number, got nan", "not a number"],
    ),
    (
        "account N 1e30",
        ["account", "-N", "1" + "0" * 30, "-B", "10", "-S", "10", "--noise-multiplier", "1"],
        ["--dataset-size/-N", "above the limit of 1,000,000,000,000"],
    ),
    (
        "account microbatch > batch",
        ["account", "-N", "1000", "-B", "10", "-S", "10", "--noise-multiplier", "1", "--microbatch-size", "32"],
        ["--microbatch-size 32 is larger than the (expected) batch size 10"],
    ),
    (
        "account microbatch > q N",
        ["account", "-N", "1000", "-q", "0.01", "-S", "10", "--noise-multiplier", "1", "--microbatch-size", "32"],
        ["--microbatch-size 32"],
    ),
]


@pytest.mark.parametrize(("args", "needles"), [c[1:] for c in NUMBER_CASES], ids=[c[0] for c in NUMBER_CASES])
def test_bad_number_is_one_line_and_writes_nothing(tmp_path, monkeypatch, args, needles):
    monkeypatch.chdir(tmp_path)
    one_line_error([*args, "--out", "out"] if args[0] == "inject" else args, *needles)
    assert tree(tmp_path) == []


def test_account_tiny_sigma_is_an_answer_not_an_error():
    """sigma 1e-9: the sampler's tail (q per step) alone reaches delta, so no epsilon holds; both accountants say so
    (it used to overflow PLD, then to refuse on PLD's grid), never "add noise" as if the figure were wrong."""
    for accountant in ("rdp", "pld"):
        result = CliRunner().invoke(
            cli,
            [
                "account",
                "-N",
                "1000",
                "-B",
                "10",
                "-S",
                "10",
                "--noise-multiplier",
                "1e-9",
                "--accountant",
                accountant,
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        out = json.loads(result.stdout)
        assert out["epsilon"] == {accountant: None} and out["accountant_delta"] is None
        assert out["epsilon_infinite_because"] == "the noise sampler's tail alone reaches delta"
        assert out["noise_tail"]["figure"] == pytest.approx(0.1)


def test_train_with_a_noise_multiplier_too_small_to_account_is_one_line(data_dir, tmp_path):
    """dp_accounting's PLD overflowed (OverflowError) for sigma 1e-9 before the grid-size check could refuse it."""
    out = tmp_path / "model"
    one_line_error(
        [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--noise-multiplier",
            "1e-9",
            "--steps",
            "2",
            "--batch-size",
            "16",
            "--max-length",
            "16",
            "--vocab-size",
            "128",
            "--physical-batch",
            "8",
        ],
        "--noise-multiplier 1e-09: the noise sampler's tail figure",
        "alone reaches",
        "--accept-noise-tail",
    )
    assert tree(tmp_path) == []
