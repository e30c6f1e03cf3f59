"""The edp-sgd trainer's settings: one frozen, keyword-only dataclass, validated on construction.

The DP options every trainer shares and their one validator are
:class:`~dpaudit.training.dp_options.DpOptions`'s, the fields shared with ``rgp`` (task, model, schedule,
noise decay) :class:`~trainers.torch_common.config.TorchTrainConfig`'s; this class adds the mode, eDP-SGD's
micro-batches and clip scaling, and the performance knobs of its clippers. Every field becomes an
option of ``dpaudit train --trainer edp-sgd`` (``dpaudit.cli.train`` reads the annotations and the
``help`` metadata); the whole Config is stored in each checkpoint so that a rerun with different
settings on the same ``--out`` is refused instead of silently mixing two runs.

Settings that change the guarantee (``mode``, ``noise_multiplier``, ``target_epsilon``, ``delta``,
``clip_norm``, ``epochs``, ``batch_size``, ``micro_batches``, ``noise_decay``, ``decay_rate``,
``sigma_min``, ``scale_from``) are kept apart in meaning from performance knobs (``physical_batch``,
``noise_draw``, ``clip_engine``, ``device``, ``log_every``): the latter never change what is sampled,
clipped or noised, nor its distribution. ``batch_size``, ``epochs`` and ``learning_rate`` default by
mode: 512 / 20 / 2e-3 for dp-sgd and edp-sgd, 32 / 3 / 1e-3 for sgd (resolved on construction).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

from dpaudit.trainers.torch_common.config import TorchTrainConfig
from dpaudit.trainers.torch_common.options import DEFAULT_VOCAB_SIZE
from dpaudit.training.config_types import check_int, check_types
from dpaudit.training.dp_options import help_text as _help

Mode = Literal["sgd", "dp-sgd", "edp-sgd"]
ScaleFrom = Literal["public", "private"]
NoiseDraw = Literal["process", "micro-batch"]
ClipEngine = Literal["ghost", "vmap"]

__all__ = ["DEFAULT_VOCAB_SIZE", "EdpSgdConfig"]


@dataclass(frozen=True, kw_only=True)
class EdpSgdConfig(TorchTrainConfig):
    """Settings of one sgd / dp-sgd / eDP-SGD fine-tuning run (Dupuy et al. 2021)."""

    learning_rate: float | None = field(
        default=None,
        metadata=_help(
            "Adam learning rate (the paper uses Adam in every mode). Default 2e-3 for private modes, 1e-3 for sgd."
        ),
    )
    # Overrides DpOptions.clip_norm: what is clipped depends on --mode (an example, or a micro-batch: sensitivity 2C).
    clip_norm: float = field(
        default=1.0,
        metadata=_help(
            "Clip norm C: per example (dp-sgd; sensitivity C), or per micro-batch with per-layer norms C_l, "
            "sum C_l^2 = C^2 (edp-sgd; sensitivity 2C: one example can flip its micro-batch's clipped gradient)."
        ),
    )
    physical_batch: int = field(
        default=16,
        metadata=_help("dp-sgd and edp-sgd: examples per vectorized per-example-gradient chunk (memory knob only)."),
    )
    mode: Mode = field(
        default="edp-sgd",
        metadata=_help(
            "sgd: non-private baseline (Adam). dp-sgd: per-example clipping (see --clip-engine), sensitivity C. "
            "edp-sgd: micro-batch clipping with per-layer clip norms (Algorithm 1 of Dupuy et al.), sensitivity 2C."
        ),
    )
    non_private: bool = field(
        default=False,
        metadata=_help(
            "Train without clipping or noise: the same run as --mode sgd (e.g. a public model to start from: "
            "--data-split public --non-private)."
        ),
    )
    micro_batches: int = field(
        default=8,
        metadata=_help(
            "edp-sgd: micro-batches per logical batch (k); each example goes to micro-batch hash(example) mod k."
        ),
    )
    scale_from: ScaleFrom = field(
        default="public",
        metadata=_help(
            "edp-sgd per-layer clip norms from the first-iteration gradient on public.jsonl (default) or on private "
            "train.jsonl (an extra release NOT covered by epsilon; privacy.json says so)."
        ),
    )
    noise_draw: NoiseDraw = field(
        default="process",
        metadata=_help(
            "edp-sgd performance knob, same distribution either way: process = one Gaussian per process carrying its "
            "micro-batches' noise (fast); micro-batch = one per micro-batch as in Algorithm 1 (values independent of "
            "the number of processes)."
        ),
    )
    clip_engine: ClipEngine = field(
        default="ghost",
        metadata=_help(
            "dp-sgd and edp-sgd performance knob, same clipped sum either way: ghost = per-example / per-micro-batch norms "
            "from activations and output gradients in one backward pass (Li et al. 2022; Bu et al. 2023); vmap = "
            "materialized per-example gradients (torch.func). ghost falls back to vmap for unsupported layers."
        ),
    )

    #: The refusals name --mode sgd (--non-private is its other spelling, which --mode dp-sgd contradicts).
    NO_NOISE: ClassVar[str] = "--mode sgd"

    def __post_init__(self) -> None:
        check_types(self)  # before the mode is read (DpOptions checks again)
        if self.non_private and self.mode == "dp-sgd":
            raise ValueError("--non-private is --mode sgd; it contradicts --mode dp-sgd.")
        if self.non_private:  # (--mode edp-sgd is the default: --non-private alone means sgd)
            object.__setattr__(self, "mode", "sgd")
        object.__setattr__(self, "non_private", self.mode == "sgd")  # one run, whichever spelling
        super().__post_init__()  # the DP options, then the torch trainers' shared fields
        check_int("micro_batches", self.micro_batches, 1)
        if self.mode != "edp-sgd" and self.scale_from != "public":
            raise ValueError("--scale-from applies to --mode edp-sgd only.")

    @property
    def private(self) -> bool:
        return self.mode != "sgd"

    def private_run_words(self) -> str:
        return f"--mode {self.mode}"
