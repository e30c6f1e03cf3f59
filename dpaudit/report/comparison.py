"""The table a comparison page opens with: one row per model, the answer to "does it leak, and at what cost".

Columns (every figure from the typed results, rounded as everywhere: claims up, lower bounds down):

- the model's label (:func:`dpaudit.report.models.label_runs`) and the attack directories it comes from;
- the claimed epsilon (:meth:`dpaudit.verdict.headline.Claim.short`, rounded up by :func:`dpaudit.common.figures.format_up`);
- the held-out utility (MLM or intent accuracy) beside its trivial baseline (:mod:`dpaudit.training.baselines`);
- the most-repeated canaries' mean exposure against the never-inserted controls' (with the one-sided p-value);
- the secrets reconstructed exactly (a causal LM: extracted greedily from their prefix), at the top frequency and over
  every inserted canary;
- the best valid per-example lower bound (:mod:`dpaudit.verdict.headline`, 95% over every audit of the model), with why
  it is uninformative when it is 0 and the audit was too small (:mod:`dpaudit.report.measurable`);
- the strongest membership attack's AUC and its TPR at 1% FPR (n/a when the non-members cannot resolve 1%).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dpaudit.attacks.results import ExposureResult, ReconstructionResult
from dpaudit.common.figures import format_down
from dpaudit.report.load import ReportRun
from dpaudit.report.measurable import percents, tpr_rate, zero_bound_reason
from dpaudit.report.membership import MembershipAudit, strongest
from dpaudit.verdict.headline import PROOF, Headline

__all__ = ["ComparisonRow", "comparison_rows"]


@dataclass(frozen=True, kw_only=True)
class ComparisonRow:
    """One model's row; every cell is text the template only escapes ("–": not measured for this model)."""

    label: str
    directories: tuple[str, ...]
    claimed: str
    claim: str
    utility: str
    utility_baseline: str | None
    utility_name: str | None
    exposure: str
    exposure_controls: str | None
    reconstructed: str
    reconstructed_all: str | None
    bound: str
    bound_note: str | None
    auc: str
    auc_attack: str | None
    tpr: str


def _first(run: ReportRun, cls: type):  # noqa: ANN202
    return next((r for r in run.results.attacks if isinstance(r, cls)), None)


def _exposure(run: ReportRun) -> tuple[str, str | None]:
    exposure = _first(run, ExposureResult)
    rows = exposure.rows if exposure else ()
    top = max((r for r in rows if r.frequency > 0), key=lambda r: r.frequency, default=None)
    controls = next((r for r in rows if r.frequency == 0), None)
    if top is None:
        return "–", None
    p = f", p = {top.vs_controls.p_value:.2g}" if top.vs_controls else ""
    ceiling = exposure.parameters.log2_space_size
    of = f" of {ceiling:.3g}" if ceiling is not None else ""
    text = f"{top.mean:.2f} bits{of} ({top.frequency}×{p})"
    return text, (f"controls {controls.mean:.2f}" if controls else None)


def _reconstructed(run: ReportRun) -> tuple[str, str | None]:
    recon = _first(run, ReconstructionResult)
    rows = [r for r in (recon.rows if recon else ()) if r.frequency > 0]
    if not rows:
        return "–", None
    top = max(rows, key=lambda r: r.frequency)
    hits, n = sum(r.exact_matches for r in rows), sum(r.n for r in rows)
    return f"{top.exact_matches}/{top.n} at {top.frequency}×", f"{hits}/{n} of all inserted"


def _bound(head: Headline, audits: Sequence[MembershipAudit]) -> tuple[str, str | None]:
    if not head.bounds:
        return "–", "no membership-inference attack was run"
    best = head.best
    if best is None:
        return "none", "no per-example audit (single examples, or canaries inserted once)"
    kind = "proof" if best.kind == PROOF else "heuristic"
    text = f"ε ≥ {format_down(best.epsilon)} ({kind})"
    audit = next((a.audit for a in audits if (a.attack, a.task) == (best.attack, best.task)), None)
    note = zero_bound_reason(best, audit) if audit is not None else None
    if best.above and best.kind == PROOF:
        note = f"above the claim: the claim is contradicted ({head.label})"
    return text, note or f"{best.name}; {head.label}"


def _membership(audits: Sequence[MembershipAudit]) -> tuple[str, str | None, str]:
    best = strongest(tuple(audits))
    if best is None:
        return "–", None, "–"
    auc = best.audit.auc
    t = best.tpr(0.01)
    tpr = "–" if t is None else tpr_rate(t, best.audit.n_members).text(".2f")
    return f"{auc.value:.2f} [{auc.ci.low:.2f}, {auc.ci.high:.2f}]", best.name, tpr


def comparison_rows(
    runs: Sequence[ReportRun], heads: Mapping[str, Headline], audits: Mapping[str, Sequence[MembershipAudit]]
) -> tuple[ComparisonRow, ...]:
    """One :class:`ComparisonRow` per run (labels unique, as :func:`dpaudit.report.models.label_runs` makes them)."""
    rows = []
    for run in runs:
        head = heads[run.label]
        utility = run.utility
        if utility is None:
            value, baseline = "–", None
        else:
            value, baseline = percents(utility.value, utility.baseline)
        exposure, controls = _exposure(run)
        recon, recon_all = _reconstructed(run)
        bound, note = _bound(head, audits[run.label])
        auc, attack, tpr = _membership(audits[run.label])
        rows.append(
            ComparisonRow(
                label=run.label,
                directories=run.directories,
                claimed=head.claim.short(),
                claim=head.claim.text(),
                utility=value,
                utility_baseline=baseline,
                utility_name=utility.name if utility else None,
                exposure=exposure,
                exposure_controls=controls,
                reconstructed=recon,
                reconstructed_all=recon_all,
                bound=bound,
                bound_note=note,
                auc=auc,
                auc_attack=attack,
                tpr=tpr,
            )
        )
    return tuple(rows)
