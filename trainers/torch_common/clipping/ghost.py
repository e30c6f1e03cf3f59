"""Clipped sums in ONE backward pass: ghost norms and book-keeping for BERT, GPT-2 and Llama-style models (per example or
per micro-batch).

The clippers of :mod:`.per_example` and :mod:`.microbatch` materialize a gradient per example (``torch.func.vmap``) or per
micro-batch before clipping; on a 2-core CPU that costs 1.5-1.9x a non-private step, mostly memory
traffic. A BERT is made of ``nn.Linear``, ``nn.LayerNorm`` and ``nn.Embedding`` only (a Llama-style model has RMSNorm in
place of LayerNorm, covered the same way), and the gradient
of each is a sum over rows (tokens) of a per-row term built from the module's input ``a`` and output
gradient ``g``. So one ordinary backward pass, asked only for the modules' output gradients (autograd
then skips every weight gradient), gives everything needed (Li et al. 2022, "Large language models can
be strong differentially private learners", ghost clipping; Bu et al. 2023, "Differentially private
optimization on large model at small cost", book-keeping):

- the squared norm of each unit's gradient (a unit is an example in dp-sgd, a micro-batch in
  eDP-SGD), per clipping group: for a Linear weight ``||A_u^T G_u||_F^2``, computed either as
  ``sum((A_u A_u^T) * (G_u G_u^T))`` (ghost norm, T_u^2 (d + p) flops) or by forming the T_u d p
  product (whichever is cheaper); for an Embedding ``sum([id_s = id_t] g_s . g_t)`` (the sparse token
  trick); for a Linear bias whose weight takes the batched Gram form, the sum of the entries of
  ``G_u G_u^T`` (the bias gradient is the sum of G_u's rows), and its clipped sum is one
  matrix-vector product of G with each row's unit factor; for other biases and LayerNorm weights the
  norm of a segment sum; and, for the MLM decoder whose weight IS the word embedding (tied), the
  cross term ``2 <E_u, D_u>`` between the two uses;
- then the clipped sum itself, ``sum_u f_u grad_u``, as weighted row sums: ``A^T diag(w) G`` with
  ``w`` each row's unit factor: one matrix product per Linear, as in a non-private backward pass.

Unit rows: in per-example mode every example is a unit and the rows are reshaped ``[B, rows, .]``.
Micro-batches have unequal sizes: each unit's norms are computed on its own rows (a loop over the k
micro-batches, never over examples). Small micro-batches take the Gram form, batched: the real rows of
every captured tensor are copied once into a stack per feature width, and each micro-batch takes one
batched product per width for all its Gram matrices (:meth:`_Units.gram_norms`). Large micro-batches
(batch 512, k = 8: ~800 rows each) take the direct form, and the products are the micro-batch
gradients themselves: they are kept, and the clipped sum is their weighted sum (no second product);
an Embedding's micro-batch gradients are formed as tables by one scatter.

For modules over the token sequence (``<prefix>.embeddings`` and ``<prefix>.encoder``) only the real tokens enter the Gram matrices and the weighted products: padding
tokens have an exactly zero output gradient in a BERT with the additive -inf-like key mask (nothing
attends to them, no loss reads them), so leaving them out changes nothing and saves ~40% of the
weight-gradient products on short utterances. Other modules use all their rows.

GPT-2 (``--task clm``) adds ``transformers.pytorch_utils.Conv1D``: a Linear whose weight is stored
transposed (``[in, out]``, ``y = x W + b``), so its norms are the Linear's and its clipped sum is the
transpose of the Linear's product (``G^T diag(w) A`` becomes ``A^T diag(w) G``); the tied word embedding
(``wte``, read by the input lookup and by ``lm_head``) takes the MLM decoder's cross term, and the position
table ``wpe`` is an Embedding whose shared ``[1, T]`` ids are expanded per example. In a causal LM
trained with the causal mask alone (:func:`trainers.torch_common.model.causal_losses`) the padding tokens
after an example's last one are read by no real token and by no loss, so every module's token rows
leave them out, as the BERT encoder's do.

A Llama-style causal LM (``LlamaForCausalLM``: Touvron et al. 2023) adds only its RMSNorms (Zhang and Sennrich
2019), whose weight's gradient is, like a LayerNorm's, a sum over rows of ``g`` times the input normalized (here by
its root mean square, without centring); its rotary positions have no parameter and its SwiGLU feed-forward is three
Linears.

Exactness against the vmap clippers is tested (tests/trainers/edp_sgd/test_ghost.py, test_ghost_gpt2.py,
test_presets.py for the Llama-style model).
A model with a trainable parameter outside these module types, or a module called twice in one forward,
is refused (:class:`UnsupportedModel`): the trainer then uses the vmap clippers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from transformers.pytorch_utils import Conv1D

from dpaudit.scoring.source import CAUSAL_LM, architecture_kind
from dpaudit.trainers.torch_common.clipped import Clipped, LossFn
from dpaudit.trainers.torch_common.clipping.per_example import trainable
from dpaudit.trainers.torch_common.distributed import to_device
from dpaudit.trainers.torch_common.pass_size import PassSize, is_rms_norm

_TINY = 1e-12


class UnsupportedModel(ValueError):
    """The model has a parameter the ghost clipper cannot attribute to rows (use the vmap clippers)."""


@dataclass
class _Capture:
    name: str
    module: torch.nn.Module
    x: torch.Tensor  # input (ids for an Embedding)
    y: torch.Tensor  # output (its gradient is asked for)


class _Row(NamedTuple):
    """A captured module's rows: its input ``x`` and output gradient ``g`` as [rows, width] (ids: [rows])."""

    cap: _Capture
    x: torch.Tensor
    g: torch.Tensor
    r: int  # rows per example
    seq: bool  # token rows (padding rows are left out of the products)


