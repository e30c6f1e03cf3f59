"""The float noise sampler's tail figure is part of delta: calibration, the plan, the ledger and privacy.json.

A claim (epsilon, delta) is the accountant's epsilon at ``delta - tail``; a target epsilon is calibrated with
``epsilon(sigma, delta - tail(sigma)) <= target`` (golden values from plain dp_accounting); a run whose tail alone
reaches delta is refused unless accepted, and then states ``delta + tail``; a schema /3 privacy.json, whose tail was
a caveat beside delta, reads with it counted in.
"""

from __future__ import annotations

import copy
import json
import math

import dp_accounting
import pytest
from dp_accounting import pld

from dpaudit import accounting as A
from dpaudit.accounting import noise_tail
from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.errors import UserInputError
from dpaudit.training.privacy_plan import new_ledger, plan_privacy

Q, STEPS, DELTA = 0.02, 500, 1e-5


def _upper(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2))


def _golden_epsilon(sigma: float, delta: float) -> float:
    accountant = pld.PLDAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(Q, dp_accounting.GaussianDpEvent(sigma)), STEPS)
    return accountant.get_epsilon(delta)


def _event(sigma: float):
    return A.dpsgd_event(noise_multiplier=sigma, sampling_probability=Q, steps=STEPS)


@pytest.mark.parametrize("reach", [5.22, A.BM96_REACH])
def test_calibration_meets_the_target_at_delta_minus_the_tail(reach):
    """Golden: the calibrated sigma's epsilon at delta - tail(sigma) (plain dp_accounting) is within the target, and
    sigma / (1 + tolerance) is not. With the retired float32 JAX reach (5.22) the tail forces more noise than the
    accountant alone would; with the 96-bit sampler's it changes nothing a float can see."""
    target, tolerance = 6.0, 1e-3
    sigma = A.calibrate_noise(_event, target, DELTA, noise_reach=reach, certify_minimal=True, tolerance=tolerance)
    tail = STEPS * Q * _upper(reach - 1 / sigma)
    assert A.event_tail_figure(_event(sigma), reach) == pytest.approx(tail, rel=1e-12)
    assert tail < DELTA and _golden_epsilon(sigma, DELTA - tail) <= target
    below = sigma / (1 + tolerance)
    below_tail = STEPS * Q * _upper(reach - 1 / below)
    assert below_tail >= DELTA or _golden_epsilon(below, DELTA - below_tail) > target
    plain = A.calibrate_noise(_event, target, DELTA, certify_minimal=True, tolerance=tolerance)
    if reach < 6:
        assert sigma > 1.3 * plain and tail > DELTA / 2  # the tail, not the accountant, set the noise
    else:
        assert sigma == pytest.approx(plain, rel=2e-3) and tail < 1e-20


def test_the_reverse_searches_count_the_tail_too():
    sigma = 0.8
    steps = A.max_steps(
        sampling_probability=Q, noise_multiplier=sigma, target_epsilon=50.0, delta=DELTA, noise_reach=5.22
    )
    tail = steps * Q * _upper(5.22 - 1 / sigma)
    assert tail < DELTA and (steps + 1) * Q * _upper(5.22 - 1 / sigma) * (1 + 2e-3) >= DELTA * 0.999
    assert steps < A.max_steps(sampling_probability=Q, noise_multiplier=sigma, target_epsilon=50.0, delta=DELTA)
    batch = A.max_batch_size(
        dataset_size=10_000, steps=STEPS, noise_multiplier=sigma, target_epsilon=50.0, delta=DELTA, noise_reach=5.22
    )
    assert STEPS * batch / 10_000 * _upper(5.22 - 1 / sigma) < DELTA
    assert batch < A.max_batch_size(
        dataset_size=10_000, steps=STEPS, noise_multiplier=sigma, target_epsilon=50.0, delta=DELTA
    )


def _plan(**kw):
    args = dict(
        dataset_size=2000,
        stages=[(STEPS, 40)],
        non_private=False,
        noise_multiplier=None,
        target_epsilon=None,
        delta=DELTA,
    )
    return plan_privacy(**{**args, **kw})


