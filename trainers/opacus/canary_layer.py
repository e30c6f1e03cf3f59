"""Canaries through a library's real per-example gradient path: a canary layer only canary inputs reach.

The cooperative audit block (``docs/auditing.md``) writes each canary's gradient onto reserved coordinates itself,
so it never passes through the code that computes, clips and noises the model's per-example gradients. Here the
canary is an ordinary input of the training data. The audited model is wrapped (:class:`AuditedModel`) with a
:class:`CanaryLayer`: ``layers`` embedding tables of ``m + 1`` rows of width 1. A real row looks up row 0, whose
gain is 0; canary j looks up row j + 1, and its loss term is ``gain_j * <u, (w_1[j+1], ..., w_L[j+1])>`` with u a
fixed unit vector, linear in that row. Its per-example gradient, as the library itself computes it (Opacus's hooks,
functorch; the same autograd that serves the model), is ``gain_j * u`` on row j + 1 of the tables and exactly zero on
every other parameter (its model loss is multiplied by 0), so the library's own clipping brings it to C u (flat
clipping) or to each table's own clip norm (per-layer clipping), and the released noisy update on row j + 1,
projected on u, is the mechanism the accountant claims: 0 or the clipped shift plus Gaussian noise (Nasr et al.
2023, "Tight auditing of differentially private machine learning", Dirac canaries; here the Dirac direction is
produced by the model's own backward pass). A non-member's gain is 0: sampled or not, it adds nothing, and the row
count N (and so q) does not depend on the auditor's coins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["AuditedModel", "CanaryDataset", "CanaryLayer"]


class CanaryLayer(nn.Module):
    """``layers`` tables of ``m + 1`` rows (row 0: real rows, gain 0), each row one scalar, initialized to 0.

    Args:
        gains: (m,) the gradient norm of each canary's loss term (0 for a non-member).
        layers: how many parameter tensors the canary spreads over (per-layer clipping clips each on its own).
        weights: the direction u over the tables before normalization (default: uniform); per-layer clipping
            wants it proportional to the tables' clip norms, so that the clipped canary reaches their whole budget.
    """

    def __init__(self, gains: np.ndarray, *, layers: int = 1, weights: Sequence[float] | None = None) -> None:
        super().__init__()
        gains = np.asarray(gains, dtype=np.float64).reshape(-1)
        if gains.size < 1 or layers < 1:
            raise ValueError("a canary layer needs at least one canary and one table.")
        self.size = int(gains.size)
        self.tables = nn.ModuleList(nn.Embedding(self.size + 1, 1) for _ in range(layers))
        for table in self.tables:
            nn.init.zeros_(table.weight)
        u = np.ones(layers) if weights is None else np.asarray(weights, dtype=np.float64)
        if u.shape != (layers,) or not np.all(u > 0):
            raise ValueError(f"weights must be {layers} positive numbers, got {weights!r}.")
        self.register_buffer("direction", torch.as_tensor(u / np.linalg.norm(u), dtype=torch.float32))
        self.register_buffer("gain", torch.as_tensor(np.concatenate([[0.0], gains]), dtype=torch.float32))

    def forward(self, canary: torch.Tensor) -> torch.Tensor:
        """The canary loss term of each row: ``gain[c] * <u, w[c]>`` (0 for a real row, ``canary`` 0)."""
        values = torch.cat([table(canary) for table in self.tables], dim=1)  # (B, L)
        return self.gain[canary] * (values @ self.direction)

    @torch.no_grad()
    def project(self, tensors: Sequence[torch.Tensor]) -> np.ndarray:
        """(m,) the canary rows of one tensor per table (their gradients or their weights), projected on u."""
        stacked = torch.cat([t.detach().reshape(-1, 1)[1:] for t in tensors], dim=1).double()
        return (stacked @ self.direction.double()).numpy()

    def released(self) -> np.ndarray:
        """The tables' current gradients on the canary rows, projected on u (the released noisy update)."""
        grads = [t.weight.grad for t in self.tables]
        if any(g is None for g in grads):
            raise RuntimeError("the canary tables have no gradient: the optimizer stepped without them.")
        return self.project([g for g in grads if g is not None])

    def values(self) -> np.ndarray:
        """The canary rows' current values projected on u: the last iterate."""
        return self.project([t.weight for t in self.tables])


class AuditedModel(nn.Module):
    """The audited model with the canary layer beside it: ``forward(canary, *inputs)`` returns (the model's output,
    the canary terms). A canary row's output is still computed (shapes stay per-example for the library's hooks);
    the loss multiplies its model loss by 0, so no gradient of it reaches the model.

    ``shorten``: what a batch of canary rows only feeds the model instead of its inputs (e.g. token sequences cut to
    their first position). Its output is multiplied by 0 all the same, so every gradient, clipped sum and update is
    the same; only the model's own passes over canary rows get cheaper. Opacus's ``BatchMemoryManager`` splits its
    sorted Poisson sample in row order (real rows first, canaries after), so at most one physical batch per update
    is mixed and runs at full length (``docs/auditing.md``, "Canaries through the real gradient path")."""

    def __init__(self, model: nn.Module, canaries: CanaryLayer, shorten: Callable[..., tuple[Any, ...]] | None = None):
        super().__init__()
        self.model = model
        self.canaries = canaries
        self.shorten = shorten

    def forward(self, canary: torch.Tensor, *inputs: Any, **kwargs: Any) -> tuple[Any, torch.Tensor]:
        if self.shorten is not None and canary.numel() and bool((canary != 0).all()):
            inputs = tuple(self.shorten(*inputs))
        return self.model(*inputs, **kwargs), self.canaries(canary)


class CanaryDataset(torch.utils.data.Dataset):  # type: ignore[type-arg]
    """The real rows, then ``m`` canary rows: item i is ``(canary id, *row)``; canary j (id j + 1) carries a copy of
    real row 0's content (its model loss is multiplied by 0: only its id matters)."""

    def __init__(self, base: Any, m: int) -> None:
        self.base, self.m = base, int(m)
        self.real = len(base)
        if self.real < 1:
            raise ValueError("the training data is empty.")

    def __len__(self) -> int:
        return self.real + self.m

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        row = self.base[i] if i < self.real else self.base[0]
        row = tuple(row) if isinstance(row, (tuple, list)) else (row,)
        return (torch.tensor(0 if i < self.real else i - self.real + 1, dtype=torch.long), *row)
