"""The report's sections as typed view objects built from :class:`ReportRun` (no dict keys in templates).

Each builder reads the typed results (:class:`ExposureResult`, :class:`ReconstructionResult`, the
:class:`dpaudit.audit.AuditResult` of each membership attack) and returns a frozen dataclass the
template only formats. Plots are made here (inline SVG strings from :mod:`dpaudit.report.plots`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.attacks.results import (
    GROUP_PRIVACY_NOTE,
    ExposureResult,
    ExposureRow,
    ReconstructionResult,
    ReconstructionRow,
)
from dpaudit.claim.record import TELEMETRY_NOTE
from dpaudit.common.figures import format_down, format_up
from dpaudit.files.run_dirs import redact_command, redact_config
from dpaudit.report import plots
from dpaudit.report.comparison import ComparisonRow, comparison_rows
from dpaudit.report.load import REPORT_FILE, ReportRun, Utility
from dpaudit.report.measurable import Rate, percents, tpr_rate, zero_bound_reason
from dpaudit.report.membership import MembershipAudit, distribution_shift_notes, membership_audits, strongest
from dpaudit.verdict.headline import PROOF, Headline, HeadlineBound, headline_of

#: p-value below which the most-repeated canaries count as memorized (one-sided test vs controls).
ALPHA = 0.05


def _result(run: ReportRun, cls: type) -> Any:
    return next((r for r in run.results.attacks if isinstance(r, cls)), None)


def _label(text: str) -> str:
    """A data string made safe for a matplotlib label ('$' would start mathtext)."""
    return text.replace("$", r"\$")


def short_names(runs: Sequence[ReportRun]) -> dict[str, str]:
    """Run label -> the name used in plots and tables: the label itself (already short:
    :func:`dpaudit.report.models.label_runs`)."""
    return {r.label: r.label for r in runs}


# -- utility ---------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class UtilityView:
    """A run's held-out utility as the page prints it: the figure, and its trivial baseline beside it when the train
    run logged one (older runs: the figure alone)."""

    run: str
    name: str
    value: str
    baseline: str | None
    rule: str
    step: int | None
    margin: str | None
    beats_baseline: bool | None
    rows: str | None = None  # "on 512 of 880 held-out rows"
    measured: str | None = None


def utility_view(label: str, utility: Utility | None) -> UtilityView | None:
    """The page's view of a run's utility (None: the run logged no held-out figure); the margin from the exact figures."""
    if utility is None:
        return None
    value, baseline = percents(utility.value, utility.baseline)
    margin = None if utility.baseline is None else f"{(utility.value - utility.baseline) * 100:+.1f} points"
    return UtilityView(
        run=label,
        name=utility.name,
        value=value,
        baseline=baseline,
        rule=utility.rule,
        step=utility.step,
        margin=margin,
        beats_baseline=utility.beats_baseline,
        rows=utility.rows,
        measured=utility.measured,
    )


# -- 1. verdict ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """One run's verdict. ``headline`` is :func:`dpaudit.verdict.headline.headline_of` (valid at 95% over every
    audit of the run, per-example unit only, proof before heuristic); ``exceeds`` only when a PROOF of
    the claim's unit is above the proven epsilon."""

    label: str
    claim: str
    claimed_epsilon: float | None
    private: bool | None
    delta: float | None
    accountant: str | None
    privacy_unit: str | None
    sampling: str | None
    guarantee: str | None
    headline: Headline
    exceeds: bool
    alarms: tuple[str, ...]
    unaccounted: tuple[str, ...]
    top_frequency: int | None
    top_exposure: ExposureRow | None
    control_exposure: ExposureRow | None
    log2_space: float | None
    mia: MembershipAudit | None
    sentence: str
    utility: UtilityView | None = None
    tpr_low: Rate | None = None
    tpr_one: Rate | None = None
    bound_note: str | None = None

    @property
    def lower_bound(self) -> float | None:
        return None if self.headline.best is None else self.headline.best.epsilon


#: Stored per-audit statements the headline recomputes (corrected over audits) and states itself.
_RESTATED = ("EMPIRICAL EPSILON LOWER BOUND", "The f-DP one-run bound", "heuristic bound above the claim")


def _restated(warning: str) -> bool:
    return any(key in warning for key in _RESTATED)


def _unaccounted(run: ReportRun) -> tuple[str, ...]:
    """Releases of private data the epsilon does not cover (``--scale-from private`` always among them)."""
    facts = run.privacy
    if facts is None:
        return ()
    out = list(facts.unaccounted_releases)
    if facts.scale_from_private and not any("clip norm" in r for r in out):
        out.append(
            "per-layer clip norms were computed from the first-iteration gradient on private train.jsonl "
            "(--scale-from private): an extra release of private data NOT covered by the epsilon."
        )
    return tuple(out)