def test_the_plan_states_delta_and_hands_the_accountant_delta_minus_the_reserved_tail():
    plan = _plan(target_epsilon=4.0, noise_sampler="philox-c-bm96")
    tail = A.tail_figure(plan.segments(), A.BM96_REACH)
    assert plan.delta == DELTA and plan.noise_tail == tail and plan.accountant_delta == DELTA - tail
    assert plan.planned_epsilon == A.epsilon(plan.event(), plan.accountant_delta) <= 4.0
    ledger = new_ledger(plan)
    assert (
        ledger.delta == plan.accountant_delta
        and ledger.noise_tail == tail
        and ledger.stated_delta == pytest.approx(DELTA)
    )
    assert PrivacyLedger_roundtrip(ledger) == (ledger.delta, ledger.noise_tail)
    # no sampler named: nothing counted, as for a third-party trainer's uncharacterised sampler
    bare = _plan(target_epsilon=4.0)
    assert bare.noise_tail == 0.0 and bare.accountant_delta == bare.delta == DELTA


def PrivacyLedger_roundtrip(ledger):  # noqa: N802  (a helper named after what it checks)
    again = A.PrivacyLedger.from_json(json.loads(json.dumps(ledger.to_json())))
    return again.delta, again.noise_tail


@pytest.fixture
def short_sampler(monkeypatch):
    """A sampler whose reach is short enough for its tail to matter at a sigma PLD can account (the retired
    float32 JAX sampler's 5.22): plans never name a retired one, so the test registers it under a new name."""
    monkeypatch.setitem(noise_tail.SAMPLERS, "test-short", ("a test sampler of reach 5.22", 5.22))
    return "test-short"


def test_a_tail_that_alone_reaches_delta_is_refused_in_one_line_naming_the_option(short_sampler):
    with pytest.raises(UserInputError) as err:
        _plan(noise_multiplier=0.6, noise_sampler=short_sampler)
    text = str(err.value)
    assert "\n" not in text and text.startswith("--noise-multiplier 0.6: the noise sampler's tail figure")
    assert "--delta 1e-05" in text and "--accept-noise-tail" in text
    with pytest.raises(ValueError, match="retired"):
        _plan(noise_multiplier=1.0, noise_sampler="jax-float32")


def test_an_accepted_tail_is_stated_in_delta(short_sampler):
    plan = _plan(noise_multiplier=0.6, noise_sampler=short_sampler, accept_noise_tail=True)
    tail = STEPS * 40 / 2000 * _upper(5.22 - 1 / 0.6)
    assert plan.noise_tail == pytest.approx(tail, rel=1e-12) and tail > DELTA
    assert plan.noise_tail_accepted and plan.accountant_delta == DELTA and plan.delta == pytest.approx(DELTA + tail)
    assert plan.planned_epsilon == A.epsilon(plan.event(), DELTA)
    ledger = new_ledger(plan)
    assert ledger.delta == DELTA and ledger.stated_delta == pytest.approx(plan.delta)


def test_a_calibrated_run_with_a_short_sampler_gets_more_noise_not_a_refusal(short_sampler):
    plan = _plan(target_epsilon=8.0, noise_sampler=short_sampler)
    plain = _plan(target_epsilon=8.0)
    assert plan.noise_multiplier > plain.noise_multiplier and plan.noise_tail < plan.delta
    assert A.epsilon(plan.event(), plan.accountant_delta) <= 8.0


def _v3_record() -> dict:
    """A privacy.json of schema /3 as dpaudit wrote it: delta the accountant's, the tail a caveat beside it."""
    event = _event(0.9)
    eps = A.epsilon(event, DELTA)
    figure = STEPS * Q * _upper(5.22 - 1 / 0.9)
    record = PrivacyRecord(
        trainer="jax-bert",
        private=True,
        mechanism="DP-SGD",
        accountant="pld",
        event=A.event_to_json(event),
        epsilon=eps,
        delta=DELTA,
        clip_norm=1.0,
        sensitivity_factor=1.0,
        noise_multipliers=[0.9],
        steps=STEPS,
        planned_steps=STEPS,
        dataset_size=2000,
        segments=[A.Segment(steps=STEPS, sampling_probability=Q, noise_multiplier=0.9).to_json()],
        guarantee="(eps, 1e-05)-DP ...",
        group_privacy=[{"frequency": 10, "epsilon": 1.0, "delta": 1e-4, "bound": "x"}],
    )
    old = record.to_json()
    del old["accountant_delta"], old["noise_tail_delta"]
    old["schema"] = "dpaudit.privacy/3"
    old["noise_tail"] = {
        "sampler": "jax-float32",
        "sampler_text": "jax.random.normal in float32",
        "z_max": 5.22,
        "figure": figure,
        "delta": DELTA,
        "exceeds_delta": figure > DELTA,
        "formula": "...",
        "caveat": "the noise sampler ...",
    }
    return old


