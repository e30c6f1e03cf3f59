"""Gaussian noise for the DP aggregate, drawn from generators keyed by the secret noise seed.

The noise std is always ``sigma_e * sensitivity`` where the sensitivity comes from the clipping
function that produced the aggregate (DESIGN section 5: the step owns its sensitivity). In eDP-SGD
(Dupuy et al. 2021, Algorithm 1) each of the k micro-batches adds its own N(0, (sigma S)^2 / k), so
that the aggregate carries N(0, (sigma S)^2). A process that holds k_r micro-batches may draw their
summed noise as ONE Gaussian of variance k_r (sigma S)^2 / k: the same distribution with k_r times
fewer random numbers (``noise_draw="process"``); ``"micro-batch"`` draws one per micro-batch, keyed by
its index, so the values do not depend on how micro-batches are spread over processes.
"""

from __future__ import annotations

import torch

from trainers.torch_common.sampling import NOISE_STREAM, derived_seed


def keyed_generator(seed: int, *key: int) -> torch.Generator:
    """A CPU torch Generator keyed by (secret seed, noise stream, *key)."""
    return torch.Generator(device="cpu").manual_seed(derived_seed(seed, NOISE_STREAM, *key))


def add_noise_(tensors: list[torch.Tensor], std: float, generator: torch.Generator) -> None:
    """In place: t += N(0, std^2 I) for every tensor, drawn from ``generator`` in list order."""
    if std <= 0.0:
        return
    for t in tensors:
        noise = torch.empty(t.shape, dtype=t.dtype, device="cpu").normal_(0.0, std, generator=generator)
        t.add_(noise.to(t.device, non_blocking=True))

