"""The built-in voice-assistant corpus: coverage, determinism, distinctness and quotas."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.corpus import assistant


def test_intents_cover_the_six_domains():
    assert len(assistant.INTENTS) >= 10
    assert set(assistant.DOMAINS) == {"communication", "health", "media", "shopping", "travel", "smart home"}
    assert len({i.name for i in assistant.INTENTS}) == len(assistant.INTENTS)


def test_slot_fillers_of_every_kind_are_used():
    used = {slot for intent in assistant.INTENTS for t in intent.templates for slot in assistant._slot_names(t)}
    # names, numbers, places, times, medications, titles
    assert {"contact", "phone", "order", "city", "place", "when", "clock", "medication", "movie", "song"} <= used
    rows = list(assistant.generate(3000, 0))
    texts = " | ".join(r["text"] for r in rows)
    assert "prescription" in texts and "aspirin" in texts


def test_generation_is_deterministic_and_seeded():
    a = list(assistant.generate(500, 7))
    assert a == list(assistant.generate(500, 7))
    assert a != list(assistant.generate(500, 8))
    assert all(set(r) == {"text", "label"} for r in a)


def test_one_hundred_thousand_distinct_utterances():
    assert assistant.capacity() >= assistant.max_size() >= 1_000_000
    rows = list(assistant.generate(100_000, 1))
    assert len({r["text"] for r in rows}) == 100_000
    counts = Counter(r["label"] for r in rows)
    assert set(counts) == {i.name for i in assistant.INTENTS}
    # Equal shares except intents capped at half their capacity.
    quotas = assistant.intent_quotas(100_000)
    assert counts == Counter(quotas)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=assistant.max_size()))
def test_quotas_sum_to_n_and_respect_caps(n):
    quotas = assistant.intent_quotas(n)
    caps = assistant.intent_capacities()
    assert sum(quotas.values()) == n
    assert all(0 <= quotas[k] <= caps[k] // 2 for k in quotas)
    # Water-filling: an intent below the largest quota is one that hit its cap.
    top = max(quotas.values())
    assert all(q >= top - 1 or q == caps[k] // 2 for k, q in quotas.items())


def test_out_of_range_requests_are_rejected():
    with pytest.raises(ValueError, match="n must be in"):
        list(assistant.generate(assistant.max_size() + 1, 0))
    with pytest.raises(ValueError, match="seed must be non-negative"):
        list(assistant.generate(3, -1))
