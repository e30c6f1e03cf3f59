"""Every verdict says what it could have caught: ceilings, and once-inserted canaries audited on their own.

The case a review found: a model trained non-privately elsewhere, attacked with ``--claimed-epsilon 8``, leaks its
once-inserted canaries (AUC 0.98), and the verdict read "Nothing found contradicts the claimed epsilon 8.00": the
canary audit mixed repetition counts (a group audit of the largest count, never compared with the per-example claim)
and the one per-example audit could not have shown 8 whatever the model leaked.
"""

from __future__ import annotations

import numpy as np

from dpaudit.attacks.mia import MembershipTask, per_frequency
from dpaudit.audit import audit_scores
from dpaudit.claim import Claim
from dpaudit.verdict.headline import AuditSource, group_size_of, headline

STATED = Claim(known=True, private=True, epsilon=8.0, recorded_epsilon=8.0, delta=1e-5, accountant="stated")


def _leaky_canaries(rng: np.random.Generator) -> tuple[MembershipTask, np.ndarray]:
    """10 canaries inserted once, 10 inserted 4 times, 20 controls; every inserted canary scores high (leaks)."""
    freqs = np.array([1] * 10 + [4] * 10 + [0] * 20)
    member = freqs > 0
    scores = np.where(member, 3.0, 0.0) + rng.normal(0, 0.5, freqs.size)
    task = MembershipTask(
        "canaries",
        [f"c{i}" for i in range(freqs.size)],
        None,
        member,
        [f"c{i}" for i in range(freqs.size)],
        info={"frequencies": [1, 4]},
        frequencies=freqs,
    )
    return task, scores


def _sources(parts: list[tuple[MembershipTask, np.ndarray]]) -> list[AuditSource]:
    out = []
    for task, scores in parts:
        audit = audit_scores(scores[task.member], scores[~task.member], delta=1e-5, num_bootstrap=2, seed=0)
        out.append(
            AuditSource(attack="loss", task=task.name, audit=audit, group_size=group_size_of(task.name, task.info))
        )
    return out


def test_canaries_inserted_at_several_counts_are_audited_per_frequency() -> None:
    task, scores = _leaky_canaries(np.random.default_rng(0))
    parts = per_frequency(task, scores)
    assert [t.name for t, _ in parts] == ["canaries-f1", "canaries-f4"]
    for t, s in parts:
        assert t.n_nonmembers == 20 and t.n_members == 10 and s.size == 30
    assert [group_size_of(t.name, t.info) for t, _ in parts] == [1, 4]  # the once-inserted group: the claim's unit
    offline = per_frequency(
        MembershipTask(
            "canaries-offline", task.texts, None, task.member, task.ids, info=task.info, frequencies=task.frequencies
        ),
        scores,
    )
    assert [t.name for t, _ in offline] == ["canaries-offline-f1", "canaries-offline-f4"]


def test_a_powerless_verdict_says_it_could_not_have_refuted_the_claim() -> None:
    task, scores = _leaky_canaries(np.random.default_rng(1))
    head = headline(_sources(per_frequency(task, scores)), STATED)
    assert head.best is not None and head.best.task == "canaries-f1"  # the once-inserted group is an eligible audit
    assert head.ceiling is not None and head.ceiling < 8.0 and head.powerless
    verdict = head.verdict()
    assert "could not have refuted 8" in verdict and "ceiling is" in verdict
    n, value = head.suggestion
    assert "coin-flip canaries inserted once it would be" in verdict and value > head.ceiling and n >= 1000
    assert head.best.ceiling is not None and "ceiling" in head.best.text()
    # stored and read back: the same text
    again = type(head).from_json(head.to_json(), STATED)
    assert again.text() == head.text() and again.to_json()["text"] == head.to_json()["text"]


def test_a_mixed_audit_had_no_per_example_audit_at_all() -> None:
    """Without the split the canaries task is a group audit of 4 rows: nothing eligible (what the review saw)."""
    task, scores = _leaky_canaries(np.random.default_rng(1))
    head = headline(_sources([(task, scores)]), STATED)
    assert head.best is None


def test_an_audit_that_could_refute_says_nothing_of_a_ceiling() -> None:
    rng = np.random.default_rng(2)
    coins = rng.random(4000) < 0.5
    scores = coins * 2.0 + rng.normal(0, 1, coins.size)
    audit = audit_scores(scores[coins], scores[~coins], delta=1e-5, num_bootstrap=2, seed=0)
    import dataclasses

    audit = dataclasses.replace(audit, coin_flip=True)
    claimed = Claim(known=True, private=True, epsilon=1.0, recorded_epsilon=1.0, delta=1e-5, accountant="stated")
    head = headline([AuditSource(attack="canary", task="canaries", audit=audit, group_size=1)], claimed)
    assert not head.powerless and head.ceiling > 1.0 and "ceiling is" not in head.verdict()
