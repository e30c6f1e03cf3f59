"""The report's Jinja2 environment: package templates, autoescaping, the number filters, the style sheet.

One environment for every page (the attack report, the comparison page, the white-box audit page):
autoescaping on (every string from data, configs or command lines is escaped), undefined names an
error, and the filters that print figures: ``up`` rounds a claimed epsilon or delta UP and ``down``
rounds an empirical lower bound DOWN (:mod:`dpaudit.common.figures`), never to nearest.
"""

from __future__ import annotations

import functools
import math
from typing import Any

__all__ = ["environment", "stylesheet"]


def _num(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isnan(value):
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞" if value > 0 else "−∞"
    return format(value, spec)


def _up(value: Any, digits: int = 3) -> str:
    """A claimed epsilon or delta, rounded up (:func:`dpaudit.common.figures.format_up`); "–" when absent."""
    from dpaudit.common.figures import format_up

    return "–" if value is None else format_up(value, digits)


def _down(value: Any, digits: int = 3) -> str:
    """An empirical lower bound, rounded down (:func:`dpaudit.common.figures.format_down`); "–" when absent."""
    from dpaudit.common.figures import format_down

    return "–" if value is None else format_down(value, digits)


def _ci(interval: Any, spec: str = ".3g") -> str:
    if interval is None:
        return "–"
    return f"[{_num(interval.low, spec)},\u00a0{_num(interval.high, spec)}]"  # wraps before "[", never inside


def _pair(pair: tuple[float, float] | None, spec: str = ".3g") -> str:
    return "–" if pair is None else f"[{_num(pair[0], spec)},\u00a0{_num(pair[1], spec)}]"


@functools.lru_cache(maxsize=1)
def environment():
    """The Jinja2 environment of the report's templates (package data under ``dpaudit/report/templates/``)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dpaudit.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(num=_num, ci=_ci, pair=_pair, up=_up, down=_down)
    return env


def stylesheet():
    """The package's style sheet, inserted verbatim (it is our file, not data: escaping would break its quotes)."""
    from markupsafe import Markup

    env = environment()
    return Markup(env.loader.get_source(env, "style.css")[0])  # type: ignore[union-attr]
