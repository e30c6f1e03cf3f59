"""The epsilon lower-bound record, and the Clopper-Pearson bound (Jagielski et al. 2020; Nasr et al. 2021).

Clopper-Pearson intervals on TPR and FPR become epsilon >= log((TPR_low - delta) / FPR_high). It treats
every score as an independent trial of the mechanism: a proof when each score comes from its own
training run, the customary but heuristic audit on the examples of ONE model. The one-run bounds
(:mod:`.one_run`) return the same :class:`EpsilonBound` record. Its ceiling (:func:`clopper_pearson_ceiling`) and
the canaries a perfect attack needs (:func:`clopper_pearson_canaries_needed`) say what the bound could show.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.special
from numpy.typing import ArrayLike, NDArray

from dpaudit.audit.checks import _check_unit, _float_or_none, _json_float, _json_number, _scores, _unjson_float
from dpaudit.audit.counts import _counts, _pool
from dpaudit.audit.order_stats import MOST_CANARIES, fewest_on_grid
from dpaudit.audit.thresholds import BonferroniThresholds, FixedThreshold, SplitThreshold

if TYPE_CHECKING:
    from dpaudit.accounting.serialization import Json


#: (epsilon, delta)-DP: the bound refutes any (epsilon', delta) claim with epsilon' below it.
GUARANTEE_DP = "(epsilon, delta)-DP"
#: Gaussian DP: the bound refutes mu-GDP for the mu whose epsilon at delta is below it.
GUARANTEE_GDP = "mu-GDP"


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
        scale: one-run against a claimed curve: the smallest rejected noise scale of the claim (every sigma times it;
            at most 1: the claimed curve itself is rejected); None when no scale is rejected or another method.
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
    scale: float | None = None
    split_seed: int | None = None
    split_fraction: float | None = None
    one_sided: bool = True

    def to_json(self) -> Json:
        out = dataclasses.asdict(self)
        out["threshold"] = _json_float(self.threshold)
        out["threshold_minus"] = _json_float(self.threshold_minus)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> EpsilonBound:
        kw = dict(obj)
        kw["threshold"] = _unjson_float(kw["threshold"])
        kw["threshold_minus"] = _unjson_float(kw.get("threshold_minus"))
        kw.setdefault("scale", None)
        for name in ("epsilon", "delta", "confidence"):
            kw[name] = _json_number(kw[name])
        for name in ("tpr_lower", "fpr_upper", "mu", "scale", "split_fraction"):
            kw[name] = _float_or_none(kw.get(name))
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in kw.items() if k in names}
        return cls(**fields)  # type: ignore[arg-type]  # the counts, names and flags as the file holds them


def _cp_upper(k: ArrayLike, n: int, alpha: ArrayLike) -> NDArray[np.float64]:
    """One-sided Clopper-Pearson upper bound p with P[Binomial(n, p) <= k] = alpha (1 when k = n)."""
    k = np.asarray(k, dtype=np.float64)
    # scipy.special.betaincinv(a, b, y) = scipy.stats.beta.ppf(y, a, b), without scipy.stats' overhead
    return np.where(k < n, scipy.special.betaincinv(k + 1, np.maximum(n - k, 1), 1 - np.asarray(alpha)), 1.0)


def _cp_eps(
    tp: ArrayLike,
    fp: ArrayLike,
    n_m: int,
    n_n: int,
    alpha_tpr: ArrayLike,
    alpha_fpr: ArrayLike,
    delta: float,
    one_sided: bool,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """Raw epsilon (may be negative, -inf when TPR_low <= delta) at each count pair, both bounds."""
    tp, fp = np.asarray(tp, float), np.asarray(fp, float)
    tpr_low = 1 - _cp_upper(n_m - tp, n_m, alpha_tpr)  # TPR lower = 1 - FNR upper
    fpr_up = _cp_upper(fp, n_n, alpha_fpr)
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(tpr_low > delta, np.log(np.maximum(tpr_low - delta, 1e-300)) - np.log(fpr_up), -np.inf)
        if not one_sided:  # reverse rule "score < t => non-member": TNR <= e^eps FNR + delta
            tnr_low, fnr_up = 1 - fpr_up, 1 - tpr_low
            rev = np.where(tnr_low > delta, np.log(np.maximum(tnr_low - delta, 1e-300)) - np.log(fnr_up), -np.inf)
            eps = np.maximum(eps, rev)
    return eps, tpr_low, fpr_up


def clopper_pearson_ceiling(
    n_members: int, n_nonmembers: int, *, delta: float, confidence: float, one_sided: bool = True
) -> float:
    """The Clopper-Pearson bound over every threshold (:class:`BonferroniThresholds`) of a perfect attack: every
    member scored above every non-member, so the threshold between them counts all ``n_members`` as true positives
    and no false positive (every other threshold reads less). The most that bound proves at these sizes."""
    alpha = 1 - confidence
    eps, _, _ = _cp_eps(
        n_members, 0, n_members, n_nonmembers, alpha / 2 / n_members, alpha / 2 / n_nonmembers, delta, one_sided
    )
    return max(0.0, float(eps))


@functools.lru_cache(maxsize=256)
def clopper_pearson_canaries_needed(
    epsilon: float, *, delta: float, confidence: float, one_sided: bool = True, most: int = MOST_CANARIES
) -> int | None:
    """The fewest canaries (half members, on the grid 2^(k/4) of
    :func:`~dpaudit.audit.order_stats.fewest_on_grid`, walked up: no smaller grid point does) whose perfect attack's
    :func:`clopper_pearson_ceiling` is above ``epsilon``: rejects (``epsilon``, ``delta``)-DP; None when none up to
    ``most`` does. Memoized."""

    def proves(n: int) -> bool:
        perfect = clopper_pearson_ceiling(n - n // 2, n // 2, delta=delta, confidence=confidence, one_sided=one_sided)
        return perfect > epsilon

    return fewest_on_grid(proves, smallest=2, most=most, monotone=False)


def _count_at(member: NDArray[np.float64], nonmember: NDArray[np.float64], t: float) -> tuple[int, int]:
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

    def at_threshold(
        m: NDArray[np.float64],
        n: NDArray[np.float64],
        t: float,
        a_tpr: float,
        a_fpr: float,
        *,
        selection: str,
        num_hypotheses: int,
        split_seed: int | None = None,
        split_fraction: float | None = None,
    ) -> EpsilonBound:
        tp, fp = _count_at(m, n, t)
        eps, tl, fu = _cp_eps(tp, fp, m.size, n.size, a_tpr, a_fpr, delta, one_sided)
        return EpsilonBound(
            epsilon=max(0.0, float(eps)),
            threshold=float(t),
            n_members=m.size,
            n_nonmembers=n.size,
            true_positives=tp,
            false_positives=fp,
            tpr_lower=float(tl),
            fpr_upper=float(fu),
            method="clopper_pearson",
            guarantee=GUARANTEE_DP,
            delta=delta,
            confidence=confidence,
            one_sided=one_sided,
            selection=selection,
            num_hypotheses=num_hypotheses,
            split_seed=split_seed,
            split_fraction=split_fraction,
        )

    if isinstance(selection, FixedThreshold):
        return at_threshold(
            member, nonmember, selection.threshold, alpha / 2, alpha / 2, selection="fixed", num_hypotheses=1
        )
    if isinstance(selection, BonferroniThresholds):
        if selection.thresholds is not None:
            ts = np.asarray(selection.thresholds)
            k = ts.size
            tp = np.sum(member[None, :] >= ts[:, None], axis=1)
            fp = np.sum(nonmember[None, :] >= ts[:, None], axis=1)
            eps, _, _ = _cp_eps(tp, fp, member.size, nonmember.size, alpha / 2 / k, alpha / 2 / k, delta, one_sided)
            best = ts[int(np.argmax(eps))]
            return at_threshold(
                member, nonmember, best, alpha / 2 / k, alpha / 2 / k, selection="bonferroni", num_hypotheses=k
            )
        a_tpr, a_fpr = alpha / 2 / member.size, alpha / 2 / nonmember.size
        t, _ = _best_threshold(member, nonmember, a_tpr, a_fpr, delta, one_sided)
        return at_threshold(
            member, nonmember, t, a_tpr, a_fpr, selection="bonferroni", num_hypotheses=member.size + nonmember.size
        )
    if isinstance(selection, SplitThreshold):
        (m1, n1), (m2, n2) = selection.partition(member, nonmember)
        t, _ = _best_threshold(m1, n1, alpha / 2, alpha / 2, delta, one_sided)
        return at_threshold(
            m2,
            n2,
            t,
            alpha / 2,
            alpha / 2,
            selection="split",
            num_hypotheses=1,
            split_seed=selection.seed,
            split_fraction=selection.fraction,
        )
    raise TypeError(
        f"selection must be SplitThreshold, BonferroniThresholds or FixedThreshold, got {type(selection).__name__}."
    )


def _best_threshold(
    member: NDArray[np.float64],
    nonmember: NDArray[np.float64],
    a_tpr: float,
    a_fpr: float,
    delta: float,
    one_sided: bool,
) -> tuple[float, float]:
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