def _sentence(
    head: Headline,
    private: bool | None,
    top: ExposureRow | None,
    controls: ExposureRow | None,
    mia: MembershipAudit | None,
    log2_space: float | None,
    utility: UtilityView | None = None,
) -> str:
    if head.contradicted:
        return (
            "A proof (the one-run bound on coin-flip canaries, 95% corrected for every audit, valid for any mechanism) "
            "shows more leakage than the claimed epsilon allows, so the claim is wrong: the trainer or the accountant "
            "has a bug, or the model audited is not the one the claim is about."
        )
    if head.mechanism_refuted:
        best = head.best.epsilon if head.best is not None else 0.0
        return (
            f"The trained model is not the mechanism privacy.json states: the coin-flip canaries refute its trade-off "
            f"curve ({head.label}). For any mechanism the bound is epsilon ≥ {format_down(best)}, within "
            f"the claimed {format_up(head.claim.epsilon)}, so the epsilon may still hold, but what ran is not what was "
            "accounted: the trainer's clipping, noise, sampling or accounting differs from its record."
        )
    parts = []
    memorized = top is not None and top.vs_controls is not None and top.vs_controls.p_value < ALPHA
    if (
        memorized and top is not None and private and top.frequency > 1
    ):  # a DP model: a group of f rows, not one example
        ceiling = f" of at most {log2_space:.3g}" if log2_space is not None else ""
        against = f", against {controls.mean:.1f} for never-seen controls" if controls else ""
        parts.append(
            f"Its canaries inserted {top.frequency} times, each a group of {top.frequency} rows that the per-example "
            f"claim covers only through group privacy, sit above the controls: mean exposure {top.mean:.1f} "
            f"bits{ceiling}{against}."
        )
    elif memorized and top is not None:
        ceiling = f" of at most {log2_space:.3g}" if log2_space is not None else ""
        parts.append(
            f"The model memorized canaries inserted {top.frequency} times: their secrets score a mean exposure of "
            f"{top.mean:.1f} bits{ceiling}, against {controls.mean:.1f} for never-seen controls"
            if controls
            else f"The model memorized canaries inserted {top.frequency} times (mean exposure {top.mean:.1f} bits{ceiling})"
        )
        parts[-1] += (
            " — DP covers a canary repeated f times only as a group of f rows."
            if private
            else " — and nothing bounds this: the model has no privacy guarantee."
        )
    elif top is not None:
        parts.append(
            f"Canaries inserted up to {top.frequency} times are not distinguishable from never-seen controls "
            "(no measurable memorization)."
        )
    if mia is not None:
        parts.append(f"The strongest membership attack ({mia.name}) has AUC {auc_strength(mia.audit.auc)}.")
    claim = head.claim
    if private is False and head.best is not None and head.best.kind == PROOF and head.best.epsilon > 0:
        parts.append(
            f"The one-run audit proves that this model leaks: no epsilon below "
            f"{format_down(head.best.epsilon)} describes it ({head.label}; a proof for this training run)."
        )
    if private and not claim.proven:
        parts.append(
            f"This run proves no epsilon ({claim.text()}): there is no claim for an audit to confirm or contradict."
        )
    elif private and head.best is not None and head.best.above:
        parts.append(
            f"A heuristic lower bound is above the claimed epsilon {format_up(claim.epsilon)}: investigate "
            "(heuristic bounds treat the examples of one model as independent trials, so this is not a proof)."
        )
    elif private and head.powerless:
        parts.append(
            f"Nothing found contradicts the claimed epsilon {format_up(claim.epsilon)}, but {head.ceiling_sentence()}."
        )
    elif private and not memorized:
        parts.append(
            f"Nothing found contradicts the claimed epsilon {format_up(claim.epsilon)}; a lower bound is not a "
            "proof of privacy."
        )
    if utility is not None and utility.beats_baseline is False:
        parts.append(
            f"Its {utility.name} ({utility.value}) is no better than the trivial baseline ({utility.baseline}: "
            f"{utility.rule}): the model learned nothing usable, so its privacy says little."
        )
    hint = undertrained_hint(private, top, mia, utility)
    if hint:
        parts.append(hint)
    return " ".join(parts) or "No attack result to summarize."


