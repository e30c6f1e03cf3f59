"""Public pretraining, then private training: --data-split public, --init-from, the refusal of a private start,
and the trivial baselines beside every held-out utility figure.

Every trainer starts from a public run made from the inject directory's public.jsonl (jax-bert from a jax-bert
public run; edp-sgd and rgp from an edp-sgd one, in Hugging Face layout like any BERT), and records the start in
privacy.json; a start trained on this run's train.jsonl is refused before anything is written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.claim.record import PrivacyRecord, read_privacy_record
from dpaudit.cli import cli
from dpaudit.cli.train import build_config, utility_lines
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import read_jsonl, sha256_file
from dpaudit.inject_dir.reader import load_inject_run, public_label_set
from dpaudit.training.api import load_trainer
from dpaudit.training.baselines import (
    CLASSIFY_BASELINE_KEY,
    MLM_BASELINE_KEY,
    constant_prediction_accuracy,
    majority_class_accuracy,
)
from dpaudit.training.starting_point import (
    PUBLIC_START_REQUIREMENT,
    StartingPoint,
    refuse_private_start,
    resolve_start,
)

#: The tiny runs of the other test files (same shapes: compiled once per session).
JAX = [
    "--trainer",
    "jax-bert",
    "--preset",
    "tiny",
    "--max-length",
    "16",
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
]
TORCH = ["--epochs", "1", "--batch-size", "16", "--max-length", "16", "--eval-examples", "8", "--seed", "3"]
PRIVATE = {
    "jax-bert": [*JAX, "--noise-multiplier", "1.0"],
    "edp-sgd": ["--trainer", "edp-sgd", "--mode", "dp-sgd", *TORCH, "--noise-multiplier", "1"],
    "rgp": ["--trainer", "rgp", "--rank", "2", *TORCH, "--noise-multiplier", "1"],
}
#: Which public run each trainer starts from.
PUBLIC_OF = {"jax-bert": "jax-bert", "edp-sgd": "edp-sgd", "rgp": "edp-sgd"}


def _train(*args) -> str:
    result = CliRunner().invoke(cli, ["train", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output[-3000:]
    return result.output


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


@pytest.fixture(scope="module")
def public_runs(data_dir, tmp_path_factory):
    """The public models of the inject directory: jax-bert and edp-sgd on public.jsonl, non-private."""
    root = tmp_path_factory.mktemp("public")
    runs = {"jax-bert": root / "jax", "edp-sgd": root / "edp"}
    _train(
        *JAX,
        "--vocab-size",
        "128",
        "--data-split",
        "public",
        "--non-private",
        "--data",
        data_dir,
        "--out",
        runs["jax-bert"],
    )
    _train(
        "--trainer",
        "edp-sgd",
        *TORCH,
        "--vocab-size",
        "128",
        "--data-split",
        "public",
        "--non-private",
        "--data",
        data_dir,
        "--out",
        runs["edp-sgd"],
    )
    return runs


@pytest.fixture(scope="module")
def started_runs(public_runs, data_dir, tmp_path_factory):
    """Each trainer's private run on train.jsonl, started from its public run."""
    root = tmp_path_factory.mktemp("started")
    runs = {}
    for trainer, args in PRIVATE.items():
        runs[trainer] = root / trainer
        _train(*args, "--init-from", public_runs[PUBLIC_OF[trainer]], "--data", data_dir, "--out", runs[trainer])
    return runs


# ------------------------------------------------------------------------------------------------
# The public run.


@pytest.mark.parametrize("trainer", ["jax-bert", "edp-sgd"])
def test_a_run_on_the_public_split_is_marked_public_and_claims_no_epsilon(trainer, public_runs, data_dir):
    run = public_runs[trainer]
    record = read_privacy_record(run / "privacy.json")
    assert (record.data_split, record.public_data_only, record.private, record.epsilon) == ("public", True, False, None)
    assert record.guarantee.startswith("none needed: a public run, trained on public data only")
    assert record.group_privacy == []  # canaries live in train.jsonl only
    assert record.init_from is None
    manifest = _manifest(run)
    assert (manifest["data_split"], manifest["public_data_only"], manifest["private_training_inputs"]) == (
        "public",
        True,
        {},
    )
    assert manifest["summary"]["public_data_only"] is True
    # It trained on public.jsonl's rows: N is their number.
    assert record.dataset_size == len(load_inject_run(data_dir).public_texts)


def test_dp_on_the_public_split_says_it_protects_nothing(data_dir, tmp_path):
    out = _train(
        *PRIVATE["edp-sgd"],
        "--vocab-size",
        "128",
        "--data-split",
        "public",
        "--data",
        data_dir,
        "--out",
        tmp_path / "run",
    )
    record = read_privacy_record(tmp_path / "run" / "privacy.json")
    assert record.private and record.epsilon is not None and record.data_split == "public"
    assert record.public_data_only  # public data from a fresh init: the model holds no private data either way
    assert "DP on public data protects nothing" in record.guarantee
    assert any("DP on public data protects nothing" in note for note in record.notes)
    assert "DP on public data protects nothing" in out


