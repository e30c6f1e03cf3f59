"""The options attacks share: frozen keyword-only Configs, validated on construction, that attacks inherit.

Each attack declares its own ``Config`` (:class:`~dpaudit.attacks.base.BaseAttack`): the fields of the options it
alone reads (LiRA's variance fit, min-k's fraction) added to the mixins below for the options it shares with other
attacks, so that a shared option is declared once and means one thing: :class:`ShadowOptions` for the attacks that
compare the target with models trained like it, :class:`MembershipOptions` for those that score the membership tasks,
:class:`SecretOptions` for those that score the canaries' secrets. :class:`RunOptions` (with :class:`ClaimOptions`)
holds the options of every run, whatever the attacks.

``dpaudit attack``'s options are generated from these fields (:func:`dpaudit.cli.params.config_options`), as
``dpaudit train``'s are from a trainer's Config: a field's metadata (:func:`option`) gives its help and how the
command line reads it, and :meth:`~AttackConfig.__post_init__` checks every value whatever its source (the command
line, the Python API): a wrong type in one line (:func:`dpaudit.training.config_types.check_types`), then each
class's own rules, in the ``--option must be ..., got x.`` style. Importing this module imports neither numpy nor a
framework: ``dpaudit attack --help`` reads it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Literal

from dpaudit.training.config_types import check_seed, check_types

__all__ = [
    "AttackConfig",
    "ClaimOptions",
    "MembershipOptions",
    "NoOptions",
    "ReferenceOptions",
    "RunOptions",
    "SecretOptions",
    "ShadowOptions",
    "option",
]


def option(help: str, **cli: Any) -> dict[str, Any]:  # noqa: A002 - the word every Config's metadata uses
    """A Config field's metadata: its help and how ``dpaudit attack`` reads it (the keys
    :func:`dpaudit.cli.params.config_options` knows: ``metavar``, ``flag`` (the option's spelling when it is not
    ``--field-name``), ``min``/``max``/``min_open``/``max_open`` (a range the command line checks as it reads the
    value), ``path``/``file`` (a file-system path, given to the Config as a string), ``seed``, ``hidden``, and
    ``python_only`` (a field of the Python API with no option)."""
    return {"help": help, **cli}


@dataclass(frozen=True, kw_only=True)
class AttackConfig:
    """The root of every attack Config: paths given as ``os.PathLike`` become strings, then every field is type
    checked. A subclass's ``__post_init__`` calls ``super().__post_init__()`` first, then checks its own fields."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if not (f.metadata.get("path") or f.metadata.get("file")):
                continue
            value = getattr(self, f.name)
            if isinstance(value, os.PathLike):
                object.__setattr__(self, f.name, os.fspath(value))
            elif isinstance(value, (list, tuple)):
                object.__setattr__(
                    self, f.name, tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in value)
                )
        check_types(self)


@dataclass(frozen=True, kw_only=True)
class NoOptions(AttackConfig):
    """No options of its own."""


