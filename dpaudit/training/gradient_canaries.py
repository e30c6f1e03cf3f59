"""White-box gradient canaries: the optional plug-in capability that ``dpaudit audit-trainer`` uses.

Nasr et al. (2023, "Tight auditing of differentially private machine learning") audit a DP-SGD
implementation with *gradient canaries*: examples whose gradient the auditor chooses. A Dirac canary's
gradient points along one coordinate reserved for it, so after clipping it moves that coordinate by the
clip norm C and nothing else, and the noisy sum in that coordinate is exactly the subsampled Gaussian
mechanism the accountant claims. An implementation that adds too little noise, under-states its
sensitivity or its sampling rate then shows a larger shift-to-noise ratio than its ``privacy.json``
allows, which the one-run and multi-run bounds of :mod:`dpaudit.whitebox` detect.

A trainer that supports the audit implements :class:`GradientCanaryHost` on its
:class:`~dpaudit.training.TrainerPlugin`. The harness calls :meth:`GradientCanaryHost.host_gradient_canaries`
once, before the skeleton runs; from then on:

- the plug-in adds an *audit block*: ``canaries.size`` trained scalar coordinates, initialized to 0,
  updated by the trainer's own optimizer (weight decay included) and noised by the trainer's own
  noise code like every other trained coordinate. No real training row's gradient touches the block;
- :meth:`~dpaudit.training.TrainerPlugin.load_data` reports ``N + canaries.rows`` training rows, where N
  is the real row count: a batch index ``i >= N`` is audit row ``r = i - N``. It is sampled by the
  skeleton like any other row (the same secret Poisson sampling, the same q);
- audit row ``r`` is one example of the trainer's clipping unit whose gradient is
  ``canaries.gain[r] * e_{canaries.coordinate[r]}`` on the block and zero everywhere else; it is clipped
  by the trainer's own clipping rule. With micro-batch clipping it joins micro-batch
  ``canaries.slot[r]`` (an auditor who crafts the example's content chooses its slot), where its
  gradient is summed with the other rows of that micro-batch before the micro-batch is clipped;
- each step calls ``canaries.observe(step, values)`` with the block's noisy clipped sum (float64, shape
  ``(size,)``): the clipped sum plus the noise, before any division by the batch size and before the
  optimizer. This is the "all iterates" view of the audit (the noisy gradients a DP-SGD release would
  reveal). It is the one host sync per step the audit allows itself;
- :meth:`GradientCanaryHost.canary_parameters` returns the block's current values (the "last iterate"
  view, after the optimizer).

The audit block is audit machinery, not part of the model: it need not be exported or checkpointed
(the harness always trains in a fresh directory and never resumes an audit run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["UNIT_EXAMPLE", "UNIT_MICROBATCH", "GradientCanaries", "GradientCanaryHost", "canary_host"]

#: Each example is clipped on its own (DP-SGD): one example moves the clipped sum by at most C.
UNIT_EXAMPLE = "example"
#: Examples are summed in micro-batches, each micro-batch clipped (eDP-SGD): one example can flip its
#: micro-batch's clipped sum, a move of up to 2C.
UNIT_MICROBATCH = "micro-batch"


def _ignore(step: int, values: np.ndarray) -> None:
    del step, values


@dataclass(frozen=True, eq=False)
class GradientCanaries:
    """The audit rows a trainer hosts and the sink of what the audit observes.

    Attributes:
        size: the number of reserved block coordinates (one per canary).
        coordinate: int64 ``(rows,)``: the block coordinate of each audit row.
        gain: float64 ``(rows,)``: the signed magnitude of each audit row's gradient along its
            coordinate (its gradient norm is ``abs(gain)``; above the clip norm, clipping brings it to C).
        slot: int64 ``(rows,)``, the micro-batch of each audit row when the trainer clips micro-batches
            (values in ``[0, k)``, k from :meth:`GradientCanaryHost.gradient_canary_unit`); None otherwise.
            All rows of one coordinate share one slot (checked): a host then keeps one sum and one
            micro-batch per coordinate, O(size) whatever k.
        observe: called as ``observe(step, values)`` after each step with the block's noisy clipped sum.
    """

    size: int
    coordinate: np.ndarray
    gain: np.ndarray
    slot: np.ndarray | None = None
    observe: Callable[[int, np.ndarray], None] = field(default=_ignore, repr=False)

    def __post_init__(self) -> None:
        coordinate = np.asarray(self.coordinate, dtype=np.int64)
        gain = np.asarray(self.gain, dtype=np.float64)
        object.__setattr__(self, "coordinate", coordinate)
        object.__setattr__(self, "gain", gain)
        if coordinate.ndim != 1 or gain.shape != coordinate.shape:
            raise ValueError("coordinate and gain must be 1-d arrays of one length (one entry per audit row).")
        if self.size < 1 or (coordinate.size and (coordinate.min() < 0 or coordinate.max() >= self.size)):
            raise ValueError(f"coordinates must lie in [0, {self.size}).")
        if self.slot is not None:
            slot = np.asarray(self.slot, dtype=np.int64)
            if slot.shape != coordinate.shape or (slot.size and slot.min() < 0):
                raise ValueError("slot must be a non-negative int array with one entry per audit row.")
            one = np.zeros(self.size, dtype=np.int64)
            one[coordinate] = slot  # a coordinate's rows must agree on it: any of them, checked against all
            split = np.flatnonzero(one[coordinate] != slot)
            if split.size:
                j = int(coordinate[split[0]])
                raise ValueError(
                    f"coordinate {j} has audit rows in slots {sorted(set(slot[coordinate == j].tolist()))}: "
                    "all rows of one coordinate (a canary and its partners) must share one slot."
                )
            object.__setattr__(self, "slot", slot)

    @property
    def rows(self) -> int:
        """How many audit rows the trainer appends to its training rows."""
        return int(self.coordinate.size)


@runtime_checkable
class GradientCanaryHost(Protocol):
    """What a :class:`~dpaudit.training.TrainerPlugin` implements to be audited white-box."""

    def gradient_canary_unit(self) -> tuple[str, int]:
        """The clipping unit of this run's mechanism as its clipping code implements it (not as its
        privacy record claims): ``(UNIT_EXAMPLE, 1)`` or ``(UNIT_MICROBATCH, k)`` with k micro-batches
        per step. Called after construction, before :meth:`host_gradient_canaries`."""

    def host_gradient_canaries(self, canaries: GradientCanaries) -> None:
        """Host ``canaries`` in the run about to start (see the module docstring); called once, before
        the skeleton's setup."""

    def canary_parameters(self) -> np.ndarray:
        """The audit block's current values (float64, shape ``(size,)``): the last iterate."""


def canary_host(plugin: object) -> GradientCanaryHost:
    """``plugin`` as a :class:`GradientCanaryHost`, or a TypeError that says what it lacks."""
    if not isinstance(plugin, GradientCanaryHost):
        raise TypeError(
            f"{type(plugin).__name__} does not host gradient canaries: a white-box audit needs its plug-in "
            "to implement dpaudit.training.gradient_canaries.GradientCanaryHost."
        )
    return plugin
