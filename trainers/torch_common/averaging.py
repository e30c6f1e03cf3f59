"""Parameter averaging: an exponential moving average (EMA) of the trained tensors over the run's iterates.

Why: under DP-SGD each step's update carries the Gaussian noise, so the last iterate jitters around where the
noisy optimization has led; averaging the recent iterates cancels much of that jitter while keeping their signal
(Polyak and Juditsky 1992). De et al. 2022 ("Unlocking high-accuracy differentially private image classification
through scale") made the EMA one of DP-SGD's standard levers beside large batches and augmentation multiplicity;
Sander et al. 2023 (TAN) keep it. The average is computed from the iterates alone, which the accountant already
covers (DP-SGD's guarantee is for the whole sequence of noised updates), so it is post-processing: the same
epsilon and delta.

The decay at step t (from 0) is ``min(decay, (1 + t) / (10 + t))``: De et al.'s warm-up (TensorFlow's
``ExponentialMovingAverage`` with ``num_updates``), so the first steps do not keep the start's weight. After step t
the average is ``a <- d_t a + (1 - d_t) theta_t``, in place on the device, one fused operation over the trained
tensors and no host sync. The evaluated and exported model is the average (:meth:`ParameterAverage.swapped`).
docs/trainers.md, "Parameter averaging".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

#: The warm-up's rule, as privacy.json and the docs name it.
WARMUP_RULE = "decay at step t (from 0): min(D, (1 + t) / (10 + t))"


class ParameterAverage:
    """The EMA of ``params`` (the trained tensors, updated in place by the optimizer).

    Args:
        params: the tensors to average; the average starts at their current values (the run's start).
        decay: D in (0, 1): the largest weight the average keeps per step (about 1 / (1 - D) recent steps).

    Memory: one more copy of the trained tensors, on their device.
    """

    def __init__(self, params: Sequence[torch.Tensor], decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"the average's decay must be in (0, 1), got {decay}")
        self.params = list(params)
        self.decay = float(decay)
        self.tensors = [p.detach().clone() for p in self.params]

    def decay_at(self, step: int) -> float:
        """The decay applied after step ``step`` (from 0): the warm-up's, capped at D."""
        return min(self.decay, (1.0 + step) / (10.0 + step))

    @torch.no_grad()
    def update(self, step: int) -> None:
        """Fold the iterate after step ``step`` into the average."""
        torch._foreach_lerp_(self.tensors, [p.detach() for p in self.params], 1.0 - self.decay_at(step))

    @contextmanager
    def swapped(self) -> Iterator[None]:
        """The model holds the average inside the block (evaluation, export) and its iterate again after it."""
        with torch.no_grad():
            iterate = [p.detach().clone() for p in self.params]
            torch._foreach_copy_([p.detach() for p in self.params], self.tensors)
        try:
            yield
        finally:
            with torch.no_grad():
                torch._foreach_copy_([p.detach() for p in self.params], iterate)
