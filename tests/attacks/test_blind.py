"""The blind baseline (Das et al. 2024): it finds what separates members from non-members without the model, its
AUC is honest (cross-fitted), it runs beside every membership attack, and it never becomes a bound on the model."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dpaudit.attacks.blind import BlindAttack, blind_comparison, blind_scores
from dpaudit.attacks.mia import MembershipTask
from dpaudit.attacks.registry import AttackOptions
from dpaudit.audit import roc_curve
from dpaudit.claim import Claim

WORDS = [f"w{i}" for i in range(300)]


def texts(rng: np.random.Generator, n: int, low: int, high: int) -> list[str]:
    return [" ".join(rng.choice(WORDS, size=rng.integers(low, high + 1))) for _ in range(n)]


def task(members: list[str], nonmembers: list[str], labels: list[int] | None = None) -> MembershipTask:
    n, m = len(members), len(nonmembers)
    return MembershipTask(
        "examples",
        members + nonmembers,
        labels,
        np.r_[np.ones(n, bool), np.zeros(m, bool)],
        [f"r{i}" for i in range(n + m)],
    )


def run_blind(t: MembershipTask, kind: str = "masked-lm"):
    """BlindAttack.run on one task, through the audit like any attack (claim as claim_of caches it)."""
    context = SimpleNamespace(
        options=AttackOptions(seed=3), _mia_claim=(1.0, 1e-5), _mia_tasks=[t], scorer=SimpleNamespace(kind=kind)
    )
    return BlindAttack().run(context).result


def test_longer_members_are_found():
    rng = np.random.default_rng(0)
    result = run_blind(task(texts(rng, 200, 6, 16), texts(rng, 200, 3, 12)))
    examples = result["examples"]
    assert examples.auc > 0.6 and examples.auc_ci[0] > 0.5, (examples.auc, examples.auc_ci)
    assert result.baseline and result.parameters["features"]["label_one_hot"] is False


def test_exchangeable_members_cover_one_half_though_an_in_sample_fit_would_not():
    """Distinct random texts, membership by coin: nothing to find. Fitted and scored on the same rows, the hashed
    n-grams memorize the membership (AUC near 1); cross-fitted, the AUC's interval covers 0.5."""
    from scipy.sparse import hstack
    from sklearn.linear_model import LogisticRegression

    from dpaudit.attacks import blind

    rng = np.random.default_rng(1)
    all_texts = texts(rng, 300, 4, 12)
    member = rng.random(300) < 0.5
    t = MembershipTask("examples", all_texts, None, member, [str(i) for i in range(300)])
    result = run_blind(t)["examples"]
    assert result.auc_ci[0] < 0.5 < result.auc_ci[1], (result.auc, result.auc_ci)
    x = hstack([blind._text_features(all_texts), blind._length_features(all_texts)]).tocsr()
    in_sample = LogisticRegression(C=blind.C, solver="liblinear").fit(x, member).decision_function(x)
    assert roc_curve(in_sample[member], in_sample[~member]).auc() > 0.9


def test_the_label_count_is_found_for_a_classifier():
    """Members and non-members with exchangeable texts but labels spread differently (label 0 is common in
    train, rare in test): the one-hot label carries it."""
    rng = np.random.default_rng(2)
    members, nonmembers = texts(rng, 200, 4, 12), texts(rng, 200, 4, 12)
    labels = list(rng.choice(4, 200, p=[0.55, 0.15, 0.15, 0.15])) + list(rng.choice(4, 200, p=[0.1, 0.3, 0.3, 0.3]))
    result = run_blind(task(members, nonmembers, [int(x) for x in labels]), kind="classifier")
    assert result["examples"].auc_ci[0] > 0.5 and result.parameters["features"]["label_one_hot"]


def test_scores_are_seeded_and_tiny_tasks_are_skipped_with_a_note():
    rng = np.random.default_rng(4)
    t = task(texts(rng, 30, 6, 16), texts(rng, 30, 3, 12))
    a = blind_scores(t.texts, None, t.member, seed=0)
    assert np.array_equal(a, blind_scores(t.texts, None, t.member, seed=0))
    assert not np.array_equal(a, blind_scores(t.texts, None, t.member, seed=1))  # another fold split
    with pytest.raises(ValueError, match=">= 2 members"):
        blind_scores(["a", "b", "c"], None, np.array([True, False, False]), seed=0)
    tiny = MembershipTask(
        "canaries", ["a", "b", "c"], None, np.array([True, False, False]), ["1", "2", "3"], coin_flip=True
    )
    context = SimpleNamespace(
        options=AttackOptions(), _mia_claim=(1.0, 1e-5), _mia_tasks=[t, tiny], scorer=SimpleNamespace(kind="masked-lm")
    )
    result = BlindAttack().run(context).result
    assert [x.task for x in result.tasks] == ["examples"] and any("too few" in w for w in result.warnings)


