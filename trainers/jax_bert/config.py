"""The jax-bert trainer's settings: one frozen, keyword-only dataclass, validated on construction.

Every field becomes an option of ``dpaudit train --trainer jax-bert`` (``dpaudit.cli.train`` reads the
annotations and the ``help`` metadata), and the whole Config is stored in each checkpoint so that a
rerun with different settings on the same ``--out`` is refused instead of silently mixing two runs.

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
from dpaudit.training.config_types import check_noise_multiplier, check_types, redacted_dict
from dpaudit.training.starting_point import DataSplit

Preset = Literal["tiny", "mini", "small", "base", "large"]
Sampling = Literal["poisson", "shuffle"]
ClipEngine = Literal["ghost", "vmap"]
LrDecay = Literal["quadratic", "none"]

#: Tokenizer vocabulary used when ``--vocab-size`` is not given (tiny models learn fast on small vocabularies).
DEFAULT_VOCAB_SIZE: dict[str, int] = {"tiny": 2000, "mini": 8000, "small": 8000, "base": 30522, "large": 30522}


#: The longest --max-length: BERT's position table (``max_position_embeddings`` = 512, Devlin et al. 2019 and the
#: Hugging Face ``BertConfig``), the most positions an exported model reloads with. Beyond it the trainer would
#: grow the table and attention's memory with the square of the length (--max-length 100000 asked for ~320 GB).
MAX_POSITIONS = 512


#: The smallest useful run (tests and the trainer contract suite): seconds on a 2-core CPU.
TINY_SETTINGS: dict[str, Any] = dict(
    preset="tiny", steps=6, batch_size=16, physical_batch=8, max_length=16, vocab_size=128, noise_multiplier=1.0,
    checkpoint_every=3, log_every=2, eval_every=3, eval_examples=16,
)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass(frozen=True, kw_only=True)
class JaxBertConfig:
    """Settings of one DP-SGD (or non-private) BERT masked-LM pretraining run (Anil et al. 2021)."""

    init_from: str | None = field(default=None, metadata=_help(
        "Start from this model instead of a random init: a dpaudit train run directory (its model/) or a Hugging Face "
        "BERT masked-LM directory (safetensors); its architecture and tokenizer.json replace --preset and --vocab-size. "
        "It must be public (trained on public data only) for the guarantee to mean what it says; a start trained on "
        "this run's train.jsonl is refused."))
    data_split: DataSplit = field(default="train", metadata=_help(
        "What to train on: train (train.jsonl, the private data) or public (public.jsonl: with --non-private, a public "
        "model to start private runs from; DP on public data protects nothing). Evaluation stays on heldout.jsonl."))
    preset: Preset = field(default="tiny", metadata=_help(
        "Model size without --init-from: tiny (2 layers, hidden 64; tests), mini (Dupuy et al. 4x312), small (4x512), "
        "base, large."))
    steps: int = field(default=100, metadata=_help("Optimizer steps (ignored when --batch-schedule is given)."))
    batch_size: int = field(default=64, metadata=_help(
        "Expected logical batch size; Poisson sampling rate q = batch-size / number of training examples."))
    dataset_size: int | None = field(default=None, metadata=_help(
        "Declared PUBLIC dataset size N: q = batch-size / N (and the default delta) come from it, fixed in advance, and "
        "the real number of rows is not released. Default: the number of rows in train.jsonl, which is then treated as "
        "public (privacy.json states it and the replace-one epsilon beside the add/remove one)."))
    batch_schedule: str | None = field(default=None, metadata=_help(
        "Batch-size schedule 'steps:batch,steps:batch' (e.g. '100:64,200:256'), segments in the order run (any order: "
        "increasing as in Anil et al. 2021, or not; each is accounted as given); overrides --steps/--batch-size."))
    physical_batch: int = field(default=32, metadata=_help(
        "Examples per micro-step (memory knob only: the logical batch is accumulated over micro-steps). "
        "Formerly --micro-batch."))
    max_length: int = field(default=64, metadata=_help("Tokens per example (longer texts are truncated)."))
    max_predictions: int | None = field(default=None, metadata=_help(
        "Masked positions per example (static shape); default ceil(max-length * mask-prob) + 1."))
    vocab_size: int | None = field(default=None, metadata=_help(
        "WordPiece vocabulary trained on public.jsonl (without --init-from); default 2000 for tiny, 8000 mini/small, "
        "30522 base/large."))
    learning_rate: float = field(default=1e-3, metadata=_help("Peak AdamW learning rate."))
    warmup_steps: int = field(default=0, metadata=_help("Linear warmup steps before the learning-rate decay."))
    lr_decay: LrDecay = field(default="quadratic", metadata=_help(
        "Learning rate after warmup: quadratic (decay to 0 at the last step, Anil et al. 2021) or none (the peak "
        "rate to the end: the last iterate weighs every step alike, as a black-box canary audit of a DP model wants)."))
    weight_decay: float = field(default=0.01, metadata=_help("Decoupled AdamW weight decay (Anil et al. use up to 1.0)."))
    clip_norm: float = field(default=1.0, metadata=_help("Per-example gradient L2 clip norm C."))
    clip_engine: ClipEngine = field(default="ghost", metadata=_help(
        "How the per-example clipped sum is computed; both give the same sum and guarantee. ghost: "
        "Gram-matrix norms and book-keeping, no per-example gradients (~1.1x a non-private step); "
        "vmap: per-example gradients by jax.vmap (~2.4x on CPU; the reference). Formerly --clipping."))
    noise_multiplier: float | None = field(default=None, metadata=_help(
        "Noise multiplier sigma (dp_accounting's, as privacy.json and `dpaudit account` state it): noise std on the "
        "summed gradient / C, one example's bound. With --target-epsilon too, that epsilon is a cap: training stops at it."))
    target_epsilon: float | None = field(default=None, metadata=_help(
        "Privacy budget; alone, the noise multiplier is calibrated so the whole run spends exactly this (PLD)."))
    delta: float | None = field(default=None, metadata=_help(
        "Delta of the (epsilon, delta) guarantee; default min(1e-5, 1/(10 N)) for N training examples "
        "(well below 1/N: releasing one random row verbatim already satisfies delta = 1/N). A delta >= 1/N is warned about. "
        "It includes the float noise sampler's tail figure (privacy.json noise_tail_delta); the accountant's delta is the rest."))
    accept_private_start: bool = field(default=False, metadata=_help(
        "Train from an --init-from dpaudit run that did not train on public data only (e.g. a non-private run on "
        "another copy of private rows): refused without this. With it, privacy.json's guarantee and every claim line "
        "say first that the epsilon does NOT cover what that start learned. A start trained on this run's own "
        "train.jsonl is refused always."))
    accept_noise_tail: bool = field(default=False, metadata=_help(
        "Train even when the noise sampler's tail figure (sum over steps of q P(Z > 11.596 - 1/sigma)) alone reaches "
        "--delta (a tiny noise multiplier): the stated delta is then --delta plus that figure, what holds. Without "
        "it such a run is refused."))
    non_private: bool = field(default=False, metadata=_help("Train without clipping or noise (the baseline; epsilon = inf)."))
    sampling: Sampling = field(default="poisson", metadata=_help(
        "poisson (what the accountant assumes) or shuffle (fixed-size batches: NO proven epsilon; privacy.json gives "
        "epsilon_if_poisson, what Poisson sampling would have cost)."))
    mask_prob: float = field(default=0.15, metadata=_help("Fraction of tokens masked for the MLM objective (80/10/10)."))
    eval_every: int = field(default=50, metadata=_help("Steps between MLM accuracy evaluations on heldout.jsonl."))
    eval_examples: int = field(default=256, metadata=_help("Heldout examples used per evaluation (0 = skip evaluation)."))
    checkpoint_every: int = field(default=50, metadata=_help("Steps between checkpoints (one is always written at the end)."))
    log_every: int = field(default=10, metadata=_help("Steps between host syncs for the progress bar and metrics.jsonl."))
    data_parallel: bool = field(default=True, metadata=_help("Shard each micro-step over all local devices."))
    noise_seed: int | None = field(default=None, metadata=_help(
        "Seed of the DP noise and the Poisson sampling, for tests and reproducible research only. Default: OS "
        "entropy (never --seed). With it, the guarantee holds only while this number stays secret; it is never "
        "written to a released file."))
    keep_checkpoints: bool = field(default=False, metadata=_help(
        "Keep checkpoints/ after a successful run (default: deleted; they hold the secret noise and sampling state)."))

    #: Fields that do not change what is trained (a rerun may differ in them).
    RUN_ONLY_FIELDS: ClassVar[tuple[str, ...]] = ("keep_checkpoints",)
    #: Former field names -> current ones. ``dpaudit train`` still takes the old options (hidden, with a
    #: deprecation warning) and --config keys; :meth:`upgrade_stored` renames them in a checkpoint's config.
    RENAMED_FIELDS: ClassVar[Mapping[str, str]] = {"micro_batch": "physical_batch", "clipping": "clip_engine"}
    #: Fields added since runs were first checkpointed, with the value an older checkpoint's run had.
    ADDED_FIELDS: ClassVar[Mapping[str, Any]] = {"init_from": None, "data_split": "train", "accept_noise_tail": False, "accept_private_start": False}

    def __post_init__(self) -> None:
        check_types(self)  # types and Literal choices first, whatever the source (TOML, checkpoint, caller)
        positive_ints = ("steps", "batch_size", "physical_batch", "max_length", "eval_every", "checkpoint_every", "log_every")
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer > 0, got {value!r}.")
        for name in ("warmup_steps", "eval_examples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"--{name.replace('_', '-')} must be an integer >= 0, got {value!r}.")
        if self.noise_seed is not None and (isinstance(self.noise_seed, bool) or not isinstance(self.noise_seed, int)
                                            or self.noise_seed < 0):
            raise ValueError(f"--noise-seed must be an integer >= 0, got {self.noise_seed!r}.")
        if self.dataset_size is not None and (isinstance(self.dataset_size, bool) or not isinstance(self.dataset_size, int)
                                              or self.dataset_size < 1):
            raise ValueError(f"--dataset-size must be an integer > 0, got {self.dataset_size!r}.")
        if self.max_length < 8:
            raise ValueError(f"--max-length must be >= 8, got {self.max_length}.")
        if self.max_length > MAX_POSITIONS:
            raise ValueError(f"--max-length must be <= {MAX_POSITIONS}, BERT's position table (max_position_embeddings), "
                             f"got {self.max_length}; attention memory grows with its square.")
        if self.max_predictions is not None and not 0 < self.max_predictions <= self.max_length:
            raise ValueError(f"--max-predictions must be in (0, max-length={self.max_length}], got {self.max_predictions}.")
        if self.init_from is not None and not self.init_from.strip():
            raise ValueError(f"--init-from must be a directory path, got {self.init_from!r}.")
        if self.vocab_size is not None and self.vocab_size < 128:
            raise ValueError(f"--vocab-size must be >= 128 (special tokens and the base alphabet), got {self.vocab_size}.")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"--learning-rate must be > 0, got {self.learning_rate}.")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"--weight-decay must be >= 0, got {self.weight_decay}.")
        if not (math.isfinite(self.clip_norm) and self.clip_norm > 0):
            raise ValueError(f"--clip-norm must be a finite number > 0, got {self.clip_norm}.")
        if not 0 < self.mask_prob < 1:
            raise ValueError(f"--mask-prob must be in (0, 1), got {self.mask_prob}.")
        if self.batch_schedule is not None:
            parse_batch_schedule(self.batch_schedule)
        if self.warmup_steps >= self.total_steps:
            raise ValueError(f"--warmup-steps must be < the {self.total_steps} training steps, got {self.warmup_steps}.")
        if self.noise_multiplier is not None and not (math.isfinite(self.noise_multiplier) and self.noise_multiplier > 0):
            raise ValueError(f"--noise-multiplier must be > 0 (use --non-private for no noise), got {self.noise_multiplier}.")
        if self.noise_multiplier is not None:  # the range every command shares (its float arithmetic holds there)
            check_noise_multiplier(self.noise_multiplier, no_noise="--non-private")
        if self.target_epsilon is not None and not (math.isfinite(self.target_epsilon) and self.target_epsilon > 0):
            raise ValueError(f"--target-epsilon must be > 0, got {self.target_epsilon}.")
        if self.delta is not None and not 0 < self.delta < 1:
            raise ValueError(f"--delta must be in (0, 1), got {self.delta}.")
        if self.non_private:
            given = [name for name in ("noise_multiplier", "target_epsilon", "delta") if getattr(self, name) is not None]
            if given:
                flags = ", ".join("--" + n.replace("_", "-") for n in given)
                raise ValueError(f"--non-private takes no {flags}: a non-private run has no (epsilon, delta) guarantee.")
        elif self.noise_multiplier is None and self.target_epsilon is None:
            raise ValueError("pass exactly one of --target-epsilon (calibrate the noise), --noise-multiplier or --non-private.")

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

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable field values with the secret ``noise_seed`` redacted, as every trainer's Config
        (:func:`~dpaudit.training.config_types.redacted_dict`): the manifest's config and the resume check. The seed
        itself is kept only in the checkpoints' secret noise state."""
        return redacted_dict(self)

    @classmethod
    def upgrade_stored(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """A config stored by an older dpaudit (a checkpoint's identity) in today's terms, so that a run
        started before a rename resumes: former field names (:attr:`RENAMED_FIELDS`) renamed, fields added since
        (:attr:`ADDED_FIELDS`) at the value that run had, and the
        ``noise_seed`` number older checkpoints stored replaced by its redaction, as :meth:`to_dict`
        writes it (a resume continues with the checkpoint's secret noise state, not with this field).
        A current config passes through unchanged."""
        from dpaudit.training.secret_rng import NoiseSource

        out = {cls.RENAMED_FIELDS.get(name, name): value for name, value in config.items()}
        for name, default in cls.ADDED_FIELDS.items():  # a run checkpointed before they existed had their default
            out.setdefault(name, default)
        seed = out.get("noise_seed")
        if isinstance(seed, int) and not isinstance(seed, bool):
            out["noise_seed"] = NoiseSource.redact(seed)
        return out

    def mismatches(self, other: dict[str, Any]) -> list[str]:
        """Names of fields whose value differs from ``other`` (a stored :meth:`to_dict`), except
        :attr:`RUN_ONLY_FIELDS` (a resume may change what happens after training)."""
        mine, theirs = self.to_dict(), self.upgrade_stored(other)
        names = sorted((set(mine) | set(theirs)) - set(self.RUN_ONLY_FIELDS))
        return [name for name in names if mine.get(name) != theirs.get(name)]