def auc_strength(auc: Any) -> str:
    """ "0.84 [0.62, 0.99]: clearly better than guessing": "clearly" only when the interval's lower end is at least
    :data:`dpaudit.report.answers.CLEAR_AUC` (an interval that touches 0.52 is not clear), "no better" when it holds
    0.5."""
    from dpaudit.report.answers import CLEAR_AUC

    interval = f"{auc.value:.2f} [{auc.ci.low:.2f}, {auc.ci.high:.2f}]"
    if auc.ci.low <= 0.5 <= auc.ci.high:
        return f"{interval}: no better than guessing"
    if auc.ci.high < 0.5:
        return f"{interval}: below guessing (its scores are reversed)"
    if auc.ci.low < CLEAR_AUC:
        return f"{interval}: barely better than guessing (its interval reaches down to {auc.ci.low:.2f})"
    return f"{interval}: clearly better than guessing"


def undertrained_hint(
    private: bool | None, top: ExposureRow | None, mia: MembershipAudit | None, utility: UtilityView | None
) -> str | None:
    """When a NON-private model shows nothing (canaries with the controls, no attack clearly above guessing), the
    likelier reason is too little training, not privacy: say so, with its held-out figure."""
    if private is not False or (top is None and mia is None):
        return None
    if top is not None and top.vs_controls is not None and top.vs_controls.p_value < ALPHA:
        return None
    if mia is not None and mia.audit.auc.ci.low > 0.5:
        return None
    figure = ""
    if utility is not None:
        beside = f", trivial baseline {utility.baseline}" if utility.baseline is not None else ""
        figure = f" (its {utility.name} is {utility.value}{beside})"
    return (
        f"A non-private model that shows no memorization may be undertrained{figure}: train longer, or on a smaller "
        "corpus with canaries repeated more often (the README's tour and dpaudit demo use sizes at which it leaks)."
    )


def run_headline(run: ReportRun) -> Headline:
    """The run's headline; ``privacy.json``'s sampling (when read) marks a shuffle run unproven even in old results."""
    return headline_of(run.results, sampling=run.privacy.sampling if run.privacy else None)


def verdict(run: ReportRun, audits: Sequence[MembershipAudit], head: Headline | None = None) -> Verdict:
    c = run.results.claimed
    exposure: ExposureResult | None = _result(run, ExposureResult)
    rows = exposure.rows if exposure else ()
    controls = next((r for r in rows if r.frequency == 0), None)
    top = max((r for r in rows if r.frequency > 0), key=lambda r: r.frequency, default=None)
    head = run_headline(run) if head is None else head
    alarms: list[str] = []
    if head.contradicted:
        alarms.extend(
            f"{b.text()} > claimed {format_up(b.compared_with)}"
            for b in head.bounds
            if b.above and b.eligible and b.kind == "proof"
        )
    alarms.extend(head.investigate)
    mia = strongest(tuple(audits))
    # the exposure's own ceiling: with --reveal K the rank is over the masked positions only (|R| of the rest)
    log2_space = exposure.parameters.log2_space_size if exposure else None
    utility = utility_view(run.label, run.utility)
    best_audit = (
        None
        if head.best is None
        else next((a.audit for a in audits if (a.attack, a.task) == (head.best.attack, head.best.task)), None)
    )
    rates = {}
    for fpr in (0.001, 0.01):
        t = mia.tpr(fpr) if mia is not None else None
        rates[fpr] = None if t is None or mia is None else tpr_rate(t, mia.audit.n_members)
    return Verdict(
        tpr_low=rates[0.001],
        tpr_one=rates[0.01],
        bound_note=zero_bound_reason(head.best, best_audit) if best_audit is not None else None,
        label=run.label,
        claim=head.claim.text(),
        claimed_epsilon=head.claim.epsilon,
        private=c.private,
        delta=c.delta,
        accountant=c.accountant,
        privacy_unit=run.privacy.privacy_unit if run.privacy else None,
        sampling=run.privacy.sampling if run.privacy else None,
        guarantee=c.guarantee,
        headline=head,
        exceeds=head.contradicted,
        alarms=tuple(dict.fromkeys(alarms)),
        unaccounted=_unaccounted(run),
        top_frequency=top.frequency if top else None,
        top_exposure=top,
        control_exposure=controls,
        log2_space=log2_space,
        mia=mia,
        sentence=_sentence(head, c.private, top, controls, mia, log2_space, utility),
        utility=utility,
    )


# -- 2. memorization -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class FrequencyRow:
    run: str
    frequency: int
    n: int
    exposure: ExposureRow | None
    exact: str
    exact_ci: tuple[float, float] | None
    edit: float | None
    edit_ci: tuple[float, float] | None
    p_value: float | None


@dataclass(frozen=True, kw_only=True)
class Memorization:
    present: bool
    exposure_svg: str | None
    edit_svg: str | None
    rows: tuple[FrequencyRow, ...]
    log2_space: float | None
    group_note: str
    ceilings: tuple[str, ...] = ()  # one per distinct |R| (runs with different --reveal rank over different spaces)

    @property
    def chance_bits(self) -> float:
        """The mean exposure of a secret the model never saw (:func:`chance_exposure` of this page's |R|)."""
        return chance_exposure(self.log2_space)


