"""Testing a claimed mechanism itself: its trade-off curve, and audits against it.

An (epsilon, delta) claim printed by a trainer is one point of a whole privacy profile delta(epsilon)
that the accountant computed for the mechanism that ran (Poisson-subsampled Gaussian steps). By
Dong, Roth & Su (2022, Prop. 2.12) a mechanism that is (epsilon, delta(epsilon))-DP for every epsilon
is f-DP for the symmetric trade-off curve

    f(alpha) = max(0, sup_eps 1 - delta(eps) - e^eps alpha, sup_eps e^-eps (1 - delta(eps) - alpha)),

the least type II error of any test at type I error alpha. :class:`TradeOff` builds f from finitely
many profile points; with deltas that over-state the profile (dp_accounting's pessimistic PLD) the
curve is never above the mechanism's, so rejecting it rejects the claim.

Two audits test a claimed curve, and from a family of curves give a lower bound:

- one run (:func:`one_run_margin`): the recursion of Mahloujifar, Melis & Chaudhuri (2024, "Auditing
  f-differential privacy in one run") for guesses with abstentions on coin-flip canaries, with f the
  claimed curve instead of a Gaussian one (their theorem holds for any f). jax-privacy implements it
  for the Gaussian family; :mod:`dpaudit.audit.one_run` uses :func:`one_run_margin` for that family too;
- many runs (:func:`point_rejects`): a threshold's (FPR, FNR), each bounded above by Clopper-Pearson,
  that lies below f is impossible under f-DP (Nasr et al. 2023 audit the Gaussian family this way).

A lower bound over a family M(s) of mechanisms (the claimed one at s = 1; :mod:`dpaudit.whitebox`
scales every step's noise multiplier by s) is the epsilon of the least private member the evidence
rejects: valid as a proof of "epsilon is at least this" for mechanisms of that family, and exactly a
test of the claim when it exceeds the claimed epsilon (the claim, s = 1, is then rejected).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["TradeOff", "one_run_margin", "point_rejects"]

#: Alphas evaluated at once by :meth:`TradeOff.__call__` (x profile points x 8 bytes per temporary).
CHUNK = 16_384


class TradeOff:
    """The symmetric trade-off curve of a privacy profile given at finitely many points.

    Args:
        epsilons: profile points (>= 0).
        deltas: delta(epsilon) at each point, upper bounds (then f is a valid lower curve).
    """

    def __init__(self, epsilons: ArrayLike, deltas: ArrayLike) -> None:
        eps = np.asarray(epsilons, dtype=np.float64).ravel()
        delta = np.asarray(deltas, dtype=np.float64).ravel()
        if eps.shape != delta.shape or eps.size == 0 or (eps < 0).any() or ((delta < 0) | (delta > 1)).any():
            raise ValueError(
                "epsilons and deltas must be non-empty arrays of one length, epsilons >= 0, deltas in [0, 1]."
            )
        self.epsilons, self.deltas = eps, delta
        self._up, self._down = np.exp(eps), np.exp(-eps)

    def __call__(self, alpha: ArrayLike) -> NDArray[np.float64]:
        """f(alpha): the smallest type II error a test of type I error alpha can have (in chunks of
        :data:`CHUNK` values, so that memory stays linear in the number of alphas: a pooled audit evaluates
        millions of them)."""
        a = np.clip(np.asarray(alpha, dtype=np.float64), 0.0, 1.0)
        flat, out = a.ravel(), np.empty(a.size)
        for start in range(0, flat.size, CHUNK):
            x = flat[start : start + CHUNK, None]
            lines = np.maximum(1 - self.deltas - self._up * x, self._down * (1 - self.deltas - x))
            out[start : start + CHUNK] = lines.max(axis=-1)
        return np.maximum(out, 0.0).reshape(a.shape)

    def blow_up_inverse(self, y: float) -> float:
        """sup {x : 1 - f(x) <= y}: the inverse of the blow-up x -> 1 - f(x) the one-run recursion uses.

        Exact for a maximum of lines: {x : f(x) >= 1 - y} is the union of each line's half-line.
        """
        if y >= 1.0:
            return 1.0
        c = 1.0 - y
        reach = np.maximum((1 - self.deltas - c) * self._down, 1 - self.deltas - c * self._up)
        return float(np.clip(reach.max(), 0.0, 1.0))


def one_run_margin(blow_up_inverse: Callable[[float], float], m: int, r: int, v: int, alpha: float) -> float:
    """Positive when v correct of r guesses on m coin-flip canaries reject f-DP at significance alpha.

    Mahloujifar, Melis & Chaudhuri (2024), the audit with abstentions ("audit_rh_with_cap" in their
    paper, as jax-privacy implements it): start from r_v = alpha v / m and h_v = alpha (r - v) / m; for
    i = v-1, ..., 0, h_i = max(h_{i+1}, B^{-1}(r_{i+1})) with B^{-1} the inverse of the blow-up
    x -> 1 - f(x), and r_i = r_{i+1} + i / (r - i) (h_i - h_{i+1}) (capped at 1). The claim is rejected
    when r_0 + h_0 > r / m. Once h stops growing it never grows again, so the loop stops there.
    """
    rr = alpha * v / m
    h = alpha * (r - v) / m
    for i in range(v - 1, -1, -1):  # a scalar recurrence over guesses, not over examples
        inv = blow_up_inverse(rr)
        if inv <= h:
            break
        rr = min(rr + i / (r - i) * (inv - h), 1.0)
        h = inv
    return rr + h - r / m


def point_rejects(curve: TradeOff, fpr_upper: float, fnr_upper: float) -> bool:
    """Whether a test with type I error at most ``fpr_upper`` and type II error at most ``fnr_upper``
    is impossible under ``curve``-DP (the point lies below the curve)."""
    return bool(fnr_upper < curve(fpr_upper))
