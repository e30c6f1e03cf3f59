"""Per-example carrier gradients, clipped jointly to C and summed (Yu et al. 2021, Algorithm 1, lines 7-12).

What is trained, and how each example's gradient is formed:

- every ``nn.Linear`` weight W (p x d: attention, feed-forward, pooler and heads, the MLM decoder
  included) and every GPT-2 ``Conv1D`` weight (stored transposed, d x p: its matrix is W^T, whose carriers
  and update are those of a Linear; :meth:`Reparametrization.matrix`) is reparametrized (Eq. 1); only its carriers L, R receive gradients. Per example i, with
  the layer's input rows a_it (d) and output-gradient rows g_it (p) over the example's positions t,
  Theorem 2.1 gives, without ever forming the p x d matrix dW_i = sum_t g_it a_it^T:

      dL_i = dW_i R^T = sum_t g_it (R a_it)^T        (p x r)
      dR_i = L^T dW_i = sum_t (L^T g_it) a_it^T      (r x d)

  i.e. two batched matrix products per layer from the activations a forward pass keeps anyway, and
  memory O(m r (p + d)) for m examples instead of O(m p d);
- the non-matrix parameters (Linear biases, LayerNorm scales and shifts; O(p) numbers each) are
  trained with their exact per-example gradients (bias: sum_t g_it; LayerNorm: sum_t g_it * xhat_it
  and sum_t g_it) and clipped IN THE SAME per-example vector as the carrier gradients, so one
  example's whole contribution has norm <= C and the step is one Gaussian mechanism of sensitivity C;
- the embedding tables (word, position, token type) are frozen: their per-example gradients would
  be dense vocabulary x width tables. (For MLM the decoder's weight IS the word-embedding table, tied
  by Hugging Face: it is updated through the decoder's reparametrization.)

The per-example quantities are computed inside the backward pass (a tensor hook on each layer's
output receives g and frees it), from ONE batched forward and backward per chunk of examples: no
``vmap`` and no Python loop over examples. Dropout is off (the model is in eval mode), so each
example's gradient is a deterministic function of that example.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from transformers.pytorch_utils import Conv1D

from dpaudit.trainers.torch_common.clipped import Clipped, LossFn

_TINY = 1e-12


class Reparametrization:
    """Which tensors RGP trains in ``model``, and the order of the per-example vector it clips.

    Sets ``requires_grad``: False everywhere except the non-matrix parameters (the weight matrices
    are updated from reconstructed carrier gradients, never by autograd, so no p x d gradient is
    computed). The per-example vector is [dL_0, dR_0, dL_1, dR_1, ...] followed by the non-matrix
    parameters' gradients (:attr:`unit_names`).
    """

    def __init__(self, model: torch.nn.Module) -> None:
        name_of = {}
        for name, param in model.named_parameters():  # the first name of a tied parameter
            name_of.setdefault(id(param), name)
        self.linear_names = [n for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D))]
        self.linears = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, Conv1D))]
        #: Conv1D weights are stored [in, out]: the p x d matrix the carriers span is their transpose.
        self.transposed = [isinstance(m, Conv1D) for m in self.linears]
        self.norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
        if not self.linears:
            raise ValueError("the model has no nn.Linear or Conv1D layer to reparametrize.")
        for param in model.parameters():
            param.requires_grad_(False)
        self.matrices = [m.weight for m in self.linears]
        if len({id(w) for w in self.matrices}) != len(self.matrices):
            raise ValueError("two nn.Linear or Conv1D layers share one weight: RGP reparametrizes each weight once.")
        # Non-matrix parameters and where their per-example gradient comes from: (param, kind, module index).
        self.vector_specs: list[tuple[torch.nn.Parameter, str, int]] = []
        seen: set[int] = set()
        for i, m in enumerate(self.linears):
            if m.bias is not None and id(m.bias) not in seen:
                seen.add(id(m.bias))
                self.vector_specs.append((m.bias, "bias", i))
        for i, m in enumerate(self.norms):
            for kind, param in (("ln_weight", m.weight), ("ln_bias", m.bias)):
                if param is not None and id(param) not in seen:
                    seen.add(id(param))
                    self.vector_specs.append((param, kind, i))
        for param, _, _ in self.vector_specs:
            param.requires_grad_(True)
        self.vectors = [p for p, _, _ in self.vector_specs]
        self.params: list[torch.nn.Parameter] = [*self.matrices, *self.vectors]
        self.names = [name_of[id(p)] for p in self.params]
        trained = {id(p) for p in self.params}
        self.frozen = sorted({name_of[id(p)] for p in model.parameters() if id(p) not in trained})
        self.unit_names = [f"{n}.{side}" for n in self.names[: len(self.matrices)] for side in ("L", "R")]
        self.unit_names += self.names[len(self.matrices) :]
        self.embeddings = [m for m in model.modules() if isinstance(m, torch.nn.Embedding)]

    def matrix(self, i: int, tensor: torch.Tensor) -> torch.Tensor:
        """Matrix ``i``'s ``tensor`` (its weight, W_0, or an update) as the p x d (out x in) matrix of Eqs. 1-3:
        a Conv1D's transpose, a view; applied twice it gives back the stored layout."""
        return tensor.T if self.transposed[i] else tensor

    def shapes(self, ranks: list[int]) -> list[tuple[int, ...]]:
        """Per-example shape of every unit for carriers of the given ranks."""
        out: list[tuple[int, ...]] = []
        for i, r in enumerate(ranks):
            p, d = self.matrix(i, self.matrices[i]).shape
            out += [(p, r), (r, d)]
        return out + [tuple(p.shape) for p in self.vectors]


