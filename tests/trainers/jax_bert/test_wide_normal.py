"""jax-bert's DP noise: Box-Muller with a 96-bit radius uniform in float32 (``dp_step.wide_normal_pairs``).

``jax.random.normal`` in float32 stopped at 5.22 sigma; this sampler's reach is measured here on the real function
(eager and jitted) with the extreme words: 11.596, what ``dpaudit.accounting.NOISE_SAMPLERS["jax-bm96"]`` records.
The far tail is tested through the words (with w0 = 0, or w0 = w1 = 0, the radius squared minus 64 ln 2, or
128 ln 2, is Exponential with mean 2), and a million draws of the step's own noise are standard normal.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpaudit import accounting as A
from dpaudit.trainers.jax_bert import dp_step

REACH = math.sqrt(194 * math.log(2))  # sqrt(-2 ln 2^-97)
#: Words (0, 0, 0, w3) with the angle on each axis (w3 = 2^29 + k 2^30: quarter turn k). Rows: +cos, +sin, -cos, -sin.
AXES = np.array([[0, 0, 0, (1 << 29) + k * (1 << 30)] for k in range(4)], dtype=np.uint32)
PAIRS = {"eager": dp_step.wide_normal_pairs, "jit": jax.jit(dp_step.wide_normal_pairs)}


def _pairs(words: np.ndarray, how: str) -> np.ndarray:
    first, second = PAIRS[how](jnp.asarray(words.T))
    return np.stack([np.asarray(first, np.float64), np.asarray(second, np.float64)], axis=1)


def _reference(words: np.ndarray) -> np.ndarray:
    """The construction in float64 numpy: u = (w0 2^64 + w1 2^32 + w2 + 1/2) 2^-96, angle 2 pi (w3 + 1/2) 2^-32 - pi/4."""
    w = words.astype(np.float64)
    u = ((w[:, 2] + 0.5) * 2.0**-96 + w[:, 1] * 2.0**-64) + w[:, 0] * 2.0**-32
    r, angle = np.sqrt(-2 * np.log(u)), (w[:, 3] + 0.5) * 2 * np.pi * 2.0**-32 - np.pi / 4
    return np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1)


@pytest.mark.parametrize("how", sorted(PAIRS))
def test_the_extreme_words_reach_11_6_sigma_on_every_axis(how):
    pairs = _pairs(AXES, how)
    edges = [pairs[0, 0], pairs[1, 1], -pairs[2, 0], -pairs[3, 1]]
    assert min(edges) > 6.0  # jax.random.normal float32: 5.22
    assert all(e == pytest.approx(REACH, rel=1e-6) for e in edges), edges
    assert REACH - 1e-3 < A.sampler_reach("jax-bm96") <= min(edges)
    # float32 arithmetic keeps u's dynamic range: the largest radii of each word agree with float64
    rng = np.random.default_rng(3)
    words = rng.integers(0, 2**32, size=(20_000, 4), dtype=np.uint64).astype(np.uint32)
    words[:10_000, 0] = 0
    words[:5_000, 1] = 0
    words[:100, 2] = np.arange(100)
    assert np.abs(_pairs(words, how) - _reference(words)).max() < 2e-5  # float32: ~1 ulp of a value <= 11.6


@pytest.mark.parametrize("zero_words", [1, 2])
def test_the_far_tail_is_the_exact_law(zero_words):
    rng = np.random.default_rng(200 + zero_words)
    words = rng.integers(0, 2**32, size=(200_000, 4), dtype=np.uint64).astype(np.uint32)
    words[:, :zero_words] = 0
    pairs = _pairs(words, "jit")
    excess = (pairs**2).sum(axis=1) - 64 * zero_words * math.log(2)
    assert stats.kstest(excess, "expon", args=(0, 2)).pvalue > 1e-3
    assert excess.mean() == pytest.approx(2.0, abs=0.02)
    assert np.sqrt((pairs**2).sum(axis=1)).max() <= REACH * (1 + 1e-6)


def test_a_million_draws_of_the_steps_noise_are_standard_normal():
    tree = {"kernel": jnp.zeros((500, 1000)), "bias": jnp.zeros((500_001,))}  # an odd leaf drops one sine
    noise = jax.jit(dp_step._gaussian_like)(jax.random.PRNGKey(2024), tree)
    assert jax.tree.map(lambda x: (x.shape, x.dtype), noise) == jax.tree.map(lambda x: (x.shape, x.dtype), tree)
    z = np.concatenate([np.asarray(noise["kernel"]).ravel(), np.asarray(noise["bias"]).ravel()]).astype(np.float64)
    assert abs(z.mean()) < 0.005 and z.var() == pytest.approx(1.0, abs=0.006)
    assert abs(stats.skew(z)) < 0.012 and abs(stats.kurtosis(z)) < 0.025
    assert stats.kstest(z, "norm").pvalue > 1e-3
    assert 30 < np.sum(np.abs(z) > 4) < 100  # expected 63, s.d. 8
    # one draw for the whole tree, the leaves in flattening order (bias first); numbers 2i and 2i + 1 are pair i of
    # the words bits(key, (pairs, 4))[i], whatever the total: an appended leaf (the audit block) leaves the others be
    key = jax.random.PRNGKey(2024)
    first, second = dp_step.wide_normal_pairs(jax.random.bits(key, (500_001, 4), jnp.uint32).T)
    pairs = np.stack([np.asarray(first), np.asarray(second)], axis=1).reshape(-1)
    assert np.array_equal(np.asarray(noise["bias"]), pairs[:500_001])
    assert np.array_equal(np.asarray(noise["kernel"]).ravel(), pairs[500_001:1_000_001])
    with_block = jax.jit(dp_step._gaussian_like)(key, (tree, jnp.zeros((7,))))
    assert np.array_equal(np.asarray(with_block[0]["kernel"]), np.asarray(noise["kernel"]))
    assert np.array_equal(np.asarray(with_block[0]["bias"]), np.asarray(noise["bias"]))
