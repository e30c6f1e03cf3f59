"""From the runs' evidence to scores, bounds and the verdict.

The verdict rests on two bounds fixed before the audit ran, both of the all-iterates view and both
testing the claimed mechanism's own curve, each at significance (1 - confidence) / 2 so that the
larger of them holds at ``confidence`` (Bonferroni):

- ``one-run``: the f-DP recursion on the first run's coin-flip canaries (Mahloujifar et al. 2024): a
  proof that assumes nothing about the trainer; its guess counts are planned from the claim and the
  layout before any score is seen (:mod:`dpaudit.whitebox.plan`), so it needs no Bonferroni correction;
- ``pooled``: ONE test over every canary of every run, planned from the claim, m and R before any score is seen
  (:func:`dpaudit.whitebox.plan.planned_pooled`): with R > 1 runs, the order statistics over the R x m canaries as one
  game (Xiang et al. 2025; a proof that needs no independence between canaries: each canary sits in one run, so the R
  runs together are f-DP for it as its own run is) or the Clopper-Pearson points below the curve (valid when the
  trainer treats the canaries as independent trials, as DP-SGD does with Dirac canaries on their own coordinates:
  independent Poisson sampling per row, noise independent per coordinate, coordinate-wise optimizers), whichever's
  planned counts reject the less private scaled claim; with one run, the Clopper-Pearson points. Across runs it is
  the classic many-run audit, stronger than one run's: a one-run proof pays for its m canaries alone.

The one-run verdict bound is ONE planned test (:func:`dpaudit.whitebox.plan.planned_one_run`): the order-statistics
test of Xiang et al. (2025; ``order_stats``, its released count planned from the claim) or the f-DP recursion
(``claim_family``), whichever the claim's simulation says rejects the less private scaled claim; the choice is a
function of the claim and the layout, so no correction is paid for it; or the Gaussian-pair bound (``gauss_pair``,
:mod:`dpaudit.audit.gauss_pair`) when its planned figure is strictly larger. All are computed and shown in both views.

Every other bound (Steinke; the Gaussian f-DP reading; Clopper-Pearson (epsilon, delta); the last
iterate's; the pooled test the plan did not choose) is reported beside them at the same confidence, as evidence,
not as the verdict.

Rejecting the claimed curve (the claim's own scale rejected) shows that the trainer is not the mechanism its
``privacy.json`` states: a bug in clipping, noise, sampling or accounting, or a mechanism of another form. It
does not show that the (epsilon, delta) envelope fails (a full-batch Gaussian within the claim's epsilon is
rejected by a subsampled claim's curve), so the epsilon figure printed then is the bound of the same test that
holds for any mechanism: the order statistics' own (epsilon, delta) reading or Steinke's on the first run's guesses
(one-run), the pooled order statistics' (epsilon, delta) reading or Clopper-Pearson (epsilon, delta) on the pooled
canaries, at the same confidence (``any_mechanism``); only it can say that the claimed epsilon is
false. Each bound carries its ceiling: the bound a perfect attack would reach at the audit's sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpaudit.audit.claim_curves import CEILING_MIN_SCALE
from dpaudit.audit.roc import roc_curve
from dpaudit.claim import Claim
from dpaudit.whitebox.bounds import (
    Bound,
    gauss_pair_bound,
    multi_run_bounds,
    multi_run_family,
    one_run_bounds,
    one_run_family,
    order_stats_bounds,
)
from dpaudit.whitebox.harness import RunEvidence
from dpaudit.whitebox.layout import CanaryLayout
from dpaudit.whitebox.plan import (
    planned_gauss_pair,
    planned_guesses,
    planned_one_run,
    planned_order_stats,
    planned_pooled,
)
from dpaudit.whitebox.scores import checked_scores, last_iterate_scores

__all__ = ["VIEWS", "Analysis", "analyse"]

#: What the auditor sees: every step's noisy sum (all iterates) or only the final parameters.
VIEWS = ("all_iterates", "last_iterate")


@dataclass(frozen=True)
class ViewScores:
    """One view's scores of every run: ``member[r]`` and ``nonmember[r]`` of run r."""

    member: tuple[np.ndarray, ...]
    nonmember: tuple[np.ndarray, ...]

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        return np.concatenate(self.member), np.concatenate(self.nonmember)