class CarrierClipper:
    """Sum over examples of the joint per-example vector (carrier and non-matrix gradients) clipped to C.

    Sensitivity C (``sensitivity_factor`` 1): adding or removing one example moves the sum by at
    most its clipped vector, of norm <= C, whatever the carriers (they do not depend on the batch).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        loss_fn: LossFn,
        reparam: Reparametrization,
        *,
        clip_norm: float,
        physical_batch: int,
    ) -> None:
        self.model, self.loss_fn, self.reparam = model, loss_fn, reparam
        self.clip_norm = float(clip_norm)
        self.sensitivity_factor = 1.0
        self.sensitivity = self.clip_norm
        self.physical_batch = physical_batch
        self._carriers: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None
        self._linear_out: list[torch.Tensor | None] = []
        self._norm_out: list[torch.Tensor | None] = []
        for i, m in enumerate(reparam.linears):
            m.register_forward_hook(self._linear_hook(i))
        for i, m in enumerate(reparam.norms):
            m.register_forward_hook(self._norm_hook(i))
        for m in reparam.embeddings:
            m.register_forward_hook(self._embedding_hook)

    # -- hooks: active only inside per_example_grads ------------------------------------------

    def _embedding_hook(self, module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor | None:
        # The tables are frozen; a graph must still reach every layer's output for its tensor hook to fire.
        if self._carriers is not None and not output.requires_grad:
            return output.detach().requires_grad_(True)
        return None

    def _linear_hook(self, index: int) -> Callable:
        def hook(module: torch.nn.Linear, inputs: tuple, output: torch.Tensor) -> None:
            if self._carriers is None:
                return
            x = inputs[0].detach()
            left, right = self._carriers[0][index], self._carriers[1][index]

            def on_grad(g: torch.Tensor) -> None:
                b = g.shape[0]
                a2, g2 = x.reshape(b, -1, x.shape[-1]), g.reshape(b, -1, g.shape[-1])
                grad_left = torch.bmm(g2.transpose(1, 2), a2 @ right.T)  # sum_t g_t (R a_t)^T: [B, p, r]
                grad_right = torch.bmm((g2 @ left).transpose(1, 2), a2)  # sum_t (L^T g_t) a_t^T: [B, r, d]
                bias = g2.sum(1) if module.bias is not None else None
                self._linear_out[index] = (grad_left, grad_right, bias)

            output.register_hook(on_grad)

        return hook

    def _norm_hook(self, index: int) -> Callable:
        def hook(module: torch.nn.LayerNorm, inputs: tuple, output: torch.Tensor) -> None:
            if self._carriers is None:
                return
            x = inputs[0].detach()

            def on_grad(g: torch.Tensor) -> None:
                b = g.shape[0]
                xhat = F.layer_norm(x, module.normalized_shape, eps=module.eps).reshape(b, -1, x.shape[-1])
                g2 = g.reshape(b, -1, g.shape[-1])
                self._norm_out[index] = ((g2 * xhat).sum(1), g2.sum(1))

            output.register_hook(on_grad)

        return hook

    # -- per-example gradients and their clipped sum ----------------------------------------------

    def per_example_grads(
        self, batch: dict[str, torch.Tensor], lefts: list[torch.Tensor], rights: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """Per-example units ([B, ...] each, in :attr:`Reparametrization.unit_names` order), losses, correct."""
        reparam = self.reparam
        self._linear_out = [None] * len(reparam.linears)
        self._norm_out = [None] * len(reparam.norms)
        self._carriers = (lefts, rights)
        try:
            losses, correct = self.loss_fn(self.model, batch)
            losses.sum().backward()
        finally:
            self._carriers = None
            for p in reparam.vectors:  # autograd also summed them: unused (the clipped sum is ours)
                p.grad = None
        missing = [reparam.linear_names[i] for i, out in enumerate(self._linear_out) if out is None]
        if missing or any(out is None for out in self._norm_out):
            raise RuntimeError(f"no output gradient reached {missing[:3] or 'a LayerNorm'}: every layer must be used.")
        units: list[torch.Tensor] = []
        for grad_left, grad_right, _ in self._linear_out:
            units += [grad_left, grad_right]
        for _, kind, i in reparam.vector_specs:
            if kind == "bias":
                units.append(self._linear_out[i][2])
            else:
                units.append(self._norm_out[i][0 if kind == "ln_weight" else 1])
        self._linear_out, self._norm_out = [], []
        return units, losses.detach(), correct

    def clipped_sum(
        self, batch: dict[str, torch.Tensor], lefts: list[torch.Tensor], rights: list[torch.Tensor]
    ) -> Clipped:
        """Sum of the per-example vectors, each scaled to norm <= C, in chunks of ``physical_batch`` examples."""
        device = lefts[0].device
        acc = [torch.zeros(s, device=device) for s in self.reparam.shapes([left.shape[1] for left in lefts])]
        size = batch["input_ids"].shape[0]
        # Telemetry stays on the device (no host sync per chunk): float64 0-d tensors.
        loss_sum = correct_sum = clipped = torch.zeros((), dtype=torch.float64, device=device)
        for start in range(0, size, self.physical_batch):
            chunk = {k: v[start : start + self.physical_batch] for k, v in batch.items()}
            units, losses, correct = self.per_example_grads(chunk, lefts, rights)
            norms = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(u.flatten(1), dim=1) for u in units]), dim=0
            )
            factor = (self.clip_norm / norms.clamp(min=_TINY)).clamp(max=1.0)
            for a, u in zip(acc, units):
                a.add_(torch.tensordot(factor, u, dims=1))
            loss_sum = loss_sum + losses.sum().double()
            correct_sum = correct_sum + correct.sum().double()
            clipped = clipped + (norms > self.clip_norm).sum().double()
        return Clipped(grads=acc, loss_sum=loss_sum, correct_sum=correct_sum, units=size, clipped=clipped)
