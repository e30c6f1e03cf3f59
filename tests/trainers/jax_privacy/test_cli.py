"""``dpaudit audit-trainer --trainer jax-privacy --setup FILE.py:build``: the one-line refusals of a setup file that
cannot be trained (exit 2, no audit directory left). The audit of a user's own setup through this command is in
test_gradient_path.py, beside the audits whose claim (and its seconds of accounting) it shares."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

SETUP = Path(__file__).with_name("tiny_setup.py")


def _audit(out: Path, setup: str, *extra: str):
    return CliRunner().invoke(
        cli,
        ["audit-trainer", "--trainer", "jax-privacy", "--setup", setup, "--out", str(out), "--canaries", "500", *extra],
    )


BAD_SETUPS = {
    "import": ("import not_a_module_anywhere\n", "fails to import (ModuleNotFoundError"),
    "types": ("def build():\n    return 1, 2, 3\n", "got tuple; build() must return a dict with loss, params"),
    "loss": (
        "import numpy as np\n"
        "def build():\n"
        "    data = {'x': np.zeros((16, 4), np.float32)}\n"
        "    return {'loss': lambda p, b: b['x'] @ p, 'params': np.zeros(3, np.float32), 'data': data, 'batch_size': 8}\n",
        "JAX cannot differentiate loss(params, one row)",
    ),
    "dtype": (
        "import jax.numpy as jnp\n"
        "import numpy as np\n"
        "def build():\n"
        "    data = {'x': np.zeros((16, 4), np.float32)}\n"
        "    params = jnp.zeros(4, jnp.bfloat16)\n"
        "    return {'loss': lambda p, b: jnp.sum(b['x'] @ p), 'params': params, 'data': data, 'batch_size': 8}\n",
        "the gradient of params has dtype bfloat16",
    ),
}


@pytest.mark.parametrize("kind", sorted(BAD_SETUPS))
def test_a_setup_file_that_cannot_train_is_one_line_exit_2_and_leaves_nothing(kind, tmp_path):
    source, words = BAD_SETUPS[kind]
    (tmp_path / "my_setup.py").write_text(source)
    out = tmp_path / "audit"
    result = _audit(out, f"{tmp_path / 'my_setup.py'}:build")
    assert result.exit_code == 2, result.output
    line = result.output.strip().splitlines()[-1]
    assert line.startswith(f"Error: --setup {tmp_path / 'my_setup.py'}:build: ") and words in line, line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["my_setup.py"]


@pytest.mark.parametrize(
    ("settings", "fix"),
    [
        (("dataset_size=1000", "noise_multiplier=1.43", "target_epsilon=none"), "drop --dataset-size"),
        (("noise_multiplier=1.43",), "give one of them"),  # beside the audit's --target-epsilon
    ],
    ids=["dataset-size", "sigma-and-target"],
)
def test_an_option_the_library_cannot_honour_is_one_line_exit_2(settings, fix, tmp_path):
    out = tmp_path / "audit"
    result = _audit(out, f"{SETUP}:build", *(arg for s in settings for arg in ("--set", s)))
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and fix in errors[0], result.output
    assert not out.exists()
