"""Membership scores in, audit statistics out: ROC, AUC, TPR at low FPR, empirical epsilon lower bounds.

Every attack in dpaudit produces scores where **higher means member**; this module is the one place
that turns them into numbers (the attacks never compute metrics themselves). It is pure numpy/scipy
so that the audit works in a torch-only install (no jax).

What it computes, and the convention each follows:

- :func:`roc_curve`: the exact empirical ROC, one vertex per distinct score; the rule at threshold
  ``t`` is "predict member iff score >= t", so tied scores move together (a diagonal ROC segment).
- :func:`auc`: the area under that ROC (= the Mann-Whitney statistic with ties counted 1/2, which is
  also what ``sklearn.metrics.roc_auc_score`` returns), with a seeded, stratified percentile
  bootstrap CI (:class:`BootstrapCI`).
- :func:`tpr_at_fpr`: TPR at a low FPR (Carlini et al. 2022): the largest TPR of a threshold whose
  empirical FPR is <= the target (no randomized mixing of thresholds), with a bootstrap CI and the
  number of non-members that makes the FPR meaningful (:func:`min_nonmembers_for`).
  :meth:`Roc.tpr_at_randomized` gives the randomized-threshold value (the ROC convex hull).
- :func:`attacker_advantage`: max over thresholds of TPR - FPR (Yeom et al. 2018).
- :func:`epsilon_lower_bound_clopper_pearson`: Clopper-Pearson intervals on TPR and FPR turned into
  epsilon >= log((TPR_low - delta) / FPR_high) (Jagielski et al. 2020; Nasr et al. 2021), at a
  threshold chosen on a held-apart split (:class:`SplitThreshold`), under a Bonferroni correction
  over a fixed threshold set or over every threshold (:class:`BonferroniThresholds`), or at a
  threshold fixed in advance (:class:`FixedThreshold`). Never the best threshold of the evaluation
  set itself without a correction.
- :func:`epsilon_lower_bound_one_run`: the one-run audit of Steinke, Nasr & Jagielski (2023) on
  coin-flip canaries: guess "member" for the k+ top scores and "non-member" for the k- bottom
  scores, abstain on the rest, and test the number of correct guesses.
- :func:`epsilon_lower_bound_one_run_fdp`: the f-DP analysis of the same guessing game by
  Mahloujifar, Melis & Chaudhuri (2024), tighter, reported against the Gaussian-DP family: it refutes
  mu-GDP (Gaussian mechanisms only), not an (epsilon, delta) claim.
- :func:`audit_scores`: all of the above for ONE set of scores in one typed :class:`AuditResult`,
  with ``exceeds_claim`` set (and a loud warning) when a proof (one-run bound on coin-flip
  canaries) is above the accountant's epsilon. The headline of a whole attack run (the best of
  several audits, corrected for how many) is :mod:`dpaudit.headline`.

When is a bound a proof? An (epsilon, delta) lower bound at 95% confidence means: if the mechanism
really were (epsilon, delta)-DP, the bound would exceed epsilon with probability at most 5%.

- Clopper-Pearson treats every score as an independent trial of the mechanism. That holds when each
  score comes from its own training run (the setting of Jagielski et al. and Nasr et al.). Scores of
  many examples of ONE model are not independent trials, so on them the bound is the customary but
  heuristic audit.
- The one-run bounds are proofs for ONE training run, provided membership of every canary was decided
  by an independent fair coin (Steinke et al. 2023): use them on coin-flip canaries.
- The f-DP bound rejects "the mechanism is mu-GDP" and reports the epsilon at ``delta`` of the largest
  rejected mu. It is an (epsilon, delta) lower bound only for mechanisms whose privacy profile is
  that of a Gaussian mechanism (DP-SGD is close to one by the central limit theorem of Dong, Roth &
  Su); on randomized response with epsilon 2 it exceeded the true epsilon in 99.5% of simulated
  trials. :class:`AuditResult` therefore keeps it out of ``exceeds_claim`` and the headline, and
  labels it "refutes mu-GDP (Gaussian mechanisms only), not an (epsilon, delta) bound".

Conventions shared with ``jax_privacy.auditing.CanaryScoreAuditor`` (cross-checked in the tests):
significance = 1 - confidence; Clopper-Pearson one-sided intervals at significance / 2 each for TPR
and FPR; a split draws ``rng.permutation`` of the members, then of the non-members, from
``numpy.random.default_rng(seed)`` and keeps the first ``int(n * fraction)`` of each for choosing.
Deliberate differences: (1) the Bonferroni correction over "all thresholds" here counts every
possible false/true-positive count (n_nonmembers events for the FPR bounds, n_members for the TPR
bounds), which is valid uniformly over every real threshold; jax-privacy divides by the number of
thresholds on the empirical ROC convex hull, a data-dependent count. A fixed threshold set gives
identical results. (2) :func:`auc` is the empirical AUC; jax-privacy's ``attack_auroc`` is the AUC
of the ROC convex hull (here ``roc_curve(...).convex_hull().auc()``). (3) ``tpr_at_fpr`` uses
deterministic thresholds; jax-privacy's ``tpr_at_given_fpr`` interpolates on the convex hull (here
:meth:`Roc.tpr_at_randomized`). (4) the bootstrap is the percentile bootstrap (jax-privacy applies a
bias correction). (5) the one-run bounds also take k- guesses (jax-privacy: k- = 0 only), and the
Bonferroni grid of guess counts is fixed in advance (:class:`GuessGrid`) rather than the data's hull.
(6) choosing the one-run guesses on a split, jax-privacy skips thresholds whose precision is below
logistic(best epsilon so far): exact for Steinke et al., a heuristic for the f-DP bound that can miss
the best threshold; here every candidate is evaluated.

References:
  Carlini et al. 2022, "Membership Inference Attacks From First Principles" (TPR at low FPR).
  Yeom et al. 2018, "Privacy Risk in Machine Learning" (membership advantage).
  Jagielski, Ullman & Oprea 2020, "Auditing Differentially Private Machine Learning: How Private is
    Private SGD?"; Nasr et al. 2021, "Adversary Instantiation: Lower Bounds for Differentially
    Private Machine Learning" (Clopper-Pearson epsilon lower bounds).
  Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run".
  Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run".
  Dong, Roth & Su 2022, "Gaussian Differential Privacy" (the mu-GDP epsilon-delta curve).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.optimize
import scipy.special
import scipy.stats
from numpy.typing import ArrayLike

__all__ = [
    "AuditResult",
    "BonferroniThresholds",
    "BootstrapCI",
    "EpsilonBound",
    "Estimate",
    "FixedGuesses",
    "FixedThreshold",
    "GuessGrid",
    "Roc",
    "SplitGuesses",
    "SplitThreshold",
    "TprAtFpr",
    "attacker_advantage",
    "auc",
    "audit_scores",
    "epsilon_lower_bound_clopper_pearson",
    "epsilon_lower_bound_one_run",
    "epsilon_lower_bound_one_run_fdp",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_mu",
    "min_nonmembers_for",
    "roc_curve",
    "tpr_at_fpr",
]

SCHEMA = "dpaudit.audit/1"
#: (epsilon, delta)-DP: the bound refutes any (epsilon', delta) claim with epsilon' below it.
GUARANTEE_DP = "(epsilon, delta)-DP"
#: Gaussian DP: the bound refutes mu-GDP for the mu whose epsilon at delta is below it.
GUARANTEE_GDP = "mu-GDP"
_STANDARD_NORMAL = statistics.NormalDist()
#: Bootstrap rows evaluated per block (bounds the memory of the vectorized bootstrap).
_BOOTSTRAP_CELLS = 4_000_000


# --------------------------------------------------------------------------------------------------
# Input checks


def _scores(values: ArrayLike, name: str) -> np.ndarray:
    """Scores as a 1-D float64 array; empty, NaN or infinite scores are a ValueError naming the array."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of scores, got shape {arr.shape}.")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: an audit needs at least one member and one non-member score.")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(
            f"{name} has {bad.size} non-finite score(s) (first at index {bad[0]}: {arr[bad[0]]}); "
            "scores must be finite numbers where higher means member (map -inf log-probabilities to a "
            "finite floor first)."
        )
    return arr