# ------------------------------------------------------------------------------------------------
# Starting from it.


@pytest.mark.parametrize("trainer", ["jax-bert", "edp-sgd", "rgp"])
def test_each_trainer_starts_from_a_public_run_and_records_it(trainer, started_runs, public_runs, data_dir):
    run, start = started_runs[trainer], public_runs[PUBLIC_OF[trainer]]
    record = read_privacy_record(run / "privacy.json")
    assert record.private and record.epsilon is not None
    assert (record.data_split, record.public_data_only) == ("train", False)
    weights = sha256_file(start / "model" / "model.safetensors")
    assert record.init_from == {
        "path": str(start),
        "weights_sha256": {"model.safetensors": weights},
        "dpaudit_run": True,
        "trainer": PUBLIC_OF[trainer],
        "trained_on": "public.jsonl",
        "public_data_only": True,
        "requirement": PUBLIC_START_REQUIREMENT,
    }
    assert "the starting point must be public (trained on public data only)" in record.guarantee
    assert f"--init-from {start}" in record.guarantee
    manifest = _manifest(run)
    assert manifest["inputs"][str(start / "model" / "model.safetensors")] == weights
    assert manifest["init_from"]["private_inputs"] == {}
    train = data_dir / "train.jsonl"
    assert manifest["private_training_inputs"] == {str(train.resolve()): sha256_file(train)}
    # The tokenizer came with the start.
    assert (run / "model" / "tokenizer.json").read_text() == (start / "model" / "tokenizer.json").read_text()


def test_a_classifier_from_a_masked_lm_gets_a_fresh_head_and_one_from_its_own_labels_keeps_it(
    started_runs, data_dir, public_runs, tmp_path
):
    assert read_privacy_record(started_runs["edp-sgd"] / "privacy.json").details["classifier_head"] == "reused"
    _train(*PRIVATE["edp-sgd"], "--init-from", public_runs["jax-bert"], "--data", data_dir, "--out", tmp_path / "run")
    assert read_privacy_record(tmp_path / "run" / "privacy.json").details["classifier_head"] == "fresh"


def test_the_former_model_option_still_sets_the_start(public_runs, capsys):
    trainer = load_trainer("edp-sgd")
    config = build_config(
        trainer, {"model": str(public_runs["edp-sgd"]), "mode": "dp-sgd", "noise_multiplier": 1.0}, None, None
    )
    assert config.init_from == str(public_runs["edp-sgd"])
    assert "--model is deprecated" in capsys.readouterr().err
    assert "model" not in config.to_dict()


def test_non_private_is_mode_sgd_in_edp_sgd():
    config = load_trainer("edp-sgd").Config
    assert config(non_private=True).to_dict() == config(mode="sgd").to_dict()
    with pytest.raises(ValueError, match="contradicts --mode dp-sgd"):
        config(non_private=True, mode="dp-sgd", noise_multiplier=1.0)


# ------------------------------------------------------------------------------------------------
# A start trained on this run's private data is refused.


def _refused(args, *needles) -> str:
    result = CliRunner().invoke(cli, ["train", *map(str, args)])
    assert result.exit_code == 2, result.output[-3000:]
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: --init-from "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    ("trainer", "start_of"), [("jax-bert", "jax-bert"), ("edp-sgd", "edp-sgd"), ("rgp", "edp-sgd")]
)
def test_a_start_trained_on_the_same_train_split_is_refused_writing_nothing(
    trainer, start_of, started_runs, data_dir, tmp_path
):
    for start in (started_runs[start_of], started_runs[start_of] / "model"):  # the run, or its model/ folder
        before = sorted(tmp_path.rglob("*"))
        _refused(
            [*PRIVATE[trainer], "--init-from", start, "--data", data_dir, "--out", tmp_path / "out"],
            "this start was trained on",
            "the same content as this run's train.jsonl",
            "--data-split public",
        )
        assert sorted(tmp_path.rglob("*")) == before
        # Neither may a public model start from it: that model would hold the private data.
        _refused(
            [
                *PRIVATE[trainer],
                "--data-split",
                "public",
                "--init-from",
                start,
                "--data",
                data_dir,
                "--out",
                tmp_path / "out",
            ],
            "this start was trained on",
        )


