"""The rgp trainer end to end: run directory and privacy.json against an independent dp_accounting
computation, the noise that runs, what is trained and frozen, resume after a kill, the CLI, bad options."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from safetensors.torch import load_file

from dpaudit.claim.record import PrivacyRecord
from dpaudit.cli import cli
from dpaudit.files.run_dirs import verify_run_dir
from dpaudit.trainers.rgp.trainer import RgpTrainer, _Plugin
from dpaudit.trainers.torch_common import noise
from dpaudit.trainers.torch_common.model import build_model

SECRET_SEED = 987654321123


def _independent_epsilon(q, steps, sigma, delta):
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    return accountant.get_epsilon(delta)


@pytest.fixture(scope="module")
def classify_run(data_dir, tmp_path_factory, rgp_config):
    out = tmp_path_factory.mktemp("rgp_run") / "run"
    config = rgp_config(noise_seed=SECRET_SEED, learning_rate=3e-3, noise_multiplier=1.3, clip_norm=0.7)
    return out, RgpTrainer().train(data_dir, out, config, seed=3)


def test_run_directory_and_privacy_record(classify_run):
    out, result = classify_run
    manifest = verify_run_dir(out, schema_prefix="dpaudit.train/")
    assert {"model/model.safetensors", "metrics.jsonl", "privacy.json"} <= set(manifest["outputs"])
    assert not (out / "checkpoints").exists()
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl"):
            assert str(SECRET_SEED) not in path.read_text(), path
    raw = json.loads((out / "privacy.json").read_text())
    record = PrivacyRecord.from_json(raw)
    assert record.to_json() == raw and record.trainer == "rgp"
    # One Gaussian mechanism of sensitivity C per step: the accountant's multiplier is sigma itself.
    n, batch = 96, 16
    expected = _independent_epsilon(batch / n, math.ceil(n / batch), 1.3, 1e-5)
    assert record.epsilon == pytest.approx(expected, rel=1e-9) and result.epsilon == pytest.approx(expected, rel=1e-9)
    assert record.sensitivity_factor == 1.0 and record.clip_norm == pytest.approx(0.7)
    assert record.noise_multipliers == [1.3] and record.paper_claim is None
    details = record.details
    assert details["rank"] == 4 and details["power_iters"] == 1 and details["mode"] == "rgp"
    assert details["noise_generator"] == noise.describe()
    assert "classifier.weight" in details["reparametrized_weights"]
    assert "bert.embeddings.LayerNorm.weight" in details["clipped_with_the_carriers"]
    assert "bert.embeddings.word_embeddings.weight" in details["frozen"]
    assert "post-processing" in record.mechanism and "rank <= 4" in record.mechanism
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == result.steps == 6 and all(0.0 <= r["clip_fraction"] <= 1.0 for r in steps)
    assert 0.0 <= result.summary["eval_accuracy"] <= 1.0


def test_weights_move_and_embeddings_stay(classify_run):
    out, _ = classify_run
    trained = load_file(str(out / "model" / "model.safetensors"))
    initial = build_model(
        "classify",
        preset="tiny",
        vocab_size=300,
        max_length=16,
        label_names=json.loads((out / "model" / "config.json").read_text())["id2label"].values(),
        seed=3,
    ).state_dict()
    for name in ("bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight"):
        assert torch.equal(trained[name], initial[name]), name  # frozen
    for name in (
        "bert.encoder.layer.0.attention.self.query.weight",
        "classifier.weight",
        "bert.encoder.layer.1.output.LayerNorm.weight",
        "bert.pooler.dense.bias",
    ):
        assert not torch.equal(trained[name], initial[name]), name  # trained


def test_hf_reload_of_the_released_model(classify_run):
    from transformers import AutoModelForSequenceClassification

    out, _ = classify_run
    _, info = AutoModelForSequenceClassification.from_pretrained(out / "model", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]


def test_the_step_noise_is_sigma_c_on_every_summed_coordinate(data_dir, tmp_path, rgp_config):
    run = _Plugin(data_dir, tmp_path / "out", rgp_config(noise_multiplier=0.8, clip_norm=0.5, rank=64), seed=0)
    run._setup()
    assert run.clipper.sensitivity == 0.5
    updates, stats = run.aggregate(0, np.arange(0))  # an empty batch: the update is the noise alone
    k = len(run.reparam.matrices)
    vectors = torch.cat([u.flatten() for u in updates[k:]]).double()
    # 1,615 numbers: a sample std's standard error is 1/sqrt(2n) = 1.8%, so the band is 4 of them (a 3%
    # band was 1.7 and failed for one fixed noise seed out of ~11; checked over 400 keys: mean 0.3996).
    assert vectors.numel() == 1615 and float(vectors.std()) == pytest.approx(0.8 * 0.5, rel=0.07)
    # At full rank Eq. 3 of i.i.d. carrier noise is a projection of it onto span: the update of a
    # square 64 x 64 weight (r = 64 = p) is dL R with dL ~ N(0, (sigma C)^2): again i.i.d. N(0, (sigma C)^2).
    square = [u for u, w in zip(updates[:k], run.reparam.matrices) if w.shape == (64, 64)]
    assert float(torch.cat([u.flatten() for u in square]).double().std()) == pytest.approx(0.4, rel=0.03)
    # Telemetry: [loss, correct, units, clipped, ||clipped sum||, ||noise||]; the noise norm is that of
    # the summed carrier and vector noise, sigma C sqrt(dims) up to chi fluctuation.
    dims = sum(math.prod(shape) for shape in run.reparam.shapes([min(64, *w.shape) for w in run.reparam.matrices]))
    assert stats.tolist()[:5] == [0.0] * 5
    assert stats.tolist()[5] == pytest.approx(0.4 * math.sqrt(dims), rel=0.01)


def test_target_epsilon_calibrates_the_noise(data_dir, tmp_path, rgp_config):
    result = RgpTrainer().train(
        data_dir, tmp_path / "run", rgp_config(noise_multiplier=None, target_epsilon=3.0), seed=0
    )
    record = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert record["noise_calibrated"] and result.epsilon <= 3.0 and result.epsilon == pytest.approx(3.0, rel=0.01)
    assert _independent_epsilon(16 / 96, 6, record["noise_multipliers"][0], 1e-5) == pytest.approx(
        result.epsilon, rel=1e-9
    )


def test_mlm_updates_the_tied_word_embeddings_through_the_decoder(data_dir, tmp_path, rgp_config):
    from transformers import AutoModelForMaskedLM

    result = RgpTrainer().train(data_dir, tmp_path / "mlm", rgp_config(task="mlm", rank=2, power_iters=2), seed=0)
    assert 0.0 <= result.summary["mlm_accuracy"] <= 1.0
    model, info = AutoModelForMaskedLM.from_pretrained(tmp_path / "mlm" / "model", output_loading_info=True)
    assert not info["missing_keys"]
    initial = build_model(
        "mlm", preset="tiny", vocab_size=model.config.vocab_size, max_length=16, label_names=None, seed=0
    ).state_dict()
    trained = model.state_dict()
    assert not torch.equal(
        trained["bert.embeddings.word_embeddings.weight"], initial["bert.embeddings.word_embeddings.weight"]
    )
    assert torch.equal(
        trained["bert.embeddings.position_embeddings.weight"], initial["bert.embeddings.position_embeddings.weight"]
    )


def test_killed_then_resumed_equals_straight(
    data_dir, tmp_path, rgp_config, killed_after_checkpoint, assert_same_model
):
    """W_0 of the historical update is rebuilt from --seed on resume: the carriers, hence the run, are the same."""
    config = rgp_config(checkpoint_every=2, warmup_steps=1)
    straight = RgpTrainer().train(data_dir, tmp_path / "straight", config, seed=5)
    killed_after_checkpoint(lambda: RgpTrainer().train(data_dir, tmp_path / "resumed", config, seed=5), step=4)
    resumed = RgpTrainer().train(data_dir, tmp_path / "resumed", config, seed=5)
    assert resumed.summary["resumed_from_step"] == 4 and resumed.steps == straight.steps == 6
    assert_same_model(tmp_path / "straight", tmp_path / "resumed", atol=0, rtol=0)  # bit for bit
    assert resumed.epsilon == straight.epsilon
    # A finished run is not retrained: its own command returns it, untouched.
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed").rglob("*")}
    again = RgpTrainer().train(data_dir, tmp_path / "resumed", config, seed=5)
    assert again.steps == resumed.steps and again.epsilon == resumed.epsilon
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "resumed").rglob("*")} == before


def test_cli_random_carriers(data_dir, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "rgp",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--rank",
            "2",
            "--power-iters",
            "2",
            "--random-carriers",
            "--noise-multiplier",
            "2",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--vocab-size",
            "300",
            "--max-length",
            "16",
            "--eval-examples",
            "8",
            "--noise-seed",
            "5",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    record = json.loads((out / "privacy.json").read_text())
    assert record["details"]["carriers"] == "random (public --seed)" and record["details"]["mode"] == "rgp-random"
    assert "RGP-random" in record["mechanism"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--noise-multiplier", "1", "--rank", "0"], "--rank must be an integer >= 1"),
        (["--noise-multiplier", "1", "--power-iters", "0"], "--power-iters must be an integer >= 1"),
        ([], "needs --target-epsilon"),
        (["--noise-multiplier", "0"], "--noise-multiplier must be between 1e-10 and 1e10, got 0.0"),
        (["--noise-multiplier", "1", "--clip-norm", "inf"], "--clip-norm must be a finite number > 0"),
    ],
)
def test_bad_options_exit_2_with_one_line(data_dir, tmp_path, args, message):
    result = CliRunner().invoke(
        cli, ["train", "--trainer", "rgp", "--data", str(data_dir), "--out", str(tmp_path / "x"), *args]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "x").exists()


def test_parameter_averaging_is_post_processing_of_the_same_steps(data_dir, tmp_path, rgp_config):
    """--ema-decay under rgp (the torch loop's averaging, tested in full with edp-sgd): the same steps and claim,
    another exported model."""
    runs = {}
    for name, extra in (("last", {}), ("ema", {"ema_decay": 0.8})):
        config = rgp_config(noise_seed=SECRET_SEED, noise_multiplier=1.3, clip_norm=0.7, **extra)
        RgpTrainer().train(data_dir, tmp_path / name, config, seed=3)
        runs[name] = json.loads((tmp_path / name / "privacy.json").read_text())
    average = runs["ema"]["details"].pop("parameter_average")
    assert average["decay"] == 0.8 and runs["ema"] == runs["last"]
    last, ema = (load_file(str(tmp_path / name / "model" / "model.safetensors")) for name in ("last", "ema"))
    assert last.keys() == ema.keys() and any(not torch.equal(last[k], ema[k]) for k in last)
