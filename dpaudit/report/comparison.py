"""The table a comparison page opens with: one row per model, the answer to "does it leak, and at what cost".

Columns (every figure from the typed results, rounded as everywhere: claims up, lower bounds down):

- the model's label (:func:`dpaudit.report.models.label_runs`) and the attack directories it comes from;
- the claimed epsilon (:meth:`dpaudit.verdict.headline.Claim.short`, rounded up by :func:`dpaudit.common.figures.format_up`);
- the held-out utility (MLM or intent accuracy) beside its trivial baseline (:mod:`dpaudit.training.baselines`), and
  its public start's (the ``--init-from`` model's own last evaluation on the same held-out rows: the comparison that
  matters for a private model, since releasing the start costs no privacy);
- the most-repeated canaries' mean exposure against the never-inserted controls' (with the one-sided p-value);
- the secrets reconstructed exactly (a causal LM: extracted greedily from their prefix), at the top frequency and over
  every inserted canary;
- the best valid per-example lower bound (:mod:`dpaudit.verdict.headline`, 95% over every audit of the model), with why
  it is uninformative when it is 0 and the audit was too small (:mod:`dpaudit.report.measurable`);
- the strongest membership attack's AUC and its TPR at 1% FPR (n/a when the non-members cannot resolve 1%).

A reason repeated across cells (n/a: too few non-members; an uninformative bound) is a numbered footnote
(:class:`Footnotes`), printed once under the table.
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

__all__ = ["ComparisonRow", "Footnotes", "comparison_rows"]


class Footnotes:
    """Numbered notes of one table: a reason repeated in many cells ("needs >= 100 non-members, have 5") is printed
    once under the table, each cell carrying its number."""

    def __init__(self) -> None:
        self._texts: list[str] = []

    def ref(self, text: str | None) -> int | None:
        """The number of ``text`` (1, 2, ... in order of first use); None for no text."""
        if not text:
            return None
        if text not in self._texts:
            self._texts.append(text)
        return self._texts.index(text) + 1

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(self._texts)


def rate_cell(rate, notes: Footnotes, spec: str = ".3f") -> tuple[str, int | None]:  # noqa: ANN001
    """A :class:`dpaudit.report.measurable.Rate` as (cell text, footnote number): "n/a" with its reason in a note."""
    if rate is None:
        return "–", None
    if not rate.measurable:
        return "n/a", notes.ref(f"n/a: {rate.reason}" if rate.reason else None)
    return rate.text(spec), None


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
    start: str
    start_path: str | None
    exposure: str
    exposure_controls: str | None
    reconstructed: str
    reconstructed_all: str | None
    bound: str
    bound_note: str | None
    auc: str
    auc_attack: str | None
    tpr: str
    bound_ref: int | None = None
    tpr_ref: int | None = None


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


def _bound(head: Headline, audits: Sequence[MembershipAudit]) -> tuple[str, str | None, str | None]:
    """(cell, short note under it, long reason for a footnote)."""
    if not head.bounds:
        return "–", None, "no membership-inference attack was run"
    best = head.best
    if best is None:
        return "none", None, "no per-example audit (single examples, or canaries inserted once)"
    kind = "proof" if best.kind == PROOF else "heuristic"
    text = f"ε ≥ {format_down(best.epsilon)} ({kind})"
    audit = next((a.audit for a in audits if (a.attack, a.task) == (best.attack, best.task)), None)
    reason = zero_bound_reason(best, audit) if audit is not None else None
    if best.above and best.kind == PROOF:
        return text, f"above the claim: the claim is contradicted ({head.label})", None
    return text, f"{best.name}; {head.label}", reason


def _membership(audits: Sequence[MembershipAudit], notes: Footnotes) -> tuple[str, str | None, str, int | None]:
    best = strongest(tuple(audits))
    if best is None:
        return "–", None, "–", None
    auc = best.audit.auc
    t = best.tpr(0.01)
    tpr, ref = rate_cell(None if t is None else tpr_rate(t, best.audit.n_members), notes, ".2f")
    return f"{auc.value:.2f} [{auc.ci.low:.2f}, {auc.ci.high:.2f}]", best.name, tpr, ref


def comparison_rows(
    runs: Sequence[ReportRun],
    heads: Mapping[str, Headline],
    audits: Mapping[str, Sequence[MembershipAudit]],
    notes: Footnotes | None = None,
) -> tuple[ComparisonRow, ...]:
    """One :class:`ComparisonRow` per run (labels unique, as :func:`dpaudit.report.models.label_runs` makes them);
    the reasons repeated across cells go to ``notes`` (the table's footnotes)."""
    notes = Footnotes() if notes is None else notes
    rows = []
    for run in runs:
        head = heads[run.label]
        utility = run.utility
        start = run.start.utility if run.start is not None else None
        if utility is None:
            value, baseline, start_text = "–", None, "–"
        else:
            value, baseline = percents(utility.value, utility.baseline)
            start_text = (
                percents(start.value, utility.value)[0] if start is not None and start.name == utility.name else "–"
            )
        exposure, controls = _exposure(run)
        recon, recon_all = _reconstructed(run)
        bound, note, reason = _bound(head, audits[run.label])
        auc, attack, tpr, tpr_ref = _membership(audits[run.label], notes)
        rows.append(
            ComparisonRow(
                label=run.label,
                directories=run.directories,
                claimed=head.claim.short(),
                claim=head.claim.text(),
                utility=value,
                utility_baseline=baseline,
                utility_name=utility.name if utility else None,
                start=start_text,
                start_path=run.start.path if run.start is not None else None,
                exposure=exposure,
                exposure_controls=controls,
                reconstructed=recon,
                reconstructed_all=recon_all,
                bound=bound,
                bound_note=note,
                auc=auc,
                auc_attack=attack,
                tpr=tpr,
                bound_ref=notes.ref(reason),
                tpr_ref=tpr_ref,
            )
        )
    return tuple(rows)
