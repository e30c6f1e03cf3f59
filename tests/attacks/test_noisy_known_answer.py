"""Known answer under DP: a model trained with large noise (noise multiplier 50, DP noise fixed by
seed) shows no memorization: its 100x canaries' exposure is indistinguishable from the controls'."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli


def _attack(*args: str):
    return CliRunner().invoke(cli, ["attack", *args], catch_exceptions=False)


@pytest.mark.slow
def test_model_trained_with_large_noise_is_indistinguishable_from_controls(noisy_canary_model, canary_data, tmp_path):
    out = tmp_path / "noisy"
    result = _attack("--model", str(noisy_canary_model), "--data", str(canary_data), "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)
    exposure = {r["frequency"]: r for r in results["attacks"][0]["rows"]}
    recon = {r["frequency"]: r for r in results["attacks"][1]["rows"]}
    assert exposure[100]["vs_controls"]["p_value"] > 0.05, exposure
    assert recon[100]["exact_matches"] == 0
    claimed = results["claimed_privacy"]
    assert claimed["private"] and claimed["epsilon"] == pytest.approx(claimed["recorded_epsilon"], rel=1e-9)
