"""The claimed epsilon is printed with the conditions privacy.json states, wherever it appears.

A run trained with an explicit --noise-seed holds its epsilon only while that seed stays secret; a run started from an
--init-from model holds it only if the start is public; a start declared private is not covered at all; the float
noise sampler's tail, when not negligible, is part of delta. Before, the claim line said "epsilon = 8.00 at delta =
1.0e-5" and nothing else.
"""

from __future__ import annotations

from dp_accounting import dp_event

from dpaudit.accounting import event_to_json
from dpaudit.claim import claim_of_record
from dpaudit.claim.record import PrivacyRecord

EVENT = event_to_json(
    dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)), 200)
)


def _record(**fields) -> PrivacyRecord:
    base = dict(
        trainer="edp-sgd",
        private=True,
        n_public=False,
        declared_dataset_size=1000,
        mechanism="DP-SGD",
        event=EVENT,
        delta=1e-5,
        accountant="pld",
        epsilon=1.0,
        segments=[{"steps": 200, "sampling_probability": 0.01, "noise_multiplier": 1.1}],
    )
    return PrivacyRecord(**{**base, **fields})


def _text(record: PrivacyRecord) -> str:
    return claim_of_record(record).text()


def test_a_plain_claim_has_no_conditions() -> None:
    text = _text(_record())
    assert "(" not in text.split("delta")[1] and "secret" not in text


def test_an_explicit_noise_seed_and_a_start_not_known_public_are_in_the_claim_line() -> None:
    start = {"path": "runs/start", "dpaudit_run": False, "public_data_only": None}
    text = _text(_record(noise_seed_explicit=True, init_from=start))
    assert "--noise-seed given to training stays secret" in text
    assert "only if the --init-from start runs/start was trained on public data only" in text


def test_a_public_start_needs_no_condition_and_a_declared_private_one_comes_first() -> None:
    public = {"path": "runs/pub", "dpaudit_run": True, "public_data_only": True}
    assert "--init-from" not in _text(_record(init_from=public))
    private = {
        "path": "runs/np",
        "dpaudit_run": True,
        "public_data_only": False,
        "trained_on": "train.jsonl",
        "accepted_private": True,
    }
    text = _text(_record(init_from=private, noise_seed_explicit=True))
    first = text.split("(", 1)[1]
    assert first.startswith("it does NOT cover what the --init-from start runs/np learned")


def test_a_noise_tail_beyond_a_hundredth_of_delta_is_named() -> None:
    assert "tail" not in _text(_record(noise_tail_delta=1e-9, accountant_delta=1e-5 - 1e-9))
    text = _text(_record(noise_tail_delta=3e-7, accountant_delta=1e-5 - 3e-7))
    assert "delta includes the float noise sampler's tail, 3.0e-7" in text
