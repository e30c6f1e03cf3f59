"""The empirical ROC and the statistics read from it: AUC, TPR at a low FPR, attacker advantage.

- :func:`roc_curve`: the exact empirical ROC, one vertex per distinct score; the rule at threshold
  ``t`` is "predict member iff score >= t", so tied scores move together (a diagonal ROC segment).
- :func:`auc`: the area under that ROC (= the Mann-Whitney statistic with ties counted 1/2), with a
  bootstrap CI (:mod:`.bootstrap`).
- :func:`tpr_at_fpr`: TPR at a low FPR (Carlini et al. 2022): the largest TPR of a threshold whose
  empirical FPR is <= the target, with the non-members that make the FPR meaningful
  (:func:`min_nonmembers_for`).
- :func:`attacker_advantage`: max over thresholds of TPR - FPR (Yeom et al. 2018).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from dpaudit.audit.bootstrap import BootstrapCI, Statistic, _bootstrap
from dpaudit.audit.checks import (
    _check_unit,
    _json_array,
    _json_float,
    _json_int,
    _json_number,
    _json_object,
    _scores,
)
from dpaudit.audit.counts import _counts, _pool

if TYPE_CHECKING:
    from dpaudit.accounting.serialization import Json


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A point estimate with its bootstrap CI (AUC, attacker advantage)."""

    value: float
    ci: BootstrapCI

    def to_json(self) -> Json:
        return {"value": self.value, "ci": self.ci.to_json()}

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> Estimate:
        return cls(value=_json_number(obj["value"]), ci=BootstrapCI.from_json(_json_object(obj["ci"])))