def _check_unit(x: float, name: str, *, low_open: bool = True, high_open: bool = True) -> float:
    x = float(x)
    ok = (x > 0 if low_open else x >= 0) and (x < 1 if high_open else x <= 1)
    if not ok:
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {x}.")
    return x


# --------------------------------------------------------------------------------------------------
# Result types


def _float_or_none(x: Any) -> float | None:
    return None if x is None else float(x)


@dataclass(frozen=True, kw_only=True)
class BootstrapCI:
    """A percentile bootstrap confidence interval.

    Members and non-members are resampled separately (a stratified bootstrap), each with replacement
    to its own size, ``num_samples`` times from ``numpy.random.default_rng(seed)``.

    Attributes:
        low, high: the (1 - level) / 2 and (1 + level) / 2 quantiles of the bootstrap distribution.
        level: the nominal coverage (0.95 for a 95% interval).
        num_samples: bootstrap resamples.
        seed: the seed of the resampling generator.
    """

    low: float
    high: float
    level: float
    num_samples: int
    seed: int

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> BootstrapCI:
        return cls(low=float(obj["low"]), high=float(obj["high"]), level=float(obj["level"]),
                   num_samples=int(obj["num_samples"]), seed=int(obj["seed"]))


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A point estimate with its bootstrap CI (AUC, attacker advantage)."""

    value: float
    ci: BootstrapCI

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "ci": self.ci.to_json()}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Estimate:
        return cls(value=float(obj["value"]), ci=BootstrapCI.from_json(obj["ci"]))


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

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ci"] = self.ci.to_json()
        out["threshold"] = _json_float(self.threshold)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TprAtFpr:
        return cls(fpr=float(obj["fpr"]), tpr=float(obj["tpr"]), ci=BootstrapCI.from_json(obj["ci"]),
                   threshold=_unjson_float(obj["threshold"]), achieved_fpr=float(obj["achieved_fpr"]),
                   n_nonmembers=int(obj["n_nonmembers"]), min_nonmembers=int(obj["min_nonmembers"]),
                   enough_nonmembers=bool(obj["enough_nonmembers"]))


def _json_float(x: float | None) -> float | str | None:
    """JSON has no infinity: +-inf thresholds are written as the strings "inf" / "-inf"."""
    if x is None:
        return None
    x = float(x)
    return ("inf" if x > 0 else "-inf") if math.isinf(x) else x


def _unjson_float(x: Any) -> float | None:
    return None if x is None else float(x)


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

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
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
        return Roc(fpr=x[idx], tpr=y[idx], thresholds=t[idx], n_members=self.n_members,
                   n_nonmembers=self.n_nonmembers)

    def rank_scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(member, non-member) scores with exactly this ROC: vertex j's new members and non-members
        all score ``len(thresholds) - j``.

        Every bound in this module depends on the scores only through their order (counts above
        thresholds, guesses on the top and bottom scores), so bounds recomputed on these scores equal
        those on the original ones; :mod:`dpaudit.headline` uses them to recompute stored audits at a
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

    def to_json(self) -> dict[str, Any]:
        return {"fpr": self.fpr.tolist(), "tpr": self.tpr.tolist(),
                "thresholds": [_json_float(t) for t in self.thresholds],
                "n_members": self.n_members, "n_nonmembers": self.n_nonmembers}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Roc:
        return cls(fpr=np.asarray(obj["fpr"], float), tpr=np.asarray(obj["tpr"], float),
                   thresholds=np.asarray([float(t) for t in obj["thresholds"]], float),
                   n_members=int(obj["n_members"]), n_nonmembers=int(obj["n_nonmembers"]))


# --------------------------------------------------------------------------------------------------
# ROC counts, exact and bootstrapped (one vectorized engine)


@dataclass(frozen=True)
class _Pool:
    """Members and non-members pooled and sorted by decreasing score, with tie groups marked."""

    order: np.ndarray  # pooled index (members first) of each sorted position
    is_member: np.ndarray  # bool, at sorted positions
    ends: np.ndarray  # last sorted position of each group of equal scores
    thresholds: np.ndarray  # the distinct scores, decreasing
    n_members: int
    n_nonmembers: int


def _pool(member: np.ndarray, nonmember: np.ndarray) -> _Pool:
    scores = np.concatenate([member, nonmember])
    labels = np.r_[np.ones(member.size, bool), np.zeros(nonmember.size, bool)]
    order = np.argsort(-scores, kind="stable")
    s = scores[order]
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])
    return _Pool(order=order, is_member=labels[order], ends=ends, thresholds=s[ends],
                 n_members=member.size, n_nonmembers=nonmember.size)


def _counts(pool: _Pool, member_w: np.ndarray | None = None,
            nonmember_w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(TP, FP) at every ROC vertex, with a leading (0, 0) vertex for threshold +inf.

    ``member_w`` / ``nonmember_w`` (B, n_members + n_nonmembers) are multiplicities at the SORTED
    positions (bootstrap resamples; zero off their own class); without them, one ROC with unit weights.
    """
    if member_w is None:
        member_w = pool.is_member[None, :].astype(np.int64)
        nonmember_w = (~pool.is_member)[None, :].astype(np.int64)
    tp = np.cumsum(member_w, axis=1)[:, pool.ends]
    fp = np.cumsum(nonmember_w, axis=1)[:, pool.ends]
    zero = np.zeros((tp.shape[0], 1), dtype=tp.dtype)
    return np.hstack([zero, tp]), np.hstack([zero, fp])


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
    return Roc(fpr=fp[0] / pool.n_nonmembers, tpr=tp[0] / pool.n_members,
               thresholds=np.r_[np.inf, pool.thresholds], n_members=pool.n_members,
               n_nonmembers=pool.n_nonmembers)


