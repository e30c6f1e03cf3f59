"""Seeds (hardening, round two; moved from tests/test_bad_inputs_runs.py): one range, 0 <= seed <= 2^63 - 1, for
every command's ``--seed``, refused in one line, exit code 2, nothing written; the range is what every framework
takes.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.training.config_types import SEED_MAX, check_seed


def invoke(args: list[str]):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0], result.output[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


SEED_CASES = {
    "inject": lambda d, o: ["inject", "--corpus", "builtin:assistant", "--corpus-size", "150", "--out", o],
    "train edp-sgd": lambda d, o: ["train", "--trainer", "edp-sgd", "--data", d, "--out", o],
    "train rgp": lambda d, o: ["train", "--trainer", "rgp", "--data", d, "--out", o],
    "train jax-bert": lambda d, o: ["train", "--trainer", "jax-bert", "--data", d, "--out", o],
    "attack": lambda d, o: ["attack", "--model", d, "--data", d, "--out", o],
    "demo": lambda d, o: ["demo", "--quick", "--out", o],
}


@pytest.mark.parametrize("seed", ["-1", str(2**70), str(SEED_MAX + 1)])
@pytest.mark.parametrize("command", list(SEED_CASES))
def test_a_seed_out_of_range_is_one_line_for_every_command(command, seed, data_dir, tmp_path):
    result = invoke([*SEED_CASES[command](data_dir, tmp_path / "out"), "--seed", seed])
    assert_one_line_error(result, f"--seed must be an integer from 0 to 2^63 - 1 (9223372036854775807), got {seed}.")
    assert not (tmp_path / "out").exists()


def test_the_seed_range_is_what_every_framework_takes():
    import jax
    import numpy as np
    import torch

    assert check_seed(SEED_MAX) == SEED_MAX and check_seed(0) == 0
    jax.random.PRNGKey(SEED_MAX)
    torch.Generator().manual_seed(SEED_MAX)
    np.random.default_rng(SEED_MAX)
    with pytest.raises(OverflowError):  # one past the range: jax refuses it, so every command does
        jax.random.PRNGKey(SEED_MAX + 1)
    for bad in (-1, SEED_MAX + 1, True, 1.0, "3"):
        with pytest.raises(ValueError, match="--seed must be an integer from 0 to 2"):
            check_seed(bad)
