"""``assistant.generate_more``: utterances beside a generated corpus, disjoint from it, with ``generate`` unchanged."""

from __future__ import annotations

from collections import Counter

import pytest

from dpaudit.corpus import assistant


def test_more_utterances_are_distinct_and_disjoint_from_the_corpus():
    corpus = list(assistant.generate(400, 2))
    more = list(assistant.generate_more(3000, 2, after=400))
    assert len(more) == 3000 and len({r["text"] for r in more}) == 3000
    assert not {r["text"] for r in corpus} & {r["text"] for r in more}
    assert list(assistant.generate(400, 2)) == corpus  # the corpus itself is what it always was
    assert list(assistant.generate_more(3000, 2, after=400)) == more  # deterministic
    assert list(assistant.generate_more(3000, 3, after=400)) != more


def test_more_quotas_share_equally_and_keep_each_intent_at_most_half_full():
    assert Counter(r["label"] for r in assistant.generate_more(1500, 0, after=100)) == Counter(
        assistant.more_quotas(1500, after=100)
    )
    assert set(assistant.more_quotas(1500, after=100).values()) == {100}
    after = assistant.max_size() - 1000
    quotas = assistant.more_quotas(assistant.max_more(after), after=after)
    taken = assistant.intent_quotas(after)
    caps = assistant.intent_capacities()
    assert all(quotas[name] + taken[name] <= caps[name] // 2 for name in caps)
    with pytest.raises(ValueError, match="n must be in"):
        assistant.more_quotas(assistant.max_more(after) + 1, after=after)
