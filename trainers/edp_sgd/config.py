"""The edp-sgd trainer's settings: one frozen, keyword-only dataclass, validated on construction.

Every field becomes an option of ``dpaudit train --trainer edp-sgd`` (``dpaudit.cli.train`` reads the
annotations and the ``help`` metadata); the whole Config is stored in each checkpoint so that a rerun
with different settings on the same ``--out`` is refused instead of silently mixing two runs.

Settings that change the guarantee (``mode``, ``noise_multiplier``, ``target_epsilon``, ``delta``,
``clip_norm``, ``epochs``, ``batch_size``, ``micro_batches``, ``noise_decay``, ``decay_rate``,
``sigma_min``, ``scale_from``) are kept apart in meaning from performance knobs (``physical_batch``,
``noise_draw``, ``clip_engine``, ``device``, ``log_every``): the latter never change what is sampled,
clipped or noised, nor its distribution.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from dpaudit.config_types import check_types, option_name
from dpaudit.secret_rng import NoiseSource
from trainers.torch_common.options import DEFAULT_VOCAB_SIZE, Decay, Preset, Task
from trainers.torch_common.options import check_int as _check_int
from trainers.torch_common.options import check_real as _check_real
from trainers.torch_common.options import help_text as _help

Mode = Literal["sgd", "dp-sgd", "edp-sgd"]
ScaleFrom = Literal["public", "private"]
NoiseDraw = Literal["process", "micro-batch"]
Device = Literal["auto", "cpu", "cuda"]
ClipEngine = Literal["ghost", "vmap"]

__all__ = ["DEFAULT_VOCAB_SIZE", "EdpSgdConfig"]


@dataclass(frozen=True, kw_only=True)
class EdpSgdConfig:
    """Settings of one sgd / dp-sgd / eDP-SGD fine-tuning run (Dupuy et al. 2021)."""

    mode: Mode = field(default="edp-sgd", metadata=_help(
        "sgd: non-private baseline (Adam). dp-sgd: per-example clipping (see --clip-engine), sensitivity C. "
        "edp-sgd: micro-batch clipping with per-layer clip norms (Algorithm 1 of Dupuy et al.), sensitivity 2C."))
    task: Task = field(default="classify", metadata=_help(
        "classify: sequence classification of {'text','label'} rows (intent). mlm: masked-LM fine-tuning on the texts."))
    model: str | None = field(default=None, metadata=_help(
        "Hugging Face model directory to fine-tune (its tokenizer.json is used); default: random init of --preset."))
    preset: Preset = field(default="tiny", metadata=_help(
        "Architecture when no --model is given: tiny (tests), mini (Dupuy et al. 4x312), small, base, large."))
    vocab_size: int | None = field(default=None, metadata=_help(
        "WordPiece vocabulary trained on public.jsonl when no --model is given; default by preset (2000 tiny, 8000 mini/small)."))
    max_length: int = field(default=32, metadata=_help("Tokens per example (longer texts are truncated)."))
    epochs: int = field(default=3, metadata=_help("Epochs; one epoch is ceil(N / batch-size) Poisson-sampled steps."))
    batch_size: int = field(default=32, metadata=_help(
        "Expected logical batch size; Poisson sampling rate q = batch-size / number of training examples."))
    micro_batches: int = field(default=8, metadata=_help(
        "edp-sgd: micro-batches per logical batch (k); each example goes to micro-batch hash(example) mod k."))
    learning_rate: float = field(default=1e-3, metadata=_help("Adam learning rate (the paper uses Adam in every mode)."))
    weight_decay: float = field(default=0.0, metadata=_help("Decoupled (AdamW) weight decay; 0 = Adam."))
    clip_norm: float = field(default=1.0, metadata=_help(
        "Clip norm C: per example (dp-sgd), or per micro-batch with per-layer norms C_l, sum C_l^2 = C^2 (edp-sgd)."))
    scale_from: ScaleFrom = field(default="public", metadata=_help(
        "edp-sgd per-layer clip norms from the first-iteration gradient on public.jsonl (default) or on private "
        "train.jsonl (an extra release NOT covered by epsilon; privacy.json says so)."))
    noise_multiplier: float | None = field(default=None, metadata=_help(
        "sigma_0: noise std on the summed gradient = sigma_e x the step's sensitivity (C in dp-sgd, 2C in edp-sgd). "
        "With --target-epsilon too, the target is a cap: training stops at it."))
    target_epsilon: float | None = field(default=None, metadata=_help(
        "Privacy budget; alone, sigma_0 is calibrated so the whole run (with its decay schedule) spends exactly this (PLD)."))
    delta: float | None = field(default=None, metadata=_help(
        "Delta of the (epsilon, delta) guarantee; default min(1e-5, 1/(10 N)), well below 1/N."))
    noise_decay: Decay = field(default="none", metadata=_help(
        "Per-epoch noise decay fixed in advance: none, linear sigma_e = max(sigma_0 (1 - k e), sigma_min), exp sigma_0 exp(-k e)."))
    decay_rate: float = field(default=0.0, metadata=_help("k of --noise-decay (>= 0)."))
    sigma_min: float | None = field(default=None, metadata=_help(
        "Positive floor of linear decay (zero noise is not DP); default sigma_0 / 10."))
    noise_seed: int | None = field(default=None, metadata=_help(
        "Seed of the Poisson sampling and DP noise (default: OS entropy). Makes a run reproducible; the guarantee "
        "then holds only while this seed is secret. Never written to a released file."))
    noise_draw: NoiseDraw = field(default="process", metadata=_help(
        "edp-sgd performance knob, same distribution either way: process = one Gaussian per process carrying its "
        "micro-batches' noise (fast); micro-batch = one per micro-batch as in Algorithm 1 (values independent of "
        "the number of processes)."))
    clip_engine: ClipEngine = field(default="ghost", metadata=_help(
        "dp-sgd and edp-sgd performance knob, same clipped sum either way: ghost = per-example / per-micro-batch norms "
        "from activations and output gradients in one backward pass (Li et al. 2022; Bu et al. 2023); vmap = "
        "materialized per-example gradients (torch.func). ghost falls back to vmap for unsupported layers."))
    device: Device = field(default="auto", metadata=_help(
        "Where the model, batches, noise and accumulators live: auto = cuda when available, else cpu."))
    log_every: int = field(default=10, metadata=_help(
        "Steps between host syncs for the progress bar and metrics.jsonl (rows are still written per step)."))
    physical_batch: int = field(default=16, metadata=_help(
        "dp-sgd and edp-sgd: examples per vectorized per-example-gradient chunk (memory knob only)."))
    mask_prob: float = field(default=0.15, metadata=_help("mlm: fraction of tokens masked (80/10/10)."))
    eval_examples: int = field(default=512, metadata=_help("heldout.jsonl examples evaluated after each epoch (0 = skip)."))
    checkpoint_every: int = field(default=50, metadata=_help("Steps between checkpoints (one is always written at each epoch end)."))
    keep_checkpoints: bool = field(default=False, metadata=_help(
        "Keep checkpoints/ after a finished run (it holds the secret noise seed: private to the data owner)."))

    def __post_init__(self) -> None:
        check_types(self)  # types and Literal choices from every source (CLI, --config TOML, checkpoints)
        if self.model is not None and not self.model.strip():
            raise ValueError(f"--model must be a directory path, got {self.model!r}.")
        for name, minimum in (("max_length", 8), ("epochs", 1), ("batch_size", 1), ("micro_batches", 1),
                              ("physical_batch", 1), ("eval_examples", 0), ("checkpoint_every", 1), ("log_every", 1)):
            _check_int(name, getattr(self, name), minimum)
        if self.vocab_size is not None:
            _check_int("vocab_size", self.vocab_size, 128)
        if self.noise_seed is not None:
            _check_int("noise_seed", self.noise_seed, 0)
        _check_real("learning_rate", self.learning_rate, low=0.0, low_open=True)
        _check_real("weight_decay", self.weight_decay, low=0.0, low_open=False)
        _check_real("clip_norm", self.clip_norm, low=0.0, low_open=True)
        _check_real("decay_rate", self.decay_rate, low=0.0, low_open=False)
        _check_real("mask_prob", self.mask_prob, low=0.0, low_open=True, high=1.0)
        for name in ("noise_multiplier", "target_epsilon", "sigma_min"):
            if getattr(self, name) is not None:
                _check_real(name, getattr(self, name), low=0.0, low_open=True)
        if self.delta is not None:
            _check_real("delta", self.delta, low=0.0, low_open=True, high=1.0)
        if self.mode == "sgd":
            given = [n for n in ("noise_multiplier", "target_epsilon", "delta", "sigma_min") if getattr(self, n) is not None]
            if given or self.noise_decay != "none":
                flags = ", ".join(option_name(n) for n in given + (["noise_decay"] if self.noise_decay != "none" else []))
                raise ValueError(f"--mode sgd takes no {flags}: a non-private run has no (epsilon, delta) guarantee.")
        elif self.noise_multiplier is None and self.target_epsilon is None:
            raise ValueError(f"--mode {self.mode} needs --target-epsilon (calibrate the noise) or --noise-multiplier.")
        if self.noise_decay == "none" and self.decay_rate != 0.0:
            raise ValueError(f"--decay-rate {self.decay_rate:g} needs --noise-decay linear or exp.")
        if self.sigma_min is not None and self.noise_decay != "linear":
            raise ValueError("--sigma-min applies to --noise-decay linear only.")
        if self.mode != "edp-sgd" and self.scale_from != "public":
            raise ValueError("--scale-from applies to --mode edp-sgd only.")

    @property
    def private(self) -> bool:
        return self.mode != "sgd"

    @property
    def resolved_vocab_size(self) -> int:
        return self.vocab_size if self.vocab_size is not None else DEFAULT_VOCAB_SIZE[self.preset]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable field values with the secret ``noise_seed`` redacted (manifests, resume checks)."""
        out = dataclasses.asdict(self)
        out["noise_seed"] = NoiseSource.redact(self.noise_seed)
        return out
