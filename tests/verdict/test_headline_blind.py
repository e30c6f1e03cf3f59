"""The headline never counts an audit that does not beat the blind baseline (docs/threat-model.md).

A split with a built-in shift: members and non-members written from different templates. The blind baseline
separates them from the text alone, the separation and comparison warnings fire, and an attack whose scores carry
only that shift is left out of the headline (its line says so), while an attack that beats the baseline still counts.
Scores are synthetic: the rule is about the audits, not a model.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from dpaudit.attacks.blind import BlindAttack, blind_comparison, blind_separation
from dpaudit.attacks.mia import MembershipTask, task_result
from dpaudit.attacks.registry import AttackOptions
from dpaudit.attacks.results import AttackResults, BlindResult, DataInfo, LossResult, ModelInfo, RefResult
from dpaudit.audit import audit_scores
from dpaudit.claim import Claim
from dpaudit.verdict.headline import Headline, audit_sources, headline_of

DELTA = 1e-5
N = 48
NAMES = ["Ada", "Bo", "Cy", "Di", "Ed", "Flo", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu", "Mo", "Ned", "Ola", "Pia"]


def shifted_task() -> MembershipTask:
    """Members from one template, half the non-members from another: the split, not the model, tells those apart."""
    rng = np.random.default_rng(0)

    def booking() -> str:
        return f"please book a table for {rng.integers(2, 9)} at {rng.choice(NAMES)}'s place"

    def weather() -> str:
        return f"what is the weather like in {rng.choice(NAMES)}ville on day {rng.integers(1, 30)}"

    members = [booking() for _ in range(N)]
    nonmembers = [booking() if i % 2 else weather() for i in range(N)]
    member = np.r_[np.ones(N, bool), np.zeros(N, bool)]
    return MembershipTask("examples", members + nonmembers, None, member, [f"r{i}" for i in range(2 * N)])


def _attack(cls, task: MembershipTask, scores: np.ndarray, claim: Claim):
    audit = audit_scores(scores[task.member], scores[~task.member], delta=DELTA, claimed_epsilon=claim.epsilon, seed=0)
    return cls(parameters={}, tasks=(task_result(task, audit, scores_file="scores/x.jsonl"),))


def _results(*attacks, claim: Claim) -> AttackResults:
    return AttackResults(
        model=ModelInfo(path="m", kind="masked-lm", architecture="x"),
        data=DataInfo(path="d", secret_format="", log2_space_size=None, canaries=0, controls=0, template=None),
        claimed=claim,
        attacks=attacks,
    )


def test_a_shifted_split_fires_the_blind_warnings_and_the_headline_leaves_out_what_does_not_beat_it():
    claim = Claim(known=True, private=True, epsilon=1.0, recorded_epsilon=1.0, delta=DELTA, accountant="pld")
    task = shifted_task()
    context = SimpleNamespace(
        options=AttackOptions(seed=3), _mia_claim=(1.0, DELTA), _mia_tasks=[task], scorer=SimpleNamespace(kind="x")
    )
    blind = BlindAttack().run(context).result
    assert blind["examples"].auc_ci[0] > 0.6  # the templates alone separate the sides

    rng = np.random.default_rng(1)
    # 'loss' sees the template (what the shift gives any score) and nothing else: about the blind AUC, not above it.
    template = np.asarray([t.startswith("please") for t in task.texts])
    shift_only = template + rng.normal(0, 0.1, 2 * N)
    loss = _attack(LossResult, task, shift_only, claim)
    # 'ref' separates every member from every non-member: its interval clears the blind AUC.
    ref = _attack(RefResult, task, np.where(task.member, 10.0, 0.0) + rng.random(2 * N), claim)
    assert loss["examples"].auc_ci[0] <= blind["examples"].auc < ref["examples"].auc_ci[0]

    results = _results(loss, ref, blind, claim=claim)
    (separation,) = blind_separation(results.attacks)
    assert "differ in distribution" in separation and "dpaudit inject --resplit" in separation
    assert "the headline leaves out this task's audits that do not beat it" in separation
    assert blind_comparison(results.attacks)[0].startswith("examples: loss ")  # the warning names the same audit

    head = headline_of(results)
    assert head.num_audits == 2  # the correction still counts every audit tried
    by_name = {b.name: b for b in head.bounds}
    assert by_name["loss/examples"].left_out and not by_name["ref/examples"].below_blind
    assert "does not beat the blind baseline" in by_name["loss/examples"].text()  # in the same sentence
    assert "which separates the sides: left out of the headline" in by_name["loss/examples"].text()
    assert head.best is not None and head.best.name == "ref/examples"
    assert head.to_json()["chosen_from"] == ["ref/examples"]
    again = Headline.from_json(head.to_json(), claim)  # stored in results.json and read back the same
    assert again.bounds == head.bounds and again.best == head.best

    from dpaudit.cli.attack import _summary

    table = _summary(results).splitlines()  # the terminal's table row says so too
    assert [line for line in table if "not in the headline" in line][0].split()[0] == "loss"

    alone = headline_of(_results(loss, blind, claim=claim))
    assert alone.best is None and "do not beat the blind baseline" in alone.text()
    without_blind = headline_of(_results(loss, claim=claim))  # no blind result: nothing to compare with
    assert without_blind.best is not None and without_blind.best.name == "loss/examples"


def test_a_blind_baseline_that_does_not_separate_the_sides_is_said_but_leaves_the_audit_in():
    """No shift shown (the blind interval covers 1/2): an audit below the blind point estimate says so and counts."""
    claim = Claim(known=True, private=True, epsilon=1.0, recorded_epsilon=1.0, delta=DELTA, accountant="pld")
    task = shifted_task()
    rng = np.random.default_rng(4)
    weak = _attack(LossResult, task, rng.normal(0, 1, 2 * N), claim)
    blind = _attack(BlindResult, task, rng.normal(0, 1, 2 * N), claim)
    assert blind["examples"].auc_ci[0] <= 0.5 and weak["examples"].auc_ci[0] <= blind["examples"].auc
    head = headline_of(_results(weak, blind, claim=claim))
    assert head.best is not None and head.best.name == "loss/examples" and not head.best.left_out
    assert "the blind baseline does not separate the sides (interval covers 1/2): counted" in head.text()


def test_canary_audits_are_never_left_out():
    """Inject draws which canaries are members (here by coin flips): no shift to measure, and a proof is never
    hidden."""
    claim = Claim(known=True, private=True, epsilon=1.0, recorded_epsilon=1.0, delta=DELTA, accountant="pld")
    rng = np.random.default_rng(2)
    member = rng.random(200) < 0.5
    scores = rng.normal(0, 1, 200)
    audit = audit_scores(scores[member], scores[~member], delta=DELTA, seed=0, coin_flip=True)
    flips = MembershipTask("canaries", [""] * 200, None, member, [str(i) for i in range(200)], coin_flip=True)
    flips.info["frequencies"] = [1]
    canary = LossResult(parameters={}, tasks=(task_result(flips, audit, scores_file="s"),))
    blind_task = MembershipTask("canaries", [""] * 200, None, member, [str(i) for i in range(200)])
    blind_audit = audit_scores(scores[member] + 9, scores[~member], delta=DELTA, seed=0)  # a blind AUC of 1
    blind = BlindResult(parameters={}, tasks=(task_result(blind_task, blind_audit, scores_file="b"),))
    sources = audit_sources(_results(canary, blind, claim=claim))
    assert [s.blind[0] for s in sources] == [1.0]
    assert headline_of(_results(canary, blind, claim=claim)).best is not None