def test_the_fit_on_the_used_columns_scores_as_the_fit_on_all_hashed_columns():
    """blind_scores fits on the hashed columns some text has; the oracle here fits on all 2^18 of them, with the same
    folds, labels and standardized lengths. Dropped columns have weight exactly 0, so the scores agree up to the BLAS
    dot products' summation order (~1e-13), and their order and AUC are the same."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    from dpaudit.attacks import blind

    rng = np.random.default_rng(6)
    t = task(texts(rng, 30, 6, 16), texts(rng, 30, 3, 12), [int(x) for x in rng.integers(0, 3, 60)])
    ours = blind_scores(t.texts, t.labels, t.member, seed=2, folds=3)
    full_text = blind._text_features(t.texts)
    assert full_text.shape[1] == 2**18 and len(np.unique(full_text.indices)) < 2**18 // 50  # most columns unused
    label_x, length = blind._label_features(t.labels, 60), blind._length_features(t.texts)
    oracle = np.empty(60)
    for fit_rows, score_rows in StratifiedKFold(n_splits=3, shuffle=True, random_state=2).split(np.zeros(60), t.member):
        mean, std = length[fit_rows].mean(0), length[fit_rows].std(0)
        x = hstack([full_text, label_x, csr_matrix((length - mean) / np.where(std > 0, std, 1.0))]).tocsr()
        model = LogisticRegression(C=blind.C, solver="liblinear", max_iter=1000).fit(x[fit_rows], t.member[fit_rows])
        oracle[score_rows] = model.decision_function(x[score_rows])
    assert np.abs(ours - oracle).max() < 1e-9 * max(1.0, np.abs(oracle).max()), np.abs(ours - oracle).max()
    assert np.array_equal(np.argsort(ours, kind="stable"), np.argsort(oracle, kind="stable"))
    assert roc_curve(ours[t.member], ours[~t.member]).auc() == roc_curve(oracle[t.member], oracle[~t.member]).auc()


def test_coin_flip_canaries_get_no_one_run_bound_and_nothing_meets_the_claim():
    rng = np.random.default_rng(5)
    t = task(texts(rng, 40, 8, 16), texts(rng, 40, 2, 6))  # very separable
    flips = MembershipTask("canaries", t.texts, None, t.member, t.ids, coin_flip=True, info={"frequencies": [1]})
    context = SimpleNamespace(
        options=AttackOptions(), _mia_claim=(0.1, 1e-5), _mia_tasks=[t, flips], scorer=SimpleNamespace(kind="masked-lm")
    )
    result = BlindAttack().run(context).result
    canaries = result["canaries"]
    assert not canaries.coin_flip and not canaries.bound_is_proof
    assert all(not r.startswith("one_run") for r in canaries.bound_methods)
    assert result.claimed_epsilon is None and not result.exceeds_claim
    assert all(x.claimed_epsilon is None for x in result.tasks)


def _mia(attack: str, tasks: dict[str, tuple[float, float, float]]):
    from dpaudit.attacks.results import RESULT_CLASSES, MiaTaskResult

    rows = tuple(
        MiaTaskResult(
            task=name,
            n_members=10,
            n_nonmembers=10,
            auc=auc,
            auc_ci=(lo, hi),
            tpr_at=(),
            advantage=0.0,
            roc={},
            epsilon_lower_bound=0.0,
            bound_methods=(),
            bound_is_proof=False,
            bound_note="",
            claimed_epsilon=None,
            delta=1e-5,
            exceeds_claim=False,
            coin_flip=False,
            scores_file="",
            info={},
            audit={},
        )
        for name, (auc, lo, hi) in tasks.items()
    )
    return RESULT_CLASSES[attack](parameters={}, tasks=rows)


def test_comparison_is_one_sentence_per_task_naming_the_attacks_that_do_not_beat_it():
    blind = _mia("blind", {"examples": (0.567, 0.53, 0.60), "canaries": (0.5, 0.4, 0.6)})
    loss = _mia("loss", {"examples": (0.58, 0.55, 0.61), "canaries": (0.9, 0.8, 0.97)})
    lira = _mia(
        "lira",
        {
            "examples": (0.70, 0.66, 0.74),
            "examples-offline": (0.56, 0.52, 0.60),
            "canaries": (0.7, 0.6, 0.8),
            "canaries-offline": (0.7, 0.55, 0.8),
        },
    )
    notes = blind_comparison([loss, lira, blind])
    assert len(notes) == 1 and notes[0].startswith("examples: loss 0.580 [0.550, 0.610], lira (offline) 0.560")
    assert "do not beat the blind baseline (AUC 0.567" in notes[0] and "distribution shift" in notes[0]
    assert blind_comparison([loss, lira]) == []  # no blind result: nothing to compare


def test_blind_runs_beside_every_membership_attack_and_stays_out_of_the_headline():
    from dpaudit.attacks.registry import resolve_attacks
    from dpaudit.attacks.results import AttackResults, DataInfo, ModelInfo
    from dpaudit.report.membership import distribution_shift_notes, membership_audits, strongest
    from dpaudit.verdict.headline import audit_sources

    assert [c.name for c in resolve_attacks(["loss"], "classifier")] == ["loss", "blind"]
    assert [c.name for c in resolve_attacks(["loss"], "classifier", blind=False)] == ["loss"]
    assert [c.name for c in resolve_attacks(["exposure"], "masked-lm")] == ["exposure"]
    assert [c.name for c in resolve_attacks(["blind", "loss"], "masked-lm")] == ["blind", "loss"]

    rng = np.random.default_rng(6)
    t = task(texts(rng, 60, 8, 16), texts(rng, 60, 2, 6))
    blind = run_blind(t)
    loss = _mia("loss", {"examples": (0.55, 0.5, 0.6)})
    results = AttackResults(
        model=ModelInfo(path="m", kind="masked-lm", architecture="x"),
        data=DataInfo(path="d", secret_format="", log2_space_size=None, canaries=0, controls=0, template=None),
        claimed=Claim(known=False),
        attacks=(blind,),
    )
    assert audit_sources(results) == ()  # its bounds are about the data, never the model's epsilon
    found = membership_audits(results)
    assert [(a.name, a.baseline) for a in found] == [("blind baseline (examples)", True)]
    assert strongest(found) is None
    both = AttackResults(model=results.model, data=results.data, claimed=results.claimed, attacks=(loss, blind))
    assert len(distribution_shift_notes(both)) == 1