def _bootstrap(member: np.ndarray, nonmember: np.ndarray, statistics: dict, *, seed: int,
               num_samples: int, level: float) -> dict[str, BootstrapCI]:
    """Stratified percentile bootstrap CIs of ``statistics`` (name -> fn(tp, fp, n_m, n_n) -> (B,)).

    Resamples are drawn as multiplicity weights on the original scores, so every resample's ROC
    comes from one cumulative sum over the pre-sorted pool (no per-resample sorting), and all the
    statistics share the same resamples (so one call or several with the same seed agree).
    """
    level = _check_unit(level, "level")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    pool = _pool(member, nonmember)
    rng = np.random.default_rng(seed)
    n_m, n_n = member.size, nonmember.size
    n = n_m + n_n
    member_pos = np.flatnonzero(pool.is_member)  # sorted positions of the members
    nonmember_pos = np.flatnonzero(~pool.is_member)
    block = max(1, _BOOTSTRAP_CELLS // n)
    values: dict[str, list[np.ndarray]] = {name: [] for name in statistics}
    for start in range(0, num_samples, block):
        b = min(block, num_samples - start)
        offsets = (np.arange(b) * n)[:, None]
        draws_m = member_pos[rng.integers(0, n_m, size=(b, n_m))] + offsets
        draws_n = nonmember_pos[rng.integers(0, n_n, size=(b, n_n))] + offsets
        w_m = np.bincount(draws_m.ravel(), minlength=b * n).reshape(b, n)
        w_n = np.bincount(draws_n.ravel(), minlength=b * n).reshape(b, n)
        tp, fp = _counts(pool, w_m, w_n)
        for name, fn in statistics.items():
            values[name].append(fn(tp, fp, n_m, n_n))
    out = {}
    for name, chunks in values.items():
        low, high = np.quantile(np.concatenate(chunks), [(1 - level) / 2, (1 + level) / 2])
        out[name] = BootstrapCI(low=float(low), high=float(high), level=level, num_samples=num_samples,
                                seed=int(seed))
    return out


def _auc_stat(tp, fp, n_m, n_n):
    return np.sum(np.diff(fp, axis=1) * (tp[:, 1:] + tp[:, :-1]), axis=1) / (2.0 * n_m * n_n)


def _advantage_stat(tp, fp, n_m, n_n):
    return np.maximum(0.0, np.max(tp / n_m - fp / n_n, axis=1))


def _tpr_at_stat(fpr: float):
    def stat(tp, fp, n_m, n_n):
        allowed = math.floor(fpr * n_n + 1e-9)  # false positives allowed at FPR <= fpr
        k = np.sum(fp <= allowed + 1e-9, axis=1)  # fp is non-decreasing along each row
        return tp[np.arange(tp.shape[0]), k - 1] / n_m
    return stat


def auc(member_scores: ArrayLike, nonmember_scores: ArrayLike, *, seed: int, level: float = 0.95,
        num_samples: int = 1000) -> Estimate:
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
    ci = _bootstrap(member, nonmember, {"auc": _auc_stat}, seed=seed, num_samples=num_samples,
                    level=level)["auc"]
    return Estimate(value=value, ci=ci)


def attacker_advantage(member_scores: ArrayLike, nonmember_scores: ArrayLike, *, seed: int,
                       level: float = 0.95, num_samples: int = 1000) -> Estimate:
    """Membership advantage max_t (TPR - FPR) (Yeom et al. 2018) with a bootstrap CI."""
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    value = roc_curve(member, nonmember).advantage()
    ci = _bootstrap(member, nonmember, {"advantage": _advantage_stat}, seed=seed,
                    num_samples=num_samples, level=level)["advantage"]
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


def tpr_at_fpr(member_scores: ArrayLike, nonmember_scores: ArrayLike, fpr: float, *, seed: int,
               level: float = 0.95, num_samples: int = 1000) -> TprAtFpr:
    """TPR at a low FPR (Carlini et al. 2022) with a bootstrap CI and the non-member count it needs.

    Deterministic thresholds: the largest TPR of a rule "score >= t" whose empirical FPR is <= fpr.
    ``enough_nonmembers`` is False (and the number should not be trusted) when there are fewer than
    :func:`min_nonmembers_for` ``(fpr)`` non-members.
    """
    fpr = _check_unit(fpr, "fpr", high_open=False)
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    ci = _bootstrap(member, nonmember, {"tpr": _tpr_at_stat(fpr)}, seed=seed, num_samples=num_samples,
                    level=level)["tpr"]
    return _tpr_at_fpr_point(roc_curve(member, nonmember), fpr, ci)


def _tpr_at_fpr_point(roc: Roc, fpr: float, ci: BootstrapCI) -> TprAtFpr:
    allowed = math.floor(fpr * roc.n_nonmembers + 1e-9) / roc.n_nonmembers
    ok = np.flatnonzero(roc.fpr <= allowed + 1e-12)
    j = ok[np.argmax(roc.tpr[ok])]
    need = min_nonmembers_for(fpr)
    return TprAtFpr(fpr=fpr, tpr=float(roc.tpr[j]), ci=ci, threshold=float(roc.thresholds[j]),
                    achieved_fpr=float(roc.fpr[j]), n_nonmembers=roc.n_nonmembers, min_nonmembers=need,
                    enough_nonmembers=roc.n_nonmembers >= need)


# --------------------------------------------------------------------------------------------------
# Gaussian differential privacy (Dong, Roth & Su 2022)


def gdp_delta(epsilon: ArrayLike, mu: ArrayLike) -> np.ndarray:
    """delta(epsilon) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (their Cor. 2.13).

    Computed in the log domain so that large epsilon does not overflow.
    """
    eps = np.asarray(epsilon, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = scipy.special.log_ndtr(-eps / mu + mu / 2)
        b = eps + scipy.special.log_ndtr(-eps / mu - mu / 2)
        out = np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
    return np.where(mu > 0, np.maximum(out, 0.0), 0.0)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon >= 0 with mu-GDP => (epsilon, delta)-DP."""
    delta = _check_unit(delta, "delta")
    if mu <= 0 or gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(hi, mu) > delta:
        hi *= 2
    with np.errstate(divide="ignore"):
        return float(scipy.optimize.brentq(lambda e: np.log(gdp_delta(e, mu)) - np.log(delta), 0.0, hi,
                                           xtol=1e-12, rtol=1e-13))


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu of the Gaussian mechanism that is exactly (epsilon, delta)-DP (inverse of
    :func:`gdp_epsilon`; mu = 1 / sigma for sensitivity 1, as in Balle & Wang 2018)."""
    delta = _check_unit(delta, "delta")
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}.")
    if epsilon == 0:
        return float(2 * scipy.special.ndtri((1 + delta) / 2))
    lo, hi = 1e-3, 1.0
    while gdp_delta(epsilon, hi) < delta:
        lo, hi = hi, hi * 2
    while gdp_delta(epsilon, lo) > delta:
        lo /= 10
    with np.errstate(divide="ignore"):
        return float(scipy.optimize.brentq(lambda m: np.log(gdp_delta(epsilon, m)) - np.log(delta), lo,
                                           hi, xtol=1e-13, rtol=1e-14))


# --------------------------------------------------------------------------------------------------
# Epsilon lower bounds: threshold and guess selection


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

    def partition(self, member: np.ndarray, nonmember: np.ndarray):
        """((member_choose, nonmember_choose), (member_eval, nonmember_eval))."""
        return _partition(self.fraction, self.seed, member, nonmember)


def _partition(fraction: float, seed: int, member: np.ndarray, nonmember: np.ndarray):
    rng = np.random.default_rng(seed)
    parts = []
    for arr in (member, nonmember):
        perm = rng.permutation(arr.size)
        cut = int(arr.size * fraction)
        parts.append((arr[perm[:cut]], arr[perm[cut:]]))
    (m1, m2), (n1, n2) = parts
    for name, part in (("member", m1), ("member", m2), ("non-member", n1), ("non-member", n2)):
        if part.size == 0:
            raise ValueError(f"a split with fraction={fraction} leaves an empty {name} part: too few "
                             "scores to split; use a Bonferroni correction instead.")
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
            raise ValueError(f"k_plus and k_minus must be >= 0 with at least one guess, got "
                             f"k_plus={self.k_plus}, k_minus={self.k_minus}.")


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
            pairs = []
            for f in DEFAULT_GUESS_FRACTIONS:
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


# --------------------------------------------------------------------------------------------------
# The bound record


@dataclass(frozen=True, kw_only=True)
class EpsilonBound:
    """An empirical epsilon lower bound and everything needed to reproduce it.

    Attributes:
        method: "clopper_pearson", "one_run" (Steinke et al. 2023) or "one_run_fdp" (Mahloujifar et
            al. 2024).
        selection: "split", "bonferroni" or "fixed": how the threshold or guesses were chosen.
        guarantee: what the bound refutes: :data:`GUARANTEE_DP` or :data:`GUARANTEE_GDP`.
        epsilon: the lower bound (>= 0).
        delta, confidence: the delta of the refuted claims and the confidence of the bound.
        num_hypotheses: the hypotheses in the Bonferroni union (1 when none; n_members + n_nonmembers
            for :class:`BonferroniThresholds` over every threshold).
        threshold: the threshold of the "member" rule (score >= threshold); +inf: no member guesses.
        threshold_minus: one-run only: "non-member" guesses for scores <= it (-inf: none).
        n_members, n_nonmembers: the scores the bound was evaluated on (the evaluation part of a split).
        true_positives, false_positives: at ``threshold`` (Clopper-Pearson) or among the guesses.
        tpr_lower, fpr_upper: the Clopper-Pearson bounds at ``threshold`` (None for one-run).
        guesses, correct: one-run: the number of non-abstaining guesses and of correct ones.
        mu: one-run f-DP: the largest rejected GDP parameter (None otherwise).
        split_seed, split_fraction: the split of :class:`SplitThreshold` (None otherwise).
        one_sided: Clopper-Pearson only: False also tries the reverse rule (TNR vs FNR).
    """

    method: str
    selection: str
    guarantee: str
    epsilon: float
    delta: float
    confidence: float
    num_hypotheses: int
    threshold: float
    threshold_minus: float | None = None
    n_members: int
    n_nonmembers: int
    true_positives: int
    false_positives: int
    tpr_lower: float | None = None
    fpr_upper: float | None = None
    guesses: int | None = None
    correct: int | None = None
    mu: float | None = None
    split_seed: int | None = None
    split_fraction: float | None = None
    one_sided: bool = True

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["threshold"] = _json_float(self.threshold)
        out["threshold_minus"] = _json_float(self.threshold_minus)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> EpsilonBound:
        kw = dict(obj)
        kw["threshold"] = _unjson_float(kw["threshold"])
        kw["threshold_minus"] = _unjson_float(kw.get("threshold_minus"))
        for name in ("epsilon", "delta", "confidence"):
            kw[name] = float(kw[name])
        for name in ("tpr_lower", "fpr_upper", "mu", "split_fraction"):
            kw[name] = _float_or_none(kw.get(name))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in kw.items() if k in names})


