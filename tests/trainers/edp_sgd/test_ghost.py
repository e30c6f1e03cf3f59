"""The one-backward ghost clipper equals the vmap clippers; devices; gradient-SNR telemetry."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from dpaudit.errors import UserInputError
from trainers.edp_sgd.clipping import MicrobatchClipper, PerExampleClipper, trainable
from trainers.edp_sgd.ghost import GhostClipper, UnsupportedModel
from trainers.edp_sgd.trainer import _Run
from trainers.torch_common import distributed, noise
from trainers.torch_common.model import layer_groups, per_example_losses

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _max_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """Largest absolute difference relative to the largest reference entry."""
    scale = max(float(w.abs().max()) for w in want)
    return max(float((g.cpu() - w.cpu()).abs().max()) for g, w in zip(got, want)) / scale


@pytest.mark.parametrize("task", ["classify", "mlm"])
@pytest.mark.parametrize("clip", [1e-3, 1e6])  # every example clipped / none clipped
def test_ghost_per_example_sum_equals_vmap(tiny_batches, task, clip):
    clf, clf_batch, mlm, mlm_batch = tiny_batches
    model, batch = (clf, clf_batch) if task == "classify" else (mlm, mlm_batch)  # mlm: decoder tied to embeddings
    _, params = trainable(model)
    want = PerExampleClipper(model, per_example_losses, clip_norm=clip, physical_batch=6).clipped_sum(batch)
    ghost = GhostClipper(model, per_example_losses, bounds=[clip], param_groups=[0] * len(params))
    got = ghost.clipped_sum(batch, np.arange(6), 6)
    assert _max_error(got.grads, want.grads) < 1e-5
    assert float(got.loss_sum) == pytest.approx(float(want.loss_sum), rel=1e-6)
    assert int(got.clipped) == int(want.clipped) == (6 if clip < 1 else 0)


@pytest.mark.parametrize("task", ["classify", "mlm"])
@pytest.mark.parametrize("scale", [1e-3, 1e6])
def test_ghost_per_layer_microbatch_sum_equals_vmap(tiny_batches, task, scale):
    clf, clf_batch, mlm, mlm_batch = tiny_batches
    model, batch = (clf, clf_batch) if task == "classify" else (mlm, mlm_batch)
    names, _ = trainable(model)
    group_names, groups = layer_groups(names)
    bounds = [scale * (i + 1) / 10 for i in range(len(group_names))]  # a different C_l per layer
    microbatches = [np.array([0, 3]), np.array([1]), np.array([2, 4, 5])]  # unequal sizes, unequal lengths
    want = MicrobatchClipper(model, per_example_losses, layer_clip_norms=bounds, param_groups=groups,
                             max_microbatch_size=3).clipped_sum(batch, microbatches)
    owner = np.zeros(6, dtype=np.int64)
    for unit, members in enumerate(microbatches):
        owner[members] = unit
    got = GhostClipper(model, per_example_losses, bounds=bounds, param_groups=groups).clipped_sum(batch, owner, 3)
    assert _max_error(got.grads, want.grads) < 1e-5
    assert int(got.clipped) == int(want.clipped)


def test_a_layer_outside_linear_layernorm_embedding_is_refused():
    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)
            self.gain = torch.nn.Parameter(torch.ones(2))  # a parameter no supported module owns

        def forward(self, x):
            return self.lin(x) * self.gain

    with pytest.raises(UnsupportedModel, match="gain"):
        GhostClipper(Scaled(), per_example_losses, bounds=[1.0], param_groups=[0, 0, 0])


def test_device_cuda_without_a_gpu_is_a_user_error_and_auto_picks_what_exists():
    assert distributed.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert distributed.resolve_device("cpu").type == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(UserInputError, match="--device cuda"):
            distributed.resolve_device("cuda")


@pytest.mark.parametrize("device", DEVICES)
def test_grad_snr_is_the_clipped_sum_norm_over_the_noise_norm(data_dir, tmp_path, edp_config, device):
    """dp-sgd on ONE example clipped to C: the clipped sum has norm exactly C; the noise is sigma C z with
    z the step's keyed standard normal draw, so SNR = 1 / (sigma ||z||) ~ 1 / (sigma sqrt(D))."""
    sigma, clip = 0.7, 1e-4  # C so small that the example is certainly clipped
    run = _Run(data_dir, tmp_path / "out", edp_config(mode="dp-sgd", noise_multiplier=sigma, clip_norm=clip,
                                                     device=device), seed=0)
    run._setup()
    step = 3
    grads, stats = run.aggregate(step, np.array([5]))
    z = noise.gaussian_sum(run.params, [(1.0, (step,))], run.noise_source.seed)
    z_norm = math.sqrt(sum(float(t.double().pow(2).sum()) for t in z))
    dim = sum(p.numel() for p in run.params)
    values = stats.cpu().tolist()
    assert values[2:4] == [1.0, 1.0]  # one unit, clipped
    assert values[4] == pytest.approx(clip, rel=1e-4)
    assert values[5] == pytest.approx(sigma * clip * z_norm, rel=1e-5)
    row = run._telemetry({"batch_size": 1, "sigma": sigma}, values)
    assert row["grad_snr"] == pytest.approx(1.0 / (sigma * z_norm), rel=1e-4)
    assert row["grad_snr"] == pytest.approx(1.0 / (sigma * math.sqrt(dim)), rel=5 / math.sqrt(2 * dim))
    assert all(g.device.type == device for g in grads)


def test_metrics_rows_carry_grad_snr_at_every_step(data_dir, tmp_path, edp_config):
    from trainers.edp_sgd.trainer import EdpSgdTrainer

    out = tmp_path / "run"
    result = EdpSgdTrainer().train(data_dir, out, edp_config(mode="edp-sgd", epochs=1, log_every=4), seed=0)

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == result.steps
    assert all(r["grad_snr"] is not None and r["grad_snr"] >= 0 for r in steps)
    assert all(r["grad_snr"] == pytest.approx(r["clipped_sum_norm"] / r["noise_norm"]) for r in steps)
