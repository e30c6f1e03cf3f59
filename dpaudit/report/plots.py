"""The report's figures as self-contained, deterministic inline SVG (matplotlib's SVG backend).

Deterministic: ``svg.hashsalt`` is set per figure (so the clip-path ids of several figures on one
page never collide and the bytes never change), the metadata carries no date or creator, and text
stays text (``svg.fonttype = 'none'``) in a system font stack, so the file embeds no font and
references nothing outside itself. The XML prolog and DOCTYPE are dropped so the SVG can be placed
inline in HTML.

Figures follow the papers they reproduce: exposure and reconstruction by repetition count (Anil et
al. 2021, "Large-Scale Differentially Private BERT", Figure 7), ROC curves on log-log axes
(Carlini et al. 2022, "Membership Inference Attacks From First Principles").
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from markupsafe import Markup, escape

#: System fonts only: nothing is embedded or fetched.
FONT_STACK = ["DejaVu Sans", "Helvetica", "Arial", "Liberation Sans", "sans-serif"]
#: Colour-blind-safe palette (Okabe & Ito 2008), one colour per run or attack.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
#: Past len(PALETTE) curves the colours repeat with the next line style, so no two curves look alike
#: (8 x 4 = 32 distinct (colour, style) pairs; a page with more curves than that is not readable anyway).
LINESTYLES = ["-", "--", ":", "-."]


def curve_style(i: int) -> tuple[str, str]:
    """(colour, line style) of the i-th curve of a figure: distinct for the first 32 curves."""
    return PALETTE[i % len(PALETTE)], LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)]


def thin_ticks(xs: Sequence[float], *, min_gap: float) -> list[float]:
    """The tick positions of ``xs`` (log2 axis) kept so that no two are closer than ``min_gap`` in log2 units: the
    smallest and largest always, the others left to right when they clear the last kept one (1, 2, ..., 10, 20, 50,
    100 printed at every position overlap at 9 pt; 1, 2, 4, 8, 20, 50, 100 do not)."""
    xs = sorted({float(x) for x in xs if x > 0})
    if len(xs) <= 2:
        return xs
    kept = [xs[0]]
    for x in xs[1:-1]:
        if math.log2(x) - math.log2(kept[-1]) >= min_gap and math.log2(xs[-1]) - math.log2(x) >= min_gap:
            kept.append(x)
    return [*kept, xs[-1]]


#: At most this many vertices of an ROC curve are drawn (log-spaced in FPR: the low-FPR end is what matters).
ROC_POINTS = 400


@dataclass(frozen=True, kw_only=True)
class Series:
    """One line of points with optional interval bounds (low/high, NaN where unknown) and, in a training panel, a
    reference level drawn as a dotted line in the series' colour (a held-out figure's trivial baseline)."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    baseline: float | None = None


@dataclass(frozen=True, kw_only=True)
class Band:
    """A horizontal band (e.g. the control canaries' mean with its CI) drawn across the axes."""

    label: str
    center: float
    low: float
    high: float


def _pyplot():
    # Figure.savefig(format="svg") uses the SVG backend's canvas directly: no pyplot, no global backend.
    import matplotlib
    from matplotlib.figure import Figure

    return matplotlib, Figure


def _style(matplotlib) -> dict:
    return {
        "svg.fonttype": "none",
        "font.family": "sans-serif",
        "font.sans-serif": FONT_STACK,
        "font.size": 9,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.facecolor": "white",
        "axes.facecolor": "white",
        "path.simplify": True,
    }


def _to_svg(fig, name: str) -> Markup:
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": f"dpaudit-{name}"}):
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]  # inline: no XML prolog or DOCTYPE
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.DOTALL)
    # Font stack: matplotlib names only the resolved family; let the browser fall back to system fonts.
    svg = re.sub(
        r"font-family:[^;\"]*", "font-family: " + ", ".join(f"'{f}'" if " " in f else f for f in FONT_STACK), svg
    )
    svg = re.sub(r'<g id="[^"]*"', "<g", svg)  # group ids repeat across figures; only salted defs ids are referenced
    svg = svg.replace("*{stroke-linejoin", "svg.plot *{stroke-linejoin")  # inline <style> is page-global in HTML
    svg = svg.replace("<svg ", f'<svg role="img" aria-label="{escape(name)}" class="plot" ', 1)
    # matplotlib escapes every text it writes (XML), so the SVG is safe to place in the page as is.
    return Markup(svg)


