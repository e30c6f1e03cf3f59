"""PrivacyLedger: realized steps, a hard budget, cheap certification, and checkpoint round trips."""

from __future__ import annotations

import json
import math

import dp_accounting
import pytest
from dp_accounting import pld

from dpaudit import accounting as A
from dpaudit.accounting.ledger import BudgetExceededError, PrivacyLedger
from dpaudit.common.errors import UserInputError

DELTA = 1e-5
Q, SIGMA = 0.05, 2.0


def pld_direct(event, delta=DELTA):
    accountant = pld.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def test_record_compresses_runs_and_event_matches_schedule():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=None)
    for _ in range(3):
        ledger.record(sampling_probability=Q, noise_multiplier=SIGMA)
    ledger.record(sampling_probability=0.1, noise_multiplier=SIGMA, steps=2)
    ledger.record(sampling_probability=Q, noise_multiplier=SIGMA, sensitivity_factor=2.0)  # same mechanism, std 2x
    assert ledger.steps == 6
    assert [s.steps for s in ledger.segments] == [3, 2, 1]
    expected = A.schedule_event(
        [
            A.Segment(steps=3, sampling_probability=Q, noise_multiplier=SIGMA),
            A.Segment(steps=2, sampling_probability=0.1, noise_multiplier=SIGMA),
            A.Segment(steps=1, sampling_probability=Q, noise_multiplier=SIGMA),
        ]
    )
    assert ledger.event() == expected
    assert ledger.epsilon() == pld_direct(expected)
    assert ledger.accountant_calls == 1  # no target: recording never asked the accountant


def test_ledger_refuses_to_overspend_and_appends_nothing():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=1.0)
    recorded = 0
    with pytest.raises(BudgetExceededError, match="would spend epsilon"):
        while True:
            ledger.record(sampling_probability=Q, noise_multiplier=SIGMA)
            recorded += 1
    assert ledger.steps == recorded
    assert ledger.epsilon() <= 1.0
    over = A.dpsgd_event(noise_multiplier=SIGMA, sampling_probability=Q, steps=recorded + 1)
    assert pld_direct(over) > 1.0  # the refused step really would have overspent
    assert ledger.accountant_calls < 25  # O(log steps), not one call per step
    with pytest.raises(BudgetExceededError):
        ledger.record(sampling_probability=Q, noise_multiplier=SIGMA)
    assert ledger.steps == recorded
    with pytest.raises(BudgetExceededError):  # a zero-noise step is never within a finite budget
        ledger.record(sampling_probability=Q, noise_multiplier=0.0)


def test_plan_certifies_once_then_records_are_free():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=3.0)
    plan = A.batch_schedule_segments(dataset_size=10_000, schedule=[(50, 500), (100, 1000)], noise_multiplier=SIGMA)
    eps = ledger.plan(plan)
    assert eps == pld_direct(A.schedule_event(plan)) <= 3.0
    calls = ledger.accountant_calls
    for _ in range(50):
        ledger.record(sampling_probability=0.05, noise_multiplier=SIGMA)
    ledger.record(sampling_probability=0.1, noise_multiplier=SIGMA, steps=100)
    assert ledger.accountant_calls == calls
    assert ledger.epsilon() == eps


def test_plan_over_budget_is_refused():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=0.5)
    with pytest.raises(BudgetExceededError, match="planned run"):
        ledger.plan([A.Segment(steps=1000, sampling_probability=0.1, noise_multiplier=1.0)])
    assert ledger.to_json()["certificate"] is None


def test_off_plan_step_is_checked_exactly():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=1.0)
    ledger.plan([A.Segment(steps=10, sampling_probability=Q, noise_multiplier=SIGMA)])
    ledger.record(sampling_probability=Q, noise_multiplier=SIGMA, steps=10)
    with pytest.raises(BudgetExceededError):
        ledger.record(sampling_probability=1.0, noise_multiplier=0.5)  # off-plan and far too expensive
    assert ledger.steps == 10
    ledger.record(sampling_probability=Q, noise_multiplier=8.0)  # off-plan but cheap: accepted
    assert ledger.steps == 11 and ledger.epsilon() <= 1.0


def test_json_round_trip_resumes_the_run():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=1.5, privacy_unit="utterance", sampling="shuffle")
    ledger.plan([A.Segment(steps=40, sampling_probability=Q, noise_multiplier=SIGMA)])
    ledger.record(sampling_probability=Q, noise_multiplier=SIGMA, steps=25)
    saved = json.loads(json.dumps(ledger.to_json()))
    resumed = PrivacyLedger.from_json(saved)
    assert resumed.segments == ledger.segments and resumed.steps == 25
    assert resumed.epsilon() == ledger.epsilon()
    assert resumed.privacy_unit == "utterance" and resumed.sampling == "shuffle"
    calls = resumed.accountant_calls
    resumed.record(sampling_probability=Q, noise_multiplier=SIGMA, steps=15)  # still inside the saved plan
    assert resumed.accountant_calls == calls
    assert "assumes Poisson" in resumed.sampling_note
    # privacy.json is written by dpaudit.claim.record.PrivacyRecord from the ledger's event.
    event = A.event_from_json(json.loads(json.dumps(A.event_to_json(resumed.event()))))
    assert A.epsilon(event, resumed.delta, resumed.accountant) == resumed.epsilon()
    saved["segments"][0]["steps"] = 24  # edited file: event and segments disagree
    with pytest.raises(UserInputError, match="does not match"):
        PrivacyLedger.from_json(saved)
    with pytest.raises(UserInputError, match="schema"):
        PrivacyLedger.from_json({"schema": "something/else"})


def test_non_private_run_is_representable():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=None)
    assert not ledger.is_private
    assert ledger.event() == dp_accounting.NonPrivateDpEvent()
    assert ledger.epsilon() == math.inf
    back = PrivacyLedger.from_json(json.loads(json.dumps(ledger.to_json())))
    assert back.epsilon() == math.inf
    started = PrivacyLedger(delta=DELTA, target_epsilon=3.0)
    assert started.is_private and started.epsilon() == 0.0


def test_rdp_ledger_and_remaining_steps():
    ledger = PrivacyLedger(delta=DELTA, target_epsilon=2.0, accountant="rdp")
    ledger.record(sampling_probability=Q, noise_multiplier=SIGMA, steps=10)
    left = ledger.remaining_steps(sampling_probability=Q, noise_multiplier=SIGMA)
    assert left > 0
    ledger.record(sampling_probability=Q, noise_multiplier=SIGMA, steps=left)
    with pytest.raises(BudgetExceededError):
        ledger.record(sampling_probability=Q, noise_multiplier=SIGMA)
    assert ledger.epsilon() <= 2.0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(delta=0.0, target_epsilon=1.0), "delta must be in"),
        (dict(delta=1e-5, target_epsilon=-1.0), "target_epsilon must be"),
        (dict(delta=1e-5, target_epsilon=1.0, accountant="gdp"), "accountant must be one of"),
        (dict(delta=1e-5, target_epsilon=1.0, sampling="fixed_size"), "sampling must be one of"),
    ],
)
def test_ledger_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PrivacyLedger(**kwargs)
