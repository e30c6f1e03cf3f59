"""How many examples one forward and backward pass of a torch trainer runs: a memory bound, never a mechanism.

A pass holds every module's activations and output gradients for the examples it runs, a masked LM's [B, L, vocab]
logits among them (about 4 GB at B = 512, L = 32 and BERT's 30,522 tokens). The torch trainers' Poisson batches change
size every step, and on CPU the allocator keeps freed blocks for reuse (:mod:`dpaudit.training.host_allocator`), so
one pass over the whole batch also ratchets the heap up step after step (MiniLM, 33 steps of 256: from 3.8 GB to
7.55 GB). So the ghost engine (:mod:`.clipping.ghost`) and the non-private sum run a large batch in passes of at most
:meth:`PassSize.examples` examples and add the passes' sums: the same sum, in bounded memory, at the same speed
(docs/trainers.md, "edp-sgd" and "Performance notes").
"""

from __future__ import annotations

import math

import torch
from transformers.pytorch_utils import Conv1D

#: What one pass may hold, by the estimate of :meth:`PassSize.bytes`, unless the user sets the pass (``--ghost-chunk``).
#: Measured on MiniLM (6 x 384, 30,522 tokens, L = 32; 58 examples a pass), 33 Poisson steps of 256 in dp-sgd: peak
#: 3.05 GB, where one pass peaked at 7.55 GB, in the same CPU time (256 and 255 s); non-private, 2.87 GB against 5.95 GB
#: (252 CPU s each).
PASS_BYTES = 1 << 30


def is_rms_norm(module: torch.nn.Module) -> bool:
    """torch's ``nn.RMSNorm`` or a Hugging Face ``*RMSNorm`` (Llama's: ``weight * x / rms(x)``, no bias)."""
    if isinstance(module, torch.nn.RMSNorm):
        return True
    return (
        type(module).__name__.endswith("RMSNorm")
        and hasattr(module, "variance_epsilon")
        and [n for n, _ in module.named_parameters(recurse=False)] == ["weight"]
    )


def row_floats(model: torch.nn.Module) -> int:
    """Floats a forward and backward pass keeps per token row for the model's Linear, Conv1D, LayerNorm, RMSNorm and
    Embedding modules, trained or frozen: each one's input, output and output gradient (an Embedding's input is one
    id). An upper bound where a module sees fewer rows than the sequence's tokens (a masked LM's decoder reads the
    masked positions only)."""
    total = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            total += module.in_features + 2 * module.out_features
        elif isinstance(module, Conv1D):
            total += module.weight.shape[0] + 2 * module.weight.shape[1]
        elif isinstance(module, torch.nn.Embedding):
            total += 1 + 2 * module.embedding_dim
        elif isinstance(module, torch.nn.LayerNorm):
            total += 3 * math.prod(module.normalized_shape)
        elif is_rms_norm(module):  # torch's has normalized_shape, Hugging Face's a weight of that shape
            total += 3 * math.prod(getattr(module, "normalized_shape", None) or module.get_parameter("weight").shape)
    return total


def pass_budget(device: torch.device | None = None) -> int:
    """Bytes one pass may hold on ``device``: :data:`PASS_BYTES` on the CPU; on a GPU a quarter of its memory if that
    is more (its caching allocator does not ratchet like the CPU heap, and a larger pass keeps the device busy)."""
    if device is None or device.type != "cuda":
        return PASS_BYTES
    return max(PASS_BYTES, torch.cuda.get_device_properties(device).total_memory // 4)


class PassSize:
    """One model's pass bound: :func:`row_floats` counted once, at its parameters' precision and on their device."""

    def __init__(self, model: torch.nn.Module) -> None:
        first = next(model.parameters())
        self.floats = row_floats(model)
        self.element_size, self.device = first.element_size(), first.device

    def bytes(self, examples: int, length: int) -> int:
        """Estimated bytes one pass over ``examples`` rows of ``length`` tokens holds."""
        return examples * length * self.floats * self.element_size

    def examples(self, length: int) -> int:
        """The most examples of ``length`` tokens whose :meth:`bytes` stay within :func:`pass_budget` (at least
        one); the budget is read at each call, so a changed :data:`PASS_BYTES` takes effect."""
        return max(1, pass_budget(self.device) // max(1, self.bytes(1, length)))
