"""A claim read from an Opacus accountant is compared with the bound like any other stated epsilon.

Before, ``--claimed-from-opacus`` claims carried no recorded epsilon and the headline read them as "no proven
epsilon": a one-run proof of 2.98 against an Opacus claim of 0.0127 read "no claim to compare with", while the same
claim given as ``--claimed-epsilon 0.02`` read "CLAIM CONTRADICTED".
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from dpaudit.audit import audit_scores
from dpaudit.claim import Claim, opacus_claim
from dpaudit.verdict.headline import AuditSource, headline


def _leaky_coin_flip_audit() -> AuditSource:
    rng = np.random.default_rng(0)
    coins = rng.random(1000) < 0.5
    scores = coins * 6.0 + rng.normal(0, 1, coins.size)  # a model that leaks every canary
    audit = dataclasses.replace(
        audit_scores(scores[coins], scores[~coins], delta=1e-5, num_bootstrap=2, seed=0), coin_flip=True
    )
    return AuditSource(attack="canary", task="canaries", audit=audit, group_size=1)


def test_an_opacus_claim_is_compared_with_the_bound(tmp_path) -> None:
    state = tmp_path / "accountant.json"
    state.write_text(json.dumps({"history": [[8.0, 0.001, 100]], "mechanism": "rdp"}), encoding="utf-8")
    claimed = opacus_claim(state, 1e-5)
    claim = claimed
    assert claim.proven and claim.epsilon == claimed.epsilon and claim.epsilon < 0.1
    head = headline([_leaky_coin_flip_audit()], claim)
    assert head.best.compared_with == claim.epsilon
    assert head.contradicted or head.mechanism_refuted
    assert "no claim to compare with" not in head.text()


def test_results_written_before_shuffle_runs_were_marked_still_read_as_unproven() -> None:
    legacy = {"known": True, "private": True, "epsilon": 0.15, "recorded_epsilon": None, "delta": 1e-5}  # results.json
    assert not Claim.from_json(legacy).proven and Claim.from_json(legacy).epsilon_if_poisson == 0.15
