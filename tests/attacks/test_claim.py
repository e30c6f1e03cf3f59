"""The claim beside every attack: recomputed from the privacy record's event, never copied from the file."""

from __future__ import annotations

import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant as pld

from dpaudit.accounting import event_to_json
from dpaudit.claim import claim_of_record
from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.errors import UserInputError

EVENT = dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.02, dp_event.GaussianDpEvent(1.2)), 300)


def _golden() -> float:
    accountant = pld.PLDAccountant()
    accountant.compose(EVENT)
    return accountant.get_epsilon(1e-5)


def test_the_epsilon_is_the_events_not_the_files():
    record = PrivacyRecord(
        trainer="jax-bert",
        private=True,
        mechanism="DP-SGD",
        event=event_to_json(EVENT),
        delta=1e-5,
        accountant="pld",
        epsilon=0.01,
        dataset_size=5000,
    )  # a file that understates its epsilon
    claim = claim_of_record(record)
    assert claim.epsilon == pytest.approx(_golden(), rel=1e-6) and claim.recorded_epsilon == 0.01
    shuffle = PrivacyRecord(
        trainer="jax-bert",
        private=True,
        mechanism="DP-SGD",
        event=event_to_json(EVENT),
        delta=1e-5,
        accountant="pld",
        sampling="shuffle",
        epsilon_if_poisson=0.01,
        dataset_size=5000,
    )
    claim = claim_of_record(shuffle)
    assert claim.epsilon is None and claim.epsilon_if_poisson == pytest.approx(_golden(), rel=1e-6)
    assert claim_of_record(None).known is False
    assert claim_of_record(PrivacyRecord(trainer="jax-bert", private=False, mechanism="none")).private is False


def test_an_unreadable_event_is_one_line_naming_the_file():
    record = PrivacyRecord(
        trainer="jax-bert",
        private=True,
        mechanism="DP-SGD",
        event={"name": "edited"},
        delta=1e-5,
        accountant="pld",
        epsilon=1.0,
        dataset_size=5000,
    )
    with pytest.raises(
        UserInputError, match=r"^/runs/m/privacy.json: cannot read the DpEvent .*rerun dpaudit train\.$"
    ):
        claim_of_record(record, where="/runs/m/privacy.json")
