"""Labels never overstate: the attack CLI's table, the demo verdict and the headline's words on typed results.

Claims are rounded up and lower bounds down; a shuffle run shows "no proven epsilon"; only a proof of
the claim's unit says CLAIM CONTRADICTED; repeated canaries are group bounds; the f-DP bound says it
refutes mu-GDP; a noise seed never appears in a command shown.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpaudit.attacks.mia import MembershipTask, task_result
from dpaudit.attacks.results import AttackResults, DataInfo, LossResult, ModelInfo
from dpaudit.audit import audit_scores
from dpaudit.claim import Claim
from dpaudit.common.figures import format_down, format_up
from dpaudit.files.run_dirs import redact_command
from dpaudit.verdict.headline import FDP_LABEL, headline_of

DELTA = 1e-5


def _task(name: str, n: int, shift: float, *, coin_flip: bool, frequencies=None, seed: int = 0):
    rng = np.random.default_rng(seed)
    member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    scores = np.r_[rng.normal(shift, 1, n), rng.normal(0, 1, n)]
    task = MembershipTask(
        name,
        [""] * 2 * n,
        None,
        member,
        [str(i) for i in range(2 * n)],
        coin_flip=coin_flip,
        info={} if frequencies is None else {"frequencies": list(frequencies)},
    )
    return task, scores


def _results(claimed: Claim, specs) -> AttackResults:
    tasks = []
    for name, n, shift, flip, freqs in specs:
        task, scores = _task(name, n, shift, coin_flip=flip, frequencies=freqs)
        audit = audit_scores(
            scores[task.member],
            scores[~task.member],
            delta=DELTA,
            claimed_epsilon=claimed.epsilon,
            seed=0,
            coin_flip=flip,
            num_bootstrap=20,
        )
        tasks.append(task_result(task, audit, scores_file="scores/mia_loss.jsonl"))
    loss = LossResult(parameters={}, tasks=tuple(tasks), claimed_epsilon=claimed.epsilon)
    return AttackResults(
        model=ModelInfo(path="m", kind="masked-lm", architecture="BertForMaskedLM"),
        data=DataInfo(path="d", secret_format="digits:4", log2_space_size=13.3, canaries=8, controls=4, template="t"),
        claimed=claimed,
        attacks=(loss,),
    )


def _claim(epsilon: float | None, **kw) -> Claim:
    return Claim(
        known=True, private=True, epsilon=epsilon, recorded_epsilon=epsilon, delta=DELTA, accountant="pld", **kw
    )


def test_format_down_never_prints_more() -> None:
    assert (format_down(3.880454), format_up(3.880454)) == ("3.88", "3.89")
    assert format_down(0.0013928) == "0.00139" and format_down(0.0) == "0" and format_down(2.0) == "2.00"
    for value in np.random.default_rng(0).lognormal(0, 3, 200):
        assert float(format_down(float(value))) <= value <= float(format_up(float(value)))


def test_attack_table_and_demo_round_claims_up_and_bounds_down() -> None:
    from dpaudit.cli.attack import _summary
    from dpaudit.demo.verdict import classifier_line

    results = _results(
        _claim(3.880454),
        [
            ("examples", 300, 1.0, False, None),
            ("canaries", 100, 1.0, True, [1]),
            ("canaries-f10", 50, 3.0, True, [1, 10]),
        ],
    )
    head = headline_of(results)
    text = _summary(results)
    assert "claimed: epsilon = 3.89 at delta = 1.0e-5" in text and "3.880" not in text
    assert f"epsilon lower bound {head.label}" in text and head.label == "95%, corrected for 3 audits"
    assert head.best is not None and head.best.kind == "proof" and head.best.task == "canaries"
    assert f"epsilon >= {format_down(head.best.epsilon)} (loss/canaries; proof" in text
    assert "<= claimed 3.89" in text and "EXCEEDS" not in text
    group = next(b for b in head.bounds if b.task == "canaries-f10")
    assert not group.eligible and group.group_size == 10 and "G" in text  # shown apart, never the headline
    line = classifier_line([("clf", results)])
    assert "epsilon = 3.89" in line and "3.880" not in line and "corrected for 3 audits" in line
    # the f-DP bound, where listed, says what it refutes
    fdp = [m for t in results.attacks[0].tasks for m in t.bound_methods if m.startswith("one_run_fdp")]
    assert fdp and all(FDP_LABEL in m for m in fdp)


def test_only_a_proof_contradicts_and_group_bounds_never_do() -> None:
    tiny = _claim(0.05)
    heuristic = headline_of(_results(tiny, [("examples", 300, 3.0, False, None), ("canaries", 60, 4.0, True, [1, 20])]))
    assert heuristic.best.kind == "heuristic" and heuristic.best.above and not heuristic.contradicted
    assert heuristic.verdict() == "heuristic bound above the claim: investigate"
    assert any("heuristic bound above the claim: investigate" in n for n in heuristic.investigate)
    proof = headline_of(_results(tiny, [("examples", 300, 3.0, False, None), ("canaries", 100, 4.0, True, [1])]))
    assert proof.contradicted and proof.verdict() == "CLAIM CONTRADICTED" and proof.best.kind == "proof"


def test_shuffle_claim_is_no_proven_epsilon_everywhere() -> None:
    from dpaudit.cli.attack import _summary
    from dpaudit.demo.verdict import classifier_line

    shuffle = Claim(
        known=True,
        private=True,
        epsilon=None,
        recorded_epsilon=None,
        delta=DELTA,
        accountant="pld",
        sampling="shuffle",
        epsilon_if_poisson=0.1487,
    )
    results = _results(shuffle, [("examples", 200, 0.2, False, None)])
    for text in (_summary(results), classifier_line([("clf", results)]), headline_of(results).text()):
        assert "no proven epsilon (as-if-Poisson: 0.149)" in text
        assert "0.1487" not in text and "Nothing found contradicts" not in text and "<= claimed" not in text
    # results written before shuffle runs were marked carry the figure as a claim: privacy.json's sampling wins
    old = _results(_claim(0.1487), [("examples", 200, 0.2, False, None)])
    assert headline_of(old, sampling="shuffle").claim.text() == "no proven epsilon (as-if-Poisson: 0.149)"


@pytest.mark.parametrize(
    "args, shown",
    [
        (
            ["dpaudit", "train", "--noise-seed", "5", "--seed", "1"],
            ["dpaudit", "train", "--noise-seed", "<given: secret>", "--seed", "1"],
        ),
        (["dpaudit", "train", "--noise-seed=5"], ["dpaudit", "train", "--noise-seed=<given: secret>"]),
        (["dpaudit", "train", "--seed", "5"], ["dpaudit", "train", "--seed", "5"]),
    ],
)
def test_noise_seed_is_redacted_from_commands_shown(args, shown) -> None:
    assert redact_command(args) == shown  # the one redactor: manifests and the report alike


def test_claim_with_n_treated_as_public_states_the_replace_one_epsilon_recomputed_from_the_event() -> None:
    """A run whose q and steps came from the real N shows the replace-one epsilon beside the add/remove one in
    every place the claim is shown; a run with a declared --dataset-size (N private) does not. The golden value
    is PLD over the event built here, not the code's own figure."""
    from dp_accounting import NeighboringRelation, dp_event
    from dp_accounting.pld import pld_privacy_accountant as pld

    from dpaudit.accounting import event_to_json
    from dpaudit.claim import claim_of_record
    from dpaudit.claim.record import PrivacyRecord

    event = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0)), 1000)
    golden = []
    for relation in (NeighboringRelation.ADD_OR_REMOVE_ONE, NeighboringRelation.REPLACE_ONE):
        accountant = pld.PLDAccountant(neighboring_relation=relation)
        accountant.compose(event)
        golden.append(accountant.get_epsilon(1e-5))
    privacy = PrivacyRecord(
        trainer="jax-bert",
        private=True,
        mechanism="DP-SGD",
        event=event_to_json(event),
        delta=1e-5,
        accountant="pld",
        epsilon=golden[0],
        sampling="poisson",
        n_public=True,
        dataset_size=100_000,
    )
    claimed = claim_of_record(privacy)
    assert claimed.epsilon == pytest.approx(golden[0], rel=1e-6)
    assert claimed.epsilon_replace_one == pytest.approx(golden[1], rel=1e-6) and golden[1] > golden[0] + 0.5
    assert claimed.text() == (
        f"epsilon = {format_up(golden[0])} at delta = 1.0e-5 (add/remove; N treated as public: "
        f"replace-one epsilon = {format_up(golden[1])})"
    )
    private_n = claim_of_record(
        dataclasses.replace(privacy, n_public=False, dataset_size=None, declared_dataset_size=100_000)
    )
    assert private_n.epsilon_replace_one is None and "replace-one" not in private_n.text()


def test_lira_offline_examples_are_single_rows_not_a_group() -> None:
    from dpaudit.verdict.headline import group_size_of

    assert group_size_of("examples", None) == 1 and group_size_of("examples-offline", None) == 1
    assert group_size_of("canaries-offline", {"frequencies": [1, 10]}) == 10
    assert group_size_of("canaries", None) is None


def test_a_non_private_model_states_the_leakage_the_proof_shows() -> None:
    nonprivate = Claim(known=True, private=False, epsilon=None, recorded_epsilon=None, delta=DELTA, accountant=None)
    strong = headline_of(_results(nonprivate, [("canaries", 200, 4.0, True, [1])]))
    assert strong.best.kind == "proof" and strong.best.epsilon > 1
    assert strong.verdict() == (
        f"non-private training: proven leakage, no epsilon below "
        f"{format_down(strong.best.epsilon)} describes this model"
    )
    # a heuristic bound proves nothing: no leakage is claimed from it
    weak = headline_of(_results(nonprivate, [("examples", 200, 4.0, False, None)]))
    assert weak.best.kind == "heuristic" and weak.verdict() == "no claim to compare with (non-private training)"
