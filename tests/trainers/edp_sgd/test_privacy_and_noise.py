"""Honest accounting: the noise that runs, and the epsilon privacy.json claims for it.

The epsilon oracle is plain ``dp_accounting`` with the mechanism worked out here: each step adds
Gaussian noise of std sigma_e x 2C (edp-sgd's sensitivity, measured below on the real step) to a
sum that one example moves by at most 2C, so the accountant's noise multiplier is sigma_e.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant

from dpaudit.claim.record import PrivacyRecord
from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer, _Plugin


@pytest.mark.parametrize(("mode", "draw"), [("edp-sgd", "process"), ("edp-sgd", "micro-batch"), ("dp-sgd", "process")])
def test_the_step_noise_std_is_sigma_times_the_clippers_sensitivity(data_dir, tmp_path, edp_config, mode, draw):
    config = edp_config(mode=mode, noise_draw=draw, noise_multiplier=0.8, clip_norm=0.5)
    run = _Plugin(data_dir, tmp_path / "out", config, seed=0)
    run._setup()
    expected_factor = 2.0 if mode == "edp-sgd" else 1.0  # worked out: micro-batches hold several examples
    assert run.clipper.sensitivity == pytest.approx(expected_factor * 0.5)
    acc, _ = run.aggregate(0, np.arange(0))  # an empty batch: the aggregate is the noise alone
    flat = torch.cat([a.flatten() for a in acc]).double()
    assert float(flat.std()) == pytest.approx(0.8 * expected_factor * 0.5, rel=0.02)


def _independent_epsilon(q, steps_per_epoch, sigmas, delta):
    accountant = pld_privacy_accountant.PLDAccountant()
    for sigma in sigmas:
        accountant.compose(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps_per_epoch)
    return accountant.get_epsilon(delta)


def test_privacy_json_epsilon_equals_an_independent_computation(data_dir, tmp_path_factory, edp_config):
    out = tmp_path_factory.mktemp("edp") / "run"
    config = edp_config(mode="edp-sgd", noise_multiplier=1.5, noise_decay="linear", decay_rate=0.2, epochs=3)
    result = EdpSgdTrainer().train(data_dir, out, config, seed=0)
    raw = json.loads((out / "privacy.json").read_text())
    record = PrivacyRecord.from_json(raw)
    assert record.to_json() == raw
    # Not a 32-bit manual_seed stream: 128-bit Philox keys (the C sampler builds here).
    assert (
        record.details["noise_generator"].startswith("Philox4x32-10")
        and "128-bit key" in record.details["noise_generator"]
    )
    n, batch = 96, 16
    q, per_epoch = batch / n, math.ceil(n / batch)
    delta = min(1e-5, 1 / (10 * n))  # the default: well below 1/N
    assert record.delta == delta
    sigmas = [max(1.5 * (1 - 0.2 * e), 0.15) for e in range(3)]  # linear decay, floor sigma_0 / 10
    assert record.noise_multipliers == pytest.approx(sigmas)
    # Noise std on the sum = sigma_e * 2C and one example moves the sum by <= 2C: multiplier sigma_e.
    expected = _independent_epsilon(q, per_epoch, sigmas, delta)
    assert record.epsilon == pytest.approx(expected, rel=1e-9)
    assert result.epsilon == pytest.approx(expected, rel=1e-9)
    assert record.recompute_epsilon() == pytest.approx(expected, rel=1e-9)
    assert record.sensitivity_factor == 2.0 and record.privacy_unit == "example" and record.adjacency == "add_remove"
    assert record.clip_norm == pytest.approx(1.0)  # sqrt(sum C_l^2) = C
    assert "micro-batch clipping" in record.mechanism and "k = 4" in record.mechanism
    # The paper's accounting takes std / C = 2 sigma_e as the multiplier: a smaller, unproven epsilon.
    paper = _independent_epsilon(q, per_epoch, [2 * s for s in sigmas], delta)
    assert record.paper_claim["epsilon"] == pytest.approx(paper, rel=1e-9)
    assert paper < expected and "NOT proven" in record.paper_claim["assumption"]
    assert len(record.event["events"]) == 3  # one segment per epoch
    # Group privacy for the canaries inserted 1, 2 and 3 times, by the chained definition worked out here.
    assert [row["frequency"] for row in record.group_privacy] == [1, 2, 3]
    for row in record.group_privacy:
        f = row["frequency"]
        assert row["epsilon"] == pytest.approx(f * expected, rel=1e-12)
        chained = delta * sum(math.exp(i * expected) for i in range(f))
        assert row["delta"] == (None if chained >= 1 else pytest.approx(chained, rel=1e-9))


def test_target_epsilon_calibrates_the_whole_schedule(data_dir, tmp_path, edp_config):
    config = edp_config(
        mode="dp-sgd", noise_multiplier=None, target_epsilon=2.0, noise_decay="exp", decay_rate=0.5, epochs=2
    )
    result = EdpSgdTrainer().train(data_dir, tmp_path / "run", config, seed=0)
    record = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert record["noise_calibrated"] and result.epsilon <= 2.0 and result.epsilon == pytest.approx(2.0, rel=0.01)
    sigma0 = record["noise_multipliers"][0]
    sigmas = [sigma0, sigma0 * math.exp(-0.5)]
    assert record["noise_multipliers"] == pytest.approx(sigmas)
    assert record["paper_claim"]["epsilon"] == pytest.approx(record["epsilon"], rel=1e-12)  # sensitivity C: the same
    assert _independent_epsilon(16 / 96, 6, sigmas, 1e-5) == pytest.approx(result.epsilon, rel=1e-9)


def test_target_epsilon_caps_a_run_with_a_given_noise(data_dir, tmp_path, edp_config):
    # sigma 2 at q = 1/6, delta 1e-5: 6 steps spend about 1.09, 12 steps about 1.46 (dp_accounting).
    config = edp_config(mode="edp-sgd", noise_multiplier=2.0, target_epsilon=1.2)
    result = EdpSgdTrainer().train(data_dir, tmp_path / "run", config, seed=0)
    assert result.summary["stopped_at_budget"] and 6 < result.steps < 12
    assert result.epsilon <= 1.2
    assert result.epsilon == pytest.approx(_independent_epsilon(16 / 96, result.steps, [2.0], 1e-5), rel=1e-9)
    more = _independent_epsilon(16 / 96, result.steps + 1, [2.0], 1e-5)
    assert more > 1.2  # one more step would have overspent


def test_scale_from_private_is_reported_as_an_unaccounted_release(data_dir, tmp_path, edp_config):
    config = edp_config(mode="edp-sgd", scale_from="private", epochs=1)
    EdpSgdTrainer().train(data_dir, tmp_path / "run", config, seed=0)
    record = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert record["details"]["layer_clip_norms_from"].startswith("train.jsonl")
    assert any("NOT covered" in text for text in record["unaccounted_releases"])
    # The norms are a function of private data: not in the released privacy.json, only in the private manifest.
    assert "layer_clip_norms" not in record["details"]
    norms = json.loads((tmp_path / "run" / "manifest.json").read_text())["layer_clip_norms"]
    assert math.fsum(c * c for c in norms.values()) == pytest.approx(1.0)
