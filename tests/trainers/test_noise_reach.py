"""The torch trainers' DP noise sampler: Box-Muller with a 96-bit radius uniform, on each of its code paths.

Measured on the real code with the extreme words: the C Philox sampler (:func:`philox.pairs`, the transform its
passes run, tied here to :func:`philox.normal_`'s own numbers) and the torch transform of the fallback without a C
compiler and of CUDA (:func:`noise.wide_normal_pairs`, here on the CPU: the same code on another device). Its reach
(11.596 sigma, was 6.66 / 5.77 / 6.76) is what ``dpaudit.accounting.NOISE_SAMPLERS`` records for the tail figure
counted inside delta; a plain max over 10^8 draws cannot see past ~6 sigma, so the far tail is tested through the
words: with w0 = 0 (and w0 = w1 = 0) the radius squared minus 64 ln 2 (128 ln 2) must be Exponential with mean 2.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit import accounting as A
from dpaudit.trainers.torch_common import noise, philox, privacy

#: sqrt(-2 ln 2^-97): the largest radius of a 96-bit uniform (u >= 2^-97).
REACH = math.sqrt(194 * math.log(2))
#: Words (0, 0, 0, w3) with the angle on each axis: the C and torch transforms put angle 2 pi (w3 + 1/2) 2^-32 - pi/4,
#: so w3 = 2^29 + k 2^30 is a quarter turn k, up to 2^-31 pi. Rows: +cos, +sin, -cos, -sin.
AXES = np.array([[0, 0, 0, (1 << 29) + k * (1 << 30)] for k in range(4)], dtype=np.uint32)


def _torch_pairs(words: np.ndarray) -> np.ndarray:
    first, second = noise.wide_normal_pairs(torch.from_numpy(words.astype(np.int64).T))
    return np.stack([first.numpy(), second.numpy()], axis=1)


PATHS = {"philox-c-bm96": philox.pairs, "torch-bm96": _torch_pairs}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_extreme_words_reach_11_6_sigma_on_every_axis(path):
    pairs = PATHS[path](AXES)
    edges = [pairs[0, 0], pairs[1, 1], -pairs[2, 0], -pairs[3, 1]]  # +cos, +sin, -cos, -sin
    assert min(edges) > 6.0  # every old sampler stopped below 6.8
    assert all(e == pytest.approx(REACH, abs=1e-9) for e in edges), edges
    # what the accountant is told is never more than the code reaches (rounded down), and never less by much
    for sampler in ("philox-c-bm96", "torch-cpu-bm96", "torch-cuda-bm96"):
        assert REACH - 1e-3 < A.sampler_reach(sampler) <= min(edges)
    # the radius is largest at the smallest u: one more unit in any radius word pulls it in
    inner = PATHS[path](np.array([[0, 0, 1, 1 << 29], [0, 1, 0, 1 << 29], [1, 0, 0, 1 << 29]], dtype=np.uint32))
    want = [math.sqrt(192 * math.log(2) - 2 * math.log(1.5)), math.sqrt(128 * math.log(2)), math.sqrt(64 * math.log(2))]
    assert np.all(inner[:, 0] < REACH) and inner[:, 0] == pytest.approx(want, abs=1e-6)


def test_the_c_transform_is_what_the_sampler_adds():
    """philox.pairs on the Philox words of counter i is what normal_ writes at i (cosine) and 256 + i (sine)."""
    key = (0x1234ABCD, 0x9E3779B9, 7, 0xFFFFFFFF)
    std = 0.37
    out = philox.normal_(torch.empty(1024), key, std).double().numpy()
    for i in (0, 1, 255):  # pass 0 (counters 0..255), and i = 3 of pass 1 (counter 259)
        words = np.array([philox.block((i, 0, key[2], key[3]), key[:2])], dtype=np.uint32)
        a, b = philox.pairs(words)[0]
        assert out[i] == np.float32(std * a) and out[256 + i] == np.float32(std * b)
    words = np.array([philox.block((259, 0, key[2], key[3]), key[:2])], dtype=np.uint32)
    assert out[512 + 3] == np.float32(std * philox.pairs(words)[0, 0])


def test_the_c_and_torch_transforms_agree_on_the_same_words():
    rng = np.random.default_rng(11)
    words = rng.integers(0, 2**32, size=(50_000, 4), dtype=np.uint64).astype(np.uint32)
    words[:5000, 0] = 0
    words[:500, 1] = 0
    assert np.abs(philox.pairs(words) - _torch_pairs(words)).max() < 1e-13


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("zero_words", [1, 2])
def test_the_far_tail_is_the_exact_law(path, zero_words):
    """With the first k words 0 (u < 2^-32k), -2 ln u - 64 k ln 2 = -2 ln v for v uniform on (0, 1): Exponential
    with mean 2. This is the sampler's tail beyond 6.66 (k = 1) and 9.42 (k = 2) sigma, through the real code."""
    rng = np.random.default_rng(100 + zero_words)
    words = rng.integers(0, 2**32, size=(200_000, 4), dtype=np.uint64).astype(np.uint32)
    words[:, :zero_words] = 0
    pairs = PATHS[path](words)
    excess = (pairs**2).sum(axis=1) - 64 * zero_words * math.log(2)
    assert excess.min() >= 0 and np.sqrt(excess.max() + 64 * zero_words * math.log(2)) <= REACH + 1e-9
    assert stats.kstest(excess, "expon", args=(0, 2)).pvalue > 1e-3
    assert excess.mean() == pytest.approx(2.0, abs=0.02)  # s.e. 0.0045
    # the angle is uniform whatever the radius
    angle = np.arctan2(pairs[:, 1], pairs[:, 0])
    assert stats.kstest(angle, "uniform", args=(-math.pi, 2 * math.pi)).pvalue > 1e-3


