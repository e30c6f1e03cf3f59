"""Render the report page: typed sections in, one self-contained HTML string out.

Jinja2 with autoescaping on (every string from data, configs or command lines is escaped); the
templates and the stylesheet are package data under ``dpaudit/report/templates/``. The page has a
Content-Security-Policy that allows inline styles and ``data:`` images only, so nothing can run or
load even if a string escaped the escaping. The output is a pure function of the attack directories:
no dates, no random ids, stable ordering; rendering twice gives the same bytes.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpaudit.report.load import ReportRun, load_run
from dpaudit.report.sections import build_page

#: Default folder of ``dpaudit report`` pages.
DEFAULT_DIR = Path("reports")


def _num(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isnan(value):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return format(value, spec)


def _up(value: Any, digits: int = 3) -> str:
    """A claimed epsilon or delta, rounded up (:func:`dpaudit.figures.format_up`); "–" when absent."""
    from dpaudit.figures import format_up

    return "–" if value is None else format_up(value, digits)


def _down(value: Any, digits: int = 3) -> str:
    """An empirical lower bound, rounded down (:func:`dpaudit.figures.format_down`); "–" when absent."""
    from dpaudit.figures import format_down

    return "–" if value is None else format_down(value, digits)


def _ci(interval: Any, spec: str = ".3g") -> str:
    if interval is None:
        return "–"
    return f"[{_num(interval.low, spec)},\u00a0{_num(interval.high, spec)}]"  # wraps before "[", never inside


def _pair(pair: tuple[float, float] | None, spec: str = ".3g") -> str:
    return "–" if pair is None else f"[{_num(pair[0], spec)},\u00a0{_num(pair[1], spec)}]"


@functools.lru_cache(maxsize=1)
def _environment():
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("dpaudit.report", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(num=_num, ci=_ci, pair=_pair, up=_up, down=_down)
    return env


def _unique_labels(runs: Sequence[ReportRun]) -> list[ReportRun]:
    import dataclasses

    seen: dict[str, int] = {}
    out = []
    for run in runs:
        n = seen.get(run.label, 0) + 1
        seen[run.label] = n
        out.append(run if n == 1 else dataclasses.replace(run, label=f"{run.label} ({n})"))
    return out


def render_runs(runs: Sequence[ReportRun]) -> str:
    """The HTML page of one run, or the comparison page of several."""
    if not runs:
        raise ValueError("render_runs needs at least one run.")
    env = _environment()
    from markupsafe import Markup

    # The stylesheet is the package's own file, not data: inserted verbatim (escaping would break its quotes).
    css = Markup(env.loader.get_source(env, "style.css")[0])  # type: ignore[union-attr]
    page = build_page(_unique_labels(runs))
    return env.get_template("report.html.j2").render(page=page, css=css)


def render_report(paths: Sequence[str | os.PathLike[str]]) -> str:
    """Render the report of one or several attack directories (verified; no model loaded).

    Raises:
        UserInputError: a path that is not an attack directory, has changed files, or holds results
            of an unknown schema version.
    """
    return render_runs([load_run(p) for p in paths])


def write_report(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> Path:
    """Render and write ``out`` atomically."""
    from dpaudit.rundir import atomic_write_text

    html = render_report(paths)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(out, html)
