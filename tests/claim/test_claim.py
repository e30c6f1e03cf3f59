"""The one claim type (:class:`dpaudit.claim.Claim`): read once from privacy.json, checked, and the same everywhere.

A privacy.json states sigma three times (the DpEvent, ``segments`` and ``noise_multipliers``); nothing used to check
on read that they agree, so a reader could account one sigma and show another. The claim derives its segments from
the event and refuses a file whose other statements disagree. Every earlier form of a stored claim still reads.
"""

from __future__ import annotations

import dataclasses

import pytest

from dpaudit import accounting
from dpaudit.accounting.events import Segment
from dpaudit.claim import Claim, PrivacyRecord, claim_of_record, stated_claim, unknown_claim
from dpaudit.common.errors import UserInputError

SEGMENTS = (
    Segment(steps=100, sampling_probability=0.02, noise_multiplier=1.1, sensitivity_factor=2.0),
    Segment(steps=50, sampling_probability=0.04, noise_multiplier=0.9, sensitivity_factor=2.0),
)


def _record(**fields) -> PrivacyRecord:
    event = accounting.event_to_json(accounting.schedule_event(SEGMENTS))
    base = dict(
        trainer="edp-sgd",
        private=True,
        mechanism="micro-batch DP-SGD",
        event=event,
        delta=1e-5,
        accountant="pld",
        epsilon=1.0,
        n_public=False,
        declared_dataset_size=1000,
        clip_norm=0.5,
        sensitivity_factor=2.0,
        noise_multipliers=[1.1, 0.9],
        segments=[s.to_json() for s in SEGMENTS],
    )
    return PrivacyRecord(**{**base, **fields})


def test_the_claim_is_derived_from_the_event_and_recomputed() -> None:
    claim = claim_of_record(_record())
    expected = accounting.epsilon(accounting.schedule_event(SEGMENTS), 1e-5)
    assert claim.proven and claim.states_mechanism and claim.epsilon == pytest.approx(expected, rel=1e-9)
    assert claim.epsilon != 1.0 and claim.recorded_epsilon == 1.0  # never copied from the file
    assert claim.segments == SEGMENTS and claim.steps == 150 and claim.clip_norm == 0.5
    assert claim.trainer == "edp-sgd" and claim.mechanism_words == "micro-batch DP-SGD"


@pytest.mark.parametrize(
    "edit, words",
    [
        (
            {"segments": [dataclasses.replace(SEGMENTS[0], noise_multiplier=2.2).to_json(), SEGMENTS[1].to_json()]},
            "segments disagree with its DpEvent",
        ),
        (
            {"segments": [dataclasses.replace(SEGMENTS[0], steps=99).to_json(), SEGMENTS[1].to_json()]},
            "segments disagree with its DpEvent",
        ),
        ({"noise_multipliers": [1.1, 0.45]}, r"noise_multipliers \[1.1, 0.45\] are not the sigmas of its DpEvent"),
    ],
)
def test_sigmas_stated_three_times_must_agree(edit, words) -> None:
    with pytest.raises(UserInputError, match=words) as err:
        claim_of_record(_record(**edit), where="runs/m/privacy.json")
    assert str(err.value).startswith("runs/m/privacy.json: ") and "\n" not in str(err.value)


def test_a_claim_round_trips_through_results_json() -> None:
    for claim in (
        claim_of_record(_record()),
        stated_claim(2.0, 1e-6),
        unknown_claim(),
        claim_of_record(PrivacyRecord(trainer="jax-bert", private=False, mechanism="none")),
    ):
        assert Claim.from_json(claim.to_json()) == claim


def test_earlier_forms_of_a_stored_claim_read() -> None:
    legacy = {
        "known": True,
        "private": True,
        "epsilon": 3.2,
        "recorded_epsilon": 3.2,
        "delta": 1e-5,
        "accountant": "pld",
        "guarantee": "g",
        "sampling": "poisson",
        "segments": [{"steps": 10, "sampling_probability": 0.1, "noise_multiplier": 1.0}],
    }
    claim = Claim.from_json(legacy)
    assert claim.proven and claim.segments[0].steps == 10 and claim.source == "privacy.json"
    whitebox = {
        "epsilon": 4.0,
        "delta": 1e-5,
        "steps": 10,
        "clip_norm": 1.0,
        "sensitivity_factor": 2.0,
        "segments": [{"steps": 10, "sampling_probability": 0.5, "noise_multiplier": 2.0}],
    }
    claim = Claim.from_json(whitebox)
    assert claim.states_mechanism and claim.sensitivity_factor == 2.0 and claim.steps == 10
    shuffle = {**legacy, "sampling": "shuffle"}
    assert not Claim.from_json(shuffle).proven and Claim.from_json(shuffle).epsilon_if_poisson == 3.2
    with pytest.raises(UserInputError, match="results.json"):
        Claim.from_json({**legacy, "segments": [{"steps": "ten"}]})


def test_one_claim_type_everywhere() -> None:
    """The attacks' results, the headline, the white-box audit and the report all hold this one type."""
    import typing

    from dpaudit.attacks.results import AttackResults
    from dpaudit.report.load import ReportRun
    from dpaudit.report.whitebox_load import WhiteboxRun
    from dpaudit.verdict.headline import Headline
    from dpaudit.whitebox.harness import RunEvidence

    for cls, name in (
        (AttackResults, "claimed"),
        (Headline, "claim"),
        (WhiteboxRun, "claim"),
        (RunEvidence, "claim"),
        (ReportRun, "privacy"),
    ):
        hint = typing.get_type_hints(cls)[name]
        assert Claim in (typing.get_args(hint) or (hint,)), (cls, hint)