def _figure(width: float, height: float, ncols: int = 1, **margins: float):
    """A figure with fixed margins in inches (``left``, ``right``, ``top``, ``bottom``, ``wspace``).

    Fixed margins rather than a layout engine: constrained layout costs more than drawing here."""
    matplotlib, Figure = _pyplot()
    ctx = matplotlib.rc_context(_style(matplotlib))
    ctx.__enter__()
    fig = Figure(figsize=(width, height))
    inches = {"left": 0.55, "right": 0.15, "top": 0.25, "bottom": 0.5, **margins}
    fig.subplots_adjust(
        left=inches["left"] / width,
        right=1 - inches["right"] / width,
        top=1 - inches["top"] / height,
        bottom=inches["bottom"] / height,
        wspace=margins.get("wspace", 0.2),
    )
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return ctx, fig, axes


def _errorbars(ax, s: Series, i: int) -> None:
    x, y = np.asarray(s.x, float), np.asarray(s.y, float)
    (color, style), marker = curve_style(i), MARKERS[i % len(MARKERS)]
    if s.low is not None and s.high is not None:
        low, high = np.asarray(s.low, float), np.asarray(s.high, float)
        ok = np.isfinite(low) & np.isfinite(high)
        yerr = np.vstack([np.where(ok, y - low, 0.0), np.where(ok, high - y, 0.0)]).clip(min=0)
        ax.errorbar(
            x,
            y,
            yerr=yerr,
            color=color,
            marker=marker,
            capsize=3,
            linewidth=1.5,
            linestyle=style,
            markersize=5,
            label=s.label,
        )
    else:
        ax.plot(x, y, color=color, marker=marker, linewidth=1.5, linestyle=style, markersize=5, label=s.label)


#: Grey shades and dash patterns of the ceilings of one figure (one per distinct |R|, e.g. per --reveal).
_CEILING_STYLES = [("#444444", (0, (5, 3))), ("#777777", (0, (2, 2))), ("#222222", (0, (8, 2, 1, 2)))]


def by_frequency(
    name: str,
    series: Sequence[Series],
    *,
    ylabel: str,
    bands: Sequence[Band] = (),
    ceiling: float | None = None,
    ylim: tuple[float, float] | None = None,
    ceilings: Sequence[tuple[float, str]] = (),
) -> str:
    """A metric vs repetition count (log2 x axis), one series per run, control bands and ceilings.

    ``ceilings`` are (log2|R|, label) pairs, one dashed line each (runs with different ``--reveal`` rank over
    different spaces, so each gets its own, labelled); ``ceiling`` alone is one unlabelled ceiling."""
    lines = [(c, label) for c, label in ceilings if c is not None and math.isfinite(c)]
    if ceiling is not None and math.isfinite(ceiling) and not lines:
        lines = [(ceiling, "")]
    entries = len(series) + len(bands) + len(lines)
    legend_in = 0.16 * math.ceil(entries / 2)
    ctx, fig, (ax,) = _figure(5.6, 3.0 + legend_in, bottom=0.55 + legend_in)
    try:
        for i, band in enumerate(bands):
            color = PALETTE[i % len(PALETTE)]
            ax.axhspan(band.low, band.high, color=color, alpha=0.12, linewidth=0)
            ax.axhline(band.center, color=color, linestyle=":", linewidth=1, label=band.label)
        for i, (c, label) in enumerate(lines):
            color, dashes = _CEILING_STYLES[i % len(_CEILING_STYLES)]
            ax.axhline(
                c,
                color=color,
                linestyle=dashes,
                linewidth=1,
                label=f"ceiling log2|R| = {c:.3g}" + (f" ({label})" if label else ""),
            )
        xs = sorted({float(x) for s in series for x in s.x if x > 0})
        for i, s in enumerate(series):
            _errorbars(ax, s, i)
        if xs:
            ax.set_xscale("log", base=2)
            span = math.log2(xs[-1]) - math.log2(xs[0])
            ticks = thin_ticks(xs, min_gap=max(span, 1.0) * 0.07)  # ~0.3 inch at this width: 3-digit labels never touch
            ax.set_xticks(ticks, [f"{x:g}" for x in ticks])
            ax.minorticks_off()
        ax.set_xlabel("times the canary was inserted (log scale; controls: band)")
        ax.set_ylabel(ylabel)
        if ylim is not None:
            ax.set_ylim(*ylim)
        if series or bands:
            fig.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=2, frameon=False)
        return _to_svg(fig, name)
    finally:
        ctx.__exit__(None, None, None)


