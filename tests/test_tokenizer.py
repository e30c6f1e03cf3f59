"""The WordPiece tokenizer: digits one per token, fixed special ids, determinism, AutoTokenizer, encoding."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import transformers

from dpaudit.trainers.jax_bert.data import encode_texts
from dpaudit.training.tokenizer import SPECIAL_TOKENS, special_token_ids, train_wordpiece

WORDS = "the quick brown fox jumps over lazy dog my account number is secret running jumped quickly".split()


def _corpus(n: int = 400, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))) + f", Call {rng.randint(0, 10**6)}!"
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def tokenizer():
    return train_wordpiece(_corpus(), vocab_size=300, min_frequency=2)


def test_special_token_ids_are_fixed(tokenizer):
    assert special_token_ids(tokenizer) == {"pad": 0, "unk": 1, "cls": 2, "sep": 3, "mask": 4}
    assert [tokenizer.id_to_token(i) for i in range(5)] == list(SPECIAL_TOKENS)


def test_digits_are_single_tokens_and_words_are_learned(tokenizer):
    encoding = tokenizer.encode("My Account number is 2818653197, call 007!")
    assert encoding.tokens == [
        "[CLS]",
        "my",
        "account",
        "number",
        "is",
        *"2818653197",
        ",",
        "call",
        *"007",
        "!",
        "[SEP]",
    ]
    # Digits are in the vocabulary even when the corpus never had them.
    no_digits = train_wordpiece(["the cat sat on the mat"] * 5, vocab_size=200)
    assert no_digits.encode("12").tokens == ["[CLS]", "1", "2", "[SEP]"]
    assert "[UNK]" not in no_digits.encode("zebra").tokens  # the lowercase alphabet is always there
    # Frequent words merge into whole tokens; rare words split into ## continuations.
    assert tokenizer.encode("quickly").tokens == ["[CLS]", "quickly", "[SEP]"]
    assert any(t.startswith("##") for t in tokenizer.encode("foxdogzz").tokens)
    # [MASK] written in text is the mask token (scorers mask secrets this way); lowercasing applies.
    assert tokenizer.encode("FOX [MASK] dog").ids[1:4] == [
        tokenizer.token_to_id("fox"),
        4,
        tokenizer.token_to_id("dog"),
    ]
    assert tokenizer.decode(tokenizer.encode("The quick fox 42").ids) == "the quick fox 4 2"


def test_vocab_size_and_min_frequency_are_respected():
    corpus = _corpus(300, seed=1)
    small = train_wordpiece(corpus, vocab_size=100)
    assert small.get_vocab_size() == 100
    strict = train_wordpiece(corpus, vocab_size=5000, min_frequency=10**6)  # no merge is that frequent
    assert all(len(token.removeprefix("##")) == 1 or token in SPECIAL_TOKENS for token in strict.get_vocab())
    with pytest.raises(ValueError, match="vocab_size must be an integer"):
        train_wordpiece(corpus, vocab_size=10)


def test_deterministic_across_calls_order_and_processes(tokenizer):
    corpus = _corpus()
    assert train_wordpiece(corpus, vocab_size=300).to_str() == tokenizer.to_str()
    assert train_wordpiece(list(reversed(corpus)), vocab_size=300).to_str() == tokenizer.to_str()
    # A fresh process has a fresh hash seed (the Rust trainer's tie-breaking depended on it).
    code = (
        "import sys, random\n"
        "from dpaudit.training.tokenizer import train_wordpiece\n"
        f"exec({_corpus_source()!r})\n"
        "sys.stdout.write(train_wordpiece(_corpus(), vocab_size=300).to_str())\n"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert other == tokenizer.to_str()


def _corpus_source() -> str:
    import inspect

    return f"WORDS = {WORDS!r}\n" + inspect.getsource(_corpus)


def test_autotokenizer_loads_it_with_the_same_ids(tmp_path, tokenizer):
    import jax

    from dpaudit.trainers.jax_bert.hf_io import save_pretrained
    from dpaudit.trainers.jax_bert.model import init_params, preset_config

    config = preset_config("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=32)
    save_pretrained(tmp_path / "model", init_params(config, jax.random.key(0)), config, tokenizer)
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "model")
    text = "My account number is 281 865 3197, secret!"
    assert auto(text)["input_ids"] == tokenizer.encode(text).ids
    assert auto.tokenize("call 2024") == ["call", "2", "0", "2", "4"]
    assert (auto.pad_token_id, auto.unk_token_id, auto.cls_token_id, auto.sep_token_id, auto.mask_token_id) == (
        0,
        1,
        2,
        3,
        4,
    )
    assert auto.model_max_length == 32


def test_encode_texts_pads_truncates_and_leaves_the_tokenizer_alone(tokenizer):
    before = tokenizer.to_str()
    texts = ["the fox", "my account number is 1234567890 and the quick brown fox jumps over", ""]
    out = encode_texts(tokenizer, texts, max_length=8)
    assert out["input_ids"].shape == out["attention_mask"].shape == (3, 8)
    assert out["input_ids"].dtype == np.int32 and out["attention_mask"].dtype == np.int32
    fox = [2, tokenizer.token_to_id("the"), tokenizer.token_to_id("fox"), 3]
    np.testing.assert_array_equal(out["input_ids"][0], fox + [0] * 4)
    np.testing.assert_array_equal(out["attention_mask"][0], [1] * 4 + [0] * 4)
    assert out["input_ids"][1, 0] == 2 and out["input_ids"][1, -1] == 3 and out["attention_mask"][1].all()  # truncated
    np.testing.assert_array_equal(out["input_ids"][2], [2, 3] + [0] * 6)
    assert tokenizer.to_str() == before and tokenizer.padding is None and tokenizer.truncation is None
    assert encode_texts(tokenizer, [], max_length=8)["input_ids"].shape == (0, 8)


def _naive_bpe(word_counts, alphabet: list[str], *, vocab_size: int, min_frequency: int) -> list[str]:
    """Textbook BPE: recount every pair after every merge (the oracle for the incremental loop)."""
    from collections import Counter

    words = sorted(word_counts)
    symbols = [[w[0], *("##" + c for c in w[1:])] for w in words]
    vocab = list(alphabet)
    ids = {token: i for i, token in enumerate(vocab)}
    while len(vocab) < vocab_size:
        pairs = Counter()
        for syms, word in zip(symbols, words):
            for pair in zip(syms, syms[1:]):
                pairs[pair] += word_counts[word]
        if not pairs:
            break
        (left, right), count = min(pairs.items(), key=lambda kv: (-kv[1], ids[kv[0][0]], ids[kv[0][1]]))
        if count < min_frequency:
            break
        new = left + right[2:]
        if new not in ids:
            ids[new] = len(vocab)
            vocab.append(new)
        for i, syms in enumerate(symbols):
            merged, j = [], 0
            while j < len(syms):
                if j + 1 < len(syms) and (syms[j], syms[j + 1]) == (left, right):
                    merged.append(new)
                    j += 2
                else:
                    merged.append(syms[j])
                    j += 1
            symbols[i] = merged
    return vocab


@pytest.mark.parametrize(("vocab_size", "stop"), [(160, "vocab_size"), (1000, "min_frequency")])
def test_incremental_merge_loop_equals_naive_bpe(vocab_size, stop):
    from dpaudit.training import tokenizer as module

    counts = module._count_words(_corpus(300, seed=3) + ["Xylophones zigzag; quixotic jukebox (#42)."] * 2)
    fast = module._learn_vocab(counts, vocab_size=vocab_size, min_frequency=2)
    n_alphabet = next(i for i, t in enumerate(fast) if len(t.removeprefix("##")) > 1 and t not in SPECIAL_TOKENS)
    assert "##" + "x" in fast[:n_alphabet] and "(" in fast[:n_alphabet]
    assert fast == _naive_bpe(counts, fast[:n_alphabet], vocab_size=vocab_size, min_frequency=2)
    assert (len(fast) == vocab_size) == (stop == "vocab_size")


def test_declared_new_tokens_stay_whole_and_change_nothing_else(tmp_path, tokenizer):
    """New-token canaries (dpaudit inject --design new-tokens): the manifest's tokens join the vocabulary after the
    learned one, each one whole token (never [UNK], never split), also through AutoTokenizer; without them the
    tokenizer is byte-identical."""
    import jax

    from dpaudit.trainers.jax_bert.hf_io import save_pretrained
    from dpaudit.trainers.jax_bert.model import init_params, preset_config

    assert train_wordpiece(_corpus(), vocab_size=300, new_tokens=()).to_str() == tokenizer.to_str()
    new = ("qzvxkbwmtr", "plorfniqaz", "quickly")  # "quickly" is learned already: it keeps its id
    extended = train_wordpiece(_corpus(), vocab_size=300, new_tokens=new)
    size = tokenizer.get_vocab_size()
    assert extended.get_vocab_size() == size + 2
    assert [extended.token_to_id(t) for t in new] == [size, size + 1, tokenizer.token_to_id("quickly")]
    assert all(tokenizer.token_to_id(t) == extended.token_to_id(t) for t in tokenizer.get_vocab())
    text = "Dana's code is QZVXKBWMTR plorfniqaz qzvxkbwmtr, call 42"
    assert extended.encode(text).tokens[-9:-3] == ["is", "qzvxkbwmtr", "plorfniqaz", "qzvxkbwmtr", ",", "call"]
    assert "[UNK]" not in extended.encode(text).tokens
    config = preset_config("tiny", vocab_size=extended.get_vocab_size(), max_position_embeddings=32)
    save_pretrained(tmp_path / "model", init_params(config, jax.random.key(0)), config, extended)
    auto = transformers.AutoTokenizer.from_pretrained(tmp_path / "model")
    assert auto(text)["input_ids"] == extended.encode(text).ids
    for bad in (["Upper"], ["two words"], ["digit7"], ["dash-ed"], ["##cont"], ["[MASK]"], ["same", "same"], "word"):
        with pytest.raises(ValueError, match="new.token"):
            train_wordpiece(_corpus(), vocab_size=300, new_tokens=bad)  # one line each, naming the token
