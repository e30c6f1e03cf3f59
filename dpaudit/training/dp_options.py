"""The settings every DP trainer shares, declared once: :class:`DpOptions`, a frozen keyword-only dataclass
that each registered trainer's ``Config`` inherits, with the one validator of those settings.

Why one base: the options that set or qualify the guarantee (where the run starts and what it trains on, the
declared public N, the clip norm, the noise multiplier, the target epsilon, delta, the noise-tail and
private-start acceptances, the secret noise seed and the checkpoints that hold it) mean the same thing in every
trainer; declared in each trainer they drifted apart in wording, defaults and checks (three styles of range
check, three wordings of "a non-private run takes no --delta"). Here each has its help once and one check;
``dpaudit train`` generates the options from the fields (``dpaudit.cli.train``), the trainer's own fields first
and these last.

A trainer's Config subclasses :class:`DpOptions`, declares only its own fields, and calls
``super().__post_init__()`` in its ``__post_init__`` (after anything :attr:`DpOptions.private` needs, e.g. a
mode spelt two ways) before its own checks. It says how it runs without noise (:attr:`DpOptions.NO_NOISE`,
:attr:`DpOptions.private`) and may name more fields a non-private run refuses
(:attr:`DpOptions.PRIVATE_ONLY_FIELDS`). A field whose help genuinely differs per trainer (which model
directories ``--init-from`` takes, what ``--clip-norm`` clips) is redeclared in the trainer with a comment
saying why; ``tests/trainers/test_dp_options.py`` holds the list of those overrides and fails on any other.

Not here: ``non_private`` and ``sampling``. rgp is always private and the torch trainers always sample by
Poisson, so those options exist only where the trainer has them (``--non-private`` in jax-bert and edp-sgd,
``--sampling`` in jax-bert); the validator reads :attr:`DpOptions.private` instead of the field.
See docs/architecture.md, "Adding a trainer", and docs/trainers.md for each trainer's mechanism.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from dpaudit.training.config_types import (
    SECRET_FIELDS,
    check_int,
    check_noise_multiplier,
    check_real,
    check_types,
    option_name,
    redacted_dict,
)
from dpaudit.training.starting_point import DataSplit

__all__ = ["DpOptions", "help_text", "init_from_help"]


def help_text(text: str) -> dict[str, str]:
    """Field metadata the option generator reads as the option's help."""
    return {"help": text}


def init_from_help(models: str, *, more: str = "") -> str:
    """The help of ``--init-from``: what a trainer starts from (``models``: the model directories it reads, and
    what it takes from them) with the public-start rule every trainer shares; ``more`` follows the rule."""
    return (
        f"Start from this model instead of a random init: a dpaudit train run directory (its model/) or {models}. "
        "It must be public (trained on public data only) for the guarantee to mean what it says; a start trained "
        "on this run's train.jsonl is refused." + (f" {more}" if more else "")
    )


