"""Causal exposure: the prefix tree scores every candidate exactly as scoring its full text does."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dpaudit.attacks.exposure import tie_secret_draws, tree_rank
from dpaudit.attacks.exposure_rank import sampled_exposure
from dpaudit.common.errors import UserInputError
from dpaudit.inject_dir.secret_spaces import ProductSpace
from dpaudit.scoring import causal_secrets as cs

DIGITS3 = ProductSpace(kind="digits", alphabet=[str(i) for i in range(10)], length=3)
#: A canary of the tiny model's own texts (tests/conftest.py TINY_CAUSAL_TEXTS), with a suffix that is not scored.
CANARY = SimpleNamespace(id="c0", prefix="my pin code is ", secret="4 8 1", suffix=" and my card is 9 2 7 3")


@pytest.fixture(scope="module")
def tiny(tiny_causal_dir):
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_causal_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_causal_dir).eval()
    return model, tokenizer


def _candidates(space, canary):
    return [
        SimpleNamespace(id=f"r{i}", prefix=canary.prefix, secret=space.secret_of(digits), suffix=canary.suffix)
        for i, digits in enumerate(np.ndindex(*(len(space.alphabet),) * space.length))
    ]


def test_prefix_tree_equals_brute_force(tiny):
    """Every candidate's tree score equals its full text's score (one forward pass per text, no cache), and the
    secret's rank from the tree equals the brute-force rank (no candidate within 1e-4 of the secret: no ties)."""
    model, tokenizer = tiny
    (secret,), alphabet = cs.alphabet_secrets(tokenizer, [CANARY], DIGITS3, max_length=64)
    assert len(secret.secret) == 3 and secret.context[0] == model.config.bos_token_id  # [CLS] starts the context
    tree = cs.prefix_tree_scores(model, secret.context, alphabet, 3, device="cpu", node_batch=97)  # chunks cut levels
    located = cs.span_secrets(tokenizer, _candidates(DIGITS3, CANARY), max_length=64)  # each text tokenized afresh
    assert all(c.context == secret.context and len(c.secret) == 3 for c in located)
    brute = cs.sequence_log_likelihoods(model, tokenizer, located, device="cpu", batch_size=250)
    assert tree.shape == (1000,)
    np.testing.assert_allclose(tree, brute, rtol=0, atol=1e-5)
    index = int(np.ravel_multi_index(DIGITS3.index_of(CANARY.secret), (10, 10, 10)))
    assert np.abs(np.delete(brute, index) - brute[index]).min() > 1e-4  # ties none: the ranks are comparable
    from_tree = tree_rank(tree, index, tolerance=1e-9)
    brute_better = int(np.count_nonzero(brute > brute[index]))
    assert (from_tree.rank_low, from_tree.rank_high, from_tree.method) == (
        brute_better + 1,
        brute_better + 1,
        "enumerate",
    )
    assert 1 < from_tree.rank_low < 1000  # a random model: neither extreme, so the comparison could fail
    # The sampled references reuse the prefix cache: the same scores as the full texts.
    rows = np.asarray([[4, 8, 1], [0, 0, 0], [9, 9, 9], [3, 1, 4]])
    sampled = cs.candidate_scores(model, secret.context, alphabet[rows], device="cpu")
    np.testing.assert_allclose(sampled, brute[[np.ravel_multi_index(r, (10,) * 3) for r in rows]], rtol=0, atol=1e-5)
    # Carlini et al.'s interpolation from all 1000 candidates as references is the exact rank (no ties).
    assert sampled_exposure(tree[index], tree, 1000, tolerance=1e-9).rank_low == from_tree.rank_low


def test_symbols_that_are_not_single_tokens_are_refused_by_the_exact_path(tiny):
    """A words:N alphabet whose words the tokenizer splits: the exact path refuses in one line (the attack then
    samples), while the text path still finds the secret's tokens after its context."""
    _, tokenizer = tiny
    space = ProductSpace(kind="words", alphabet=["quick", "zebrafish"], length=2)
    canary = SimpleNamespace(id="w0", prefix="the ", secret="quick zebrafish", suffix="")
    with pytest.raises(UserInputError, match="one token"):
        cs.alphabet_secrets(tokenizer, [canary], space, max_length=64)
    (span,) = cs.span_secrets(tokenizer, [canary], max_length=64)
    assert tokenizer.decode(span.secret).replace(" ##", "").replace(" ", "") == "quickzebrafish"
    assert tokenizer.decode(span.context[1:]) == "the"


