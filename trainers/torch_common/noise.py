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


def keyed_generator(seed: int, *key: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch Generator on ``device`` keyed by (secret seed, noise stream, *key).

    On a GPU the noise is drawn there (the CUDA Philox generator seeded with the same secret key):
    no host round trip; the values differ from the CPU stream's, the distribution does not.
    """
    return torch.Generator(device=device).manual_seed(derived_seed(seed, NOISE_STREAM, *key))


def add_noise_(tensors: list[torch.Tensor], std: float, generator: torch.Generator) -> None:
    """In place: t += N(0, std^2 I) for every tensor, drawn from ``generator`` in list order (on the
    generator's device, then moved to the tensor's if they differ)."""
    if std <= 0.0:
        return
    for t in tensors:
        noise = torch.empty(t.shape, dtype=t.dtype, device=generator.device).normal_(0.0, std, generator=generator)
        t.add_(noise if noise.device == t.device else noise.to(t.device, non_blocking=True))



def gaussian_like(tensors: list[torch.Tensor], std: float, generator: torch.Generator) -> list[torch.Tensor]:
    """New tensors N(0, std^2 I) shaped like ``tensors``, drawn in place from ``generator`` in list order:
    the same values as :func:`add_noise_` into zeros, without the zeros and the temporary copies."""
    out = []
    for t in tensors:
        noise = torch.empty(t.shape, dtype=t.dtype, device=generator.device).normal_(0.0, std, generator=generator)
        out.append(noise if noise.device == t.device else noise.to(t.device, non_blocking=True))
    return out
