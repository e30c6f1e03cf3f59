"""What a torch trainer's clipper hands the shared loop: the clipped sum and its telemetry.

Every clipper (edp-sgd's per-example, micro-batch and ghost clippers, rgp's carrier clipper)
returns a :class:`Clipped`; the loop adds the noise to ``grads`` and logs the rest, which is
telemetry computed on private data (never covered by the epsilon).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Clipped", "LossFn"]

#: ``loss_fn(model, batch) -> (per-example losses, per-example correct flags)``.
LossFn = Callable[[torch.nn.Module, dict[str, torch.Tensor]], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Clipped:
    """A clipped sum (one tensor per trainable unit, in the clipper's order) and telemetry about it."""

    grads: list[torch.Tensor]
    loss_sum: float | torch.Tensor  # 0-d tensors on the model's device where a host sync would be needed
    correct_sum: float | torch.Tensor
    units: int  # clipped units (examples, or non-empty micro-batches in edp-sgd)
    clipped: int | torch.Tensor  # units whose norm exceeded the bound
    #: [L, U] clip factors of the units per clipping group, where a micro-batch engine reports them (a
    #: white-box audit scales its micro-batches' audit gradients by them: trainers.torch_common.canary_block).
    factors: torch.Tensor | None = None