@dataclass(frozen=True, kw_only=True)
class DpOptions:
    """The options every DP trainer shares (start, data split, the mechanism's parameters, the secret seed), each
    with its help once, and their one validator (:meth:`__post_init__`)."""

    # -- what the run starts from and trains on
    init_from: str | None = field(
        default=None,
        metadata=help_text(
            init_from_help(
                "a Hugging Face model directory of a kind the trainer reads (safetensors, with its tokenizer.json)"
            )
        ),
    )
    data_split: DataSplit = field(
        default="train",
        metadata=help_text(
            "What to train on: train (train.jsonl, the private data) or public (public.jsonl: a public model to start "
            "private runs from, trained without noise where the trainer can; DP on public data protects nothing). "
            "Evaluation stays on heldout.jsonl."
        ),
    )
    accept_private_start: bool = field(
        default=False,
        metadata=help_text(
            "Train from an --init-from dpaudit run that did not train on public data only (e.g. a non-private run on "
            "another copy of private rows): refused without this. With it, privacy.json's guarantee and every claim line "
            "say first that the epsilon does NOT cover what that start learned. A start trained on this run's own "
            "train.jsonl is refused always."
        ),
    )
    # -- the mechanism: what sets the guarantee
    dataset_size: int | None = field(
        default=None,
        metadata=help_text(
            "Declared PUBLIC dataset size N: q = batch-size / N, the default delta and, for a trainer counting epochs, "
            "the steps per epoch ceil(N / batch-size) come from it, fixed in advance, and the real number of rows is not "
            "released. Default: the number of rows in train.jsonl, which is then treated as public (privacy.json states "
            "it and the replace-one epsilon beside the add/remove one)."
        ),
    )
    clip_norm: float = field(
        default=1.0,
        metadata=help_text(
            "Clip norm C: each example's gradient is clipped to L2 norm C, so one example moves the summed gradient by "
            "at most C (the step's sensitivity)."
        ),
    )
    noise_multiplier: float | None = field(
        default=None,
        metadata=help_text(
            "Noise multiplier sigma (dp_accounting's, as privacy.json and `dpaudit account` state it): noise std on the "
            "summed clipped gradient / the step's sensitivity, one example's bound on that sum (see --clip-norm); under a "
            "noise decay schedule, sigma_0, the first epoch's. With --target-epsilon too, that epsilon is a cap: training "
            "stops at it."
        ),
    )
    target_epsilon: float | None = field(
        default=None,
        metadata=help_text(
            "Privacy budget; alone, the noise multiplier is calibrated so the whole run (with any noise decay schedule) "
            "spends exactly this (PLD)."
        ),
    )
    delta: float | None = field(
        default=None,
        metadata=help_text(
            "Delta of the (epsilon, delta) guarantee; default min(1e-5, 1/(10 N)) for N training examples "
            "(well below 1/N: releasing one random row verbatim already satisfies delta = 1/N). A delta >= 1/N is warned "
            "about. It includes the float noise sampler's tail figure (privacy.json noise_tail_delta); the accountant's "
            "delta is the rest."
        ),
    )
    accept_noise_tail: bool = field(
        default=False,
        metadata=help_text(
            "Train even when the noise sampler's tail figure (sum over steps of q P(Z > z_max - 1/sigma), z_max the "
            "sampler's reach recorded in privacy.json: 11.596 for dpaudit's own trainers, 5.22 for JAX Privacy's "
            "float32 normal) alone reaches --delta (a tiny noise multiplier): the stated delta is then --delta plus "
            "that figure, what holds. Without it such a run is refused."
        ),
    )
    # -- the secret randomness and the files that hold it
    noise_seed: int | None = field(
        default=None,
        metadata=help_text(
            "Seed of the DP noise and the batch sampling, for tests and reproducible research only. Default: OS "
            "entropy (never --seed). With it, the guarantee holds only while this number stays secret; it is never "
            "written to a released file."
        ),
    )
    keep_checkpoints: bool = field(
        default=False,
        metadata=help_text(
            "Keep checkpoints/ after a finished run (default: deleted; they hold the secret noise and sampling state, "
            "private to the data owner)."
        ),
    )

    #: Fields that do not change what is trained (a rerun may differ in them; the run skeleton's ``run_only``).
    RUN_ONLY_FIELDS: ClassVar[tuple[str, ...]] = ("keep_checkpoints",)
    #: Former field names -> current ones. ``dpaudit train`` still takes the old options (hidden, with a
    #: deprecation warning) and --config keys; :meth:`upgrade_stored` renames them in a checkpoint's config.
    RENAMED_FIELDS: ClassVar[Mapping[str, str]] = {}
    #: Fields added since runs were first checkpointed, with the value an older checkpoint's run had (a trainer
    #: adds its own: ``{**DpOptions.ADDED_FIELDS, ...}``).
    ADDED_FIELDS: ClassVar[Mapping[str, Any]] = {
        "init_from": None,
        "data_split": "train",
        "accept_noise_tail": False,
        "accept_private_start": False,
    }
    #: Fields a run without noise refuses when set (differ from their default): it has no (epsilon, delta) guarantee.
    PRIVATE_ONLY_FIELDS: ClassVar[tuple[str, ...]] = ("noise_multiplier", "target_epsilon", "delta")
    #: How a user asks this trainer for a run without noise, as the refusals say it ("for no noise use ...").
    NO_NOISE: ClassVar[str] = "--non-private"

    @property
    def private(self) -> bool:
        """Whether the run clips and noises; a trainer with a non-private mode overrides it."""
        return True

    def private_run_words(self) -> str:
        """The run as the user asked for it, in the refusal of a private run without a noise setting."""
        return "a private run"

    def __post_init__(self) -> None:
        """Types first (values from a --config TOML, a checkpoint or a caller are not typed by click), then the
        ranges of the shared fields, then their combinations. One-line ``ValueError`` s naming the option."""
        check_types(self)
        if self.init_from is not None and not self.init_from.strip():
            raise ValueError(f"--init-from must be a directory path, got {self.init_from!r}.")
        if self.dataset_size is not None:
            check_int("dataset_size", self.dataset_size, 1)
        if self.noise_seed is not None:
            check_int("noise_seed", self.noise_seed, 0)
        check_real("clip_norm", self.clip_norm, low=0.0, low_open=True)
        if self.noise_multiplier is not None:  # the range every command shares (its float arithmetic holds there)
            check_noise_multiplier(self.noise_multiplier, no_noise=self.NO_NOISE)
        if self.target_epsilon is not None and not (math.isfinite(self.target_epsilon) and self.target_epsilon > 0):
            raise ValueError(f"--target-epsilon must be > 0, got {self.target_epsilon}.")
        if self.delta is not None and not 0 < self.delta < 1:
            raise ValueError(f"--delta must be in (0, 1), got {self.delta}.")
        self._check_noise_setting()

    def _check_noise_setting(self) -> None:
        """A run without noise sets none of :attr:`PRIVATE_ONLY_FIELDS`; a private run has a noise multiplier or a
        target epsilon to calibrate one (both: the target is a cap)."""
        if not self.private:
            defaults = {f.name: f.default for f in fields(self)}
            given = [name for name in self.PRIVATE_ONLY_FIELDS if getattr(self, name) != defaults[name]]
            if given:
                flags = ", ".join(option_name(name) for name in given)
                raise ValueError(
                    f"{self.NO_NOISE} takes no {flags}: a non-private run has no (epsilon, delta) guarantee."
                )
        elif self.noise_multiplier is None and self.target_epsilon is None:
            raise ValueError(
                f"{self.private_run_words()} needs --target-epsilon (calibrate the noise) or "
                f"--noise-multiplier (for no noise use {self.NO_NOISE})."
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable field values with the secret ``noise_seed`` redacted
        (:func:`~dpaudit.training.config_types.redacted_dict`): the manifest's config and the resume check. The seed
        itself is kept only in the checkpoints' secret noise state."""
        return redacted_dict(self)

    @classmethod
    def upgrade_stored(cls, config: Mapping[str, Any]) -> dict[str, Any]:
        """A config stored by an older dpaudit (a checkpoint's identity) in today's terms, so that a run started
        before a rename resumes: former field names (:attr:`RENAMED_FIELDS`) renamed, fields added since
        (:attr:`ADDED_FIELDS`) at the value that run had, and a secret seed that older checkpoints stored as a
        number replaced by its redaction, as :meth:`to_dict` writes it (a resume continues with the checkpoint's
        secret noise state, not with this field). A current config passes through unchanged."""
        from dpaudit.training.noise_source import NoiseSource  # numpy only; imported here to keep this module light

        out = {cls.RENAMED_FIELDS.get(name, name): value for name, value in config.items()}
        for name, default in cls.ADDED_FIELDS.items():  # a run checkpointed before they existed had their default
            out.setdefault(name, default)
        for name in SECRET_FIELDS:
            value = out.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                out[name] = NoiseSource.redact(value)
        return out

    def mismatches(self, other: Mapping[str, Any]) -> list[str]:
        """Names of fields whose value differs from ``other`` (a stored :meth:`to_dict`), except
        :attr:`RUN_ONLY_FIELDS` (a resume may change what happens after training)."""
        mine, theirs = self.to_dict(), self.upgrade_stored(other)
        names = sorted((set(mine) | set(theirs)) - set(self.RUN_ONLY_FIELDS))
        return [name for name in names if mine.get(name) != theirs.get(name)]