def thin_roc(
    fpr: np.ndarray, tpr: np.ndarray, floor: float, keep: Sequence[float] = (1e-3, 1e-2, 1e-1)
) -> tuple[np.ndarray, np.ndarray]:
    """At most :data:`ROC_POINTS` vertices, log-spaced in FPR (the step shape kept by taking, at each
    grid FPR, the vertex with the largest FPR <= it); the FPRs in ``keep`` are grid points, so the drawn
    curve there is exactly the ROC's TPR. FPR and TPR are clipped below at ``floor`` for log axes."""
    fpr, tpr = np.asarray(fpr, float), np.asarray(tpr, float)
    if fpr.size > ROC_POINTS:
        grid = np.unique(
            np.r_[np.geomspace(floor, 1.0, ROC_POINTS - 1 - len(keep)), list(keep), fpr[fpr > 0].min(initial=1.0)]
        )
        idx = np.searchsorted(fpr, grid + 1e-15, side="right") - 1
        idx = idx[idx >= 0]
        best = np.maximum.accumulate(tpr)[idx]
        fpr, tpr = fpr[idx], best
    return np.maximum(fpr, floor), np.maximum(tpr, floor)


#: Legend text of the ROC and training figures, in points (7 pt read as 6 px once a figure is scaled to its column).
LEGEND_PT = 8.5


def roc(name: str, curves: Sequence[tuple[str, np.ndarray, np.ndarray, int]], *, baselines: Sequence[bool] = ()) -> str:
    """ROC curves on log-log axes, one per (label, fpr, tpr, n_nonmembers), with the chance diagonal.

    ``baselines[i]`` marks a curve of a baseline that never queried the model (the blind one): drawn grey and dashed,
    so the attacks' colours stay theirs. The legend sits below the axes (inside, it covered the low-FPR corner the
    figure is about), two columns; past 8 curves the colours repeat with another line style (:func:`curve_style`)."""
    rows = math.ceil((len(curves) + 1) / 2)
    legend_in = 0.2 * rows + 0.1
    ctx, fig, (ax,) = _figure(4.6, 4.2 + legend_in, left=0.65, bottom=0.5 + legend_in)
    try:
        n_max = max((n for *_, n in curves), default=100)
        floor = 10 ** math.floor(math.log10(0.5 / max(n_max, 1)))
        ax.plot([floor, 1], [floor, 1], color="#888888", linestyle=(0, (1, 3)), linewidth=1, label="chance")
        shade = 0
        attacks = 0
        for i, (label, fpr, tpr, _n) in enumerate(curves):
            x, y = thin_roc(fpr, tpr, floor)
            style: str | tuple[int, tuple[int, int]]
            if i < len(baselines) and baselines[i]:
                color, style = ["#555555", "#999999"][shade % 2], (0, (4, 2))
                shade += 1
            else:
                color, style = curve_style(attacks)
                attacks += 1
            ax.plot(x, y, color=color, linestyle=style, linewidth=1.6, drawstyle="steps-post", label=label)
        for f in (1e-3, 1e-2):
            if f > floor:
                ax.axvline(f, color="#bbbbbb", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(floor, 1)
        ax.set_ylim(floor, 1.05)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        fig.legend(fontsize=LEGEND_PT, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=2, frameon=False)
        return _to_svg(fig, name)
    finally:
        ctx.__exit__(None, None, None)


def training(name: str, panels: Sequence[tuple[str, Sequence[Series], bool]]) -> str:
    """Small multiples vs step: per panel (title, one series per run, log y axis?); a series' baseline is dotted."""
    ncols = max(len(panels), 1)
    runs = len({s.label for _, ss, _ in panels for s in ss})
    legend_in = 0.22 * math.ceil(runs / 4) if runs > 1 else 0.0
    ctx, fig, axes = _figure(min(2.6 * ncols, 10.4), 2.6 + legend_in, ncols=ncols, bottom=0.5 + legend_in, wspace=0.4)
    try:
        for ax, (title, series, log_y) in zip(axes, panels):
            drawn = False
            for i, s in enumerate(series):
                x, y = np.asarray(s.x, float), np.asarray(s.y, float)
                ok = np.isfinite(y) & (y > 0 if log_y else True)
                if ok.any():
                    ax.plot(
                        x[ok],
                        y[ok],
                        color=curve_style(i)[0],
                        linestyle=curve_style(i)[1],
                        linewidth=1.4,
                        marker="o" if ok.sum() < 12 else None,
                        markersize=3,
                        label=s.label,
                    )
                    drawn = True
                    if s.baseline is not None and math.isfinite(s.baseline):
                        ax.axhline(s.baseline, color=PALETTE[i % len(PALETTE)], linestyle=":", linewidth=1.2)
            if log_y and drawn:
                ax.set_yscale("log")
            if not drawn:
                ax.text(
                    0.5,
                    0.5,
                    "not logged\n(none for a non-private run)"
                    if "epsilon" in title or "SNR" in title
                    else "not logged",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                    color="#666666",
                )
                ax.set_xticks([])
                ax.set_yticks([])
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("step")
            if drawn:  # at most 4 step labels in a 2.6-inch panel: 5-digit steps never touch
                from matplotlib.ticker import MaxNLocator

                ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=True))
        if runs > 1:
            handles, labels = axes[0].get_legend_handles_labels()
            fig.legend(
                handles,
                labels,
                fontsize=LEGEND_PT,
                loc="lower center",
                bbox_to_anchor=(0.5, 0.0),
                ncols=4,
                frameon=False,
            )
        return _to_svg(fig, name)
    finally:
        ctx.__exit__(None, None, None)


