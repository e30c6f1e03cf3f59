"""The settings every torch trainer shares: one frozen, keyword-only base dataclass and its checks.

Each trainer's Config (``edp-sgd``'s :class:`~trainers.edp_sgd.config.EdpSgdConfig`, ``rgp``'s
:class:`~trainers.rgp.config.RgpConfig`) subclasses :class:`TorchTrainConfig`, which subclasses the DP options
every trainer shares (:class:`~dpaudit.training.dp_options.DpOptions`: start, data split, N, clip norm, noise,
delta, noise seed, and their one validator). It adds its own fields, redeclares a field only where its help (or
default) says more (with a comment saying why), and calls ``super().__post_init__()`` in its ``__post_init__``
before its own checks. ``dpaudit.cli.train`` reads the fields of the subclass, inherited ones included, so every
field here is an option of both trainers with the same meaning.

Mode-dependent defaults (:attr:`TorchTrainConfig.SGD_DEFAULTS`, :attr:`TorchTrainConfig.PRIVATE_DEFAULTS`):
``batch_size``, ``epochs`` and ``learning_rate`` default to ``None`` and are resolved once, in
:meth:`TorchTrainConfig.__post_init__`, to the values of the run's kind (private or not). A private step's noise is
fixed by the mechanism while its signal grows with the batch, so private training needs far larger
batches, more epochs and a larger step than sgd (Abadi et al. 2016; De et al. 2022, "Unlocking
high-accuracy differentially private image classification through scale"): on SNIPS intent
classification (10.8K rows, ``tiny`` preset, epsilon 8) dp-sgd at sgd's batch 32 / 3 epochs / 1e-3
stays at chance (0.13 held-out accuracy) and reaches 0.84-0.96 at 512 / 20 / 2e-3. The resolved
values are stored in the fields, so ``to_dict()`` (the manifest and the resume check) holds what ran,
and a rerun that spells a default out (``--batch-size 512``) is the same run. ``dataclasses.replace``
keeps resolved values: pass them again when changing ``mode``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from dpaudit.trainers.torch_common.options import DEFAULT_VOCAB_SIZE, Decay, Preset, Task
from dpaudit.training.config_types import check_int, check_noise_multiplier, check_real, option_name
from dpaudit.training.dp_options import DpOptions, help_text, init_from_help
from dpaudit.training.presets import CAUSAL_PRESET_NAMES, PRESETS

Device = Literal["auto", "cpu", "cuda"]


def parse_labels(value: str | list[str]) -> list[str]:
    """The labels of ``--labels``: a list as given, ``@FILE`` (one label per line, blank lines skipped, read
    as UTF-8), or comma-separated names; surrounding spaces are stripped and empty names refused.

    Raises:
        ValueError: naming ``--labels`` and what is wrong (an unreadable file, an empty name).
    """
    if isinstance(value, list):
        names = [str(v).strip() for v in value]
    elif value.startswith("@"):
        path = value[1:]
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            reason = getattr(err, "strerror", None) or str(err)
            raise ValueError(
                f"--labels {value}: cannot read {path} ({reason}); give a UTF-8 file of one label per line."
            ) from None
        names = [line.strip() for line in text.splitlines() if line.strip()]
    else:
        names = [part.strip() for part in value.split(",")]
    if any(not name for name in names):
        raise ValueError(f"--labels {value!r} has an empty label name; list names separated by commas.")
    return names


__all__ = ["Device", "TorchTrainConfig", "parse_labels"]


@dataclass(frozen=True, kw_only=True)
class TorchTrainConfig(DpOptions):
    """Settings shared by the torch trainers (task, model, schedule, noise decay) beside the DP options."""

    #: Values of the ``None``-defaulted fields for a non-private (sgd) run.
    SGD_DEFAULTS: ClassVar[Mapping[str, Any]] = {"batch_size": 32, "epochs": 3, "learning_rate": 1e-3}
    #: Values of the ``None``-defaulted fields for a private run (see the module docstring for why).
    PRIVATE_DEFAULTS: ClassVar[Mapping[str, Any]] = {"batch_size": 512, "epochs": 20, "learning_rate": 2e-3}
    #: Former field names -> current ones: ``dpaudit train`` still takes the old option (hidden, with a
    #: deprecation warning) and --config key; :meth:`~DpOptions.upgrade_stored` renames it in a checkpoint's config.
    RENAMED_FIELDS: ClassVar[Mapping[str, str]] = {"model": "init_from"}
    #: A run checkpointed before --lr-warmup-steps (--ema-decay, --adambc-floor) existed took the full rate from its
    #: first step (exported its last iterate, stepped with AdamW).
    ADDED_FIELDS: ClassVar[Mapping[str, Any]] = {
        **DpOptions.ADDED_FIELDS,
        "lr_warmup_steps": 0,
        "ema_decay": None,
        "adambc_floor": None,
    }
    #: A run without noise also refuses a noise decay and its floor, and a correction for the noise.
    PRIVATE_ONLY_FIELDS: ClassVar[tuple[str, ...]] = (
        *DpOptions.PRIVATE_ONLY_FIELDS,
        "sigma_min",
        "noise_decay",
        "adambc_floor",
    )

    task: Task = field(
        default="classify",
        metadata=help_text(
            "classify: sequence classification of {'text','label'} rows (intent). mlm: masked-LM fine-tuning on the texts. "
            "clm: causal-LM (next-token) training of a GPT-2-shaped (--preset tiny, mini, gpt2-small) or Llama-style "
            "(--preset llama-tiny, llama-100m) model, or any --init-from causal LM."
        ),
    )
    labels: str | list[str] | None = field(
        default=None,
        metadata=help_text(
            "classify: the label set, a,b,c or @FILE (one label per line); class ids follow this order. Default: the "
            "labels of public.jsonl. Never taken from train.jsonl: config.json releases it un-noised."
        ),
    )
    unknown_label: str | None = field(
        default=None,
        metadata=help_text(
            "classify: map rows whose label is outside the label set to NAME (one of the set). Default: such a "
            "train.jsonl row is refused; heldout/public rows are left out of evaluation."
        ),
    )
    # Overrides DpOptions.init_from: which model directories the torch trainers start from, per --task.
    init_from: str | None = field(
        default=None,
        metadata=help_text(
            init_from_help(
                "a Hugging Face BERT directory (masked LM or sequence classifier, safetensors; its tokenizer.json is used), "
                "or for --task clm any Hugging Face causal LM directory (AutoModelForCausalLM); classify reuses its encoder, "
                "and its head only when its id2label is this run's label set",
                more="Formerly --model.",
            )
        ),
    )
    preset: Preset = field(
        default="tiny",
        metadata=help_text(
            "Architecture when no --init-from is given: tiny (tests), mini (Dupuy et al. 4x312), small, base (= bert-base, "
            "12x768), large; --task clm: GPT-2-shaped tiny, mini (2x64; 4x256, 128 positions) or gpt2-small (12x768, "
            "GPT-2's own), or Llama-style (RMSNorm, rotary, SwiGLU) llama-tiny (tests) or llama-100m (12x768, ~110M)."
        ),
    )
    vocab_size: int | None = field(
        default=None,
        metadata=help_text(
            "WordPiece vocabulary trained on public.jsonl when no --init-from is given; default by preset (2000 tiny, "
            "8000 mini/small)."
        ),
    )
    max_length: int = field(default=32, metadata=help_text("Tokens per example (longer texts are truncated)."))
    epochs: int | None = field(
        default=None,
        metadata=help_text(
            "Epochs; one epoch is ceil(N / batch-size) Poisson-sampled steps. Default 20 for private modes, 3 for sgd."
        ),
    )
    batch_size: int | None = field(
        default=None,
        metadata=help_text(
            "Expected logical batch size; Poisson sampling rate q = batch-size / number of training examples. "
            "Default 512 for private modes (the noise is fixed, the signal grows with the batch), 32 for sgd."
        ),
    )
    learning_rate: float | None = field(
        default=None, metadata=help_text("Adam learning rate. Default 2e-3 for private modes, 1e-3 for sgd.")
    )
    weight_decay: float = field(default=0.0, metadata=help_text("Decoupled (AdamW) weight decay; 0 = Adam."))
    ema_decay: float | None = field(
        default=None,
        metadata=help_text(
            "Parameter averaging: evaluate and export an exponential moving average of the trained tensors, decay "
            "min(D, (1 + t) / (10 + t)) at step t (De et al. 2022), instead of the last iterate. Post-processing "
            "of the noised updates: the same epsilon. In (0, 1), e.g. 0.95; default: the last iterate."
        ),
    )
    adambc_floor: float | None = field(
        default=None,
        metadata=help_text(
            "DP-AdamBC (Tang et al. 2024): take the noise's known variance Phi = (sigma x sensitivity / batch-size)^2 "
            "out of Adam's second moment, floored at R x Phi, so Adam keeps its per-coordinate scaling instead of "
            "becoming SGD under the noise. Public inputs only: the same epsilon. R > 0, e.g. 0.1; default: AdamW. "
            "Private runs, edp-sgd only."
        ),
    )
    lr_warmup_steps: int = field(
        default=0,
        metadata=help_text(
            "Linear learning-rate warm-up: step t (from 0) takes --learning-rate x (t + 1) / N for t < N, the full "
            "rate after; 0 = the full rate from the first step. Fixed in advance, so it changes no guarantee; it must "
            "be shorter than the run (epochs x ceil(rows / batch-size) steps)."
        ),
    )
    noise_decay: Decay = field(
        default="none",
        metadata=help_text(
            "Per-epoch noise decay fixed in advance: none, linear sigma_e = max(sigma_0 (1 - k e), sigma_min), exp sigma_0 exp(-k e)."
        ),
    )
    decay_rate: float = field(default=0.0, metadata=help_text("k of --noise-decay (>= 0)."))
    sigma_min: float | None = field(
        default=None, metadata=help_text("Positive floor of linear decay (zero noise is not DP); default sigma_0 / 10.")
    )
    device: Device = field(
        default="auto",
        metadata=help_text(
            "Where the model, batches, noise and accumulators live: auto = cuda when available, else cpu."
        ),
    )
    log_every: int = field(
        default=10,
        metadata=help_text(
            "Steps between host syncs for the progress bar and metrics.jsonl (rows are still written per step)."
        ),
    )
    physical_batch: int = field(
        default=16, metadata=help_text("Examples per vectorized per-example-gradient chunk (memory knob only).")
    )
    mask_prob: float = field(default=0.15, metadata=help_text("mlm: fraction of tokens masked (80/10/10)."))
    eval_examples: int = field(
        default=512, metadata=help_text("heldout.jsonl examples evaluated after each epoch (0 = skip).")
    )
    checkpoint_every: int = field(
        default=50, metadata=help_text("Steps between checkpoints (one is always written at each epoch end).")
    )

    def __post_init__(self) -> None:
        """The DP options (:class:`DpOptions`), the mode-dependent defaults, then the range checks of the shared
        fields, in the order the CLI reports them. A subclass calls it first in its ``__post_init__``, once
        :attr:`private` is computable from the fields, and checks its own fields after it."""
        super().__post_init__()
        for name, value in (self.PRIVATE_DEFAULTS if self.private else self.SGD_DEFAULTS).items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
        self._check_labels()
        if self.task == "clm" and self.init_from is None and self.preset not in CAUSAL_PRESET_NAMES:
            raise ValueError(
                f"--preset {self.preset} has no causal (GPT-2 or Llama) shape; --task clm takes "
                f"{', '.join(CAUSAL_PRESET_NAMES)}, or --init-from a causal LM."
            )
        if self.task != "clm" and self.init_from is None and self.preset not in PRESETS:
            raise ValueError(
                f"--preset {self.preset} is a causal LM; --task {self.task} takes a BERT preset "
                f"({', '.join(PRESETS)}), or use --task clm."
            )
        minimums = {
            "max_length": 8,
            "epochs": 1,
            "batch_size": 1,
            "physical_batch": 1,
            "eval_examples": 0,
            "lr_warmup_steps": 0,
            "checkpoint_every": 1,
            "log_every": 1,
        }
        for name, minimum in minimums.items():
            check_int(name, getattr(self, name), minimum)
        if self.vocab_size is not None:
            check_int("vocab_size", self.vocab_size, 128)
        check_real("learning_rate", self.learning_rate, low=0.0, low_open=True)
        check_real("weight_decay", self.weight_decay, low=0.0, low_open=False)
        check_real("decay_rate", self.decay_rate, low=0.0, low_open=False)
        check_real("mask_prob", self.mask_prob, low=0.0, low_open=True, high=1.0)
        if self.ema_decay is not None:
            check_real("ema_decay", self.ema_decay, low=0.0, low_open=True, high=1.0)
        if self.adambc_floor is not None:
            check_real("adambc_floor", self.adambc_floor, low=0.0, low_open=True)
        if self.sigma_min is not None:  # a floor of the noise multiplier: its range
            check_noise_multiplier(self.sigma_min, option_name("sigma_min"), no_noise=self.NO_NOISE)
        if self.noise_decay == "none" and self.decay_rate != 0.0:
            raise ValueError(f"--decay-rate {self.decay_rate:g} needs --noise-decay linear or exp.")
        if self.sigma_min is not None and self.noise_decay != "linear":
            raise ValueError("--sigma-min applies to --noise-decay linear only.")

    def _check_labels(self) -> None:
        """Resolve ``--labels`` (``a,b,c``, ``@FILE`` or a TOML list) to the list stored in the field, so the
        manifest and the resume check hold the labels themselves, not a file name; check ``--unknown-label``."""
        if self.task != "classify":
            for name in ("labels", "unknown_label"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{option_name(name)} applies to --task classify only; remove it.")
            return
        if self.unknown_label is not None and not self.unknown_label.strip():
            raise ValueError("--unknown-label must be a label name, got ''.")
        if self.labels is None:
            return  # public.jsonl's labels, resolved (and --unknown-label checked) when the data is read
        names = parse_labels(self.labels)
        if len(names) < 2:
            raise ValueError(f"--labels declares {len(names)} label(s); a classifier needs at least 2.")
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(
                f"--labels declares {', '.join(map(repr, repeated))} more than once; list each label once."
            )
        if self.unknown_label is not None and self.unknown_label not in names:
            raise ValueError(
                f"--unknown-label {self.unknown_label!r} is not in --labels ({', '.join(names)}); add it there."
            )
        object.__setattr__(self, "labels", names)

    @property
    def resolved_vocab_size(self) -> int:
        return self.vocab_size if self.vocab_size is not None else DEFAULT_VOCAB_SIZE[self.preset]
