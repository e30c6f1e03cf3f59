"""``--adambc-floor R`` (DP-AdamBC, Tang et al. 2024): the optimizer follows its formula (AdamW when there is no
noise), each step is handed the variance of the noise the engines actually drew (sigma x sensitivity over the
expected batch, so 2C for micro-batch clipping), the claim is the same run's, a resumed run equals a straight one,
and the option is refused where it has no meaning."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification

from dpaudit.cli import cli
from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer
from dpaudit.trainers.torch_common.noise_corrected_adam import NoiseCorrectedAdamW
from dpaudit.training.train_dir import list_checkpoints

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


def test_without_noise_it_is_adamw():
    torch.manual_seed(0)
    ours = [torch.randn(5, 3), torch.randn(7)]
    theirs = [p.clone() for p in ours]
    adamw = torch.optim.AdamW(theirs, lr=1e-2, weight_decay=0.1, foreach=True)
    corrected = NoiseCorrectedAdamW(ours, lr=1e-2, weight_decay=0.1, floor=0.1)
    for _ in range(20):
        for a, b in zip(ours, theirs):
            a.grad = torch.randn_like(a)
            b.grad = a.grad.clone()
        adamw.step()
        corrected.step(noise_variance=0.0)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_the_update_takes_the_noise_s_running_variance_out_and_floors_it():
    """Against a float64 reference of the formula, with Phi changing from step to step (a noise decay or a growing
    batch) and gradients at the noise's scale, so that the floor binds on some coordinates and not on others."""
    rng = np.random.default_rng(0)
    theta = rng.normal(size=64)
    param = torch.tensor(theta, dtype=torch.float64)
    lr, decay, floor = 1e-2, 0.05, 0.1
    opt = NoiseCorrectedAdamW([param], lr=lr, weight_decay=decay, floor=floor)
    m, v, n = np.zeros(64), np.zeros(64), 0.0
    floored = corrected = 0
    for t, phi in enumerate([1.0, 0.5, 2.0, 1.5, 0.25, 1.0], start=1):
        g = rng.normal(size=64) * np.sqrt(phi) + rng.normal(size=64) * np.linspace(0, 2, 64)
        param.grad = torch.tensor(g)
        opt.step(noise_variance=phi)
        n = BETA2 * n + (1 - BETA2) * phi
        phi_hat = n / (1 - BETA2**t)
        m = BETA1 * m + (1 - BETA1) * g
        v = BETA2 * v + (1 - BETA2) * g * g
        second = v / (1 - BETA2**t) - phi_hat
        floored += int(np.sum(second < floor * phi_hat))
        corrected += int(np.sum(second >= floor * phi_hat))
        theta = theta * (1 - lr * decay) - lr * (m / (1 - BETA1**t)) / (
            np.sqrt(np.maximum(second, floor * phi_hat)) + EPS
        )
        np.testing.assert_allclose(param.numpy(), theta, rtol=1e-12, atol=1e-12)
    assert floored > 0 and corrected > 0  # both branches ran
    group = opt.param_groups[0]
    assert group["steps"] == 6 and group["noise_sq"] == pytest.approx(n, rel=1e-15)


@pytest.mark.parametrize("floor", [0.0, -1.0, float("nan"), float("inf")])
def test_a_floor_that_is_not_positive_is_refused(floor):
    with pytest.raises(ValueError, match="positive fraction"):
        NoiseCorrectedAdamW([torch.zeros(2)], lr=1e-3, floor=floor)


def _noise_per_step(out):
    """(sigma, sensitivity factor, clip norm, expected batch size) of the run's one segment, as privacy.json
    states them."""
    record = json.loads((out / "privacy.json").read_text())
    (segment,) = record["segments"]
    return (
        segment["noise_multiplier"],
        segment["sensitivity_factor"],
        record["clip_norm"],
        segment["expected_batch_size"],
    )


@pytest.fixture(scope="module")
def corrected_runs(data_dir, tmp_path_factory, edp_config):
    """dp-sgd with and without --adambc-floor 0.1 (the same noise seed, sample and schedule) and edp-sgd with it;
    a checkpoint every step, kept."""
    root = tmp_path_factory.mktemp("adambc")
    runs = {}
    for name, mode, extra in (
        ("adamw", "dp-sgd", {}),
        ("dp-sgd", "dp-sgd", {"adambc_floor": 0.1}),
        ("edp-sgd", "edp-sgd", {"adambc_floor": 0.1}),
    ):
        config = edp_config(mode=mode, epochs=1, checkpoint_every=1, keep_checkpoints=True, **extra)
        EdpSgdTrainer().train(data_dir, root / name, config, seed=5)
        runs[name] = root / name
    return runs


