"""Per-example clipping (dp-sgd) by vectorized per-example gradients: the reference torch clipper.

The clipper reports the L2 sensitivity of the sum it returns — how far adding or removing one
example can move it — and the step multiplies its noise by exactly that (jax_privacy's
``clipped_grad(...).sensitivity``; docs/trainers.md, "Sensitivity belongs to the step"). Callers never recompute it.

:class:`PerExampleClipper`: per-example gradients by ``torch.func.vmap(grad(...))`` over chunks of
``physical_batch`` examples (no Python loop over examples), each clipped to C, summed: sensitivity C
(Abadi et al. 2016). With ``draws`` K (``--mask-draws``) an example is K rows, K maskings of it, and its
gradient is their weighted sum, the mean, before it is clipped (augmentation multiplicity: De et al. 2022).
:class:`~.ghost.GhostClipper` computes the same sum in one backward pass; this one is its oracle in the tests
and the fallback for models the ghost clipper refuses.
"""

from __future__ import annotations

import torch
from torch.func import functional_call, grad, vmap

from dpaudit.trainers.torch_common.clipped import Clipped, LossFn

__all__ = ["LossModule", "PerExampleClipper", "trainable"]

_TINY = 1e-12


def trainable(model: torch.nn.Module) -> tuple[list[str], list[torch.nn.Parameter]]:
    """The names and parameters that require a gradient, in ``named_parameters`` order (every clipper's order)."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return [n for n, _ in named], [p for _, p in named]


class PerExampleClipper:
    """Sum of per-example gradients, each clipped to L2 norm ``clip_norm``. Sensitivity: C."""

    def __init__(
        self, model: torch.nn.Module, loss_fn: LossFn, *, clip_norm: float, physical_batch: int, draws: int = 1
    ) -> None:
        self.model, self.loss_fn = model, loss_fn
        self.clip_norm = float(clip_norm)
        self.physical_batch = physical_batch
        #: Rows per example (``--mask-draws``): example i's at rows i K .. i K + K - 1, its gradient their sum.
        self.draws = int(draws)
        self.names, self.params = trainable(model)
        self.sensitivity_factor = 1.0
        self.sensitivity = self.clip_norm

        wrapper = LossModule(model, loss_fn)

        def loss_one(params: dict[str, torch.Tensor], example: dict[str, torch.Tensor]):
            # one row, or an example's K rows (their losses carry the 1 / K weights: the sum is the mean)
            batch = {k: v.unsqueeze(0) for k, v in example.items()} if self.draws == 1 else example
            loss, correct = functional_call(wrapper, params, (batch,), tie_weights=True, strict=False)
            loss, correct = loss.sum(), correct.sum()
            return loss, (loss.detach(), correct)

        self._per_example = vmap(grad(loss_one, has_aux=True), in_dims=(None, 0))

    def per_example_grads(
        self, batch: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        params = {"model." + n: p.detach() for n, p in zip(self.names, self.params)}
        grads, (losses, correct) = self._per_example(params, batch)
        return {n[len("model.") :]: g for n, g in grads.items()}, losses, correct

    def clipped_sum(self, batch: dict[str, torch.Tensor]) -> Clipped:
        """Each example's gradient clipped to C, summed; with K draws the batch's rows are K per example."""
        acc = [torch.zeros_like(p) for p in self.params]
        if self.draws > 1:  # [B K, ...] -> [B, K, ...]: vmap over examples, each example's K rows together
            batch = {k: v.reshape(v.shape[0] // self.draws, self.draws, *v.shape[1:]) for k, v in batch.items()}
        size = batch["input_ids"].shape[0]
        loss_sum = correct_sum = clipped = torch.zeros((), dtype=torch.float64, device=acc[0].device)
        for start in range(0, size, self.physical_batch):
            chunk = {k: v[start : start + self.physical_batch] for k, v in batch.items()}
            grads, losses, correct = self.per_example_grads(chunk)
            flat = [grads[n] for n in self.names]
            # A reduction kernel per tensor: g.pow(2) would allocate a copy of every per-example
            # gradient (page faults on hundreds of MB: 40% of the step in a profile).
            norms = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in flat]), dim=0
            )
            factor = (self.clip_norm / norms.clamp(min=_TINY)).clamp(max=1.0)
            for a, g in zip(acc, flat):
                a.add_(torch.tensordot(factor, g, dims=1))
            loss_sum = loss_sum + losses.sum()
            correct_sum = correct_sum + correct.sum()
            clipped = clipped + (norms > self.clip_norm).sum()
        return Clipped(grads=acc, loss_sum=loss_sum, correct_sum=correct_sum, units=size, clipped=clipped)


class LossModule(torch.nn.Module):
    """The loss as a module, so ``torch.func.functional_call`` can swap the model's parameters."""

    def __init__(self, model: torch.nn.Module, loss_fn: LossFn) -> None:
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.loss_fn(self.model, batch)
