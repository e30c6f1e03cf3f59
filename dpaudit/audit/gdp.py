"""Gaussian differential privacy (Dong, Roth & Su 2022): the mu-GDP epsilon-delta curve and its inverses."""

from __future__ import annotations

import numpy as np
import scipy.optimize
import scipy.special
from numpy.typing import ArrayLike, NDArray

from dpaudit.audit.checks import _check_unit


def gdp_delta(epsilon: ArrayLike, mu: ArrayLike) -> NDArray[np.float64]:
    """delta(epsilon) of mu-GDP: Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (their Cor. 2.13).

    Computed in the log domain so that large epsilon does not overflow.
    """
    eps = np.asarray(epsilon, dtype=np.float64)
    mu = np.asarray(mu, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = scipy.special.log_ndtr(-eps / mu + mu / 2)
        b = eps + scipy.special.log_ndtr(-eps / mu - mu / 2)
        out = np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
    return np.where(mu > 0, np.maximum(out, 0.0), 0.0)


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest epsilon >= 0 with mu-GDP => (epsilon, delta)-DP."""
    delta = _check_unit(delta, "delta")
    if mu <= 0 or gdp_delta(0.0, mu) <= delta:
        return 0.0
    hi = 1.0
    while gdp_delta(hi, mu) > delta:
        hi *= 2
    with np.errstate(divide="ignore"):
        return float(
            scipy.optimize.brentq(lambda e: np.log(gdp_delta(e, mu)) - np.log(delta), 0.0, hi, xtol=1e-12, rtol=1e-13)
        )


def gdp_mu(epsilon: float, delta: float) -> float:
    """The mu of the Gaussian mechanism that is exactly (epsilon, delta)-DP (inverse of
    :func:`gdp_epsilon`; mu = 1 / sigma for sensitivity 1, as in Balle & Wang 2018)."""
    delta = _check_unit(delta, "delta")
    if epsilon < 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}.")
    if epsilon == 0:
        return float(2 * scipy.special.ndtri((1 + delta) / 2))
    lo, hi = 1e-3, 1.0
    while gdp_delta(epsilon, hi) < delta:
        lo, hi = hi, hi * 2
    while gdp_delta(epsilon, lo) > delta:
        lo /= 10
    with np.errstate(divide="ignore"):
        return float(
            scipy.optimize.brentq(
                lambda m: np.log(gdp_delta(epsilon, m)) - np.log(delta), lo, hi, xtol=1e-13, rtol=1e-14
            )
        )