# --------------------------------------------------------------------------------------------------
# Clopper-Pearson


def _cp_upper(k: ArrayLike, n: int, alpha: ArrayLike) -> np.ndarray:
    """One-sided Clopper-Pearson upper bound p with P[Binomial(n, p) <= k] = alpha (1 when k = n)."""
    k = np.asarray(k, dtype=np.float64)
    # scipy.special.betaincinv(a, b, y) = scipy.stats.beta.ppf(y, a, b), without scipy.stats' overhead
    return np.where(k < n, scipy.special.betaincinv(k + 1, np.maximum(n - k, 1), 1 - np.asarray(alpha)), 1.0)


def _cp_eps(tp, fp, n_m: int, n_n: int, alpha_tpr, alpha_fpr, delta: float, one_sided: bool):
    """Raw epsilon (may be negative, -inf when TPR_low <= delta) at each count pair, both bounds."""
    tp, fp = np.asarray(tp, float), np.asarray(fp, float)
    tpr_low = 1 - _cp_upper(n_m - tp, n_m, alpha_tpr)  # TPR lower = 1 - FNR upper
    fpr_up = _cp_upper(fp, n_n, alpha_fpr)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(tpr_low > delta, np.log(np.maximum(tpr_low - delta, 1e-300)) - np.log(fpr_up), -np.inf)
        if not one_sided:  # reverse rule "score < t => non-member": TNR <= e^eps FNR + delta
            tnr_low, fnr_up = 1 - fpr_up, 1 - tpr_low
            rev = np.where(tnr_low > delta,
                           np.log(np.maximum(tnr_low - delta, 1e-300)) - np.log(fnr_up), -np.inf)
            eps = np.maximum(eps, rev)
    return eps, tpr_low, fpr_up


def _count_at(member: np.ndarray, nonmember: np.ndarray, t: float) -> tuple[int, int]:
    return int(np.sum(member >= t)), int(np.sum(nonmember >= t))