@dataclass(frozen=True)
class Analysis:
    """Scores, every bound, and the primary bound the verdict rests on.

    ``confidence`` is the verdict's; each bound holds at ``bound_confidence`` = 1 - (1 - confidence) / 2.
    """

    claim: Claim
    confidence: float
    scores: dict[str, ViewScores]
    one_run: dict[str, list[dict[str, Bound]]]
    pooled: dict[str, dict[str, Bound]] = field(default_factory=dict)
    auc: dict[str, float] = field(default_factory=dict)
    #: When the primary bound rejects the claimed curve: the same test's bound valid for any mechanism.
    any_mechanism: Bound | None = None
    #: The verdict bounds' ceilings ("one-run", "pooled"): their values for a perfect attack at these sizes.
    ceilings: dict[str, float] = field(default_factory=dict)
    #: Which one-run bound of the first run (all iterates) the verdict rests on, planned from the claim:
    #: "claim_family" (the f-DP recursion), "order_stats" or "gauss_pair" (:func:`dpaudit.whitebox.plan.planned_one_run`).
    one_run_method: str = "claim_family"
    #: Which pooled bound (all iterates) the verdict rests on, planned from the claim, m and R: "claim_family" (the
    #: Clopper-Pearson points) or "order_stats" (:func:`dpaudit.whitebox.plan.planned_pooled`).
    pooled_method: str = "claim_family"

    @property
    def _claimed_epsilon(self) -> float:
        """The claim's epsilon: an audited claim is proven (harness._audited_claim)."""
        epsilon = self.claim.epsilon
        assert epsilon is not None
        return epsilon

    @property
    def bound_confidence(self) -> float:
        return 1 - (1 - self.confidence) / 2

    @property
    def runs(self) -> int:
        return len(self.scores["all_iterates"].member)

    @property
    def primary(self) -> tuple[str, Bound]:
        """The larger of the two verdict bounds: ("one-run" | "pooled", its bound)."""
        one = self.one_run["all_iterates"][0][self.one_run_method]
        pooled = self.pooled["all_iterates"][self.pooled_method]
        return ("pooled", pooled) if pooled.epsilon > one.epsilon else ("one-run", one)

    @property
    def mechanism_refuted(self) -> bool:
        """Whether the primary bound rejects the claimed curve itself (scale <= 1): the trainer is not the mechanism its
        ``privacy.json`` states."""
        return curve_rejected(self.primary[1], self._claimed_epsilon)

    @property
    def refuted(self) -> bool:
        """Whether the claimed (epsilon, delta) is contradicted: a bound valid for any mechanism exceeds it."""
        return self.any_mechanism is not None and self.any_mechanism.epsilon > self._claimed_epsilon

    @property
    def alarm(self) -> bool:
        """The verdict is not "consistent": the claimed mechanism or its epsilon is refuted."""
        return self.refuted or self.mechanism_refuted

    @property
    def figure(self) -> Bound:
        """The bound whose epsilon is printed: :attr:`any_mechanism` when the curve is refuted, else the primary."""
        return self.any_mechanism if self.mechanism_refuted and self.any_mechanism is not None else self.primary[1]


def curve_rejected(bound: Bound, claimed_epsilon: float) -> bool:
    """Whether a claim-family ``bound`` rejects the claim itself: its smallest rejected scale is at most 1 (or its
    epsilon, read from an optimistic PLD, is above the claim)."""
    return bound.method in ("claim_family", "order_stats", "gauss_pair") and (
        (bound.scale is not None and bound.scale <= 1.0) or bound.epsilon > claimed_epsilon
    )


