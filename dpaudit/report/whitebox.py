"""The page of a white-box trainer audit (``dpaudit audit-trainer``), and its section on a comparison page.

Typed view objects built from :class:`~dpaudit.report.whitebox_load.WhiteboxRun`; the templates only
format them. The verdict leads: the claimed epsilon (rounded up) against the verdict's bound (rounded
down), the kind of that bound and what it proves, REFUTED or consistent, and the ratio bound / claim.
The verdict's bound is the larger of two bounds fixed before the audit ran (the one-run test planned
from the claim: the f-DP recursion or the order statistics, both testing the claimed mechanism's own curve, or the
Gaussian-pair fit; and the pooled test of the claimed curve planned from the claim, m and R: the order statistics
or the Clopper-Pearson points; all iterates, each at half the risk), so it holds at the verdict's confidence; every
other bound is shown beside them, at its own confidence, as evidence (the largest of all of them is not a bound at
any stated confidence).

Then every bound (one-run per run and pooled, both views), the canary score distributions of members
and non-members per view, the AUC, the claimed mechanism, the clipping unit and partners, the limits
of the figures and the provenance. Like the attack report, the page is self-contained (inline CSS and
SVG, no script, no network) and a pure function of the audit directory.

References:
  Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis 2023, "Tight Auditing of
  Differentially Private Machine Learning".
  Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run".
  Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run".
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dpaudit.audit.order_stats import MOST_CANARIES
from dpaudit.common.figures import format_down, format_up
from dpaudit.report import plots
from dpaudit.report.sections import Stage, redact_config, stage_view
from dpaudit.report.templating import environment, stylesheet
from dpaudit.report.whitebox_load import SCHEMA, VIEWS, WhiteboxRun, read_whitebox
from dpaudit.whitebox.bounds import Bound

__all__ = [
    "BoundRow",
    "WhiteboxPage",
    "WhiteboxVerdict",
    "WhiteboxView",
    "render_whitebox",
    "whitebox_view",
    "write_page",
]

PAGE_FILE = "index.html"
VIEW_WORDS = {"all_iterates": "all iterates", "last_iterate": "last iterate"}
#: How a method is named on the page, per kind of bound.
METHOD_WORDS = {
    ("one-run", "steinke"): "Steinke et al. 2023 (one run)",
    ("one-run", "fdp_gaussian"): "Gaussian f-DP (Mahloujifar et al. 2024)",
    ("one-run", "claim_family"): "claimed curve: f-DP recursion (Mahloujifar et al. 2024)",
    ("one-run", "order_stats"): "claimed curve: order statistics (Xiang et al. 2025)",
    ("one-run", "order_stats_dp"): "(epsilon, delta): order statistics (Xiang et al. 2025)",
    ("one-run", "gauss_pair"): "Gaussian pair: the projections' fit (Agrawal et al. 2026)",
    ("pooled", "clopper_pearson"): "Clopper-Pearson, every threshold",
    ("pooled", "claim_family"): "claimed curve: Clopper-Pearson points",
    ("pooled", "order_stats"): "claimed curve: order statistics over every run's canaries (Xiang et al. 2025)",
}
PROOF_WORDS = (
    "for this one training run: a test of its coin-flip canaries (the method named above), which assumes nothing "
    "about how the trainer treats them"
)
#: The one-run verdict bound that is not a proof: the Gaussian-pair fit holds only for Gaussian-pair projections.
FIT_WORDS = (
    "for this one training run: a Gaussian-pair fit of its coin-flip canaries' projections, valid when those "
    "projections are independent Gaussian pairs (a full-batch Gaussian mechanism's), not a proof for other forms"
)


def _pct(x: float) -> str:
    return f"{x * 100:.10g}%"


def _down(x: float | None, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format_down(x, digits)


def _ratio(bound: float, claim: float) -> str:
    """bound / claim, rounded down (a lower bound's share of the claim is never overstated)."""
    if claim <= 0 or math.isnan(bound):
        return "–"
    return format_down(bound / claim, 2)


def _method(kind: str, method: str) -> str:
    return METHOD_WORDS.get((kind, method), method)


def _kind_words(kind: str, run: WhiteboxRun, method: str) -> str:
    if kind == "one-run":
        return FIT_WORDS if method == "gauss_pair" else PROOF_WORDS
    runs = f"{run.runs} run{'s' if run.runs != 1 else ''}"
    if method in ("order_stats", "order_stats_dp"):
        return (
            f"over {runs} × {run.canaries} canaries as one game, the test planned from the claim and the run count: "
            "valid whatever the trainer does with the canaries (each canary sits in one run)"
        )
    return (
        f"over {runs} × {run.canaries} canaries, valid when the trainer treats the canaries as independent "
        "trials, as a correct DP-SGD does with Dirac canaries on their own coordinates; a heuristic otherwise"
    )


# -- the verdict -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WhiteboxVerdict:
    """The headline of one audit: the strongest valid white-box bound against the claim.

    ``claimed`` is rounded up and ``bound`` down; ``proof`` says whether the bound is the one-run proof
    (else the pooled bound, valid under its independence assumption, or the one-run Gaussian-pair fit, valid for
    Gaussian-pair projections)."""

    label: str
    trainer: str
    claimed: str
    delta: str
    steps: int
    bound: str
    kind: str
    kind_words: str
    proof: bool
    method: str
    proves: str
    view: str
    refuted: bool
    word: str
    ratio: str
    confidence: str
    bound_confidence: str
    twin: str
    sentence: str


def _verdict(run: WhiteboxRun) -> WhiteboxVerdict:
    claim, primary, kind = run.claim, run.primary, run.primary_kind
    figure = run.any_mechanism if run.mechanism_refuted and run.any_mechanism is not None else primary
    claimed, bound, ratio = (
        format_up(run.claimed_epsilon),
        _down(figure.epsilon),
        _ratio(figure.epsilon, run.claimed_epsilon),
    )
    twins = [(k, b) for k, b in run.verdict_bounds if k != kind]
    twin = ""
    if twins:
        k, b = twins[0]
        twin = (
            f"the one-run {'Gaussian-pair fit' if b.method == 'gauss_pair' else 'proof'} (run 1): epsilon ≥ "
            f"{_down(b.epsilon)}"
            if k == "one-run"
            else f"the pooled {'order statistics' if b.method == 'order_stats' else 'bound'}: epsilon ≥ "
            f"{_down(b.epsilon)}"
        )
    view = VIEW_WORDS.get(run.primary_view, run.primary_view)
    fit = figure.method == "gauss_pair"  # a one-run bound for Gaussian-pair projections only, not a proof
    what = (
        "the pooled order statistics, valid for any trainer"
        if kind != "one-run" and figure.method in ("order_stats", "order_stats_dp")
        else "the pooled bound, valid if the canaries are independent trials"
        if kind != "one-run"
        else "the one-run Gaussian-pair fit"
        if fit
        else "the one-run proof"
    )
    ceiling = run.ceilings.get(kind)
    if run.refuted:
        sentence = (
            f"The claim is REFUTED: epsilon ≥ {bound} ({what}, valid for any mechanism; {view}) is above the "
            f"claimed epsilon {claimed}: the trainer leaks more than its privacy.json says (a bug in clipping, "
            "noise, sampling or accounting)."
        )
        word = "REFUTED"
    elif run.mechanism_refuted:
        sentence = (
            f"MECHANISM REFUTED: the trained model is not the mechanism privacy.json states: its trade-off curve "
            f"is refuted at {_pct(run.confidence)} ({what}; {view}). For any mechanism the bound is epsilon ≥ "
            f"{bound}, within the claimed {claimed}: the (epsilon, delta) figure may still hold, but what ran is not "
            "what was accounted (a bug in clipping, noise, sampling or accounting, or a mechanism of another form)."
        )
        word = "MECHANISM REFUTED"
    else:
        sentence = (
            f"Consistent with the claim: the strongest white-box bound, epsilon ≥ {bound} ({what}; {view}), is "
            f"{ratio} of the claimed epsilon {claimed}. The audit found no violation; a lower bound below the "
            "claim is not a proof of privacy."
        )
        if ceiling is not None and ceiling <= run.claimed_epsilon:
            sentence += (
                f" This audit could not have refuted {claimed}: its ceiling (a perfect attack at these sizes) is "
                f"{_down(ceiling)}; use more canaries (--canaries) or runs (--runs)."
            )
        elif ceiling is not None:
            sentence += f" Its ceiling (a perfect attack at these sizes) is {_down(ceiling)}."
        word = "consistent"
    return WhiteboxVerdict(
        label=run.label,
        trainer=run.trainer,
        claimed=claimed,
        delta=format_up(claim.delta, 2),
        steps=claim.steps,
        bound=bound,
        kind=kind,
        kind_words=_kind_words(kind, run, figure.method),
        proof=kind == "one-run" and not fit,
        method=_method(kind, figure.method),
        proves=figure.proves,
        view=view,
        refuted=run.refuted or run.mechanism_refuted,
        word=word,
        ratio=ratio,
        confidence=_pct(run.confidence),
        bound_confidence=_pct(run.bound_confidence),
        twin=twin,
        sentence=sentence,
    )


# -- every bound -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BoundRow:
    """One bound of the table. ``verdict``: one of the verdict's two bounds; ``primary``: the verdict's."""

    scope: str
    kind: str
    view: str
    method: str
    proves: str
    epsilon: str
    ratio: str
    confidence: str
    evidence: str
    verdict: bool
    primary: bool
    above: bool
    capped: bool


def _ceiling_words(run: WhiteboxRun, kind: str, bound: Bound) -> str:
    """A row's ceiling and the canaries a perfect attack needs, in one sentence; a ceiling at or below the claim says
    that this row's test could not have refuted it (the verdict's words, docs/auditing.md "The white-box verdict")."""
    assert bound.ceiling is not None
    ceiling, claimed = _down(bound.ceiling), format_up(run.claimed_epsilon)
    words = (
        f"this row's test could not have refuted {claimed}: its ceiling (a perfect attack at these sizes) is {ceiling}"
        if bound.ceiling <= run.claimed_epsilon
        else f"ceiling {ceiling} (a perfect attack)"
    )
    canaries = "canaries over all runs" if kind == "pooled" else "canaries"
    if bound.canaries_needed is not None:
        return f"{words}; a perfect attack needs {bound.canaries_needed:,} {canaries} to reject the claim"
    return f"{words}; no perfect attack on up to {MOST_CANARIES:,} {canaries} rejects the claim"


def _row(run: WhiteboxRun, scope: str, kind: str, view: str, bound: Bound, *, verdict: bool) -> BoundRow:
    evidence = "–"
    if bound.guesses is not None and bound.correct is not None:
        evidence = f"{bound.correct} of {bound.guesses} guesses right"
        if bound.selection == "planned":  # whitebox.plan: one pair of guess counts chosen from the claim, no score seen
            evidence += " (guess counts planned from the claim before any score was seen)"
        elif bound.selection and bound.selection.startswith("planned: "):  # the order statistics' released count
            evidence += f" ({bound.selection[len('planned: ') :]}; that count fixed from the claim before the run)"
        elif bound.selection:
            evidence += f" (guess counts: {bound.selection})"
    elif bound.selection and bound.selection.startswith("planned: "):  # no guesses: the Gaussian pair's projection
        evidence = f"{bound.selection[len('planned: ') :]} (the projection fixed from the claim before the run)"
    if bound.scale is not None:
        # a rejected scale rounds DOWN (a smaller one is rejected too) to 4 digits: the search's sub-steps are 0.27%
        # of sigma, so sigma x 1.0027 never reads as the claim's own sigma (docs/auditing.md)
        scale = format_down(bound.scale, 4)
        evidence = ("" if evidence == "–" else evidence + "; ") + f"rejects sigma × {scale}"
    if bound.ceiling is not None:
        evidence = ("" if evidence == "–" else evidence + "; ") + _ceiling_words(run, kind, bound)
    primary = verdict and kind == run.primary_kind
    return BoundRow(
        scope=scope,
        kind=kind,
        view=VIEW_WORDS.get(view, view),
        method=_method(kind, bound.method),
        proves=bound.proves,
        epsilon=_down(bound.epsilon),
        ratio=_ratio(bound.epsilon, run.claimed_epsilon),
        confidence=_pct(bound.confidence),
        evidence=evidence,
        verdict=verdict,
        primary=primary,
        above=bound.epsilon > run.claimed_epsilon,
        capped=bound.capped,
    )


def bound_rows(run: WhiteboxRun) -> tuple[BoundRow, ...]:
    """Every bound: pooled first (both views), then one-run per run (both views); the verdict's two marked."""
    rows = []
    views = [v for v in VIEWS if v in run.pooled] + sorted(v for v in run.pooled if v not in VIEWS)
    pooled_scope = f"pooled: {run.runs} run{'s' if run.runs != 1 else ''} × {run.canaries} canaries"
    for view in views:
        for method, bound in run.pooled[view].items():
            rows.append(
                _row(
                    run,
                    pooled_scope,
                    "pooled",
                    view,
                    bound,
                    verdict=view == "all_iterates" and method == run.pooled_method,
                )
            )
    views = [v for v in VIEWS if v in run.one_run] + sorted(v for v in run.one_run if v not in VIEWS)
    for r in range(run.runs):
        for view in views:
            for method, bound in run.one_run[view][r].items():
                rows.append(
                    _row(
                        run,
                        f"run {r + 1}",
                        "one-run",
                        view,
                        bound,
                        verdict=r == 0 and view == "all_iterates" and method == run.one_run_method,
                    )
                )
    return _label_evidence(run, rows)


def _label_evidence(run: WhiteboxRun, rows: list[BoundRow]) -> tuple[BoundRow, ...]:
    """Every row but the verdict's two labelled as what it is: one of n figures each at its own confidence, with no
    correction for the n shown. At a claim that is exactly tight about n x (1 - its confidence) of them are expected
    above the claim, so an evidence row above the claim is told apart from a refutation (never shown in bold as the
    verdict's would be); only the verdict's pair is corrected (docs/auditing.md, "The white-box verdict")."""
    n = sum(not row.verdict for row in rows)
    expected = n * (1 - run.bound_confidence)
    out = []
    for row in rows:
        if row.verdict:
            out.append(row)
            continue
        evidence = row.evidence
        if row.above:
            note = (
                f"above the claim in this row alone: one of {n} evidence rows, each at {row.confidence} with no "
                f"correction for the {n}; about {expected:.2g} are expected above a claim that is exactly tight, "
                "so this is not a refutation"
            )
            evidence = note if evidence == "–" else f"{evidence}; {note}"
        out.append(
            dataclasses.replace(
                row, confidence=f"{row.confidence} alone (evidence, uncorrected)", evidence=evidence, above=False
            )
        )
    return tuple(out)


# -- scores, mechanism, limits, provenance ---------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AucRow:
    view: str
    auc: str
    members: int
    nonmembers: int


@dataclass(frozen=True, kw_only=True)
class SegmentRow:
    steps: int
    q: str
    sigma: str
    noise_std: str


@dataclass(frozen=True, kw_only=True)
class Mechanism:
    """The claimed mechanism (figures of the claim rounded up) and where the canaries sit."""

    claimed: str
    delta: str
    steps: int
    clip_norm: str
    sensitivity_factor: str
    sensitivity: str
    segments: tuple[SegmentRow, ...]
    unit: str
    unit_words: str
    slots: int
    partners: int
    canaries: int
    runs: int
    #: Which path the canaries took, with how many canaries each (all runs): (path, its words, count).
    canary_paths: tuple[tuple[str, str, int], ...] = ()


#: What each canary path means (``whitebox.json``'s ``settings.canary_path``; absent in files written before it was
#: labelled: the cooperative path).
CANARY_PATHS = {
    "cooperative": "cooperative: the trainer's audit block writes each canary's clipped gradient onto its reserved "
    "coordinate",
    "gradient-path": "the library's real gradient path: canaries are ordinary inputs whose per-example gradient the "
    "library itself computes and clips",
}


def _canary_paths(run: WhiteboxRun) -> tuple[tuple[str, str, int], ...]:
    """(path, words, canaries) per path the canaries took, from ``settings`` (the cooperative path when unlabelled)."""
    path = str(run.settings.get("canary_path") or "cooperative")
    counts = run.settings.get("canary_paths")
    if not isinstance(counts, dict) or not counts:
        counts = {path: run.canaries * run.runs}
    return tuple((str(p), CANARY_PATHS.get(str(p), str(p)), int(n)) for p, n in counts.items())


def _mechanism(run: WhiteboxRun) -> Mechanism:
    c = run.claim
    segments = tuple(
        SegmentRow(
            steps=s.steps,
            q=f"{s.sampling_probability:.4g}",
            sigma=f"{s.noise_multiplier:.4g}",
            noise_std=f"{s.noise_multiplier * c.sensitivity_factor * c.clip_norm:.4g}",
        )
        for s in c.segments
    )
    if run.unit == "micro-batch":
        words = (
            f"micro-batch clipping ({run.slots} micro-batches per step): canary j sits in micro-batch j mod "
            f"{run.slots} with {run.partners} partner rows pointing the other way, so one example can move its "
            f"coordinate by 2C (the claimed sensitivity factor {c.sensitivity_factor:g})"
            + (
                "; canaries sharing a micro-batch share its clipping, which costs power, not validity"
                if run.canaries > run.slots
                else ""
            )
        )
    elif run.unit == "example":
        words = (
            "per-example clipping: each canary is one audit row whose gradient is a Dirac vector on a coordinate "
            "reserved for it, so clipping moves that coordinate by exactly C when the canary is sampled"
        )
    else:
        words = f"clipping unit {run.unit!r}"
    return Mechanism(
        claimed=format_up(c.epsilon),
        delta=format_up(c.delta, 2),
        steps=c.steps,
        clip_norm=f"{c.clip_norm:g}",
        sensitivity_factor=f"{c.sensitivity_factor:g}",
        sensitivity=f"{c.sensitivity_factor * c.clip_norm:g}",
        segments=segments,
        unit=run.unit,
        unit_words=words,
        slots=run.slots,
        partners=run.partners,
        canaries=run.canaries,
        runs=run.runs,
        canary_paths=_canary_paths(run),
    )


def _steinke_ceiling(run: WhiteboxRun) -> float | None:
    """Steinke et al.'s one-run bound of a perfect attack on run 1's canaries (its ceiling at this m): the row's own
    (all iterates), or recomputed from the scores for a file written before the row carried it."""
    first_run = run.one_run.get("all_iterates") or ()
    stored = first_run[0].get("steinke") if first_run else None
    if stored is not None and stored.ceiling is not None:
        return stored.ceiling
    if run.scores is None:
        return None
    import numpy as np

    from dpaudit.audit.one_run import epsilon_lower_bound_one_run

    first = run.scores.member[run.scores.run == 0]
    members = int(first.sum())
    if members == 0 or members == first.size:
        return None
    return float(
        epsilon_lower_bound_one_run(
            np.ones(members), np.zeros(first.size - members), delta=run.claimed_delta, confidence=run.bound_confidence
        ).epsilon
    )


def limits(run: WhiteboxRun) -> tuple[str, ...]:
    """What each figure assumes and what limits it, in words, with this audit's numbers."""
    out = []
    runs = f"{run.runs} run{'s' if run.runs != 1 else ''}"
    out.append(
        f"The pooled bound assumes independent canaries when it is a Clopper-Pearson bound: it treats the {runs} × "
        f"{run.canaries} canaries as independent trials. Across runs that holds; within a run it holds for Dirac canaries on their own "
        "coordinates under per-example Poisson sampling and coordinate-wise noise, which is what a correct "
        "DP-SGD does. A trainer that couples canaries (shared clipping, correlated noise) breaks it; the one-run "
        "proof and the pooled order statistics (each canary sits in one run) do not need it."
    )
    if run.runs > 1:
        chosen = "the order statistics" if run.pooled_method == "order_stats" else "the Clopper-Pearson points"
        out.append(
            f"The verdict's pooled bound is {chosen}: of the two pooled tests of the claimed curve, the one whose "
            f"planned counts, simulated from the claim for {runs} × {run.canaries} canaries before any score was seen, "
            "reject the less private scaled claim; the other is evidence."
        )
    ceiling = _steinke_ceiling(run)
    cap = (
        f" With these {run.canaries} canaries even a perfect attack cannot lift Steinke et al.'s one-run bound above "
        f"{_down(ceiling)} at {_pct(run.bound_confidence)}."
        if ceiling is not None
        else ""
    )
    out.append(
        f"One-run bounds are limited by the number of canaries: a one-run bound counts correct guesses among "
        f"the canaries of one run, so its confidence interval, not the trainer, caps it.{cap} More canaries "
        "(--canaries) raise the one-run ceiling; more runs (--runs) tighten the pooled bound."
    )
    out.append(
        "The claimed-curve bounds (claim_family) test the claimed mechanism's own trade-off curve: whether the claim "
        "is rejected holds for any mechanism; the epsilon printed is a lower bound only for mechanisms of the claimed "
        "form (Poisson-subsampled Gaussian steps with the claimed q and steps)."
    )
    out.append(
        "The order-statistics bound (order_stats, Xiang et al. 2025) releases only the most confident membership "
        "guesses, as many as planned from the claim before the run, and tests their mistakes against the claimed "
        "curve; its ceiling is the same test with no mistake. When it rejects the claimed curve, the figure printed "
        "is its (epsilon, delta) reading on the same guesses, which holds for any mechanism."
    )
    out.append(
        "The Gaussian-pair bound (gauss_pair) fits the canaries' projections as a pair of Gaussians and reads the "
        "pair's epsilon, paying for the fit's estimation error (confidence intervals on the means and variances); it "
        "holds for mechanisms whose canary projections are Gaussian pairs, not for mechanisms of other forms, and "
        "being parametric it has no ceiling below its search's cap."
    )
    out.append(
        f"Only the verdict's two bounds (the one-run test of run 1 and the pooled test, both planned from the claim, "
        f"all iterates) were fixed before the audit; they hold together at {_pct(run.confidence)}. Every other row "
        f"holds at its own confidence ({_pct(run.bound_confidence)}) and is evidence: the largest of all rows is "
        "not a bound at any stated confidence."
    )
    out.append(
        "The all-iterates view sees every noisy update of the canary coordinates (the threat model DP-SGD's "
        "accounting assumes); the last-iterate view sees only the final parameters, closer to a released model, "
        "and gives lower bounds."
    )
    out.append(
        f"The audit tests the trainer's implementation at the audit's configuration ({run.claim.steps} steps, the "
        "sampling rate and noise above, a tiny built-in dataset); another configuration is covered only as far "
        "as it runs the same code."
    )
    out.append("A lower bound below the claim is not a proof of privacy: a weaker test gives a lower number.")
    if any(
        b.capped
        for b in [
            *(b for v in run.pooled.values() for b in v.values()),
            *(b for v in run.one_run.values() for r in v for b in r.values()),
        ]
    ):
        out.append(
            "Bounds marked capped rejected even the least private member of the scale grid searched: the true "
            "bound may be higher."
        )
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class WhiteboxProvenance:
    stage: Stage
    trainer_config: str
    files: tuple[tuple[str, str], ...]


def _provenance(run: WhiteboxRun, command: Sequence[str] | None = None) -> WhiteboxProvenance:
    from dpaudit import __version__

    manifest = run.manifest
    if manifest is None:  # rendered in the staged directory: the manifest, written next, records this command line
        manifest = {
            "schema": SCHEMA,
            "dpaudit_version": __version__,
            "command": list(sys.argv if command is None else command),
            "config": {"trainer": run.trainer, **run.settings},
            "seed": run.settings.get("seed"),
        }
    return WhiteboxProvenance(
        stage=stage_view("audit-trainer", manifest),
        trainer_config=json.dumps(redact_config(dict(run.config)), indent=2, sort_keys=True, default=str),
        files=run.files,
    )


# -- the view and the page -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WhiteboxView:
    """Everything the page (or a comparison page's section) shows about one audit."""

    label: str
    trainer: str
    verdict: WhiteboxVerdict
    bounds: tuple[BoundRow, ...]
    auc: tuple[AucRow, ...]
    histogram_svg: str | None
    mechanism: Mechanism
    limits: tuple[str, ...]
    provenance: WhiteboxProvenance


def _histogram(run: WhiteboxRun, index: int) -> str | None:
    if run.scores is None:
        return None
    panels = [
        (
            f"{VIEW_WORDS[view]} (AUC {run.auc[view]:.3f})" if view in run.auc else VIEW_WORDS[view],
            [("members", run.scores.of(view, member=True)), ("non-members", run.scores.of(view, member=False))],
        )
        for view in VIEWS
    ]
    return plots.histograms(f"white-box canary scores {index + 1}", panels, xlabel="score (higher = member)")


def whitebox_view(
    run: WhiteboxRun, *, index: int = 0, histograms: bool = True, command: Sequence[str] | None = None
) -> WhiteboxView:
    """The view of one audit; ``index`` keeps the figure ids of several audits on one page apart; ``command``:
    the command line shown when the audit has no manifest yet (default: this process's, as the manifest records)."""
    auc = []
    for view in VIEWS:
        if view in run.auc:
            members = int(run.scores.member.sum()) if run.scores is not None else 0
            total = int(run.scores.member.size) if run.scores is not None else 0
            auc.append(
                AucRow(view=VIEW_WORDS[view], auc=f"{run.auc[view]:.3f}", members=members, nonmembers=total - members)
            )
    return WhiteboxView(
        label=run.label,
        trainer=run.trainer,
        verdict=_verdict(run),
        bounds=bound_rows(run),
        auc=tuple(auc),
        histogram_svg=_histogram(run, index) if histograms else None,
        mechanism=_mechanism(run),
        limits=limits(run),
        provenance=_provenance(run, command),
    )


@dataclass(frozen=True, kw_only=True)
class WhiteboxPage:
    title: str
    version: str
    comparison: bool
    audits: tuple[WhiteboxView, ...]


def render_whitebox(runs: Sequence[WhiteboxRun], *, command: Sequence[str] | None = None) -> str:
    """The HTML page of one audit, or of several side by side (``command``: see :func:`whitebox_view`)."""
    from dpaudit import __version__

    if not runs:
        raise ValueError("render_whitebox needs at least one audit.")
    audits = tuple(whitebox_view(run, index=i, command=command) for i, run in enumerate(runs))
    trainers = ", ".join(dict.fromkeys(a.trainer for a in audits))
    title = (
        f"dpaudit audit-trainer: {trainers}"
        if len(runs) == 1
        else f"dpaudit report: {', '.join(r.label for r in runs)}"
    )
    page = WhiteboxPage(title=title, version=__version__, comparison=len(runs) > 1, audits=audits)
    return environment().get_template("whitebox.html.j2").render(page=page, css=stylesheet())


def write_page(directory: str | os.PathLike[str], *, command: Sequence[str] | None = None) -> Path:
    """Render ``index.html`` of an audit directory from its ``whitebox.json`` and scores.

    No manifest is needed: ``dpaudit audit-trainer`` calls it in the staged directory, before the
    manifest is written; the provenance then shows ``command`` (default: this process's command line,
    which is what the manifest records unless the caller passes its own to ``write_audit``)."""
    from dpaudit.files.run_dirs import atomic_write_text

    directory = Path(directory)
    manifest = None
    if (directory / "manifest.json").is_file():
        from dpaudit.files.run_dirs import load_manifest

        manifest = load_manifest(directory)
    html = render_whitebox([read_whitebox(directory, label=directory.name, manifest=manifest)], command=command)
    return atomic_write_text(directory / PAGE_FILE, html)