def epsilon_lower_bound_clopper_pearson(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    confidence: float = 0.95,
    selection: SplitThreshold | BonferroniThresholds | FixedThreshold = SplitThreshold(),
    one_sided: bool = True,
) -> EpsilonBound:
    """Epsilon lower bound from Clopper-Pearson intervals on TPR and FPR at one threshold.

    (epsilon, delta)-DP forces TPR <= e^epsilon FPR + delta for every test (Kairouz et al.'s
    hypothesis-testing view); with one-sided Clopper-Pearson bounds TPR >= TPR_low and FPR <= FPR_high,
    each at significance / 2, epsilon >= log((TPR_low - delta) / FPR_high) with the stated confidence
    (Jagielski et al. 2020; Nasr et al. 2021). Scores are treated as independent trials (see the
    module docstring for when that holds).

    Args:
        member_scores, nonmember_scores: scores, higher means member.
        delta: the delta of the claims to refute, in (0, 1).
        confidence: e.g. 0.95.
        selection: :class:`SplitThreshold` (default; seed recorded), :class:`BonferroniThresholds`
            or :class:`FixedThreshold`.
        one_sided: False also tries the reverse rule on the same intervals (as jax-privacy).

    Returns:
        :class:`EpsilonBound` with the threshold, counts and bounds that produced it.
    """
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    delta = _check_unit(delta, "delta")
    confidence = _check_unit(confidence, "confidence")
    alpha = 1 - confidence
    if alpha >= 0.5:
        raise ValueError(f"confidence must be > 0.5, got {confidence}.")
    common = {"method": "clopper_pearson", "guarantee": GUARANTEE_DP, "delta": delta, "confidence": confidence,
                  "one_sided": one_sided}

    def at_threshold(m, n, t, a_tpr, a_fpr, **extra) -> EpsilonBound:
        tp, fp = _count_at(m, n, t)
        eps, tl, fu = _cp_eps(tp, fp, m.size, n.size, a_tpr, a_fpr, delta, one_sided)
        return EpsilonBound(epsilon=float(max(0.0, eps)), threshold=float(t), n_members=m.size,
                            n_nonmembers=n.size, true_positives=tp, false_positives=fp,
                            tpr_lower=float(tl), fpr_upper=float(fu), **common, **extra)

    if isinstance(selection, FixedThreshold):
        return at_threshold(member, nonmember, selection.threshold, alpha / 2, alpha / 2,
                            selection="fixed", num_hypotheses=1)
    if isinstance(selection, BonferroniThresholds):
        if selection.thresholds is not None:
            ts = np.asarray(selection.thresholds)
            k = ts.size
            tp = np.sum(member[None, :] >= ts[:, None], axis=1)
            fp = np.sum(nonmember[None, :] >= ts[:, None], axis=1)
            eps, _, _ = _cp_eps(tp, fp, member.size, nonmember.size, alpha / 2 / k, alpha / 2 / k,
                                delta, one_sided)
            best = ts[int(np.argmax(eps))]
            return at_threshold(member, nonmember, best, alpha / 2 / k, alpha / 2 / k,
                                selection="bonferroni", num_hypotheses=k)
        a_tpr, a_fpr = alpha / 2 / member.size, alpha / 2 / nonmember.size
        t, _ = _best_threshold(member, nonmember, a_tpr, a_fpr, delta, one_sided)
        return at_threshold(member, nonmember, t, a_tpr, a_fpr, selection="bonferroni",
                            num_hypotheses=member.size + nonmember.size)
    if isinstance(selection, SplitThreshold):
        (m1, n1), (m2, n2) = selection.partition(member, nonmember)
        t, _ = _best_threshold(m1, n1, alpha / 2, alpha / 2, delta, one_sided)
        return at_threshold(m2, n2, t, alpha / 2, alpha / 2, selection="split", num_hypotheses=1,
                            split_seed=selection.seed, split_fraction=selection.fraction)
    raise TypeError(f"selection must be SplitThreshold, BonferroniThresholds or FixedThreshold, got "
                    f"{type(selection).__name__}.")


def _best_threshold(member, nonmember, a_tpr, a_fpr, delta, one_sided) -> tuple[float, float]:
    """The threshold (and its raw epsilon) maximizing the Clopper-Pearson bound, lowest first on ties;
    +inf (no member guesses) when no threshold has TPR_low > delta."""
    roc_pool = _pool(member, nonmember)
    tp, fp = _counts(roc_pool)
    tp, fp = tp[0][::-1], fp[0][::-1]  # ascending thresholds, like jax-privacy
    thresholds = np.r_[np.inf, roc_pool.thresholds][::-1]
    eps, _, _ = _cp_eps(tp, fp, member.size, nonmember.size, a_tpr, a_fpr, delta, one_sided)
    if not np.any(np.isfinite(eps)):
        return float("inf"), 0.0
    j = int(np.argmax(eps))
    return float(thresholds[j]), float(eps[j])


# --------------------------------------------------------------------------------------------------
# One-run audits (coin-flip canaries)


def _one_run_guesses(member: np.ndarray, nonmember: np.ndarray, t_plus: float, t_minus: float):
    """(guesses, correct) for "member iff score >= t_plus", "non-member iff score <= t_minus" (and not
    already guessed member), abstain otherwise."""
    guess_in_m, guess_in_n = member >= t_plus, nonmember >= t_plus
    guess_out_m = (member <= t_minus) & ~guess_in_m
    guess_out_n = (nonmember <= t_minus) & ~guess_in_n
    guesses = int(guess_in_m.sum() + guess_in_n.sum() + guess_out_m.sum() + guess_out_n.sum())
    correct = int(guess_in_m.sum() + guess_out_n.sum())
    return guesses, correct


def _thresholds_for(pooled_desc: np.ndarray, k_plus: int, k_minus: int) -> tuple[float, float]:
    t_plus = float(pooled_desc[k_plus - 1]) if k_plus > 0 else float("inf")
    t_minus = float(pooled_desc[-k_minus]) if k_minus > 0 else float("-inf")
    return t_plus, t_minus


def _steinke_pvalue(eps: float, m: int, r: int, v: int, delta: float) -> float:
    """P-value of v correct out of r guesses on m coin-flip canaries under (eps, delta)-DP.

    Steinke, Nasr & Jagielski (2023): with f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v],
    P[W >= v] <= f(v) + 2 m delta max_{1<=i<=v} (f(v - i) - f(v)) / i. Continuous and increasing in
    eps, so the largest rejected epsilon is a root.
    """
    if v == 0:
        return 1.0
    q = float(scipy.special.expit(eps))
    beta = float(scipy.special.bdtrc(v - 1, r, q))  # = binom.sf(v - 1, r, q), without scipy.stats' overhead
    if delta == 0.0:
        return min(beta, 1.0)
    i = np.arange(1, v + 1)
    tail = (scipy.special.bdtrc(v - i - 1, r, q) - beta) / i  # bdtrc(k < 0) = 1 = sf
    return min(beta + 2 * m * delta * float(np.max(tail, initial=0.0)), 1.0)


