"""The canary attack: the pseudo-log-likelihood score against a loop oracle and on a crafted
model, the attack's defaults and refusals, and, end to end on tiny non-private models, new-token canaries
separating members from non-members where digit canaries inserted once barely do."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.attacks.registry import DEFAULT_ATTACKS, default_attacks
from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError

NEW = ("qzvxkbwmtr", "plorfniqaz", "hjdwqeyuxo", "bnmcvkzlpq")


def _cli(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """A random tiny BertForMaskedLM whose tokenizer holds :data:`NEW` (a bare Hugging Face directory)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, PreTrainedTokenizerFast

    from dpaudit.training.tokenizer import train_wordpiece

    path = tmp_path_factory.mktemp("crafted") / "hf"
    tok = train_wordpiece(["the cat sat on the mat", "my code is here"] * 4, vocab_size=150, new_tokens=NEW)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=32,
    )
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=32,
    )
    BertForMaskedLM(config).eval().save_pretrained(path)
    fast.save_pretrained(path)
    return path


def _canary(i: int, secret: str, prefix: str = "my code is "):
    from dpaudit.inject_dir.reader import Canary

    return Canary(id=f"c{i}", prefix=prefix, secret=secret, suffix="", format="new-tokens:2", frequency=1, member=True)


def test_pseudo_log_likelihood_equals_a_loop_of_full_forward_passes(crafted):
    import torch

    from dpaudit.scoring import load

    scorer = load(crafted, batch_size=3, progress=False)
    canaries = [
        _canary(0, f"{NEW[0]} {NEW[1]}"),
        _canary(1, f"{NEW[2]} {NEW[2]}"),
        _canary(2, NEW[3], prefix="the cat "),
    ]
    ids = scorer.tokenizer.convert_tokens_to_ids(list(NEW))
    got, within, whole = (
        scorer.pseudo_log_likelihoods(canaries),
        scorer.pseudo_log_likelihoods(canaries, within=ids),
        scorer.pseudo_log_likelihoods(canaries, whole=True),
    )
    for k, c in enumerate(canaries):
        row = scorer.tokenizer(c.text)["input_ids"]
        secret = [p for p, t in enumerate(row) if t in ids]
        expect = {"vocab": 0.0, "within": 0.0, "whole": 0.0}
        for p in range(1, len(row) - 1):  # every non-special position, one masked at a time (float32 model: 1e-5)
            masked = torch.tensor([row[:p] + [scorer.tokenizer.mask_token_id] + row[p + 1 :]])
            with torch.inference_mode():
                logits = scorer.model(input_ids=masked).logits[0, p].double()
            full = torch.log_softmax(logits, -1)[row[p]].item()
            expect["whole"] += full
            if p in secret:
                expect["vocab"] += full
                expect["within"] += torch.log_softmax(logits[ids], -1)[ids.index(row[p])].item()
        assert got[k] == pytest.approx(expect["vocab"], abs=1e-5)
        assert within[k] == pytest.approx(expect["within"], abs=1e-5)
        assert whole[k] == pytest.approx(expect["whole"], abs=1e-5)
    with pytest.raises(UserInputError, match="not among the candidate tokens"):
        scorer.pseudo_log_likelihoods(canaries, within=ids[:2])


def test_a_token_the_model_predicts_scores_higher(crafted):
    """Crafted: raise the output bias of two new tokens (as training on their canaries would): their canaries' scores
    rise, the others' fall (normalized over the new tokens), and every raised canary scores above every other one."""
    import torch

    from dpaudit.scoring import load

    scorer = load(crafted, batch_size=8, progress=False)
    ids = scorer.tokenizer.convert_tokens_to_ids(list(NEW))
    canaries = [_canary(i, f"{t} {t}") for i, t in enumerate(NEW)]
    before = scorer.pseudo_log_likelihoods(canaries, within=ids)
    with torch.no_grad():
        scorer.model.cls.predictions.bias[ids[:2]] += 6.0
    after = scorer.pseudo_log_likelihoods(canaries, within=ids)
    assert after[:2].min() > after[2:].max() and np.all(after[:2] > before[:2]) and np.all(after[2:] < before[2:] - 6.0)