#: Bins of a score histogram (shared by the groups of one panel, over their common range).
HIST_BINS = 40


def histograms(
    name: str, panels: Sequence[tuple[str, Sequence[tuple[str, np.ndarray]]]], *, xlabel: str = "score"
) -> str:
    """Small multiples of overlaid histograms: per panel (title, one (label, values) per group), the
    groups binned on the same :data:`HIST_BINS` edges over their common range (e.g. the scores of member
    and non-member canaries, higher = member)."""
    ncols = max(len(panels), 1)
    groups = max((len(g) for _, g in panels), default=0)
    legend_in = 0.2 if groups > 1 else 0.0
    ctx, fig, axes = _figure(min(3.6 * ncols, 10.4), 2.8 + legend_in, ncols=ncols, bottom=0.5 + legend_in, wspace=0.3)
    try:
        for ax, (title, series) in zip(axes, panels):
            finite = [np.asarray(v, float)[np.isfinite(np.asarray(v, float))] for _, v in series]
            values = np.concatenate(finite) if finite else np.zeros(0)
            if values.size:
                low, high = float(values.min()), float(values.max())
                edges = np.linspace(low, high if high > low else low + 1.0, HIST_BINS + 1)
                for i, ((label, _), v) in enumerate(zip(series, finite)):
                    color = PALETTE[i % len(PALETTE)]
                    ax.hist(v, bins=edges, color=color, alpha=0.3, histtype="stepfilled", linewidth=0)
                    ax.hist(v, bins=edges, color=color, histtype="step", linewidth=1.3, label=f"{label} (n = {v.size})")
                ax.ticklabel_format(axis="x", style="sci", scilimits=(-3, 4))
            else:
                ax.text(0.5, 0.5, "no scores", ha="center", va="center", transform=ax.transAxes, color="#666666")
            ax.set_title(title, fontsize=9)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("canaries")
        if groups > 1:
            handles, labels = axes[0].get_legend_handles_labels()
            fig.legend(
                handles, labels, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncols=groups, frameon=False
            )
        return _to_svg(fig, name)
    finally:
        ctx.__exit__(None, None, None)
