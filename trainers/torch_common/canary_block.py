"""The audit block of a white-box audit (:mod:`dpaudit.training.gradient_canaries`) in the torch trainers.

Nasr et al. (2023, "Tight auditing of differentially private machine learning") audit a DP-SGD
implementation with Dirac gradient canaries: audit rows whose gradient is ``gain * e_j`` on a block of
trained coordinates that no real row touches. :class:`AuditBlock` is that block for the torch loop
(:class:`~trainers.torch_common.loop.TorchPlugin`): one trained tensor appended to the run's trained
tensors, so the trainer's own AdamW (weight decay included) updates it and the trainer's own noise
code noises it with the same draws as every other trained coordinate. What it adds is only the audit
rows' clipped gradients, formed by the same clipping rule as the engine's, vectorized over the rows:

- **per-example clipping** (edp-sgd ``dp-sgd``, rgp): each audit row is a unit of its own, its gradient
  of norm ``|gain|`` scaled by ``min(1, C / |gain|)`` exactly as the engines do (:meth:`AuditBlock.example_sum`);
  without clipping (``sgd``) by 1. The block is a plain ``(size,)`` vector.
- **micro-batch clipping with per-layer clip norms** (edp-sgd ``edp-sgd``, Dupuy et al. 2021, Algorithm 1):
  an audit row joins micro-batch ``slot[r]``; its block gradient is summed with that micro-batch's other
  members before the micro-batch is clipped (:class:`MicrobatchAudit`). Each layer group l is clipped
  to its own C_l (sum C_l^2 = C^2). A block inside a single group could move its micro-batch by C_l < C
  only, so a canary could never use the unit's whole budget C and the audit would under-measure the
  mechanism. The block is therefore ``(L, size)``: canary coordinate j has one reserved coordinate in
  every group l, and the audit row's gradient is ``gain * C_l / C`` on each (its norm is still
  ``|gain|``). Group l's clip factor sees ``(C_l / C)^2 ||b||^2`` beside the real rows' squared norm
  (``b`` the micro-batch's summed audit gains per coordinate), exactly the engine's rule on the
  concatenated gradient. The audit reads the projection ``sum_l (C_l / C) y_{l,j}`` (:meth:`AuditBlock.project`):
  a lone clipped canary moves it by ``sum_l (C_l / C) C_l = C``, and since ``sum_l (C_l / C)^2 = 1`` its
  noise has the std of one coordinate. With a partner row (negative gain, same coordinate and slot) the
  canary flips its micro-batch's clipped block from about -C to +C: the 2C the mechanism claims.

The block is audit machinery, not part of the model: it is never a module parameter, so the Hugging
Face export leaves it out; checkpoints hold it like every trained tensor (an audit run never resumes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from dpaudit.trainers.torch_common.distributed import to_device
from dpaudit.training.gradient_canaries import GradientCanaries

__all__ = ["AuditBlock", "MicrobatchAudit"]

_TINY = 1e-12  # the engines' floor under a norm before dividing by it


def _clip_factors(bounds: torch.Tensor, sq: torch.Tensor) -> torch.Tensor:
    """``min(1, bound / norm)`` from squared norms, as the engines compute it (their floor, their float32)."""
    return (bounds / sq.sqrt().clamp(min=_TINY)).clamp(max=1.0)


class MicrobatchAudit:
    """The audit rows of one step in this process's micro-batches: what the engine's clip factors must see,
    and the block's clipped sum once they are known. O(canaries) in memory and time, whatever the
    number of micro-batches: every audit row of canary coordinate j sits in j's one micro-batch
    (:class:`~dpaudit.training.gradient_canaries.GradientCanaries` enforces it), so the per-micro-batch
    sums ``b_s`` (a ``[micro-batches x size]`` table, quadratic when each canary has a micro-batch of its
    own, as the edp-sgd audit lays them out) are held as one value and one position per coordinate.

    Args:
        gains: ``[size]``: ``b_j``, the summed gains of coordinate j's audit rows sampled in this step in
            the micro-batches given (0 when none is), before the per-group weights C_l / C.
        position: ``[size]`` long: the place s of coordinate j's micro-batch among the micro-batches given
            (any valid place where ``b_j`` is 0: it then adds nothing anywhere).
        units: S, the number of micro-batches given.
        bounds, weights: ``[L]``: the groups' clip norms C_l and the weights C_l / C.
        engine_units: the positions s of the micro-batches that hold real rows: the engine's units, in order.

    ``sq`` ``[L, S]`` is the block's squared norm in group l of micro-batch s,
    ``(C_l / C)^2 sum_{j in s} b_j^2`` (summed by ``index_add_`` over the positions).
    """

    def __init__(
        self,
        gains: torch.Tensor,
        position: torch.Tensor,
        units: int,
        bounds: torch.Tensor,
        weights: torch.Tensor,
        engine_units: np.ndarray,
    ) -> None:
        self.gains, self.position, self.bounds, self.weights = gains, position, bounds, weights
        per_unit = torch.zeros(units, dtype=gains.dtype, device=gains.device)
        if units:
            per_unit.index_add_(0, position, gains.pow(2))
        self.sq = weights.pow(2)[:, None] * per_unit[None, :]
        self._engine_units = to_device(torch.as_tensor(engine_units, dtype=torch.long), gains.device)

    def engine_sq(self) -> torch.Tensor:
        """``[L, U]``: the block's squared norms of the engine's units (micro-batches with real rows), to be
        added to the real rows' squared norms before the engine computes its clip factors."""
        return self.sq.index_select(1, self._engine_units)

    def clipped(self, engine_factors: torch.Tensor | None) -> torch.Tensor:
        """``[L, size]``: the block's clipped sum, ``(C_l / C) f_{l,s(j)} b_j`` on coordinate j, s(j) its
        micro-batch. ``engine_factors`` ``[L, U]`` are the engine's factors of its units (None: it had
        none); a micro-batch of audit rows alone is clipped here by the same rule, its real squared norm
        being 0."""
        if not self.sq.shape[1]:  # no micro-batch here: nothing to clip
            return self.weights[:, None] * torch.zeros_like(self.gains)[None, :]
        factors = _clip_factors(self.bounds[:, None], self.sq)
        if engine_factors is not None:
            factors = factors.index_copy(1, self._engine_units, engine_factors.to(factors.dtype))
        return self.weights[:, None] * (factors.index_select(1, self.position) * self.gains[None, :])


