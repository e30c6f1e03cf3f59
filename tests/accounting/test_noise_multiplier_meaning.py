"""One meaning of "noise multiplier": dp_accounting's sigma, noise std over the bound on one
example's contribution (C, or 2C for micro-batch clipping), in the plan, the ledger and privacy.json alike; std / C is
``noise_std_over_clip``. Files written when segments stored std / C (privacy /2, ledger /1) are converted on reading."""

from __future__ import annotations

import copy
import json

import dp_accounting
import pytest
from dp_accounting import pld

from dpaudit import accounting as A
from dpaudit.accounting.ledger import PrivacyLedger
from dpaudit.claim.record import SCHEMA, PrivacyRecord
from dpaudit.common.errors import UserInputError
from dpaudit.training.privacy_plan import new_ledger, plan_privacy

N, BATCH, STEPS, SIGMA, DELTA = 400, 20, 12, 0.8, 1e-5


def _micro_batch_plan():
    return plan_privacy(
        dataset_size=N,
        stages=[(STEPS, BATCH)],
        non_private=False,
        noise_multiplier=SIGMA,
        target_epsilon=None,
        delta=DELTA,
        sensitivity_factor=2.0,
    )


def _golden(sigma: float, steps: int = STEPS) -> float:
    accountant = pld.PLDAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(BATCH / N, dp_accounting.GaussianDpEvent(sigma)), steps)
    return accountant.get_epsilon(DELTA)


def _recorded_ledger():
    plan = _micro_batch_plan()
    ledger = new_ledger(plan)
    for step in range(STEPS):
        plan.record_step(ledger, step)
    return plan, ledger


def test_plan_ledger_and_segments_carry_sigma_and_the_noise_std_over_c_is_sigma_times_the_factor():
    plan, ledger = _recorded_ledger()
    (segment,) = ledger.segments
    assert segment.noise_multiplier == plan.sigmas[0] == SIGMA and segment.sensitivity_factor == 2.0
    # The noise the step draws, std / C = sigma x 2, has its own name, and agrees with the std the plan adds.
    assert segment.noise_std_over_clip == plan.noise_std_over_clip(0) == 2 * SIGMA == plan.noise_std(0, 1.0)
    assert ledger.epsilon() == pytest.approx(_golden(SIGMA), rel=1e-9)
    # What an accounting blind to micro-batches claims for the same noise: sigma' = std / C, stated as such.
    (blind,) = plan.segments(accounted_factor=1.0)
    assert blind.noise_multiplier == 2 * SIGMA and blind.noise_std_over_clip == segment.noise_std_over_clip


def _record(ledger) -> PrivacyRecord:
    return PrivacyRecord(
        trainer="edp-sgd",
        private=True,
        mechanism="micro-batch clipping, sensitivity 2C",
        accountant="pld",
        event=A.event_to_json(ledger.event()),
        epsilon=ledger.epsilon(),
        delta=DELTA,
        clip_norm=1.0,
        sensitivity_factor=2.0,
        noise_multipliers=[SIGMA],
        steps=STEPS,
        planned_steps=STEPS,
        dataset_size=N,
        segments=[s.to_json() for s in ledger.segments],
    )


def test_privacy_json_v2_is_converted_so_its_segments_state_sigma():
    _, ledger = _recorded_ledger()
    current = _record(ledger).to_json()
    assert current["schema"] == SCHEMA == "dpaudit.privacy/4"
    assert current["segments"][0]["noise_multiplier"] == current["noise_multipliers"][0] == SIGMA
    old = copy.deepcopy(current)  # what a /2 writer stored: std / C in the segments
    old["schema"] = "dpaudit.privacy/2"
    old["segments"][0]["noise_multiplier"] = SIGMA * 2.0
    record = PrivacyRecord.from_json(json.loads(json.dumps(old)))
    assert record.to_json() == current and record.recompute_epsilon() == current["epsilon"]
    broken = copy.deepcopy(old)
    broken["segments"][0]["sensitivity_factor"] = "two"
    with pytest.raises(UserInputError, match=r"segments\[0\] of a dpaudit.privacy/2 file") as err:
        PrivacyRecord.from_json(broken, where="run/privacy.json")
    assert str(err.value).startswith("run/privacy.json:") and "\n" not in str(err.value)
    with pytest.raises(UserInputError, match="dpaudit.privacy/1"):
        PrivacyRecord.from_json({**current, "schema": "dpaudit.privacy/1"})


def test_a_version_1_ledger_checkpoint_is_converted_and_checked_against_its_event():
    _, ledger = _recorded_ledger()
    saved = ledger.to_json()
    assert saved["schema"] == "dpaudit.privacy_ledger/3"
    old = copy.deepcopy(saved)
    old["schema"] = "dpaudit.privacy_ledger/1"
    for seg in old["segments"]:
        seg["noise_multiplier"] *= seg["sensitivity_factor"]
    resumed = PrivacyLedger.from_json(json.loads(json.dumps(old)))
    assert resumed.segments == ledger.segments and resumed.event() == ledger.event()
    old["segments"][0]["noise_multiplier"] *= 2  # not what the stored event says
    with pytest.raises(UserInputError, match="does not match"):
        PrivacyLedger.from_json(old)
