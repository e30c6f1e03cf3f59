"""Batch selection for DP-SGD: Poisson sampling and packing into fixed-shape micro-step chunks.

The accountant assumes Poisson sampling: every example joins a logical batch independently with
probability ``q``, so the batch size is random (Binomial(N, q)). Under ``jit`` shapes must be static,
so a sampled batch is packed into chunks of ``S`` micro-steps of ``m`` slots each (``idx [S, m]`` and a
0/1 ``mask [S, m]``); empty slots point at example 0 and carry mask 0, so they contribute nothing.

``S`` is chosen by :func:`microstep_capacity` so that a batch overflows one chunk with probability
below 1e-6. When it does overflow anyway, :func:`pack_microsteps` returns *extra chunks of the same
shape* rather than dropping examples: dropping would change the mechanism the accountant analyses
(it would no longer be Poisson sampling), while an extra chunk only costs time and reuses the same
compiled function.

This module is numpy only; it never imports jax.

References:
  Abadi et al. 2016, "Deep Learning with Differential Privacy" (Poisson-subsampled Gaussian).
  Anil et al. 2021, "Large-Scale Differentially Private BERT", Section 3.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
from scipy import stats

from dpaudit.training.sampling import poisson_sample  # the core's secret Poisson sampling (one implementation)

__all__ = ["microstep_capacity", "overflow_probability", "pack_microsteps", "poisson_sample", "shuffle_batches"]

#: Target probability that a Poisson batch does not fit into one chunk of ``S * m`` slots.
OVERFLOW_PROBABILITY = 1e-6


def _check_dataset_size(dataset_size: int) -> None:
    if int(dataset_size) != dataset_size or dataset_size < 1:
        raise ValueError(f"dataset_size must be a positive integer, got {dataset_size}.")


def _check_probability(sampling_probability: float) -> None:
    if not 0.0 < sampling_probability <= 1.0:
        raise ValueError(f"sampling_probability must be in (0, 1], got {sampling_probability}.")


def _check_physical_batch(physical_batch: int) -> None:
    if int(physical_batch) != physical_batch or physical_batch < 1:
        raise ValueError(f"physical_batch must be a positive integer, got {physical_batch}.")


def shuffle_batches(rng: np.random.Generator, dataset_size: int, batch_size: int) -> Iterator[np.ndarray]:
    """Yields fixed-size batches of sorted int64 indices from shuffled epochs, forever.

    This is the non-Poisson variant, allowed only behind ``--sampling shuffle``: the epsilon the
    accountant reports assumes Poisson sampling and does not strictly cover it. Each epoch is a fresh
    permutation; the last ``dataset_size % batch_size`` examples of an epoch are skipped so that every
    batch has exactly ``batch_size`` examples.
    """
    _check_dataset_size(dataset_size)
    if int(batch_size) != batch_size or not 1 <= batch_size <= dataset_size:
        raise ValueError(f"batch_size must be an integer in [1, dataset_size={dataset_size}], got {batch_size}.")
    per_epoch = dataset_size // batch_size
    while True:
        order = rng.permutation(int(dataset_size))
        for b in range(per_epoch):
            yield np.sort(order[b * batch_size : (b + 1) * batch_size]).astype(np.int64)


def overflow_probability(capacity: int, *, dataset_size: int, sampling_probability: float) -> float:
    """P(Binomial(N, q) > capacity): the chance a Poisson batch needs more than one chunk."""
    return float(stats.binom.sf(capacity, dataset_size, sampling_probability))


def microstep_capacity(
    expected_batch_size: float,
    physical_batch: int,
    *,
    dataset_size: int,
    sampling_probability: float,
) -> int:
    """Returns the smallest number of micro-steps S with P(Binomial(N, q) > S * m) < 1e-6.

    The batch size of Poisson sampling is Binomial(N, q) with mean ``expected_batch_size = N q``; its
    upper tail is evaluated exactly (``scipy.stats.binom``), not by a normal approximation, which is
    too optimistic for small ``N q``. ``expected_batch_size`` must agree with ``N q`` (it is passed
    explicitly so a caller's bookkeeping mistake is caught here rather than silently under-sizing).
    """
    _check_dataset_size(dataset_size)
    _check_probability(sampling_probability)
    _check_physical_batch(physical_batch)
    mean = dataset_size * sampling_probability
    if not math.isclose(expected_batch_size, mean, rel_tol=1e-6, abs_tol=1e-9):
        raise ValueError(
            f"expected_batch_size must equal dataset_size * sampling_probability = {mean}, got {expected_batch_size}."
        )
    # Smallest K with P(X > K) < target; isf is a good first guess, then make it exact.
    k = int(stats.binom.isf(OVERFLOW_PROBABILITY, dataset_size, sampling_probability))
    k = max(0, min(k, dataset_size))
    while (
        k > 0
        and overflow_probability(k - 1, dataset_size=dataset_size, sampling_probability=sampling_probability)
        < OVERFLOW_PROBABILITY
    ):
        k -= 1
    while (
        overflow_probability(k, dataset_size=dataset_size, sampling_probability=sampling_probability)
        >= OVERFLOW_PROBABILITY
    ):
        k += 1
    return max(1, math.ceil(k / physical_batch))


def pack_microsteps(
    indices: np.ndarray, physical_batch: int, num_microsteps: int
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Packs sampled indices into fixed-shape chunks ``(idx [S, m] int64, mask [S, m] float32)``.

    Slots are filled in order; padding slots point at example 0 with mask 0. A batch larger than
    ``S * m`` gets as many extra chunks of the same shape as it needs (never dropped); an empty batch
    still yields one all-padding chunk so that every step runs the same compiled code (and the
    noise is still added).
    """
    _check_physical_batch(physical_batch)
    if int(num_microsteps) != num_microsteps or num_microsteps < 1:
        raise ValueError(f"num_microsteps must be a positive integer, got {num_microsteps}.")
    indices = np.asarray(indices)
    if indices.ndim != 1:
        raise ValueError(f"indices must be a 1-D array, got shape {indices.shape}.")
    if indices.size and (not np.issubdtype(indices.dtype, np.integer) or indices.min() < 0):
        raise ValueError("indices must be non-negative integers.")
    slots = int(physical_batch) * int(num_microsteps)
    n_chunks = max(1, -(-indices.size // slots))
    flat_idx = np.zeros(n_chunks * slots, dtype=np.int64)
    flat_mask = np.zeros(n_chunks * slots, dtype=np.float32)
    flat_idx[: indices.size] = indices
    flat_mask[: indices.size] = 1.0
    shape = (n_chunks, int(num_microsteps), int(physical_batch))
    idx, mask = flat_idx.reshape(shape), flat_mask.reshape(shape)
    return [(idx[c], mask[c]) for c in range(n_chunks)]