def _steinke_epsilons(m: int, counts: np.ndarray, delta: float, alpha: float) -> np.ndarray:
    """:func:`_steinke_epsilon` of each (guesses, correct) row, where only the best row needs to be exact.

    The delta = 0 bound (a plain binomial test, cheap) is never below the delta > 0 one, so a row
    whose delta = 0 bound is strictly below an exact bound already found cannot be the largest; it
    is returned as -inf and the argmax (first largest) is the one of the exact bounds of every row.
    """
    upper = np.array([_steinke_epsilon(m, int(r), int(v), 0.0, alpha) for r, v in counts], dtype=np.float64)
    if delta == 0.0:
        return upper
    out = np.full(upper.shape, -np.inf)
    best = -np.inf
    for j in np.argsort(-upper, kind="stable"):
        if upper[j] < best:
            break
        out[j] = _steinke_epsilon(m, int(counts[j, 0]), int(counts[j, 1]), delta, alpha)
        best = max(best, out[j])
    return out


def _steinke_epsilon(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """The largest epsilon whose (epsilon, delta) claim the guesses reject at significance alpha (0 if
    none)."""
    def margin(eps: float) -> float:
        return alpha - _steinke_pvalue(eps, m, r, v, delta)

    if v == 0 or margin(0.0) <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while margin(hi) > 0:
        lo, hi = hi, 2 * hi
    return float(scipy.optimize.brentq(margin, lo, hi, xtol=1e-12, rtol=1e-13))


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _phi_inv(p: float) -> float:
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return _STANDARD_NORMAL.inv_cdf(p)


def _fdp_margin(mu: float, m: int, r: int, v: int, alpha: float) -> float:
    """Positive when v correct of r guesses on m canaries rejects mu-GDP at significance alpha.

    Mahloujifar, Melis & Chaudhuri (2024), the recursion of their audit with abstentions for binary
    secrets: start from r_v = alpha v / m and h_v = alpha (r - v) / m; for i = v-1, ..., 0,
    h_i = max(h_{i+1}, f^{-1}(r_{i+1})) with the mu-GDP blow-up inverse
    f^{-1}(x) = Phi(Phi^{-1}(x) - mu), and r_i = r_{i+1} + i / (r - i) (h_i - h_{i+1}) (capped at 1,
    as jax-privacy does; a smaller r only makes rejection harder). The claim is rejected when
    r_0 + h_0 > r / m. Once h stops growing it never grows again, so the loop stops there.
    Continuous and decreasing in mu, so the largest rejected mu is a root of this margin.
    """
    rr = alpha * v / m
    h = alpha * (r - v) / m
    for i in range(v - 1, -1, -1):  # a scalar recurrence over guesses, not over examples
        inv = _phi(_phi_inv(rr) - mu)
        if inv <= h:
            break
        rr = min(rr + i / (r - i) * (inv - h), 1.0)
        h = inv
    return rr + h - r / m


def _fdp_mu(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """The largest mu whose mu-GDP claim the guesses reject; gdp_mu(0, delta) (epsilon 0) if none."""
    lo = gdp_mu(0.0, delta)
    if v == 0 or _fdp_margin(lo, m, r, v, alpha) <= 0:
        return lo
    hi = max(1.0, 2 * lo)
    while _fdp_margin(hi, m, r, v, alpha) > 0:
        lo, hi = hi, 2 * hi
    return float(scipy.optimize.brentq(_fdp_margin, lo, hi, args=(m, r, v, alpha), xtol=1e-12,
                                       rtol=1e-13))


def _one_run(member_scores, nonmember_scores, *, delta, confidence, guesses, fdp: bool) -> EpsilonBound:
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    delta = _check_unit(delta, "delta")
    confidence = _check_unit(confidence, "confidence")
    alpha = 1 - confidence

    def evaluate(m_s, n_s, cands: Sequence[tuple[float, float]], a: float):
        """(epsilon, mu, guesses, correct) per candidate (t_plus, t_minus) at significance a."""
        counts = np.array([_one_run_guesses(m_s, n_s, tp, tm) for tp, tm in cands], dtype=np.int64)
        total = m_s.size + n_s.size
        ms = np.full(len(cands), total)
        if fdp:
            mus = np.array([_fdp_mu(int(m_), int(r_), int(v_), delta, a)
                            for m_, r_, v_ in zip(ms, counts[:, 0], counts[:, 1])])
            eps = np.array([gdp_epsilon(mu, delta) for mu in mus])
        else:
            mus = np.full(len(cands), np.nan)
            eps = _steinke_epsilons(int(total), counts, delta, a)
        return eps, mus, counts

    def candidates(m_s, n_s, pairs):
        desc = np.sort(np.concatenate([m_s, n_s]))[::-1]
        return [_thresholds_for(desc, kp, km) for kp, km in pairs]

    def record(m_s, n_s, cand, eps, mu, count, **extra) -> EpsilonBound:
        g, c = int(count[0]), int(count[1])
        return EpsilonBound(
            method="one_run_fdp" if fdp else "one_run", guarantee=GUARANTEE_GDP if fdp else GUARANTEE_DP,
            epsilon=float(max(0.0, eps)), delta=delta, confidence=confidence, threshold=cand[0],
            threshold_minus=cand[1], n_members=m_s.size, n_nonmembers=n_s.size,
            true_positives=int(np.sum(m_s >= cand[0])), false_positives=int(np.sum(n_s >= cand[0])),
            guesses=g, correct=c, mu=None if not fdp else float(mu), **extra)

    if isinstance(guesses, (FixedGuesses, GuessGrid)):
        m_total = member.size + nonmember.size
        pairs = ((guesses.k_plus, guesses.k_minus),) if isinstance(guesses, FixedGuesses) else guesses.resolve(m_total)
        if isinstance(guesses, FixedGuesses) and guesses.k_plus + guesses.k_minus > m_total:
            raise ValueError(f"k_plus + k_minus = {guesses.k_plus + guesses.k_minus} exceeds the "
                             f"{m_total} canaries.")
        cands = candidates(member, nonmember, pairs)
        a = alpha / len(cands)
        eps, mus, counts = evaluate(member, nonmember, cands, a)
        j = int(np.argmax(eps))
        return record(member, nonmember, cands[j], eps[j], mus[j], counts[j],
                      selection="fixed" if isinstance(guesses, FixedGuesses) else "bonferroni",
                      num_hypotheses=len(cands))
    if isinstance(guesses, SplitGuesses):
        (m1, n1), (m2, n2) = _partition(guesses.fraction, guesses.seed, member, nonmember)
        pairs = guesses.grid.resolve(m1.size + n1.size)
        cands = candidates(m1, n1, pairs)
        eps1, _, _ = evaluate(m1, n1, cands, alpha)
        cand = cands[int(np.argmax(eps1))]
        eps, mus, counts = evaluate(m2, n2, [cand], alpha)
        return record(m2, n2, cand, eps[0], mus[0], counts[0], selection="split", num_hypotheses=1,
                      split_seed=guesses.seed, split_fraction=guesses.fraction)
    raise TypeError(f"guesses must be GuessGrid, FixedGuesses or SplitGuesses, got {type(guesses).__name__}.")


def epsilon_lower_bound_one_run(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    confidence: float = 0.95,
    guesses: GuessGrid | FixedGuesses | SplitGuesses = GuessGrid(),
) -> EpsilonBound:
    """One-run (epsilon, delta) lower bound of Steinke, Nasr & Jagielski (2023) on coin-flip canaries.

    Valid for ONE training run when each of the m = n_members + n_nonmembers canaries was included by
    an independent fair coin: the auditor guesses "member" on the top scores and "non-member" on the
    bottom scores (abstaining on the rest); under (epsilon, delta)-DP the number of correct guesses
    is dominated by Binomial(guesses, e^eps / (1 + e^eps)) up to a delta term, and the bound is the
    largest epsilon rejected at ``confidence``.

    Args:
        member_scores: scores of the canaries the coin put in training.
        nonmember_scores: scores of the canaries it left out.
        delta: the delta of the claims to refute.
        confidence: e.g. 0.95.
        guesses: :class:`GuessGrid` (default; Bonferroni over the grid), :class:`FixedGuesses`, or
            :class:`SplitGuesses` (guess counts chosen on a split, applied as thresholds).
    """
    return _one_run(member_scores, nonmember_scores, delta=delta, confidence=confidence, guesses=guesses,
                    fdp=False)


def epsilon_lower_bound_one_run_fdp(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    confidence: float = 0.95,
    guesses: GuessGrid | FixedGuesses | SplitGuesses = GuessGrid(),
) -> EpsilonBound:
    """One-run lower bound of Mahloujifar, Melis & Chaudhuri (2024): f-DP analysis of the same game.

    Finds the largest mu such that "the mechanism is mu-GDP" is rejected at ``confidence`` by the
    guesses, and reports the epsilon of mu-GDP at ``delta`` (the Gaussian-family reading that paper and
    jax-privacy use). Tighter than :func:`epsilon_lower_bound_one_run`; a proof of an (epsilon, delta)
    violation only for mechanisms with a Gaussian privacy profile (``guarantee = "mu-GDP"``).
    Arguments as :func:`epsilon_lower_bound_one_run`.
    """
    return _one_run(member_scores, nonmember_scores, delta=delta, confidence=confidence, guesses=guesses,
                    fdp=True)


# --------------------------------------------------------------------------------------------------
# Everything at once


@dataclass(frozen=True, kw_only=True, eq=False)
class AuditResult:
    """The audit of one attack on one membership task.

    Attributes:
        n_members, n_nonmembers: score counts.
        roc: the empirical ROC.
        auc: AUC with bootstrap CI.
        tpr_at_fpr: one entry per requested FPR (0.1% and 1% by default).
        advantage: max(TPR - FPR) with bootstrap CI.
        bounds: every epsilon lower bound computed; each at confidence 1 - (1 - confidence) / len(bounds)
            so that all hold together at ``confidence``.
        epsilon_lower_bound: the largest (epsilon, delta)-DP bound in ``bounds`` (valid at
            ``confidence`` for this one audit; the maximum over several audits is not: see
            :mod:`dpaudit.headline`). It includes the heuristic Clopper-Pearson bounds.
        delta, confidence, seed: the audit's parameters (seed: bootstrap and split).
        claimed_epsilon: the accountant's epsilon at ``delta`` (None: not given or nothing proven).
        exceeds_claim: True when a PROOF of the claim's unit (the one-run bound of Steinke et al. on
            coin-flip canaries inserted once) is above ``claimed_epsilon``; heuristic, f-DP and group
            bounds above it only warn. For this audit alone (not corrected over audits).
        warnings: human-readable alarms (the exceeded claim first, in capitals), heuristic bounds
            above the claim, group bounds, too few non-members for an FPR, the f-DP bound.
        coin_flip: whether the one-run bounds were computed (membership decided by fair coins).
    """

    n_members: int
    n_nonmembers: int
    roc: Roc
    auc: Estimate
    tpr_at_fpr: tuple[TprAtFpr, ...]
    advantage: Estimate
    bounds: tuple[EpsilonBound, ...]
    epsilon_lower_bound: float
    delta: float
    confidence: float
    seed: int
    claimed_epsilon: float | None
    exceeds_claim: bool
    warnings: tuple[str, ...] = field(default=())
    coin_flip: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "n_members": self.n_members, "n_nonmembers": self.n_nonmembers,
            "roc": self.roc.to_json(), "auc": self.auc.to_json(),
            "tpr_at_fpr": [t.to_json() for t in self.tpr_at_fpr], "advantage": self.advantage.to_json(),
            "bounds": [b.to_json() for b in self.bounds], "epsilon_lower_bound": self.epsilon_lower_bound,
            "delta": self.delta, "confidence": self.confidence, "seed": self.seed,
            "claimed_epsilon": self.claimed_epsilon, "exceeds_claim": self.exceeds_claim,
            "warnings": list(self.warnings), "coin_flip": self.coin_flip,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> AuditResult:
        if obj.get("schema") != SCHEMA:
            raise ValueError(f"not an audit result of schema {SCHEMA}: got schema {obj.get('schema')!r}.")
        return cls(
            n_members=int(obj["n_members"]), n_nonmembers=int(obj["n_nonmembers"]),
            roc=Roc.from_json(obj["roc"]), auc=Estimate.from_json(obj["auc"]),
            tpr_at_fpr=tuple(TprAtFpr.from_json(t) for t in obj["tpr_at_fpr"]),
            advantage=Estimate.from_json(obj["advantage"]),
            bounds=tuple(EpsilonBound.from_json(b) for b in obj["bounds"]),
            epsilon_lower_bound=float(obj["epsilon_lower_bound"]), delta=float(obj["delta"]),
            confidence=float(obj["confidence"]), seed=int(obj["seed"]),
            claimed_epsilon=_float_or_none(obj["claimed_epsilon"]), exceeds_claim=bool(obj["exceeds_claim"]),
            warnings=tuple(obj.get("warnings", ())), coin_flip=bool(obj.get("coin_flip", False)),
        )


def audit_scores(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    claimed_epsilon: float | None = None,
    seed: int,
    confidence: float = 0.95,
    coin_flip: bool = False,
    group_size: int = 1,
    fprs: Sequence[float] = (0.001, 0.01),
    num_bootstrap: int = 1000,
) -> AuditResult:
    """ROC, AUC, TPR at low FPR, advantage and every epsilon lower bound for ONE set of scores.

    Bounds computed: Clopper-Pearson at a split threshold (split seed = ``seed``; skipped with fewer
    than 2 members or non-members) and with the all-threshold Bonferroni correction; with
    ``coin_flip=True`` (canaries included by independent fair coins) also the one-run bounds of
    Steinke et al. (2023) and Mahloujifar et al. (2024) over the default guess grid. All bounds of
    this one audit share the error budget 1 - confidence (Bonferroni), so ``epsilon_lower_bound``
    (their maximum) is valid at ``confidence`` for THIS audit alone. The maximum over several audits
    (attacks x tasks) is not: the headline over a whole attack run is :mod:`dpaudit.headline`, which
    recomputes every bound corrected for the number of audits.

    What may say "the claim is wrong" (``exceeds_claim``): only a proof, i.e. the Steinke et al.
    one-run bound on coin-flip canaries (``coin_flip=True``), of the claim's unit
    (``group_size == 1``). A Clopper-Pearson bound on the examples of one model is a heuristic
    (members and non-members of one run are not independent trials): above the claim it is a
    warning to investigate, never the alarm. The f-DP bound refutes mu-GDP, not an (epsilon, delta)
    claim: a warning too. A canary inserted f > 1 times bounds group epsilon: with ``group_size=f``
    nothing is compared with the per-example claim.

    Args:
        member_scores, nonmember_scores: scores, higher means member.
        delta: delta of the privacy claim (the run's ``privacy.json`` delta).
        claimed_epsilon: the accountant's epsilon at ``delta``; None when nothing is claimed.
        seed: seeds the bootstrap and the split.
        confidence: joint confidence of the bounds; also the level of the bootstrap CIs.
        coin_flip: True only when membership was decided by independent fair coins.
        group_size: rows each member contributed (a canary inserted f times: f); > 1 makes the
            bounds group bounds, never compared with ``claimed_epsilon``.
        fprs: FPRs at which TPR is reported.
        num_bootstrap: bootstrap resamples per CI.

    Returns:
        :class:`AuditResult`; ``exceeds_claim`` and ``warnings[0]`` flag a proof above the claim.
    """
    from dpaudit.figures import format_down, format_up

    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    delta = _check_unit(delta, "delta")
    confidence = _check_unit(confidence, "confidence")
    if claimed_epsilon is not None and not (claimed_epsilon >= 0):
        raise ValueError(f"claimed_epsilon must be >= 0 or None, got {claimed_epsilon}.")
    cp = functools.partial(epsilon_lower_bound_clopper_pearson, member, nonmember, delta=delta)
    makers = [functools.partial(cp, selection=BonferroniThresholds())]
    split = SplitThreshold(seed=seed)
    if int(member.size * split.fraction) >= 1 and int(nonmember.size * split.fraction) >= 1:
        makers.insert(0, functools.partial(cp, selection=split))  # a split needs >= 2 of each
    if coin_flip:
        makers.append(functools.partial(epsilon_lower_bound_one_run, member, nonmember, delta=delta))
        makers.append(functools.partial(epsilon_lower_bound_one_run_fdp, member, nonmember, delta=delta))
    each = 1 - (1 - confidence) / len(makers)
    bounds = [make(confidence=each) for make in makers]
    lower = max(b.epsilon for b in bounds if b.guarantee == GUARANTEE_DP)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}.")
    compare = claimed_epsilon is not None and group_size == 1
    proofs = [b for b in bounds if b.method == "one_run"] if coin_flip else []
    proof = max((b.epsilon for b in proofs), default=0.0)
    exceeds = compare and proof > claimed_epsilon
    fprs = tuple(_check_unit(f, "fpr", high_open=False) for f in fprs)
    stats = {"auc": _auc_stat, "advantage": _advantage_stat}
    stats.update({f"tpr@{f!r}": _tpr_at_stat(f) for f in fprs})
    cis = _bootstrap(member, nonmember, stats, seed=seed, num_samples=num_bootstrap, level=confidence)
    roc = roc_curve(member, nonmember)
    tprs = tuple(_tpr_at_fpr_point(roc, f, cis[f"tpr@{f!r}"]) for f in fprs)
    warnings: list[str] = []
    claim = None if claimed_epsilon is None else format_up(claimed_epsilon)
    if exceeds:
        worst = max(proofs, key=lambda b: b.epsilon)
        warnings.append(
            f"EMPIRICAL EPSILON LOWER BOUND {format_down(proof)} EXCEEDS THE CLAIMED EPSILON {claim} "
            f"(delta={format_up(delta, 2)}, {confidence:.0%} confidence for this audit alone, proof: "
            f"{worst.method}/{worst.selection} on coin-flip canaries, Steinke et al. 2023): the trainer "
            "or the accountant has a bug, or the scores are not from the model the claim is about.")
    heuristic = [b for b in bounds if b.method == "clopper_pearson"]
    best_h = max(heuristic, key=lambda b: b.epsilon)
    if compare and best_h.epsilon > claimed_epsilon:
        warnings.append(
            f"heuristic bound above the claim: investigate. Clopper-Pearson {format_down(best_h.epsilon)} > claimed "
            f"epsilon {claim} ({best_h.selection}), on the examples of one model, which are not independent trials: "
            "not a proof that the claim is wrong.")
    if group_size > 1:
        warnings.append(f"group bound: members were inserted up to {group_size} times, so these bounds are on the "
                        f"epsilon of a group of {group_size} rows (at most {group_size} x the per-example epsilon), "
                        "not on the per-example claim.")
    for t in tprs:
        if not t.enough_nonmembers:
            warnings.append(f"TPR at FPR {t.fpr:g} needs >= {t.min_nonmembers} non-members, have "
                            f"{t.n_nonmembers}: it is TPR at zero false positives.")
    gdp = [b for b in bounds if b.guarantee == GUARANTEE_GDP]
    if compare and gdp and gdp[0].epsilon > claimed_epsilon:
        warnings.append(
            f"The f-DP one-run bound {format_down(gdp[0].epsilon)} (refutes mu-GDP, Gaussian mechanisms only; not an "
            f"(epsilon, delta) bound) is above the claimed epsilon {claim}: the mechanism is not the mu-GDP a "
            "Gaussian mechanism with this claim would be; not a proof that the (epsilon, delta) claim is wrong.")
    return AuditResult(
        n_members=member.size, n_nonmembers=nonmember.size, roc=roc,
        auc=Estimate(value=roc.auc(), ci=cis["auc"]), tpr_at_fpr=tprs,
        advantage=Estimate(value=roc.advantage(), ci=cis["advantage"]),
        bounds=tuple(bounds), epsilon_lower_bound=float(lower), delta=delta, confidence=confidence,
        seed=int(seed), claimed_epsilon=None if claimed_epsilon is None else float(claimed_epsilon),
        exceeds_claim=bool(exceeds), warnings=tuple(warnings), coin_flip=coin_flip,
    )
