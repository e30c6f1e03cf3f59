"""The C Philox4x32-10 Gaussian sampler that draws the torch trainers' CPU noise."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit.trainers.torch_common import philox

KEY = (0x1234ABCD, 0x9E3779B9, 7, 0xFFFFFFFF)


@pytest.fixture(scope="module")
def baseline():
    """The sampler built with the plainest flags (no -march=native, no `omp simd`)."""
    library = philox.build(native=False)
    assert library is not None
    return library


def _draw(n, key=KEY, std=1.0, library=None):
    return philox.normal_(torch.empty(n), key, std, library=library)


def test_the_blocks_match_random123s_known_answers():
    for counter, key, want in philox._KNOWN_ANSWERS:
        assert philox.block(counter, key) == want
    assert philox.block((1, 0, 0, 0), (0, 0)) != philox._KNOWN_ANSWERS[0][2]


def test_the_numbers_are_standard_normal():
    z = _draw(2_000_003, std=1.0).double().numpy()
    # Standard errors at n = 2e6: mean 0.0007, std 0.0005, P(|z| > 3) 3.7e-5.
    assert abs(z.mean()) < 0.004 and z.std() == pytest.approx(1.0, abs=0.003)
    assert np.mean(np.abs(z) > 3) == pytest.approx(2 * stats.norm.sf(3), abs=3e-4)
    # The tails are not cut short (torch's CPU sampler stops at 5.8): ~127 of 2e6 beyond 4, s.e. 11.
    assert 80 < np.sum(np.abs(z) > 4) < 180
    # Each of the 2 planes of a pass (the cosines and the sines of its 256 Box-Muller pairs) is standard normal.
    planes = z[: 512 * 3900].reshape(-1, 2, 256).transpose(1, 0, 2).reshape(2, -1)
    assert np.all(np.abs(planes.mean(1)) < 0.004) and np.allclose(planes.std(1), 1.0, atol=0.003)
    assert stats.kstest(z, "norm").pvalue > 1e-4
    assert stats.kstest(_draw(100_000, std=0.25).double().numpy() / 0.25, "norm").pvalue > 1e-4
    # Box-Muller pairs: the two numbers of one pair (cos and sin planes) are uncorrelated.
    pairs = _draw(512 * 800).double().numpy().reshape(800, 2, 256)
    assert abs(np.corrcoef(pairs[:, 0].ravel(), pairs[:, 1].ravel())[0, 1]) < 0.01


def test_a_number_depends_on_its_key_and_position_only():
    long = _draw(5000)
    for n in (1, 3, 511, 512, 513, 1023, 1024, 1025, 4099):
        assert torch.equal(_draw(n), long[:n])
    for i in range(4):  # every one of the 4 key words changes the stream
        other = list(KEY)
        other[i] ^= 1
        assert abs(float(np.corrcoef(_draw(5000, tuple(other)).numpy(), long.numpy())[0, 1])) < 0.1


def test_add_adds_std_times_the_same_numbers():
    base = torch.linspace(-1.0, 1.0, 3001)
    added = philox.normal_(base.clone(), KEY, 0.5, add=True)
    assert torch.allclose(added, base + _draw(3001, std=0.5), atol=0, rtol=0)


def test_the_bits_do_not_depend_on_the_instruction_set(baseline, monkeypatch):
    """The vectorized build (AVX-512 here), a build without AVX-512 (the AVX2 rounds on a CPU that has
    them) and the plain one give the same bits."""
    want = _draw(10_007, std=0.3, library=baseline)
    assert torch.equal(_draw(10_007, std=0.3), want)
    monkeypatch.setattr(philox, "_NATIVE", (*philox._NATIVE, "-mno-avx512f"))
    narrower = philox.build(native=True)
    assert narrower is not None  # it passed the known-answer check
    assert torch.equal(_draw(10_007, std=0.3, library=narrower), want)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="float32"):
        philox.normal_(torch.empty(4, dtype=torch.float64), KEY, 1.0)
    with pytest.raises(ValueError, match="float32"):
        philox.normal_(torch.empty(4, 4).t(), KEY, 1.0)
    with pytest.raises(ValueError, match="4 words"):
        philox.normal_(torch.empty(4), KEY[:2], 1.0)


def test_without_a_compiler_there_is_no_build_and_the_env_chooses_torch(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert philox.build() is None
    monkeypatch.setenv("CC", "env cc")  # a launcher before the compiler, as with CC="ccache gcc"
    assert philox.build() is not None
    monkeypatch.delenv("CC")
    monkeypatch.setenv(philox.ENV, "torch")
    philox._library.cache_clear()
    try:
        assert not philox.available()
        with pytest.raises(RuntimeError, match="not available"):
            _draw(4)
    finally:
        monkeypatch.delenv(philox.ENV)
        philox._library.cache_clear()
    assert philox.available()


def test_add_normal_adds_any_stretches_of_the_stream_and_sums_both_squares():
    stream = _draw(6000, std=0.5).double()
    stretches = ((0, 6000), (1, 1), (511, 2), (1023, 2), (1000, 3000), (4097, 1903))
    bases = [torch.linspace(-2.0, 2.0, n) for _, n in stretches]
    for start, base in zip((s for s, _ in stretches), bases):  # one stretch per call
        out = base.clone()
        before, added = philox.add_normal_([out], [start], KEY, 0.5)
        part = stream[start : start + len(base)]
        assert torch.equal(out, base + part.float())
        assert before == pytest.approx(float(base.double().pow(2).sum()), rel=1e-6)
        assert added == pytest.approx(float(part.pow(2).sum()), rel=1e-6)
    outs = [b.clone() for b in bases]  # all in one call
    before, added = philox.add_normal_(outs, [s for s, _ in stretches], KEY, 0.5)
    for out, base, (start, n) in zip(outs, bases, stretches):
        assert torch.equal(out, base + stream[start : start + n].float())
    assert added == pytest.approx(sum(float(stream[s : s + n].pow(2).sum()) for s, n in stretches), rel=1e-6)
    with pytest.raises(ValueError, match=">= 0"):
        philox.add_normal_([torch.zeros(3)], [-1], KEY, 1.0)
    with pytest.raises(ValueError, match="one stream position per tensor"):
        philox.add_normal_([torch.zeros(3)], [0, 1], KEY, 1.0)
    with pytest.raises(ValueError, match="float32"):
        philox.add_normal_([torch.zeros(3), torch.zeros(3, dtype=torch.float64)], [0, 3], KEY, 1.0)
