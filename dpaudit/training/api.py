"""The trainer plug-in contract and the entry-point registry that finds trainers.

A trainer is any object with a ``name``, a frozen keyword-only ``Config`` dataclass (validated in
``__post_init__``) and ``train(data_dir, out_dir, config, *, seed) -> TrainResult``. Trainers are
registered under the ``dpaudit.trainers`` entry-point group (pyproject ``[project.entry-points]``),
so third parties plug in without touching dpaudit, and ``dpaudit`` itself never imports a trainer
module (and its framework) until that trainer is asked for.

Optionally, a trainer whose run spans several processes defines ``writes_run_dir() -> bool``: True only
in the process that writes the run directory (see :func:`writes_run_dir`); that process alone takes the
run-directory lock (:func:`dpaudit.files.run_dirs.run_dir_lock`) around ``train``.

A trainer need not write its own run: :mod:`dpaudit.training` holds the one run skeleton (run
directory, privacy plan and ledger, secret Poisson sampling, loop, checkpoints, metrics and
``privacy.json``), and a trainer supplies only its :class:`dpaudit.training.TrainerPlugin` pieces
(model init, a clipped-sum step that carries its sensitivity, save/restore, export, its words for
``privacy.json``). The shipped trainers expose that class as ``Plugin`` (the contract suite checks it).

Config fields become command-line options of ``dpaudit train`` automatically: a field's
``metadata={"help": ...}`` is its help text and its type annotation (int, float, str, bool, or an
``Optional`` of those) its click type.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

from dpaudit.common.errors import UserInputError

ENTRY_POINT_GROUP = "dpaudit.trainers"


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    """What a finished training run reports back (the run directory holds everything else).

    Attributes:
        out_dir: the train run directory.
        steps: optimizer steps taken in total (across resumes).
        epsilon: the accountant's epsilon for what actually ran, or ``None`` when non-private.
        delta: the delta that epsilon is stated at, or ``None`` when non-private.
        final_loss: training loss at the last step.
        summary: small, JSON-serializable extra facts (examples/s, resumed-from step, ...).
    """

    out_dir: Path
    steps: int
    epsilon: float | None
    delta: float | None
    final_loss: float | None = None
    summary: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Trainer(Protocol):
    """What ``dpaudit train`` needs from a trainer plug-in."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def train(self, data_dir: Path, out_dir: Path, config: Any, *, seed: int) -> TrainResult:
        """Train on an inject run directory and write a train run directory (the run-directory contract)."""
        ...

    def tiny_config(self, **overrides: Any) -> Any:
        """The smallest private Config that trains in seconds on a tiny inject directory.

        The contract suite (``tests/test_trainer_contract.py``) trains every registered trainer
        with it; ``overrides`` replace fields (e.g. ``non_private=True``, ``noise_seed=1``).
        """
        ...


class SkeletonTrainer(Trainer, Protocol):
    """A trainer that runs on the core's run skeleton and names its :class:`dpaudit.training.TrainerPlugin` class
    ``Plugin`` (every shipped trainer; a class attribute or a property): what the white-box audit builds, one
    plug-in per run. Not part of :class:`Trainer`, which a trainer that writes its own run follows."""

    @property
    def Plugin(self) -> type:
        """The plug-in class: ``Plugin(data_dir, out_dir, config, seed=seed)``."""
        ...


def plugin_class(trainer: Trainer) -> type:
    """``trainer.Plugin``, of a trainer that runs on the skeleton (:class:`SkeletonTrainer`); a trainer without
    one raises AttributeError."""
    return cast(SkeletonTrainer, trainer).Plugin


def writes_run_dir(trainer: Any) -> bool:
    """Whether this process writes ``trainer``'s run directory (and so holds its lock).

    A trainer without a ``writes_run_dir`` method runs in one process, which writes: True.
    """
    method = getattr(trainer, "writes_run_dir", None)
    return True if method is None else bool(method())


def available_trainers() -> dict[str, EntryPoint]:
    """Registered trainers by name, without importing any of them."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_trainer(name: str) -> Trainer:
    """Import and instantiate the trainer registered as ``name``.

    Raises:
        UserInputError: if no trainer of that name is registered, listing the ones that are.
        MissingExtraError: its framework is not installed (the extra it needs and the pip command that installs it,
            :mod:`dpaudit.common.extras`).
    """
    registry = available_trainers()
    if name not in registry:
        known = ", ".join(sorted(registry)) or "none (is dpaudit installed with `pip install -e .`?)"
        raise UserInputError(f"--trainer {name!r} is not a registered trainer; choose one of: {known}.")
    from dpaudit.common.extras import (
        MissingExtraError,
        extra_of_module,
        missing_extra_message,
        require_extras,
        trainer_extras,
    )

    require_extras(f"--trainer {name}", *trainer_extras(name))  # before the import: one line, only its extra
    try:
        factory = registry[name].load()
    except ImportError as err:
        extra = extra_of_module(getattr(err, "name", None))
        if extra is not None and err.name is not None:  # (an extra is found only for a named module)
            raise MissingExtraError(missing_extra_message(f"--trainer {name}", [extra], [err.name])) from None
        raise UserInputError(
            f"--trainer {name}: cannot import its framework ({err}); install the package it needs."
        ) from None
    trainer = factory() if isinstance(factory, type) else factory
    if not isinstance(trainer, Trainer) or not dataclasses.is_dataclass(trainer.Config):
        raise UserInputError(
            f"--trainer {name}: entry point {registry[name].value} does not follow the Trainer protocol."
        )
    return trainer