def test_defaults_gain_the_canary_attack_on_coin_flip_canaries_of_a_masked_lm():
    assert default_attacks(list(DEFAULT_ATTACKS), coin_flip=True, model_kind="masked-lm") == [
        *DEFAULT_ATTACKS,
        "canary",
    ]
    assert default_attacks(list(DEFAULT_ATTACKS), coin_flip=False, model_kind="masked-lm") == list(DEFAULT_ATTACKS)
    assert default_attacks(["loss"], coin_flip=True, model_kind="masked-lm") == ["loss"]  # named attacks stay as named
    assert default_attacks(list(DEFAULT_ATTACKS), coin_flip=True, model_kind="classifier") == list(DEFAULT_ATTACKS)


#: Both tiny runs: the same 250-row corpus, 40 coin-flip canaries, the same recipe and batch order.
INJECT = [
    "inject",
    "--corpus",
    "builtin:assistant",
    "--corpus-size",
    "250",
    "--heldout-size",
    "32",
    "--public-size",
    "64",
    "--coin-flip",
    "--per-frequency",
    "40",
    "--seed",
    "4",
]
TRAIN = [
    "train",
    "--trainer",
    "jax-bert",
    "--seed",
    "0",
    "--preset",
    "tiny",
    "--batch-size",
    "32",
    "--physical-batch",
    "32",
    "--max-length",
    "24",
    "--learning-rate",
    "3e-3",
    "--warmup-steps",
    "10",
    "--weight-decay",
    "0",
    "--mask-prob",
    "0.3",
    "--steps",
    "150",
    "--log-every",
    "50",
    "--eval-every",
    "1000",
    "--checkpoint-every",
    "1000",
    "--non-private",
    "--noise-seed",
    "0",
]


@pytest.fixture(scope="module")
def designed_and_digits(tmp_path_factory):
    """Run folders (data/, model/, attack/) of new-token canaries (default attacks) and of digit canaries (the canary
    attack scores them by exposure)."""
    out = {}
    # Both models get one vocabulary size (300 learned tokens for the digits; 260 learned plus the 40 new tokens for
    # the designed canaries; the corpus has 340): one shape, so the second training loads every XLA program the
    # first compiled from the suite's compilation cache instead of compiling its own.
    for name, design, attacks, vocab in (
        ("new-tokens", ["--design", "new-tokens:8"], [], "260"),
        ("digits", ["--format", "digits:4", "--template", "code {secret}"], ["--attacks", "canary"], "300"),
    ):
        root = tmp_path_factory.mktemp(name.replace("-", ""))
        _cli(*INJECT, *design, "--out", str(root / "data"))
        _cli(*TRAIN, "--vocab-size", vocab, "--data", str(root / "data"), "--out", str(root / "model"))
        printed = _cli(
            "attack",
            "--model",
            str(root / "model"),
            "--data",
            str(root / "data"),
            "--out",
            str(root / "attack"),
            *attacks,
        )
        (root / "attack-summary.txt").write_text(printed)  # what dpaudit attack printed
        out[name] = root
    vocab = {
        name: json.loads((root / "model" / "model" / "config.json").read_text())["vocab_size"]
        for name, root in out.items()
    }
    assert vocab == {"new-tokens": 300, "digits": 300}, vocab  # one shape for both (see above)
    return out


