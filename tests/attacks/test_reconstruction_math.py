"""Top-k fills by beam search equal the k best candidates found by enumerating the whole space."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.attacks.reconstruction import top_k_fills


def _brute_top_k(table: np.ndarray, k: int) -> list[float]:
    scores = [
        sum(table[i, s] for i, s in enumerate(c))
        for c in itertools.product(range(table.shape[1]), repeat=table.shape[0])
    ]
    return sorted(scores, reverse=True)[:k]


@settings(max_examples=40, deadline=None)
@given(positions=st.integers(1, 4), alphabet=st.integers(2, 5), k=st.integers(1, 12), seed=st.integers(0, 10_000))
def test_beam_equals_enumeration(positions, alphabet, k, seed):
    rng = np.random.default_rng(seed)
    table = np.log(rng.dirichlet(np.ones(alphabet), size=(3, positions)))  # 3 canaries at once
    seqs, scores = top_k_fills(table, k)
    for n in range(3):
        expected = _brute_top_k(table[n], k)
        assert len(scores[n]) == len(expected) == min(k, alphabet**positions)
        np.testing.assert_allclose(scores[n], expected, rtol=0, atol=1e-12)
        # Each returned sequence really has the returned score, and sequences are distinct.
        recomputed = [sum(table[n, i, s] for i, s in enumerate(seq)) for seq in seqs[n]]
        np.testing.assert_allclose(recomputed, scores[n], rtol=0, atol=1e-12)
        assert len({tuple(s) for s in seqs[n].tolist()}) == len(seqs[n])


def test_top_1_is_the_per_position_argmax():
    table = np.log(np.random.default_rng(0).dirichlet(np.ones(10), size=(5, 6)))
    seqs, _ = top_k_fills(table, 1)
    np.testing.assert_array_equal(seqs[:, 0, :], table.argmax(-1))
