"""How privacy figures are printed: epsilon and delta are rounded UP, never to nearest.

A guarantee printed as (0.00139, ...) when the accountant said 0.0013928 claims slightly more privacy
than was proven. Every command that prints an epsilon or a delta (``dpaudit account``, ``dpaudit
train``, ``dpaudit demo``, ``privacy.json``'s text fields) goes through :func:`format_up`, so a printed
figure is always an upper bound of the computed one.
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal

__all__ = ["format_up"]


def format_up(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, rounded toward +infinity (0.0013928 -> "0.00140").

    ``None`` and infinity print as "inf" (no finite guarantee). Fixed notation for 1e-4 <= |value| < 1e6,
    scientific otherwise (1.67e-06). The decimal the rounding starts from is the float's shortest
    round-trip form (``repr``), i.e. the number the accountant returned.
    """
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
    rounded = exact.quantize(quantum, rounding=ROUND_CEILING)
    if 1e-4 <= abs(rounded) < 1e6:
        return format(rounded, "f")
    return format(rounded, f".{digits - 1}e")
