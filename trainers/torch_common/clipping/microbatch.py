"""Micro-batch clipping with per-layer clip norms (eDP-SGD, Dupuy et al. 2021, Algorithm 1).

:class:`MicrobatchClipper`: the gradient of each micro-batch (of the SUM of its examples' losses;
:meth:`~MicrobatchClipper.clipped_sum` forms it from vectorized per-example gradients,
:meth:`~MicrobatchClipper.add_clipped_` by one backward pass, the reference), then per-layer clipping:
layer l's gradient is scaled by 1/C_l, clipped to 1, and rescaled by C_l, i.e. clipped to C_l, so the
whole micro-batch gradient has norm <= sqrt(sum C_l^2) = C. One example moves one clipped micro-batch
gradient by up to 2C (both with and without it have norm <= C), so the sensitivity is 2C (TF Privacy
``used_microbatching``; McMahan et al. 2018). The clipper reports it; callers never recompute it.

Per-layer clip norms (:func:`layer_clip_norms`): C_l proportional to layer l's gradient norm at the
first iteration, sum C_l^2 = C^2 (Dupuy et al., "Scaling").
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch.func import functional_call, grad, vmap

from dpaudit import accounting
from dpaudit.trainers.torch_common.clipped import Clipped, LossFn
from dpaudit.trainers.torch_common.clipping.per_example import LossModule, trainable

__all__ = ["MicrobatchClipper", "layer_clip_norms"]

_TINY = 1e-12


def _norm_or_inf(norms: list[float]) -> float:
    if all(math.isfinite(c) for c in norms):
        return accounting.combined_clip_norm(norms)
    return math.inf


class MicrobatchClipper:
    """Sum over micro-batches of per-layer-clipped micro-batch gradients. Sensitivity: 2C, always.

    The factor is a property of the clipping function and of public parameters only, never of how the
    private rows happen to fall into micro-batches: one example joining a micro-batch can move its
    clipped gradient from one vector of norm C to another (up to 2C), and a micro-batch that holds one
    row of this dataset holds two of a neighbouring dataset with one more row. A factor read off the
    slot occupancy (1 when every micro-batch held at most one row) changed the noise and privacy.json
    when one duplicate row was added: the noise itself then depended on the private data.
    """

    #: Clip norms one example can move the noised sum by (McMahan et al. 2018; TF Privacy ``used_microbatching``).
    SENSITIVITY_FACTOR = 2.0

    def __init__(
        self, model: torch.nn.Module, loss_fn: LossFn, *, layer_clip_norms: list[float], param_groups: list[int]
    ) -> None:
        self.model, self.loss_fn = model, loss_fn
        self.names, self.params = trainable(model)
        if len(param_groups) != len(self.params):
            raise ValueError(
                f"param_groups must have one entry per trainable parameter ({len(self.params)}), "
                f"got {len(param_groups)}."
            )
        self.layer_clip_norms = [float(c) for c in layer_clip_norms]
        self.param_groups = torch.as_tensor(param_groups, dtype=torch.long)
        self._members = [
            [i for i, g in enumerate(param_groups) if g == group] for group in range(len(self.layer_clip_norms))
        ]
        self.clip_norm = _norm_or_inf(self.layer_clip_norms)
        self.sensitivity_factor = self.SENSITIVITY_FACTOR
        self.sensitivity = self.sensitivity_factor * self.clip_norm
        self._bounds = torch.tensor(self.layer_clip_norms, dtype=torch.float32)
        wrapper = LossModule(model, loss_fn)

        def loss_one(params: dict[str, torch.Tensor], example: dict[str, torch.Tensor]):
            one = {k: v.unsqueeze(0) for k, v in example.items()}
            loss, correct = functional_call(wrapper, params, (one,), tie_weights=True, strict=False)
            return loss[0], (loss[0].detach(), correct[0])

        self._per_example = vmap(grad(loss_one, has_aux=True), in_dims=(None, 0))

    def clipped_sum(
        self,
        batch: dict[str, torch.Tensor],
        microbatches: list[np.ndarray],
        *,
        chunk_examples: int = 32,
        extra_sq: torch.Tensor | None = None,
    ) -> Clipped:
        """Sum over ``microbatches`` (index arrays into ``batch``) of their per-layer-clipped gradients.

        Vectorized, with the result of :meth:`add_clipped_` on each micro-batch in turn: per-example
        gradients by ``torch.func.vmap(grad(...))`` in chunks of ``chunk_examples`` (a memory knob),
        summed into their micro-batch (``index_add_``), then normed per layer and summed with the
        micro-batches' clip factors. k sequential backward passes of a few examples each cost more
        than this on CPU (per-pass overhead), and padding micro-batches to one size wastes compute.

        ``extra_sq`` ``[L, U]`` (U the non-empty micro-batches, in order): squared norms per group of
        gradient parts the micro-batches hold outside the model (a white-box audit's block,
        :mod:`trainers.torch_common.canary_block`), added before the clip factors are taken, so they are
        clipped together with the real rows; the factors are returned (``Clipped.factors``).
        """
        acc = [torch.zeros_like(p) for p in self.params]
        groups = [m for m in microbatches if len(m)]
        if not groups:
            return Clipped(grads=acc, loss_sum=0.0, correct_sum=0.0, units=0, clipped=0)
        device = acc[0].device
        examples = torch.as_tensor(np.concatenate(groups), dtype=torch.long).to(device)
        owner = torch.cat([torch.full((len(m),), row, dtype=torch.long) for row, m in enumerate(groups)]).to(device)
        sums = [torch.zeros((len(groups), *p.shape), dtype=p.dtype, device=device) for p in self.params]
        params = {"model." + n: p.detach() for n, p in zip(self.names, self.params)}
        loss_sum = correct_sum = torch.zeros((), dtype=torch.float64, device=device)
        for start in range(0, len(examples), chunk_examples):
            chunk = examples[start : start + chunk_examples]
            grads, (losses, correct) = self._per_example(params, {key: value[chunk] for key, value in batch.items()})
            rows = owner[start : start + chunk_examples]
            for total, name in zip(sums, self.names):
                total.index_add_(0, rows, grads["model." + name])
            loss_sum = loss_sum + losses.sum()
            correct_sum = correct_sum + correct.sum()
        norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in sums])  # [P, k]
        group_sq = torch.zeros(len(self.layer_clip_norms), norms.shape[1], device=device).index_add_(
            0, self.param_groups.to(device), norms.pow(2)
        )  # [L, k]
        if extra_sq is not None:
            group_sq = group_sq + extra_sq.to(group_sq.dtype)
        group_norms = group_sq.sqrt()
        factors = (self._bounds.to(device)[:, None] / group_norms.clamp(min=_TINY)).clamp(max=1.0)
        for a, g, group in zip(acc, sums, self.param_groups.tolist()):
            a.add_(torch.tensordot(factors[group], g, dims=1))
        clipped = (factors < 1.0).any(0).sum()
        return Clipped(
            grads=acc, loss_sum=loss_sum, correct_sum=correct_sum, units=len(groups), clipped=clipped, factors=factors
        )

    def add_clipped_(self, acc: list[torch.Tensor], batch: dict[str, torch.Tensor]) -> tuple[float, float, bool]:
        """acc += clip(gradient of the micro-batch's summed loss); returns (loss sum, correct sum, was clipped)."""
        losses, correct = self.loss_fn(self.model, batch)
        grads = torch.autograd.grad(losses.sum(), self.params, allow_unused=True, materialize_grads=True)
        sq = torch.stack(torch._foreach_norm(grads)).pow(2)  # fused norms, no copies of the gradients
        group_norms = (
            torch.zeros(len(self.layer_clip_norms), device=sq.device)
            .index_add_(0, self.param_groups.to(sq.device), sq)
            .sqrt()
        )
        factors = (self._bounds.to(sq.device) / group_norms.clamp(min=_TINY)).clamp(max=1.0).tolist()
        for group, members in enumerate(self._members):  # acc += factor_l * grad, in place, per layer
            torch._foreach_add_([acc[i] for i in members], [grads[i] for i in members], alpha=factors[group])
        return float(losses.detach().sum()), float(correct.sum()), any(f < 1.0 for f in factors)


def layer_clip_norms(
    model: torch.nn.Module,
    loss_fn: LossFn,
    batch: dict[str, torch.Tensor],
    *,
    clip_norm: float,
    param_groups: list[int],
    num_groups: int,
) -> list[float]:
    """C_l = C * n_l / ||n|| with n_l layer l's gradient norm on ``batch`` at the current (initial) weights.

    A layer with no gradient on this batch gets a small positive floor (1e-3 of the largest), so it is
    still trained (and clipped) if the data reaches it later.
    """
    _, params = trainable(model)
    for p in params:
        p.grad = None
    losses, _ = loss_fn(model, batch)
    losses.sum().backward()
    sq = torch.zeros(num_groups, dtype=torch.float64)
    for p, g in zip(params, param_groups):
        if p.grad is not None:
            sq[g] += float(p.grad.double().pow(2).sum())
        p.grad = None
    norms = sq.sqrt()
    norms = torch.maximum(norms, norms.max() * 1e-3)
    if float(norms.max()) <= 0.0:
        norms = torch.ones(num_groups, dtype=torch.float64)
    scaled = norms * (clip_norm / float(norms.pow(2).sum().sqrt()))
    return [float(c) for c in scaled]
