"""The rgp trainer's settings: one frozen, keyword-only dataclass, validated on construction.

Every field becomes an option of ``dpaudit train --trainer rgp`` (``dpaudit.cli.train`` reads the
annotations and the ``help`` metadata); the whole Config is stored in each checkpoint so that a rerun
with different settings on the same ``--out`` is refused. The options shared with ``edp-sgd`` mean
the same thing there. ``rank``, ``power_iters``, ``warmup_steps`` and ``random_carriers`` are RGP's
(Yu et al. 2021, Algorithms 1-2): they change what is clipped and noised but not the guarantee, one
Gaussian mechanism of sensitivity C per step whatever the carriers are.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from dpaudit.config_types import check_types, option_name
from dpaudit.secret_rng import NoiseSource
from trainers.torch_common.options import (
    DEFAULT_VOCAB_SIZE,
    Decay,
    Preset,
    Task,
    check_int,
    check_real,
    help_text,
)


@dataclass(frozen=True, kw_only=True)
class RgpConfig:
    """Settings of one RGP fine-tuning run (Yu et al. 2021, Algorithm 1)."""

    task: Task = field(default="classify", metadata=help_text(
        "classify: sequence classification of {'text','label'} rows (intent). mlm: masked-LM fine-tuning on the texts."))
    model: str | None = field(default=None, metadata=help_text(
        "Hugging Face model directory to fine-tune (its tokenizer.json is used); default: random init of --preset."))
    preset: Preset = field(default="tiny", metadata=help_text(
        "Architecture when no --model is given: tiny (tests), mini (Dupuy et al. 4x312), small, base, large."))
    vocab_size: int | None = field(default=None, metadata=help_text(
        "WordPiece vocabulary trained on public.jsonl when no --model is given; default by preset (2000 tiny, 8000 mini/small)."))
    max_length: int = field(default=32, metadata=help_text("Tokens per example (longer texts are truncated)."))
    epochs: int = field(default=3, metadata=help_text("Epochs; one epoch is ceil(N / batch-size) Poisson-sampled steps."))
    batch_size: int = field(default=32, metadata=help_text(
        "Expected logical batch size; Poisson sampling rate q = batch-size / number of training examples."))
    rank: int = field(default=8, metadata=help_text(
        "Reparametrization rank r of the gradient carriers L (p x r), R (r x d) of every weight matrix (Yu et al. use "
        "1..8); capped at min(p, d) per matrix, where RGP recovers the full gradient."))
    power_iters: int = field(default=1, metadata=help_text(
        "K power iterations of Algorithm 2 computing the carriers from the historical update (K = 1 in the paper)."))
    warmup_steps: int = field(default=10, metadata=help_text(
        "Steps whose carriers come from the weight W_t itself (Algorithm 1's warm-up); afterwards from the historical "
        "update W_t - W_0."))
    random_carriers: bool = field(default=False, metadata=help_text(
        "RGP-random (the paper's ablation): random orthonormal carriers each step instead of the historical update's."))
    learning_rate: float = field(default=1e-3, metadata=help_text("Adam learning rate of the reconstructed updates."))
    weight_decay: float = field(default=0.0, metadata=help_text("Decoupled (AdamW) weight decay; 0 = Adam."))
    clip_norm: float = field(default=1.0, metadata=help_text(
        "Clip norm C of each example's joint vector (carrier gradients of every matrix, biases, layer norms): sensitivity C."))
    noise_multiplier: float | None = field(default=None, metadata=help_text(
        "sigma_0: noise std on each summed carrier gradient = sigma_e x C. With --target-epsilon too, the target is a "
        "cap: training stops at it."))
    target_epsilon: float | None = field(default=None, metadata=help_text(
        "Privacy budget; alone, sigma_0 is calibrated so the whole run (with its decay schedule) spends exactly this (PLD)."))
    delta: float | None = field(default=None, metadata=help_text(
        "Delta of the (epsilon, delta) guarantee; default min(1e-5, 1/(10 N)), well below 1/N."))
    noise_decay: Decay = field(default="none", metadata=help_text(
        "Per-epoch noise decay fixed in advance: none, linear sigma_e = max(sigma_0 (1 - k e), sigma_min), exp sigma_0 exp(-k e)."))
    decay_rate: float = field(default=0.0, metadata=help_text("k of --noise-decay (>= 0)."))
    sigma_min: float | None = field(default=None, metadata=help_text(
        "Positive floor of linear decay (zero noise is not DP); default sigma_0 / 10."))
    noise_seed: int | None = field(default=None, metadata=help_text(
        "Seed of the Poisson sampling and DP noise (default: OS entropy). Makes a run reproducible; the guarantee "
        "then holds only while this seed is secret. Never written to a released file."))
    device: Literal["auto", "cpu", "cuda"] = field(default="auto", metadata=help_text(
        "Where the model, batches, carriers, noise and accumulators live: auto = cuda when available, else cpu."))
    log_every: int = field(default=10, metadata=help_text(
        "Steps between host syncs for the progress bar and metrics.jsonl (rows are still written per step)."))
    physical_batch: int = field(default=64, metadata=help_text(
        "Examples per forward/backward chunk of the per-example carrier gradients (memory knob only)."))
    mask_prob: float = field(default=0.15, metadata=help_text("mlm: fraction of tokens masked (80/10/10)."))
    eval_examples: int = field(default=512, metadata=help_text("heldout.jsonl examples evaluated after each epoch (0 = skip)."))
    checkpoint_every: int = field(default=50, metadata=help_text(
        "Steps between checkpoints (one is always written at each epoch end)."))
    keep_checkpoints: bool = field(default=False, metadata=help_text(
        "Keep checkpoints/ after a finished run (it holds the secret noise seed: private to the data owner)."))

    def __post_init__(self) -> None:
        check_types(self)  # types and Literal choices from every source (CLI, --config TOML, checkpoints)
        if self.model is not None and not self.model.strip():
            raise ValueError(f"--model must be a directory path, got {self.model!r}.")
        for name, minimum in (("max_length", 8), ("epochs", 1), ("batch_size", 1), ("rank", 1), ("power_iters", 1),
                              ("warmup_steps", 0), ("physical_batch", 1), ("eval_examples", 0),
                              ("checkpoint_every", 1), ("log_every", 1)):
            check_int(name, getattr(self, name), minimum)
        if self.vocab_size is not None:
            check_int("vocab_size", self.vocab_size, 128)
        if self.noise_seed is not None:
            check_int("noise_seed", self.noise_seed, 0)
        check_real("learning_rate", self.learning_rate, low=0.0, low_open=True)
        check_real("weight_decay", self.weight_decay, low=0.0, low_open=False)
        check_real("clip_norm", self.clip_norm, low=0.0, low_open=True)
        check_real("decay_rate", self.decay_rate, low=0.0, low_open=False)
        check_real("mask_prob", self.mask_prob, low=0.0, low_open=True, high=1.0)
        for name in ("noise_multiplier", "target_epsilon", "sigma_min"):
            if getattr(self, name) is not None:
                check_real(name, getattr(self, name), low=0.0, low_open=True)
        if self.delta is not None:
            check_real("delta", self.delta, low=0.0, low_open=True, high=1.0)
        if self.noise_multiplier is None and self.target_epsilon is None:
            raise ValueError("--trainer rgp needs --target-epsilon (calibrate the noise) or --noise-multiplier.")
        if self.noise_decay == "none" and self.decay_rate != 0.0:
            raise ValueError(f"--decay-rate {self.decay_rate:g} needs --noise-decay linear or exp.")
        if self.sigma_min is not None and self.noise_decay != "linear":
            raise ValueError(f"{option_name('sigma_min')} applies to --noise-decay linear only.")

    @property
    def mode(self) -> str:
        """``rgp`` or ``rgp-random`` (the carriers' origin), as the progress bar and the manifest say it."""
        return "rgp-random" if self.random_carriers else "rgp"

    @property
    def private(self) -> bool:
        """Always: RGP clips and noises every step (the paper's non-private RGP is not offered)."""
        return True

    @property
    def resolved_vocab_size(self) -> int:
        return self.vocab_size if self.vocab_size is not None else DEFAULT_VOCAB_SIZE[self.preset]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable field values with the secret ``noise_seed`` redacted (manifests, resume checks)."""
        out = dataclasses.asdict(self)
        out["noise_seed"] = NoiseSource.redact(self.noise_seed)
        return out