def test_a_start_trained_on_an_earlier_train_split_of_the_same_inject_directory_is_refused(tmp_path):
    data = tmp_path / "data"
    inject = [
        "inject",
        "--corpus",
        "builtin:assistant",
        "--corpus-size",
        "210",
        "--heldout-size",
        "24",
        "--public-size",
        "96",
        "--frequencies",
        "1,2",
        "--per-frequency",
        "1",
        "--out",
        str(data),
    ]
    assert CliRunner().invoke(cli, [*inject, "--seed", "0"]).exit_code == 0
    _train(*PRIVATE["edp-sgd"], "--vocab-size", "128", "--data", data, "--out", tmp_path / "first")
    assert CliRunner().invoke(cli, [*inject, "--seed", "1", "--overwrite"]).exit_code == 0  # other rows, same folder
    _refused(
        [*PRIVATE["edp-sgd"], "--init-from", tmp_path / "first", "--data", data, "--out", tmp_path / "second"],
        "a train split of this run's inject directory",
    )
    assert not (tmp_path / "second").exists()


def test_the_refusal_follows_the_start_s_own_start(tmp_path):
    train = tmp_path / "data" / "train.jsonl"
    mine = {str(train): "a" * 64, str(tmp_path / "data" / "public.jsonl"): "b" * 64}
    # The start trained on public data, but from a start trained on these very rows (elsewhere).
    start = StartingPoint(
        given="s",
        model_dir=tmp_path,
        run_dir=tmp_path,
        trained_on="public.jsonl",
        public_data_only=False,
        private_inputs={"/elsewhere/train.jsonl": "a" * 64},
    )
    with pytest.raises(UserInputError, match="the same content as this run's train.jsonl"):
        refuse_private_start(start, mine)
    other = StartingPoint(
        given="s",
        model_dir=tmp_path,
        run_dir=tmp_path,
        trained_on="train.jsonl",
        private_inputs={"/elsewhere/train.jsonl": "c" * 64},
    )
    # another data set's private rows: refused unless declared, and then marked so that the claim says it first
    with pytest.raises(UserInputError, match="did not train on public data only.*--accept-private-start"):
        refuse_private_start(other, mine)
    assert refuse_private_start(other, mine, accept_private=True).accepted_private
    assert not refuse_private_start(StartingPoint(given="hf", model_dir=tmp_path), mine).accepted_private  # bare HF


def test_a_non_private_start_on_another_inject_of_the_same_rows_is_refused_unless_declared(data_dir, tmp_path):
    """The review's path round the old refusal: a second inject of the same private rows (another folder, another
    seed), a non-private start trained on it, then the private run from that start. Refused; declared with
    --accept-private-start, the claim says first that the epsilon does not cover what the start learned."""
    from dpaudit.claim import claim_of_record

    again = tmp_path / "again"
    inject = [
        "inject",
        "--corpus",
        "builtin:assistant",
        "--corpus-size",
        "210",
        "--heldout-size",
        "24",
        "--public-size",
        "96",
        "--frequencies",
        "1,2,3",
        "--per-frequency",
        "1",
        "--out",
        str(again),
    ]
    assert CliRunner().invoke(cli, [*inject, "--seed", "5"]).exit_code == 0
    _train(
        "--trainer",
        "edp-sgd",
        *TORCH,
        "--vocab-size",
        "128",
        "--non-private",
        "--data",
        again,
        "--out",
        tmp_path / "np",
    )
    line = _refused(
        [*PRIVATE["edp-sgd"], "--init-from", tmp_path / "np", "--data", data_dir, "--out", tmp_path / "dp"],
        "did not train on public data only",
        "--accept-private-start",
    )
    assert "train.jsonl" in line and not (tmp_path / "dp").exists()
    _train(
        *PRIVATE["edp-sgd"],
        "--init-from",
        tmp_path / "np",
        "--accept-private-start",
        "--data",
        data_dir,
        "--out",
        tmp_path / "dp",
    )
    record = read_privacy_record(tmp_path / "dp" / "privacy.json")
    assert record.guarantee.startswith("This epsilon does NOT cover what the --init-from start")
    assert record.init_from["accepted_private"] is True and record.epsilon is not None
    text = claim_of_record(record).text()
    assert text.split("(", 1)[1].startswith("it does NOT cover what the --init-from start")


def test_a_bare_hugging_face_directory_is_recorded_as_such(public_runs, tmp_path):
    bare = tmp_path / "bert"
    shutil.copytree(public_runs["edp-sgd"] / "model", bare)
    start = resolve_start(bare)
    assert (start.dpaudit_run, start.trained_on, start.public_data_only) == (False, None, None)
    assert start.weights == {"model.safetensors": sha256_file(bare / "model.safetensors")}
    # ... but the model/ folder of a run is that run (its manifest says what it saw).
    assert resolve_start(public_runs["edp-sgd"] / "model").run_dir == public_runs["edp-sgd"]
    with pytest.raises(UserInputError, match="no config.json"):
        resolve_start(tmp_path)