def test_a_schema_3_record_reads_with_its_tail_counted_inside_delta():
    old = _v3_record()
    figure = old["noise_tail"]["figure"]
    record = PrivacyRecord.from_json(json.loads(json.dumps(old)))
    parts = record.delta_parts()
    assert parts == (pytest.approx(DELTA + figure), DELTA, figure) and figure > DELTA  # the demo-like failure
    assert record.recompute_epsilon() == old["epsilon"]  # the event and the accountant's delta are unchanged
    assert "counted inside delta" in record.guarantee and record.noise_tail["sampler"] == "jax-float32"
    (row,) = record.group_privacy  # recomputed at the delta that held
    eps_f, delta_f = A.group_privacy(old["epsilon"], parts.delta, 10)
    assert row["frequency"] == 10 and row["epsilon"] == eps_f and row["delta"] == (None if delta_f >= 1 else delta_f)
    # written back, it is a /4 record that reads as itself
    again = PrivacyRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again == record and again.to_json()["schema"] == "dpaudit.privacy/4"
    # a /3 record without a tail (a third-party sampler): delta unchanged, nothing counted
    bare = copy.deepcopy(old)
    bare["noise_tail"] = None
    assert PrivacyRecord.from_json(bare).delta_parts() == (DELTA, DELTA, None)


def test_a_record_refuses_parts_that_do_not_fit_its_delta():
    record = PrivacyRecord.from_json(_v3_record()).to_json()
    record["noise_tail_delta"] = record["delta"]  # accountant + tail > delta
    with pytest.raises(UserInputError, match="noise_tail_delta"):
        PrivacyRecord.from_json(record, where="run/privacy.json")


def test_steps_of_a_checkpoint_written_by_an_earlier_dpaudit_are_counted_at_the_former_reach():
    """A privacy_ledger/2 (every dpaudit before the 96-bit sampler) resumed: its steps drew a sampler of reach >= 5.22,
    so the record counts their tail there, and states the delta that holds."""
    from dpaudit.training.record import delta_of_run

    plan = _plan(noise_multiplier=0.9, noise_sampler="jax-bm96")
    ledger = new_ledger(plan)
    for step in range(200):
        plan.record_step(ledger, step)
    old = json.loads(json.dumps(ledger.to_json()))
    old["schema"] = "dpaudit.privacy_ledger/2"
    del old["noise_tail"], old["former_segments"]
    old["delta"] = DELTA  # the earlier dpaudit's ledger held the stated delta itself
    resumed = A.PrivacyLedger.from_json(old)
    assert resumed.former_segments == resumed.segments and resumed.noise_tail == 0.0
    for step in range(200, STEPS):
        plan.record_step(resumed, step)
    again = A.PrivacyLedger.from_json(json.loads(json.dumps(resumed.to_json())))  # a later checkpoint keeps them
    assert again.former_segments == resumed.former_segments and again.steps == STEPS
    stated, accountant, tail = delta_of_run(plan, again, "jax-bm96")
    former = 200 * 40 / 2000 * _upper(A.RETIRED_MIN_REACH - 1 / 0.9)
    assert A.RETIRED_MIN_REACH == 5.22 and tail == pytest.approx(former + A.tail_figure(again.segments, A.BM96_REACH))
    assert accountant == DELTA and stated == pytest.approx(DELTA + tail) and stated > DELTA
    # a ledger this dpaudit wrote has none: the plan's delta holds its reserved tail
    assert delta_of_run(plan, ledger, "jax-bm96")[0] == plan.delta == DELTA