def chance_exposure(log2_space: float | None) -> float:
    """The mean exposure, in bits, of a secret at a uniformly random rank among |R| = 2^log2_space candidates: chance.

    Exposure is log2|R| - log2 rank (Carlini et al. 2019); over rank r uniform on 1..|R| its mean is
    log2|R| - log2(|R|!)/|R|, which Stirling's formula puts at log2(e) - log2(2 pi |R|) / (2 |R|): 1.44 bits for
    |R| = 10^4, tending to log2(e) = 1.4427 (``None``: that limit). Not 0 bits: a random rank is rarely the last one.
    """
    if log2_space is None or not math.isfinite(log2_space) or log2_space > 60:
        return math.log2(math.e)
    size = round(2.0**log2_space)
    if size < 1:
        return 0.0
    return math.log2(size) - math.lgamma(size + 1) / math.log(2) / size


def _nan(x: float | None) -> float:
    return float("nan") if x is None else float(x)


def memorization(runs: Sequence[ReportRun]) -> Memorization:
    short = short_names(runs)
    exp_series, exp_bands, edit_series, edit_bands, rows = [], [], [], [], []
    ceilings: dict[tuple[float, int], list[str]] = {}  # (log2|R|, reveal) -> the runs ranked over that space
    for run in runs:
        exposure: ExposureResult | None = _result(run, ExposureResult)
        recon: ReconstructionResult | None = _result(run, ReconstructionResult)
        name = _label(short[run.label])
        by_exposure: dict[int, ExposureRow] = {}
        by_recon: dict[int, ReconstructionRow] = {}
        if exposure:
            if exposure.parameters.log2_space_size is not None:
                key = (round(exposure.parameters.log2_space_size, 6), exposure.parameters.reveal)
                ceilings.setdefault(key, []).append(name)
            pos = [r for r in exposure.rows if r.frequency > 0]
            exp_series.append(
                plots.Series(
                    label=name,
                    x=[r.frequency for r in pos],
                    y=[r.mean for r in pos],
                    low=[_nan(r.mean_ci.low if r.mean_ci else None) for r in pos],
                    high=[_nan(r.mean_ci.high if r.mean_ci else None) for r in pos],
                )
            )
            for r in exposure.rows:
                by_exposure[r.frequency] = r
                if r.frequency == 0:
                    lo, hi = (r.mean_ci.low, r.mean_ci.high) if r.mean_ci else (r.mean, r.mean)
                    exp_bands.append(
                        plots.Band(
                            label=f"controls: {name}" if len(runs) > 1 else "controls (never inserted)",
                            center=r.mean,
                            low=lo,
                            high=hi,
                        )
                    )
        if recon:
            recon_pos = [q for q in recon.rows if q.frequency > 0]
            edit_series.append(
                plots.Series(
                    label=name,
                    x=[q.frequency for q in recon_pos],
                    y=[q.normalized_edit_distance_mean for q in recon_pos],
                    low=[
                        _nan(q.normalized_edit_distance_ci.low if q.normalized_edit_distance_ci else None)
                        for q in recon_pos
                    ],
                    high=[
                        _nan(q.normalized_edit_distance_ci.high if q.normalized_edit_distance_ci else None)
                        for q in recon_pos
                    ],
                )
            )
            for q in recon.rows:
                by_recon[q.frequency] = q
                if q.frequency == 0:
                    ci = q.normalized_edit_distance_ci
                    edit_bands.append(
                        plots.Band(
                            label=f"controls: {name}" if len(runs) > 1 else "controls (never inserted)",
                            center=q.normalized_edit_distance_mean,
                            low=ci.low if ci else q.normalized_edit_distance_mean,
                            high=ci.high if ci else q.normalized_edit_distance_mean,
                        )
                    )
        for f in sorted(by_exposure.keys() | by_recon.keys()):
            e, rc = by_exposure.get(f), by_recon.get(f)
            test = (e.vs_controls if e else None) or (rc.vs_controls if rc else None)
            n = e.n if e is not None else rc.n if rc is not None else 0
            rows.append(
                FrequencyRow(
                    run=short[run.label],
                    frequency=f,
                    n=n,
                    exposure=e,
                    exact=f"{rc.exact_matches}/{rc.n}" if rc else "–",
                    exact_ci=(rc.exact_match_ci.low, rc.exact_match_ci.high) if rc and rc.exact_match_ci else None,
                    edit=rc.normalized_edit_distance_mean if rc else None,
                    edit_ci=(rc.normalized_edit_distance_ci.low, rc.normalized_edit_distance_ci.high)
                    if rc and rc.normalized_edit_distance_ci
                    else None,
                    p_value=test.p_value if test else None,
                )
            )
    lines = [
        (c, "" if len(ceilings) == 1 and not reveal else f"reveal {reveal}: {', '.join(names)}")
        for (c, reveal), names in sorted(ceilings.items())
    ]
    ceiling = max(c for c, _ in ceilings) if ceilings else None
    exp_svg = (
        plots.by_frequency(
            "exposure by repetition count", exp_series, ylabel="exposure (bits)", bands=exp_bands, ceilings=lines
        )
        if exp_series
        else None
    )
    edit_svg = (
        plots.by_frequency(
            "normalized edit distance by repetition count",
            edit_series,
            ylabel="norm. edit distance (top-1 fill)",
            bands=edit_bands,
            ylim=(-0.02, 1.02),
        )
        if edit_series
        else None
    )
    note = runs[0].results.group_privacy if runs else GROUP_PRIVACY_NOTE
    return Memorization(
        present=bool(rows),
        exposure_svg=exp_svg,
        edit_svg=edit_svg,
        rows=tuple(rows),
        log2_space=ceiling if len(ceilings) <= 1 else None,
        group_note=note,
        ceilings=tuple(f"{c:.3g} bits ({label})" if label else f"{c:.3g} bits" for c, label in lines),
    )


