"""The jax-bert trainer's settings: one frozen, keyword-only dataclass, validated on construction.

Every field becomes an option of ``dpaudit train --trainer jax-bert`` (``dpaudit.cli.train`` reads the
annotations and the ``help`` metadata), and the whole Config is stored in each checkpoint so that a
rerun with different settings on the same ``--out`` is refused instead of silently mixing two runs. The DP
options every trainer shares (``--init-from``, ``--data-split``, ``--dataset-size``, ``--clip-norm``,
``--noise-multiplier``, ``--target-epsilon``, ``--delta``, the acceptances, ``--noise-seed``, ``--keep-checkpoints``)
and their checks are :class:`~dpaudit.training.dp_options.DpOptions`'s; this class adds jax-bert's own.

Settings that change the privacy guarantee (``noise_multiplier``, ``target_epsilon``, ``delta``,
``clip_norm``, ``steps``/``batch_size``/``batch_schedule``, ``sampling``) are kept apart in meaning
from performance knobs (``physical_batch``, ``clip_engine``, ``data_parallel``): the latter never change what is
sampled, clipped or noised, only how the arithmetic is laid out. They carry the names the torch trainers give
the same knobs; the pre-rename spellings ``micro_batch`` / ``--micro-batch`` and ``clipping`` /
``--clipping`` are still read (:attr:`JaxBertConfig.RENAMED_FIELDS`), with a deprecation warning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from dpaudit.accounting import parse_batch_schedule
from dpaudit.training.dp_options import DpOptions, help_text, init_from_help

Preset = Literal["tiny", "mini", "small", "base", "large"]
Sampling = Literal["poisson", "shuffle"]
ClipEngine = Literal["ghost", "vmap"]
LrDecay = Literal["quadratic", "none"]
Freeze = Literal["none", "embeddings", "below-top", "weights"]

#: The --freeze choices the ghost clipping engine computes (the others take --clip-engine vmap).
GHOST_FREEZES: tuple[str, ...] = ("none", "embeddings")

#: Tokenizer vocabulary used when ``--vocab-size`` is not given (tiny models learn fast on small vocabularies).
DEFAULT_VOCAB_SIZE: dict[str, int] = {"tiny": 2000, "mini": 8000, "small": 8000, "base": 30522, "large": 30522}


#: The longest --max-length: BERT's position table (``max_position_embeddings`` = 512, Devlin et al. 2019 and the
#: Hugging Face ``BertConfig``), the most positions an exported model reloads with. Beyond it the trainer would
#: grow the table and attention's memory with the square of the length (--max-length 100000 asked for ~320 GB).
MAX_POSITIONS = 512


#: The smallest useful run (tests and the trainer contract suite): seconds on a 2-core CPU.
TINY_SETTINGS: dict[str, Any] = dict(
    preset="tiny",
    steps=6,
    batch_size=16,
    physical_batch=8,
    max_length=16,
    vocab_size=128,
    noise_multiplier=1.0,
    checkpoint_every=3,
    log_every=2,
    eval_every=3,
    eval_examples=16,
)


_help = help_text


@dataclass(frozen=True, kw_only=True)
class JaxBertConfig(DpOptions):
    """Settings of one DP-SGD (or non-private) BERT masked-LM pretraining run (Anil et al. 2021): its own fields;
    the DP options (start, data split, N, clip norm, noise, delta, noise seed) are :class:`DpOptions`'s."""

    # Overrides DpOptions.init_from: which model directories jax-bert starts from, and what it takes from them.
    init_from: str | None = field(
        default=None,
        metadata=_help(
            init_from_help(
                "a Hugging Face BERT masked-LM directory (safetensors); its architecture and tokenizer.json replace --preset "
                "and --vocab-size"
            )
        ),
    )
    preset: Preset = field(
        default="tiny",
        metadata=_help(
            "Model size without --init-from: tiny (2 layers, hidden 64; tests), mini (Dupuy et al. 4x312), small (4x512), "
            "base, large."
        ),
    )
    steps: int = field(default=100, metadata=_help("Optimizer steps (ignored when --batch-schedule is given)."))
    batch_size: int = field(
        default=64,
        metadata=_help(
            "Expected logical batch size; Poisson sampling rate q = batch-size / number of training examples."
        ),
    )
    batch_schedule: str | None = field(
        default=None,
        metadata=_help(
            "Batch-size schedule 'steps:batch,steps:batch' (e.g. '100:64,200:256'), segments in the order run (any order: "
            "increasing as in Anil et al. 2021, or not; each is accounted as given); overrides --steps/--batch-size."
        ),
    )
    physical_batch: int = field(
        default=32,
        metadata=_help(
            "Examples per micro-step (memory knob only: the logical batch is accumulated over micro-steps). "
            "Formerly --micro-batch."
        ),
    )
    max_length: int = field(default=64, metadata=_help("Tokens per example (longer texts are truncated)."))
    max_predictions: int | None = field(
        default=None,
        metadata=_help("Masked positions per example (static shape); default ceil(max-length * mask-prob) + 1."),
    )
    vocab_size: int | None = field(
        default=None,
        metadata=_help(
            "WordPiece vocabulary trained on public.jsonl (without --init-from); default 2000 for tiny, 8000 mini/small, "
            "30522 base/large."
        ),
    )
    learning_rate: float = field(default=1e-3, metadata=_help("Peak AdamW learning rate."))
    warmup_steps: int = field(default=0, metadata=_help("Linear warmup steps before the learning-rate decay."))
    lr_decay: LrDecay = field(
        default="quadratic",
        metadata=_help(
            "Learning rate after warmup: quadratic (decay to 0 at the last step, Anil et al. 2021) or none (the peak "
            "rate to the end: the last iterate weighs every step alike, as a black-box canary audit of a DP model wants)."
        ),
    )
    weight_decay: float = field(
        default=0.01, metadata=_help("Decoupled AdamW weight decay (Anil et al. use up to 1.0).")
    )
    clip_engine: ClipEngine = field(
        default="ghost",
        metadata=_help(
            "How the per-example clipped sum is computed; both give the same sum and guarantee. ghost: "
            "Gram-matrix norms and book-keeping, no per-example gradients (~1.1x a non-private step); "
            "vmap: per-example gradients by jax.vmap (~2.4x on CPU; the reference). Formerly --clipping."
        ),
    )
    freeze: Freeze = field(
        default="none",
        metadata=_help(
            "Parameters left untrained: none; embeddings (the word, position and token-type tables; the word "
            "table is tied to the MLM decoder, whose bias stays trained); below-top (everything below the top "
            "encoder layer: the embeddings with their LayerNorm and every lower layer; the top layer and the MLM head "
            "train); weights (every weight matrix and table: "
            "only the biases and LayerNorm parameters train, BitFit). Frozen parameters get no gradient, no noise "
            "and no update; the trained ones are clipped to C together, so the sensitivity and epsilon are unchanged. "
            "Under DP a table of mostly rare tokens gets sparse gradients but dense noise. below-top and weights "
            "take --clip-engine vmap in a private run."
        ),
    )
    non_private: bool = field(
        default=False, metadata=_help("Train without clipping or noise (the baseline; epsilon = inf).")
    )
    sampling: Sampling = field(
        default="poisson",
        metadata=_help(
            "poisson (what the accountant assumes) or shuffle (fixed-size batches: NO proven epsilon; privacy.json gives "
            "epsilon_if_poisson, what Poisson sampling would have cost)."
        ),
    )
    mask_prob: float = field(
        default=0.15, metadata=_help("Fraction of tokens masked for the MLM objective (80/10/10).")
    )
    eval_every: int = field(default=50, metadata=_help("Steps between MLM accuracy evaluations on heldout.jsonl."))
    eval_examples: int = field(
        default=256, metadata=_help("Heldout examples used per evaluation (0 = skip evaluation).")
    )
    checkpoint_every: int = field(
        default=50, metadata=_help("Steps between checkpoints (one is always written at the end).")
    )
    log_every: int = field(
        default=10, metadata=_help("Steps between host syncs for the progress bar and metrics.jsonl.")
    )
    data_parallel: bool = field(default=True, metadata=_help("Shard each micro-step over all local devices."))

    #: Former field names -> current ones. ``dpaudit train`` still takes the old options (hidden, with a
    #: deprecation warning) and --config keys; :meth:`~DpOptions.upgrade_stored` renames them in a checkpoint's config.
    RENAMED_FIELDS: ClassVar[Mapping[str, str]] = {"micro_batch": "physical_batch", "clipping": "clip_engine"}

    @property
    def private(self) -> bool:
        return not self.non_private

    def __post_init__(self) -> None:
        super().__post_init__()  # types, then the DP options (DpOptions: one validator for every trainer)
        positive_ints = (
            "steps",
            "batch_size",
            "physical_batch",
            "max_length",
            "eval_every",
            "checkpoint_every",
            "log_every",
        )
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer > 0, got {value!r}.")
        for name in ("warmup_steps", "eval_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer >= 0, got {value!r}.")
        if self.private and self.freeze not in GHOST_FREEZES and self.clip_engine == "ghost":
            raise ValueError(
                f"--freeze {self.freeze} needs --clip-engine vmap: the ghost engine freezes no parameter or the "
                "embedding tables only."
            )
        if self.max_length < 8:
            raise ValueError(f"--max-length must be >= 8, got {self.max_length}.")
        if self.max_length > MAX_POSITIONS:
            raise ValueError(
                f"--max-length must be <= {MAX_POSITIONS}, BERT's position table (max_position_embeddings), "
                f"got {self.max_length}; attention memory grows with its square."
            )
        if self.max_predictions is not None and not 0 < self.max_predictions <= self.max_length:
            raise ValueError(
                f"--max-predictions must be in (0, max-length={self.max_length}], got {self.max_predictions}."
            )
        if self.vocab_size is not None and self.vocab_size < 128:
            raise ValueError(
                f"--vocab-size must be >= 128 (special tokens and the base alphabet), got {self.vocab_size}."
            )
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"--learning-rate must be > 0, got {self.learning_rate}.")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"--weight-decay must be >= 0, got {self.weight_decay}.")
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"--mask-prob must be in (0, 1), got {self.mask_prob}.")
        if self.batch_schedule is not None:
            parse_batch_schedule(self.batch_schedule)
        if self.warmup_steps >= self.total_steps:
            raise ValueError(
                f"--warmup-steps must be < the {self.total_steps} training steps, got {self.warmup_steps}."
            )

    @property
    def schedule(self) -> list[tuple[int, int]]:
        """The run as ``[(steps, expected_batch), ...]`` segments (one segment without a schedule)."""
        if self.batch_schedule is not None:
            return parse_batch_schedule(self.batch_schedule)
        return [(self.steps, self.batch_size)]

    @property
    def total_steps(self) -> int:
        """Optimizer steps of the whole planned run."""
        return sum(steps for steps, _ in self.schedule)

    @property
    def resolved_vocab_size(self) -> int:
        return self.vocab_size if self.vocab_size is not None else DEFAULT_VOCAB_SIZE[self.preset]

    @property
    def resolved_max_predictions(self) -> int:
        if self.max_predictions is not None:
            return self.max_predictions
        return min(self.max_length, math.ceil(self.max_length * self.mask_prob) + 1)
