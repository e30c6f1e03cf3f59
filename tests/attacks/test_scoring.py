"""The scorer: masked-secret log-probabilities equal a plain transformers forward pass, and bad
model directories are refused with one-line errors before anything is loaded."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit import scoring
from dpaudit.canaries.manifest import load_inject_run
from dpaudit.common.errors import UserInputError


@pytest.fixture(scope="module")
def scorer(canary_model):
    return scoring.load(canary_model, batch_size=5, progress=False)


def _reference(model_dir, canary, reveal=0):
    """[positions - reveal, 10] log-softmax over the digit tokens, from the stock HF forward pass."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    model = AutoModelForMaskedLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    enc = tok(canary.text, return_offsets_mapping=True)
    start, end = len(canary.prefix), len(canary.prefix) + len(canary.secret)
    pos = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a >= start and b <= end][reveal:]
    ids = torch.tensor([enc["input_ids"]])
    ids[0, pos] = tok.mask_token_id
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, pos].double()
    digits = [tok.convert_tokens_to_ids(str(d)) for d in range(10)]
    return torch.log_softmax(logits[:, digits], dim=-1).numpy()


def test_masked_log_probs_equal_the_full_forward_pass(scorer, canary_model, canary_data):
    run = load_inject_run(canary_data)
    lp = scorer.masked_log_probs(run.canaries, run.space)
    assert lp.shape == (len(run.canaries), 4, 10) and lp.dtype == np.float64
    np.testing.assert_allclose(np.exp(lp).sum(-1), 1.0, atol=1e-12)  # a distribution over the space
    for i in (0, len(run.canaries) - 1):
        np.testing.assert_allclose(lp[i], _reference(canary_model / "model", run.canaries[i]), atol=1e-5)
    revealed = scorer.masked_log_probs(run.canaries, run.space, reveal=2)
    assert revealed.shape == (len(run.canaries), 2, 10)
    np.testing.assert_allclose(revealed[0], _reference(canary_model / "model", run.canaries[0], reveal=2), atol=1e-5)


def test_batching_and_padding_do_not_change_scores(canary_model, canary_data):
    run = load_inject_run(canary_data)
    one = scoring.load(canary_model, batch_size=1, progress=False).masked_log_probs(run.canaries, run.space)
    many = scoring.load(canary_model, batch_size=64, progress=False).masked_log_probs(run.canaries, run.space)
    np.testing.assert_allclose(one, many, atol=1e-5)


def test_example_losses_use_a_fixed_masking_per_text(scorer):
    texts = ["set an alarm for seven", "play some music please", "what is the weather like today", "call my sister"]
    a = scorer.example_losses(texts, seed=3)
    b = scorer.example_losses(texts[::-1], seed=3)[::-1]
    np.testing.assert_allclose(a, b, atol=1e-6)  # the mask of a text does not depend on order or batch
    assert np.all(np.isfinite(a)) and np.all(a > 0)
    assert not np.allclose(a, scorer.example_losses(texts, seed=4))
    features = scorer.example_features(texts, seed=3, top_k=5)
    np.testing.assert_allclose(features.loss, a, atol=1e-6)
    assert features.matrix().shape == (4, 7)
    assert np.all(np.diff(features.top_probs, axis=1) <= 1e-12)  # sorted, descending


def test_classifier_scores(classifier_model):
    clf = scoring.load(classifier_model, progress=False)
    assert clf.kind == "classifier"
    probs = clf.class_probs(["play music", "set an alarm"])
    assert probs.shape == (2, 3)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-9)
    losses = clf.example_losses(["play music", "set an alarm"], labels=[0, 2])
    np.testing.assert_allclose(losses, -np.log(probs[[0, 1], [0, 2]]), rtol=1e-6)
    np.testing.assert_allclose(
        clf.example_features(["play music"], labels=[1]).top_probs[0], np.sort(probs[0])[::-1], rtol=1e-6
    )
    with pytest.raises(UserInputError, match="needs a masked-lm model"):
        clf.masked_log_probs([], None)


def test_pickle_only_checkpoint_is_refused(bare_model):
    (bare_model / "model.safetensors").rename(bare_model / "pytorch_model.bin")
    with pytest.raises(UserInputError, match="pickle"):
        scoring.resolve_model(bare_model)


@pytest.mark.parametrize(
    "remove, message",
    [
        (["model.safetensors"], "no model.safetensors"),
        (["tokenizer.json"], "no tokenizer"),
        (["config.json"], "no config.json"),
    ],
)
def test_incomplete_model_directories_are_refused(bare_model, remove, message):
    for name in remove:
        (bare_model / name).unlink()
    with pytest.raises(UserInputError, match=message):
        scoring.resolve_model(bare_model)


def test_changed_run_directory_is_refused(canary_model, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(canary_model, run, ignore=shutil.ignore_patterns("checkpoints"))
    privacy = json.loads((run / "privacy.json").read_text())
    (run / "privacy.json").write_text(json.dumps({**privacy, "epsilon": 0.1}))
    with pytest.raises(UserInputError, match="privacy.json was changed"):
        scoring.resolve_model(run)


def test_secret_split_into_several_tokens_names_the_canary(bare_model, canary_data):
    from tokenizers import Tokenizer, normalizers

    run = load_inject_run(canary_data)
    canary = run.canaries[0]
    digit = canary.secret.split()[0]
    tok = Tokenizer.from_file(str(bare_model / "tokenizer.json"))
    tok.normalizer = normalizers.Sequence([tok.normalizer, normalizers.Replace(digit, digit + digit)])
    tok.save(str(bare_model / "tokenizer.json"))
    scorer = scoring.load(bare_model, progress=False)
    with pytest.raises(UserInputError, match=f"canary {canary.id}: its secret"):
        scorer.masked_log_probs(run.canaries, run.space)


def test_bert_head_runs_only_at_masked_positions(scorer):
    # BertForMaskedLM splits into the encoder and one head module: the fast path is taken.
    assert scorer._encoder is scorer.model.bert and scorer._head is scorer.model.cls


def test_importing_the_core_stays_light():
    import subprocess
    import sys

    code = (
        "import sys, dpaudit, dpaudit.attacks, dpaudit.scoring, dpaudit.attacks.registry\n"
        "assert callable(dpaudit.attack)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'jax', 'scipy') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
