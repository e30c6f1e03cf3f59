"""The rgp trainer's settings: one frozen, keyword-only dataclass, validated on construction.

The DP options every trainer shares are :class:`~dpaudit.training.dp_options.DpOptions`'s, and the fields
shared with ``edp-sgd`` (task, model, schedule, noise decay) :class:`~trainers.torch_common.config.TorchTrainConfig`'s,
checks included.
Every field becomes an option of ``dpaudit train --trainer rgp`` (``dpaudit.cli.train`` reads the
annotations and the ``help`` metadata); the whole Config is stored in each checkpoint so that a rerun
with different settings on the same ``--out`` is refused. ``rank``, ``power_iters``,
``warmup_steps`` and ``random_carriers`` are RGP's (Yu et al. 2021, Algorithms 1-2): they change
what is clipped and noised but not the guarantee, one Gaussian mechanism of sensitivity C per step
whatever the carriers are.

RGP is always private, so its defaults are the private ones (batch 512, 20 epochs) with a larger
step, 5e-3, and rank 16: on SNIPS intent classification (``tiny`` preset, epsilon 8) rank 16 at
5e-3 reached 0.90 held-out accuracy where rank 8 at 2e-3 reached 0.39.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from dpaudit.trainers.torch_common.config import TorchTrainConfig
from dpaudit.training.config_types import check_int
from dpaudit.training.dp_options import help_text


@dataclass(frozen=True, kw_only=True)
class RgpConfig(TorchTrainConfig):
    """Settings of one RGP fine-tuning run (Yu et al. 2021, Algorithm 1)."""

    epochs: int = field(
        default=20, metadata=help_text("Epochs; one epoch is ceil(N / batch-size) Poisson-sampled steps.")
    )
    batch_size: int = field(
        default=512,
        metadata=help_text(
            "Expected logical batch size; Poisson sampling rate q = batch-size / number of training examples."
        ),
    )
    learning_rate: float = field(default=5e-3, metadata=help_text("Adam learning rate of the reconstructed updates."))
    # Overrides DpOptions.clip_norm: RGP clips each example's joint vector of carrier gradients, not its gradient.
    clip_norm: float = field(
        default=1.0,
        metadata=help_text(
            "Clip norm C of each example's joint vector (carrier gradients of every matrix, biases, layer norms): "
            "sensitivity C; the noise is added to each summed carrier gradient."
        ),
    )
    physical_batch: int = field(
        default=64,
        metadata=help_text(
            "Examples per forward/backward chunk of the per-example carrier gradients (memory knob only)."
        ),
    )
    rank: int = field(
        default=16,
        metadata=help_text(
            "Reparametrization rank r of the gradient carriers L (p x r), R (r x d) of every weight matrix (Yu et al. use "
            "1..8); capped at min(p, d) per matrix, where RGP recovers the full gradient."
        ),
    )
    power_iters: int = field(
        default=1,
        metadata=help_text(
            "K power iterations of Algorithm 2 computing the carriers from the historical update (K = 1 in the paper)."
        ),
    )
    warmup_steps: int = field(
        default=10,
        metadata=help_text(
            "Steps whose carriers come from the weight W_t itself (Algorithm 1's warm-up); afterwards from the historical "
            "update W_t - W_0."
        ),
    )
    random_carriers: bool = field(
        default=False,
        metadata=help_text(
            "RGP-random (the paper's ablation): random orthonormal carriers each step instead of the historical update's."
        ),
    )

    #: rgp is always private: a run without noise is another trainer's.
    NO_NOISE: ClassVar[str] = "--trainer edp-sgd --mode sgd"

    def __post_init__(self) -> None:
        super().__post_init__()  # the DP options, then the torch trainers' shared fields
        for name, minimum in (("rank", 1), ("power_iters", 1), ("warmup_steps", 0)):
            check_int(name, getattr(self, name), minimum)
        if self.adambc_floor is not None:  # the noise reaches W through the carriers: not Phi per coordinate
            raise ValueError(
                "--adambc-floor applies to --trainer edp-sgd: rgp's noise reaches each weight through its gradient "
                "carriers (L g_R + g_L R), so its variance is not one Phi per coordinate; remove it."
            )

    def private_run_words(self) -> str:
        return "--trainer rgp"

    @property
    def mode(self) -> str:
        """``rgp`` or ``rgp-random`` (the carriers' origin), as the progress bar and the manifest say it."""
        return "rgp-random" if self.random_carriers else "rgp"