def _any_mechanism(
    kind: str,
    first: tuple[np.ndarray, np.ndarray],
    pooled: tuple[np.ndarray, np.ndarray],
    claim: Claim,
    level: float,
    one_run: dict[str, Bound] | None = None,
    pooled_order: dict[str, Bound] | None = None,
) -> Bound:
    """The bound of the verdict's ``kind`` of test valid for any mechanism: the order-statistics test's own
    (epsilon, delta) reading or Steinke's on the first run (one-run), or the pooled order statistics' (epsilon, delta)
    reading or Clopper-Pearson (epsilon, delta) on the pooled canaries, at ``level``."""
    if kind == "one-run" and one_run is not None and "order_stats_dp" in one_run:
        return one_run["order_stats_dp"]
    if kind == "one-run":
        return one_run_bounds(*first, claim, confidence=level)["steinke"]
    if pooled_order is not None:
        return pooled_order["order_stats_dp"]
    return multi_run_bounds(*pooled, claim, confidence=level)["clopper_pearson"]


def planned_order_bounds(
    claim: Claim,
    layout: CanaryLayout,
    canaries: int,
    view: str,
    member: np.ndarray,
    nonmember: np.ndarray,
    level: float,
) -> dict[str, Bound]:
    """The order statistics on ``member``/``nonmember`` with the released count and centre planned from the claim,
    ``layout``'s clipping unit and ``canaries`` (one run's m, or R x m pooled) before any score is seen."""
    plan = planned_order_stats(claim, layout.unit, layout.partners, canaries, 1 - level, view)
    return order_stats_bounds(member, nonmember, claim, confidence=level, r=plan.r, center=plan.center)


def planned_gauss_bound(
    claim: Claim, view: str, member: np.ndarray, nonmember: np.ndarray, run: RunEvidence, level: float
) -> Bound:
    """The Gaussian pair on ``run``'s canaries with the projection planned from the claim and its layout: the view's
    scores, or the canaries' summed observations (members shifted up as in the ratio)."""
    layout = run.layout
    plan = planned_gauss_pair(claim, layout.unit, layout.partners, layout.size, 1 - level, view)
    if plan.projection == "sum":
        summed = np.asarray(run.observations, dtype=np.float64).sum(axis=0)
        member, nonmember = summed[layout.member], summed[~layout.member]
    return gauss_pair_bound(member, nonmember, claim, confidence=level, projection=plan.projection)


def _ceilings(
    claim: Claim,
    sizes: list[tuple[int, int]],
    plan: tuple[int, int],
    level: float,
    one_run: Bound | None = None,
    pooled_bound: Bound | None = None,
) -> dict[str, float]:
    """The verdict bounds for a perfect attack (every member above every non-member) at these sizes (each bound's own
    when it carries its ceiling)."""
    first = (np.ones(sizes[0][0]), np.zeros(sizes[0][1]))
    pooled = (np.ones(sum(m for m, _ in sizes)), np.zeros(sum(n for _, n in sizes)))
    if one_run is not None and one_run.ceiling is not None:
        one = one_run.ceiling
    else:
        one = one_run_family(*first, claim, confidence=level, planned=plan, min_scale=CEILING_MIN_SCALE).epsilon
    if pooled_bound is not None and pooled_bound.ceiling is not None:
        many = pooled_bound.ceiling
    else:
        many = multi_run_family(*pooled, claim, confidence=level, min_scale=CEILING_MIN_SCALE).epsilon
    return {"one-run": one, "pooled": many}


def _same_claim(evidence: Sequence[RunEvidence]) -> Claim:
    claim = evidence[0].claim
    for run in evidence[1:]:
        if run.claim.mechanism_key() != claim.mechanism_key():
            raise ValueError(
                "the runs made different claims (segments, delta, clip norm or sensitivity): pooling them "
                "would test no single mechanism; run the audit with one configuration."
            )
    return claim


