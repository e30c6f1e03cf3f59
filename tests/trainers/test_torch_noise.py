"""The torch trainers' Gaussian noise: distribution, keys, full-entropy CPU generators, threads.

Every test runs with each CPU sampler: the C Philox one (the default where a compiler is) and torch's
mt19937 one (the fallback, and ``DPAUDIT_NOISE_GENERATOR=torch``)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from dpaudit.trainers.torch_common import noise, philox
from dpaudit.trainers.torch_common.sampling import NOISE_STREAM, step_rng

SHAPES = [(300, 400), (50_000,), (7,), (33, 3)]


@pytest.fixture(autouse=True, params=["philox", "torch"])
def sampler(request, monkeypatch):
    if request.param == "torch":
        monkeypatch.setattr(philox, "_library", lambda: None)
    assert philox.available() == (request.param == "philox")
    return request.param


def test_the_record_names_the_sampler_that_ran(sampler):
    assert noise.describe().startswith({"philox": "Philox4x32-10", "torch": "torch generator words"}[sampler])
    assert "96-bit radius uniform" in noise.describe()


def _flat(tensors):
    return torch.cat([t.flatten() for t in tensors]).double()


def test_a_draw_has_the_requested_distribution():
    like = [torch.empty(s) for s in SHAPES]
    flat = _flat(noise.gaussian_sum(like, [(0.7, (3, 1))], 99))
    # std of the sample std is ~ 0.7 / sqrt(2 n) = 0.1%: a 1% band is > 8 standard errors.
    assert abs(float(flat.mean())) < 0.01
    assert float(flat.std()) == pytest.approx(0.7, rel=0.01)
    assert stats.kstest(flat.numpy() / 0.7, "norm").pvalue > 1e-4
    assert [tuple(t.shape) for t in like] == SHAPES


def test_several_draws_add_their_variances():
    like = [torch.empty(s) for s in SHAPES]
    flat = _flat(noise.gaussian_sum(like, [(0.3, (3, 1)), (0.4, (3, 2))], 99))
    assert float(flat.std()) == pytest.approx(0.5, rel=0.01)  # sqrt(0.3^2 + 0.4^2)
    assert not torch.equal(flat, _flat(noise.gaussian_sum(like, [(0.3, (3, 1)), (0.4, (3, 3))], 99)))


def test_the_same_key_gives_the_same_draw_and_another_key_another():
    like = [torch.empty(s) for s in SHAPES]
    a = _flat(noise.gaussian_sum(like, [(1.0, (5,))], 123))
    assert torch.equal(a, _flat(noise.gaussian_sum(like, [(1.0, (5,))], 123)))
    for other_seed, other_key in [(124, (5,)), (123, (6,))]:
        b = _flat(noise.gaussian_sum(like, [(1.0, other_key)], other_seed))
        assert abs(float(torch.corrcoef(torch.stack([a, b]))[0, 1])) < 0.01


def test_seeds_equal_modulo_two_to_the_32_give_different_noise():
    """torch's own manual_seed keeps 32 bits (so a seeded stream is one of 2^32 and can be searched);
    the keyed generators take the whole secret."""
    same = [torch.randn(8, generator=torch.Generator().manual_seed(s)) for s in (77, 77 + 2**32)]
    assert torch.equal(*same)  # the weakness keyed_generator exists to avoid
    draws = [torch.randn(8, generator=noise.keyed_generator(s, 1)) for s in (77, 77 + 2**32)]
    assert not torch.equal(*draws)
    like = [torch.empty(1000)]
    assert not torch.equal(*(noise.gaussian_sum(like, [(1.0, (1,))], s)[0] for s in (77, 77 + 2**32)))


def test_the_cpu_generator_holds_the_whole_keyed_state():
    """All 624 mt19937 words come from the keyed PCG64 stream (not from a 32-bit seed)."""
    generator = noise.keyed_generator(2**100 + 5, 4, 2)
    words = generator.get_state().numpy()[24 : 24 + 8 * 624].view(np.uint64)
    expected = step_rng(2**100 + 5, NOISE_STREAM, 4, 2).integers(0, 1 << 32, size=624, dtype=np.uint64)
    expected[0] |= 1 << 31
    assert np.array_equal(words, expected)
    assert len(np.unique(words)) > 600


def test_the_values_do_not_depend_on_the_thread_count():
    like = [torch.empty(s) for s in SHAPES]
    threads = torch.get_num_threads()
    try:
        draws = []
        for n in (1, 2, 4):
            torch.set_num_threads(n)
            draws.append(_flat(noise.gaussian_sum(like, [(1.0, (9, 2)), (0.5, (9, 3))], 5)))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(draws[0], draws[1]) and torch.equal(draws[0], draws[2])


@pytest.mark.parametrize("total", [1, 8, 15, 16, 17, 1000, 7_392_104])
def test_the_pieces_cover_every_element_once(total):
    bounds = noise._piece_bounds(total)
    assert len(bounds) == noise.NOISE_CHUNKS and bounds[0][0] == 0 and bounds[-1][1] == total
    assert all(lo <= hi for lo, hi in bounds) and all(a[1] == b[0] for a, b in itertools.pairwise(bounds))


def test_each_call_returns_fresh_tensors_shaped_like_the_parameters():
    like = [torch.empty(s) for s in SHAPES]
    first = noise.gaussian_sum(like, [(1.0, (2,))], 7)
    kept = [t.clone() for t in first]
    noise.gaussian_sum(like, [(1.0, (3,))], 7)  # another draw must not overwrite the first
    assert all(torch.equal(a, b) for a, b in zip(first, kept))
    assert [tuple(t.shape) for t in first] == SHAPES and all(t.is_contiguous() for t in first)


def test_no_draw_gives_zeros():
    out = noise.gaussian_sum([torch.empty(4, 3)], [], 1)
    assert torch.equal(out[0], torch.zeros(4, 3))


def test_noise_added_in_place_is_the_drawn_noise_and_both_norms_come_back(sampler):
    """The one-pass path (Philox only) adds exactly what gaussian_sum draws, across piece boundaries
    inside tensors and tensors inside pieces, and returns both squared norms."""
    torch.manual_seed(0)
    shapes = [(5,), (300, 400), (3,), (77_777,), (1,), (1024,), (2, 1024)]
    grads = [torch.randn(s) for s in shapes]
    draw = (0.7, (3, 1))
    if sampler == "torch":
        assert not noise.fusable(grads, [draw])
        return
    assert noise.fusable(grads, [draw])
    drawn = noise.gaussian_sum(grads, [draw], 99)
    want = [g + z for g, z in zip(grads, drawn)]
    squares = (float(_flat(grads).pow(2).sum()), float(_flat(drawn).pow(2).sum()))
    assert noise.add_gaussian_(grads, draw, 99) == pytest.approx(squares, rel=1e-6)
    assert all(torch.equal(g, w) for g, w in zip(grads, want))


def test_the_one_pass_path_is_refused_where_it_would_differ(sampler):
    grads = [torch.zeros(10), torch.zeros(4, 3)]
    draw = (1.0, (1,))
    assert noise.fusable(grads, [draw]) == (sampler == "philox")
    assert not noise.fusable(grads, [draw, (1.0, (2,))])  # a sum of draws: its norm is not the parts'
    assert not noise.fusable([grads[0], grads[0]], [draw])  # one tensor twice
    assert not noise.fusable([torch.zeros(4, 3).t()], [draw])
    assert not noise.fusable([torch.zeros(4, dtype=torch.float64)], [draw])
    assert not noise.fusable([], [draw])
