"""Schedule arithmetic, splits, the training order, row encoding, and secret selection."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.canaries.generate import (
    Canary,
    OccurrenceIndex,
    build_canaries,
    canary_ids,
    draw_labels,
    draw_secrets,
    parse_template,
)
from dpaudit.canaries.insert import (
    HELDOUT,
    MEMBER,
    PUBLIC,
    RowEncoder,
    Schedule,
    SplitSpec,
    assign_splits,
    parse_frequencies,
    split_counts,
    train_order,
)
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import dumps_jsonl_line
from dpaudit.inject_dir.secret_spaces import digit_space

frequency_lists = st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=13, unique=True)


@settings(max_examples=80, deadline=None)
@given(
    freqs=frequency_lists,
    per=st.integers(1, 30),
    holdout=st.integers(0, 30),
    members=st.integers(0, 500),
    seed=st.integers(0, 2**32 - 1),
)
def test_schedule_and_train_order_counts_are_exact(freqs, per, holdout, members, seed):
    schedule = Schedule(frequencies=tuple(freqs), per_frequency=per, holdout=holdout)
    f = schedule.canary_frequencies()
    assert len(f) == schedule.n_canaries == per * len(freqs) + holdout
    assert (f == 0).sum() == holdout
    member_rows = np.arange(members) * 3  # any distinct row ids
    order = train_order(member_rows, f, np.random.default_rng(seed))
    assert len(order) == members + per * sum(freqs)
    rows = order[order >= 0]
    assert sorted(rows.tolist()) == member_rows.tolist()
    counts = np.bincount(-order[order < 0] - 1, minlength=len(f))
    assert counts.tolist() == f.tolist()


@settings(max_examples=40, deadline=None)
@given(freq=st.integers(1, 100), n=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_coin_flip_frequencies_are_zero_or_the_one_frequency(freq, n, seed):
    schedule = Schedule(frequencies=(freq,), per_frequency=n, holdout=0, coin_flip=True)
    f = schedule.canary_frequencies(np.random.default_rng(seed))
    assert len(f) == n and set(f.tolist()) <= {0, freq}


def test_coin_flip_is_a_fair_coin():
    schedule = Schedule(frequencies=(1,), per_frequency=10_000, holdout=0, coin_flip=True)
    members = int(schedule.canary_frequencies(np.random.default_rng(0)).sum())
    assert abs(members - 5000) < 4 * 50  # 4 standard deviations of Binomial(10000, 1/2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"frequencies": ()}, "non-empty"),
        ({"frequencies": (1, 0)}, "positive integers"),
        ({"frequencies": (1, 1)}, "distinct"),
        ({"per_frequency": 0}, "per_frequency"),
        ({"coin_flip": True, "holdout": 0}, "exactly one frequency"),
        ({"frequencies": (1,), "coin_flip": True, "holdout": 3}, "holdout must be 0"),
    ],
)
def test_schedule_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Schedule(**kwargs)


@pytest.mark.parametrize("text", ["0", "1,-2", "1,x", "1.5", "", "1,,2", "3,3"])
def test_parse_frequencies_rejects_bad_entries(text):
    with pytest.raises(UserInputError, match="--frequencies"):
        parse_frequencies(text)


@settings(max_examples=80, deadline=None)
@given(n=st.integers(1, 5000), hf=st.floats(0, 0.49), pf=st.floats(0, 0.49), seed=st.integers(0, 2**32 - 1))
def test_split_counts_partition_the_corpus(n, hf, pf, seed):
    spec = SplitSpec(heldout_fraction=hf, public_fraction=pf)
    try:
        counts = split_counts(n, spec)
    except UserInputError:
        assert round(hf * n + 1e-9) + round(pf * n + 1e-9) >= n - 1
        return
    assert counts.total == n and counts.members >= 1
    assert abs(counts.heldout - hf * n) <= 0.5 and abs(counts.public - pf * n) <= 0.5
    codes = assign_splits(counts, np.random.default_rng(seed))
    assert [(codes == c).sum() for c in (MEMBER, HELDOUT, PUBLIC)] == [counts.members, counts.heldout, counts.public]


def test_absolute_split_sizes_and_impossible_requests():
    assert split_counts(100, SplitSpec(heldout_size=7, public_size=0)).members == 93
    with pytest.raises(UserInputError, match="leaving no training members"):
        split_counts(100, SplitSpec(heldout_size=101))


@settings(max_examples=100, deadline=None)
@given(text=st.text(), label=st.one_of(st.text(), st.integers(-5, 5)))
def test_row_encoder_matches_dumps_jsonl_line(text, label):
    assert RowEncoder().line(text) == dumps_jsonl_line({"text": text})
    assert RowEncoder(labels=["z", label]).line(text, 1) == dumps_jsonl_line({"text": text, "label": label})
    assert json.loads(RowEncoder().line(text)) == {"text": text}


def test_template_parsing():
    assert parse_template("my account number is {secret}") == ("my account number is ", "")
    assert parse_template("pin {secret} {not a field}") == ("pin ", " {not a field}")
    for bad in ("no placeholder", "{secret} and {secret}"):
        with pytest.raises(UserInputError, match=r"--template .* needs exactly one \{secret\}"):
            parse_template(bad)


def test_occurrence_is_token_based_and_ignores_punctuation():
    index = OccurrenceIndex(["4 5 6", "apple pie"])
    assert index.scan(["call 4 5 6, please"]) == {("4", "5", "6")}
    assert index.scan(["call 456 now", "4 5 66", "pineapple pie"]) == set()
    assert index.scan(["I like Apple-Pie."]) == {("apple", "pie")}


def test_draw_secrets_skips_secrets_in_the_corpus():
    space = digit_space(1)
    corpus = ["press 0 then 1", "dial 2, 3 or 4", "rooms 5 6 7", "floor 8"]
    draws, rejected = draw_secrets(space, 1, rng=np.random.default_rng(0), corpus_texts=corpus)
    stream = [d.secret for d in space.draws(np.random.default_rng(0))]
    assert [d.secret for d in draws] == ["9"] and rejected == stream.index("9")
    with pytest.raises(UserInputError, match="only 1 of its 10 secrets are usable"):
        draw_secrets(space, 2, rng=np.random.default_rng(0), corpus_texts=corpus)
    with pytest.raises(UserInputError, match="--format digits:1 has only 10 possible secrets but 11"):
        draw_secrets(space, 11, rng=np.random.default_rng(0), corpus_texts=[])
    # The template's own words count as context: a secret equal to them is rejected too.
    draws, _ = draw_secrets(space, 9, rng=np.random.default_rng(0), corpus_texts=[], context_texts=["code 7 is "])
    assert "7" not in {d.secret for d in draws}


def test_draw_secrets_is_deterministic_and_collision_free():
    space = digit_space(3)
    a, _ = draw_secrets(space, 500, rng=np.random.default_rng(5), corpus_texts=["1 2 3"])
    b, _ = draw_secrets(space, 500, rng=np.random.default_rng(5), corpus_texts=["1 2 3"])
    assert a == b and len({d.secret for d in a}) == 500 and "1 2 3" not in {d.secret for d in a}


def test_canaries_and_labels():
    draws, _ = draw_secrets(digit_space(4), 3, rng=np.random.default_rng(0), corpus_texts=[])
    built = build_canaries(
        draws, [2, 1, 0], template_prefix="pin ", template_suffix=".", format="digits:4", labels=["a", "b", "a"]
    )
    assert [c.id for c in built] == ["c0000", "c0001", "c0002"]
    assert built[0].text == "pin " + draws[0].secret + "." and built[2].member is False
    assert Canary.from_record(built[1].to_record()) == built[1]
    assert canary_ids(12_000)[-1] == "c11999"
    picks = draw_labels([0, 900, 100], 4000, rng=np.random.default_rng(0))
    share = np.bincount(picks, minlength=3) / 4000
    assert share[0] == 0 and abs(share[1] - 0.9) < 0.02


def test_phrase_canaries_do_not_carry_each_others_secrets():
    from dpaudit.inject_dir.secret_spaces import PhraseSpace

    shared = "the blue heron flies over the river"
    sentences = [f"on day {i} {shared} at dawn" for i in range(200)]
    space = PhraseSpace(sentences=sentences, words=3)
    draws, rejected = draw_secrets(space, 20, rng=np.random.default_rng(0), corpus_texts=[])
    assert rejected > 0
    for draw in draws:
        padded = f" {draw.secret} "
        for other in draws:
            if other is not draw:
                assert padded not in f" {other.left}{other.secret}{other.right} "