def test_a_public_run_from_a_bare_hugging_face_directory_stands_as_that_directory_does(public_runs, data_dir, tmp_path):
    """A practitioner's chain: a pretrained model from elsewhere (MiniLM), trained on public.jsonl, then privately.
    The public runs add public rows only, so they stand as the directory does given as --init-from itself: the private
    run passes and its claim names the directory it holds only under; the public run's summary says public.jsonl, not
    train.jsonl. A run on train.jsonl from the same directory stays a start known to hold private rows."""
    from dpaudit.claim import claim_of_record

    bare = tmp_path / "bert"
    shutil.copytree(public_runs["edp-sgd"] / "model", bare)
    public = ["--trainer", "edp-sgd", *TORCH, "--data-split", "public", "--non-private", "--data", data_dir]
    said = _train(*public, "--init-from", bare, "--out", tmp_path / "public")
    assert "no privacy guarantee: trained on public.jsonl" in said and "on train.jsonl" not in said
    _train(*public, "--init-from", tmp_path / "public", "--out", tmp_path / "again")  # a second public run on top
    for run in ("public", "again"):
        start = resolve_start(tmp_path / run)
        assert (start.public_data_only, start.unrecorded_base) == (False, str(bare))
    _train(*PRIVATE["edp-sgd"], "--init-from", tmp_path / "again", "--data", data_dir, "--out", tmp_path / "dp")
    record = read_privacy_record(tmp_path / "dp" / "privacy.json")
    assert record.epsilon is not None and record.init_from["unrecorded_base"] == str(bare)
    assert "accepted_private" not in record.init_from
    assert f"it holds only if the Hugging Face model {bare}, from which" in claim_of_record(record).text()
    _train(
        "--trainer",
        "edp-sgd",
        *TORCH,
        "--non-private",
        "--init-from",
        bare,
        "--data",
        data_dir,
        "--out",
        tmp_path / "np",
    )
    assert resolve_start(tmp_path / "np").unrecorded_base is None  # it trained on train.jsonl: refused as before


def test_a_privacy_record_written_before_these_fields_still_reads(started_runs):
    raw = json.loads((started_runs["rgp"] / "privacy.json").read_text())
    for name in ("data_split", "public_data_only", "init_from"):
        raw.pop(name)
    record = PrivacyRecord.from_json(raw)
    assert (record.data_split, record.public_data_only, record.init_from) == ("train", False, None)


# ------------------------------------------------------------------------------------------------
# Trivial baselines.


def test_constant_baselines_on_a_crafted_case():
    targets = np.array([[7, 7, 3, 0], [3, 3, 3, 5], [9, 0, 0, 0]])
    weights = np.array([[1, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]], dtype=float)  # row 2: no prediction
    # Over all 7 predictions: token 3 is right 4 times.
    assert constant_prediction_accuracy(targets, weights, per_example=False) == pytest.approx(4 / 7)
    # Per row, averaged over the 3 rows (a row without prediction counts 0): token 3 scores (1/3 + 3/4 + 0) / 3,
    # token 7 (2/3 + 0 + 0) / 3.
    assert constant_prediction_accuracy(targets, weights, per_example=True) == pytest.approx((1 / 3 + 3 / 4) / 3)
    assert constant_prediction_accuracy(targets, np.zeros_like(weights), per_example=False) is None
    assert majority_class_accuracy([2, 0, 2, 1, 2]) == pytest.approx(3 / 5)
    assert majority_class_accuracy([]) is None
    assert utility_lines({"mlm_accuracy": 0.5, MLM_BASELINE_KEY: 0.0625}) == [
        "held-out MLM accuracy 0.5000 (trivial baseline 0.0625: always the most frequent token)"
    ]


@pytest.mark.parametrize("trainer", ["jax-bert", "edp-sgd", "rgp"])
def test_every_evaluation_row_and_the_summary_carry_the_baseline(trainer, started_runs, data_dir):
    run = started_runs[trainer]
    key, figure = (
        (MLM_BASELINE_KEY, "mlm_accuracy") if trainer == "jax-bert" else (CLASSIFY_BASELINE_KEY, "eval_accuracy")
    )
    rows = [row for row in read_jsonl(run / "metrics.jsonl") if figure in row]
    assert rows and all(0.0 < row[key] <= 1.0 for row in rows)
    summary = _manifest(run)["summary"]
    assert summary[key] == rows[-1][key] and key in summary["baselines"]
    if trainer != "jax-bert":  # the majority class of the 8 evaluated heldout rows, from the files themselves
        inject = load_inject_run(data_dir)
        labels = public_label_set(inject)
        ids = [labels.id_of(lab) for lab in inject.split("heldout.jsonl").labels]
        ids = [i for i in ids if i is not None][:8]
        assert summary[key] == pytest.approx(np.bincount(ids).max() / len(ids))