class AuditBlock:
    """The trained tensor of a white-box audit and the clipped gradients of its audit rows.

    ``groups`` None: a ``(size,)`` block (per-example clipping, or none). Otherwise ``(groups, size)``,
    one reserved coordinate per layer group and canary (micro-batch clipping with per-layer clip norms,
    see the module docstring); :meth:`clip_microbatches` then gives the groups' clip norms C_l once the
    clipper has them (after the block was handed to the optimizer).
    """

    #: The block's name among the trained tensors (checkpoints); never a model parameter.
    NAME = "gradient_canaries.audit_block"

    def __init__(
        self,
        canaries: GradientCanaries,
        real_rows: int,
        *,
        groups: int | None,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.canaries, self.real_rows, self.groups = canaries, int(real_rows), groups
        shape = (canaries.size,) if groups is None else (groups, canaries.size)
        self.param = torch.nn.Parameter(torch.zeros(shape, dtype=dtype, device=device))
        self._coordinate = torch.as_tensor(canaries.coordinate, dtype=torch.long, device=device)
        self._gain = torch.as_tensor(canaries.gain, dtype=dtype, device=device)  # the engines clip in float32
        self._bounds: torch.Tensor | None = None
        self._weights: torch.Tensor | None = None
        self._projection: torch.Tensor | None = None  # the weights in float64, for what the audit reads
        self._microbatches = 0
        self._coordinate_slot: np.ndarray | None = None

    # -- rows ------------------------------------------------------------------------------------

    def split(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A step's sampled ``indices`` as (real row indices, audit rows ``r = i - N``), each in sample order."""
        audit = indices >= self.real_rows
        return indices[~audit], indices[audit] - self.real_rows

    def _rows(self, rows: np.ndarray) -> torch.Tensor:
        return to_device(torch.as_tensor(rows, dtype=torch.long), self.param.device)

    # -- per-example clipping ----------------------------------------------------------------------

    def example_sum(self, rows: np.ndarray, clip_norm: float | None) -> torch.Tensor:
        """The block's sum over audit ``rows``, each its own unit: ``gain * min(1, C / |gain|)`` on its
        coordinate, the factor computed as the per-example engines compute it; unclipped when
        ``clip_norm`` is None (sgd). Shaped like the (flat) block."""
        out = torch.zeros_like(self.param, requires_grad=False)
        if not len(rows):
            return out
        r = self._rows(rows)
        gain = self._gain.index_select(0, r)
        if clip_norm is not None:
            gain = gain * (clip_norm / gain.abs().clamp(min=_TINY)).clamp(max=1.0)
        return out.index_add_(0, self._coordinate.index_select(0, r), gain)

    # -- micro-batch clipping ----------------------------------------------------------------------

    def clip_microbatches(self, microbatches: int, bounds: Sequence[float]) -> None:
        """Micro-batch clipping of ``microbatches`` micro-batches per step, layer group l clipped to
        ``bounds[l]`` = C_l: group l's reserved coordinates weigh C_l / C, C = sqrt(sum C_l^2), so one
        canary's gradient has norm |gain| and the projection's weights have unit norm."""
        b = torch.tensor([float(c) for c in bounds], dtype=torch.float64)
        if self.groups is None or len(b) != self.groups:
            raise ValueError(f"the audit block has {self.groups} groups, got {len(b)} clip norms.")
        slot = self.canaries.slot
        if slot is None or (slot.size and int(slot.max()) >= microbatches):
            raise ValueError(f"each audit row needs a slot in [0, {microbatches}).")
        self._microbatches = int(microbatches)
        # Coordinate j's micro-batch (GradientCanaries puts all of j's rows in one); 0 for a coordinate
        # without rows (its b_j is always 0).
        self._coordinate_slot = np.zeros(self.canaries.size, dtype=np.int64)
        self._coordinate_slot[self.canaries.coordinate] = slot
        device, dtype = self.param.device, self.param.dtype
        weights = b / b.pow(2).sum().sqrt()
        self._bounds = to_device(b.to(dtype), device)
        self._weights = to_device(weights.to(dtype), device)
        self._projection = to_device(weights, device)

    def microbatches(self, rows: np.ndarray, units: Sequence[int], engine_units: np.ndarray) -> MicrobatchAudit:
        """The audit ``rows`` sampled in this step that fall in micro-batches ``units`` (this process's,
        in the order the engine receives them), summed per coordinate (``index_add_``, no loop over rows
        or micro-batches); ``engine_units``: the positions in ``units`` of the micro-batches that hold
        real rows."""
        if self._weights is None or self._coordinate_slot is None:
            raise RuntimeError("clip_microbatches must be called before micro-batch clipping.")
        device = self.param.device
        position = np.full(self._microbatches, -1, dtype=np.int64)  # micro-batch -> its place in ``units``
        position[np.asarray(units, dtype=np.int64)] = np.arange(len(units))
        where = position[self.canaries.slot[rows]] if len(rows) else np.zeros(0, np.int64)
        rows = rows[where >= 0]
        gains = torch.zeros(self.canaries.size, dtype=self.param.dtype, device=device)
        if len(rows):
            r = self._rows(rows)
            gains.index_add_(0, self._coordinate.index_select(0, r), self._gain.index_select(0, r))
        place = np.maximum(position[self._coordinate_slot], 0)  # a coordinate outside ``units`` has b_j = 0
        return MicrobatchAudit(gains, self._rows(place), len(units), self._bounds, self._weights, engine_units)

    # -- what the audit reads ------------------------------------------------------------------------

    def project(self, block: torch.Tensor) -> np.ndarray:
        """A block-shaped tensor as the audit's ``(size,)`` float64 values: the block itself, or with
        per-group coordinates the projection ``sum_l (C_l / C) y_{l,j}`` (one host copy)."""
        values = block.detach().double()
        if self.groups is not None:
            values = self._projection @ values
        return values.cpu().numpy()

    def values(self) -> np.ndarray:
        """The block's current values as the audit reads them (the last iterate)."""
        return self.project(self.param)
