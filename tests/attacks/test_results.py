"""results.json round-trips through the typed dataclasses, and unknown schemas are refused."""

from __future__ import annotations

import json

import pytest

from dpaudit.attacks.results import (
    SCHEMA,
    AttackResults,
    CanaryScore,
    DataInfo,
    ExposureParameters,
    ExposureResult,
    ExposureRow,
    ModelInfo,
    ReconstructionParameters,
    ReconstructionResult,
    ReconstructionRow,
    result_from_json,
)
from dpaudit.audit.intervals import Interval, OneSidedTest
from dpaudit.claim import Claim


def _results() -> AttackResults:
    ci = Interval(low=1.0, high=2.0, level=0.95, method="percentile bootstrap (2000 resamples)")
    test = OneSidedTest(
        statistic=16.0, p_value=0.014, n=4, n_baseline=4, alternative="greater", method="Mann-Whitney U (scipy)"
    )
    exposure = ExposureResult(
        parameters=ExposureParameters(secret_format="digits:4", log2_space_size=13.2877, reveal=0, tolerance=1e-9),
        rows=(
            ExposureRow(frequency=0, n=4, mean=0.5, mean_ci=ci, median=0.4, median_ci=None, max=1.0, vs_controls=None),
            ExposureRow(
                frequency=100, n=4, mean=12.0, mean_ci=ci, median=12.5, median_ci=ci, max=13.2877, vs_controls=test
            ),
        ),
        slope_per_doubling=None,
        warnings=("a warning",),
    )
    recon = ReconstructionResult(
        parameters=ReconstructionParameters(secret_format="digits:4", reveal=0, top_k=10, fill="argmax"),
        rows=(
            ReconstructionRow(
                frequency=100,
                n=4,
                exact_matches=2,
                exact_match_rate=0.5,
                exact_match_ci=ci,
                edit_distance_mean=1.0,
                normalized_edit_distance_mean=0.14,
                normalized_edit_distance_ci=None,
                top_k_hits=4,
                vs_controls=test,
            ),
        ),
    )
    return AttackResults(
        model=ModelInfo(path="m", kind="masked-lm", architecture="BertForMaskedLM"),
        data=DataInfo(
            path="d", secret_format="digits:4", log2_space_size=13.2877, canaries=8, controls=4, template="t"
        ),
        claimed=Claim(known=True, private=True, epsilon=3.2, recorded_epsilon=3.2, delta=1e-5, accountant="pld"),
        attacks=(exposure, recon),
        warnings=("shared context",),
        canaries=(
            CanaryScore(id="c0", frequency=100, secret="1 2 3 4", fill="1 2 3 4", exact=True, rank_low=1, rank_high=1),
        ),
    )


def test_round_trip_through_json_text():
    results = _results()
    obj = json.loads(json.dumps(results.to_json()))
    assert obj["schema"] == SCHEMA and "canaries" not in obj
    back = AttackResults.from_json(obj, results.canaries)
    assert back == results
    assert back["exposure"].rows[1].vs_controls.p_value == 0.014
    assert CanaryScore.from_json(json.loads(json.dumps(results.canaries[0].to_json()))) == results.canaries[0]


def test_unknown_schema_and_attack_are_refused():
    obj = _results().to_json()
    with pytest.raises(ValueError, match="schema"):
        AttackResults.from_json({**obj, "schema": "dpaudit.attack/99"})
    with pytest.raises(ValueError, match="unknown attack"):
        result_from_json({"attack": "nope"})
    with pytest.raises(KeyError):
        _results()["mia"]
