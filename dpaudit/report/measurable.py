"""Show only what can be measured: TPR at an FPR the non-members cannot resolve, exact intervals for rates, and
why a lower bound of 0 says nothing.

- **TPR at a low FPR** needs at least 1/FPR non-members (:func:`dpaudit.audit.min_nonmembers_for`): with 10
  non-members, "TPR at 0.1% FPR" is TPR at zero false positives. Such a cell reads
  "n/a (needs >= 1000 non-members, have 10)" instead of a number (:func:`tpr_rate`).
- **Rates get exact intervals.** The stored TPR interval is a percentile bootstrap, which collapses to
  [0, 0] when no resample has a true positive above the threshold. A TPR at the chosen threshold is
  k of n members, so its interval here is Clopper-Pearson on (k, n) (exact, never narrower than the data
  allow; Clopper & Pearson 1934). The threshold itself was read off the same scores, so the interval
  describes the rate of that threshold, like the point value beside it.
- **Why a bound is 0.** An empirical epsilon lower bound of 0 is uninformative when the audit is too
  small for any attack to prove leakage at its confidence. :func:`members_needed` finds the smallest
  number of members (and as many non-members) at which a PERFECT attack (every member scored above
  every non-member) gets a positive bound from the same bound function at the same confidence and
  delta, so the page can say "even a perfect attack needs >= 14 members and 14 non-members (have 10)".

References:
  Carlini et al. 2022, "Membership Inference Attacks From First Principles" (TPR at low FPR).
  Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run" (the one-run bound).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Rate", "members_needed", "percents", "tpr_rate", "tpr_rate_from_json", "zero_bound_reason"]


@dataclass(frozen=True, kw_only=True)
class Rate:
    """A rate as a page or the CLI prints it.

    Attributes:
        value: the point value (None: not measurable with these non-members).
        low, high: its exact (Clopper-Pearson) 95% interval (None when not measurable).
        reason: why it is not measurable ("needs >= 1000 non-members, have 10"), else None.
    """

    value: float | None
    low: float | None = None
    high: float | None = None
    reason: str | None = None

    @property
    def measurable(self) -> bool:
        return self.value is not None

    def text(self, spec: str = ".3f", *, interval: bool = True) -> str:
        """ "0.420 [0.301, 0.547]" or "n/a (needs >= 1000 non-members, have 10)"."""
        if self.value is None:
            return f"n/a ({self.reason})" if self.reason else "n/a"
        if not interval or self.low is None or self.high is None:
            return format(self.value, spec)
        return f"{self.value:{spec}} [{self.low:{spec}}, {self.high:{spec}}]"


def _rate(
    tpr: float, fpr: float, n_members: int, n_nonmembers: int, need: int, enough: bool, level: float = 0.95
) -> Rate:
    from dpaudit.audit.intervals import clopper_pearson

    if not enough:
        return Rate(value=None, reason=f"needs >= {need} non-members, have {n_nonmembers}")
    hits = int(round(tpr * n_members))
    ci = clopper_pearson(hits, n_members, level=level)
    del fpr
    return Rate(value=tpr, low=ci.low if ci else None, high=ci.high if ci else None)


def tpr_rate(t: Any, n_members: int) -> Rate:
    """A stored :class:`dpaudit.audit.TprAtFpr` as a :class:`Rate`: n/a with fewer non-members than its FPR needs,
    else the TPR with its Clopper-Pearson interval over the ``n_members`` members."""
    return _rate(t.tpr, t.fpr, n_members, t.n_nonmembers, t.min_nonmembers, t.enough_nonmembers)


def tpr_rate_from_json(t: Mapping[str, Any], n_members: int, n_nonmembers: int) -> Rate:
    """:func:`tpr_rate` of one ``tpr_at`` entry of a membership task in ``results.json`` (``fpr``, ``tpr``; the
    non-members needed are recomputed when the entry does not carry them)."""
    from dpaudit.audit import min_nonmembers_for

    fpr = float(t["fpr"])
    need = int(t.get("min_nonmembers") or min_nonmembers_for(fpr))
    return _rate(float(t["tpr"]), fpr, n_members, n_nonmembers, need, n_nonmembers >= need)


#: Largest audit size searched: a bound that needs more members than this is reported as "more than" it.
SEARCH_LIMIT = 1 << 20


@functools.lru_cache(maxsize=256)
def members_needed(kind: str, *, confidence: float, delta: float) -> int | None:
    """The smallest n such that a perfect attack on n members and n non-members gets a positive epsilon lower
    bound of ``kind`` ("proof": the one-run bound of Steinke et al. on 2n coin-flip canaries; "heuristic":
    Clopper-Pearson over every threshold) at ``confidence`` and ``delta``; None above :data:`SEARCH_LIMIT`.

    The bound functions are the ones the headline uses, so this is exactly the size at which the audit could
    have shown anything. A bound is monotone in n for perfect scores over the range searched (checked in the
    tests), so a doubling search followed by bisection finds the smallest n.
    """
    import numpy as np

    from dpaudit.audit import BonferroniThresholds, epsilon_lower_bound_clopper_pearson, epsilon_lower_bound_one_run

    def positive(n: int) -> bool:
        member, nonmember = np.ones(n), np.zeros(n)
        if kind == "proof":
            bound = epsilon_lower_bound_one_run(member, nonmember, delta=delta, confidence=confidence)
        else:
            bound = epsilon_lower_bound_clopper_pearson(
                member, nonmember, delta=delta, confidence=confidence, selection=BonferroniThresholds()
            )
        return bound.epsilon > 0

    high = 1
    while not positive(high):
        high *= 2
        if high > SEARCH_LIMIT:
            return None
    low = high // 2  # not positive (or 0)
    while high - low > 1:
        mid = (low + high) // 2
        if positive(mid):
            high = mid
        else:
            low = mid
    return high


def zero_bound_reason(bound: Any, audit: Any = None) -> str | None:
    """Why a headline bound (:class:`dpaudit.verdict.headline.HeadlineBound`) of 0 is uninformative, or None when it is
    positive or the audit was large enough that a perfect attack would have shown leakage (then 0 means the
    attack found none, which is a finding). ``audit``: its scores' counts (default: the bound's own)."""
    if bound is None or bound.epsilon > 0:
        return None
    audit = bound.bound if audit is None else audit
    confidence, delta = bound.bound.confidence, bound.bound.delta
    if not (0 < confidence < 1 and 0 <= delta < 1 and math.isfinite(delta)):
        return None
    need = members_needed(bound.kind, confidence=round(confidence, 12), delta=float(delta))
    have = min(audit.n_members, audit.n_nonmembers)
    pct = f"{confidence * 100:.4g}%"
    if need is None:
        return (
            f"uninformative: no attack could prove leakage at {pct} with fewer than {SEARCH_LIMIT:,} members and "
            "as many non-members"
        )
    if have >= need:
        return None
    if bound.kind == "proof":
        return (
            f"uninformative: even a perfect attack needs >= {2 * need} coin-flip canaries ({need} members, {need} "
            f"non-members) for a positive one-run bound at {pct}; this audit has {audit.n_members} and "
            f"{audit.n_nonmembers}"
        )
    return (
        f"uninformative: even a perfect attack needs >= {need} members and {need} non-members for a positive bound "
        f"at {pct}; this audit has {audit.n_members} and {audit.n_nonmembers}"
    )


def percents(value: float, baseline: float | None) -> tuple[str, str | None]:
    """Two accuracies as percentages with one decimal, more where rounding would make different figures equal."""
    if baseline is None:
        return f"{value:.1%}", None
    digits = 1
    while value != baseline and f"{value:.{digits}%}" == f"{baseline:.{digits}%}" and digits < 6:
        digits += 1
    return f"{value:.{digits}%}", f"{baseline:.{digits}%}"
