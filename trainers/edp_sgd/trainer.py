"""``dpaudit train --trainer edp-sgd``: sgd, dp-sgd and eDP-SGD fine-tuning of BERT (Dupuy et al. 2021), and of
GPT-2-shaped causal LMs (``--task clm``: :func:`trainers.torch_common.model.causal_losses`).

The one place that composes the pieces: the torch loop shared with the ``rgp`` trainer
(:mod:`trainers.torch_common.loop`: data and masking, model and per-example losses, Poisson sampling
and micro-batch assignment, noise, processes, checkpoints and the Hugging Face export are in
:mod:`trainers.torch_common`), clipping with its own sensitivity (:mod:`dpaudit.trainers.torch_common.clipping`), the privacy plan
and ledger (the core's :mod:`dpaudit.training.privacy_plan`), privacy.json (:mod:`.privacy`, filling the
core's :class:`~dpaudit.claim.record.PrivacyRecord`) and the run directory (the core's
:mod:`dpaudit.training.train_dir`).

A run (docs/trainers.md, "The run skeleton"):

1. verify the inject directory; read train (private), heldout (evaluation) and public (tokenizer,
   per-layer clip scaling) splits; resolve the secret noise seed (OS entropy unless --noise-seed;
   process 0's is broadcast);
2. build the clipper (it owns the sensitivity), then plan the privacy of the whole run before
   anything is written: per-epoch sigma schedule x sensitivity factor, sigma_0 given or calibrated,
   the ledger certifies the plan;
3. each step: Poisson-sample (secret generator keyed by the step), record the step in the ledger
   BEFORE it runs (the ledger refuses a step past the budget and the run stops there), compute this
   process's share (whole batch / per-example clipped sum / its micro-batches, per-layer clipped),
   add noise of std sigma_e x sensitivity, all-reduce, divide by the expected batch size, Adam;
4. checkpoint atomically every --checkpoint-every steps and at each epoch end; a rerun of the same
   command resumes from the newest checkpoint (RNG streams are keyed by step: nothing else to save);
5. finish: ``model/``, ``metrics.jsonl``, ``privacy.json``, ``manifest.json`` (last), each atomic;
   checkpoints/ (it holds the secret seed) is deleted unless --keep-checkpoints.

``--peft lora`` (docs/trainers.md, "LoRA adapters"): :func:`trainers.torch_common.lora.apply_lora` freezes the model
and injects peft's LoRA adapters before the trained tensors are listed, so every engine, the noise, the checkpoints
and the audit block see only the adapters (and a classifier's head); the export writes the merged model and the
adapter alone.

White-box audits (Nasr et al. 2023; :class:`~dpaudit.training.gradient_canaries.GradientCanaryHost`, in
the shared loop): in sgd and dp-sgd each audit row is its own unit (clipped to C in dp-sgd), in
edp-sgd it joins micro-batch ``slot[r]`` and is clipped with that micro-batch's real rows, its block
gradient spread over one reserved coordinate per layer group so it can use the whole budget C
(:mod:`trainers.torch_common.canary_block`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.edp_sgd import privacy
from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
from dpaudit.trainers.torch_common import noise, sampling
from dpaudit.trainers.torch_common.clipped import Clipped
from dpaudit.trainers.torch_common.clipping.ghost import GhostClipper, UnsupportedModel
from dpaudit.trainers.torch_common.clipping.microbatch import MicrobatchClipper, layer_clip_norms
from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper, trainable
from dpaudit.trainers.torch_common.distributed import to_device
from dpaudit.trainers.torch_common.hf_export import save_hf
from dpaudit.trainers.torch_common.loop import (
    _EVAL_STREAM,
    _MASK_STREAM,
    StepNoise,
    TorchPlugin,
    _seeded,
    draw_rows,
    noised_total,
)
from dpaudit.trainers.torch_common.lora import LoraAdapters, apply_lora
from dpaudit.trainers.torch_common.model import layer_groups, per_example_losses
from dpaudit.trainers.torch_common.pass_size import PassSize
from dpaudit.trainers.torch_common.plugin import TorchTrainer
from dpaudit.training import RecordParts
from dpaudit.training.gradient_canaries import UNIT_EXAMPLE, UNIT_MICROBATCH
from dpaudit.training.privacy_plan import PrivacyPlan

#: The contract suite's run (:meth:`EdpSgdTrainer.tiny_config`): eDP-SGD classification of a 2-layer
#: BERT on 16-token texts, one epoch of 16-example batches in 4 micro-batches (6 steps).
TINY_SETTINGS: dict[str, Any] = {
    "mode": "edp-sgd",
    "task": "classify",
    "preset": "tiny",
    "vocab_size": 300,
    "max_length": 16,
    "epochs": 1,
    "batch_size": 16,
    "micro_batches": 4,
    "learning_rate": 1e-3,
    "noise_multiplier": 1.0,
    "eval_examples": 8,
    "checkpoint_every": 1000,
}
_PROCESS_NOISE_KEY = 1 << 20  # keys of per-process noise draws, apart from micro-batch indices


class _Plugin(TorchPlugin):
    """One invocation: the shared torch loop (:class:`~trainers.torch_common.loop.TorchPlugin`) with sgd /
    dp-sgd / eDP-SGD aggregation."""

    trainer_name: ClassVar[str] = "edp-sgd"

    def _trainable(self) -> tuple[list[str], list[torch.nn.Parameter]]:
        return trainable(self.model)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.layer_norms: list[float] | None = None
        self.group_names: list[str] | None = None
        self.slots: np.ndarray | None = None
        self.ghost: GhostClipper | None = None
        self.ghost_refused: str | None = None
        self.lora: LoraAdapters | None = None
        self.pass_size: PassSize | None = None  # sgd's pass bound

    def _build_model(self) -> None:
        """The start (or preset), then with --peft lora its adapters: from here on ``self.model`` trains
        only them (and a classifier's head), and every engine sees only those parameters."""
        super()._build_model()
        config = self.config
        if config.peft != "lora":
            return
        start = self.starting_point
        if config.task == "mlm" and self.head == "fresh" and start is not None:
            # LoRA freezes every base tensor: a masked-LM head drawn at random here would never be trained.
            raise UserInputError(
                f"--peft lora: --init-from {start.given} has no masked-LM head, and LoRA would leave the fresh "
                "random one untrained; fit one first (dpaudit train --task mlm --init-from it --data-split public "
                "--non-private), start LoRA from that run, or train without --peft."
            )
        self.lora = apply_lora(
            self.model,
            task=config.task,
            rank=config.lora_rank,
            alpha=config.lora_alpha,
            targets=config.lora_targets,
            seed=self.seed,
            base_name=str(start.model_dir) if start is not None else None,  # what from_pretrained loads
            modules_to_save=config.lora_modules_to_save or (),
        )
        self.model = self.lora.model

    def _lora_base(self) -> dict[str, Any]:
        """privacy.json's words for the frozen base: the --init-from start and its weight files' sha256, or the
        preset's random init from the public --seed."""
        start = self.starting_point
        if start is not None:
            return {"init_from": start.given, "weights_sha256": dict(sorted(start.weights.items()))}
        return {"preset": self.config.preset, "random_init_seed": self.seed}

    def _write_model(self, model_dir: Path) -> None:
        """model/ (the merged model, Hugging Face layout) and, with --peft lora, model/adapter/ (peft's layout)."""
        if self.lora is None:
            super()._write_model(model_dir)
            return
        start = self.starting_point.model_dir if self.starting_point is not None else None
        save_hf(model_dir, self.lora.merged(), self.tokenizer, start_dir=start, adapter=self.lora.peft_model)

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "layer_clip_norms": self.layer_norms}

    def manifest_extra(self) -> dict[str, Any]:
        extra = super().manifest_extra()
        if self.layer_norms is not None:  # private when from train.jsonl
            extra["layer_clip_norms"] = dict(zip(self.group_names, self.layer_norms))
        return extra

    def gradient_canary_unit(self) -> tuple[str, int]:
        """edp-sgd clips micro-batches (k per step); sgd and dp-sgd each example (sgd without a bound)."""
        if self.config.mode == "edp-sgd":
            return UNIT_MICROBATCH, self.config.micro_batches
        return UNIT_EXAMPLE, 1

    def _audit_groups(self) -> int | None:
        """edp-sgd: one reserved block coordinate per layer group and canary (per-layer clip norms; see
        :mod:`trainers.torch_common.canary_block` for why); a flat block otherwise."""
        if self.config.mode != "edp-sgd":
            return None
        return len(layer_groups(self.names)[0])

    def _setup_mechanism(self, n: int, resume_state: Mapping[str, Any] | None) -> None:
        """The clipper (it owns the sensitivity) and, for edp-sgd, the fixed micro-batch slots."""
        config = self.config
        self.clipper = None
        model_names = self.names[: len(self.model_params)]  # without a white-box audit's block
        if config.mode == "sgd":  # the non-private sum's passes (the ghost engine holds its own)
            self.pass_size = PassSize(self.model)
        if config.mode == "dp-sgd":
            self.clipper = PerExampleClipper(
                self.model,
                per_example_losses,
                clip_norm=config.clip_norm,
                physical_batch=config.physical_batch,
                draws=config.mask_draws,
            )
        elif config.mode == "edp-sgd":
            k = config.micro_batches
            self.slots = sampling.example_slots(self.data.train.texts, self.data.train.labels, k, salt=self.seed)
            self.group_names, groups = layer_groups(model_names)
            if resume_state is not None:
                norms = [float(c) for c in resume_state["layer_clip_norms"]]
            else:
                split = "public" if config.scale_from == "public" else "train"
                size = min(len(self.encoded[split].lengths), max(1, round(config.batch_size / k)))
                idx = self.data.labelled_rows(split)[:size]  # classify: public rows with a class id
                if not idx.size:
                    raise UserInputError(
                        f"--scale-from public: no row of {self.data_dir / 'public.jsonl'} has a label in "
                        "the label set; declare --labels that cover them or map them with --unknown-label."
                    )
                batch = self._on_device(self._batch(split, idx, generator=_seeded(self.seed, _EVAL_STREAM, 1)))
                norms = layer_clip_norms(
                    self.model,
                    per_example_losses,
                    batch,
                    clip_norm=config.clip_norm,
                    param_groups=groups,
                    num_groups=len(self.group_names),
                )
            self.layer_norms = norms
            # Sensitivity 2C from the clipping function alone, never from the private slot occupancy.
            self.clipper = MicrobatchClipper(
                self.model, per_example_losses, layer_clip_norms=norms, param_groups=groups
            )
            if self.audit is not None:  # the block's group l is clipped to C_l like the model's layer group l
                self.audit.clip_microbatches(k, norms)
        if self.clipper is not None and config.clip_engine == "ghost":  # the same clipped sums, one backward pass
            bounds = self.layer_norms if config.mode == "edp-sgd" else [config.clip_norm]
            groups = self.clipper.param_groups.tolist() if config.mode == "edp-sgd" else [0] * len(model_names)
            try:
                self.ghost = GhostClipper(self.model, per_example_losses, bounds=bounds, param_groups=groups)
            except UnsupportedModel as err:  # fall back to the vmap clippers
                self.ghost_refused = str(err)

    def aggregate(
        self, step: int, indices: np.ndarray, sigma: float | None = None
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The summed, clipped and noised gradient of the batch ``indices`` over all processes, and
        [loss sum, correct sum, clipped units, units clipped, clipped-sum norm, noise norm] telemetry
        (a float64 tensor on the run's device: no host sync). ``sigma``: :meth:`TorchPlugin.aggregate`."""
        sigma = self._sigma(step, sigma)
        # A white-box audit's rows never reach the engines: each share adds their block gradient itself.
        indices, audit_rows = self._split_rows(indices)
        # Mask the whole batch identically on every process: each example's mask is keyed by its own
        # content hash, the public seed and the step (never its position: docs/privacy.md, "One example's contribution").
        gen = _seeded(self.seed, _MASK_STREAM, step)
        cpu = self._batch("train", indices, generator=gen, draws=self.config.mask_draws) if len(indices) else None
        full = self._on_device(cpu) if cpu is not None else None
        share = self._microbatch_share if self.config.mode == "edp-sgd" else self._example_share
        grad_sum, draws, stats = share(step, indices, audit_rows, sigma, cpu, full)
        step_noise = StepNoise(self.params, draws, self.noise_source.seed, self.plan.private)
        if grad_sum is None:  # this process had no examples
            grad_sum = [torch.zeros_like(p) for p in self.params]
        return noised_total(grad_sum, step_noise, stats, world=self.world, device=self.device)

    def _no_stats(self) -> tuple[Any, ...]:
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        return zero, zero, 0, zero  # loss sum, correct sum, units, units clipped

    def _microbatch_share(
        self,
        step: int,
        indices: np.ndarray,
        audit_rows: np.ndarray,
        sigma: float,
        cpu: dict[str, torch.Tensor] | None,
        full: dict[str, torch.Tensor] | None,
    ) -> tuple[list[torch.Tensor] | None, list[noise.Draw], tuple]:
        """eDP-SGD: this process's micro-batches (j = rank mod processes), each clipped per layer, and
        their noise draws of std sigma x sensitivity / sqrt(k) each (Dupuy et al. 2021, Algorithm 1).
        ``audit_rows`` (a white-box audit's) join their slots' micro-batches before these are clipped."""
        config, world = self.config, self.world
        k = config.micro_batches
        groups = [
            draw_rows(g, config.mask_draws)
            for g in sampling.split_microbatches(np.arange(len(indices)), self.slots[indices], k)
        ]
        mine = [j for j in range(k) if j % world.size == world.rank]
        std_each = sigma * self.clipper.sensitivity / math.sqrt(k)
        draws: list[noise.Draw] = []
        if config.noise_draw == "micro-batch" and std_each > 0:  # Algorithm 1: one draw per micro-batch
            draws = [(std_each, (step, j)) for j in mine]
        elif std_each > 0 and mine:  # the same distribution: one draw carrying this process's micro-batches'
            # noise; the sum of len(mine) independent N(0, std_each^2) is N(0, len(mine) std_each^2)
            draws = [(std_each * math.sqrt(len(mine)), (step, _PROCESS_NOISE_KEY + world.rank, world.size))]
        audit = None
        if self.audit is not None:  # the engine's units are the micro-batches with real rows, in this order
            real = np.flatnonzero([len(groups[j]) > 0 for j in mine])
            audit = self.audit.microbatches(audit_rows, mine, real)
        if full is None:
            return self._with_block(None, audit.clipped(None) if audit is not None else None), draws, self._no_stats()
        extra_sq = audit.engine_sq() if audit is not None else None
        if self.ghost is not None:
            result = self._ghost_sum(cpu, full, [groups[j] for j in mine], extra_sq=extra_sq)
        else:
            result = self.clipper.clipped_sum(
                full, [groups[j] for j in mine], chunk_examples=config.physical_batch, extra_sq=extra_sq
            )
        grads = self._with_block(result.grads, audit.clipped(result.factors) if audit is not None else None)
        return grads, draws, (result.loss_sum, result.correct_sum, result.units, result.clipped)

    def _example_share(
        self,
        step: int,
        indices: np.ndarray,
        audit_rows: np.ndarray,
        sigma: float,
        cpu: dict[str, torch.Tensor] | None,
        full: dict[str, torch.Tensor] | None,
    ) -> tuple[list[torch.Tensor] | None, list[noise.Draw], tuple]:
        """sgd / dp-sgd: this process's slice of the batch, summed (dp-sgd: each example clipped to C;
        process 0 draws the noise of std sigma x C). ``audit_rows`` (a white-box audit's) are units of
        their own, clipped by the same rule and added by process 0."""
        mode, world = self.config.mode, self.world
        draws = (
            [(sigma * self.clipper.sensitivity, (step,))] if mode == "dp-sgd" and world.primary and sigma > 0 else []
        )
        block = self._audit_example_sum(audit_rows, self.clipper.clip_norm if mode == "dp-sgd" else None)
        share = np.array_split(np.arange(len(indices)), world.size)[world.rank] if len(indices) else np.arange(0)
        if not len(share):
            return self._with_block(None, block), draws, self._no_stats()
        k = self.config.mask_draws
        rows = torch.as_tensor(draw_rows(share, k))
        sub = {key: v[to_device(rows, self.device)] for key, v in full.items()}
        if mode != "dp-sgd":
            grads, stats = self._plain_sum(sub)
            return self._with_block(grads, block), draws, stats
        if self.ghost is not None:
            valid = cpu["mask4"][rows, 0, 0, :] == 0
            result = self.ghost.clipped_sum(
                sub,
                np.arange(len(share) * k) // k,  # an example's K draw rows are one unit
                len(share),
                valid=valid,
                chunk=self.config.ghost_chunk,
            )
        else:
            result = self.clipper.clipped_sum(sub)
        return (
            self._with_block(result.grads, block),
            draws,
            (result.loss_sum, result.correct_sum, result.units, result.clipped),
        )

    def _plain_sum(self, sub: dict[str, torch.Tensor]) -> tuple[list[torch.Tensor], tuple]:
        """sgd: the unclipped gradient sum of the examples ``sub``, accumulated over passes of at most
        :attr:`pass_size`'s bound of examples (one pass for a batch within it): the same sum, in bounded memory."""
        params = self.model_params
        for p in params:
            p.grad = None
        assert self.pass_size is not None, "sgd builds its pass bound in _setup_mechanism"
        size, length = int(sub["input_ids"].shape[0]), int(sub["input_ids"].shape[1])
        step = self.pass_size.examples(length)
        loss_sum = correct_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for begin in range(0, size, step):
            part = sub if size <= step else {key: v[begin : begin + step] for key, v in sub.items()}
            losses, correct = per_example_losses(self.model, part)
            losses.sum().backward()  # accumulates into p.grad
            loss_sum = loss_sum + losses.detach().sum().double()
            correct_sum = correct_sum + correct.sum().double()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        zero = torch.zeros((), dtype=torch.float64, device=self.device)
        return grads, (loss_sum, correct_sum, size, zero)

    def _ghost_sum(
        self,
        cpu: dict[str, torch.Tensor],
        full: dict[str, torch.Tensor],
        groups: list[np.ndarray],
        *,
        extra_sq: torch.Tensor | None = None,
    ) -> Clipped:
        """The ghost clipper's sum over the micro-batches ``groups`` (index arrays into the batch);
        ``extra_sq`` [L, non-empty groups]: :meth:`GhostClipper.clipped_sum`'s (a white-box audit's block)."""
        groups = [g for g in groups if len(g)]  # none: the clipper returns zeros for an empty batch
        rows = torch.as_tensor(np.concatenate([np.zeros(0, np.int64), *groups]), dtype=torch.long)
        owner = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
        on_device = to_device(rows, self.device)
        sub = {key: v[on_device] for key, v in full.items()}
        return self.ghost.clipped_sum(
            sub,
            owner,
            len(groups),
            valid=cpu["mask4"][rows, 0, 0, :] == 0,
            extra_sq=extra_sq,
            chunk=self.config.ghost_chunk,
        )

    # -- outputs -----------------------------------------------------------------------------

    def _mechanism_parts(self, plan: PrivacyPlan, steps: int, details: dict[str, Any]) -> RecordParts:
        config = self.config
        unaccounted: list[str] = []
        if self.lora is not None:
            details["trained"] = self.lora.record(self._lora_base())
        if config.mask_draws > 1:
            details["mask_draws"] = {
                "draws": config.mask_draws,
                "rule": "each sampled example's gradient is the mean over its K maskings before it is clipped: "
                "the clipping unit, sensitivity and sampling are the example's, as with one masking",
            }
        if config.mode == "edp-sgd":
            details["micro_batches"] = config.micro_batches
            details["microbatch_assignment"] = (
                "sha256(--seed, text, label) mod k: fixed per example, independent of other examples"
            )
            if config.scale_from == "public":
                details["layer_clip_norms_from"] = "public.jsonl"
                details["layer_clip_norms"] = dict(zip(self.group_names, self.layer_norms))
            else:  # the values are a function of private data: in the private manifest only
                details["layer_clip_norms_from"] = "train.jsonl (private; the values are in manifest.json only)"
                unaccounted.append(
                    "per-layer clip norms were computed from the first-iteration gradient on private train.jsonl "
                    "(--scale-from private): an extra release of private data NOT covered by the epsilon."
                )
        return privacy.record_parts(
            plan=plan,
            steps=steps,
            mode=config.mode,
            clipper=self.clipper,
            micro_batches=config.micro_batches,
            unaccounted_releases=unaccounted,
            details=details,
        )


class EdpSgdTrainer(TorchTrainer):
    """sgd / dp-sgd / eDP-SGD fine-tuning of a BERT-family model (or a causal LM, ``--task clm``) in PyTorch;
    registered as ``edp-sgd``."""

    name: ClassVar[str] = "edp-sgd"
    #: The last line of ``dpaudit train --trainer edp-sgd --help``.
    example: ClassVar[str] = (
        "Example: dpaudit train --trainer edp-sgd --data runs/data --out runs/clf-dp8 --mode edp-sgd "
        "--micro-batches 4 --epochs 3 --batch-size 32 --target-epsilon 8"
    )
    Config: ClassVar[type] = EdpSgdConfig
    Plugin: ClassVar[type] = _Plugin
    TINY_SETTINGS: ClassVar[dict[str, Any]] = TINY_SETTINGS
