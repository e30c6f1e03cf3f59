"""Secret Poisson sampling, the one implementation both trainer families draw their batches from.

The accountant assumes Poisson sampling: each example joins a step's batch independently with
probability q (Abadi et al. 2016; Mironov et al. 2019, "Renyi DP of the Sampled Gaussian
Mechanism"). One uniform draw per example, ``rng.random(N) < q``, keeps the batch exactly that
mechanism. The generator is numpy's, seeded from the SECRET noise seed
(:meth:`dpaudit.training.noise_source.NoiseSource.numpy_generator`, a ``SeedSequence`` of all its bits), never
from the public ``--seed``: an adversary who knew the batches would not face a subsampled mechanism.

Two ways to key the generator, both kept because seeded runs must stay byte-identical:

- :class:`StepKeyedPoisson`: a fresh generator per step, ``[seed, stream, step]`` (the torch
  trainers). No state to checkpoint; every process of a distributed run draws the same batch.
- :class:`SequentialPoisson`: one generator ``[seed, stream]`` drawn step after step (jax-bert);
  its bit-generator state goes into each checkpoint so a resumed run continues the same stream.

Numpy only: no framework import.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from dpaudit.training.noise_source import NoiseSource

__all__ = ["Sampler", "SequentialPoisson", "StepKeyedPoisson", "poisson_sample"]


def poisson_sample(rng: np.random.Generator, dataset_size: int, sampling_probability: float) -> np.ndarray:
    """Sorted int64 indices of a Poisson sample: each of ``dataset_size`` examples kept independently with prob q."""
    if int(dataset_size) != dataset_size or dataset_size < 1:
        raise ValueError(f"dataset_size must be a positive integer, got {dataset_size}.")
    if not 0.0 < sampling_probability <= 1.0:
        raise ValueError(f"sampling_probability must be in (0, 1], got {sampling_probability}.")
    return np.flatnonzero(rng.random(int(dataset_size)) < sampling_probability).astype(np.int64)


class Sampler(Protocol):
    """Draws step ``step``'s batch (indices into the training rows); its state goes into checkpoints."""

    def sample(self, step: int, dataset_size: int, sampling_probability: float) -> np.ndarray: ...

    def state(self) -> Any: ...

    def restore(self, state: Any) -> None: ...


class StepKeyedPoisson:
    """Poisson sampling with the generator ``numpy_generator(stream, step)`` of the secret seed."""

    def __init__(self, source: NoiseSource, stream: int) -> None:
        self.source, self.stream = source, int(stream)

    def sample(self, step: int, dataset_size: int, sampling_probability: float) -> np.ndarray:
        rng = self.source.numpy_generator(self.stream, int(step))
        return poisson_sample(rng, dataset_size, sampling_probability)

    def state(self) -> None:
        return None  # keyed by the step: nothing to save

    def restore(self, state: Any) -> None:
        del state


class SequentialPoisson:
    """Poisson sampling from one generator ``numpy_generator(stream)``, drawn in step order.

    ``sample`` must be called for steps in order from the start (or the restored state's step):
    the step argument is not part of the key.
    """

    def __init__(self, source: NoiseSource, stream: int) -> None:
        self.rng = source.numpy_generator(int(stream))

    def sample(self, step: int, dataset_size: int, sampling_probability: float) -> np.ndarray:
        del step
        return poisson_sample(self.rng, dataset_size, sampling_probability)

    def state(self) -> dict[str, Any]:
        return _jsonable(self.rng.bit_generator.state)

    def restore(self, state: Any) -> None:
        """Continue the stream where ``state`` left it; no state is an error: restarting the generator
        would redraw the batches of the steps already taken (not independent Poisson samples)."""
        if not isinstance(state, dict):
            raise ValueError("the checkpoint holds no state of the sequential Poisson sampler")
        self.rng.bit_generator.state = state


def _jsonable(obj: Any) -> Any:
    """numpy scalars inside a bit-generator state -> plain JSON types."""
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