@dataclass
class _Norms:
    """What :meth:`GhostClipper._unit_norms` finds: the squared norms and the terms the clipped sum reuses."""

    sq: torch.Tensor  # [L, U] squared norm of unit u's gradient in clipping group l
    row_sums: dict[int, int]  # Linear bias parameter -> its row, summed as factor-weighted rows
    segments: dict[int, torch.Tensor]  # parameter -> [U, size] per-unit gradients (biases, LayerNorm weights)


_KINDS = (torch.nn.Linear, Conv1D, torch.nn.LayerNorm, torch.nn.Embedding)


def _supported(module: torch.nn.Module) -> bool:
    return isinstance(module, _KINDS) or is_rms_norm(module)


def _kind(module: torch.nn.Module) -> str:
    """The module's kind as the clipper groups them (every RMSNorm class is one kind)."""
    return "RMSNorm" if is_rms_norm(module) else type(module).__name__


def _normalized(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A LayerNorm's or an RMSNorm's input normalized, without its weight: what the weight multiplies."""
    if isinstance(module, torch.nn.LayerNorm):
        return F.layer_norm(x, module.normalized_shape, None, None, module.eps)
    eps = getattr(module, "variance_epsilon", None)
    if eps is None:
        eps = module.eps if module.eps is not None else torch.finfo(x.dtype).eps
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


_MATRIX = (torch.nn.Linear, Conv1D)  # weight gradients x^T g (Linear: stored as g^T x; Conv1D: as x^T g)


def _supported_uses(model: torch.nn.Module) -> dict[int, list[tuple[str, torch.nn.Module, str]]]:
    """Each trainable parameter's uses as (module name, module, role) by Linear, LayerNorm, RMSNorm and Embedding
    modules; refuses a parameter held only by another kind of module (HF's MLM head also registers the
    decoder's bias on itself: that alias is fine)."""
    uses: dict[int, list[tuple[str, torch.nn.Module, str]]] = {}
    other: dict[int, str] = {}
    for name, module in model.named_modules():
        for role, p in module.named_parameters(recurse=False):
            if not p.requires_grad:
                continue
            if _supported(module):
                uses.setdefault(id(p), []).append((name, module, role))
            else:
                other[id(p)] = f"parameter {name}.{role} belongs to a {type(module).__name__}"
    for key, why in other.items():
        if key not in uses:
            raise UnsupportedModel(why)
    return uses


class GhostClipper:
    """Sum over units (examples or micro-batches) of their per-group clipped gradients, in one backward.

    ``bounds[l]`` is the clip norm of group l, ``param_groups[i]`` the group of trainable parameter i
    (one group of bound C for per-example clipping). The sensitivity is stated by the caller's
    clipper (:class:`~.per_example.PerExampleClipper` / :class:`~.microbatch.MicrobatchClipper`): this
    class computes the same sum, faster.
    """

    def __init__(
        self, model: torch.nn.Module, loss_fn: LossFn, *, bounds: list[float], param_groups: list[int]
    ) -> None:
        self.model, self.loss_fn = model, loss_fn
        self.names, self.params = trainable(model)
        uses = _supported_uses(model)
        self.param_index = {id(p): i for i, p in enumerate(self.params)}
        for n, p in zip(self.names, self.params):
            kinds = sorted(_kind(m) for _, m, _ in uses.get(id(p), []))
            if kinds not in (
                ["Linear"],
                ["Conv1D"],
                ["LayerNorm"],
                ["RMSNorm"],
                ["Embedding"],
                ["Embedding", "Linear"],
            ):
                raise UnsupportedModel(f"parameter {n} is used by {kinds or 'no module'}")
        self.modules = {
            name: module
            for name, module in model.named_modules()
            if _supported(module) and any(p.requires_grad for p in module.parameters(recurse=False))
        }
        self.pass_size = PassSize(model)  # --ghost-chunk's default
        prefix = getattr(model, "base_model_prefix", "")
        causal = architecture_kind(type(model).__name__) == CAUSAL_LM  # every token row: see the docstring
        self._seq_prefixes = (
            tuple(f"{prefix}.{part}." for part in ("embeddings", "encoder")) if prefix and not causal else ("",)
        )
        self.bounds = [float(b) for b in bounds]
        self.param_groups = list(param_groups)
        self._captures: list[_Capture] | None = None
        self._bounds: torch.Tensor | None = None
        self._batch_size = 0
        for name, module in self.modules.items():
            module.register_forward_pre_hook(self._pre_hook)
            module.register_forward_hook(self._make_hook(name))

    # -- hooks ---------------------------------------------------------------------------------

    def _pre_hook(self, module: torch.nn.Module, args: tuple) -> tuple | None:
        """Embedding ids shared by the batch ([1, T] position ids) are expanded to [B, T], so that
        the embedding's output gradient stays per example (the sum is the same)."""
        if self._captures is None or not isinstance(module, torch.nn.Embedding):
            return None
        ids = args[0]
        if ids.dim() >= 1 and ids.shape[0] == 1 and self._batch_size > 1:
            return (ids.expand(self._batch_size, *ids.shape[1:]),)
        return None

    def _make_hook(self, name: str) -> Callable:
        def hook(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
            if self._captures is None:
                return
            if any(c.module is module for c in self._captures):
                raise UnsupportedModel(f"module {name} ran twice in one forward pass")
            self._captures.append(
                _Capture(name, module, args[0].detach() if args[0].is_floating_point() else args[0], output)
            )

        return hook

    # -- the clipped sum ---------------------------------------------------------------------

    def _gram_entries(self, rows: list[_Row], units: _Units) -> dict[tuple[int, bool], list[tuple]]:
        """The captures whose micro-batch weight norms :meth:`_Units.gram_norms` computes together, by
        row layout (rows per example, token rows): the Embedding and Linear layers where the Gram form
        is the cheaper for the layout's largest unit; the others keep the per-capture path."""
        entries: dict[tuple[int, bool], list[tuple]] = {}
        for j, (cap, x, g, r, seq) in enumerate(rows):
            m = cap.module
            if not _is_trained_weight(m):
                continue
            largest = max(units.counts(r, seq), default=0)
            if (isinstance(m, torch.nn.Embedding) and _embedding_gram_is_cheaper(largest, m.num_embeddings)) or (
                isinstance(m, _MATRIX) and _gram_is_cheaper(largest, x.shape[1], g.shape[1])
            ):
                entries.setdefault((r, seq), []).append((j, isinstance(m, torch.nn.Embedding), x, g))
        return entries

    def clipped_sum(
        self,
        batch: dict[str, torch.Tensor],
        owner: np.ndarray,
        num_units: int,
        *,
        valid: torch.Tensor | None = None,
        extra_sq: torch.Tensor | None = None,
        chunk: int | None = None,
    ) -> Clipped:
        """:meth:`_clipped_sum_once` over whole units of at most ``chunk`` examples at a time (a unit larger than
        ``chunk`` alone), summed: the same clipped sum (each unit's norm and factor depend on its own examples
        only), in less memory. The forward and backward pass holds every captured activation and output gradient
        of the examples it runs (a masked LM's [B, L, vocab] logits among them: 4 GB at B = 512, L = 32 and BERT's
        30,522 tokens), so a large logical batch (Anil et al.'s) needs it. ``owner`` may list the units'
        examples in any order (they are grouped first); every unit holds at least one example, as the trainers'
        do. ``chunk`` None: :attr:`pass_size`'s bound at the batch's length; a batch of at most ``chunk`` examples
        runs in one pass."""
        size = len(owner)
        if chunk is None:
            chunk = self.pass_size.examples(int(batch["input_ids"].shape[1]))
        if size <= chunk or num_units <= 1:
            return self._clipped_sum_once(batch, owner, num_units, valid=valid, extra_sq=extra_sq)
        if valid is None:
            valid = (batch["mask4"][:, 0, 0, :] == 0).cpu()
        order = np.argsort(np.asarray(owner), kind="stable")  # each unit's examples together, in unit order
        if np.any(order != np.arange(size)):
            rows = torch.as_tensor(order)
            batch = {key: v[rows.to(v.device)] for key, v in batch.items()}
            valid, owner = valid[rows], np.asarray(owner)[order]
        ends = np.searchsorted(owner, np.arange(1, num_units + 1), side="left")  # each unit's end in the batch
        total: Clipped | None = None
        factors: list[torch.Tensor] = []
        first = 0  # the chunk's first unit
        while first < num_units:
            begin = int(ends[first - 1]) if first else 0
            last = first + 1
            while last < num_units and int(ends[last]) - begin <= chunk:
                last += 1
            end = int(ends[last - 1])
            rows = torch.arange(begin, end)
            on_device = rows.to(self.params[0].device)
            part = self._clipped_sum_once(
                {key: v[on_device] for key, v in batch.items()},
                owner[begin:end] - first,
                last - first,
                valid=valid[rows],
                extra_sq=None if extra_sq is None else extra_sq[:, first:last],
            )
            factors += [part.factors] if part.factors is not None else []
            if total is None:
                total = part
            else:  # summed as it goes: one gradient in memory beside the chunk's
                for g, h in zip(total.grads, part.grads):
                    g.add_(h)
                total.loss_sum = total.loss_sum + part.loss_sum
                total.correct_sum = total.correct_sum + part.correct_sum
                total.clipped = total.clipped + part.clipped
            first = last
        if total is None:  # unreachable: num_units >= 2
            raise ValueError("clipped_sum: no unit")
        total.units = num_units
        total.factors = torch.cat(factors, dim=1) if factors else None
        return total

    def _clipped_sum_once(
        self,
        batch: dict[str, torch.Tensor],
        owner: np.ndarray,
        num_units: int,
        *,
        valid: torch.Tensor | None = None,
        extra_sq: torch.Tensor | None = None,
    ) -> Clipped:
        """Clipped sum over ``num_units`` units; ``owner[i]`` is the unit of example i of ``batch``.

        ``valid`` [B, T] (CPU, bool) marks real tokens (default: the batch's additive mask);
        ``extra_sq`` [L, num_units]: squared norms per group of gradient parts the units hold outside the
        model (a white-box audit's block, :mod:`trainers.torch_common.canary_block`), added before the clip
        factors are taken and so clipped with the units (the factors are returned, ``Clipped.factors``);
        ``owner == arange(B) // K`` (units of K consecutive examples: one example each at K = 1, an example's
        ``--mask-draws`` rows at K > 1, or micro-batches that happen to be so laid out: the same sums) selects the
        batched layout. Four steps: one forward and one backward pass for the modules' inputs and output gradients
        (:meth:`_captured_rows`), each unit's squared gradient norm per clipping group (:meth:`_unit_norms`), the
        clip factors (:meth:`_clip_factors`), and the factor-weighted sum of the units' gradients
        (:meth:`_weighted_sum`).
        """
        device = self.params[0].device
        size = len(owner)
        if size == 0 or num_units == 0:
            zero = torch.zeros((), dtype=torch.float64, device=device)
            return Clipped(
                grads=[torch.zeros_like(p) for p in self.params],
                loss_sum=zero,
                correct_sum=zero.clone(),
                units=0,
                clipped=zero.clone(),
            )
        group = size // num_units  # the batched layout: units of ``group`` consecutive examples each
        batched = size == group * num_units and bool(np.all(owner == np.arange(size) // group))
        if valid is None:
            valid = (batch["mask4"][:, 0, 0, :] == 0).cpu()
        units = _Units(
            torch.as_tensor(owner, dtype=torch.long), num_units, valid, group=group if batched else None, device=device
        )
        losses, correct, rows = self._captured_rows(batch, size, seq_len=int(valid.shape[1]))
        by_param: dict[int, list[int]] = {}  # trainable parameter -> the rows of the modules that use it
        for j, row in enumerate(rows):
            for p in row.cap.module.parameters(recurse=False):
                if p.requires_grad:
                    by_param.setdefault(self.param_index[id(p)], []).append(j)
        norms = self._unit_norms(rows, by_param, units)
        factors = self._clip_factors(norms.sq if extra_sq is None else norms.sq + extra_sq.to(norms.sq.dtype))
        grads = self._weighted_sum(rows, by_param, units, norms, factors)
        clipped = (factors < 1.0).any(0).sum().double()
        return Clipped(
            grads=grads,
            loss_sum=losses.detach().sum().double(),
            correct_sum=correct.detach().sum().double(),
            units=num_units,
            clipped=clipped,
            factors=factors,
        )

    def _captured_rows(
        self, batch: dict[str, torch.Tensor], size: int, *, seq_len: int
    ) -> tuple[torch.Tensor, torch.Tensor, list[_Row]]:
        """(per-example losses, correct flags, one :class:`_Row` per captured module that got a gradient):
        the forward pass with the hooks capturing, then ONE backward pass asked only for the modules'
        output gradients (autograd skips every weight gradient)."""
        self._captures, self._batch_size = [], size
        try:
            losses, correct = self.loss_fn(self.model, batch)
            captures = self._captures
        finally:
            self._captures = None
        grads_out = torch.autograd.grad(losses.sum(), [c.y for c in captures], allow_unused=True)
        rows: list[_Row] = []
        for cap, g in zip(captures, grads_out):
            if g is None:
                continue
            r = g.numel() // (size * g.shape[-1])
            seq = r == seq_len and cap.name.startswith(self._seq_prefixes)
            x = cap.x.reshape(size * r, -1) if cap.x.is_floating_point() else cap.x.reshape(size * r)
            rows.append(_Row(cap, x, g.reshape(size * r, g.shape[-1]), r, seq))
        return losses, correct, rows

    def _unit_norms(self, rows: list[_Row], by_param: dict[int, list[int]], units: _Units) -> _Norms:
        """Each unit's squared gradient norm per clipping group, summed over the parameters of the group:
        the Gram form batched over units for the layers where it is cheaper (outside the batched layout), else
        per capture by its kind (Embedding, Linear weight, bias or LayerNorm weight), plus the cross term
        of a tied weight. Also what :meth:`_weighted_sum` reuses: the biases whose norms came from their
        weight's Gram matrices and the per-unit gradients of biases and LayerNorm weights."""
        device, num_units = units.device, units.num_units
        sq = torch.zeros((len(self.bounds), num_units), dtype=torch.float32, device=device)  # [L, U]
        gram_sq: dict[int, torch.Tensor] = {}
        gram_bias: dict[int, torch.Tensor] = {}  # capture -> [U] bias norms, from the weight's Gram matrices
        if not units.batched:
            for (r, seq), entries in self._gram_entries(rows, units).items():
                weights, biases = units.gram_norms(entries, r, seq)
                gram_sq.update(weights)
                gram_bias.update(biases)
        row_sums: dict[int, int] = {}  # bias param -> its capture: clipped sum as factor-weighted row sums
        segments: dict[int, torch.Tensor] = {}  # param -> [U, size] per-unit gradients of biases and LayerNorms
        for i, js in by_param.items():
            total = torch.zeros(num_units, dtype=torch.float32, device=device)
            p = self.params[i]
            for j in js:
                cap, x, g, r, seq = rows[j]
                m = cap.module
                if isinstance(m, torch.nn.Embedding):
                    total = total + (gram_sq[j] if j in gram_sq else units.embedding_sq(r, seq, x, g, m.num_embeddings))
                elif p is m.weight and isinstance(m, _MATRIX):
                    total = total + (gram_sq[j] if j in gram_sq else units.linear_sq(r, seq, x, g))
                elif j in gram_bias and p is m.bias and len(js) == 1:
                    total = total + gram_bias[j]
                    row_sums[i] = j
                else:  # a bias, or a LayerNorm / RMSNorm weight (g times the normalized input): per-unit row sums
                    term = g * _normalized(m, x) if p is m.weight else g
                    part = units.segment_sums(term, r)
                    segments[i] = segments[i] + part if i in segments else part
            if i in segments:
                total = total + segments[i].pow(2).sum(1)
            if len(js) == 2:  # a tied Embedding + Linear weight: the cross term 2 <E_u, D_u>
                (je,), (jd,) = (
                    [j for j in js if isinstance(rows[j].cap.module, kind)]
                    for kind in (torch.nn.Embedding, torch.nn.Linear)
                )
                total = total + 2.0 * units.cross(rows[je], rows[jd])
            sq[self.param_groups[i]] += total
        return _Norms(sq=sq, row_sums=row_sums, segments=segments)

    def _clip_factors(self, sq: torch.Tensor) -> torch.Tensor:
        """[L, U] factors min(1, C_l / ||unit u's gradient in group l||) from the squared norms ``sq``."""
        if self._bounds is None or self._bounds.device != sq.device:
            self._bounds = to_device(torch.tensor(self.bounds, dtype=torch.float32), sq.device)
        return (self._bounds[:, None] / sq.sqrt().clamp(min=_TINY)).clamp(max=1.0)

    def _weighted_sum(
        self, rows: list[_Row], by_param: dict[int, list[int]], units: _Units, norms: _Norms, factors: torch.Tensor
    ) -> list[torch.Tensor]:
        """``sum_u f_u grad_u`` for every trainable parameter, as weighted row sums (``A^T diag(w) G``
        per Linear, a scatter per Embedding), or from the per-unit gradients already formed for the norms.

        Each parameter's clipped sum is written by its first term and accumulated by the others (a
        tied weight has two): no zero-filled buffers for the ~all parameters that have one term.
        """
        acc: list[torch.Tensor | None] = [None] * len(self.params)
        scaled: dict[tuple, torch.Tensor] = {}

        def times_factor(t: torch.Tensor, rows_owner: torch.Tensor, group: int) -> torch.Tensor:
            """The rows of ``t`` times their unit's factor in ``group``, made once per (tensor, group):
            q, k and v share their input, the word, position and token-type lookups their output gradient."""
            key = (t.data_ptr(), tuple(t.shape), group)
            if key not in scaled:
                scaled[key] = t * factors[group][rows_owner][:, None]
            return scaled[key]

        for i, js in by_param.items():
            p, f = self.params[i], factors[self.param_groups[i]]
            if i in norms.segments:  # sum_u f_u (per-unit gradient)
                acc[i] = f @ norms.segments[i]
                continue
            if i in norms.row_sums:  # a Linear's bias: sum over the real rows of f_(row's unit) g_row
                cap, x, g, r, seq = rows[norms.row_sums[i]]
                _, g, rows_owner = units.real_rows(r, seq, x, g)
                acc[i] = torch.mv(g.T, f[rows_owner])
                continue
            for j in js:
                cap, x, g, r, seq = rows[j]
                m = cap.module
                if isinstance(m, torch.nn.Embedding):  # scatter f_(row's unit) g_row over the real rows
                    ids, g, rows_owner = units.real_rows(r, seq, x, g)
                    if acc[i] is None:
                        acc[i] = torch.zeros_like(p)
                    acc[i].index_add_(0, ids, times_factor(g, rows_owner, self.param_groups[i]))
                    continue
                conv = isinstance(m, Conv1D)  # its weight is the transpose: [in, out]
                if (x.data_ptr(), g.data_ptr(), r, seq) in units.kept:  # sum_u f_u grad_u
                    term = torch.tensordot(f, units.kept[(x.data_ptr(), g.data_ptr(), r, seq)], dims=1)
                    term = term.T.contiguous() if conv else term
                    acc[i] = term if acc[i] is None else acc[i].add_(term)
                    continue
                # G^T diag(f) A over the real rows (Conv1D: its transpose), the factors on the narrower side
                x, g, rows_owner = units.real_rows(r, seq, x, g)
                narrow = x if x.shape[1] <= g.shape[1] else g
                weighted = times_factor(narrow, rows_owner, self.param_groups[i])
                a, b = (g.T, weighted) if narrow is x else (weighted.T, x)
                if conv:
                    a, b = b.T, a.T
                acc[i] = torch.mm(a, b) if acc[i] is None else acc[i].addmm_(a, b)
        return [a if a is not None else torch.zeros_like(p) for a, p in zip(acc, self.params)]


def _gram_is_cheaper(rows: int, d: int, p: int) -> bool:
    """Whether ``||x^T g||_F^2`` over ``rows`` rows costs less as the Gram form (rows^2 (d + p) flops)
    than as the direct product (rows d p flops)."""
    return rows * (d + p) < d * p


#: How many multiply-adds of a batched Gram product cost about as much as one element of a gradient
#: table (zeroed, scattered into and read for its norm: memory-bound). Profiled on a 2-core CPU at
#: batch 32, k = 8: the position and token-type tables cost 5.5 ms of zero-fills and 2.8 ms of
#: scatters per step; in the Gram form they reuse the output gradient's Gram that the word embedding
#: already needs, so only the id-equality products are added.
_TABLE_ELEMENT_COST = 16


def _embedding_gram_is_cheaper(rows: int, vocab: int) -> bool:
    """Whether a unit's Embedding gradient norm over ``rows`` rows costs less as the Gram form (rows^2
    products of width d, in the batched call) than as its gradient table ((rows + vocab) elements of
    width d, memory-bound: :data:`_TABLE_ELEMENT_COST`)."""
    return rows * rows < _TABLE_ELEMENT_COST * (rows + vocab)


def _is_trained_weight(module: torch.nn.Module) -> bool:
    return module.weight.requires_grad


def _lin_sq(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """[U] squared Frobenius norms of x_u^T g_u for x [U, T, d], g [U, T, p]: ghost or direct, the cheaper."""
    t, d, p = x.shape[1], x.shape[2], g.shape[2]
    if _gram_is_cheaper(t, d, p):
        return ((x @ x.transpose(1, 2)) * (g @ g.transpose(1, 2))).sum((1, 2))
    return (x.transpose(1, 2) @ g).pow(2).sum((1, 2))


def _emb_sq(ids: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """[U] squared norms of the embedding gradient sum_t onehot(id_t) g_t^T for ids [U, T], g [U, T, d]."""
    same = ids[:, :, None] == ids[:, None, :]
    return ((g @ g.transpose(1, 2)) * same).sum((1, 2))


def _cross(ids: torch.Tensor, ge: torch.Tensor, a: torch.Tensor, gd: torch.Tensor) -> torch.Tensor:
    """[U] <E_u, D_u> of a tied weight: E_u = sum_t onehot(id_t) ge_t^T (lookup), D_u = sum_s gd_s a_s^T (decoder)."""
    picked = torch.gather(gd, 2, ids[:, None, :].expand(-1, gd.shape[1], -1))  # [U, S, T]: gd_s[id_t]
    return ((ge @ a.transpose(1, 2)) * picked.transpose(1, 2)).sum((1, 2))


#: Each unit's Gram matrices are computed over a window of a multiple of this many rows (its own rows,
#: then the next unit's or zero rows) and read from the window's [n, n] corner: the small batched
#: products run up to ~30% faster on 8-row multiples, which more than pays for the extra rows (2-core
#: AVX-512 CPU, 37 Gram matrices of width 312 and 8 of width 1200: 71 rows 1.68 ms, 72 rows 1.26 ms;
#: :meth:`_Units.gram_norms` of a BERT-mini step at batch 32, k = 8: 6% sooner).
_GRAM_ROWS = 8

#: At most this many bytes of unit gradients kept per step (:meth:`_Units.linear_sq`); beyond it the
#: clipped sum recomputes the products instead.
_KEEP_BYTES = 1 << 29


class _Units:
    """Which rows belong to which unit, for each row layout (rows per example ``r``; ``seq`` = token rows)."""

    def __init__(
        self,
        owner: torch.Tensor,
        num_units: int,
        valid: torch.Tensor,
        *,
        group: int | None,
        device: torch.device,
    ) -> None:
        self.owner_cpu, self.num_units, self.valid = owner, num_units, valid.bool()
        #: ``group`` K: the batched layout, units of K consecutive examples each (one example at K = 1, an example's
        #: --mask-draws rows at K > 1), so a unit's rows are K x r consecutive rows and every product is one batched
        #: reshape; None: units of any examples (micro-batches), grouped by index.
        self.batched, self.device, self.group = group is not None, device, group or 1
        self.owner = to_device(owner, device)
        self._row_owner: dict[int, torch.Tensor] = {}
        self._membership: torch.Tensor | None = None  # [U, B]: example b is in unit u
        self._unit_rows: dict[tuple[int, bool], tuple[torch.Tensor, list[int]]] = {}
        #: Layouts whose rows grouped by unit are all rows in their own order (every token real, units in example
        #: order: per-example clipping of unpadded rows), where :meth:`_select` returns the tensor, not a copy.
        self._identity: set[tuple[int, bool]] = set()
        self._split: dict[tuple, tuple[torch.Tensor, ...]] = {}
        self._gram: dict[tuple, torch.Tensor] = {}
        #: Unit gradients [U, out, in] of Linear weights that took the direct product (:meth:`linear_sq`).
        self.kept: dict[tuple, torch.Tensor] = {}
        self._kept_bytes = 0

    def row_owner(self, r: int) -> torch.Tensor:
        if r not in self._row_owner:
            self._row_owner[r] = self.owner.repeat_interleave(r)
        return self._row_owner[r]

    def _rows(self, r: int, seq: bool) -> tuple[torch.Tensor, list[int]]:
        """Row indices grouped by unit (real tokens only for token rows) and each unit's count; built on the CPU."""
        key = (r, seq)
        if key not in self._unit_rows:
            b = len(self.owner_cpu)
            row_owner = self.owner_cpu.repeat_interleave(r)
            keep = self.valid.reshape(-1) if seq else torch.ones(b * r, dtype=torch.bool)
            idx = torch.nonzero(keep).squeeze(1)
            order = torch.argsort(row_owner[idx], stable=True)
            idx = idx[order]
            counts = torch.bincount(row_owner[idx], minlength=self.num_units).tolist()
            self._unit_rows[key] = (to_device(idx, self.device), counts)
            if len(idx) == b * r and torch.equal(idx, torch.arange(b * r)):
                self._identity.add(key)
        return self._unit_rows[key]

    def embedding_sq(self, r: int, seq: bool, ids: torch.Tensor, g: torch.Tensor, vocab: int) -> torch.Tensor:
        """[U] squared norms of each unit's Embedding weight gradient: per example by the sparse token
        trick; per micro-batch by forming the units' gradient tables ([U, vocab, d], one scatter), in
        slices of units when that would exceed :data:`_KEEP_BYTES` (the Gram form of
        :meth:`gram_norms` is the cheaper one for small units of a large vocabulary)."""
        if self.batched:
            u, rows = self.num_units, self.group * r
            return _emb_sq(ids.reshape(u, rows), g.reshape(u, rows, -1))
        idx, counts = self._rows(r, seq)
        d = g.shape[1]
        per_slice = max(1, _KEEP_BYTES // (vocab * d * g.element_size()))
        out, start = [], 0
        for first in range(0, self.num_units, per_slice):
            units = counts[first : first + per_slice]
            n = sum(units)
            rows = idx[start : start + n]
            slot = torch.repeat_interleave(
                to_device(torch.arange(len(units)), self.device),
                to_device(torch.tensor(units), self.device),
                output_size=n,
            )
            tables = torch.zeros((len(units) * vocab, d), dtype=g.dtype, device=self.device)
            tables.index_add_(0, slot * vocab + ids.index_select(0, rows), g.index_select(0, rows))
            out.append(torch.linalg.vector_norm(tables.view(len(units), -1), dim=1).pow(2))
            start += n
        return torch.cat(out)

    def linear_sq(self, r: int, seq: bool, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """[U] squared norms of each unit's Linear weight gradient ``x_u^T g_u``, ghost or direct per unit
        (the cheaper); the input's rows and Gram matrices are cached, as q, k and v share one input."""
        d, p = x.shape[1], g.shape[1]
        key = (x.data_ptr(), tuple(x.shape), r, seq)
        if self.batched:
            u, rows = self.num_units, self.group * r
            xb, gb = x.reshape(u, rows, d), g.reshape(u, rows, p)
            if not _gram_is_cheaper(rows, d, p):
                return (xb.transpose(1, 2) @ gb).pow(2).sum((1, 2))
            if key not in self._gram:
                self._gram[key] = xb @ xb.transpose(1, 2)
            return (self._gram[key] * (gb @ gb.transpose(1, 2))).sum((1, 2))
        _, counts = self._rows(r, seq)
        xs, gs = self._select(x, r, seq).split(counts), self._select(g, r, seq).split(counts)
        size = self.num_units * d * p * x.element_size()
        if not any(_gram_is_cheaper(n, d, p) for n in counts if n) and self._kept_bytes + size <= _KEEP_BYTES:
            # every unit takes the direct product: keep the products (the unit gradients), so that the
            # clipped sum is their weighted sum instead of a second product over all rows (large units)
            products = torch.zeros((self.num_units, p, d), dtype=x.dtype, device=self.device)
            for u, (xu, gu, n) in enumerate(zip(xs, gs, counts)):
                if n:
                    torch.mm(gu.T, xu, out=products[u])
            self.kept[(x.data_ptr(), g.data_ptr(), r, seq)] = products
            self._kept_bytes += size
            return torch.linalg.vector_norm(products.flatten(1), dim=1).pow(2)
        out = []
        for u, (xu, gu, n) in enumerate(zip(xs, gs, counts)):
            if n == 0:
                out.append(torch.zeros(1, device=self.device))
            elif _gram_is_cheaper(n, d, p):
                if (key, u) not in self._gram:
                    self._gram[(key, u)] = xu @ xu.T
                out.append((self._gram[(key, u)] * (gu @ gu.T)).sum().reshape(1))
            else:
                out.append((xu.T @ gu).pow(2).sum().reshape(1))
        return torch.cat(out)

    def counts(self, r: int, seq: bool) -> list[int]:
        """Rows per unit (real tokens only for token rows)."""
        return self._rows(r, seq)[1]

    def gram_norms(
        self, entries: list[tuple[int, bool, torch.Tensor, torch.Tensor]], r: int, seq: bool
    ) -> tuple[dict[int, torch.Tensor], dict[int, torch.Tensor]]:
        """({capture j: [U] squared norm of each unit's weight gradient}, {Linear capture j: [U] squared
        norm of each unit's bias gradient}) for captures (j, is embedding, x or ids, g) of one row layout
        (``r`` rows per example; ``seq``: token rows, real ones only). The weight's is
        ``sum(K_u * (G_u G_u^T))`` with K_u the unit's input Gram matrix (Linear) or id-equality matrix
        (Embedding, the sparse token trick); the bias gradient is the sum of the unit's rows of G, so its
        squared norm is the sum of all entries of G_u G_u^T, which is at hand.

        The same products as :meth:`linear_sq`, batched: the real rows of every distinct tensor are
        copied once into one [tensors, rows, width] stack per feature width (q, k and v share their
        input), and each unit then takes ONE batched product per width for all its Gram matrices,
        instead of two small products per capture. On a 2-core CPU at k = 8 and batch 32 the loop of
        small products cost about 20% of a non-private step and did not use the second core.
        """
        if not entries:
            return {}
        idx, counts = self._rows(r, seq)
        slots: dict[tuple, tuple[int, int]] = {}
        feats: dict[int, list[torch.Tensor]] = {}

        def slot(t: torch.Tensor) -> tuple[int, int]:
            key = (t.data_ptr(), tuple(t.shape))
            if key not in slots:
                slots[key] = (t.shape[1], len(feats.setdefault(t.shape[1], [])))
                feats[t.shape[1]].append(t)
            return slots[key]

        pairs = [(j, None if is_emb else slot(x), slot(g)) for j, is_emb, x, g in entries]
        stacks, base = [], {}
        for width, tensors in feats.items():
            # _GRAM_ROWS - 1 zero rows at the end: the last unit's Gram window reads past its rows too
            buf = torch.empty(
                (len(tensors), len(idx) + _GRAM_ROWS - 1, width), dtype=tensors[0].dtype, device=self.device
            )
            buf[:, len(idx) :].zero_()
            for i, t in enumerate(tensors):
                torch.index_select(t, 0, idx, out=buf[i, : len(idx)])
                self._split[(t.data_ptr(), tuple(t.shape), r, seq)] = buf[i, : len(idx)]  # reused by the weighted sums
            base[width] = sum(s.shape[0] for s in stacks)
            stacks.append(buf)
        at = lambda s: base[s[0]] + s[1]
        lin = [(j, at(xs), at(gs)) for j, xs, gs in pairs if xs is not None]
        emb = [(j, at(gs)) for j, xs, gs in pairs if xs is None]
        as_index = lambda v: to_device(torch.tensor(v, dtype=torch.long), self.device)
        lin_x, lin_g = as_index([x for _, x, _ in lin]), as_index([g for _, _, g in lin])
        emb_g = as_index([g for _, g in emb])
        ids = (
            torch.stack([x.reshape(-1).index_select(0, idx) for _, is_emb, x, _ in entries if is_emb]) if emb else None
        )
        tensors = sum(len(s) for s in stacks)
        cols_lin, cols_bias, cols_emb, start = [], [], [], 0
        for n in counts:
            if n == 0:
                cols_lin.append(torch.zeros(len(lin), device=self.device))
                cols_bias.append(torch.zeros(len(lin), device=self.device))
                cols_emb.append(torch.zeros(len(emb), device=self.device))
                continue
            m = n + (-n) % _GRAM_ROWS  # rows of the Gram window; the unit's own Gram matrices are its [:n, :n] corner
            window = torch.empty((tensors, m, m), dtype=stacks[0].dtype, device=self.device)
            for s in stacks:  # each width's Gram matrices straight into their rows of ``window``
                v, lo = s[:, start : start + m], base[s.shape[2]]
                torch.bmm(v, v.transpose(1, 2), out=window[lo : lo + len(s)])
            grams = window[:, :n, :n]  # [tensors, n, n]
            if lin:
                g_grams = grams.index_select(0, lin_g)
                cols_lin.append((grams.index_select(0, lin_x) * g_grams).sum((1, 2)))
                cols_bias.append(g_grams.sum((1, 2)))
            if emb:
                e = ids[:, start : start + n]
                cols_emb.append((grams.index_select(0, emb_g) * (e[:, :, None] == e[:, None, :])).sum((1, 2)))
            start += n
        out: dict[int, torch.Tensor] = {}
        bias: dict[int, torch.Tensor] = {}
        if lin:
            table, sums = torch.stack(cols_lin, 1), torch.stack(cols_bias, 1)
            out.update({j: table[k] for k, (j, _, _) in enumerate(lin)})
            bias.update({j: sums[k] for k, (j, _, _) in enumerate(lin)})
        if emb:
            table = torch.stack(cols_emb, 1)
            out.update({j: table[k] for k, (j, _) in enumerate(emb)})
        return out, bias

    def _select(self, t: torch.Tensor, r: int, seq: bool) -> torch.Tensor:
        """The rows of ``t`` grouped by unit (real tokens only for token rows), cached per tensor; ``t`` itself when
        that is every row in order (the copies of the [B x T, d] captures were 12% of the clipped sum's CPU in a profile
        of GPT-2 small at 8 x 128 unpadded tokens)."""
        idx = self._rows(r, seq)[0]
        if (r, seq) in self._identity:
            return t
        key = (t.data_ptr(), tuple(t.shape), r, seq)
        if key not in self._split:
            self._split[key] = t.index_select(0, idx)
        return self._split[key]

    def real_rows(self, r: int, seq: bool, x: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(x rows, g rows, their units) without the padding tokens of token rows (their g is zero)."""
        if not seq:
            return x, g, self.row_owner(r)
        _, counts = self._rows(r, seq)
        key = ("owner", r, seq)
        if key not in self._split:
            self._split[key] = torch.repeat_interleave(
                to_device(torch.arange(self.num_units), self.device),
                to_device(torch.tensor(counts), self.device),
                output_size=int(sum(counts)),
            )
        return self._select(x, r, seq), self._select(g, r, seq), self._split[key]

    def segment_sums(self, term: torch.Tensor, r: int) -> torch.Tensor:
        """[U, d] per-unit sums of the rows of ``term`` [N, d]: the per-example sums (a reshape), then per
        micro-batch one product with the [U, B] 0/1 membership matrix. Summing each example's rows first
        reads ``term`` once in a plain reduction; the product of a [U, N] membership matrix with ``term``
        was 2.5x slower (a GEMM with 8 output rows), and a scatter-add of the rows slower still."""
        if self.batched:
            return term.reshape(self.num_units, self.group * r, -1).sum(1)
        per_example = term.reshape(len(self.owner_cpu), r, -1).sum(1)
        if self._membership is None:
            b = len(self.owner_cpu)
            member = torch.zeros((self.num_units, b), dtype=term.dtype, device=self.device)
            self._membership = member.index_put_(
                (self.owner, torch.arange(b, device=self.device)), torch.ones((), dtype=term.dtype, device=self.device)
            )
        return self._membership @ per_example

    def cross(self, emb: tuple, dec: tuple) -> torch.Tensor:
        _, ids, ge, re, seq_e = emb
        _, a, gd, rd, seq_d = dec
        if self.batched:
            u, k = self.num_units, self.group
            return _cross(
                ids.reshape(u, k * re), ge.reshape(u, k * re, -1), a.reshape(u, k * rd, -1), gd.reshape(u, k * rd, -1)
            )
        (ie, ce), (_, cd) = self._rows(re, seq_e), self._rows(rd, seq_d)
        # The rows grouped by unit: the copies the Gram norms made already (cached), else made here.
        ge, a, gd = self._select(ge, re, seq_e), self._select(a, rd, seq_d), self._select(gd, rd, seq_d)
        out = []
        for i_u, ge_u, a_u, gd_u, ne, nd in zip(
            ids.index_select(0, ie).split(ce), ge.split(ce), a.split(cd), gd.split(cd), ce, cd
        ):
            out.append(
                _cross(i_u[None], ge_u[None], a_u[None], gd_u[None])
                if ne and nd
                else torch.zeros(1, device=self.device)
            )
        return torch.cat(out)
