"""Input checks and the JSON spelling of floats, shared by every module of :mod:`dpaudit.audit`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike


def _scores(values: ArrayLike, name: str) -> np.ndarray:
    """Scores as a 1-D float64 array; empty, NaN or infinite scores are a ValueError naming the array."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of scores, got shape {arr.shape}.")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: an audit needs at least one member and one non-member score.")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(
            f"{name} has {bad.size} non-finite score(s) (first at index {bad[0]}: {arr[bad[0]]}); "
            "scores must be finite numbers where higher means member (map -inf log-probabilities to a "
            "finite floor first)."
        )
    return arr


def _check_unit(x: float, name: str, *, low_open: bool = True, high_open: bool = True) -> float:
    x = float(x)
    ok = (x > 0 if low_open else x >= 0) and (x < 1 if high_open else x <= 1)
    if not ok:
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {x}.")
    return x


def _float_or_none(x: Any) -> float | None:
    return None if x is None else float(x)


def _json_float(x: float | None) -> float | str | None:
    """JSON has no infinity: +-inf thresholds are written as the strings "inf" / "-inf"."""
    if x is None:
        return None
    x = float(x)
    return ("inf" if x > 0 else "-inf") if math.isinf(x) else x


def _unjson_float(x: Any) -> float | None:
    return None if x is None else float(x)
