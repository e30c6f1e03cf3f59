"""Secret spaces: exact sizes, positions, collision-free uniform sampling, word lists, phrases."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import dpaudit
from dpaudit.common.errors import UserInputError
from dpaudit.inject_dir.secret_spaces import (
    PhraseSpace,
    digit_space,
    parse_format,
    read_word_list,
    shipped_words,
    space_from_manifest,
    word_space,
    words_from_texts,
    words_sha256,
)


def test_digit_space_size_positions_and_split():
    space = digit_space(10)
    assert space.format == "digits:10"
    assert space.size == 10**10
    assert space.log2_size == pytest.approx(10 * math.log2(10), abs=1e-12)
    assert space.positions() == [[str(d) for d in range(10)]] * 10
    secret = next(space.draws(np.random.default_rng(0))).secret
    assert len(space.split(secret)) == 10 and all(len(p) == 1 and p.isdigit() for p in space.split(secret))
    assert space.secret_of(space.index_of(secret)) == secret
    with pytest.raises(ValueError, match="not in the digits alphabet"):
        space.index_of("1 2 3 4 5 6 7 8 9 x")


def test_small_space_stream_enumerates_every_secret_once():
    space = digit_space(2)
    secrets = [d.secret for d in space.draws(np.random.default_rng(1))]
    assert len(secrets) == 100 == len(set(secrets))
    assert set(secrets) == {f"{a} {b}" for a in range(10) for b in range(10)}


def test_large_space_draws_are_distinct_and_uniform_per_position():
    space = digit_space(12)  # above the permutation threshold: the rejection sampler
    stream = space.draws(np.random.default_rng(2))
    secrets = [next(stream).secret for _ in range(5000)]
    assert len(set(secrets)) == 5000
    for pos in (0, 11):
        counts = Counter(s.split(" ")[pos] for s in secrets)
        chi2 = sum((counts[str(d)] - 500) ** 2 / 500 for d in range(10))
        assert chi2 < 27.9  # chi-square, 9 degrees of freedom, p = 0.001


def test_shipped_word_list_is_clean_and_hash_matches_file():
    words = shipped_words()
    assert len(words) >= 1000
    assert words == sorted(set(words))
    assert all(w.isalpha() and w.islower() and w.isascii() for w in words)
    path = Path(dpaudit.__file__).parent / "data" / "words.txt"
    assert words_sha256(words) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_word_space_round_trips_through_manifest():
    space = word_space(3, shipped_words(), source="canaries/data/words.txt")
    entry = space.describe()
    assert entry["size"] == len(shipped_words()) ** 3
    assert entry["log2_size"] == pytest.approx(3 * math.log2(len(shipped_words())))
    rebuilt = space_from_manifest(entry)
    assert rebuilt.format == "words:3" and rebuilt.positions() == space.positions()
    entry["word_list"]["words"][0] = "tampered"
    with pytest.raises(UserInputError, match="does not match its sha256"):
        space_from_manifest(entry)


def test_word_list_files(tmp_path):
    path = tmp_path / "w.txt"
    path.write_text("alpha\nbeta\n\ngamma\n", encoding="utf-8")
    assert read_word_list(str(path)) == ["alpha", "beta", "gamma"]
    path.write_text("alpha\nbeta\nalpha\n", encoding="utf-8")
    with pytest.raises(UserInputError, match=r"w\.txt:3: 'alpha' repeats line 1"):
        read_word_list(str(path))
    path.write_text("two words\n", encoding="utf-8")
    with pytest.raises(UserInputError, match="contains whitespace"):
        read_word_list(str(path))


def test_words_from_texts_ranks_by_count():
    texts = ["Call mom, call dad", "call the doctor at 5", "a b"]
    assert words_from_texts(texts, limit=2) == ["at", "call"]  # call x3, then the first of the ties by name
    assert "5" not in words_from_texts(texts) and "a" not in words_from_texts(texts)


def test_phrase_space_draws_real_phrases_with_context():
    sentences = [
        "the quick brown fox jumps over the lazy dog",
        "she sells sea shells by the shore",
        "too short",
        "a cat sat on a warm mat today",
    ]
    space = PhraseSpace(sentences=sentences, words=3, source="p.txt")
    assert space.format == "phrases:3" and space.positions() is None
    draws = list(space.draws(np.random.default_rng(0)))
    assert len(draws) == 3  # one per eligible sentence ("too short" has no room for context)
    for draw in draws:
        assert len(draw.secret.split()) == 3
        assert draw.left + draw.secret + draw.right in sentences
    assert len({d.secret for d in draws}) == 3
    # |R| = distinct 3-word spans of the eligible sentences.
    assert space.size == 7 + 5 + 6


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("digits:10", ("digits", 10)),
        ("words:4", ("words", 4)),
        ("phrases", ("phrases", 3)),
        ("phrases:5", ("phrases", 5)),
    ],
)
def test_parse_format(spec, expected):
    assert parse_format(spec) == expected


@pytest.mark.parametrize("spec", ["digits", "digits:0", "digits:x", "letters:3", "words:65"])
def test_parse_format_errors_name_the_option(spec):
    with pytest.raises(UserInputError, match="--format"):
        parse_format(spec)
