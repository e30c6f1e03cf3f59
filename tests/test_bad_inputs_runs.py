"""Bad inputs and faults around run directories (the second hardening round: the High items, model
files and seeds). Each refusal is a one-line error, exit code 2, that leaves the tree as it was; each
rerun of a finished run's own command returns its result without training or writing anything.

- Never a folder dpaudit did not write: the demo refuses a non-empty ``--out`` that is not its own earlier
  run, and every ``--overwrite`` (inject, attack, the demo's stages) removes only what a manifest lists.
- Every trainer: rerunning a finished run's command (``--data`` by another path included: data is compared
  by content) returns it untouched; a changed ``model.safetensors`` is reported as changed.
- Inputs that vanish mid-run: hashed at the start, so the run finishes and records what it read; a read
  that still fails is the one-line error naming the path.
- Model files: a pickle, truncated or random-bytes checkpoint is "not a safetensors model directory".
- Seeds: one range, 0 <= seed <= 2^63 - 1, for every command's ``--seed``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.training.config_types import SEED_MAX, check_seed

#: Tiny torch runs: 96 rows, batch 16 -> 6 steps, one epoch (a few seconds each on one thread).
TORCH_TINY = ["--epochs", "1", "--batch-size", "16", "--max-length", "16", "--vocab-size", "128", "--eval-examples", "8",
              "--noise-multiplier", "1", "--noise-seed", "5", "--seed", "3"]
TORCH_ARGS = {"edp-sgd": ["--mode", "dp-sgd", *TORCH_TINY], "rgp": ["--rank", "2", *TORCH_TINY]}
#: The tiny jax-bert run of tests/test_bad_inputs_files.py (same shapes: compiled once per session).
JAX_TINY = ["--preset", "tiny", "--max-length", "16", "--vocab-size", "128", "--physical-batch", "8", "--eval-examples", "16",
            "--log-every", "2", "--eval-every", "3", "--checkpoint-every", "3", "--steps", "6", "--batch-size", "16",
            "--seed", "3", "--noise-multiplier", "1.0"]


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


@pytest.fixture(scope="module")
def torch_runs(data_dir, tmp_path_factory):
    """trainer -> a finished tiny run of edp-sgd and rgp, trained by the CLI with ``--data`` absolute (read-only)."""
    runs = {}
    for trainer, args in TORCH_ARGS.items():
        out = tmp_path_factory.mktemp(f"finished-{trainer}") / "run"
        result = invoke(["train", "--trainer", trainer, "--data", data_dir.resolve(), "--out", out, *args])
        assert result.exit_code == 0, result.output
        runs[trainer] = out
    return runs


# ------------------------------------------------------------------------------------------------
# A finished run's own command returns it: every trainer, --data by another path.


@pytest.mark.parametrize("trainer", list(TORCH_ARGS))
def test_rerun_of_a_finished_torch_run_returns_it_by_any_path_to_the_same_data(trainer, torch_runs, data_dir, tmp_path,
                                                                              monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(torch_runs[trainer], out)
    before = tree(out)
    copy = tmp_path / "elsewhere" / "data"  # the same files at another path, given relative
    shutil.copytree(data_dir, copy)
    monkeypatch.chdir(copy.parent)
    start = time.perf_counter()
    result = invoke(["train", "--trainer", trainer, "--data", "data", "--out", out, *TORCH_ARGS[trainer]])
    elapsed = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    assert tree(out) == before  # nothing trained, nothing rewritten (no new metrics rows, same model file)
    manifest = json.loads((out / "manifest.json").read_text())
    assert f"trained {trainer} for {manifest['steps']} steps" in result.output
    assert elapsed < 10, elapsed  # setup only: ~0.3 s alone on the 2-core CPU; training the run took seconds
    # Other settings, or other data, are refused without touching it.
    other = invoke(["train", "--trainer", trainer, "--data", "data", "--out", out, *TORCH_ARGS[trainer], "--epochs", "2"])
    assert_one_line_error(other, f"--out {out} holds a finished run with different settings", "--epochs 1 -> 2")
    with open(copy / "heldout.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"text": "one more row", "label": "weather"}\n')
    changed = invoke(["train", "--trainer", trainer, "--data", "data", "--out", out, *TORCH_ARGS[trainer]])
    assert_one_line_error(changed, f"{Path('data') / 'heldout.jsonl'}")  # the inject hash check names the file
    assert tree(out) == before


def test_rerun_of_a_finished_jax_bert_run_returns_it_by_a_relative_path(mia_noisy_model, mia_data, tmp_path,
                                                                        monkeypatch):
    """The shared session run (conftest ``mia_noisy_model``), rerun with its own settings through the API."""
    from dpaudit.trainers.jax_bert.config import JaxBertConfig
    from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer

    out = tmp_path / "run"
    shutil.copytree(mia_noisy_model, out)
    manifest = json.loads((out / "manifest.json").read_text())
    fields = {f.name for f in dataclasses.fields(JaxBertConfig)}
    stored = {k: v for k, v in manifest["config"].items() if k in fields}
    config = JaxBertConfig(**{**stored, "noise_seed": 0})  # the secret seed is redacted in the manifest
    before = tree(out)
    monkeypatch.chdir(mia_data.parent)
    start = time.perf_counter()
    result = JaxBertTrainer().train(Path(mia_data.name), out, config, seed=manifest["seed"])
    assert time.perf_counter() - start < 10
    assert tree(out) == before
    assert result.steps == manifest["steps"] and result.epsilon == json.loads((out / "privacy.json").read_text())["epsilon"]


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
    message = assert_one_line_error(result, f"--out {out} holds a finished run whose {out / 'model' / 'model.safetensors'} "
                                            "was changed")
    assert "no checkpoint" not in message
    assert tree(out) == before


# ------------------------------------------------------------------------------------------------
# Inputs that vanish mid-run.


@pytest.mark.parametrize("trainer", ["edp-sgd", pytest.param("jax-bert", marks=pytest.mark.slow)])
def test_data_deleted_after_the_first_checkpoint_still_finishes_on_what_was_read(trainer, data_dir, tmp_path,
                                                                                monkeypatch):
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
        name: recorded[name] for name in ("train.jsonl", "heldout.jsonl", "public.jsonl")}


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


# ------------------------------------------------------------------------------------------------
# Never a folder dpaudit did not write.


def _small_corpus(path: Path) -> Path:
    path.write_text("".join(f"line {i} of the small test corpus\n" for i in range(300)), encoding="utf-8")
    return path


def test_demo_refuses_an_out_that_is_not_its_own_and_deletes_nothing(tmp_path):
    out = tmp_path / "o"
    (out / "data").mkdir(parents=True)
    (out / "data" / "myfile.txt").write_text("the user's own file\n")
    before = tree(tmp_path)
    result = invoke(["demo", "--quick", "--out", out, "--report", tmp_path / "r" / "index.html"])
    assert_one_line_error(result, f"--out {out} exists, is not empty and is not an earlier dpaudit demo run")
    assert tree(tmp_path) == before
    assert (out / "data" / "myfile.txt").read_text() == "the user's own file\n"


def test_a_demo_stage_never_removes_a_folder_holding_a_users_file(tmp_path):
    """An earlier demo run whose data/ the user added a file to: a changed command (another size) would
    replace data/; it refuses instead, and keeps everything."""
    from dpaudit.demo.plan import Stage
    from dpaudit.demo.stages import run_stages
    from dpaudit.errors import UserInputError

    def inject(size: int) -> Stage:
        data = tmp_path / "data"
        return Stage(name="inject", title="inject", output=data, schema_prefix="dpaudit.inject/",
                     args=("inject", "--corpus", "builtin:assistant", "--corpus-size", str(size), "--out", str(data),
                           "--frequencies", "1", "--per-frequency", "2", "--overwrite"))

    def run(stage):
        cli.main(args=list(stage.args), prog_name="dpaudit", standalone_mode=False)

    run_stages([inject(150)], state=tmp_path / ".demo", run=run, echo=lambda _: None)
    (tmp_path / "data" / "notes.txt").write_text("mine\n")
    before = tree(tmp_path)
    with pytest.raises(UserInputError, match="notes.txt, which no dpaudit manifest lists"):
        run_stages([inject(160)], state=tmp_path / ".demo", run=run, echo=lambda _: None)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", ["inject", "attack"])
def test_overwrite_replaces_only_what_a_manifest_lists(command, tmp_path, data_dir, torch_runs):
    out = tmp_path / "out"
    out.mkdir()
    if command == "attack":  # an earlier attack directory the user put a file into
        args = ["attack", "--model", torch_runs["edp-sgd"], "--data", data_dir, "--out", out, "--attacks", "loss"]
        first = invoke([*args[:5], "--out", tmp_path / "first", "--attacks", "loss"])
        assert first.exit_code == 0, first.output
        shutil.rmtree(out)
        shutil.copytree(tmp_path / "first", out)
        shutil.rmtree(tmp_path / "first")
    else:
        args = ["inject", "--corpus", _small_corpus(tmp_path / "c.txt"), "--out", out, "--frequencies", "1",
                "--per-frequency", "2"]
        (out / "train.jsonl").write_text('{"text": "my own rows"}\n')  # a folder with no manifest at all
    (out / "mine.txt").write_text("keep me\n")
    before = tree(tmp_path)
    result = invoke([*args, "--overwrite"])
    assert_one_line_error(result, f"--out {out} holds", "which no dpaudit manifest lists", "move your files away")
    assert tree(tmp_path) == before


def test_overwrite_still_replaces_a_run_directory_dpaudit_wrote(tmp_path):
    corpus = _small_corpus(tmp_path / "c.txt")
    args = ["inject", "--corpus", corpus, "--out", tmp_path / "out", "--frequencies", "1", "--per-frequency", "2"]
    assert invoke(args).exit_code == 0
    result = invoke([*args, "--seed", "1", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["seed"] == 1


# ------------------------------------------------------------------------------------------------
# Model files: pickle, truncated and random-bytes checkpoints.


def _damaged_model(kind: str, source: Path, path: Path) -> Path:
    shutil.copytree(source / "model", path)
    weights = path / "model.safetensors"
    if kind == "pickle":
        import torch
        from safetensors.torch import load_file

        torch.save(load_file(weights), path / "pytorch_model.bin")
        weights.unlink()
    elif kind == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        weights.write_bytes(os.urandom(4096))
    return path


@pytest.mark.parametrize("kind", ["pickle", "truncated", "random"])
@pytest.mark.parametrize("command", ["train", "attack"])
def test_a_model_that_is_not_safetensors_is_one_line(kind, command, torch_runs, data_dir, tmp_path):
    model = _damaged_model(kind, torch_runs["edp-sgd"], tmp_path / "hf")
    out = tmp_path / "out"
    option = "--init-from" if command == "train" else "--model"
    if command == "train":
        args = ["train", "--trainer", "edp-sgd", "--init-from", model, "--data", data_dir, "--out", out,
                *TORCH_ARGS["edp-sgd"]]
    else:
        args = ["attack", "--model", model, "--data", data_dir, "--out", out, "--attacks", "loss"]
    before = tree(tmp_path)
    message = assert_one_line_error(invoke(args), f"{option} {model} is not a safetensors model directory")
    assert ("pytorch_model.bin" if kind == "pickle" else str(model / "model.safetensors")) in message
    assert "Unpickl" not in message and "SafetensorError" not in message
    assert tree(tmp_path) == before


# ------------------------------------------------------------------------------------------------
# Seeds: one range for every command.

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
