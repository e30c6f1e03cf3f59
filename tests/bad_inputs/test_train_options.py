"""``dpaudit train``'s options and ``--config`` file (hardening; moved from tests/test_bad_inputs.py and
tests/test_bad_inputs_round2.py): each bad value runs the real command and is refused with exit code 2, a
one-line message naming the culprit (file and key, or option), and nothing written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

#: A tiny jax-bert run (preset tiny is the default; no --preset or --steps here, since the command line
#: would override the file's bad value). Every case below fails before any training.
TRAIN = ["--batch-size", "16", "--max-length", "16", "--vocab-size", "128", "--physical-batch", "8"]

# (case id, TOML text or bytes for --config (None: no file), extra options, substrings, substrings that must not appear)
TRAIN_CASES = [
    # The reported repro (trained with shuffled batches under a Poisson label, exit 0).
    (
        "sampling-bogus",
        'sampling = "bogus"\nnoise_multiplier = 1.0\n',
        [],
        ["--config", "b.toml", "key 'sampling'", "must be one of poisson, shuffle, got 'bogus'."],
        [],
    ),
    # A TOML string is not a boolean: "false" is truthy and trained without privacy.
    (
        "non-private-string",
        'non_private = "false"\n',
        [],
        ["b.toml", "key 'non_private'", "true or false", "got 'false'"],
        [],
    ),
    (
        "preset-huge",
        'preset = "huge"\nnoise_multiplier = 1.0\n',
        [],
        ["b.toml", "key 'preset'", "one of tiny, mini, small, base, large", "'huge'"],
        [],
    ),
    (
        "batch-schedule-int",
        "batch_schedule = 5\nnoise_multiplier = 1.0\n",
        [],
        ["b.toml", "key 'batch_schedule'", "must be a string", "5 (int)"],
        [],
    ),
    (
        "learning-rate-string",
        'learning_rate = "fast"\nnoise_multiplier = 1.0\n',
        [],
        ["b.toml", "key 'learning_rate'", "must be a number", "'fast'"],
        [],
    ),
    (
        "steps-float",
        "steps = 2.5\nnoise_multiplier = 1.0\n",
        [],
        ["b.toml", "key 'steps'", "must be an integer", "2.5 (float)"],
        [],
    ),
    (
        "sigma-bool",
        "noise_multiplier = true\n",
        [],
        ["b.toml", "key 'noise_multiplier'", "must be a number", "True (bool)"],
        [],
    ),
    # Range checks of values from the file name the key as the user wrote it (dashes kept).
    (
        "clip-norm-range",
        "clip-norm = -1\nnoise_multiplier = 1.0\n",
        [],
        ["b.toml", "key 'clip-norm'", "--clip-norm must be a finite number > 0, got -1.0."],
        [],
    ),
    (
        "target-epsilon-inf-toml",
        "target_epsilon = inf\n",
        [],
        ["b.toml", "key 'target_epsilon'", "--target-epsilon must be > 0, got inf."],
        [],
    ),
    # The command line overrides the file: the error is then about the option, not the file.
    (
        "command-line-wins",
        "clip_norm = -1\nnoise_multiplier = 1.0\n",
        ["--clip-norm", "-2"],
        ["--clip-norm must be a finite number > 0, got -2.0."],
        ["b.toml"],
    ),
    (
        "config-not-utf8",
        b'sampling = "caf\xe9"\nnoise_multiplier = 1.0\n',
        [],
        ["--config", "b.toml", "not UTF-8", "0xe9"],
        [],
    ),
    # Item 2 (train side of the calibration).
    (
        "target-epsilon-inf",
        None,
        ["--steps", "3", "--target-epsilon", "inf"],
        ["--target-epsilon must be > 0, got inf."],
        [],
    ),
    (
        "target-epsilon-nan",
        None,
        ["--steps", "3", "--target-epsilon", "nan"],
        ["--target-epsilon must be > 0, got nan."],
        [],
    ),
    (
        "target-epsilon-huge",
        None,
        ["--steps", "3", "--target-epsilon", "1000"],
        ["target epsilon 1000", "noise multipliers below", "lower the target"],
        [],
    ),
    # Item 5 (train side): PLD refuses a delta where its round-off exceeds delta, instead of "inf".
    (
        "delta-1e-17",
        None,
        ["--steps", "3", "--noise-multiplier", "1", "--delta", "1e-17"],
        ["delta 1e-17 is below 1e-10"],
        [],
    ),
]


@pytest.mark.parametrize(
    ("config", "args", "expected", "absent"), [case[1:] for case in TRAIN_CASES], ids=[case[0] for case in TRAIN_CASES]
)
def test_train_bad_input_is_one_line_exit_2_and_writes_nothing(data_dir, tmp_path, config, args, expected, absent):
    options = []
    if config is not None:
        path = tmp_path / "b.toml"
        path.write_bytes(config if isinstance(config, bytes) else config.encode())
        options = ["--config", str(path)]
    out = tmp_path / "model"
    result = CliRunner().invoke(
        cli, ["train", "--trainer", "jax-bert", "--data", str(data_dir), "--out", str(out), *TRAIN, *options, *args]
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for text in expected:
        assert text in result.output, (text, result.output)
    for text in absent:
        assert text not in result.output, (text, result.output)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == (["b.toml"] if config else [])


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


def test_jax_bert_max_length_above_the_position_table_is_refused(data_dir, tmp_path):
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
            "1",
            "--max-length",
            "100000",
        ],
        "--max-length must be <= 512",
        "position table",
        "got 100000",
    )
    assert tree(tmp_path) == []