def analyse(evidence: Sequence[RunEvidence], *, confidence: float = 0.95, full: bool = True) -> Analysis:
    """Score every run and compute the verdict's two bounds; with ``full``, every other bound too
    (one-run per run in both views, pooled in both views)."""
    if not evidence:
        raise ValueError("no runs to analyse.")
    claim = _same_claim(evidence)
    level = 1 - (1 - confidence) / 2
    q, std = claim.per_step()
    scores: dict[str, ViewScores] = {}
    for view in VIEWS if full else VIEWS[:1]:
        members, nonmembers = [], []
        for run in evidence:
            if view == "all_iterates":
                s = checked_scores(run.observations, run.layout, q, std, claim.clip_norm)
            else:
                s = last_iterate_scores(run.final)
            members.append(s[run.layout.member])
            nonmembers.append(s[~run.layout.member])
        scores[view] = ViewScores(tuple(members), tuple(nonmembers))
    layout0 = evidence[0].layout
    plans = [
        planned_guesses(claim, run.layout.unit, run.layout.partners, run.layout.size, 1 - level) for run in evidence
    ]  # from the claim and the layout alone: fixed before any score is seen
    method = planned_one_run(claim, layout0.unit, layout0.partners, layout0.size, 1 - level)
    total = sum(run.layout.size for run in evidence)
    pooled_method = (  # the planned sizes: R runs of the first run's m canaries (every run has the same layout)
        planned_pooled(claim, layout0.unit, layout0.partners, layout0.size, len(evidence), 1 - level)
        if len(evidence) > 1
        else "claim_family"
    )

    def pooled_order(view: str, vs: ViewScores) -> dict[str, Bound]:
        # the order statistics on every run's canaries as one game, its released count planned for R x m canaries:
        # a proof without the Clopper-Pearson points' independence (each canary sits in one run, so the R runs
        # together are f-DP for it as its own run is)
        return planned_order_bounds(claim, layout0, total, view, *vs.pooled(), level)

    def order(view: str, m: np.ndarray, n: np.ndarray, run: RunEvidence) -> dict[str, Bound]:
        return planned_order_bounds(claim, run.layout, run.layout.size, view, m, n, level)

    def gauss(view: str, m: np.ndarray, n: np.ndarray, run: RunEvidence) -> Bound:
        return planned_gauss_bound(claim, view, m, n, run, level)

    first = scores["all_iterates"]
    m0, n0 = first.member[0], first.nonmember[0]
    verdict_order = order("all_iterates", m0, n0, evidence[0]) if method == "order_stats" else {}
    verdict_gauss = {"gauss_pair": gauss("all_iterates", m0, n0, evidence[0])} if method == "gauss_pair" else {}
    verdict_pooled = pooled_order("all_iterates", first) if pooled_method == "order_stats" else {}
    if full:
        # per run and view: Steinke, the planned f-DP recursion and the order statistics against the claimed curve
        # (the Gaussian f-DP reading is left out: Gaussian mechanisms only; the order statistics' own (epsilon, delta)
        # reading is the verdict's figure for any mechanism when the curve is rejected)
        one_run = {
            view: [
                {
                    **{
                        k: b
                        for k, b in one_run_bounds(
                            m, n, claim, confidence=level, planned=plan if view == "all_iterates" else None
                        ).items()
                        if k != "fdp_gaussian"
                    },
                    "order_stats": verdict_order["order_stats"]
                    if verdict_order and view == "all_iterates" and i == 0
                    else order(view, m, n, run)["order_stats"],
                    "gauss_pair": verdict_gauss["gauss_pair"]
                    if verdict_gauss and view == "all_iterates" and i == 0
                    else gauss(view, m, n, run),
                }
                for i, (m, n, plan, run) in enumerate(zip(vs.member, vs.nonmember, plans, evidence))
            ]
            for view, vs in scores.items()
        }
        # every row carries its ceiling and the canaries a perfect attack needs (whitebox.bounds)
        pooled = {
            view: {
                **multi_run_bounds(*vs.pooled(), claim, confidence=level),
                **(
                    {
                        "order_stats": (
                            verdict_pooled if verdict_pooled and view == "all_iterates" else pooled_order(view, vs)
                        )["order_stats"]
                    }
                    if len(evidence) > 1
                    else {}
                ),
            }
            for view, vs in scores.items()
        }
    else:
        one_run = {
            "all_iterates": [
                {"order_stats": verdict_order["order_stats"]}
                if verdict_order
                else verdict_gauss
                or {"claim_family": one_run_family(m0, n0, claim, confidence=level, planned=plans[0])}
            ]
        }
        pooled = {
            "all_iterates": {"order_stats": verdict_pooled["order_stats"]}
            if verdict_pooled
            else {
                "claim_family": multi_run_family(*first.pooled(), claim, confidence=level, min_scale=CEILING_MIN_SCALE)
            }
        }
    auc = {view: float(roc_curve(*vs.pooled()).auc()) for view, vs in scores.items()}
    ceilings = _ceilings(
        claim,
        [(m.size, n.size) for m, n in zip(first.member, first.nonmember)],
        plans[0],
        level,
        one_run["all_iterates"][0][method],
        pooled["all_iterates"][pooled_method],
    )
    analysis = Analysis(
        claim=claim,
        confidence=confidence,
        scores=scores,
        one_run=one_run,
        pooled=pooled,
        auc=auc,
        ceilings=ceilings,
        one_run_method=method,
        pooled_method=pooled_method,
    )
    if analysis.mechanism_refuted:  # the figure printed must then hold for any mechanism
        kind = analysis.primary[0]
        bound = _any_mechanism(
            kind,
            (first.member[0], first.nonmember[0]),
            first.pooled(),
            claim,
            level,
            verdict_order or None,
            verdict_pooled or None,
        )
        analysis = dataclasses.replace(analysis, any_mechanism=bound)
    return analysis


