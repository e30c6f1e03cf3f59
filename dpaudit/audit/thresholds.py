"""How a bound chooses its threshold or its guesses without overfitting the evaluation scores.

Clopper-Pearson bounds: a threshold chosen on a held-apart split (:class:`SplitThreshold`), a
Bonferroni correction over a fixed threshold set or over every threshold
(:class:`BonferroniThresholds`), or a threshold fixed in advance (:class:`FixedThreshold`). One-run
bounds: guess counts fixed in advance (:class:`FixedGuesses`), a Bonferroni grid of them
(:class:`GuessGrid`), or chosen on a split (:class:`SplitGuesses`). Never the best threshold of the
evaluation set itself without a correction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray

from dpaudit.audit.checks import _check_unit

#: Scores split into a part that chooses and a part that is evaluated: ((members, non-members), (members, non-members)).
Partition: TypeAlias = tuple[
    tuple[NDArray[np.float64], NDArray[np.float64]], tuple[NDArray[np.float64], NDArray[np.float64]]
]


@dataclass(frozen=True, kw_only=True)
class SplitThreshold:
    """Choose the threshold (or guesses) on a held-apart part of the scores, bound on the rest.

    The choice may use the best threshold of the choosing part at full confidence: the evaluation
    part never saw it. Members and non-members are split separately with
    ``numpy.random.default_rng(seed)``: a permutation of the members, then of the non-members; the
    first ``int(n * fraction)`` of each choose (jax-privacy's ``Split`` draws the same partition).

    Attributes:
        fraction: share of each score set used to choose, in (0, 1).
        seed: the split seed (recorded in the bound).
    """

    fraction: float = 0.5
    seed: int = 0

    def __post_init__(self) -> None:
        _check_unit(self.fraction, "fraction")

    def partition(self, member: NDArray[np.float64], nonmember: NDArray[np.float64]) -> Partition:
        """((member_choose, nonmember_choose), (member_eval, nonmember_eval))."""
        return _partition(self.fraction, self.seed, member, nonmember)


def _partition(fraction: float, seed: int, member: NDArray[np.float64], nonmember: NDArray[np.float64]) -> Partition:
    rng = np.random.default_rng(seed)
    parts: list[tuple[NDArray[np.float64], NDArray[np.float64]]] = []
    for arr in (member, nonmember):
        perm = rng.permutation(arr.size)
        cut = int(arr.size * fraction)
        parts.append((arr[perm[:cut]], arr[perm[cut:]]))
    (m1, m2), (n1, n2) = parts
    for name, part in (("member", m1), ("member", m2), ("non-member", n1), ("non-member", n2)):
        if part.size == 0:
            raise ValueError(
                f"a split with fraction={fraction} leaves an empty {name} part: too few "
                "scores to split; use a Bonferroni correction instead."
            )
    return (m1, n1), (m2, n2)


@dataclass(frozen=True, kw_only=True)
class BonferroniThresholds:
    """Bound at the best of several thresholds with a Bonferroni correction.

    Attributes:
        thresholds: a threshold set fixed before seeing the scores: each of the T thresholds gets
            significance / T. None: every threshold, corrected over every possible count (n_members
            TPR bounds and n_nonmembers FPR bounds, each at significance / 2 / n), which holds
            uniformly over all real thresholds, so picking the best one afterwards is valid.

    Why every threshold needs only n events per side: FPR(t) = P[score >= t] falls as t rises and
    the count FP(t) of non-members scoring >= t does too. For a count k with Clopper-Pearson upper
    bound U(k), let s_k = sup{t : FPR(t) > U(k)}; then P[score >= s_k] >= U(k) (left limit), and a
    threshold t <= s_k with FP(t) <= k forces #{score >= s_k} <= k, an event of probability
    <= alpha_k for a Binomial(n, >= U(k)) count. k = n needs no event (U(n) = 1). The same argument
    covers the TPR lower bounds, so n_nonmembers + n_members events cover every threshold the data
    could offer.
    """

    thresholds: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.thresholds is not None:
            ts = tuple(float(t) for t in self.thresholds)
            if not ts or any(math.isnan(t) for t in ts):
                raise ValueError(f"thresholds must be a non-empty tuple of numbers, got {self.thresholds}.")
            object.__setattr__(self, "thresholds", ts)


@dataclass(frozen=True, kw_only=True)
class FixedThreshold:
    """One threshold fixed in advance (rule: member iff score >= threshold); no correction needed."""

    threshold: float

    def __post_init__(self) -> None:
        if math.isnan(float(self.threshold)):
            raise ValueError("threshold must be a number, got NaN.")


@dataclass(frozen=True, kw_only=True)
class FixedGuesses:
    """One-run guesses fixed in advance: "member" on the ``k_plus`` highest scores, "non-member" on
    the ``k_minus`` lowest, abstain on the rest (Steinke et al. 2023).

    With ties at the cut, every score equal to the k-th is guessed too (the guesses stay a function
    of the scores alone, which is all the one-run theorems need).
    """

    k_plus: int
    k_minus: int = 0

    def __post_init__(self) -> None:
        if self.k_plus < 0 or self.k_minus < 0 or self.k_plus + self.k_minus < 1:
            raise ValueError(
                f"k_plus and k_minus must be >= 0 with at least one guess, got "
                f"k_plus={self.k_plus}, k_minus={self.k_minus}."
            )


#: Shares of the canaries guessed by the default :class:`GuessGrid`: one-sided (k+ = f m) and
#: two-sided (k+ = k- = f m / 2).
DEFAULT_GUESS_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


@dataclass(frozen=True, kw_only=True)
class GuessGrid:
    """Bonferroni over a grid of one-run guess counts fixed before looking at the scores.

    Attributes:
        pairs: (k_plus, k_minus) pairs, each counted in the correction (a (0, 0) pair never rejects
            but still counts); None: :data:`DEFAULT_GUESS_FRACTIONS` of the number of canaries m,
            one-sided and split evenly between top and bottom (m is public).
    """

    pairs: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        if self.pairs is not None:
            pairs = tuple((int(a), int(b)) for a, b in self.pairs)
            if not pairs or any(a < 0 or b < 0 for a, b in pairs):
                raise ValueError(f"pairs must be a non-empty tuple of (k_plus, k_minus) >= 0, got {self.pairs}.")
            object.__setattr__(self, "pairs", pairs)

    def resolve(self, m: int) -> tuple[tuple[int, int], ...]:
        """The distinct (k_plus, k_minus) pairs for m canaries (counts clipped to m guesses in all)."""
        if self.pairs is not None:
            pairs = [(min(a, m), min(b, m - min(a, m))) for a, b in self.pairs]
        else:
            return guess_pairs(DEFAULT_GUESS_FRACTIONS, m)
        return tuple(dict.fromkeys(pairs))


def guess_pairs(fractions: Sequence[float], m: int) -> tuple[tuple[int, int], ...]:
    """The distinct (k_plus, k_minus) guess counts for m canaries: for each fraction f of them, k = round(f m) guesses
    all "member" (k, 0), and split half and half (k - k // 2, k // 2)."""
    pairs: list[tuple[int, int]] = []
    for f in fractions:
        k = max(1, round(f * m))
        pairs.append((k, 0))
        if k >= 2:
            pairs.append((k - k // 2, k // 2))
    return tuple(dict.fromkeys(pairs))


@dataclass(frozen=True, kw_only=True)
class SplitGuesses:
    """One-run guesses chosen on a held-apart part of the canaries, applied to the rest.

    The best (k_plus, k_minus) of ``grid`` on the choosing part becomes score thresholds (the k-th
    highest and lowest scores there), which then decide the guesses on the evaluation part; the
    evaluation canaries alone make up m. Same partition as :class:`SplitThreshold`.
    """

    fraction: float = 0.5
    seed: int = 0
    grid: GuessGrid = GuessGrid()

    def __post_init__(self) -> None:
        _check_unit(self.fraction, "fraction")
