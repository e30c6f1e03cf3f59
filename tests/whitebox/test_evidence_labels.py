"""The white-box page tells the verdict's bounds from the evidence beside them.

Every bound but the verdict's two holds at its own confidence, with no correction for how many are shown: across the
rows of many audits some exceed a claim that is exactly tight (one run's 1.011 of the claim among 110 measured).
Such a row is labelled uncorrected evidence, never shown as above the claim the way a verdict's bound is.
"""

from __future__ import annotations

from types import SimpleNamespace

from dpaudit.report.whitebox import BoundRow, _label_evidence
from dpaudit.whitebox.analysis import Analysis, _evidence
from dpaudit.whitebox.bounds import Bound
from tests.claims import poisson_claim


def _row(*, verdict: bool, above: bool, evidence: str = "–") -> BoundRow:
    return BoundRow(
        scope="run 2",
        kind="one-run",
        view="all iterates",
        method="order statistics",
        proves="the claimed curve",
        epsilon="2.02",
        ratio="1.01",
        confidence="97.5%",
        evidence=evidence,
        verdict=verdict,
        primary=verdict,
        above=above,
        capped=False,
    )


def test_an_evidence_row_above_the_claim_is_labelled_and_the_verdicts_are_not():
    run = SimpleNamespace(bound_confidence=0.975)
    rows = [_row(verdict=True, above=True), *(_row(verdict=False, above=i == 0, evidence="9 of 10") for i in range(40))]
    out = _label_evidence(run, rows)  # type: ignore[arg-type]
    assert out[0] == rows[0]  # the verdict's row: as computed, bold when above the claim
    assert all(r.confidence == "97.5% alone (evidence, uncorrected)" and not r.above for r in out[1:])
    assert "one of 40 evidence rows" in out[1].evidence and "about 1 are expected" in out[1].evidence
    assert out[1].evidence.startswith("9 of 10; ") and "not a refutation" in out[1].evidence
    assert all("refutation" not in r.evidence for r in out[2:])


def test_whitebox_json_counts_the_uncorrected_evidence_bounds():
    claim = poisson_claim(0.9, 4, 3.67, epsilon=2.0)
    bound = Bound(method="order_stats", proves="the claimed curve", epsilon=1.9, confidence=0.975)
    two = {"order_stats": bound, "steinke": bound}
    analysis = Analysis(
        claim=claim,
        confidence=0.95,
        scores={},
        one_run={"all_iterates": [two, two], "last_iterate": [two, two]},
        pooled={"all_iterates": {"claim_family": bound, "order_stats": bound}},
    )
    evidence = _evidence(analysis)  # 8 one-run and 2 pooled bounds, less the verdict's two
    assert evidence["bounds"] == 8 and evidence["corrected"] is False and evidence["confidence_each"] == 0.975
    assert abs(evidence["expected_above_a_tight_claim"] - 0.2) < 1e-9
