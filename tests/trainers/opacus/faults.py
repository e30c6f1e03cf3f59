"""Library-style faults planted in Opacus 1.6 itself (monkeypatched for one test), and a light audit host.

Each fault is a bug class DP libraries have shipped (``docs/auditing.md``, "Planted library faults"):

- ``noise_by_batch``: the noise std divided by the realized batch size (noise meant for the mean added to the sum);
- ``noise_reused``: one noise draw per parameter, reused at every step;
- ``per_layer_flat``: per-layer clip norms C_l, noise scaled by one flat C (the largest C_l) instead of
  sqrt(sum C_l^2);
- ``micro_steps``: gradient accumulation accounted per micro-step: the accountant records k steps of rate q / k per
  update.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from dpaudit.trainers.opacus.loop import LibrarySetup, PrivacySettings, run_opacus
from dpaudit.trainers.opacus.privacy import build_record

FAULTS = ("noise_by_batch", "noise_reused", "per_layer_flat", "micro_steps")
#: A fault that only rescales each release (the noisy sum divided by the realized batch size instead of the expected
#: one): the canaries' signal-to-noise ratio is unchanged, so this audit is not expected to see it (the benchmark
#: measures how often it is flagged).
SCALE_ONLY = "normalized_by_realized"
#: Opacus's sigma for epsilon 4 at q = 0.5, 4 steps, delta 1e-5 (its PRV accountant).
SIGMA = 1.43
DELTA = 1e-5
#: Micro-steps per update of the accumulation fault (32: its claim is epsilon 0.6 for the 4.0 that ran).
ACCUMULATION = 32
#: Canary tables of the per-layer runs: the flat-C fault leaves 1 / sqrt(8) of the claimed noise on them.
CANARY_TABLES = 8


def tiny_setup() -> LibrarySetup:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = (x[:, 0] > 0).long()
    model = nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=32)
    return LibrarySetup(model, optimizer, loader)


class LightHost:
    """A gradient-path host that trains :func:`tiny_setup` with Opacus and writes only ``privacy.json`` (the audit
    reads nothing else): the library's real per-example gradient path at a few tenths of a second per run."""

    library = "opacus"

    def __init__(self, *, noise_seed: int, clipping: str = "flat", steps: int = 4) -> None:
        self.noise_seed, self.clipping, self.steps = noise_seed, clipping, steps

    def train_with_gradient_canaries(
        self, data_dir: Any, out_dir: Path, config: Any, *, gains: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        per_layer = self.clipping == "per_layer"
        settings = PrivacySettings(
            noise_multiplier=SIGMA,
            clip_norm=1.0,
            steps=self.steps,
            delta=DELTA,
            clipping=self.clipping,
            noise_seed=self.noise_seed,
        )
        run = run_opacus(
            tiny_setup(),
            settings,
            gains=gains,
            canary_layers=CANARY_TABLES if per_layer else 1,
            per_layer_norms=[0.01, 0.01] if per_layer else None,
        )
        record = build_record(
            run,
            delta=DELTA,
            accountant="prv",
            grad_sample_mode="hooks",
            clipping=self.clipping,
            target_epsilon=None,
            noise_seed_explicit=True,
        )
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "privacy.json").write_text(json.dumps(record.to_json()))
        assert run.observations is not None and run.final is not None
        return run.observations, run.final


@contextlib.contextmanager
def planted(fault: str | None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Plant ``fault`` (None: Opacus as installed) for the duration of the block."""
    import opacus.accountants.accountant as accountant_mod
    import opacus.optimizers.optimizer as optimizer_mod
    from opacus.optimizers.perlayeroptimizer import DPPerLayerOptimizer

    with monkeypatch.context() as patch:
        if fault == "noise_by_batch":

            def add_noise(self: Any) -> None:
                realized = max(1, len(self.grad_samples[0]))
                for p in self.params:
                    std = self.noise_multiplier * self.max_grad_norm / realized
                    noise = optimizer_mod._generate_noise(std=std, reference=p.summed_grad, generator=self.generator)
                    p.grad = (p.summed_grad + noise).view_as(p)
                    optimizer_mod._mark_as_processed(p.summed_grad)

            patch.setattr(optimizer_mod.DPOptimizer, "add_noise", add_noise)
        elif fault == SCALE_ONLY:

            def scale_grad(self: Any) -> None:
                realized = max(1, len(self.grad_samples[0]))
                for p in self.params:
                    p.grad /= realized

            patch.setattr(optimizer_mod.DPOptimizer, "scale_grad", scale_grad)
        elif fault == "noise_reused":
            drawn: dict[tuple[int, ...], torch.Tensor] = {}
            original = optimizer_mod._generate_noise

            def generate(std: float, reference: torch.Tensor, generator: Any = None, secure_mode: bool = False) -> Any:
                key = tuple(reference.shape)
                if key not in drawn:
                    drawn[key] = original(std, reference, generator, secure_mode)
                return drawn[key].clone()

            patch.setattr(optimizer_mod, "_generate_noise", generate)
        elif fault == "per_layer_flat":
            init = DPPerLayerOptimizer.__init__

            def per_layer_init(self: Any, *args: Any, **kwargs: Any) -> None:
                init(self, *args, **kwargs)
                self.max_grad_norm = max(self.max_grad_norms)  # the noise of one flat C

            patch.setattr(DPPerLayerOptimizer, "__init__", per_layer_init)
        elif fault == "micro_steps":

            def hook_fn(self: Any, sample_rate: float) -> Any:
                def hook(optim: Any) -> None:
                    for _ in range(ACCUMULATION):
                        self.step(noise_multiplier=optim.noise_multiplier, sample_rate=sample_rate / ACCUMULATION)

                return hook

            patch.setattr(accountant_mod.IAccountant, "get_optimizer_hook_fn", hook_fn)
        elif fault is not None:
            raise ValueError(fault)
        yield


def clipping_of(fault: str | None) -> str:
    return "per_layer" if fault == "per_layer_flat" else "flat"


def verdicts(fault: str | None, seeds: int, monkeypatch: pytest.MonkeyPatch, *, canaries: int) -> list[bool]:
    """Whether each of ``seeds`` one-run verdict audits (:class:`LightHost`, ``canaries`` canaries) of Opacus with
    ``fault`` planted (None: as installed) raised the alarm."""
    from dpaudit.whitebox.gradient_path import audit_gradient_path

    flags = []
    with planted(fault, monkeypatch):
        for seed in range(seeds):
            analysis, _ = audit_gradient_path(
                LightHost(noise_seed=10_000 + seed, clipping=clipping_of(fault)),
                None,
                None,
                canaries=canaries,
                seed=seed,
                full=False,
                min_scale=1.0,
            )
            flags.append(analysis.alarm)
    return flags


def expected_sigma_share() -> float:
    """How much of the claimed noise the per-layer fault leaves: C_max / sqrt(sum C_l^2)."""
    norms = [0.01, 0.01] + [1.0 / math.sqrt(CANARY_TABLES)] * CANARY_TABLES
    return max(norms) / math.sqrt(sum(c * c for c in norms))
