"""Poisson sampling, fixed-size shuffling, chunk capacity and packing (trainers.jax_bert.sampling)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.trainers.jax_bert import sampling


def _binom_tail_exact(k: int, n: int, q: float) -> float:
    """P(Binomial(n, q) > k) summed term by term in log space: an oracle independent of scipy."""
    log_q, log_1q = math.log(q), math.log1p(-q)
    total = 0.0
    for j in range(k + 1, n + 1):
        log_term = math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1)
        total += math.exp(log_term + j * log_q + (n - j) * log_1q)
    return total


def test_poisson_sample_indices_sorted_unique_in_range() -> None:
    idx = sampling.poisson_sample(np.random.default_rng(0), 1000, 0.2)
    assert idx.dtype == np.int64
    assert np.all(np.diff(idx) > 0)
    assert idx.min() >= 0 and idx.max() < 1000


def test_poisson_sample_mean_batch_is_qn_and_inclusion_is_uniform() -> None:
    rng = np.random.default_rng(1)
    n, q, draws = 200, 0.1, 4000
    counts = np.zeros(n)
    sizes = []
    for _ in range(draws):
        idx = sampling.poisson_sample(rng, n, q)
        counts[idx] += 1
        sizes.append(idx.size)
    se_mean = math.sqrt(n * q * (1 - q) / draws)
    assert abs(np.mean(sizes) - n * q) < 4 * se_mean
    # Batch size variance of Binomial(n, q).
    assert abs(np.var(sizes) / (n * q * (1 - q)) - 1) < 0.1
    # Every example is included with probability q (5 standard errors over 200 examples).
    se_incl = math.sqrt(q * (1 - q) / draws)
    assert np.max(np.abs(counts / draws - q)) < 5 * se_incl


def test_poisson_sample_full_probability_takes_everything() -> None:
    np.testing.assert_array_equal(sampling.poisson_sample(np.random.default_rng(0), 7, 1.0), np.arange(7))


@pytest.mark.parametrize("q", [0.0, -0.1, 1.5, float("nan")])
def test_poisson_sample_rejects_bad_probability(q: float) -> None:
    with pytest.raises(ValueError, match="sampling_probability"):
        sampling.poisson_sample(np.random.default_rng(0), 10, q)


def test_shuffle_batches_fixed_size_and_epochs_are_permutations() -> None:
    it = sampling.shuffle_batches(np.random.default_rng(0), 10, 3)
    epoch = [next(it) for _ in range(3)]  # 10 // 3 = 3 batches per epoch
    for b in epoch:
        assert b.shape == (3,) and b.dtype == np.int64
    flat = np.concatenate(epoch)
    assert len(set(flat.tolist())) == 9  # no repeats within an epoch
    nxt = [next(it) for _ in range(3)]
    assert len(set(np.concatenate(nxt).tolist())) == 9
    with pytest.raises(ValueError, match="batch_size"):
        next(sampling.shuffle_batches(np.random.default_rng(0), 3, 4))


@pytest.mark.parametrize(
    "n,q,m",
    [(1000, 0.032, 8), (10_000, 0.0256, 32), (50, 0.5, 4), (100_000, 0.01, 64), (20, 0.05, 1)],
)
def test_microstep_capacity_meets_overflow_target_and_is_minimal(n: int, q: float, m: int) -> None:
    s = sampling.microstep_capacity(n * q, m, dataset_size=n, sampling_probability=q)
    assert s >= 1
    # scipy's tail agrees with a term-by-term exact sum, and meets the 1e-6 target...
    tail = sampling.overflow_probability(s * m, dataset_size=n, sampling_probability=q)
    assert tail < 1e-6
    if n <= 10_000:
        assert math.isclose(tail, _binom_tail_exact(s * m, n, q), rel_tol=1e-6, abs_tol=1e-300)
    # ...while one fewer micro-step would not.
    if s > 1:
        assert sampling.overflow_probability((s - 1) * m, dataset_size=n, sampling_probability=q) >= 1e-6


def test_microstep_capacity_rejects_inconsistent_expected_batch() -> None:
    with pytest.raises(ValueError, match="expected_batch_size"):
        sampling.microstep_capacity(100.0, 8, dataset_size=1000, sampling_probability=0.2)


def test_pack_overflow_yields_extra_chunks_and_drops_nothing() -> None:
    indices = np.arange(5, 5 + 23, dtype=np.int64)  # 23 examples, capacity 2 x 4 = 8
    chunks = sampling.pack_microsteps(indices, 4, 2)
    assert len(chunks) == 3
    for idx, mask in chunks:
        assert idx.shape == (2, 4) and mask.shape == (2, 4)
        assert idx.dtype == np.int64 and mask.dtype == np.float32
    got = np.concatenate([idx.ravel()[mask.ravel() > 0] for idx, mask in chunks])
    np.testing.assert_array_equal(got, indices)
    last_idx, last_mask = chunks[-1]
    assert last_mask.sum() == 23 - 16
    assert np.all(last_idx.ravel()[last_mask.ravel() == 0] == 0)


def test_pack_empty_batch_yields_one_padding_chunk() -> None:
    chunks = sampling.pack_microsteps(np.zeros(0, np.int64), 4, 3)
    assert len(chunks) == 1
    idx, mask = chunks[0]
    assert idx.shape == (3, 4) and not mask.any() and not idx.any()


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 300),
    m=st.integers(1, 16),
    s=st.integers(1, 8),
    seed=st.integers(0, 2**31 - 1),
)
def test_pack_property_covers_exactly_the_sample_with_static_shapes(n: int, m: int, s: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.choice(10_000, size=n, replace=False)).astype(np.int64)
    chunks = sampling.pack_microsteps(indices, m, s)
    assert len(chunks) == max(1, math.ceil(n / (s * m)))
    for idx, mask in chunks:
        assert idx.shape == (s, m) and mask.shape == (s, m)
        assert set(np.unique(mask).tolist()) <= {0.0, 1.0}
        assert np.all(idx[mask == 0] == 0)
    flat_mask = np.concatenate([mask.ravel() for _, mask in chunks])
    flat_idx = np.concatenate([idx.ravel() for idx, _ in chunks])
    np.testing.assert_array_equal(flat_idx[flat_mask > 0], indices)
    # Real slots come first: padding only after the last real example.
    assert np.all(flat_mask[:n] == 1) and np.all(flat_mask[n:] == 0)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 100_000),
    q=st.floats(1e-4, 1.0),
    m=st.integers(1, 64),
)
def test_capacity_property_holds_the_mean_and_meets_target(n: int, q: float, m: int) -> None:
    s = sampling.microstep_capacity(n * q, m, dataset_size=n, sampling_probability=q)
    assert s * m >= math.floor(n * q)
    assert sampling.overflow_probability(s * m, dataset_size=n, sampling_probability=q) < 1e-6
    # Never more than needed to hold the whole dataset, plus one partial micro-step.
    assert s <= math.ceil(n / m)