# -- 3. membership inference -----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class MiaRow:
    """One audit's row; ``bound`` is its bound as the headline recomputed it (corrected for every audit)."""

    run: str
    audit: MembershipAudit
    tpr_low: Rate | None
    tpr_one: Rate | None
    bound: HeadlineBound | None
    claim: str
    bound_note: str | None = None
    tpr_low_cell: tuple[str, int | None] = ("–", None)
    tpr_one_cell: tuple[str, int | None] = ("–", None)
    bound_ref: int | None = None


@dataclass(frozen=True, kw_only=True)
class MiaRunPlot:
    run: str
    svg: str


@dataclass(frozen=True, kw_only=True)
class Mia:
    present: bool
    plots: tuple[MiaRunPlot, ...]
    rows: tuple[MiaRow, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...] = ()


def mia(
    runs: Sequence[ReportRun],
    audits: Mapping[str, Sequence[MembershipAudit]],
    heads: Mapping[str, Headline] | None = None,
) -> Mia:
    from dpaudit.report.comparison import Footnotes, rate_cell

    figures: list[MiaRunPlot] = []
    rows: list[MiaRow] = []
    warns: list[tuple[str, str]] = []
    shift: list[str] = []
    notes = Footnotes()
    heads = heads if heads is not None else {run.label: run_headline(run) for run in runs}
    short = short_names(runs)
    for i, run in enumerate(runs):
        found = audits[run.label]
        if not found:
            continue
        drawn = [a for a in found if not _group_task(a.task)] or list(found)
        curves = [(_label(a.name), a.audit.roc.fpr, a.audit.roc.tpr, a.audit.n_nonmembers) for a in drawn]
        svg = plots.roc(f"ROC {i + 1}", curves, baselines=[a.baseline for a in drawn])
        figures.append(MiaRunPlot(run=run.label, svg=svg))
        head = heads[run.label]
        by_task = {(b.attack, b.task): b for b in head.bounds}
        for a in found:
            low, one = a.tpr(0.001), a.tpr(0.01)
            bound = by_task.get((a.attack, a.task))
            low_rate = None if low is None else tpr_rate(low, a.audit.n_members)
            one_rate = None if one is None else tpr_rate(one, a.audit.n_members)
            reason = zero_bound_reason(bound, a.audit) if bound is not None else None
            rows.append(
                MiaRow(
                    run=short[run.label],
                    audit=a,
                    claim=head.claim.short(),
                    bound=bound,
                    tpr_low=low_rate,
                    tpr_one=one_rate,
                    bound_note=reason,
                    tpr_low_cell=rate_cell(low_rate, notes),
                    tpr_one_cell=rate_cell(one_rate, notes),
                    bound_ref=notes.ref(reason),
                )
            )
            source = f"{short[run.label]}: {a.name}" if len(runs) > 1 else a.name
            warns.extend((source, w) for w in a.audit.warnings if not _restated(w) and not _tpr_warning(w))
        where = f"{short[run.label]}, " if len(runs) > 1 else ""
        shift.extend(where + note for note in distribution_shift_notes(run.results))  # one per task, shown first
    return Mia(
        present=bool(rows),
        plots=tuple(figures),
        rows=tuple(rows),
        warnings=tuple(dict.fromkeys(shift)) + grouped_warnings(warns),
        notes=notes.texts,
    )