@pytest.mark.slow  # two tiny trainings and attacks: ~24 s on an idle 2-core CPU
def test_new_token_canaries_are_told_apart_where_digit_canaries_barely_are(designed_and_digits):
    from dpaudit.attacks.canary import fit_lines
    from dpaudit.attacks.run import read_attack_dir
    from dpaudit.verdict.headline import headline_of

    designed = read_attack_dir(designed_and_digits["new-tokens"] / "attack")
    assert [r.attack for r in designed.attacks] == [
        "exposure",
        "reconstruction",
        "canary",
    ]  # the one-run audit by default
    task = designed["canary"]["canaries"]
    head = headline_of(designed)
    assert task.auc == 1.0 and task.n_members + task.n_nonmembers == 40
    assert head.best is not None and head.best.kind == "proof" and head.best.epsilon > 0.5
    assert (
        designed["canary"].parameters["design"] == "new-tokens"
        and "new tokens" in designed["canary"].parameters["score"]
    )
    digits = read_attack_dir(designed_and_digits["digits"] / "attack")["canary"]["canaries"]
    assert digits.auc < task.auc - 0.2, digits.auc  # one insertion of a digit canary is barely memorized
    fit = task.info["gauss_pair"]  # the Gaussian-pair fit beside the proof, in results.json, never the headline
    assert fit["epsilon"] > head.best.epsilon and fit["claimed_epsilon"] is None and fit["n_members"] == task.n_members
    lines = fit_lines(designed.attacks)
    assert len(lines) == 1 and "canary/canaries" in lines[0] and "not a bound" in lines[0], lines
    assert lines[0] in (designed_and_digits["new-tokens"] / "attack-summary.txt").read_text()  # printed by attack


@pytest.mark.slow  # two tiny trainings and attacks: ~24 s on an idle 2-core CPU
def test_a_model_without_the_new_tokens_is_refused(designed_and_digits, tmp_path):
    data, other = designed_and_digits["new-tokens"] / "data", designed_and_digits["digits"] / "model"
    result = CliRunner().invoke(
        cli,
        ["attack", "--model", str(other), "--data", str(data), "--out", str(tmp_path / "a"), "--attacks", "canary"],
        catch_exceptions=False,
    )
    assert result.exit_code == 2 and "its tokenizer lacks 40 of the 40 new tokens" in result.output, result.output
    assert not (tmp_path / "a").exists()
    manifest = json.loads((data / "manifest.json").read_text())
    assert len(manifest["new_tokens"]) == 40


def test_the_gauss_pair_fit_reads_gaussian_scores_and_is_labelled_evidence_not_a_bound():
    """The black-box Gaussian-pair fit: on Gaussian scores of separation 0.75 (about the AUC 0.70 of the epsilon-4
    audit) it stays below the pair's own epsilon and its separation below the sample's; its ceiling and canaries are
    the fit's; and on scores that are not Gaussian (randomized response at epsilon 1) it reads above the mechanism's
    own epsilon, which is why it is printed as evidence, never as a bound (dpaudit.attacks.canary)."""
    from dpaudit.attacks.canary import FIT_HOLDS_FOR, gauss_pair_fit
    from dpaudit.audit import gauss_pair

    rng = np.random.default_rng(7)
    fit = gauss_pair_fit(rng.normal(0.75, 1, 500), rng.normal(0, 1, 500), delta=1e-5, confidence=0.95, claimed=4.0)
    truth = gauss_pair.epsilon_of(0.75, 1e-5)
    assert 0 < fit["epsilon"] < truth and fit["mu"] < fit["mu_point"], fit
    assert abs(fit["asymptote"] - truth) < 0.6 and fit["asymptote"] < 4.0, fit
    assert fit["canaries_needed_at_mu_point"] is None  # a pair of this separation never reads epsilon 4
    assert fit["ceiling"] == gauss_pair.ceiling(delta=1e-5) and fit["canaries_needed"] < 100
    assert fit["holds_for"] == FIT_HOLDS_FOR and "not a bound" in FIT_HOLDS_FOR and fit["corrected"] is False
    p = math.e / (1 + math.e)  # randomized response, epsilon 1: a member's bit is 1 with probability e / (1 + e)
    bits = gauss_pair_fit(
        (rng.random(5000) < p).astype(float),
        (rng.random(5000) < 1 - p).astype(float),
        delta=1e-5,
        confidence=0.95,
        claimed=None,
    )
    assert bits["epsilon"] > 1.0 and bits["canaries_needed"] is None, bits
