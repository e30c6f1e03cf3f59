"""``dpaudit train --trainer jax-bert`` end to end through the command line (CliRunner, tiny model)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit import accounting
from dpaudit.claim.record import PrivacyRecord
from dpaudit.cli import cli
from dpaudit.common.figures import format_up
from dpaudit.files.run_dirs import read_jsonl, verify_run_dir

TINY = [
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
]


@pytest.fixture(scope="module")
def dp_run(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("cli-run") / "model"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--seed",
            "3",
            "--steps",
            "6",
            "--batch-size",
            "16",
            "--target-epsilon",
            "4",
            "--json",
            *TINY,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_run_directory_is_complete_and_verifies(dp_run):
    out, summary = dp_run
    assert summary["trainer"] == "jax-bert" and summary["steps"] == 6
    for name in (
        "model/config.json",
        "model/model.safetensors",
        "model/tokenizer.json",
        "privacy.json",
        "metrics.jsonl",
        "manifest.json",
    ):
        assert (out / name).is_file(), name
    assert not (out / "checkpoints").exists()  # deleted at the end: they hold the secret noise state
    manifest = verify_run_dir(out, schema_prefix="dpaudit.train/")
    assert manifest["schema"] == "dpaudit.train/1" and manifest["seed"] == 3
    assert {p.split("/")[-1] for p in manifest["inputs"]} >= {"train.jsonl", "heldout.jsonl", "public.jsonl"}
    assert "privacy.json" in manifest["outputs"] and "model/model.safetensors" in manifest["outputs"]


def test_exported_model_loads_in_transformers(dp_run):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out, _ = dp_run
    model = AutoModelForMaskedLM.from_pretrained(out / "model")
    tok = AutoTokenizer.from_pretrained(out / "model")
    enc = tok(["call mom at noon"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert logits.shape == (1, enc["input_ids"].shape[1], model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_tokenizer_saw_public_jsonl_only(dp_run, data_dir):
    import tokenizers

    from dpaudit.training.tokenizer import train_wordpiece

    out, _ = dp_run
    stored = tokenizers.Tokenizer.from_file(str(out / "model" / "tokenizer.json"))
    public = [row["text"] for row in read_jsonl(data_dir / "public.jsonl")]
    train = [row["text"] for row in read_jsonl(data_dir / "train.jsonl")]
    assert stored.get_vocab() == train_wordpiece(public, vocab_size=128).get_vocab()
    assert stored.get_vocab() != train_wordpiece(public + train, vocab_size=128).get_vocab()


def test_epsilon_recomputes_from_the_stored_event(dp_run):
    out, summary = dp_run
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["accountant"] == "pld" and privacy["private"] is True
    assert privacy["schema"] == "dpaudit.privacy/4" and PrivacyRecord.from_json(privacy).to_json() == privacy
    assert privacy["privacy_unit"] == "example" and privacy["adjacency"] == "add_remove"
    assert privacy["sampling"] == "poisson" and privacy["sensitivity_factor"] == 1.0
    assert privacy["delta"] == 1e-5 and privacy["steps"] == 6  # default min(1e-5, 1/(10 N))
    assert "NOT covered by the epsilon" in privacy["telemetry"]
    event = accounting.event_from_json(privacy["event"])
    eps = accounting.epsilon(event, privacy["accountant_delta"])  # delta minus the noise tail (schema /4)
    assert eps == pytest.approx(privacy["epsilon"], rel=1e-9) == pytest.approx(summary["epsilon"], rel=1e-9)
    # calibrated to spend the target, not more
    assert privacy["epsilon"] <= 4.0 and privacy["epsilon"] > 3.5
    # the stored event is the schedule the trainer reports: 6 steps at q = 16/96 with its sigma
    expected = accounting.schedule_event(
        accounting.batch_schedule_segments(
            dataset_size=96, schedule=[(6, 16)], noise_multiplier=privacy["noise_multipliers"][0]
        )
    )
    assert accounting.epsilon(expected, privacy["delta"]) == pytest.approx(eps, rel=1e-9)


def test_metrics_rows(dp_run):
    out, _ = dp_run
    rows = list(read_jsonl(out / "metrics.jsonl"))
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert all(r["telemetry_private"] is True for r in rows)
    assert all(np.isfinite(r["loss"]) and 0 <= r["clip_fraction"] <= 1 and r["grad_snr"] > 0 for r in rows)
    logged = [r for r in rows if "examples_per_s" in r]
    assert [r["step"] for r in logged] == [2, 3, 4, 6]  # host syncs: every --log-every 2 and at evaluations
    assert all(r["examples_per_s"] > 0 for r in logged)
    spent = [r for r in rows if "epsilon" in r]  # PLD epsilon at evaluations / checkpoints / the end
    assert [r["step"] for r in spent] == [3, 6]
    assert 0 < spent[0]["epsilon"] < spent[1]["epsilon"] <= 4.0
    evals = [r for r in rows if "mlm_accuracy" in r]
    assert [r["step"] for r in evals] == [3, 6] and all(0 <= r["mlm_accuracy"] <= 1 for r in evals)


def test_help_lists_the_trainer_options_and_ends_with_an_example():
    result = CliRunner().invoke(cli, ["train", "--trainer", "jax-bert", "--help"], catch_exceptions=False)
    assert result.exit_code == 0
    for option in (
        "--preset",
        "--steps",
        "--batch-size",
        "--batch-schedule",
        "--physical-batch",
        "--clip-engine",
        "--target-epsilon",
        "--delta",
        "--noise-multiplier",
        "--clip-norm",
        "--non-private",
        "--sampling",
        "--config",
        "--json",
    ):
        assert option in result.output, option
    last_paragraph = " ".join(result.output.strip().split("\n\n")[-1].split())  # click wraps the epilog
    assert last_paragraph.startswith("Example: dpaudit train --trainer jax-bert"), last_paragraph


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "needs --target-epsilon (calibrate the noise) or --noise-multiplier"),
        (["--non-private", "--target-epsilon", "3"], "--non-private takes no --target-epsilon"),
        (["--noise-multiplier", "1", "--clip-norm", "-1"], "--clip-norm must be a finite number > 0, got -1.0."),
        (["--noise-multiplier", "1", "--batch-schedule", "10:abc"], "--batch-schedule item 1"),
        (["--noise-multiplier", "1", "--batch-size", "500"], "expected batch 500 exceeds the 96 training examples"),
        (
            ["--noise-multiplier", "0.3", "--target-epsilon", "0.01"],
            "spends more than --target-epsilon 0.01 on the first step",
        ),
        (
            ["--noise-multiplier", "1", "--physical-batch", "3"],
            "--physical-batch 3 must be a multiple of the number of devices",
        ),
    ],
)
def test_bad_config_is_one_line_exit_2_and_writes_nothing(data_dir, tmp_path, args, message):
    out = tmp_path / "model"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--preset",
            "tiny",
            "--steps",
            "3",
            "--batch-size",
            "16",
            "--max-length",
            "16",
            "--vocab-size",
            "128",
            *args,
        ],
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not out.exists()


def test_config_file_supplies_options_and_the_command_line_overrides_it(data_dir, tmp_path):
    toml = tmp_path / "trainer.toml"
    toml.write_text(
        'preset = "tiny"\nsteps = 50\nbatch-size = 16\nnon_private = true\nmax_length = 16\n'
        "vocab_size = 128\nphysical_batch = 8\neval_examples = 0\n"
    )
    out = tmp_path / "model"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--config",
            str(toml),
            "--steps",
            "2",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["steps"] == 2 and summary["epsilon"] is None
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["private"] is False and privacy["epsilon"] is None and privacy["noise_multipliers"] is None
    assert privacy["event"] is None


def test_text_output_states_the_guarantee_rounded_up_with_its_labels(data_dir, tmp_path):
    out = tmp_path / "model"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--seed",
            "3",
            "--steps",
            "6",
            "--batch-size",
            "16",
            "--noise-multiplier",
            "1",
            "--delta",
            "0.05",
            "--noise-seed",
            "5",
            *TINY,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    privacy = json.loads((out / "privacy.json").read_text())
    eps = privacy["epsilon"]
    head = result.stdout.splitlines()[0]
    printed = float(head.split("epsilon = ")[1].split()[0])
    assert printed >= eps and printed - eps < 1e-2 * eps  # three significant digits, rounded up
    assert head.split("epsilon = ")[1].split()[0] == format_up(eps)  # the one helper: as attack and report print it
    assert "at delta = 0.050, for model/ only" in head
    assert "delta 0.05 >= 1/N" in result.stderr  # warned: a delta >= 1/N
    assert "only while that seed is secret" in result.stdout  # --noise-seed: a conditional guarantee
    assert "The guarantee covers model/ and privacy.json" in result.stdout and "NOT covered" in result.stdout
    assert "group privacy, canary inserted 3x: (" in result.stdout and "Dwork & Roth" in result.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["noise_seed"] == "<given: secret>"


def test_help_states_the_delta_rule_and_the_secret_noise_options():
    result = CliRunner().invoke(cli, ["train", "--trainer", "jax-bert", "--help"], catch_exceptions=False)
    text = " ".join(result.output.split())
    assert "min(1e-5, 1/(10 N))" in text and "--noise-seed" in text and "--keep-checkpoints" in text
    assert "never the DP noise or sampling" in text


def test_n_treated_as_public_states_the_replace_one_epsilon(dp_run):
    """No --dataset-size: q = 16/96 comes from the real N, so privacy.json says N is public and gives the
    replace-one epsilon beside the add/remove one. Golden: plain dp_accounting, relation and mechanism
    worked out here (per-example clipping, sensitivity C: the accountant's multiplier is sigma)."""
    from dp_accounting import dp_event
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
    from dp_accounting.privacy_accountant import NeighboringRelation

    out, summary = dp_run
    privacy = json.loads((out / "privacy.json").read_text())
    record = PrivacyRecord.from_json(privacy)
    assert record.n_public is True and record.dataset_size == 96 and record.declared_dataset_size is None
    assert record.proven is True and privacy["proven"] is True
    assert "N is treated as public" in record.public_parameters and "treated as public" in record.guarantee
    sigma = privacy["noise_multipliers"][0]
    golden = PLDAccountant(NeighboringRelation.REPLACE_ONE)
    golden.compose(dp_event.PoissonSampledDpEvent(16 / 96, dp_event.GaussianDpEvent(sigma)), 6)
    expected = golden.get_epsilon(1e-5)
    assert record.epsilon_replace_one == pytest.approx(expected, rel=1e-9)
    assert record.epsilon_replace_one > record.epsilon * 1.05
    assert summary["n_public"] is True and summary["epsilon_replace_one"] == pytest.approx(expected, rel=1e-9)


def test_privacy_json_counts_the_float_noise_tail_inside_delta_with_the_runs_numbers(dp_run):
    """jax-bert draws its noise by Box-Muller with a 96-bit radius uniform (reach 11.596 sigma; jax.random.normal in
    float32 stopped at 5.22): a neighbour alone on a coordinate is revealed with probability about
    sum_t q P(Z > 11.596 - 1/sigma), worked out here for this run's 6 steps at q = 16/96, and counted inside delta:
    the epsilon is the accountant's at delta minus it. No caveat stands beside the claim."""
    import math

    out, summary = dp_run
    privacy = json.loads((out / "privacy.json").read_text())
    tail = privacy["noise_tail"]
    sigma = privacy["noise_multipliers"][0]
    figure = 6 * (16 / 96) * 0.5 * math.erfc((11.596 - 1 / sigma) / math.sqrt(2))
    assert tail["sampler"] == "jax-bm96" and tail["z_max"] == pytest.approx(11.596, abs=1e-3)
    assert privacy["noise_tail_delta"] == pytest.approx(figure, rel=1e-9) and 0 < figure < 1e-7 * privacy["delta"]
    assert privacy["delta"] == 1e-5 and privacy["accountant_delta"] == pytest.approx(1e-5 - figure, rel=1e-12)
    assert summary["noise_tail_delta"] == privacy["noise_tail_delta"] and summary["delta"] == privacy["delta"]
    assert "includes the float noise sampler's tail figure" in privacy["guarantee"]
    assert not any(note.startswith("caveat: the noise sampler") for note in privacy["notes"])


def test_the_manifest_never_records_the_noise_seed(data_dir, tmp_path, monkeypatch):
    """The manifest's command is printed in the shared report: a --noise-seed there would let anyone regenerate the
    noise. A short seed is accepted with a warning (it can be found by search)."""
    out = tmp_path / "run"
    secret = "918273645546372819"  # < 2**64: also warned about
    args = [
        "train",
        "--trainer",
        "jax-bert",
        "--data",
        str(data_dir),
        "--out",
        str(out),
        "--steps",
        "2",
        "--batch-size",
        "16",
        "--noise-multiplier",
        "1.0",
        f"--noise-seed={secret}",
        *TINY,
    ]
    monkeypatch.setattr("sys.argv", ["dpaudit", *args[:-2], "--noise-seed", secret, *args[-2:]])
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "--noise-seed is below 2^64" in result.stderr
    manifest_text = (out / "manifest.json").read_text()
    assert secret not in manifest_text and secret not in (out / "privacy.json").read_text()
    command = json.loads(manifest_text)["command"]
    assert "--noise-seed" in command and "<given: secret>" in command


def test_redact_command_hides_both_spellings():
    from dpaudit.files.run_dirs import redact_command

    assert redact_command(["dpaudit", "demo", "--noise-seed", "7", "--noise-seed=8", "--seed", "9"]) == [
        "dpaudit",
        "demo",
        "--noise-seed",
        "<given: secret>",
        "--noise-seed=<given: secret>",
        "--seed",
        "9",
    ]


def test_scale_from_private_prints_the_unaccounted_release_beside_the_claim(data_dir, tmp_path):
    """--scale-from private computes per-layer clip norms on train.jsonl: the claim line says that the epsilon
    does not cover it, and the release is listed (a plain "epsilon = ... for model/ only" overstated it)."""
    out = tmp_path / "model"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "edp-sgd",
            "--mode",
            "edp-sgd",
            "--task",
            "classify",
            "--scale-from",
            "private",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--seed",
            "0",
            "--preset",
            "tiny",
            "--vocab-size",
            "300",
            "--max-length",
            "16",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--micro-batches",
            "4",
            "--noise-multiplier",
            "1",
            "--eval-examples",
            "8",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    head = result.stdout.splitlines()[0]
    assert "epsilon = " in head and "NOT covering 1 unaccounted release" in head, head
    assert "NOT covered by the epsilon (unaccounted release):" in result.stdout
    privacy = json.loads((out / "privacy.json").read_text())
    assert privacy["unaccounted_releases"] and privacy["details"]["layer_clip_norms_from"].startswith("train.jsonl")
