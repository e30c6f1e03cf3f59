"""``dpaudit audit-trainer --trainer opacus --setup FILE.py:build``: the audit of a user's own Opacus training, and
the one-line refusals of a setup file that cannot be trained (exit 2, no audit directory left)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

SETUP = Path(__file__).with_name("tiny_setup.py")


def _audit(out: Path, setup: str, *extra: str):
    return CliRunner().invoke(
        cli,
        ["audit-trainer", "--trainer", "opacus", "--setup", setup, "--out", str(out), "--canaries", "500", *extra],
    )


def test_the_audit_of_a_users_setup_names_the_path_the_library_and_both_claims(tmp_path):
    out = tmp_path / "audit"
    # sigma 1.43 as in test_gradient_path.py: the same claim, so that its plan and curves are computed once per worker
    result = _audit(
        out, f"{SETUP}:build", "--seed", "1", "--set", "noise_multiplier=1.43", "--set", "target_epsilon=none"
    )
    assert result.exit_code == 0, result.output
    assert "opacus 1.6.0: its PRV accountant claims epsilon 4.0" in result.output
    assert "through the real gradient path" in result.output and "verdict: consistent" in result.output
    body = json.loads((out / "whitebox.json").read_text())
    settings = body["settings"]
    assert settings["canary_path"] == "gradient-path" and settings["canary_paths"] == {"gradient-path": 500}
    assert settings["library"] == "opacus" and settings["library_version"] == "1.6.0"
    assert settings["claims_agree"] and settings["library_claim"]["accountant"] == "prv"
    assert settings["dpaudit_claim"]["accountant"] == "pld" and settings["dpaudit_claim"]["steps"] == 4
    assert body["claim"]["epsilon"] == pytest.approx(settings["library_claim"]["epsilon"])  # the library's, tested
    assert (out / "index.html").is_file() and (out / "scores" / "whitebox.jsonl").is_file()


BAD_SETUPS = {
    "import": ("import not_a_module_anywhere\n", "fails to import (ModuleNotFoundError"),
    "types": ("def build():\n    return 1, 2, 3\n", "the model is a int; return the model: a torch.nn.Module"),
    "refused": (
        "import torch\n"
        "def build():\n"
        "    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 2))\n"
        "    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.zeros(16, dtype=torch.long))\n"
        "    return model, torch.optim.SGD(model.parameters(), lr=0.1), torch.utils.data.DataLoader(data, batch_size=8)\n",
        "Opacus refuses the model",
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
