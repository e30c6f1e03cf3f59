"""The causal-LM scorer: exact next-token log-probabilities, padding invariance, secret scores, and a
GPT-2-style byte-level BPE tokenizer with and without a BOS token. Every expected number is computed here from
the Hugging Face model's own ``model(input_ids).logits``."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

TEXTS = ["my pin code is 4 8 1 5", "please call me back at 555 0199 tomorrow, the meeting moved to room 12 on friday"]


@dataclass(frozen=True)
class Canary:
    id: str
    prefix: str
    secret: str
    suffix: str


@pytest.fixture(scope="module")
def scorer(tiny_causal_dir):
    from dpaudit.scoring import load

    return load(tiny_causal_dir, batch_size=4, device="cpu", progress=False)


def _by_hand(model, ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(log p(x_t | x_<t) for t >= 1, [t, vocab] log-softmax rows) from the model's own logits on one unpadded text."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    rows = torch.log_softmax(logits[:-1], dim=-1)
    return rows.gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy(), rows.numpy()


def test_token_log_probs_are_the_models_own_and_ignore_padding(scorer):
    from transformers import AutoTokenizer

    from dpaudit.scoring.causal import CausalScorer

    assert isinstance(scorer, CausalScorer) and scorer.kind == "causal-lm"
    raw = AutoTokenizer.from_pretrained(scorer.source.model_dir)
    batched = scorer.token_log_probs(TEXTS)
    alone = [scorer.token_log_probs([t])[0] for t in TEXTS]
    for text, got, single in zip(TEXTS, batched, alone):
        ids = raw(text)["input_ids"]
        assert raw.convert_ids_to_tokens([ids[0], ids[-1]]) == ["[CLS]", "[SEP]"]  # convention 1: [CLS] text [SEP]
        want, _ = _by_hand(scorer.model, ids)
        assert got.shape == (len(ids) - 1,)  # every token after the first, the closing [SEP] included
        np.testing.assert_allclose(single, want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got, single, rtol=0, atol=1e-5)  # the short text beside a longer one: same


def test_token_statistics_losses_and_features(scorer):
    stats = scorer.token_statistics(TEXTS)
    losses = scorer.example_losses(TEXTS)
    features = scorer.example_features(TEXTS, top_k=3)
    for i, text in enumerate(TEXTS):
        ids = scorer.tokenizer(text)["input_ids"]
        want, rows = _by_hand(scorer.model, ids)
        p = np.exp(rows)
        mu = (p * rows).sum(-1)
        sigma = np.sqrt((p * (rows - mu[:, None]) ** 2).sum(-1))
        np.testing.assert_allclose(stats.log_probs[i], want, atol=1e-5)
        np.testing.assert_allclose(stats.mean[i], mu, atol=1e-5)
        np.testing.assert_allclose(stats.std[i], sigma, atol=1e-5)
        assert losses[i] == pytest.approx(-want.mean(), abs=1e-5)
        assert features.loss[i] == pytest.approx(losses[i], abs=1e-9)
        assert features.entropy[i] == pytest.approx(-mu.mean(), abs=1e-5)
        np.testing.assert_allclose(features.top_probs[i], np.sort(p, axis=-1)[:, ::-1][:, :3].mean(0), atol=1e-6)


def test_secret_scores_sum_the_secret_positions_given_the_prefix(scorer):
    from dpaudit.inject_dir.secret_spaces import digit_space

    a = Canary("a", "my pin code is ", "4 8 1 5", " and that is all")
    b = Canary("b", "my pin code is ", "4 8 1 5", ", call me")  # another suffix: not scored
    per_token = scorer.secret_token_log_probs([a, b], digit_space(4))
    whole = scorer.token_log_probs(["my pin code is 4 8 1 5"])[0]
    # [CLS] my pin code is 4 8 1 5 [SEP]: the secret is tokens 5..8, scored by entries 4..7 of the text's log-probs.
    np.testing.assert_allclose(per_token[0], whole[4:8], atol=1e-5)
    np.testing.assert_allclose(per_token[1], per_token[0], atol=1e-5)
    totals = scorer.secret_log_likelihoods([a, b])
    assert totals == pytest.approx([whole[4:8].sum()] * 2, abs=1e-5)


def test_masked_lm_methods_refuse_a_causal_model_in_one_line(scorer):
    from dpaudit.common.errors import UserInputError
    from dpaudit.inject_dir.secret_spaces import digit_space

    with pytest.raises(UserInputError, match="needs a masked-lm model") as err:
        scorer.masked_log_probs([Canary("a", "pin ", "1 2", "")], digit_space(2))
    assert "\n" not in str(err.value)


def _bpe_model_dir(path, *, bos: bool):
    """A tiny GPT-2 with a byte-level BPE trained here (GPT-2's "<|endoftext|>" as its BOS, or no BOS at all)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    corpus = [
        "the quick brown fox jumps over the lazy dog",
        "my pin code is 4815 and my card is 9273",
        "please call me back tomorrow at noon",
    ] * 4
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(corpus, vocab_size=320, min_frequency=2, special_tokens=["<|endoftext|>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer, **({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"} if bos else {})
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=bpe.get_vocab_size(), n_layer=1, n_embd=32, n_head=2, n_positions=64))
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("bos", [False, True], ids=["no-bos", "bos"])
def test_byte_level_bpe_loads_and_scores(tmp_path, bos):
    from dpaudit.scoring import load

    path = _bpe_model_dir(tmp_path / "gpt2", bos=bos)
    assert json.loads((path / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    scorer = load(path, batch_size=2, device="cpu", progress=False)
    text = "my pin code is 4815"
    raw = scorer.tokenizer._tokenizer(text)["input_ids"]
    ids = scorer.tokenizer(text)["input_ids"]
    if bos:  # convention 2: BOS prepended, so every token of the text is scored
        assert ids == [scorer.tokenizer.bos_token_id, *raw]
    else:  # no BOS at all: the first token is context only
        assert ids == raw
    got = scorer.token_log_probs([text, text + " and my card is 9273"])[0]
    want, _ = _by_hand(scorer.model, ids)
    assert got.shape == (len(ids) - 1,)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # The secret's first token carries the space before it ("Ġ48..."): it is still the secret's, not the context's.
    secret = scorer.secret_token_log_probs([Canary("c", "my pin code is ", "4815", " ok")])[0]
    positions = [
        i for i, (a, b) in enumerate(scorer.tokenizer(text, return_offsets_mapping=True)["offset_mapping"]) if b > 15
    ]
    np.testing.assert_allclose(secret, want[[p - 1 for p in positions]], atol=1e-5)


def test_the_full_forward_pass_gives_the_same_numbers(tiny_causal_dir, scorer):
    """The head runs on the scored positions only when a probe shows head(transformer(x)) is the model's logits;
    otherwise (a model that changes its logits in forward) the full forward pass: the same numbers either way."""
    from dpaudit.scoring import load

    assert scorer._encoder is not None  # GPT-2: the split passed the probe
    full = load(tiny_causal_dir, batch_size=4, device="cpu", progress=False)
    full._encoder = full._head = None
    for a, b in zip(full.token_statistics(TEXTS).std, scorer.token_statistics(TEXTS).std):
        np.testing.assert_allclose(a, b, atol=1e-6)
    for a, b in zip(full.token_log_probs(TEXTS), scorer.token_log_probs(TEXTS)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_model_that_rescales_its_logits_is_scored_by_its_own_forward(tiny_causal_dir, scorer):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from dpaudit.scoring.causal import CausalScorer

    model = AutoModelForCausalLM.from_pretrained(tiny_causal_dir).eval()
    plain = model.forward

    def doubled(*args, **kwargs):  # like a logit scale or soft-cap applied in forward (Cohere, Gemma 2)
        out = plain(*args, **kwargs)
        out.logits = 2 * out.logits
        return out

    model.forward = doubled
    rescaled = CausalScorer(
        scorer.source, model, AutoTokenizer.from_pretrained(tiny_causal_dir), batch_size=4, device="cpu", progress=False
    )
    assert rescaled._encoder is None  # the probe saw head(transformer(x)) differ from the logits
    ids = scorer.tokenizer(TEXTS[0])["input_ids"]
    with torch.no_grad():
        logits = 2 * plain(input_ids=torch.tensor([ids])).logits[0].double()
    want = torch.log_softmax(logits[:-1], -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
    np.testing.assert_allclose(rescaled.token_log_probs(TEXTS[:1])[0], want, atol=1e-6)
