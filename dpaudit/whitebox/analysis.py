"""From the runs' evidence to scores, bounds and the verdict.

The verdict rests on ONE bound fixed before the audit ran (so it needs no correction for being the
best of several): the claim-family bound of the all-iterates view, one-run when there is one run and
pooled over the runs when there are several. Every other bound is reported beside it at its own
stated confidence, as evidence, not as the verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpaudit.audit.roc import roc_curve
from dpaudit.whitebox.bounds import Bound, multi_run_bounds, one_run_bounds
from dpaudit.whitebox.harness import RunEvidence
from dpaudit.whitebox.mechanism import ClaimedMechanism
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
    """Scores, every bound, and the primary bound the verdict rests on."""

    claim: ClaimedMechanism
    confidence: float
    scores: dict[str, ViewScores]
    one_run: dict[str, list[dict[str, Bound]]]
    multi_run: dict[str, dict[str, Bound]] = field(default_factory=dict)
    auc: dict[str, float] = field(default_factory=dict)

    @property
    def runs(self) -> int:
        return len(self.scores["all_iterates"].member)

    @property
    def primary(self) -> tuple[str, Bound]:
        """("one-run" | "multi-run", the claim-family bound of the all-iterates view)."""
        if self.runs > 1:
            return "multi-run", self.multi_run["all_iterates"]["claim_family"]
        return "one-run", self.one_run["all_iterates"][0]["claim_family"]

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


def analyse(evidence: Sequence[RunEvidence], *, confidence: float = 0.95) -> Analysis:
    """Score every run in both views and compute every bound (one-run per run; pooled when R > 1)."""
    if not evidence:
        raise ValueError("no runs to analyse.")
    claim = _same_claim(evidence)
    q, std = claim.per_step()
    scores: dict[str, ViewScores] = {}
    for view in VIEWS:
        members, nonmembers = [], []
        for run in evidence:
            if view == "all_iterates":
                s = all_iterates_scores(run.observations, run.layout, q, std, claim.clip_norm)
            else:
                s = last_iterate_scores(run.final)
            members.append(s[run.layout.member])
            nonmembers.append(s[~run.layout.member])
        scores[view] = ViewScores(tuple(members), tuple(nonmembers))
    one_run = {view: [one_run_bounds(m, n, claim, confidence=confidence)
                      for m, n in zip(scores[view].member, scores[view].nonmember)] for view in VIEWS}
    multi_run = ({view: multi_run_bounds(*scores[view].pooled(), claim, confidence=confidence) for view in VIEWS}
                 if len(evidence) > 1 else {})
    auc = {view: float(roc_curve(*scores[view].pooled()).auc()) for view in VIEWS}
    return Analysis(claim=claim, confidence=confidence, scores=scores, one_run=one_run, multi_run=multi_run, auc=auc)


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
        "primary": {"kind": kind, "view": "all_iterates", **primary.to_json()},
        "refuted": analysis.refuted,
        "auc": analysis.auc,
        "one_run": {view: [{k: b.to_json() for k, b in run.items()} for run in runs]
                    for view, runs in analysis.one_run.items()},
        "multi_run": {view: {k: b.to_json() for k, b in bounds.items()} for view, bounds in analysis.multi_run.items()},
    }