@dataclass(frozen=True, kw_only=True)
class TprAtFpr:
    """TPR at a target FPR (Carlini et al. 2022), with what it takes to measure it.

    Attributes:
        fpr: the target false positive rate.
        tpr: the largest TPR among thresholds whose empirical FPR is <= ``fpr``.
        ci: percentile bootstrap CI of ``tpr``.
        threshold: the threshold that attains it (rule: member iff score >= threshold; +inf: none).
        achieved_fpr: the empirical FPR at that threshold (<= ``fpr``).
        n_nonmembers: the number of non-member scores.
        min_nonmembers: :func:`min_nonmembers_for` ``(fpr)``.
        enough_nonmembers: False when ``n_nonmembers < min_nonmembers``: the only thresholds with
            FPR <= fpr then have zero false positives, so ``tpr`` is really TPR at FPR 0 and says
            little about ``fpr``.
    """

    fpr: float
    tpr: float
    ci: BootstrapCI
    threshold: float
    achieved_fpr: float
    n_nonmembers: int
    min_nonmembers: int
    enough_nonmembers: bool

    def to_json(self) -> Json:
        out = dataclasses.asdict(self)
        out["ci"] = self.ci.to_json()
        out["threshold"] = _json_float(self.threshold)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> TprAtFpr:
        return cls(
            fpr=_json_number(obj["fpr"]),
            tpr=_json_number(obj["tpr"]),
            ci=BootstrapCI.from_json(_json_object(obj["ci"])),
            threshold=_json_number(obj["threshold"]),
            achieved_fpr=_json_number(obj["achieved_fpr"]),
            n_nonmembers=_json_int(obj["n_nonmembers"]),
            min_nonmembers=_json_int(obj["min_nonmembers"]),
            enough_nonmembers=bool(obj["enough_nonmembers"]),
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class Roc:
    """An empirical ROC curve: one vertex per distinct threshold, from (0, 0) to (1, 1).

    Vertex ``j`` is the rule "member iff score >= thresholds[j]"; ``thresholds[0] = +inf`` predicts
    nobody. Thresholds decrease, so ``fpr`` and ``tpr`` are non-decreasing. Tied scores share one
    vertex, so a tie between a member and a non-member is a diagonal segment (worth 1/2 in the AUC).

    Attributes:
        fpr, tpr, thresholds: read-only float64 arrays of equal length.
        n_members, n_nonmembers: the numbers of scores behind the rates.
    """

    fpr: NDArray[np.float64]
    tpr: NDArray[np.float64]
    thresholds: NDArray[np.float64]
    n_members: int
    n_nonmembers: int

    def __post_init__(self) -> None:
        arrays = []
        for name in ("fpr", "tpr", "thresholds"):
            arr = np.array(getattr(self, name), dtype=np.float64)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
            arrays.append(arr)
        if not (arrays[0].shape == arrays[1].shape == arrays[2].shape) or arrays[0].ndim != 1:
            raise ValueError("fpr, tpr and thresholds must be 1-D arrays of the same length.")

    def auc(self) -> float:
        """Area under the curve by the trapezoidal rule (exact for the empirical ROC)."""
        return float(np.sum(np.diff(self.fpr) * (self.tpr[1:] + self.tpr[:-1])) / 2)

    def advantage(self) -> float:
        """Attacker (membership) advantage max(TPR - FPR) over the vertices (Yeom et al. 2018)."""
        return float(max(0.0, np.max(self.tpr - self.fpr)))

    def tpr_at(self, fpr: float) -> float:
        """The largest TPR of a vertex whose FPR is <= ``fpr`` (deterministic thresholds)."""
        fpr = _check_unit(fpr, "fpr", low_open=False, high_open=False)
        ok = self.fpr <= fpr + 1e-12
        return float(np.max(self.tpr[ok]))

    def convex_hull(self) -> Roc:
        """The ROC convex hull: the vertices reachable by randomizing between two thresholds.

        Keeps, per distinct FPR, the highest TPR, then the upper concave hull (monotone chain);
        collinear vertices are dropped.
        """
        last = np.r_[self.fpr[1:] != self.fpr[:-1], True]  # highest TPR of each distinct FPR
        x, y, t = self.fpr[last], self.tpr[last], self.thresholds[last]
        if x[0] != 0.0:  # cannot happen for an ROC built here; keeps the hull anchored at (0, 0)
            x, y, t = np.r_[0.0, x], np.r_[0.0, y], np.r_[np.inf, t]
        keep: list[int] = []
        for i in range(len(x)):  # hull sizes are small; the loop is over vertices, not examples
            while len(keep) >= 2:
                a, b = keep[-2], keep[-1]
                cross = (x[b] - x[a]) * (y[i] - y[a]) - (y[b] - y[a]) * (x[i] - x[a])
                if cross >= 0:  # b lies on or below the chord a-i
                    keep.pop()
                else:
                    break
            keep.append(i)
        idx = np.asarray(keep)
        return Roc(fpr=x[idx], tpr=y[idx], thresholds=t[idx], n_members=self.n_members, n_nonmembers=self.n_nonmembers)

    def rank_scores(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """(member, non-member) scores with exactly this ROC: vertex j's new members and non-members
        all score ``len(thresholds) - j``.

        Every bound in this module depends on the scores only through their order (counts above
        thresholds, guesses on the top and bottom scores), so bounds recomputed on these scores equal
        those on the original ones; :mod:`dpaudit.verdict.headline` uses them to recompute stored audits at a
        corrected confidence without the score files. (A split draws its own partition of them: an
        equally valid, not identical, split.)
        """
        tp = np.rint(self.tpr * self.n_members).astype(np.int64)
        fp = np.rint(self.fpr * self.n_nonmembers).astype(np.int64)
        level = np.arange(len(self.thresholds), 0, -1, dtype=np.float64)
        member = np.repeat(level[1:], np.diff(tp))
        nonmember = np.repeat(level[1:], np.diff(fp))
        if member.size != self.n_members or nonmember.size != self.n_nonmembers:
            raise ValueError("the ROC does not end at (1, 1): cannot recover its scores.")
        return member, nonmember

    def tpr_at_randomized(self, fpr: float) -> float:
        """The largest TPR at FPR ``fpr`` when the attacker may randomize between two thresholds
        (linear interpolation on the convex hull; jax-privacy's ``tpr_at_given_fpr``)."""
        fpr = _check_unit(fpr, "fpr", low_open=False, high_open=False)
        hull = self.convex_hull()
        return float(np.interp(fpr, hull.fpr, hull.tpr))

    def to_json(self) -> Json:
        return {
            "fpr": self.fpr.tolist(),
            "tpr": self.tpr.tolist(),
            "thresholds": [_json_float(t) for t in self.thresholds],
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> Roc:
        return cls(
            fpr=np.asarray(obj["fpr"], float),
            tpr=np.asarray(obj["tpr"], float),
            thresholds=np.asarray([_json_number(t) for t in _json_array(obj["thresholds"])], float),
            n_members=_json_int(obj["n_members"]),
            n_nonmembers=_json_int(obj["n_nonmembers"]),
        )


def roc_curve(member_scores: ArrayLike, nonmember_scores: ArrayLike) -> Roc:
    """The exact empirical ROC of scores where higher means member (ties handled exactly).

    Args:
        member_scores: attack scores of members (e.g. training examples, included canaries).
        nonmember_scores: attack scores of non-members.

    Returns:
        :class:`Roc` with one vertex per distinct score plus the (0, 0) vertex.
    """
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    pool = _pool(member, nonmember)
    tp, fp = _counts(pool)
    return Roc(
        fpr=fp[0] / pool.n_nonmembers,
        tpr=tp[0] / pool.n_members,
        thresholds=np.r_[np.inf, pool.thresholds],
        n_members=pool.n_members,
        n_nonmembers=pool.n_nonmembers,
    )


def _auc_stat(tp: NDArray[np.int64], fp: NDArray[np.int64], n_m: int, n_n: int) -> NDArray[np.float64]:
    area: NDArray[np.float64] = np.sum(np.diff(fp, axis=1) * (tp[:, 1:] + tp[:, :-1]), axis=1) / (2.0 * n_m * n_n)
    return area


def _advantage_stat(tp: NDArray[np.int64], fp: NDArray[np.int64], n_m: int, n_n: int) -> NDArray[np.float64]:
    advantage: NDArray[np.float64] = np.maximum(0.0, np.max(tp / n_m - fp / n_n, axis=1))
    return advantage


def _tpr_at_stat(fpr: float) -> Statistic:
    def stat(tp: NDArray[np.int64], fp: NDArray[np.int64], n_m: int, n_n: int) -> NDArray[np.float64]:
        allowed = math.floor(fpr * n_n + 1e-9)  # false positives allowed at FPR <= fpr
        k = np.sum(fp <= allowed + 1e-9, axis=1)  # fp is non-decreasing along each row
        tpr: NDArray[np.float64] = tp[np.arange(tp.shape[0]), k - 1] / n_m
        return tpr

    return stat


def auc(
    member_scores: ArrayLike, nonmember_scores: ArrayLike, *, seed: int, level: float = 0.95, num_samples: int = 1000
) -> Estimate:
    """AUC of the empirical ROC (ties count 1/2) with a seeded stratified bootstrap CI.

    Args:
        member_scores, nonmember_scores: scores, higher means member.
        seed: seed of the bootstrap resampling.
        level: coverage of the CI.
        num_samples: bootstrap resamples.
    """
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    value = roc_curve(member, nonmember).auc()
    ci = _bootstrap(member, nonmember, {"auc": _auc_stat}, seed=seed, num_samples=num_samples, level=level)["auc"]
    return Estimate(value=value, ci=ci)


def attacker_advantage(
    member_scores: ArrayLike, nonmember_scores: ArrayLike, *, seed: int, level: float = 0.95, num_samples: int = 1000
) -> Estimate:
    """Membership advantage max_t (TPR - FPR) (Yeom et al. 2018) with a bootstrap CI."""
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    value = roc_curve(member, nonmember).advantage()
    ci = _bootstrap(member, nonmember, {"advantage": _advantage_stat}, seed=seed, num_samples=num_samples, level=level)[
        "advantage"
    ]
    return Estimate(value=value, ci=ci)


def min_nonmembers_for(fpr: float, *, false_positives: int = 1) -> int:
    """Non-members needed before an empirical FPR of ``fpr`` admits ``false_positives`` errors.

    With n non-members the empirical FPR moves in steps of 1/n: below n = 1/fpr the only thresholds
    with FPR <= fpr have zero false positives, and "TPR at 0.1% FPR" silently becomes "TPR at 0 false
    positives". Carlini et al. (2022) make the same point: TPR at FPR 1e-5 needs 1e5 non-members.
    ``false_positives=10`` asks for enough non-members that ~10 false positives pin the FPR down.

    Returns:
        ceil(false_positives / fpr), e.g. 1000 at fpr=0.001.
    """
    fpr = _check_unit(fpr, "fpr", high_open=False)
    if false_positives < 1:
        raise ValueError(f"false_positives must be >= 1, got {false_positives}.")
    return math.ceil(false_positives / fpr - 1e-9)


def tpr_at_fpr(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    fpr: float,
    *,
    seed: int,
    level: float = 0.95,
    num_samples: int = 1000,
) -> TprAtFpr:
    """TPR at a low FPR (Carlini et al. 2022) with a bootstrap CI and the non-member count it needs.

    Deterministic thresholds: the largest TPR of a rule "score >= t" whose empirical FPR is <= fpr.
    ``enough_nonmembers`` is False (and the number should not be trusted) when there are fewer than
    :func:`min_nonmembers_for` ``(fpr)`` non-members.
    """
    fpr = _check_unit(fpr, "fpr", high_open=False)
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    ci = _bootstrap(member, nonmember, {"tpr": _tpr_at_stat(fpr)}, seed=seed, num_samples=num_samples, level=level)[
        "tpr"
    ]
    return _tpr_at_fpr_point(roc_curve(member, nonmember), fpr, ci)


def _tpr_at_fpr_point(roc: Roc, fpr: float, ci: BootstrapCI) -> TprAtFpr:
    allowed = math.floor(fpr * roc.n_nonmembers + 1e-9) / roc.n_nonmembers
    ok = np.flatnonzero(roc.fpr <= allowed + 1e-12)
    j = ok[np.argmax(roc.tpr[ok])]
    need = min_nonmembers_for(fpr)
    return TprAtFpr(
        fpr=fpr,
        tpr=float(roc.tpr[j]),
        ci=ci,
        threshold=float(roc.thresholds[j]),
        achieved_fpr=float(roc.fpr[j]),
        n_nonmembers=roc.n_nonmembers,
        min_nonmembers=need,
        enough_nonmembers=roc.n_nonmembers >= need,
    )
