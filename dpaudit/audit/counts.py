"""ROC counts, exact and bootstrapped: one vectorized engine (scores pooled and sorted once, ties grouped).

Every ROC vertex is a (true positives, false positives) pair at the rule "member iff score >= t";
:func:`_counts` gives them for the sample itself or for many bootstrap resamples at once
(multiplicity weights on the pre-sorted pool, so no resample is sorted again).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray


@dataclass(frozen=True)
class _Pool:
    """Members and non-members pooled and sorted by decreasing score, with tie groups marked."""

    order: NDArray[np.intp]  # pooled index (members first) of each sorted position
    is_member: NDArray[np.bool_]  # bool, at sorted positions
    ends: NDArray[np.intp]  # last sorted position of each group of equal scores
    thresholds: NDArray[np.float64]  # the distinct scores, decreasing
    n_members: int
    n_nonmembers: int


def _pool(member: NDArray[np.float64], nonmember: NDArray[np.float64]) -> _Pool:
    scores = np.concatenate([member, nonmember])
    labels = np.r_[np.ones(member.size, bool), np.zeros(nonmember.size, bool)]
    order = np.argsort(-scores, kind="stable")
    s = scores[order]
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])
    return _Pool(
        order=order,
        is_member=labels[order],
        ends=ends,
        thresholds=s[ends],
        n_members=member.size,
        n_nonmembers=nonmember.size,
    )


def _counts(
    pool: _Pool, member_w: NDArray[np.int64] | None = None, nonmember_w: NDArray[np.int64] | None = None
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """(TP, FP) at every ROC vertex, with a leading (0, 0) vertex for threshold +inf.

    ``member_w`` / ``nonmember_w`` (B, n_members + n_nonmembers) are multiplicities at the SORTED
    positions (bootstrap resamples; zero off their own class); without them, one ROC with unit weights.
    """
    if member_w is None:
        member_w = pool.is_member[None, :].astype(np.int64)
        nonmember_w = (~pool.is_member)[None, :].astype(np.int64)
    if nonmember_w is None:
        raise TypeError("member_w and nonmember_w are given together.")
    tp = np.cumsum(member_w, axis=1)[:, pool.ends]
    fp = np.cumsum(nonmember_w, axis=1)[:, pool.ends]
    zero = np.zeros((tp.shape[0], 1), dtype=tp.dtype)
    return np.hstack([zero, tp]), np.hstack([zero, fp])
