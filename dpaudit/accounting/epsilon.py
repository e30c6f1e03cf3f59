"""Epsilon and delta of an event by PLD (default) or RDP, memoized."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Literal

from absl import logging as absl_logging
from dp_accounting.dp_event import (
    DpEvent,
)
from dp_accounting.rdp import rdp_privacy_accountant

from dpaudit.accounting.events import _require_real, is_fixed_size
from dpaudit.accounting.pld import (
    _ADD_OR_REMOVE,
    _REPLACE_ONE,
    _RESULTS,
    PLD_DISCRETIZATION,
    _pld_value,
)
from dpaudit.accounting.serialization import _event_key
from dpaudit.errors import UserInputError

Accountant = Literal["pld", "rdp"]


ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")


#: A few RDP orders: a valid (looser) upper bound on epsilon, ~20x cheaper than the default 156.
_BRACKET_RDP_ORDERS = (1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 24.0,
                       32.0, 48.0, 64.0, 128.0, 256.0)


def _rdp_value(event: DpEvent, kind: str, value: float, orders: Sequence[float] | None) -> float:
    relation = _REPLACE_ONE if is_fixed_size(event) else _ADD_OR_REMOVE
    accountant = rdp_privacy_accountant.RdpAccountant(list(orders) if orders else None, relation)
    if not accountant.supports(event):
        raise UserInputError("the RDP accountant cannot account for this event (sampling without replacement "
                             "cannot be mixed with Poisson sampling in one run).")
    with _quiet_absl():
        accountant.compose(event)
        return float(accountant.get_epsilon(value) if kind == "epsilon" else accountant.get_delta(value))


@contextlib.contextmanager
def _quiet_absl():
    """Silence dp_accounting's absl warnings while RDP is evaluated.

    At small sigma the fractional-order series can fail to converge; RdpAccountant then drops that
    order (the minimum over the remaining orders is still a valid bound) and logs a warning per
    order, which floods the terminal during calibration without telling the user anything.
    """
    level = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.ERROR)
    try:
        yield
    finally:
        absl_logging.set_verbosity(level)


def _check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise UserInputError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}.")


def _value(event: DpEvent, kind: str, value: float, level: tuple) -> float:
    """epsilon (kind="epsilon", value=delta) or delta (kind="delta", value=epsilon) at one accountant level.

    level: ("pld", discretization) or ("rdp", orders or None for dp_accounting's defaults).
    """
    if not isinstance(event, DpEvent):
        raise TypeError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}.")
    if level[0] == "pld" and is_fixed_size(event):
        raise UserInputError("PLD cannot account for fixed-size sampling without replacement in dp_accounting; "
                             "use the RDP accountant (replace-one adjacency) or Poisson sampling.")
    key = (_event_key(event), kind, value, level)
    cached = _RESULTS.get(key)
    if cached is None:
        cached = _pld_value(event, kind, value, level[1]) if level[0] == "pld" else _rdp_value(event, kind, value, level[1])
        _RESULTS.put(key, cached)
    return cached


def _level(accountant: str) -> tuple:
    return ("pld", PLD_DISCRETIZATION) if accountant == "pld" else ("rdp", None)


def epsilon(event: DpEvent, delta: float, accountant: Accountant = "pld") -> float:
    """Epsilon of `event` at `delta`, by ``dp_accounting``'s PLD (default) or RDP accountant.

    PLD uses ``PLDAccountant``'s defaults (add/remove-one, discretization 1e-4) and returns exactly
    what it returns; RDP uses ``RdpAccountant``'s default orders. Events with sampling without
    replacement are accounted by RDP under replace-one adjacency (PLD refuses them). A run with a
    non-private step has epsilon ``inf``. Results are memoized: recomputing is free.

    PLD refuses (:class:`UserInputError`) a delta below :data:`PLD_MIN_DELTA`, where its FFT round-off
    makes the result unreliable, and an event whose PLD would exceed :data:`PLD_MAX_GRID_POINTS`
    (:class:`PldGridTooLargeError`: a tiny noise multiplier); RDP handles both.
    """
    _check_accountant(accountant)
    delta = _require_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise UserInputError(f"delta must be in (0, 1), got {delta}.")
    return _value(event, "epsilon", delta, _level(accountant))


def delta_for_epsilon(event: DpEvent, epsilon: float, accountant: Accountant = "pld") -> float:
    """The smallest delta for which `event` is (epsilon, delta)-DP, by the chosen accountant."""
    _check_accountant(accountant)
    eps = _require_real("epsilon", epsilon)
    if eps < 0.0:
        raise UserInputError(f"epsilon must be >= 0, got {eps}.")
    return _value(event, "delta", eps, _level(accountant))