def _group_task(task: str) -> bool:
    """A task of canaries inserted more than once (``canaries-f10``): a group audit, left out of the ROC plot (its
    row stays in the table)."""
    match = re.fullmatch(r"canaries-f(\d+)", task)
    return match is not None and int(match.group(1)) > 1


def _tpr_warning(warning: str) -> bool:
    """A stored "TPR at FPR x needs >= n non-members" warning: the table's n/a cell says it instead."""
    return warning.startswith("TPR at FPR ") and "non-members" in warning


def grouped_warnings(pairs: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """(source, warning) pairs as one line per distinct warning, naming every source it came from (the same
    group-bound note of 14 audits is one line, not 14)."""
    by_text: dict[str, list[str]] = {}
    for source, text in pairs:
        sources = by_text.setdefault(text, [])
        if source not in sources:
            sources.append(source)
    return tuple(f"{', '.join(sources)}: {text}" for text, sources in by_text.items())


# -- 4. training -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TrainingFigure:
    """The telemetry of one family of runs (the same data and start: :func:`dpaudit.report.answers.families`), so that
    runs of 63 and 1,000 steps never share a step axis."""

    runs: tuple[str, ...]
    svg: str


@dataclass(frozen=True, kw_only=True)
class Training:
    """The training section: a telemetry plot per family of runs (with a held-out panel, each run's trivial baseline
    dotted, when a run logged held-out figures) and the utility table (one row per run with a held-out figure)."""

    present: bool
    figures: tuple[TrainingFigure, ...]
    missing: tuple[str, ...]
    note: str
    utility: tuple[UtilityView, ...] = ()
    heldout_panel: bool = False

    @property
    def svg(self) -> str | None:
        """The first figure (a page of one run has one)."""
        return self.figures[0].svg if self.figures else None


def training(runs: Sequence[ReportRun]) -> Training:
    from dpaudit.report.answers import families

    short = short_names(runs)
    utility = tuple(v for v in (utility_view(short[r.label], r.utility) for r in runs) if v is not None)
    with_metrics = [r for r in runs if r.metrics]
    missing = tuple(r.label for r in runs if not r.metrics)
    notes = {r.privacy.telemetry for r in runs if r.privacy and r.privacy.telemetry}
    note = next(iter(notes)) if len(notes) == 1 else TELEMETRY_NOTE
    if not with_metrics:
        return Training(present=False, figures=(), missing=missing, note=note, utility=utility)
    family = families(runs)
    groups: dict[int, list[ReportRun]] = {}
    for r in with_metrics:
        groups.setdefault(family[r.label], []).append(r)
    heldout = any(m.heldout is not None for r in with_metrics for m in r.metrics or ())
    figures = []
    for number, members in groups.items():
        name = "training telemetry" if len(groups) == 1 else f"training telemetry {number}"
        figures.append(
            TrainingFigure(
                runs=tuple(short[r.label] for r in members),
                svg=plots.training(name, _training_panels(members, short, heldout)),
            )
        )
    return Training(
        present=True,
        figures=tuple(figures),
        missing=missing,
        note=note,
        utility=utility,
        heldout_panel=heldout,
    )


def _training_panels(
    runs: Sequence[ReportRun], short: Mapping[str, str], heldout: bool
) -> list[tuple[str, list[plots.Series], bool]]:
    """Loss, accuracy, (held-out accuracy,) gradient SNR and epsilon spent vs step, one series per run."""
    panels = []
    for title, attr, log_y in (
        ("training loss", "loss", False),
        ("accuracy", "accuracy", False),
        ("gradient SNR", "grad_snr", True),
        ("epsilon spent", "epsilon", False),
    ):
        series = [
            plots.Series(
                label=_label(short[r.label]),
                x=[m.step for m in r.metrics or ()],
                y=[_nan(getattr(m, attr)) for m in r.metrics or ()],
            )
            for r in runs
        ]
        panels.append((title, series, log_y))
    if heldout:  # the utility plot: held-out figure vs step, the trivial baseline as a dotted line in the run's colour
        series = []
        for r in runs:
            rows = [m for m in r.metrics or () if m.heldout is not None]
            baseline = next((m.heldout_baseline for m in reversed(rows) if m.heldout_baseline is not None), None)
            series.append(
                plots.Series(
                    label=_label(short[r.label]),
                    x=[m.step for m in rows],
                    y=[_nan(m.heldout) for m in rows],
                    baseline=baseline,
                )
            )
        panels.insert(2, ("held-out accuracy", series, False))
    return panels


# -- 5. per-canary table ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CanaryRow:
    id: str
    frequency: int
    prefix: str
    secret: str
    fill: str
    edit: str
    exposure: str
    rank: str
    exact: bool


#: Rows of each per-canary table the page shows (most-repeated first, then by exposure; a comparison page: the first
#: :data:`COMPARISON_CANARY_ROWS` of each model): the demo's 2,000 coin-flip canaries were most of a page's bytes.
#: Every row stays in the attack directory's ``scores/``, which the table links.
CANARY_ROWS = 10
COMPARISON_CANARY_ROWS = 5


@dataclass(frozen=True, kw_only=True)
class CanaryTable:
    """One model's per-canary table: its first :data:`CANARY_ROWS` rows, how many there are, and the files that hold
    them all (``(path as shown, href)``: ``scores/canaries.csv``, or ``scores/canaries.jsonl`` in an older
    directory)."""

    run: str
    rows: tuple[CanaryRow, ...]
    has_prefix: bool
    total: int = 0
    files: tuple[tuple[str, str], ...] = ()


def _interval(low: float | None, high: float | None, spec: str) -> str:
    if low is None and high is None:
        return "–"
    a, b = format(low, spec), format(high, spec) if high is not None else format(low, spec)
    return a if a == b else f"[{a}, {b}]"


#: Characters of a secret, fill or prefix a table cell shows (a new-token canary's secret is 24 long words); the
#: whole text is in the scores file the table links.
CELL_CHARS = 48


def _clip(text: str, limit: int = CELL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _score_files(run: ReportRun, page_dir: Path | None, own_page: bool) -> tuple[tuple[str, str], ...]:
    """(path as shown, href) of the per-canary scores of each attack directory of ``run`` that holds canaries.

    The page of one run lives in its attack directory (``index.html``; ``dpaudit report DIR`` renders the very same
    bytes), so its link is relative to that directory; a comparison page's is relative to the folder it is written
    to (``page_dir``), else the path as given."""
    from urllib.parse import quote

    from dpaudit.attacks.run import CANARY_CSV, CANARY_SCORES

    out = []
    for part in run.parts or (run,):
        if not part.results.canaries:
            continue
        outputs = part.manifest.get("outputs") or {}
        name = CANARY_CSV if CANARY_CSV in outputs else CANARY_SCORES
        shown = (Path(part.label) / name).as_posix()
        if own_page:
            href = name
        elif page_dir is not None:
            href = Path(os.path.relpath(Path(part.label).absolute() / name, Path(page_dir).absolute())).as_posix()
        else:
            href = shown
        out.append((shown, quote(href)))
    return tuple(out)


def canary_tables(
    runs: Sequence[ReportRun], page_dir: Path | None = None, *, limit: int | None = None
) -> tuple[CanaryTable, ...]:
    """Each run's first ``limit`` canaries (most-repeated first, then by exposure; default :data:`CANARY_ROWS`, or
    :data:`COMPARISON_CANARY_ROWS` on a page of several runs) and the files holding every one."""
    if limit is None:
        limit = CANARY_ROWS if len(runs) == 1 else COMPARISON_CANARY_ROWS
    tables = []
    for run in runs:
        ordered = sorted(
            run.results.canaries,
            key=lambda c: (-c.frequency, -(c.exposure_low if c.exposure_low is not None else -math.inf), c.id),
        )
        rows = []
        for c in ordered[:limit]:
            text = run.canary_text.get(c.id)
            edit = (
                "–"
                if c.edit_distance is None
                else (
                    f"{c.edit_distance} ({c.normalized_edit_distance:.2f})"
                    if c.normalized_edit_distance is not None
                    else str(c.edit_distance)
                )
            )
            rows.append(
                CanaryRow(
                    id=c.id,
                    frequency=c.frequency,
                    prefix=_clip(text.prefix) if text else "",
                    secret=_clip(c.secret),
                    fill="–" if c.fill is None else _clip(c.fill),
                    edit=edit,
                    exposure=_interval(c.exposure_low, c.exposure_high, ".2f"),
                    rank=_interval(c.rank_low, c.rank_high, "d"),
                    exact=bool(c.exact),
                )
            )
        tables.append(
            CanaryTable(
                run=run.label,
                rows=tuple(rows),
                has_prefix=bool(run.canary_text),
                total=len(ordered),
                files=_score_files(run, page_dir, own_page=len(runs) == 1),
            )
        )
    return tuple(tables)


# -- 6. provenance ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Stage:
    name: str
    schema: str
    version: str
    command: str
    seed: str
    config: str


@dataclass(frozen=True, kw_only=True)
class Provenance:
    run: str
    directory: str
    stages: tuple[Stage, ...]
    inputs: tuple[tuple[str, str], ...]
    outputs: tuple[tuple[str, str], ...]
    upstream: tuple[Any, ...]
    tokenizer: str
    model: str
    warnings: tuple[str, ...]


def stage_view(name: str, manifest: Mapping[str, Any]) -> Stage:
    """A stage's manifest as the provenance shows it: command line and config with secret values redacted."""
    command = manifest.get("command")
    if isinstance(command, list):
        shown = shlex.join(redact_command(command))
    else:  # a string (hand-written or older manifests): redact its words the same way
        text = str(command or "–")
        try:
            shown = shlex.join(redact_command(shlex.split(text)))
        except ValueError:  # unbalanced quotes: redact word by word
            shown = " ".join(redact_command(text.split()))
    return Stage(
        name=name,
        schema=str(manifest.get("schema", "")),
        version=str(manifest.get("dpaudit_version", "?")),
        command=shown,
        seed=str(manifest.get("seed")),
        config=json.dumps(redact_config(manifest.get("config", {})), indent=2, sort_keys=True, default=str),
    )


def provenance(run: ReportRun, label: str | None = None) -> Provenance:
    """The provenance of one attack directory (``run`` as read), shown under its model's ``label``."""
    stages = [stage_view("attack", run.manifest)]
    for role in ("train", "inject"):
        if role in run.upstream_manifests:
            stages.append(stage_view(role, run.upstream_manifests[role]))
    train = run.upstream_manifests.get("train", {})
    if "tokenizer_trained_on" in train:  # jax-bert: the split (or start) it came from
        tokenizer = f"trained on {train['tokenizer_trained_on']} only"
    elif isinstance(train.get("tokenizer"), str) and train["tokenizer"]:  # the torch trainers: their own sentence
        tokenizer = train["tokenizer"]
    else:
        tokenizer = (
            "unknown: the train run's manifest is not available (for a bare Hugging Face model: whatever its "
            "authors used)"
        )
    m = run.results.model
    return Provenance(
        run=run.label if label is None else label,
        directory=run.label,
        stages=tuple(stages),
        inputs=tuple(sorted((str(k), str(v)) for k, v in (run.manifest.get("inputs") or {}).items())),
        outputs=tuple(
            sorted((str(k), str(v)) for k, v in (run.manifest.get("outputs") or {}).items() if k != REPORT_FILE)
        ),
        upstream=run.upstream,
        tokenizer=tokenizer,
        model=f"{m.path} ({m.architecture}, {m.kind})",
        warnings=tuple(
            w
            for w in tuple(run.results.warnings) + tuple(w for a in run.results.attacks for w in a.warnings)
            if not _restated(w)
        ),
    )


# -- the page --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Page:
    title: str
    comparison: bool
    version: str
    verdicts: tuple[Verdict, ...]
    memorization: Memorization
    mia: Mia
    training: Training
    canaries: tuple[CanaryTable, ...]
    provenance: tuple[Provenance, ...]
    whitebox: tuple[
        Any, ...
    ] = ()  # white-box audits on the page (dpaudit.report.whitebox.WhiteboxView): their verdicts lead
    models: tuple[ComparisonRow, ...] = ()  # the comparison table: a row per model (comparison pages)
    models_notes: tuple[str, ...] = ()  # its footnotes
    answers: Any = None  # the four answers and a badge per model (comparison pages: dpaudit.report.answers.Answers)


def build_page(runs: Sequence[ReportRun], *, whitebox: Sequence[Any] = (), page_dir: Path | None = None) -> Page:
    """The page of attack ``runs``; ``whitebox`` audit views (already built) lead its verdict and get a section.

    ``page_dir``: the folder the page is written to (its links to each attack directory's files are relative to it);
    None: a page of one run lives in its attack directory, a comparison page links the paths as given."""
    from dpaudit import __version__
    from dpaudit.report.answers import answers
    from dpaudit.report.comparison import Footnotes

    audits = {run.label: membership_audits(run.results) for run in runs}
    heads = {run.label: run_headline(run) for run in runs}
    labels = ", ".join([*(w.label for w in whitebox), *(r.label for r in runs)])
    comparison = len(runs) > 1
    notes = Footnotes()
    models = comparison_rows(runs, heads, audits, notes) if comparison else ()
    return Page(
        title=f"dpaudit report: {labels}",
        comparison=comparison,
        version=__version__,
        verdicts=tuple(verdict(r, audits[r.label], heads[r.label]) for r in runs),
        memorization=memorization(runs),
        mia=mia(runs, audits, heads),
        training=training(runs),
        canaries=canary_tables(runs, page_dir),
        provenance=tuple(provenance(p, r.label) for r in runs for p in (r.parts or (r,))),
        whitebox=tuple(whitebox),
        models=models,
        models_notes=notes.texts,
        answers=answers(runs, heads, audits) if comparison else None,
    )
