"""An examples task the split cannot fool: duplicates treated alike on both sides, near-duplicate member/non-member
pairs left out (or kept) and counted, the draw of members and non-members seeded apart, and a warning when the blind
baseline itself separates the sides. Synthetic rows: no model is needed."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpaudit.attacks.mia import example_task
from dpaudit.attacks.near_duplicates import cross_pairs, first_of_each, normalize


def _jaccard(a: str, b: str) -> float:
    def grams(t: str) -> set[str]:
        n = normalize(t)
        return {n[i : i + 5] for i in range(len(n) - 4)} or {n}

    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y)


def test_cross_pairs_are_every_pair_at_or_above_the_threshold_by_brute_force():
    rng = np.random.default_rng(0)
    words = ["play", "the", "song", "jazz", "at", "7", "pm", "set", "an", "alarm", "for", "me"]
    texts = [" ".join(rng.choice(words, size=rng.integers(1, 7))) for _ in range(60)]
    members, nonmembers = texts[:30], texts[30:] + ["Play the SONG!", "set an alarm  for 7 pm."]
    members += ["play the song", "set an alarm for 7 pm"]
    for threshold in (0.5, 0.8, 1.0):
        want = sorted(
            (i, j)
            for (i, a), (j, b) in itertools.product(enumerate(members), enumerate(nonmembers))
            if _jaccard(a, b) >= threshold - 1e-12
        )
        got = cross_pairs(members, nonmembers, threshold=threshold)
        assert sorted((m, h) for m, h, _ in got.pairs) == want, threshold
        assert all(s == pytest.approx(_jaccard(members[m], nonmembers[h])) for m, h, s in got.pairs)
    exact = cross_pairs(members, nonmembers, threshold=1.0)
    assert (len(members) - 2, len(nonmembers) - 2) in {(m, h) for m, h, _ in exact.pairs}  # case and punctuation
    assert first_of_each(["A b", "a  B.", "c", "a b"]) == [0, 2]
    with pytest.raises(ValueError, match="threshold must be in"):
        cross_pairs(members, nonmembers, threshold=0)


@pytest.fixture
def split_run(tmp_path):
    """A train/held-out split with a within-train duplicate and two near-duplicate pairs across the sides."""
    from dpaudit.attacks.shadow_models import write_shadow_data
    from dpaudit.inject_dir.reader import load_inject_run

    train = [{"text": f"member number {i} asks for {w}"} for i, w in enumerate("abcdefghijkl")]
    train += [{"text": "Add the song to my jazz playlist"}, {"text": "add the song to my jazz playlist!"}]
    train += [{"text": "book a table for two at the harbour inn tonight"}]
    heldout = [{"text": f"other row {i} is about {w}"} for i, w in enumerate("mnopqrstuvwx")]
    heldout += [
        {"text": "add the song to my JAZZ playlist"},
        {"text": "book a table for two at the harbour inn tonite"},
    ]
    write_shadow_data(
        tmp_path / "d", train=train, heldout=heldout, public=[{"text": "p"}], labelled=False, target_manifest={}
    )
    return load_inject_run(tmp_path / "d")


def test_near_duplicate_pairs_are_left_out_at_both_ends_and_counted(split_run):
    task = example_task(split_run, seed=0)
    near = task.info["near_duplicates"]
    assert near["collapsed_within_train"] == 1  # the two playlist rows of train are one candidate
    assert (near["pairs"], near["members_excluded"], near["nonmembers_excluded"]) == (2, 2, 2)
    assert not any("playlist" in t or "harbour" in t for t in task.texts)
    assert task.n_members == task.n_nonmembers == 12
    (note,) = task.warnings
    assert "2 member/non-member pairs are near duplicates" in note and "both ends left out" in note

    kept = example_task(split_run, seed=0, near_duplicates="keep")
    assert kept.info["near_duplicates"]["members_excluded"] == 0 and kept.info["near_duplicates"]["pairs"] == 2
    assert any("harbour" in t for t in kept.texts) and "kept (--near-duplicates keep)" in kept.warnings[0]
    exact = example_task(split_run, seed=0, near_duplicate_threshold=1.0)  # "tonite" is no longer a twin
    assert exact.info["near_duplicates"]["pairs"] == 1


def test_the_draw_of_members_and_non_members_has_its_own_seed(split_run):
    base = example_task(split_run, seed=0, max_per_side=5)
    assert example_task(split_run, seed=0, max_per_side=5, sample_seed=0).texts == base.texts
    redrawn = example_task(split_run, seed=0, max_per_side=5, sample_seed=7)
    assert redrawn.texts != base.texts and redrawn.info["sample_seed"] == 7 and redrawn.n_members == 5


def test_the_options_are_checked_and_reach_the_task():
    from dpaudit.attacks.mia import example_options
    from dpaudit.attacks.registry import AttackOptions

    options = AttackOptions(near_duplicates="keep", near_duplicate_threshold=0.9, mia_sample_seed=3)
    assert example_options(options) == {
        "seed": 0,
        "max_per_side": None,
        "sample_seed": 3,
        "near_duplicates": "keep",
        "near_duplicate_threshold": 0.9,
    }
    with pytest.raises(ValueError, match="--near-duplicate-threshold must be in"):
        AttackOptions(near_duplicate_threshold=1.5)
    with pytest.raises(ValueError, match="--near-duplicates must be one of exclude, keep"):
        AttackOptions(near_duplicates="drop")


def test_a_split_the_blind_baseline_separates_is_warned_about():
    from dpaudit.attacks.blind import blind_separation
    from tests.attacks.test_blind import _mia

    shifted = _mia("blind", {"examples": (0.70, 0.62, 0.78), "canaries": (0.55, 0.41, 0.69)})
    (note,) = blind_separation([_mia("loss", {"examples": (0.9, 0.85, 0.95)}), shifted])
    assert note.startswith("examples: the blind baseline tells members from non-members") and "0.620" in note
    assert blind_separation([_mia("loss", {"examples": (0.9, 0.85, 0.95)})]) == []
