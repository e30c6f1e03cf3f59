"""How privacy figures are printed: claims rounded UP, empirical lower bounds rounded DOWN, never to nearest.

A guarantee printed as (0.00139, ...) when the accountant said 0.0013928 claims slightly more privacy
than was proven. Every place that prints a claimed epsilon or delta (``dpaudit account``, ``dpaudit
train``, ``dpaudit attack``, ``dpaudit demo``, the report, ``privacy.json``'s text fields) goes through
:func:`format_up`, so a printed claim is always an upper bound of the computed one. An empirical
epsilon LOWER bound goes through :func:`format_down` (3.8809 -> "3.88"), so a printed bound never
claims more leakage than was shown, and a printed bound is above a printed claim only when the
computed ones are.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

__all__ = ["format_down", "format_up"]


def _format(value: float | None, digits: int, rounding: str) -> str:
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be an integer >= 1, got {digits!r}.")
    if value is None or (isinstance(value, float) and math.isinf(value) and value > 0):
        return "inf"
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"cannot print {value} as a privacy figure.")
    if value == 0.0:
        return "0"
    exact = Decimal(repr(value))
    quantum = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    rounded = exact.quantize(quantum, rounding=rounding)
    if rounded == 0:
        return "0"
    if 1e-4 <= abs(rounded) < 1e6:
        return format(rounded, "f")
    return format(rounded, f".{digits - 1}e")


def format_down(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, rounded toward -infinity (3.880454 -> "3.88").

    For empirical epsilon lower bounds: the printed figure is never above the computed bound.
    Same notation as :func:`format_up`.
    """
    return _format(value, digits, ROUND_FLOOR)


def format_up(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, rounded toward +infinity (0.0013928 -> "0.00140").

    ``None`` and infinity print as "inf" (no finite guarantee). Fixed notation for 1e-4 <= |value| < 1e6,
    scientific otherwise (1.67e-06). The decimal the rounding starts from is the float's shortest
    round-trip form (``repr``), i.e. the number the accountant returned.
    """
    return _format(value, digits, ROUND_CEILING)
