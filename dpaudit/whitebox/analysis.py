"""From the runs' evidence to scores, bounds and the verdict.

The verdict rests on two bounds fixed before the audit ran, both of the all-iterates view and both
testing the claimed mechanism's own curve, each at significance (1 - confidence) / 2 so that the
larger of them holds at ``confidence`` (Bonferroni):

- ``one-run``: the f-DP recursion on the first run's coin-flip canaries (Mahloujifar et al. 2024): a
  proof that assumes nothing about the trainer; its guess counts are planned from the claim and the
  layout before any score is seen (:mod:`dpaudit.whitebox.plan`), so it needs no Bonferroni correction;
- ``pooled``: Clopper-Pearson points below the curve over every canary of every run: valid when the
  trainer treats the canaries as independent trials, as DP-SGD does with Dirac canaries on their own
  coordinates (independent Poisson sampling per row, noise independent per coordinate,
  coordinate-wise optimizers); across runs it is the classic many-run audit. It is much stronger:
  a one-run proof pays for not knowing how the canaries interact.

Every other bound (Steinke; the Gaussian f-DP reading; Clopper-Pearson (epsilon, delta); the last
iterate's) is reported beside them at the same confidence, as evidence, not as the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpaudit.audit.claimed_mechanism import ClaimedMechanism
from dpaudit.audit.roc import roc_curve
from dpaudit.whitebox.bounds import Bound, multi_run_bounds, multi_run_family, one_run_bounds, one_run_family
from dpaudit.whitebox.harness import RunEvidence
from dpaudit.whitebox.plan import planned_guesses
from dpaudit.whitebox.scores import all_iterates_scores, last_iterate_scores

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

    claim: ClaimedMechanism
    confidence: float
    scores: dict[str, ViewScores]
    one_run: dict[str, list[dict[str, Bound]]]
    pooled: dict[str, dict[str, Bound]] = field(default_factory=dict)
    auc: dict[str, float] = field(default_factory=dict)

    @property
    def bound_confidence(self) -> float:
        return 1 - (1 - self.confidence) / 2

    @property
    def runs(self) -> int:
        return len(self.scores["all_iterates"].member)

    @property
    def primary(self) -> tuple[str, Bound]:
        """The larger of the two verdict bounds: ("one-run" | "pooled", its bound)."""
        one = self.one_run["all_iterates"][0]["claim_family"]
        pooled = self.pooled["all_iterates"]["claim_family"]
        return ("pooled", pooled) if pooled.epsilon > one.epsilon else ("one-run", one)

    @property
    def refuted(self) -> bool:
        """Whether the primary bound exceeds the claimed epsilon (the claim is rejected)."""
        return self.primary[1].epsilon > self.claim.epsilon


def _same_claim(evidence: Sequence[RunEvidence]) -> ClaimedMechanism:
    claim = evidence[0].claim
    for run in evidence[1:]:
        if run.claim != claim:
            raise ValueError("the runs made different claims (segments, delta, clip norm or sensitivity): pooling them "
                             "would test no single mechanism; run the audit with one configuration.")
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
                s = all_iterates_scores(run.observations, run.layout, q, std, claim.clip_norm)
            else:
                s = last_iterate_scores(run.final)
            members.append(s[run.layout.member])
            nonmembers.append(s[~run.layout.member])
        scores[view] = ViewScores(tuple(members), tuple(nonmembers))
    plans = [planned_guesses(claim, run.layout.unit, run.layout.partners, run.layout.size, 1 - level)
             for run in evidence]  # from the claim and the layout alone: fixed before any score is seen
    if full:
        one_run = {view: [one_run_bounds(m, n, claim, confidence=level,
                                         planned=plan if view == "all_iterates" else None)
                          for m, n, plan in zip(vs.member, vs.nonmember, plans)] for view, vs in scores.items()}
        pooled = {view: multi_run_bounds(*vs.pooled(), claim, confidence=level) for view, vs in scores.items()}
    else:
        first = scores["all_iterates"]
        one_run = {"all_iterates": [{"claim_family": one_run_family(first.member[0], first.nonmember[0], claim,
                                                                    confidence=level, planned=plans[0])}]}
        pooled = {"all_iterates": {"claim_family": multi_run_family(*first.pooled(), claim, confidence=level)}}
    auc = {view: float(roc_curve(*vs.pooled()).auc()) for view, vs in scores.items()}
    return Analysis(claim=claim, confidence=confidence, scores=scores, one_run=one_run, pooled=pooled, auc=auc)


def summary(analysis: Analysis) -> dict[str, Any]:
    """The JSON summary of an analysis (the bounds, the claim, the verdict)."""
    kind, primary = analysis.primary
    claim = analysis.claim
    return {
        "claim": {"epsilon": claim.epsilon, "delta": claim.delta, "steps": claim.steps, "clip_norm": claim.clip_norm,
                  "sensitivity_factor": claim.sensitivity_factor,
                  "segments": [{"steps": s.steps, "sampling_probability": s.sampling_probability,
                                "noise_multiplier": s.noise_multiplier} for s in claim.segments]},
        "confidence": analysis.confidence,
        "bound_confidence": analysis.bound_confidence,
        "primary": {"kind": kind, "view": "all_iterates", **primary.to_json()},
        "refuted": analysis.refuted,
        "auc": analysis.auc,
        "one_run": {view: [{k: b.to_json() for k, b in run.items()} for run in runs]
                    for view, runs in analysis.one_run.items()},
        "pooled": {view: {k: b.to_json() for k, b in bounds.items()} for view, bounds in analysis.pooled.items()},
    }