def test_a_space_whose_symbols_split_is_sampled_from_the_texts(tiny, tiny_causal_dir):
    """The exposure attack on a causal LM whose tokenizer splits a symbol: every candidate's text scored (the sampled
    path's text branch), the secret among them scored the same way, the reason recorded."""
    from dpaudit.attacks.base import AttackContext
    from dpaudit.attacks.exposure import ExposureAttack
    from dpaudit.attacks.registry import AttackOptions

    model, tokenizer = tiny
    space = ProductSpace(kind="words", alphabet=["quick", "zebrafish", "dog"], length=2)
    canaries = [
        SimpleNamespace(id=f"w{i}", prefix="the ", secret=s, suffix=" jumps", frequency=f)
        for i, (s, f) in enumerate([("quick dog", 1), ("zebrafish quick", 0), ("dog dog", 0)])
    ]
    from dpaudit.scoring import load

    scorer = load(tiny_causal_dir, batch_size=16, device="cpu", progress=False)  # the scorer scores the texts' secrets
    context = AttackContext(
        scorer=scorer, canaries=canaries, space=space, data=None, options=AttackOptions(exposure_samples=50, seed=3)
    )
    outcome = ExposureAttack().run(context)
    assert {f["rank_method"] for f in outcome.canary_fields.values()} == {"sampled-interpolation"}
    assert "not single tokens" in outcome.result.warnings[0]
    # The interpolated rank is the secret's place among the same 50 draws, scored text by text here by the oracle
    # (full forward passes, written apart from the scorer).
    references = cs.sampled_candidates(space, 50, seed=3)
    texts = [SimpleNamespace(id="r", prefix="the ", secret=space.secret_of(r), suffix="") for r in references]
    refs = cs.sequence_log_likelihoods(
        model, tokenizer, cs.span_secrets(tokenizer, texts, max_length=64), device="cpu", batch_size=64
    )
    own = cs.sequence_log_likelihoods(
        model, tokenizer, cs.span_secrets(tokenizer, canaries[:1], max_length=64), device="cpu", batch_size=1
    )[0]
    # A draw of the secret itself ties with it by identity (the attack's rule), whatever the batches' float noise.
    refs = np.where(np.all(references == np.asarray(space.index_of("quick dog")), axis=1), own, refs)
    assert np.count_nonzero(refs == own) >= 2  # the secret was drawn (9 candidates, 50 draws): the case is exercised
    expected = sampled_exposure(own, refs, 9, tolerance=1e-9)
    got = outcome.canary_fields["w0"]
    assert (got["rank_low"], got["rank_high"]) == (expected.rank_low, expected.rank_high)


def test_draws_of_the_secret_itself_tie_with_it_whatever_the_float_noise():
    """The same text scored in another batch differs by float noise; a sampled draw of the secret is the secret, so
    it ties with it (rank interval over both sides), never lands on one side by that noise."""
    rows = np.array([[0, 2], [1, 1], [0, 2], [2, 0], [0, 2]])
    scores = np.array([-5.0, -4.0, -5.0 + 3e-7, -6.0, -5.0 - 3e-7])
    tied = tie_secret_draws(scores, rows)
    assert tied.tolist() == [-5.0, -4.0, -5.0, -6.0, -5.0] and scores[2] != -5.0  # a copy: the input is unchanged
    interval = sampled_exposure(tied[0], tied[1:], 9, tolerance=1e-9)
    exact = sampled_exposure(-5.0, np.array([-4.0, -5.0, -6.0, -5.0]), 9, tolerance=1e-9)
    assert (interval.rank_low, interval.rank_high) == (exact.rank_low, exact.rank_high)
    noisy = sampled_exposure(scores[0], scores[1:], 9, tolerance=1e-9)
    assert (noisy.rank_low, noisy.rank_high) != (interval.rank_low, interval.rank_high)  # what the noise did before


def test_a_byte_level_bpe_without_bos_gets_its_in_context_alphabet():
    """GPT-2-style byte-level BPE, no BOS (convention 2): a digit after a space is "Ġ4", not the "4" of the alphabet
    alone; the tree runs over the in-context tokens, the first context token is context only, and it still equals
    scoring each candidate's full text."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["my pin code is 4 8 1 5", "x " + " ".join(str(i % 10) for i in range(300))], vocab_size=300, min_frequency=1
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=len(tokenizer),
            n_layer=1,
            n_embd=32,
            n_head=2,
            n_positions=32,
            bos_token_id=None,
            eos_token_id=None,
        )
    ).eval()
    (secret,), alphabet = cs.alphabet_secrets(tokenizer, [CANARY], DIGITS3, max_length=32)
    assert tokenizer.convert_ids_to_tokens(alphabet.tolist()) == [f"Ġ{d}" for d in range(10)]
    assert tokenizer.decode(secret.context) == "my pin code is"  # no BOS: its first token is context only
    tree = cs.prefix_tree_scores(model, secret.context, alphabet, 3, device="cpu")
    brute = cs.sequence_log_likelihoods(
        model,
        tokenizer,
        cs.span_secrets(tokenizer, _candidates(DIGITS3, CANARY), max_length=32),
        device="cpu",
        batch_size=500,
    )
    np.testing.assert_allclose(tree, brute, rtol=0, atol=1e-5)


def test_the_alphabet_is_read_after_a_space_as_secrets_stand_in_their_sentence():
    """Byte-level BPE: "0" at the start of a text and "Ġ0" after a space are two tokens; the masked LM's exposure table
    (scoring.targets.alphabet_token_ids) must use the in-sentence form for every symbol, the first one included."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from dpaudit.scoring.targets import alphabet_token_ids

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["0 1 2 3 4 5 6 7 8 9", "x " + " ".join(str(i % 10) for i in range(300))], vocab_size=300, min_frequency=1
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)
    assert tokenizer.convert_ids_to_tokens(tokenizer("0")["input_ids"]) == ["0"]  # the start-of-text form exists
    ids = alphabet_token_ids(tokenizer, DIGITS3)
    assert tokenizer.convert_ids_to_tokens(ids.tolist()) == [f"Ġ{d}" for d in range(10)]
