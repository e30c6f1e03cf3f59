"""Exact and near duplicates in a membership task: within each side, and between members and non-members.

One similarity for both stages that split members from non-members: ``dpaudit inject --train/--heldout`` (the user's
own split, :mod:`dpaudit.canaries.pipeline`) and the attack's examples task (:mod:`dpaudit.attacks.mia`, which imports
it through :mod:`dpaudit.attacks.near_duplicates`); docs/canaries.md, "Splits, labels and randomness".

A membership audit asks whether the model tells the texts it trained on from texts it never saw. A non-member that
is a copy, or a near copy, of a member is not an unseen text (the model saw its twin), and a member that appears
twice was trained on twice: both make the split, not the model, decide part of the answer. Such rows are treated the
same way on both sides:

- **within a side**, texts equal after :func:`normalize` are one candidate (the first row kept), members and
  non-members alike;
- **across the sides**, a member and a non-member are near duplicates when the Jaccard similarity of their sets of
  character 5-grams (of the normalized texts) is at least the threshold (0.8 by default, the threshold of Lee et al.
  2022's near-duplicate removal; 1 keeps exact matches after normalization only). Every such pair is counted; the
  examples task leaves both ends out (``--near-duplicates exclude``, the default) or keeps them and says how many
  there are (``keep``).

The similarity is exact (sparse products of the 5-gram indicator matrices, in blocks), not a MinHash estimate: the
examples task has thousands of rows, not billions. A text too short for one 5-gram is its own single shingle.

References:
  Lee, Ippolito, Nystrom et al. 2022, "Deduplicating Training Data Makes Language Models Better" (near duplicates by
    Jaccard similarity of n-gram shingles >= 0.8).
  Duan et al. 2024, "Do Membership Inference Attacks Work on Large Language Models?" (near-duplicate and
    distribution-shift leakage between members and non-members).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Character n-gram length of the shingles, and the default Jaccard threshold.
SHINGLE, DEFAULT_THRESHOLD = 5, 0.8
#: Non-member rows per block of the sparse product (bounds its memory).
BLOCK = 512
_PUNCT = re.compile(r"[^\w\s]+", re.UNICODE)


def normalize(text: str) -> str:
    """NFKC, case-folded, punctuation as spaces, whitespace collapsed: what two copies of a text keep in common."""
    text = _PUNCT.sub(" ", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(text.split())


def first_of_each(texts: Sequence[str]) -> list[int]:
    """Indices of the first row of each group of texts equal after :func:`normalize`, in order."""
    seen: set[str] = set()
    keep = []
    for i, text in enumerate(texts):
        key = normalize(text)
        if key not in seen:
            seen.add(key)
            keep.append(i)
    return keep


def _shingles(texts: Sequence[str]) -> list[set[str]]:
    out = []
    for text in texts:
        norm = normalize(text)
        grams = {norm[i : i + SHINGLE] for i in range(len(norm) - SHINGLE + 1)}
        out.append(grams or {norm})
    return out


def _indicator(sets: Sequence[set[str]], vocabulary: dict[str, int]):  # noqa: ANN202 - a scipy csr_matrix
    from scipy.sparse import csr_matrix

    rows = [i for i, s in enumerate(sets) for _ in s]
    cols = [vocabulary.setdefault(g, len(vocabulary)) for s in sets for g in s]
    return csr_matrix((np.ones(len(rows), dtype=np.float32), (rows, cols)), shape=(len(sets), max(len(vocabulary), 1)))


@dataclass(frozen=True)
class CrossPairs:
    """The near-duplicate pairs between members and non-members: ``pairs`` (member index, non-member index,
    similarity), indices into the lists given to :func:`cross_pairs`."""

    pairs: list[tuple[int, int, float]]
    threshold: float

    @property
    def members(self) -> set[int]:
        return {m for m, _, _ in self.pairs}

    @property
    def nonmembers(self) -> set[int]:
        return {h for _, h, _ in self.pairs}


def cross_pairs(
    members: Sequence[str], nonmembers: Sequence[str], *, threshold: float = DEFAULT_THRESHOLD
) -> CrossPairs:
    """Every (member, non-member) pair whose 5-gram Jaccard similarity is >= ``threshold`` (texts equal after
    :func:`normalize` always are).

    Raises:
        ValueError: a threshold outside (0, 1].
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"the near-duplicate threshold must be in (0, 1], got {threshold}.")
    a, b = _shingles(members), _shingles(nonmembers)
    if not a or not b:
        return CrossPairs([], threshold)
    vocabulary: dict[str, int] = {}
    ma = _indicator(a, vocabulary)
    mb = _indicator(b, vocabulary)
    width = max(len(vocabulary), 1)
    ma.resize((ma.shape[0], width))
    mb.resize((mb.shape[0], width))
    size_a = np.asarray([len(s) for s in a], dtype=np.float64)
    size_b = np.asarray([len(s) for s in b], dtype=np.float64)
    pairs: list[tuple[int, int, float]] = []
    for start in range(0, len(b), BLOCK):
        inter = (mb[start : start + BLOCK] @ ma.T).tocoo()  # [block, members] shared shingles
        h, m, shared = inter.row + start, inter.col, inter.data.astype(np.float64)
        jaccard = shared / (size_a[m] + size_b[h] - shared)
        hit = jaccard >= threshold - 1e-12
        pairs.extend((int(i), int(j), float(s)) for i, j, s in zip(m[hit], h[hit], jaccard[hit]))
    pairs.sort()
    return CrossPairs(pairs, threshold)
