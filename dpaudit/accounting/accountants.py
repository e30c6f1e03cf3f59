"""Epsilon and delta of an event by PLD (default) or RDP, memoized."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Literal

from absl import logging as absl_logging
from dp_accounting.dp_event import (
    DpEvent,
)
from dp_accounting.rdp import rdp_privacy_accountant

from dpaudit.accounting.events import is_fixed_size
from dpaudit.accounting.pld import (
    _ADD_OR_REMOVE,
    _REPLACE_ONE,
    _RESULTS,
    PLD_DISCRETIZATION,
    _check_grid,
    _check_pld_delta,
    _flatten_for_pld,
    _Level,
    _NotFlat,
    _pld_value,
    _PldItem,
    _ResultKey,
    replace_one_epsilon,
)
from dpaudit.accounting.segment import _require_real
from dpaudit.accounting.serialization import _event_key
from dpaudit.common.errors import UserInputError

Accountant = Literal["pld", "rdp"]


ACCOUNTANTS: tuple[str, ...] = ("pld", "rdp")


#: A few RDP orders: a valid (looser) upper bound on epsilon, ~20x cheaper than the default 156.
_BRACKET_RDP_ORDERS = (
    1.25,
    1.5,
    1.75,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    6.0,
    8.0,
    10.0,
    12.0,
    16.0,
    20.0,
    24.0,
    32.0,
    48.0,
    64.0,
    128.0,
    256.0,
)


def _rdp_value(event: DpEvent, kind: str, value: float, orders: Sequence[float] | None) -> float:
    relation = _REPLACE_ONE if is_fixed_size(event) else _ADD_OR_REMOVE
    accountant = rdp_privacy_accountant.RdpAccountant(list(orders) if orders else None, relation)
    if not accountant.supports(event):
        raise UserInputError(
            "the RDP accountant cannot account for this event (sampling without replacement "
            "cannot be mixed with Poisson sampling in one run)."
        )
    with _quiet_absl():
        accountant.compose(event)
        return float(accountant.get_epsilon(value) if kind == "epsilon" else accountant.get_delta(value))


@contextlib.contextmanager
def _quiet_absl() -> Iterator[None]:
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


def _value(event: DpEvent, kind: str, value: float, level: _Level) -> float:
    """epsilon (kind="epsilon", value=delta) or delta (kind="delta", value=epsilon) at one accountant level.

    level: ("pld", discretization) or ("rdp", orders or None for dp_accounting's defaults).
    """
    if not isinstance(event, DpEvent):
        raise TypeError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}.")
    if level[0] == "pld" and is_fixed_size(event):
        raise UserInputError(
            "PLD cannot account for fixed-size sampling without replacement in dp_accounting; "
            "use the RDP accountant (replace-one adjacency) or Poisson sampling."
        )
    key = (_event_key(event), kind, value, level)
    cached = _RESULTS.get(key)
    if cached is None:
        cached = (
            _pld_value(event, kind, value, level[1]) if level[0] == "pld" else _rdp_value(event, kind, value, level[1])
        )
        _RESULTS.put(key, cached)
    return cached


def _level(accountant: str) -> _Level:
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


def epsilon_replace_one(event: DpEvent, delta: float) -> float:
    """Epsilon of ``event`` at ``delta`` under replace-one adjacency (one row swapped for another), by PLD.

    This is the guarantee that holds when the dataset size N is public: add/remove adjacency changes N,
    so an add/remove epsilon says nothing about an adversary who knows N and all rows but one if N
    itself is released (``privacy.json``, q = B / N, or a step count derived from N). Swapping one
    example changes one clipped unit from one vector to another, so the same DpEvent (whose Gaussian
    carries sigma over the unit's own sensitivity factor, see :mod:`dpaudit.training.privacy_plan`) is
    accounted by ``dp_accounting``'s ``PLDAccountant(NeighboringRelation.REPLACE_ONE)``: each
    Poisson-sampled step becomes the pair of mixtures ``(1-q) N(0) + q N(-1)`` vs ``(1-q) N(0) + q N(+1)``
    (in units of the unit's sensitivity), the standard substitution analysis of Poisson subsampling
    (Zhu, Dong & Wang 2022, "Optimal accounting of differential privacy via characteristic function",
    section 5; Lebeda et al. 2024, "Avoiding pitfalls for privacy accounting of subsampled mechanisms
    under composition"). With micro-batch clipping the two swapped rows may sit in two micro-batches,
    each moving its clipped sum by up to the unit's sensitivity: the same two-point worst case.

    Fixed-size sampling without replacement is replace-one already: its (RDP) epsilon is returned.
    The RDP accountant cannot do replace-one Poisson sampling, so this is PLD even when the run's
    accountant of record is RDP; a delta below :data:`~dpaudit.accounting.PLD_MIN_DELTA` is refused.
    Memoized like :func:`epsilon`.
    """
    delta = _require_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise UserInputError(f"delta must be in (0, 1), got {delta}.")
    if not isinstance(event, DpEvent):
        raise TypeError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}.")
    if is_fixed_size(event):
        return epsilon(event, delta, "rdp")
    key: _ResultKey = (_event_key(event), "epsilon", delta, ("pld-replace-one", PLD_DISCRETIZATION))
    cached = _RESULTS.get(key)
    if cached is None:
        cached = _pld_replace_one(event, delta)
        _RESULTS.put(key, cached)
    return cached


def _pld_replace_one(event: DpEvent, delta: float) -> float:
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    _check_pld_delta(delta)
    items: list[_PldItem] = []
    try:
        _flatten_for_pld(event, 1, items)
        # A replace-one step spans about twice the add/remove privacy-loss range: guard at half the grid step.
        _check_grid(items, PLD_DISCRETIZATION / 2)
    except _NotFlat:
        pass
    else:  # the accountant's own composition, its single steps built on whole arrays (bit for bit)
        return replace_one_epsilon(items, delta, PLD_DISCRETIZATION)
    accountant = PLDAccountant(_REPLACE_ONE, value_discretization_interval=PLD_DISCRETIZATION)
    if not accountant.supports(event):
        raise UserInputError("the PLD accountant cannot account for this event under replace-one adjacency.")
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))
