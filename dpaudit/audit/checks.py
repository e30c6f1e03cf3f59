"""Input checks and the JSON spelling of floats, shared by every module of :mod:`dpaudit.audit`; the readers of the
JSON values the records' ``from_json`` take (as ``float()``, ``int()`` and indexing would: a TypeError or ValueError
for a value of the wrong kind).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import SupportsFloat, SupportsIndex, SupportsInt

import numpy as np
from numpy.typing import ArrayLike, NDArray


def _scores(values: ArrayLike, name: str) -> NDArray[np.float64]:
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


def _json_number(x: object) -> float:
    """``float(x)`` of a JSON number (or of the "inf" / "-inf" :func:`_json_float` writes)."""
    if isinstance(x, (str, SupportsFloat, SupportsIndex)):
        return float(x)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(x).__name__}'")


def _json_int(x: object) -> int:
    """``int(x)`` of a JSON number."""
    if isinstance(x, (str, SupportsInt, SupportsIndex)):
        return int(x)
    raise TypeError(f"int() argument must be a string or a real number, not '{type(x).__name__}'")


def _json_object(x: object) -> Mapping[str, object]:
    """A JSON object (any mapping)."""
    if isinstance(x, Mapping):
        return x
    raise TypeError(f"expected a JSON object, got '{type(x).__name__}'")


def _json_array(x: object) -> Iterable[object]:
    """A JSON array (anything iterable)."""
    if isinstance(x, Iterable):
        return x
    raise TypeError(f"'{type(x).__name__}' object is not iterable")


def _float_or_none(x: object) -> float | None:
    return None if x is None else _json_number(x)


def _json_float(x: float | None) -> float | str | None:
    """JSON has no infinity: +-inf thresholds are written as the strings "inf" / "-inf"."""
    if x is None:
        return None
    x = float(x)
    return ("inf" if x > 0 else "-inf") if math.isinf(x) else x


def _unjson_float(x: object) -> float | None:
    return None if x is None else _json_number(x)
