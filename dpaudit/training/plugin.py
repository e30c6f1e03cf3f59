"""The plug-in surface of the run skeleton: what a trainer writes, and nothing else.

The skeleton (:class:`dpaudit.training.skeleton.RunSkeleton`) owns the run: the run directory's
lifecycle, the privacy plan and ledger, the secret Poisson sampling, the step loop with its budget
stop, checkpoints, ``metrics.jsonl`` and the one ``privacy.json`` builder. A trainer supplies:

1. its inputs (:meth:`TrainerPlugin.load_data`) and settings (:meth:`TrainerPlugin.settings`);
2. model init (:meth:`TrainerPlugin.init_model`);
3. a clipped-sum step that carries its own sensitivity (:meth:`TrainerPlugin.make_step` returns a
   :class:`ClippedStep`, like jax_privacy's ``BoundedSensitivityCallable``: the noise it adds is
   sigma x ``step.sensitivity``, and the plan and the record read the sensitivity from the step;
   nobody recomputes it), best written on :class:`ClippedSumStep`, which holds the three figures and
   what they are for a non-private run;
4. save / restore of its state (:meth:`TrainerPlugin.save`, :meth:`TrainerPlugin.restore`);
5. export of ``model/`` (:meth:`TrainerPlugin.export`);
6. its words and facts for ``privacy.json`` (:meth:`TrainerPlugin.record_parts`).

Everything else has a default here (one process, no evaluation, step-keyed secret Poisson
sampling). A third-party trainer subclasses :class:`TrainerPlugin` and wraps it in a registered
trainer whose ``train`` runs ``RunSkeleton(plugin, out_dir).execute()``
(``tests/test_trainer_contract.py`` trains a numpy linear regression written that way).
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dpaudit.training.noise_source import NoiseSource
from dpaudit.training.privacy_plan import PrivacyPlan
from dpaudit.training.record import RecordParts
from dpaudit.training.sampling import Sampler, StepKeyedPoisson
from dpaudit.training.starting_point import StartingPoint

__all__ = ["ClippedStep", "ClippedSumStep", "RunData", "RunSettings", "TrainerPlugin"]

#: The secret seed's stream of the default sampler (the torch trainers' since before the skeleton).
SAMPLING_STREAM = 1


@runtime_checkable
class ClippedStep(Protocol):
    """One training step whose noised sum has a known sensitivity.

    ``clip_norm`` is C (None without clipping), ``sensitivity_factor`` how many C one example can move
    the clipped sum by (1 per-example clipping, 2 micro-batch clipping), ``sensitivity`` their product:
    the step adds Gaussian noise of std ``sigma x sensitivity``. Calling it runs step ``step`` on the
    batch ``indices`` with noise multiplier ``sigma`` (0 when non-private), divides by the PUBLIC
    ``expected_batch`` size and applies the update; it returns a telemetry handle that
    :meth:`TrainerPlugin.fetch` turns into metric rows (no host sync in between).
    """

    clip_norm: float | None
    sensitivity_factor: float
    sensitivity: float | None  # clip_norm x sensitivity_factor; None without clipping (non-private)

    def __call__(self, step: int, indices: np.ndarray, sigma: float, expected_batch: float) -> Any: ...


class ClippedSumStep(abc.ABC):
    """The base of every trainer's :class:`ClippedStep`: it owns ``clip_norm``, ``sensitivity_factor`` and
    ``sensitivity``, so that the trainers cannot disagree on them; a trainer's step passes what its clipping
    function reports and writes only :meth:`__call__`.

    A private step is built from its clipper's clip norm C and factor (how many C one example moves the clipped
    sum by: 1 per-example clipping, 2 micro-batch clipping) and, when the clipper states one, its sensitivity,
    which must be their product (a clipper and a step that disagree would noise one figure and record another).

    A NON-PRIVATE step (``clip_norm=None``: nothing is clipped) has ``sensitivity`` None, not 0: one example can
    move an unclipped sum by any amount, so there is no bound to state; 0 would claim the opposite, that no
    example changes the update. Its ``sensitivity_factor`` is 1 so the plan's arithmetic is neutral: a non-private
    run accounts nothing (no ledger, no noise: sigma is 0), and its ``privacy.json`` states no clip norm,
    sensitivity or epsilon.
    """

    clip_norm: float | None
    sensitivity_factor: float
    sensitivity: float | None

    def __init__(
        self, *, clip_norm: float | None, sensitivity_factor: float = 1.0, sensitivity: float | None = None
    ) -> None:
        """Args:
            clip_norm: C, or None for a step that clips nothing (non-private).
            sensitivity_factor: clip norms one example can move the clipped sum by (>= 1).
            sensitivity: the clipper's own figure, checked against ``sensitivity_factor * C`` (default: that).

        Raises:
            ValueError: a clip norm or factor out of range, a sensitivity that is not their product, or a
                sensitivity without clipping (a trainer bug, not a user error).
        """
        if clip_norm is None:
            if sensitivity is not None:
                raise ValueError(f"a step without clipping has no sensitivity to state, got {sensitivity!r}.")
            self.clip_norm, self.sensitivity_factor, self.sensitivity = None, 1.0, None
            return
        norm, factor = float(clip_norm), float(sensitivity_factor)
        if not (math.isfinite(norm) and norm > 0):
            raise ValueError(f"clip_norm must be a finite number > 0, got {clip_norm!r}.")
        if not (math.isfinite(factor) and factor >= 1):
            raise ValueError(f"sensitivity_factor must be a finite number >= 1, got {sensitivity_factor!r}.")
        product = factor * norm
        if sensitivity is not None and not math.isclose(float(sensitivity), product, rel_tol=1e-12):
            raise ValueError(
                f"the clipper's sensitivity {sensitivity!r} is not sensitivity_factor x clip_norm = "
                f"{factor:g} x {norm:g}."
            )
        self.clip_norm, self.sensitivity_factor = norm, factor
        self.sensitivity = float(sensitivity) if sensitivity is not None else product

    @property
    def private(self) -> bool:
        """Whether the step clips (and so has a sensitivity to noise to)."""
        return self.clip_norm is not None

    @abc.abstractmethod
    def __call__(self, step: int, indices: np.ndarray, sigma: float, expected_batch: float) -> Any:
        """Run step ``step`` on the batch ``indices`` with noise multiplier ``sigma`` (0 when non-private), divide
        by the public ``expected_batch`` and update; return a telemetry handle (:meth:`TrainerPlugin.fetch`)."""


@dataclass(frozen=True, kw_only=True)
class RunData:
    """The verified inputs: training rows N, sha256 of each input file (``inputs``: the inject files, and the
    start's weights when there is one), the identity a checkpoint is compared with, the canary frequencies of
    the inject manifest (none when training on the public split), the inject split trained on (``split``:
    ``"train"`` or ``"public"``) and the checked ``--init-from`` start (``start``; the skeleton refuses one
    trained on this run's private data, :func:`dpaudit.training.starting_point.refuse_private_start`)."""

    size: int
    inputs: Mapping[str, str]
    identity: Any
    frequencies: Sequence[int] = ()
    split: str = "train"
    start: StartingPoint | None = None


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What the skeleton reads of a trainer's config.

    ``config``: the public config (the manifest's, secret noise seed redacted); ``identity_config``:
    what a checkpoint must match to resume (default ``config``); ``run_only``: fields a rerun may
    change (what happens after training); ``eval_every``: evaluate (and log epsilon) every so many
    steps and at the end; ``checkpoint_at_eval``: also checkpoint there; ``plan``: keyword arguments of
    :func:`dpaudit.training.privacy_plan.plan_privacy` but ``dataset_size`` and ``sensitivity_factor``
    (stages, noise_multiplier, target_epsilon, delta, non_private, declared_size, ...); ``ledger``:
    those of :func:`dpaudit.training.privacy_plan.new_ledger` (``sampling``, ``privacy_unit``).
    """

    config: Mapping[str, Any]
    identity_config: Mapping[str, Any] | None = None
    run_only: Sequence[str] = ("keep_checkpoints",)
    noise_seed: int | None = None
    keep_checkpoints: bool = False
    plan: Mapping[str, Any] = field(default_factory=dict)
    ledger: Mapping[str, Any] = field(default_factory=dict)
    log_every: int = 10
    checkpoint_every: int = 1000
    eval_every: int | None = None
    checkpoint_at_eval: bool = False
    progress_label: str = ""


class TrainerPlugin(abc.ABC):
    """A trainer's pieces; the skeleton calls them in this order: start, load_data, settings, (read_state,
    check_resume), share_source, init_model, make_step, make_sampler, (restore), begin, then step after
    step with fetch / evaluate / save, and at the end export and record_parts."""

    #: The registered trainer name (run directories, checkpoints, privacy.json).
    name: str = ""
    #: The public --seed of the run.
    seed: int = 0

    # -- required ---------------------------------------------------------------------------

    @abc.abstractmethod
    def settings(self) -> RunSettings:
        """The run's settings (called once the inputs are read: a plan may depend on N)."""

    @abc.abstractmethod
    def load_data(self) -> RunData:
        """Read and verify the inputs (before anything is written)."""

    @abc.abstractmethod
    def init_model(self, resume_state: Mapping[str, Any] | None) -> None:
        """Build the model (and optimizer) from the public seed; ``resume_state`` is the checkpoint's state."""

    @abc.abstractmethod
    def make_step(self, dataset_size: int, resume_state: Mapping[str, Any] | None) -> ClippedStep:
        """The clipped-sum step; it carries its sensitivity (called before the plan, which reads it)."""

    @abc.abstractmethod
    def save(self, directory: Path, step: int, state: Mapping[str, Any]) -> None:
        """Write a checkpoint of step ``step`` (params, optimizer, ``state`` as JSON) into ``directory``, atomically."""

    @abc.abstractmethod
    def read_state(self, path: Path) -> dict[str, Any]:
        """The JSON state a checkpoint holds (read before the model is built)."""

    @abc.abstractmethod
    def restore(self, path: Path) -> int:
        """Load the checkpoint ``path`` into the model and optimizer; returns its step."""

    @abc.abstractmethod
    def export(self, model_dir: Path) -> None:
        """Write the trained model to ``model_dir`` (atomically)."""

    @abc.abstractmethod
    def record_parts(self, plan: PrivacyPlan, steps: int) -> RecordParts:
        """The words and trainer-specific ``details`` of ``privacy.json`` for a run of ``steps`` steps."""

    @abc.abstractmethod
    def fetch(self, pending: Sequence[tuple[int, Any]]) -> list[dict[str, Any]]:
        """Metric rows of the (step, telemetry handle) pairs (the loop's only host sync)."""

    # -- optional (single-process defaults) -----------------------------------------------------

    def start(self) -> None:  # noqa: B027 - an optional hook: a single-process trainer does nothing here
        """Initialize processes and devices (called first, before anything is read)."""

    @property
    def primary(self) -> bool:
        """True in the process that writes the run directory."""
        return True

    def barrier(self, tag: str) -> None:
        """Meet the other processes (none by default)."""
        del tag

    def share_source(self, source: NoiseSource) -> NoiseSource:
        """Process 0's secret source, shared with every process (one process: as it is)."""
        return source

    def make_sampler(self, source: NoiseSource) -> Sampler:
        """The secret batch sampler (default: Poisson, a generator keyed by the step)."""
        return StepKeyedPoisson(source, SAMPLING_STREAM)

    def begin(self, plan: PrivacyPlan) -> None:
        """Called once the plan is made and any checkpoint restored, before the first step (e.g. an
        optimizer schedule over ``plan.total_steps``, state placed on devices)."""
        del plan

    def check_resume(self, state: Mapping[str, Any], path: Path) -> None:
        """Trainer-specific resume checks after the identity check (processes, tokenizer, ...)."""
        del state, path

    def evaluate(self) -> dict[str, float]:
        """Heldout metrics of the current model (empty: no evaluation)."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        """JSON fields of the plug-in saved in each checkpoint (read back from ``resume_state``)."""
        return {}

    def summary(self) -> dict[str, Any]:
        """Trainer-specific facts for the result summary and the manifest."""
        return {}

    def manifest_extra(self) -> dict[str, Any]:
        """Fields added to the (private) manifest.json."""
        return {}
