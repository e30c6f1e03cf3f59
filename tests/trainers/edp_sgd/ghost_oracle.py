"""The ghost engine's oracle, shared by the BERT and GPT-2 exactness tests: the vmap micro-batch clipper's clipped sum
beside the ghost clipper's on the same batch, micro-batches and per-layer bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dpaudit.trainers.torch_common.clipping.ghost import GhostClipper
from dpaudit.trainers.torch_common.clipping.microbatch import MicrobatchClipper
from dpaudit.trainers.torch_common.model import per_example_losses

#: Unequal sizes (and, in the fixtures' batches, unequal lengths).
MICROBATCHES = (np.array([0, 3]), np.array([1]), np.array([2, 4, 5]))


def max_error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The largest absolute difference, relative to the largest entry of ``want``."""
    scale = max(float(w.abs().max()) for w in want)
    return max(float((g.cpu() - w.cpu()).abs().max()) for g, w in zip(got, want)) / scale


def microbatch_sums(model: Any, batch: dict, bounds: list[float], groups: list[int]) -> tuple[Any, Any]:
    """(ghost, vmap) clipped sums of :data:`MICROBATCHES` of a 6-row ``batch`` with per-layer ``bounds``."""
    want = MicrobatchClipper(model, per_example_losses, layer_clip_norms=bounds, param_groups=groups).clipped_sum(
        batch, list(MICROBATCHES)
    )
    owner = np.zeros(6, dtype=np.int64)
    for unit, members in enumerate(MICROBATCHES):
        owner[members] = unit
    got = GhostClipper(model, per_example_losses, bounds=bounds, param_groups=groups).clipped_sum(
        batch, owner, len(MICROBATCHES)
    )
    return got, want