def _check_standard_normal(z: np.ndarray) -> None:
    """Moments and KS of ~10^6 draws: at n = 1e6 the standard errors are 0.001 (mean), 0.0014 (variance),
    0.0024 (skewness), 0.0049 (excess kurtosis); the bands are > 4 of them."""
    assert abs(z.mean()) < 0.005 and z.var() == pytest.approx(1.0, abs=0.006)
    assert abs(stats.skew(z)) < 0.012 and abs(stats.kurtosis(z)) < 0.025
    assert stats.kstest(z, "norm").pvalue > 1e-3
    beyond = np.sum(np.abs(z) > 4)  # expected 63 per 1e6, s.d. 8
    assert 30 < beyond < 100


@pytest.fixture(params=["philox", "torch"])
def cpu_sampler(request, monkeypatch):
    if request.param == "torch":
        monkeypatch.setattr(philox, "_library", lambda: None)
    assert philox.available() == (request.param == "philox")
    return request.param


def test_a_million_draws_through_the_trainers_draw_are_standard_normal(cpu_sampler):
    """noise.gaussian_sum, as the torch trainers call it (16 keyed pieces, fixed secret seed and key)."""
    like = [torch.empty(600, 1000), torch.empty(400_001)]
    z = torch.cat([t.flatten() for t in noise.gaussian_sum(like, [(1.0, (4, 2))], 2**70 + 9)]).double().numpy()
    _check_standard_normal(z)
    assert privacy.noise_sampler("cpu") == {"philox": "philox-c-bm96", "torch": "torch-cpu-bm96"}[cpu_sampler]
    assert privacy.noise_sampler("cuda") == "torch-cuda-bm96"
    assert "96-bit radius uniform" in noise.describe()


def test_the_torch_path_draws_other_dtypes_and_rounds_std_times_z_once():
    """Not float32 (or not on the CPU, as on CUDA): the words from a keyed torch generator, the transform in float64,
    std x z rounded once to the tensor's dtype. Its values are the transform's of that generator's words."""
    (wide,) = noise.gaussian_sum([torch.empty(100_001, dtype=torch.float64)], [(0.5, (3,))], 77)
    assert wide.dtype == torch.float64 and stats.kstest(wide.numpy() / 0.5, "norm").pvalue > 1e-3
    bf16 = noise.gaussian_sum([torch.empty(17, dtype=torch.bfloat16)], [(0.5, (3,))], 77)[0]
    pieces = noise._piece_bounds(17)
    expected = torch.empty(17, dtype=torch.bfloat16)
    for c, (lo, hi) in enumerate(pieces):
        if hi > lo:
            generator = noise.keyed_generator(77, 3, c)
            expected[lo:hi] = (noise.torch_normal(hi - lo, generator) * 0.5).to(torch.bfloat16)
    assert torch.equal(bf16, expected)
    words = noise._torch_words(noise.keyed_generator(5, 1), 1000, torch.device("cpu"))
    assert words.min() >= 0 and words.max() < 2**32 and words.shape == (4, 1000)
    assert len({tuple(row) for row in words.T.tolist()}) == 1000