@dataclass(frozen=True, kw_only=True)
class ClaimOptions(AttackConfig):
    """The privacy claim of a model trained elsewhere.

    Read by :func:`dpaudit.attacks.claim.options_claim` (``options.claimed_epsilon`` and the others) for every
    attack's result, so they are options of every run.
    """

    claimed_epsilon: float | None = field(
        default=None,
        metadata=option(
            "The privacy claim of a model trained elsewhere (no privacy.json): epsilon, tested as given.",
            metavar="E",
            min=0,
            min_open=True,
        ),
    )
    claimed_delta: float | None = field(
        default=None,
        metadata=option(
            "The delta of the stated claim (--claimed-epsilon or --claimed-from-opacus).",
            metavar="D",
            min=0,
            max=1,
            min_open=True,
            max_open=True,
        ),
    )
    claimed_from_opacus: str | None = field(
        default=None,
        metadata=option(
            "The claim of a model trained with Opacus: its accountant's state_dict() saved as JSON (or with torch.save); "
            "its history of (noise multiplier, sample rate, steps) is accounted here (PLD) at --claimed-delta.",
            metavar="FILE",
            file=True,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.claimed_from_opacus is not None:
            if self.claimed_epsilon is not None:
                raise ValueError(
                    "--claimed-from-opacus states the claim through its accountant's history; remove "
                    "--claimed-epsilon (keep --claimed-delta: the delta to read epsilon at)."
                )
            if self.claimed_delta is None:
                raise ValueError(
                    "--claimed-from-opacus needs --claimed-delta D: the delta at which the history's "
                    "epsilon is read (Opacus's get_epsilon(delta))."
                )
        elif (self.claimed_epsilon is None) != (self.claimed_delta is None):
            raise ValueError(
                "--claimed-epsilon and --claimed-delta go together: state the whole (epsilon, delta) claim."
            )
        if self.claimed_epsilon is not None and not (self.claimed_epsilon > 0 and self.claimed_epsilon < float("inf")):
            raise ValueError(f"--claimed-epsilon must be a finite number > 0, got {self.claimed_epsilon}.")
        if self.claimed_delta is not None and not 0 < self.claimed_delta < 1:
            raise ValueError(f"--claimed-delta must be in (0, 1), got {self.claimed_delta}.")


@dataclass(frozen=True, kw_only=True)
class RunOptions(ClaimOptions):
    """Options of every run.

    Attributes:
        batch_size: examples per forward pass.
        seed: seeds the bootstrap (and any other randomness of the statistics).
        level: confidence level of every interval (Python API).
        fprs: FPRs asked for explicitly (refused when the non-members cannot measure them); None: 0.1% and 1%, warned.
    """

    batch_size: int = field(default=32, metadata=option("Canaries per forward pass.", min=1))
    seed: int = field(default=0, metadata=option("Seed of the bootstrap intervals.", seed=True))
    level: float = field(default=0.95, metadata=option("Confidence level of every interval.", python_only=True))
    fprs: tuple[float, ...] | None = field(
        default=None,
        metadata=option(
            "Report TPR at this FPR (repeatable); refused if heldout.jsonl has too few non-members to measure it. "
            "Default: 0.1% and 1%, with a warning when unmeasurable.",
            flag="--fpr",
            min=0,
            max=1,
            min_open=True,
            max_open=True,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}.")
        check_seed(self.seed)
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1), got {self.level}.")
        if self.fprs is not None and not all(0 < f < 1 for f in self.fprs):
            raise ValueError(f"--fpr values must be in (0, 1), got {self.fprs}.")


@dataclass(frozen=True, kw_only=True)
class SecretOptions(AttackConfig):
    """How the canaries' secrets are scored.

    Attributes:
        reveal: partial reveal: the first ``reveal`` secret tokens are shown, the rest masked.
        tolerance: score difference below which a candidate ties the secret (exposure ranks; Python API).
    """

    reveal: int = field(
        default=0, metadata=option("Partial reveal: show the first K secret tokens, mask and rank the rest.", min=0)
    )
    tolerance: float = field(
        default=1e-9,
        metadata=option("Score difference below which a candidate ties the secret (exposure ranks).", python_only=True),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reveal < 0:
            raise ValueError(f"reveal must be >= 0, got {self.reveal}.")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance must be in [0, 1), got {self.tolerance}.")


@dataclass(frozen=True, kw_only=True)
class MembershipOptions(AttackConfig):
    """Membership inference.

    Attributes:
        mia_examples: at most this many members (and as many non-members) in the examples task (None: all).
        blind_baseline: run the blind baseline (:mod:`dpaudit.attacks.blind`) beside any membership attack.
        mia_sample_seed: seeds the random draw of the examples task's members and non-members (None: ``seed``).
        near_duplicates, near_duplicate_threshold: what the examples task does with member/non-member pairs of near
            duplicates (:mod:`dpaudit.attacks.near_duplicates`), and from what similarity a pair is one.
    """

    mia_examples: int | None = field(
        default=None,
        metadata=option("At most this many members (and as many non-members) in the examples membership task.", min=2),
    )
    blind_baseline: bool = field(
        default=True,
        metadata=option(
            "Beside every membership attack, a classifier that never looks at the model (word and character n-grams, "
            "length, label; Das et al. 2024), cross-fitted: when an attack does not beat it, the membership signal may be "
            "distribution shift, not memorization."
        ),
    )

    mia_sample_seed: int | None = field(
        default=None,
        metadata=option(
            "Seed of the random draw of the examples task's members and non-members (equal numbers of each) "
            "[default: --seed]; rerun with other seeds to see how much the numbers move with the draw.",
            seed=True,
        ),
    )
    near_duplicates: Literal["exclude", "keep"] = field(
        default="exclude",
        metadata=option(
            "Member/non-member pairs of the examples task that are near duplicates (--near-duplicate-threshold): "
            "exclude leaves both ends out, keep keeps them; either way they are counted and stated. Within each side, "
            "texts equal after normalization are one candidate."
        ),
    )
    near_duplicate_threshold: float = field(
        default=0.8,
        metadata=option(
            "Jaccard similarity of two texts' character 5-grams (after normalization: case, punctuation, spaces) "
            "from which they are near duplicates; 1 = only texts equal after normalization.",
            min=0,
            max=1,
            min_open=True,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mia_examples is not None and self.mia_examples < 2:
            raise ValueError(f"--mia-examples must be >= 2, got {self.mia_examples}.")
        if self.mia_sample_seed is not None:
            check_seed(self.mia_sample_seed)
        if not 0 < self.near_duplicate_threshold <= 1:
            raise ValueError(f"--near-duplicate-threshold must be in (0, 1], got {self.near_duplicate_threshold}.")


@dataclass(frozen=True, kw_only=True)
class ReferenceOptions(AttackConfig):
    """The reference model.

    Attributes:
        reference_model: a model directory with the target's tokenizer that the attacks comparing the target with one
            reference model use: the base attacks (:mod:`dpaudit.attacks.base_mia`; default: the target's public start,
            ``privacy.json``'s ``init_from``) and ref (default: one trained like the target on ``public.jsonl``).
    """

    reference_model: str | None = field(
        default=None,
        metadata=option(
            "A reference model with the target's tokenizer: the base of base-ratio, error-zone and min-k++-base "
            "[default: the target's public start, privacy.json's init_from] and the reference of ref [default: one "
            "trained like the target on public.jsonl].",
            path=True,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class ShadowOptions(MembershipOptions):
    """Shadow and reference models.

    The models an attack compares the target with (:mod:`dpaudit.attacks.shadow_models`): trained like the target
    (its trainer and recipe, or ``--shadow-trainer``/``--shadow-config``), or given (``--shadow-dirs``).

    Attributes:
        shadow_models: shadow / reference models for the shadow, LiRA and RMIA attacks.
        max_shadow_minutes: stop starting new shadow models after this many minutes (None: no limit).
        shadow_cache: the shadow-model cache directory (the attack stage sets its default: ``$DPAUDIT_CACHE/shadows``,
            else ``<out>-shadows``, else a temporary folder removed afterwards).
        workers: shadow/reference models trained at once (:func:`dpaudit.fleet.fleet.run_fleet`; None: one at a
            time in this process).
        ray_address: a Ray cluster to train them on (None: a local instance when ``workers`` asks for one).
        shadow_trainer, shadow_config: the registered trainer and a JSON file of its Config fields, for shadows of a
            model trained elsewhere (no dpaudit manifest), or to replace the recipe of the target's manifest.
        shadow_dirs: user-supplied shadow models (directories holding ``members.json``, or text files listing
            them); no shadow is trained.
        shadow_overrides: Config fields replaced in every shadow/reference model (Python API only: e.g. fewer steps
            in tests; the result records them, since shadows then differ from the target's recipe).
    """

    shadow_models: int = field(
        default=4,
        metadata=option(
            "Shadow/reference models for the shadow, lira (>= 2) and rmia attacks. Each trains like the target (its "
            "trainer and recipe, as many rows and optimizer steps): about the target's own training time each. shadow and "
            "rmia share theirs, lira has its own, ref trains 1: --attacks shadow,lira,rmia,ref --shadow-models 8 trains "
            "8 + 8 + 1 = 17 models (cached: a rerun trains none). The phase, the count and the estimated cost are printed "
            "before training starts. 4 by default: with few shadows LiRA fits one shared variance, which Carlini et al. "
            "2022 find works from a handful of shadows; per-example variances need about 64.",
            min=1,
        ),
    )
    max_shadow_minutes: float | None = field(
        default=None,
        metadata=option(
            "Stop starting new shadow models after this many minutes (the ones trained are used).", min=0, min_open=True
        ),
    )
    shadow_cache: str | None = field(
        default=None,
        metadata=option(
            "Where shadow and reference models are kept (they train on private rows: created mode 0700, their data "
            "folders reference the rows, never copy them) [default: $DPAUDIT_CACHE/shadows when set, else OUT-shadows "
            "beside --out].",
            path=True,
        ),
    )
    workers: int | None = field(
        default=None,
        metadata=option(
            "Shadow/reference models trained at once (each in its own process: Ray when installed, else a process pool). "
            "Default: one at a time in this process.",
            min=1,
        ),
    )
    ray_address: str | None = field(
        default=None,
        metadata=option(
            "Train the shadow/reference models on this Ray cluster (e.g. ray://host:10001; its nodes must see "
            "--shadow-cache and have dpaudit installed).",
            metavar="ADDR",
        ),
    )
    shadow_trainer: str | None = field(
        default=None,
        metadata=option(
            "The registered dpaudit trainer that trains shadow/reference models of a model trained elsewhere (a Hugging "
            "Face directory without a dpaudit manifest), with --shadow-config's recipe.",
            metavar="NAME",
        ),
    )
    shadow_config: str | None = field(
        default=None,
        metadata=option(
            "A JSON object of --shadow-trainer's Config fields (the target's recipe, e.g. "
            '{"mode": "sgd", "epochs": 3, "batch_size": 32}); shadows train on as many rows as train.jsonl.',
            metavar="FILE.json",
            file=True,
        ),
    )
    shadow_dirs: tuple[str, ...] | None = field(
        default=None,
        metadata=option(
            "A shadow model trained by you (repeatable; or a text file listing directories, one per line): a model "
            "directory with the target's tokenizer holding members.json, a JSON list of the texts it trained on (or "
            '"sha256:<hex>" of each text\'s UTF-8). No shadow is trained; lira needs >= 2.',
            metavar="DIR",
            path=True,
        ),
    )
    shadow_overrides: dict | None = field(
        default=None, metadata=option("Config fields replaced in every shadow and reference model.", python_only=True)
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.shadow_models < 1:
            raise ValueError(f"--shadow-models must be >= 1, got {self.shadow_models}.")
        if self.max_shadow_minutes is not None and not self.max_shadow_minutes > 0:
            raise ValueError(f"--max-shadow-minutes must be > 0, got {self.max_shadow_minutes}.")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}.")
        if self.shadow_config is not None and self.shadow_trainer is None:
            raise ValueError("--shadow-config needs --shadow-trainer NAME (the registered trainer the config is for).")