@pytest.mark.parametrize(("mode", "sensitivity"), [("dp-sgd", 1.0), ("edp-sgd", 2.0)])
def test_each_step_is_handed_the_variance_of_the_noise_drawn(corrected_runs, mode, sensitivity):
    """Phi = (sigma x sensitivity / B)^2 per coordinate of the averaged gradient: C for an example, 2C for a
    micro-batch (one example can flip its micro-batch's clipped gradient). The running average after t steps is
    (1 - beta2^t) Phi; the last step's update is the formula's, from the checkpoints' own moments."""
    out = corrected_runs[mode]
    sigma, factor, clip, batch = _noise_per_step(out)
    assert factor == sensitivity and sigma == 1.0
    phi = (sigma * factor * clip / batch) ** 2
    (t1, c1), (t2, c2) = list_checkpoints(out / "checkpoints")[-2:]
    assert t2 == t1 + 1
    (group,) = json.loads((c2 / "state.json").read_text())["param_groups"]
    assert group["steps"] == t2 and group["floor"] == 0.1
    assert group["noise_sq"] == pytest.approx((1 - BETA2**t2) * phi, rel=1e-9)
    before, after = load_file(str(c1 / "arrays.safetensors")), load_file(str(c2 / "arrays.safetensors"))
    # The optimizer's tensor i is the trainer's i-th trained tensor: named_parameters order (clipping.trainable).
    model = AutoModelForSequenceClassification.from_pretrained(out / "model")
    names = [n for n, _ in model.named_parameters() if f"params/{n}" in after]
    assert len(names) == len(group["params"]) == sum(k.startswith("params/") for k in after)
    lr = group["lr"]
    floored = 0
    for i, name in enumerate(names):
        m, v = after[f"opt/{i}/exp_avg"].double(), after[f"opt/{i}/exp_avg_sq"].double()
        second = v / (1 - BETA2**t2) - phi
        floored += int((second < 0.1 * phi).sum())
        step = lr * (m / (1 - BETA1**t2)) / (second.clamp_min(0.1 * phi).sqrt() + EPS)
        expected = before[f"params/{name}"].double() - step  # no weight decay in these runs
        torch.testing.assert_close(after[f"params/{name}"].double(), expected, atol=2e-6, rtol=1e-4, msg=name)
    assert floored > 0  # tiny runs at sigma 1: the noise dominates somewhere, so the floor is exercised


def test_the_claim_is_the_same_run_s_and_names_the_optimizer(corrected_runs, assert_same_model):
    plain = json.loads((corrected_runs["adamw"] / "privacy.json").read_text())
    ours = json.loads((corrected_runs["dp-sgd"] / "privacy.json").read_text())
    optimizer = ours["details"].pop("optimizer")
    assert "optimizer" not in plain["details"]
    assert ours == plain  # epsilon, delta, noise, sampling, clipping: the optimizer changes none of them
    assert optimizer["floor"] == 0.1 and "AdamBC" in optimizer["kind"] and "public" in optimizer["why_post_processing"]
    with pytest.raises(AssertionError):  # and it did act
        assert_same_model(corrected_runs["adamw"], corrected_runs["dp-sgd"], atol=1e-6, rtol=0)


def test_a_resumed_run_equals_the_straight_one(edp_config, assert_resume_equals_straight):
    """The step count and the noise's running average live in the checkpoint's parameter groups."""
    assert_resume_equals_straight(edp_config(mode="dp-sgd", epochs=1, checkpoint_every=2, adambc_floor=0.1))


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mode", "sgd", "--adambc-floor", "0.1"], "--adambc-floor"),
        (["--mode", "dp-sgd", "--noise-multiplier", "1", "--adambc-floor", "0"], "--adambc-floor must be a finite"),
        (["--mode", "dp-sgd", "--noise-multiplier", "1", "--adambc-floor", "nan"], "--adambc-floor must be a finite"),
        (["--trainer", "rgp", "--noise-multiplier", "1", "--adambc-floor", "0.1"], "rgp's noise reaches each"),
    ],
)
def test_the_option_is_refused_in_one_line_where_it_has_no_meaning(data_dir, tmp_path, extra, message):
    out = tmp_path / "x"
    trainer = [] if "--trainer" in extra else ["--trainer", "edp-sgd"]
    args = ["train", *trainer, "--data", str(data_dir), "--out", str(out), "--preset", "tiny", *extra]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert not out.exists()
