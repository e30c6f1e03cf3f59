"""``dpaudit train --trainer rgp``: reparametrized gradient perturbation (Yu et al. 2021, Algorithm 1).

The shared torch loop (:class:`~trainers.torch_common.loop.TorchPlugin`: data, masking, Poisson
sampling, the privacy plan and ledger, checkpoints, resume, HF export, the run directory) with RGP's
step:

1. carriers for every weight matrix W: K power iterations (Algorithm 2, :mod:`.carriers`) on the
   historical update W_t - W_0, or on W_t during the first ``--warmup-steps`` steps; RGP-random
   (``--random-carriers``) draws random orthonormal ones. Their Gaussian draws come from the public
   ``--seed`` keyed by the step: the carriers depend on no private data beyond released updates;
2. one forward/backward per chunk gives each example's carrier and non-matrix gradients, clipped
   jointly to C and summed (:mod:`.clipping`);
3. process 0 adds N(0, (sigma_e C)^2) to every summed coordinate (secret noise seed), the sums are
   all-reduced, Eq. 3 rebuilds the update of each W, and AdamW applies it with the non-matrix
   parameters' noisy gradients (all divided by the expected batch size).

White-box audits (Nasr et al. 2023; :class:`~dpaudit.training.gradient_canaries.GradientCanaryHost`, in
the shared loop): the audit block is a plain vector clipped with the carrier gradients, like the
non-matrix parameters (it is not reparametrized): each audit row is an example whose joint vector is
its block gradient alone, clipped to C, and the block gets the same N(0, (sigma_e C)^2) draw.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from dpaudit.trainers.rgp import privacy
from dpaudit.trainers.rgp.carriers import power_method, random_carriers, reconstruct
from dpaudit.trainers.rgp.clipping import CarrierClipper, Reparametrization
from dpaudit.trainers.rgp.config import RgpConfig
from dpaudit.trainers.torch_common.distributed import to_device
from dpaudit.trainers.torch_common.loop import (
    _MASK_STREAM,
    StepNoise,
    TorchPlugin,
    _seeded,
    noised_total,
)
from dpaudit.trainers.torch_common.model import per_example_losses
from dpaudit.trainers.torch_common.plugin import TorchTrainer
from dpaudit.training import RecordParts
from dpaudit.training.privacy_plan import PrivacyPlan

#: The contract suite's run (:meth:`RgpTrainer.tiny_config`): rank-4 RGP classification of a 2-layer
#: BERT on 16-token texts, one epoch of 16-example batches (6 steps, 2 of them warm-up).
TINY_SETTINGS: dict[str, Any] = {
    "task": "classify",
    "preset": "tiny",
    "vocab_size": 300,
    "max_length": 16,
    "epochs": 1,
    "batch_size": 16,
    "rank": 4,
    "warmup_steps": 2,
    "learning_rate": 1e-3,
    "noise_multiplier": 1.0,
    "eval_examples": 8,
    "checkpoint_every": 1000,
}
_CARRIER_STREAM = 13  # public --seed stream of the carriers' Gaussian draws


class _Plugin(TorchPlugin):
    """One invocation: the shared torch loop with RGP's step."""

    trainer_name: ClassVar[str] = "rgp"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reparam: Reparametrization | None = None
        self.initial: list[torch.Tensor] = []

    def _trainable(self) -> tuple[list[str], list[torch.nn.Parameter]]:
        self.reparam = Reparametrization(self.model)
        # W_0 of the historical update: the weights as built from --seed / --init-from, before any resume.
        self.initial = [w.detach().clone() for w in self.reparam.matrices]
        return self.reparam.names, self.reparam.params

    def _setup_mechanism(self, n: int, resume_state: Mapping[str, Any] | None) -> None:
        self.clipper = CarrierClipper(
            self.model,
            per_example_losses,
            self.reparam,
            clip_norm=self.config.clip_norm,
            physical_batch=self.config.physical_batch,
        )

    def carriers(self, step: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """L and R of every weight matrix at ``step`` (a function of the current weights and the public seed)."""
        config = self.config
        gen = _seeded(self.seed, _CARRIER_STREAM, step)
        lefts, rights = [], []
        with torch.no_grad():
            for i, (w, w0) in enumerate(zip(self.reparam.matrices, self.initial)):
                w, w0 = self.reparam.matrix(i, w), self.reparam.matrix(i, w0)  # p x d (a Conv1D's transpose)
                if config.random_carriers:
                    left, right = random_carriers(tuple(w.shape), config.rank, gen, dtype=w.dtype)
                    left, right = left.to(w.device), right.to(w.device)
                else:
                    # Step 0 always uses W itself: W_0 - W_0 = 0 has no principal subspace.
                    history = w if step < max(config.warmup_steps, 1) else w - w0
                    left, right = power_method(history, config.rank, config.power_iters, gen)
                lefts.append(left)
                rights.append(right)
        return lefts, rights

    def aggregate(
        self, step: int, indices: np.ndarray, sigma: float | None = None
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The noised update of every trained tensor (aligned with ``self.params``) and telemetry.
        ``sigma``: :meth:`TorchPlugin.aggregate`."""
        world = self.world
        sigma = self._sigma(step, sigma)
        # The same masking on every process: each example's mask is keyed by its own content hash, the
        # public seed and the step (never its position: docs/privacy.md, "One example's contribution").
        # A white-box audit's rows never reach the clipper: each is a unit of its own (its block gradient).
        indices, audit_rows = self._split_rows(indices)
        gen = _seeded(self.seed, _MASK_STREAM, step)
        full = self._batch("train", indices, generator=gen) if len(indices) else None
        lefts, rights = self.carriers(step)
        share = np.array_split(np.arange(len(indices)), world.size)[world.rank] if len(indices) else np.arange(0)
        device = self.device
        sums = [torch.zeros(s, device=device) for s in self.reparam.shapes([left.shape[1] for left in lefts])]
        block = self._audit_example_sum(audit_rows, self.clipper.clip_norm)
        sums = self._with_block(sums, block)
        loss_sum = correct_sum = clipped = 0.0
        units = 0
        # Algorithm 1, line 13: N(0, sigma^2 C^2) on every summed coordinate, drawn once (by process 0).
        draws = [(sigma * self.clipper.sensitivity, (step,))]
        step_noise = StepNoise(sums, draws if (world.primary and sigma > 0) else [], self.noise_source.seed, True)
        if len(share):
            sub = {key: v[to_device(torch.as_tensor(share), device)] for key, v in self._on_device(full).items()}
            result = self.clipper.clipped_sum(sub, lefts, rights)
            sums = self._with_block(result.grads, block)
            loss_sum, correct_sum, units, clipped = result.loss_sum, result.correct_sum, result.units, result.clipped
        sums, stats = noised_total(
            sums, step_noise, (loss_sum, correct_sum, units, clipped), world=world, device=device
        )
        k = len(lefts)
        updates = [
            self.reparam.matrix(i, reconstruct(sums[2 * i], sums[2 * i + 1], lefts[i], rights[i])).contiguous()
            for i in range(k)
        ]  # Eq. 3, in each weight's stored layout
        return updates + sums[2 * k :], stats

    def _mechanism_parts(self, plan: PrivacyPlan, steps: int, details: dict[str, Any]) -> RecordParts:
        config = self.config
        details.update(
            {
                "rank": config.rank,
                "power_iters": config.power_iters,
                "warmup_steps": config.warmup_steps,
                "carriers": "random (public --seed)" if config.random_carriers else "historical update (power method)",
                "reparametrized_weights": self.reparam.names[: len(self.reparam.matrices)],
                "clipped_with_the_carriers": self.reparam.names[len(self.reparam.matrices) :],
                "frozen": self.reparam.frozen,
            }
        )
        return privacy.record_parts(
            plan=plan, clipper=self.clipper, rank=config.rank, random_carriers=config.random_carriers, details=details
        )


class RgpTrainer(TorchTrainer):
    """RGP fine-tuning of a BERT-family model (or a GPT-2, ``--task clm``) in PyTorch (Yu et al. 2021); registered
    as ``rgp``."""

    name: ClassVar[str] = "rgp"
    #: The last line of ``dpaudit train --trainer rgp --help``.
    example: ClassVar[str] = (
        "Example: dpaudit train --trainer rgp --data runs/data --out runs/clf-rgp8 --rank 16 "
        "--epochs 3 --batch-size 32 --target-epsilon 8"
    )
    Config: ClassVar[type] = RgpConfig
    Plugin: ClassVar[type] = _Plugin
    TINY_SETTINGS: ClassVar[dict[str, Any]] = TINY_SETTINGS
