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
``ghost_chunk``, ``noise_draw``, ``clip_engine``, ``device``, ``log_every``): the latter never change what is sampled,
clipped or noised, nor its distribution. ``batch_size``, ``epochs`` and ``learning_rate`` default by
mode: 512 / 20 / 2e-3 for dp-sgd and edp-sgd, 32 / 3 / 1e-3 for sgd (resolved on construction).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from dpaudit.trainers.torch_common.config import TorchTrainConfig
from dpaudit.trainers.torch_common.lora import MISSING_PEFT, peft_installed
from dpaudit.trainers.torch_common.options import DEFAULT_VOCAB_SIZE
from dpaudit.training.config_types import check_int, check_real, check_types, option_name
from dpaudit.training.dp_options import help_text as _help

Mode = Literal["sgd", "dp-sgd", "edp-sgd"]
ScaleFrom = Literal["public", "private"]
NoiseDraw = Literal["process", "micro-batch"]
ClipEngine = Literal["ghost", "vmap"]
Peft = Literal["none", "lora"]

#: --peft lora's defaults when --lora-rank / --lora-alpha are not given.
LORA_DEFAULTS = {"lora_rank": 8, "lora_alpha": 16.0}

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
    ghost_chunk: int | None = field(
        default=None,
        metadata=_help(
            "dp-sgd and edp-sgd with --clip-engine ghost: examples per forward and backward pass, whole units "
            "(examples, or micro-batches) at a time; default: as many as keep the pass's estimated activations "
            "and output gradients within 1 GiB on the CPU, a quarter of a GPU's memory if more (58 examples of 32 "
            "tokens for a 6 x 384 BERT with a 30,522-token head, 1,027 for the tiny preset); a large N runs the "
            "batch in one pass. Memory knob only, the same clipped sum: one pass of a masked LM over BERT's 30,522 "
            "tokens holds [B, L, 30522] logits and their gradients, about 4 GB at B = 512 and L = 32."
        ),
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
    mask_draws: int = field(
        default=1,
        metadata=_help(
            "--task mlm: maskings of each sampled example per step, its gradient the mean over the K before it is "
            "clipped (augmentation multiplicity, De et al. 2022): the same sampling, sensitivity and epsilon, a "
            "stronger signal per clipped example, K times the compute. Default 1."
        ),
    )

    peft: Peft = field(
        default="none",
        metadata=_help(
            "none: train every parameter. lora: freeze the model (the --init-from start) and train LoRA adapters "
            "(and a classifier's head) through the peft library: only they are clipped, noised and updated; "
            "model/ holds the merged model, model/adapter/ the adapter (needs pip install 'dpaudit[peft]')."
        ),
    )
    lora_rank: int | None = field(default=None, metadata=_help("--peft lora: rank r of each adapter (default 8)."))
    lora_alpha: float | None = field(
        default=None, metadata=_help("--peft lora: alpha; the update is (alpha / r) B A (default 16).")
    )
    lora_targets: str | list[str] | None = field(
        default=None,
        metadata=_help(
            "--peft lora: the Linear modules to adapt by name, comma-separated (e.g. query,value; c_attn; "
            "q_proj,v_proj). Default: peft's choice for the model type."
        ),
    )
    lora_modules_to_save: str | list[str] | None = field(
        default=None,
        metadata=_help(
            "--peft lora: modules trained in full beside the adapters (peft's modules_to_save), by name, "
            "comma-separated: e.g. wte,wpe (GPT-2's token and position embeddings), word_embeddings (BERT's), "
            "embed_tokens (Llama's). An output layer tied to the embeddings stays tied (trained with them). "
            "Default: none."
        ),
    )

    #: A run checkpointed before --peft existed trained every parameter: it resumes as --peft none.
    ADDED_FIELDS: ClassVar[Mapping[str, Any]] = {
        **TorchTrainConfig.ADDED_FIELDS,
        "peft": "none",
        "lora_rank": None,
        "lora_alpha": None,
        "lora_targets": None,
        "lora_modules_to_save": None,
        "mask_draws": 1,
    }

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
        if self.ghost_chunk is not None:
            check_int("ghost_chunk", self.ghost_chunk, 1)
            if self.mode == "sgd" or self.clip_engine != "ghost":
                raise ValueError(
                    "--ghost-chunk applies to the ghost engine of --mode dp-sgd and edp-sgd only; remove it "
                    "(--physical-batch is the vmap engine's memory knob)."
                )
        check_int("mask_draws", self.mask_draws, 1)
        if self.mask_draws > 1 and self.task != "mlm":
            raise ValueError(f"--mask-draws applies to --task mlm only (this run is --task {self.task}); remove it.")
        if self.mode != "edp-sgd" and self.scale_from != "public":
            raise ValueError("--scale-from applies to --mode edp-sgd only.")
        self._check_lora()

    def _check_lora(self) -> None:
        """Resolve --lora-* to their values under --peft lora (stored, so the manifest holds what ran); refuse
        them without it, and --peft lora without the peft library (one line naming the extra)."""
        names = ("lora_rank", "lora_alpha", "lora_targets", "lora_modules_to_save")
        if self.peft != "lora":
            for name in names:
                if getattr(self, name) is not None:
                    raise ValueError(f"{option_name(name)} applies to --peft lora only; add --peft lora or remove it.")
            return
        if not peft_installed():
            raise ValueError(MISSING_PEFT)
        for name, value in LORA_DEFAULTS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        check_int("lora_rank", self.lora_rank, 1)
        check_real("lora_alpha", self.lora_alpha, low=0.0, low_open=True)
        for name in ("lora_targets", "lora_modules_to_save"):
            given = getattr(self, name)
            if given is None:
                continue
            parts = [str(t).strip() for t in (given if isinstance(given, list) else given.split(","))]
            if not parts or any(not t for t in parts):
                raise ValueError(
                    f"{option_name(name)} {given!r} has an empty module name; list names separated by commas."
                )
            object.__setattr__(self, name, sorted(set(parts)))

    @property
    def private(self) -> bool:
        return self.mode != "sgd"

    def private_run_words(self) -> str:
        return f"--mode {self.mode}"
