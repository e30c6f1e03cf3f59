"""The edp-sgd trainer end to end: run directory, secrets kept out of released files, HF reload,
framework isolation, resume after a kill, and bad options."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.common.figures import format_up
from dpaudit.files.run_dirs import verify_run_dir
from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer
from dpaudit.training.train_dir import list_checkpoints

SECRET_SEED = 987654321123


@pytest.fixture(scope="module")
def classify_run(data_dir, tmp_path_factory, edp_config):
    out = tmp_path_factory.mktemp("edp_run") / "run"
    config = edp_config(mode="edp-sgd", noise_seed=SECRET_SEED, learning_rate=3e-3)
    return out, EdpSgdTrainer().train(data_dir, out, config, seed=3)


def test_run_directory_is_complete_and_releases_no_secret(classify_run):
    out, result = classify_run
    manifest = verify_run_dir(out, schema_prefix="dpaudit.train/")
    assert {
        "model/config.json",
        "model/model.safetensors",
        "model/tokenizer.json",
        "metrics.jsonl",
        "privacy.json",
    } <= set(manifest["outputs"])
    assert not (out / "checkpoints").exists()  # it held the secret seed; deleted without --keep-checkpoints
    assert manifest["config"]["noise_seed"] == "<given: secret>"
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl"):
            assert str(SECRET_SEED) not in path.read_text(), path
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if "stage" in r]  # the skeleton's evaluation rows: one per epoch here
    assert [r["stage"] for r in epochs] == [0, 1] and result.summary["telemetry"]["examples_per_s"] > 0
    assert all(0.0 <= r["eval_accuracy"] <= 1.0 and r["epsilon"] > 0 for r in epochs)
    assert epochs[-1]["epsilon"] == pytest.approx(result.epsilon)
    assert sum(1 for r in rows if "loss" in r) == result.steps == 12
    privacy = json.loads((out / "privacy.json").read_text())
    assert "explicit --noise-seed" in privacy["guarantee"]


def test_hf_reload_reproduces_the_recorded_accuracy(classify_run, data_dir):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out, result = classify_run
    model, info = AutoModelForSequenceClassification.from_pretrained(out / "model", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tokenizer = AutoTokenizer.from_pretrained(out / "model")
    rows = [json.loads(line) for line in (data_dir / "heldout.jsonl").read_text().splitlines()]
    enc = tokenizer([r["text"] for r in rows], padding=True, truncation=True, max_length=16, return_tensors="pt")
    with torch.no_grad():
        predicted = model.eval()(**enc).logits.argmax(-1)
    labels = torch.tensor([model.config.label2id[r["label"]] for r in rows])
    accuracy = int((predicted == labels).sum()) / len(labels)  # counted, as the trainer does (no float32 mean)
    assert accuracy == pytest.approx(result.summary["eval_accuracy"], abs=1e-9)


def test_mlm_model_reloads_as_masked_lm(data_dir, tmp_path, edp_config):
    from transformers import AutoModelForMaskedLM

    result = EdpSgdTrainer().train(data_dir, tmp_path / "mlm", edp_config(mode="sgd", task="mlm", epochs=1), seed=0)
    assert result.epsilon is None and 0.0 <= result.summary["mlm_accuracy"] <= 1.0
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path / "mlm" / "model", output_loading_info=True)
    assert not info["missing_keys"]
    assert json.loads((tmp_path / "mlm" / "privacy.json").read_text())["private"] is False


def _subprocess(code: str) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_jax_bert_never_imports_torch():
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom dpaudit.cli import cli\n"
        "r = CliRunner().invoke(cli, ['train', '--trainer', 'jax-bert', '--help'])\nassert r.exit_code == 0, r.output\n"
        "import dpaudit.trainers.jax_bert.trainer\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')))\n"
    )
    assert _subprocess(code) == "[]"


def _rows(out):
    """metrics.jsonl without its wall-clock fields."""
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "examples_per_s"} for r in rows]


def test_killed_then_resumed_equals_straight(
    data_dir, tmp_path, edp_config, killed_after_checkpoint, assert_same_model
):
    config = edp_config(mode="dp-sgd", epochs=1, checkpoint_every=2)
    straight = EdpSgdTrainer().train(data_dir, tmp_path / "straight", config, seed=5)
    killed_after_checkpoint(lambda: EdpSgdTrainer().train(data_dir, tmp_path / "resumed", config, seed=5), step=4)
    assert [s for s, _ in list_checkpoints(tmp_path / "resumed" / "checkpoints")] == [2, 4]
    resumed = EdpSgdTrainer().train(data_dir, tmp_path / "resumed", config, seed=5)
    assert resumed.summary["resumed_from_step"] == 4 and resumed.steps == straight.steps == 6
    assert_same_model(tmp_path / "straight", tmp_path / "resumed", atol=0, rtol=0)  # bit for bit
    assert _rows(tmp_path / "straight") == _rows(tmp_path / "resumed")
    assert resumed.epsilon == straight.epsilon
    # A finished run is not retrained: its own command returns it, untouched.
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed").rglob("*")}
    again = EdpSgdTrainer().train(data_dir, tmp_path / "resumed", config, seed=5)
    assert again.steps == resumed.steps and again.epsilon == resumed.epsilon
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed").rglob("*")} == before


def test_resume_refuses_different_settings(data_dir, tmp_path, edp_config, killed_after_checkpoint):
    config = edp_config(mode="sgd", epochs=1, checkpoint_every=2)
    killed_after_checkpoint(lambda: EdpSgdTrainer().train(data_dir, tmp_path / "run", config, seed=5))
    with pytest.raises(UserInputError, match="different settings"):
        EdpSgdTrainer().train(data_dir, tmp_path / "run", edp_config(mode="sgd", epochs=2), seed=5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--mode", "sgd", "--noise-multiplier", "1"], "--mode sgd takes no --noise-multiplier"),
        (["--mode", "dp-sgd"], "needs --target-epsilon"),
        (
            ["--mode", "edp-sgd", "--noise-multiplier", "1", "--micro-batches", "0"],
            "--micro-batches must be an integer >= 1",
        ),
        (["--mode", "edp-sgd", "--noise-multiplier", "1", "--decay-rate", "0.5"], "needs --noise-decay"),
    ],
)
def test_bad_options_exit_2_with_one_line(data_dir, tmp_path, args, message):
    result = CliRunner().invoke(
        cli, ["train", "--trainer", "edp-sgd", "--data", str(data_dir), "--out", str(tmp_path / "x"), *args]
    )
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "x").exists()


def test_config_types_are_checked_from_every_source(edp_config):
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.training.config_types import ConfigTypeError

    # A TOML string is not a boolean, nor a choice of another type; an integer number is a float.
    with pytest.raises(ConfigTypeError, match="--keep-checkpoints must be true or false"):
        edp_config(keep_checkpoints="false")
    with pytest.raises(ConfigTypeError, match="--mode must be one of sgd, dp-sgd, edp-sgd"):
        edp_config(mode="dpsgd")
    with pytest.raises(ConfigTypeError, match="--epochs must be an integer"):
        edp_config(epochs=2.0)
    config = EdpSgdConfig(mode="dp-sgd", noise_multiplier=1, learning_rate=1)
    assert isinstance(config.noise_multiplier, float) and isinstance(config.learning_rate, float)


def test_toml_string_is_not_a_boolean(data_dir, tmp_path):
    toml = tmp_path / "edp.toml"
    toml.write_text('mode = "dp-sgd"\nnoise_multiplier = 1.0\nkeep_checkpoints = "false"\n')
    result = CliRunner().invoke(
        cli,
        ["train", "--trainer", "edp-sgd", "--data", str(data_dir), "--out", str(tmp_path / "x"), "--config", str(toml)],
    )
    assert result.exit_code == 2 and "keep_checkpoints" in result.output and "true or false" in result.output
    assert not (tmp_path / "x").exists()


def test_cli_prints_the_guarantee_and_group_privacy(data_dir, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "edp-sgd",
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "run"),
            "--mode",
            "edp-sgd",
            "--noise-multiplier",
            "2",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--micro-batches",
            "4",
            "--vocab-size",
            "300",
            "--max-length",
            "16",
            "--eval-examples",
            "8",
            "--noise-seed",
            "5",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert f"epsilon = {format_up(record['epsilon'])}" in result.output
    for row in record["group_privacy"]:  # the data_dir canaries are inserted 1, 2 and 3 times
        assert f"canary inserted {row['frequency']}x: ({format_up(row['epsilon'])}, " in result.output
    assert "group bound:" in result.output


def test_tiny_config_is_private_and_keeps_the_protocol():
    from dpaudit.training.api import Trainer, load_trainer

    trainer = load_trainer("edp-sgd")
    assert isinstance(trainer, Trainer) and isinstance(trainer, EdpSgdTrainer)
    config = trainer.tiny_config(noise_seed=3)
    assert config.private and config.noise_seed == 3 and config.mode == "edp-sgd"


def test_classify_needs_labels(tmp_path, edp_config):
    runner = CliRunner()
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(f"line number {i} of plain text" for i in range(120)) + "\n")
    done = runner.invoke(
        cli,
        [
            "inject",
            "--corpus",
            str(corpus),
            "--out",
            str(tmp_path / "d"),
            "--frequencies",
            "1",
            "--per-frequency",
            "1",
            "--heldout-size",
            "10",
            "--public-size",
            "20",
        ],
    )
    assert done.exit_code == 0, done.output
    with pytest.raises(UserInputError, match="no labels"):
        EdpSgdTrainer().train(tmp_path / "d", tmp_path / "out", edp_config(mode="sgd"), seed=0)
