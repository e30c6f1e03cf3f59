"""Searches over the accountant: the noise for a target epsilon, the most steps or the largest batch within it."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dp_accounting.dp_event import (
    DpEvent,
)

from dpaudit.accounting.accountants import (
    _BRACKET_RDP_ORDERS,
    Accountant,
    _check_accountant,
    _level,
    _value,
)
from dpaudit.accounting.events import (
    Segment,
    dpsgd_event,
    is_fixed_size,
    schedule_event,
)
from dpaudit.accounting.noise_tail import event_tail_figure
from dpaudit.accounting.pld import (
    _PLD_MEDIUM_DISCRETIZATION,
    PLD_DISCRETIZATION,
    PLD_MAX_GRID_POINTS,
    PLD_MIN_DELTA,
    PldGridTooLargeError,
    _check_grid,
    _check_pld_delta,
    _flatten_for_pld,
    _Level,
    _NotFlat,
    _PldItem,
)
from dpaudit.accounting.segment import _require_int, _require_real
from dpaudit.accounting.tan import _tan_eta_for_epsilon
from dpaudit.common.errors import UserInputError


@dataclass
class _Point:
    x: float  # search coordinate; epsilon decreases as x grows (feasible side is high x)
    param: float  # the parameter value actually evaluated
    g: float  # log(epsilon / target); <= 0 means within budget


class _Ladder:
    """Finds the boundary of {p : epsilon(p) <= target} for a parameter p on which epsilon is monotone.

    Works in x = log p (or -log p when epsilon grows with p), so that epsilon always decreases in x.
    Each rung is an epsilon function, cheap ones first; they are all upper bounds of similar shape,
    so a root found on one rung is an excellent start on the next, and the local slope carries over.
    Only the last rung (the accountant of record) decides feasibility.
    """

    def __init__(
        self,
        evaluate: Callable[[float, _Level], float],
        target: float,
        *,
        increasing: bool,
        rtol: float,
        integer: bool,
        bounds: tuple[float, float],
    ) -> None:
        self.evaluate = evaluate
        self.target = target
        self.sign = -1.0 if increasing else 1.0
        self.xtol = math.log1p(rtol)
        self.integer = integer
        xs = sorted(self.sign * math.log(b) for b in bounds)
        self.x_min, self.x_max = xs
        self.evaluations: list[tuple[_Level, float, float]] = []

    # p <-> x -----------------------------------------------------------------------------------------
    def _param(self, x: float, toward_feasible: bool) -> float:
        x = min(max(x, self.x_min), self.x_max)
        p = math.exp(self.sign * x)
        if not self.integer:
            return p
        # Rounding toward the feasible side keeps a point aimed at "just feasible" feasible.
        feasible_up = self.sign > 0
        p = math.ceil(p - 1e-9) if toward_feasible == feasible_up else math.floor(p + 1e-9)
        lo, hi = sorted(math.exp(self.sign * b) for b in (self.x_min, self.x_max))
        return float(min(max(p, round(lo)), round(hi)))

    def _point(self, level: _Level, p: float) -> _Point:
        eps = self.evaluate(p, level)
        self.evaluations.append((level, p, eps))
        if eps <= 0.0:
            g = -math.inf
        elif math.isinf(eps):
            g = math.inf
        else:
            g = math.log(eps / self.target)
        return _Point(self.sign * math.log(p), p, g)

    # one rung ------------------------------------------------------------------------------------------
    def solve(
        self,
        level: _Level,
        x0: float,
        slope: float,
        *,
        final: bool,
        certify: bool = False,
        root_tol: float = 0.0,
        max_evals: int = 60,
    ) -> tuple[_Point | None, _Point | None, float, float]:
        """Returns (feasible point closest to the boundary, infeasible point, root estimate, slope).

        A rung that is not `final` only locates the root: it evaluates at its root estimates and stops
        once an update moves the estimate by less than `root_tol`. The final rung aims just on the
        feasible side of the root and stops once a feasible point is within xtol of the boundary.
        """
        points: dict[float, _Point] = {}
        lo: _Point | None = None  # largest x seen infeasible
        hi: _Point | None = None  # smallest x seen feasible
        x_next, toward_feasible = x0, True
        root = x0
        for _ in range(max_evals):
            p = self._param(x_next, toward_feasible)
            x = self.sign * math.log(p)
            if x in points and self.integer:  # rounded onto a known point: try rounding the other way
                p = self._param(x_next, not toward_feasible)
                x = self.sign * math.log(p)
                if lo is not None and hi is not None and not lo.x < x < hi.x:
                    break
            if x in points:  # nothing new to learn at this resolution
                break
            point = points[x] = self._point(level, p)
            if point.g > 0 and (lo is None or point.x > lo.x):
                lo = point
            if point.g <= 0 and (hi is None or point.x < hi.x):
                hi = point
            slope = self._slope(points, slope)
            root = self._root(lo, hi, point, slope)
            width = (hi.x - lo.x) if (lo and hi) else math.inf
            adjacent = self.integer and lo is not None and hi is not None and abs(lo.param - hi.param) <= 1
            if width <= self.xtol or adjacent:
                break
            if not final:
                if math.isfinite(point.g) and abs(root - point.x) <= root_tol:
                    break
                x_next, toward_feasible = root, True
            elif hi is not None and not certify and hi.x - root <= 0.9 * self.xtol:
                break
            elif hi is not None and hi.x - root <= 0.9 * self.xtol:
                x_next, toward_feasible = hi.x - 0.95 * self.xtol, False  # certify: close the bracket from below
            else:
                x_next, toward_feasible = root + 0.4 * self.xtol, True
            if lo is not None and hi is not None:  # stay strictly inside the bracket
                inner_lo, inner_hi = lo.x + 0.05 * width, hi.x - 0.05 * width
                x_next = min(max(x_next, inner_lo), inner_hi)
            if (x_next >= self.x_max and hi is None and point.x >= self.x_max) or (
                x_next <= self.x_min and lo is None and point.x <= self.x_min
            ):
                break  # the whole search range lies on one side of the boundary
        else:
            raise RuntimeError(f"search did not converge in {max_evals} evaluations at {level}.")
        return hi, lo, root, slope

    @staticmethod
    def _nearest_pair(points: dict[float, _Point]) -> tuple[_Point, _Point] | None:
        """The two finite points closest to the boundary (one on each side when possible)."""
        finite = sorted((p for p in points.values() if math.isfinite(p.g)), key=lambda p: abs(p.g))
        if len(finite) < 2:
            return None
        first = finite[0]
        other_side = [p for p in finite[1:] if (p.g > 0) != (first.g > 0)]
        return first, (
            other_side[0] if other_side and abs(other_side[0].g) < 4 * abs(finite[1].g) + 0.05 else finite[1]
        )

    def _slope(self, points: dict[float, _Point], previous: float) -> float:
        pair = self._nearest_pair(points)
        if pair is not None:
            a, b = pair
            k = -(a.g - b.g) / (a.x - b.x)
            if math.isfinite(k) and k > 0:
                return min(max(k, 0.02), 50.0)
        return previous

    def _root(self, lo: _Point | None, hi: _Point | None, last: _Point, slope: float) -> float:
        """Newton from the point nearest the boundary with the local slope, kept inside the bracket."""
        if math.isinf(last.g) and (lo is None or hi is None):
            return last.x + (math.log(4.0) if last.g > 0 else -math.log(4.0))
        candidates = [p for p in (lo, hi, last) if p is not None and math.isfinite(p.g)]
        if not candidates:
            assert lo is not None and hi is not None  # last.g is infinite and both sides are known (above)
            return 0.5 * (lo.x + hi.x)
        anchor = min(candidates, key=lambda p: abs(p.g))
        step = max(min(anchor.g / slope, math.log(8.0)), -math.log(8.0))  # at most x8 per step
        root = anchor.x + step
        if lo is not None and hi is not None and not lo.x < root < hi.x:
            root = 0.5 * (lo.x + hi.x)
        return root


def _ladder_levels(accountant: str, *, medium: bool) -> list[_Level]:
    levels: list[_Level] = [("rdp", _BRACKET_RDP_ORDERS)]
    if accountant == "pld":
        if medium:
            levels.append(("pld", _PLD_MEDIUM_DISCRETIZATION))
        levels.append(("pld", PLD_DISCRETIZATION))
    else:
        levels.append(("rdp", None))
    return levels


def _run_ladder(ladder: _Ladder, levels: list[_Level], p0: float, *, certify: bool) -> _Point | None:
    x, slope = ladder.sign * math.log(p0), 1.5
    hi: _Point | None = None
    for index, level in enumerate(levels):
        final = index == len(levels) - 1
        # The first rung (RDP, a few % off PLD) only needs ~1%; a rung just below the final one must
        # pin its root well inside the final tolerance so that one final evaluation suffices.
        root_tol = ladder.xtol / 16 if index == len(levels) - 2 else 1e-2
        hi, _lo, root, slope = ladder.solve(level, x, slope, final=final, certify=certify, root_tol=root_tol)
        if not final:
            # Start the next rung just on the feasible side of this rung's root: the rungs above are
            # upper bounds of the next one, so its root lies at or below this one.
            x = root + ladder.xtol / 16
    return hi


def _check_target(target_epsilon: float, delta: float, tolerance: float) -> tuple[float, float, float]:
    if (
        isinstance(target_epsilon, bool)
        or not isinstance(target_epsilon, numbers.Real)
        or not math.isfinite(target_epsilon)
    ):
        raise UserInputError(
            f"target epsilon must be a finite number > 0, got {target_epsilon!r} (an infinite "
            f"budget is no privacy guarantee: train without privacy instead)."
        )
    target = float(target_epsilon)
    if target <= 0.0:
        raise UserInputError(f"target epsilon must be > 0, got {target}.")
    delta = _require_real("delta", delta)
    if not 0.0 < delta < 1.0:
        raise UserInputError(f"delta must be in (0, 1), got {delta}.")
    tolerance = _require_real("tolerance", tolerance)
    if not 0.0 < tolerance < 0.5:
        raise ValueError(f"tolerance must be in (0, 0.5), got {tolerance}.")
    return target, delta, tolerance


def _epsilon_with_tail(event: DpEvent, delta: float, level: _Level, noise_reach: float | None) -> float:
    """Epsilon of ``event`` at ``delta`` minus its noise tail figure (:mod:`.noise_tail`) for a sampler of reach
    ``noise_reach`` (None: no tail); inf when the tail alone reaches delta (or leaves PLD a delta below the one
    it can evaluate). The tail falls as sigma grows and rises with the steps and the batch, so epsilon stays
    monotone in each searched parameter."""
    if noise_reach is None:
        return _value(event, "epsilon", delta, level)
    accountant_delta = delta - event_tail_figure(event, noise_reach)
    if accountant_delta <= 0.0 or (level[0] == "pld" and accountant_delta < PLD_MIN_DELTA):
        return math.inf
    return _value(event, "epsilon", accountant_delta, level)


def _tail_floor(
    build_event: Callable[[float], DpEvent], delta: float, noise_reach: float, low: float, high: float
) -> float | None:
    """The smallest sigma in [low, high] whose noise tail figure leaves PLD a delta it can evaluate (to 1e-6 relative):
    below it no epsilon holds at ``delta``, so the search need not look (its epsilons there are inf, and a PLD near
    that edge is expensive). None when the tail is nowhere binding in the range (or not defined for the event)."""

    def room(sigma: float) -> bool:
        return delta - event_tail_figure(build_event(sigma), noise_reach) >= PLD_MIN_DELTA

    try:
        if room(low):
            return None
        if not room(high):
            return high
    except ValueError:  # no figure for this kind of event (fixed-size sampling)
        return None
    lo, hi = math.log(low), math.log(high)
    while hi - lo > 1e-6:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if room(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def _poisson_items(event: DpEvent) -> list[_PldItem] | None:
    items: list[_PldItem] = []
    try:
        _flatten_for_pld(event, 1, items)
    except _NotFlat:
        return None
    return items


def _grid_floor(build_event: Callable[[float], DpEvent], low: float, high: float) -> float | None:
    """Smallest sigma in (low, high] (to 0.1%) whose PLD at the accountant of record's discretization
    fits in :data:`PLD_MAX_GRID_POINTS`; None if not even `high` fits. Size estimates only, no PLD built."""

    def fits(sigma: float) -> bool:
        try:
            _check_grid(_poisson_items(build_event(sigma)) or [], PLD_DISCRETIZATION)
        except PldGridTooLargeError:
            return False
        return True

    if not fits(high):
        return None
    lo, hi = math.log(low), math.log(high)
    while hi - lo > 1e-3:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fits(math.exp(mid)) else (mid, hi)
    return math.exp(hi)


def calibrate_noise(
    build_event: Callable[[float], DpEvent],
    target_epsilon: float,
    delta: float,
    *,
    accountant: Accountant = "pld",
    tolerance: float = 1e-3,
    certify_minimal: bool = False,
    sigma_bounds: tuple[float, float] = (1e-2, 1e6),
    noise_reach: float | None = None,
) -> float:
    """Smallest noise multiplier sigma whose epsilon (by `accountant`) is at most `target_epsilon`.

    With ``noise_reach`` (the reach z_max of the float sampler that will draw the noise,
    :data:`dpaudit.accounting.NOISE_SAMPLERS`), epsilon is taken at ``delta - tail(sigma)``, the sampler's
    tail figure counted inside delta (:mod:`.noise_tail`): the returned sigma satisfies
    ``epsilon(sigma, delta - tail(sigma)) <= target``. The tail falls as sigma grows, so the search is the
    same monotone one; a sigma whose tail alone reaches delta is infeasible.

    `build_event(sigma)` must give an event whose epsilon falls as sigma grows. The returned sigma's
    epsilon was computed by the accountant of record (PLD at its default discretization, or RDP at its
    default orders) and is <= target: that part is guaranteed. Minimality is to within `tolerance`
    (relative): the smallest feasible sigma is > sigma / (1 + tolerance), which is predicted from the
    local slope of epsilon(sigma), or, with ``certify_minimal=True``, proven by one more evaluation.

    The search climbs a ladder: RDP on 20 orders (a cheap upper bound) locates the root, PLD at a
    10x coarser discretization refines it, and the accountant of record is then called about once.

    Bounded in memory and time for any input: the PLD of a sigma whose grid would exceed
    :data:`PLD_MAX_GRID_POINTS` is never built (its size is estimated first). If the answer lies
    below that floor (huge targets: the privacy loss of a tiny sigma spans ~1 / (sigma^2 x
    discretization) grid points), or below ``sigma_bounds[0]``, the target is refused with a
    :class:`UserInputError` that says which sigma already meets it, rather than returning a sigma
    whose minimality is unknown.
    """
    _check_accountant(accountant)
    target, delta, tolerance = _check_target(target_epsilon, delta, tolerance)
    final_level = _level(accountant)
    if accountant == "pld":
        _check_pld_delta(delta)

    def evaluate(sigma: float, level: _Level) -> float:
        event = build_event(sigma)
        if level[0] == "pld" and final_level[0] == "pld":
            # Refuse before any rung builds a PLD for a sigma the accountant of record cannot evaluate.
            items = _poisson_items(event)
            if items is not None:
                _check_grid(items, final_level[1])
        return _epsilon_with_tail(event, delta, level, noise_reach)

    probe = build_event(1.0)
    if accountant == "pld" and is_fixed_size(probe):
        raise UserInputError("PLD cannot account for fixed-size sampling without replacement; use accountant='rdp'.")
    sigma0 = 1.0
    items = _poisson_items(probe) or []
    poisson = [item for item in items if item[0] == "poisson"]
    if items and len(poisson) == len(items):
        eta_at_one = math.sqrt(sum(c * q * q / (2.0 * s * s) for _, q, s, c in poisson))
        if eta_at_one > 0:
            sigma0 = eta_at_one / _tan_eta_for_epsilon(target, delta)
    low, high = sigma_bounds
    tail_floored = False
    if noise_reach is not None:  # below the tail's floor no epsilon holds: the search starts there
        floor = _tail_floor(build_event, delta, noise_reach, low, high)
        if floor is not None and floor * (1.0 + 1e-9) > low:
            low, tail_floored = floor * (1.0 + 1e-9), True
    levels = _ladder_levels(accountant, medium=True)

    def too_large_target(sigma: float, eps: float, how: str, why: str) -> UserInputError:
        return UserInputError(
            f"target epsilon {target:g} at delta {delta:g} is met by noise multipliers below {sigma:.4g} ({how} "
            f"gives epsilon {eps:.4g} there), {why}; a guarantee this weak protects no one: lower the target, "
            f"or set the noise multiplier yourself."
        )

    try:
        ladder = _Ladder(evaluate, target, increasing=False, rtol=tolerance, integer=False, bounds=(low, high))
        best = _run_ladder(ladder, levels, min(max(sigma0, low), high), certify=certify_minimal)
    except PldGridTooLargeError:
        # The root lies at a sigma so small that the PLD of record would not fit: find where it stops
        # fitting, and decide on which side of that floor the root is with the 10x coarser PLD.
        floor = _grid_floor(build_event, low, high)
        if floor is None:
            raise
        floor = floor * (1.0 + 1e-9)
        coarse: _Level = ("pld", _PLD_MEDIUM_DISCRETIZATION)
        eps_floor = _epsilon_with_tail(build_event(floor), delta, coarse, noise_reach)
        why = (
            f"where PLD accounting would need more than {PLD_MAX_GRID_POINTS:,} grid points at discretization "
            f"{PLD_DISCRETIZATION:g}"
        )
        if eps_floor <= target:
            raise too_large_target(
                floor, eps_floor, f"PLD at discretization {_PLD_MEDIUM_DISCRETIZATION:g}", why
            ) from None
        low = floor
        try:
            ladder = _Ladder(evaluate, target, increasing=False, rtol=tolerance, integer=False, bounds=(low, high))
            best = _run_ladder(ladder, levels, min(max(sigma0, low), high), certify=certify_minimal)
        except PldGridTooLargeError:
            best = None
        if best is None or best.param <= low * (1.0 + tolerance):
            raise UserInputError(
                f"target epsilon {target:g} at delta {delta:g} needs a noise multiplier close to "
                f"{floor:.4g} or below, {why}; lower the target, or set the noise multiplier "
                f"yourself."
            ) from None
    if best is None:
        raise UserInputError(
            f"no noise multiplier up to {high:g} reaches epsilon {target:g} at "
            f"delta {delta:g}; raise the target or lower the sampling rate or steps."
        )
    if best.param <= low * (1.0 + tolerance) and not tail_floored:
        # (at the tail's floor the answer is that floor: the least noise under which any epsilon holds, its epsilon
        # within the target; a short-reach sampler gets more noise, not a refusal)
        raise too_large_target(
            best.param,
            _epsilon_with_tail(build_event(best.param), delta, final_level, noise_reach),
            accountant.upper(),
            f"the lower end of the search ({low:g})",
        )
    return best.param


def max_steps(
    *,
    sampling_probability: float,
    noise_multiplier: float,
    target_epsilon: float,
    delta: float,
    accountant: Accountant = "pld",
    preceding: Sequence[Segment] = (),
    tolerance: float = 1e-3,
    limit: int = 10**9,
    noise_reach: float | None = None,
) -> int:
    """Largest number of steps of one mechanism, after `preceding` segments, within the budget.

    The returned count is certified (its epsilon by the accountant of record is <= target) and is
    within `tolerance` (relative, at least one step) of the largest such count. 0 if not even one
    step fits; `limit` if that many fit. ``noise_reach``: epsilon at delta minus the sampler's tail figure
    of those steps (:func:`calibrate_noise`).
    """
    _check_accountant(accountant)
    target, delta, tolerance = _check_target(target_epsilon, delta, tolerance)
    step = Segment(steps=1, sampling_probability=sampling_probability, noise_multiplier=noise_multiplier)
    preceding = list(preceding)

    def evaluate(steps: float, level: _Level) -> float:
        return _epsilon_with_tail(schedule_event([*preceding, step.with_steps(int(steps))]), delta, level, noise_reach)

    eta_t = _tan_eta_for_epsilon(target, delta)
    s0 = 2.0 * (eta_t * step.noise_multiplier / step.sampling_probability) ** 2 if step.noise_multiplier else 1.0
    s0 = min(max(s0, 1.0), float(limit))
    ladder = _Ladder(evaluate, target, increasing=True, rtol=tolerance, integer=True, bounds=(1.0, float(limit)))
    # Single steps are cached, so the accountant of record is cheap here: no medium rung needed.
    best = _run_ladder(ladder, _ladder_levels(accountant, medium=False), s0, certify=False)
    return 0 if best is None else int(best.param)


def max_batch_size(
    *,
    dataset_size: int,
    steps: int,
    noise_multiplier: float,
    target_epsilon: float,
    delta: float,
    accountant: Accountant = "pld",
    tolerance: float = 1e-3,
    noise_reach: float | None = None,
) -> int:
    """Largest expected batch size B (q = B / N) for `steps` steps at sigma within the budget.

    Certified like :func:`max_steps`; 0 if not even B = 1 fits, N if everything fits. ``noise_reach``: epsilon
    at delta minus the sampler's tail figure (:func:`calibrate_noise`).
    """
    _check_accountant(accountant)
    target, delta, tolerance = _check_target(target_epsilon, delta, tolerance)
    n = _require_int("dataset_size", dataset_size, 1)
    Segment(steps=steps, sampling_probability=1.0, noise_multiplier=noise_multiplier)  # validates the rest

    def evaluate(batch: float, level: _Level) -> float:
        event = dpsgd_event(noise_multiplier=noise_multiplier, sampling_probability=int(batch) / n, steps=steps)
        return _epsilon_with_tail(event, delta, level, noise_reach)

    sigma = noise_multiplier
    b0 = n * _tan_eta_for_epsilon(target, delta) * sigma * math.sqrt(2.0 / steps) if sigma else 1.0
    b0 = min(max(b0, 1.0), float(n))
    ladder = _Ladder(evaluate, target, increasing=True, rtol=tolerance, integer=True, bounds=(1.0, float(n)))
    best = _run_ladder(ladder, _ladder_levels(accountant, medium=True), b0, certify=False)
    return 0 if best is None else int(best.param)
