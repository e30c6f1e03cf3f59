"""The opacus trainer's settings: one frozen, keyword-only dataclass, validated on construction.

Settings that change the mechanism (``noise_multiplier`` or ``target_epsilon``, ``delta``, ``clip_norm``,
``batch_size``, ``steps``, ``clipping``, ``accountant``) are kept apart from the model and optimizer settings;
``grad_sample_mode`` chooses how Opacus computes per-example gradients (``hooks``, its default, or ``functorch``),
which must not change the mechanism (the audit checks it). See ``docs/trainers.md`` ("opacus").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from dpaudit.training.config_types import check_int
from dpaudit.training.dp_options import DpOptions

__all__ = ["OpacusConfig"]

Accountant = Literal["prv", "rdp", "gdp"]
GradSampleMode = Literal["hooks", "functorch", "ghost"]
OptimizerName = Literal["sgd", "adam"]
PeftName = Literal["none", "lora"]


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, kw_only=True)
class OpacusConfig(DpOptions):
    """Settings of one Opacus DP-SGD run (``PrivacyEngine.make_private``, Poisson sampling, flat clipping).

    The shared DP options (:class:`~dpaudit.training.dp_options.DpOptions`) keep their meaning; the noise multiplier
    is Opacus's (noise std sigma C on the clipped sum, the same as dp_accounting's for per-example clipping), a
    target epsilon is calibrated by Opacus's own ``get_noise_multiplier``. What the library does not do is refused:
    ``--init-from`` and ``--data-split public`` here; a declared ``--dataset-size`` (Opacus's q is 1 / batches per
    epoch of the real rows) and a target epsilon as a cap beside a noise multiplier when the run starts."""

    batch_size: int = field(default=16, metadata=_help("Expected batch size: q = 1 / ceil(N / batch_size)."))
    steps: int = field(default=4, metadata=_help("Optimizer updates (each one accounted step)."))
    learning_rate: float = field(default=0.05, metadata=_help("Learning rate of the optimizer."))
    optimizer: OptimizerName = field(default="sgd", metadata=_help("sgd or adam."))
    accountant: Accountant = field(default="prv", metadata=_help("Opacus's accountant: prv (its default), rdp, gdp."))
    grad_sample_mode: GradSampleMode = field(
        default="hooks",
        metadata=_help(
            "How Opacus computes per-example gradients: hooks, functorch, or ghost (fast gradient clipping)."
        ),
    )
    physical_batch: int | None = field(
        default=None,
        metadata=_help(
            "Opacus's BatchMemoryManager max_physical_batch_size: gradient accumulation over physical batches, one "
            "noisy update per logical batch (a memory knob: the mechanism is unchanged)."
        ),
    )
    peft: PeftName = field(
        default="none",
        metadata=_help("lora: train LoRA adapters (peft) on query and value, and the head, over the frozen model."),
    )
    lora_rank: int = field(default=4, metadata=_help("LoRA rank r (with --peft lora; alpha = 2r)."))
    preset: str = field(default="tiny", metadata=_help("BERT size of the classifier (tiny: 2 layers of 128)."))
    vocab_size: int = field(default=300, metadata=_help("WordPiece vocabulary learned on public.jsonl."))
    max_length: int = field(default=16, metadata=_help("Tokens per example."))
    setup: str | None = field(
        default=None,
        metadata=_help(
            "FILE.py:build: train your own model, optimizer and loader instead (build() returns (model, optimizer, "
            "loader) or a dict with those keys and an optional criterion)."
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_size", "steps", "vocab_size", "max_length", "lora_rank"):
            check_int(name, getattr(self, name), 1)
        if self.physical_batch is not None:
            check_int("physical_batch", self.physical_batch, 1)
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"--learning-rate must be > 0, got {self.learning_rate}.")
        if self.accountant not in ("prv", "rdp", "gdp"):
            raise ValueError(f"--accountant must be prv, rdp or gdp, got {self.accountant!r}.")
        if self.grad_sample_mode not in ("hooks", "functorch", "ghost"):
            raise ValueError(f"--grad-sample-mode must be hooks, functorch or ghost, got {self.grad_sample_mode!r}.")
        if self.peft not in ("none", "lora"):
            raise ValueError(f"--peft must be none or lora, got {self.peft!r}.")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"--optimizer must be sgd or adam, got {self.optimizer!r}.")
        if self.setup is not None and ":" not in self.setup:
            raise ValueError(f"--setup {self.setup}: expected FILE.py:FUNCTION, e.g. my_setup.py:build.")
        if self.init_from is not None:
            raise ValueError("--init-from: the opacus trainer starts from --preset or a --setup file's model.")
        if self.data_split != "train":
            raise ValueError("--data-split public: the opacus trainer trains on train.jsonl (or a --setup file).")
