"""The jax-privacy trainer's settings: one frozen, keyword-only dataclass, validated on construction.

Settings that change the mechanism (``noise_multiplier`` or ``target_epsilon``, ``delta``, ``clip_norm``,
``batch_size``, ``steps``, ``sampling``) are kept apart from the model and optimizer settings; ``accountant``
chooses JAX Privacy's own accountant (its PLD or RDP ``DpAccountantConfig``), which states the library's claim
beside dpaudit's. ``physical_batch`` is JAX Privacy's minibatch: a logical batch split into padded minibatches
whose clipped sums accumulate into one noisy update (a memory knob; the mechanism is unchanged). See
``docs/trainers.md`` ("jax-privacy").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from dpaudit.training.config_types import check_int
from dpaudit.training.dp_options import DpOptions, help_text

__all__ = ["JaxPrivacyConfig"]

Accountant = Literal["pld", "rdp"]
SamplingName = Literal["poisson", "fixed"]
OptimizerName = Literal["sgd", "adam"]


@dataclass(frozen=True, kw_only=True)
class JaxPrivacyConfig(DpOptions):
    """Settings of one JAX Privacy DP-SGD run (``clipped_grad``, ``gaussian_privatizer``, a batch selection strategy).

    The shared DP options (:class:`~dpaudit.training.dp_options.DpOptions`) keep their meaning; the noise multiplier
    is JAX Privacy's (noise std sigma C on the clipped sum), a target epsilon is calibrated by JAX Privacy's own
    ``calibrate_noise_multiplier``. What the library does not do here is refused: ``--init-from``,
    ``--data-split public`` and a declared ``--dataset-size`` (q is the batch over the real rows)."""

    batch_size: int = field(default=16, metadata=help_text("Expected batch size (Poisson: q = batch / N)."))
    steps: int = field(default=4, metadata=help_text("Noisy updates (each one accounted step)."))
    sampling: SamplingName = field(
        default="poisson",
        metadata=help_text(
            "poisson (JAX Privacy's CyclicPoissonSampling) or fixed (its FixedBatchSampling: batches of exactly "
            "--batch-size without replacement; replace-one accounting)."
        ),
    )
    accountant: Accountant = field(default="pld", metadata=help_text("JAX Privacy's accountant: pld or rdp."))
    learning_rate: float = field(default=0.05, metadata=help_text("Learning rate of the optax optimizer."))
    optimizer: OptimizerName = field(default="sgd", metadata=help_text("sgd or adam (optax)."))
    physical_batch: int | None = field(
        default=None,
        metadata=help_text(
            "JAX Privacy minibatch size: each logical batch runs as padded minibatches whose clipped sums "
            "accumulate, one noisy update per logical batch (default: one minibatch of the expected batch size)."
        ),
    )
    preset: str = field(default="tiny", metadata=help_text("BERT size of the Flax masked LM (jax-bert's presets)."))
    vocab_size: int = field(default=128, metadata=help_text("WordPiece vocabulary learned on public.jsonl."))
    max_length: int = field(default=16, metadata=help_text("Tokens per example."))
    setup: str | None = field(
        default=None,
        metadata=help_text(
            "FILE.py:build: train your own JAX model instead (build() returns a dict with loss, params, data and "
            "batch_size, and optionally optimizer: see docs/trainers.md, jax-privacy)."
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("batch_size", "steps", "vocab_size", "max_length"):
            check_int(name, getattr(self, name), 1)
        if self.physical_batch is not None:
            check_int("physical_batch", self.physical_batch, 1)
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"--learning-rate must be > 0, got {self.learning_rate}.")
        if self.accountant not in ("pld", "rdp"):
            raise ValueError(f"--accountant must be pld or rdp, got {self.accountant!r}.")
        if self.sampling not in ("poisson", "fixed"):
            raise ValueError(f"--sampling must be poisson or fixed, got {self.sampling!r}.")
        if self.optimizer not in ("sgd", "adam"):
            raise ValueError(f"--optimizer must be sgd or adam, got {self.optimizer!r}.")
        if self.setup is not None and ":" not in self.setup:
            raise ValueError(f"--setup {self.setup}: expected FILE.py:FUNCTION, e.g. my_setup.py:build.")
        if self.init_from is not None:
            raise ValueError("--init-from: the jax-privacy trainer starts from --preset or a --setup file's params.")
        if self.data_split != "train":
            raise ValueError("--data-split public: the jax-privacy trainer trains on train.jsonl (or a --setup file).")
