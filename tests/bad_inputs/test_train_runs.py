"""A train run's directory while and after it runs (hardening, round two; moved from tests/test_bad_inputs_runs.py):
a finished run whose ``model.safetensors`` was changed is reported as changed; inputs that vanish mid-run are hashed
at the start, so the run finishes and records what it read, and a read that still fails is the one-line error naming
the path. (Rerunning a finished run's own command: tests/bad_inputs/test_rerun.py.)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from tests.conftest import TORCH_ARGS

#: The tiny jax-bert run of tests/test_bad_inputs_files.py (same shapes: compiled once per session).
JAX_TINY = [
    "--preset",
    "tiny",
    "--max-length",
    "16",
    "--vocab-size",
    "128",
    "--physical-batch",
    "8",
    "--eval-examples",
    "16",
    "--log-every",
    "2",
    "--eval-every",
    "3",
    "--checkpoint-every",
    "3",
    "--steps",
    "6",
    "--batch-size",
    "16",
    "--seed",
    "3",
    "--noise-multiplier",
    "1.0",
]


def tree(root: Path) -> dict[str, int]:
    """Every entry under ``root`` with its mtime: a rerun that trains or rewrites anything changes it."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


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


@pytest.mark.parametrize("trainer", list(TORCH_ARGS))
def test_a_finished_run_with_a_changed_model_file_is_reported_as_changed(trainer, torch_runs, data_dir, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(torch_runs[trainer], out)
    with open(out / "model" / "model.safetensors", "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 1]))
    before = tree(out)
    result = invoke(["train", "--trainer", trainer, "--data", data_dir, "--out", out, *TORCH_ARGS[trainer]])
    message = assert_one_line_error(
        result, f"--out {out} holds a finished run whose {out / 'model' / 'model.safetensors'} was changed"
    )
    assert "no checkpoint" not in message
    assert tree(out) == before


# ------------------------------------------------------------------------------------------------
# Inputs that vanish mid-run.


@pytest.mark.parametrize("trainer", ["edp-sgd", pytest.param("jax-bert", marks=pytest.mark.slow)])
def test_data_deleted_after_the_first_checkpoint_still_finishes_on_what_was_read(
    trainer, data_dir, tmp_path, monkeypatch
):
    """Every input file is read and hashed before step 1: deleting --data 3 steps in (after the first
    checkpoint) ended a jax-bert run in a FileNotFoundError traceback when the manifest hashed it at the end.
    (jax-bert is marked slow: ~60 s alone, compiling; in the whole suite its programs are cached.)"""
    if trainer == "jax-bert":
        import dpaudit.trainers.jax_bert.checkpoint as ckpt

        saver, args = "write_checkpoint", JAX_TINY
    else:
        import dpaudit.trainers.torch_common.checkpoint as ckpt

        saver, args = "save_checkpoint", [*TORCH_ARGS["edp-sgd"], "--checkpoint-every", "3"]

    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    recorded = json.loads((data / "manifest.json").read_text())["outputs"]
    real = getattr(ckpt, saver)

    def write_then_delete_data(*a, **kw):
        path = real(*a, **kw)
        shutil.rmtree(data, ignore_errors=True)
        return path

    monkeypatch.setattr(ckpt, saver, write_then_delete_data)
    out = tmp_path / "model"
    result = invoke(["train", "--trainer", trainer, "--data", data, "--out", out, *args])
    assert result.exit_code == 0, result.output
    assert not data.exists()
    inputs = json.loads((out / "manifest.json").read_text())["inputs"]
    assert {Path(k).name: v for k, v in inputs.items() if not k.endswith("manifest.json")} == {
        name: recorded[name] for name in ("train.jsonl", "heldout.jsonl", "public.jsonl")
    }


def test_an_input_that_vanishes_during_a_run_is_one_line_naming_it(data_dir, tmp_path, monkeypatch):
    from dpaudit.trainers.torch_common.loop import TorchPlugin

    gone = data_dir / "train.jsonl"

    def vanished(self):
        raise FileNotFoundError(2, "No such file or directory", str(gone))

    monkeypatch.setattr(TorchPlugin, "execute", vanished)
    out = tmp_path / "run"
    result = invoke(["train", "--trainer", "edp-sgd", "--data", data_dir, "--out", out, *TORCH_ARGS["edp-sgd"]])
    assert_one_line_error(result, f"{gone} vanished during the run", "rerun the same command to resume")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