def summary(analysis: Analysis) -> dict[str, Any]:
    """The JSON summary of an analysis (the bounds, the claim, the verdict)."""
    kind, primary = analysis.primary
    claim = analysis.claim
    return {
        "claim": claim.to_json(),
        "confidence": analysis.confidence,
        "bound_confidence": analysis.bound_confidence,
        "primary": {"kind": kind, "view": "all_iterates", **primary.to_json()},
        "one_run_method": analysis.one_run_method,
        "pooled_method": analysis.pooled_method,
        "refuted": analysis.refuted,
        "mechanism_refuted": analysis.mechanism_refuted,
        "any_mechanism": None if analysis.any_mechanism is None else analysis.any_mechanism.to_json(),
        "ceilings": dict(analysis.ceilings),
        "auc": analysis.auc,
        "one_run": {
            view: [{k: b.to_json() for k, b in run.items()} for run in runs] for view, runs in analysis.one_run.items()
        },
        "pooled": {view: {k: b.to_json() for k, b in bounds.items()} for view, bounds in analysis.pooled.items()},
        "evidence": _evidence(analysis),
    }


def _evidence(analysis: Analysis) -> dict[str, Any]:
    """How the bounds beside the verdict's two are to be read: each at its own confidence, with no correction for how
    many are shown, so about (count) x (1 - confidence) of them can exceed a claim that is exactly tight."""
    count = sum(len(run) for runs in analysis.one_run.values() for run in runs)
    count += sum(len(bounds) for bounds in analysis.pooled.values())
    count -= 2  # the verdict's one-run and pooled bounds
    return {
        "bounds": count,
        "confidence_each": analysis.bound_confidence,
        "corrected": False,
        "expected_above_a_tight_claim": count * (1 - analysis.bound_confidence),
        "note": "every bound but the verdict's two is evidence at its own confidence, not corrected for the others "
        "shown: the largest of them is not a bound at any stated confidence",
    }
