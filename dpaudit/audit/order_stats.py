"""The order-statistics one-run bound of Xiang, Wang, Xiao, Tian & Wang (2025, "Tight Privacy Audit in One Run",
arXiv 2509.08704): guess every canary, release only the r most confident guesses, count the mistakes.

The game: n canaries, each included by an independent fair coin; one run; the auditor guesses every membership bit
(a function of the run's output) with a confidence, releases the r guesses of highest confidence (r fixed before the
run) and counts T, the mistakes among them. Under an f-DP mechanism T is stochastically no smaller than in the ideal
game where every canary's output is an independent draw of the f-DP channel (P, Q) decoded by the optimal (MAP)
rule, and in that game T has an exact law:

    P[T <= u] = E_W[ BinCDF(u; r, gbar(W)) ],   W ~ Beta(n - r, r + 1),

where W is the confidence quantile of the cut (the (n - r)-th of n uniform order statistics), gbar(w) = G(w) / (1 - w)
the mean error of the outcomes above it, G(w) = integral from w to 1 of gamma, and gamma = 1 / (1 + e^{|log dQ/dP|})
the MAP decoder's error at an outcome, taken under (P + Q) / 2 (given the cut, the r released canaries are i.i.d. on
the quantiles above it, so their mistakes are Binomial(r, gbar(W))).

Derivation of the error profile from a symmetric trade-off curve f (docs/auditing.md, "Order statistics"): the
outcomes with |log-likelihood ratio| above c are the two tails of the Neyman-Pearson test at type I error a (and its
mirror image); they hold mass s(a) = a + 1 - f(a) of (P + Q) / 2 and error mass E(a) = a (the smaller density over
the tails). So the top s of the confidence order has mean error gbar = E / s, a from 0 to the curve's fixed point
f(a) = a (where s = 1 and E is the MAP error). E is convex in s (dE/ds = 1 / (1 - f'(a)) grows with a), so gbar
grows with s, and the integrand BinCDF(u; r, gbar(w)) grows with w: the upper Riemann sum over equal-probability
quantiles of W bounds the expectation above by at most 1 / :data:`QUADRATURE` (an over-stated p-value: conservative).

The bound: the largest parameter theta of a null family whose p-value P_theta[T <= u_obs] is below 1 - confidence.
Three families, each saying what it holds for:

- ``(epsilon, delta)``: the channel of (epsilon, delta)-DP (with probability delta the bit is revealed, else
  randomized response): E(s) = max(0, s - delta) / (1 + e^epsilon), exact. Valid for ANY mechanism;
- ``mu-GDP``: f(a) = Phi(Phi^{-1}(1 - a) - mu): refutes mu-GDP, read as epsilon at delta: Gaussian mechanisms only;
- the claimed mechanism's curve with every sigma scaled (:func:`dpaudit.audit.claim_curves.lower_bound`): rejecting
  scale 1 refutes the claim; the number is a bound for mechanisms of the claimed form.

The error profile of a curve is bounded below from a finite grid of a (step-wise: gbar at the grid point below), so a
discretized curve never makes a p-value smaller than the curve's own.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.special
from numpy.typing import ArrayLike, NDArray

from dpaudit.audit.checks import _check_unit, _scores
from dpaudit.audit.claim_curves import FamilyBound, StatedMechanism, first_true, lower_bound
from dpaudit.audit.gdp import gdp_epsilon
from dpaudit.audit.tradeoff import TradeOff

__all__ = [
    "FAMILY_CLAIM",
    "FAMILY_DP",
    "FAMILY_GDP",
    "GUARANTEE_CLAIM_ORDER",
    "MOST_CANARIES",
    "QUADRATURE",
    "DpProfile",
    "ErrorProfile",
    "OrderStatsBound",
    "canaries_needed",
    "ceiling",
    "curve_profile",
    "dp_profile",
    "family_bound",
    "fewest_on_grid",
    "gdp_profile",
    "order_stats_bound",
    "pvalue",
    "released_mistakes",
]

#: Equal-probability quantiles of the cut W the p-value sums over (its upper Riemann sum over-states it by <= 1/this).
QUADRATURE = 2048
#: Points of a curve's error profile (type I errors a, geometric from the fixed point down to 1e-15 of it).
PROFILE_POINTS = 3000
#: The most canaries a canaries-needed search tries (None beyond: "no perfect attack on up to this many proves it").
MOST_CANARIES = 10**8
#: A fixed seed for breaking ties in confidence (the order of the canaries' arrays must not decide: it holds the coins).
TIE_SEED = 20250910

FAMILY_DP = "(epsilon, delta)"
FAMILY_GDP = "mu-GDP"
FAMILY_CLAIM = "claim"
#: What an order-statistics bound against the claimed curve refutes.
GUARANTEE_CLAIM_ORDER = "the claimed mechanism's trade-off curve (the figure: mechanisms of the claimed form)"


@dataclass(frozen=True)
class ErrorProfile:
    """The MAP decoder's error profile of a channel: ``error[i]`` is the error mass E of the top ``mass[i]`` of
    outcomes by confidence (both increasing, ``mass[-1] == 1``). :meth:`mean_error` reads gbar from it, never above
    the channel's own."""

    mass: NDArray[np.float64]
    error: NDArray[np.float64]

    def mean_error(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        """gbar at top masses ``s`` (a lower bound: gbar grows with s, so the grid point at or below s is used)."""
        s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
        i = np.searchsorted(self.mass, s, side="right") - 1
        ok = i >= 0
        out = np.zeros(s.shape)
        j = i[ok]
        out[ok] = self.error[j] / np.maximum(self.mass[j], 1e-300)
        return np.clip(out, 0.0, 0.5)


@dataclass(frozen=True)
class DpProfile:
    """The (epsilon, delta) channel's profile, exact: with probability delta the bit is revealed (the top delta of
    the confidence order, error-free), else randomized response (error 1 / (1 + e^epsilon))."""

    epsilon: float
    delta: float

    def mean_error(self, s: NDArray[np.float64]) -> NDArray[np.float64]:
        s = np.clip(np.asarray(s, dtype=np.float64), 0.0, 1.0)
        gamma = float(scipy.special.expit(-self.epsilon))
        return np.asarray(gamma * np.maximum(s - self.delta, 0.0) / np.maximum(s, 1e-300), dtype=np.float64)


#: A channel's error profile: anything that reads gbar at top masses.
Profile = ErrorProfile | DpProfile


def dp_profile(epsilon: float, delta: float) -> DpProfile:
    """The (epsilon, delta) channel's profile."""
    return DpProfile(float(epsilon), float(delta))


def _profile_of(f: Callable[[NDArray[np.float64]], NDArray[np.float64]]) -> ErrorProfile:
    """The profile of a symmetric trade-off curve ``f`` (vectorized): s(a) = a + 1 - f(a), E(a) = a for a from 0 to
    the fixed point f(a) = a (module docstring)."""
    lo, hi = 0.0, 0.5
    for _ in range(60):  # f(a) - a decreases from f(0) >= 0 to f(1/2) - 1/2 <= 0
        mid = 0.5 * (lo + hi)
        if float(f(np.array([mid]))[0]) > mid:
            lo = mid
        else:
            hi = mid
    star = lo  # f(star) >= star: s(star) <= 1, a point of the curve itself
    a = np.concatenate([[0.0], star * np.geomspace(1e-15, 1.0, PROFILE_POINTS)])
    s = np.maximum.accumulate(np.clip(a + 1.0 - f(a), 0.0, 1.0))
    mass = np.concatenate([s, [1.0]])
    error = np.concatenate([a, [a[-1]]])  # the last sliver (s(star) to 1, <= 2^-60 wide): E no less than at star
    error = np.minimum(error, 0.5 * mass)
    return ErrorProfile(mass=mass, error=error)


@functools.lru_cache(maxsize=512)
def gdp_profile(mu: float) -> ErrorProfile:
    """The mu-GDP channel's profile (P = N(0, 1), Q = N(mu, 1))."""
    return _profile_of(lambda a: scipy.special.ndtr(-scipy.special.ndtri(a) - mu))


@functools.lru_cache(maxsize=512)
def curve_profile(curve: TradeOff) -> ErrorProfile:
    """The profile of a claimed curve (:class:`~dpaudit.audit.tradeoff.TradeOff`; cached per curve object, and the
    curves of a claim are cached by :mod:`dpaudit.audit.claim_curves`)."""
    return _profile_of(curve)


@functools.lru_cache(maxsize=256)
def _cut_quantiles(n: int, r: int) -> NDArray[np.float64]:
    """The top masses 1 - w_k at the equal-probability quantiles w_k = F^{-1}(k / K), k = 1..K, of W ~ Beta(n - r, r + 1)
    (K = :data:`QUADRATURE`; 1 - W ~ Beta(r + 1, n - r) is computed directly, exact near 0)."""
    k = np.arange(1, QUADRATURE + 1) / QUADRATURE
    return np.asarray(scipy.special.betaincinv(r + 1, n - r, 1.0 - k), dtype=np.float64)


def pvalue(profile: Profile, n: int, r: int, mistakes: ArrayLike) -> NDArray[np.float64]:
    """P[T <= u] for each u in ``mistakes`` under the channel of ``profile``, r of n guesses released (an upper bound,
    within 1 / :data:`QUADRATURE`)."""
    u = np.atleast_1d(np.asarray(mistakes, dtype=np.float64))
    if r == n:
        g = profile.mean_error(np.array([1.0]))
        return np.asarray(scipy.special.bdtr(u, r, g[0]), dtype=np.float64)
    g = profile.mean_error(_cut_quantiles(n, r))  # (K,)
    cdf = scipy.special.bdtr(u[:, None], r, g[None, :])  # (len(u), K)
    return np.asarray(np.minimum(cdf.mean(axis=1), 1.0), dtype=np.float64)


def released_mistakes(
    member: NDArray[np.float64], nonmember: NDArray[np.float64], r: int, center: float
) -> tuple[int, int]:
    """(member guesses, mistakes) among the r most confident guesses: "member" iff score > ``center``, confidence
    |score - center|; ties in confidence broken by a fixed random order (independent of the coins)."""
    scores = np.concatenate([member, nonmember])
    truth = np.concatenate([np.ones(member.size, bool), np.zeros(nonmember.size, bool)])
    tie = np.random.default_rng(TIE_SEED).random(scores.size)
    order = np.lexsort((tie, -np.abs(scores - center)))[:r]
    guess = scores[order] > center
    return int(guess.sum()), int((guess != truth[order]).sum())


def _largest_rejected(reject: Callable[[float], bool], hi: float) -> float:
    """The largest theta in [0, hi] ``reject`` rejects (reject is monotone: rejected below, not above); 0 if none."""
    if not reject(1e-9):
        return 0.0
    if reject(hi):
        return hi
    lo = 1e-9
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if reject(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-6 * max(1.0, hi):
            break
    return lo


@dataclass(frozen=True)
class OrderStatsBound:
    """One order-statistics bound: ``epsilon`` at ``delta``, the ``family`` it was found in (``theta``: its largest
    rejected parameter: epsilon, mu, or the claim's noise scale), and the test (n, r released, ``mistakes``)."""

    family: str
    epsilon: float
    delta: float
    confidence: float
    n: int
    r: int
    mistakes: int
    theta: float | None
    capped: bool = False

    @property
    def holds_for(self) -> str:
        return {
            FAMILY_DP: "any mechanism",
            FAMILY_GDP: "Gaussian mechanisms (mu-GDP)",
            FAMILY_CLAIM: "mechanisms of the claimed form",
        }[self.family]


#: The largest epsilon / mu an (epsilon, delta) or mu-GDP search tries.
MAX_EPSILON = 50.0
MAX_MU = 30.0


def _test(n: int, r: int, u: int, alpha: float) -> Callable[[Profile], bool]:
    return lambda profile: bool(pvalue(profile, n, r, [u])[0] < alpha)


def family_bound(
    n: int,
    r: int,
    u: int,
    *,
    family: str,
    delta: float,
    alpha: float,
    claim: StatedMechanism | None = None,
    min_scale: float | None = None,
) -> tuple[float, float | None, bool]:
    """(epsilon at ``delta``, the largest rejected parameter or None, capped) of u mistakes among r of n released."""
    rejects = _test(n, r, u, alpha)
    if family == FAMILY_DP:
        eps = _largest_rejected(lambda e: rejects(dp_profile(e, delta)), MAX_EPSILON)
        return eps, (eps if eps > 0 else None), eps >= MAX_EPSILON
    if family == FAMILY_GDP:
        mu = _largest_rejected(lambda m: rejects(gdp_profile(round(m, 9))), MAX_MU)
        return (gdp_epsilon(mu, delta) if mu > 0 else 0.0), (mu if mu > 0 else None), mu >= MAX_MU
    if family == FAMILY_CLAIM:
        if claim is None:
            raise ValueError("the claim family needs the claim.")
        found: FamilyBound = lower_bound(claim, lambda c: rejects(curve_profile(c)), min_scale=min_scale)
        return found.epsilon, found.scale, found.capped
    raise ValueError(f"unknown family {family!r}: {FAMILY_DP!r}, {FAMILY_GDP!r} or {FAMILY_CLAIM!r}.")


def order_stats_bound(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    r: int,
    center: float,
    family: str,
    delta: float,
    confidence: float = 0.95,
    claim: StatedMechanism | None = None,
    min_scale: float | None = None,
) -> OrderStatsBound:
    """The order-statistics lower bound of one run's coin-flip canaries (module docstring).

    Args:
        member_scores, nonmember_scores: the canaries' scores (higher: more likely a member).
        r: guesses released, fixed before the scores were seen.
        center: guesses are "member" above it; confidence is the distance from it (fixed before the scores were
            seen, or a function of all the scores together: any function of the run's output keeps the bound valid).
        family: :data:`FAMILY_DP` (any mechanism), :data:`FAMILY_GDP` or :data:`FAMILY_CLAIM` (with ``claim``).
        delta: the delta the epsilon is read at (the (epsilon, delta) family's delta).
        confidence: e.g. 0.95.
        min_scale: the claim family's least noise scale searched (a ceiling's).
    """
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    confidence = _check_unit(confidence, "confidence")
    n = member.size + nonmember.size
    if not 1 <= r <= n:
        raise ValueError(f"r = {r} guesses released do not fit {n} canaries.")
    _, u = released_mistakes(member, nonmember, r, center)
    eps, theta, capped = family_bound(
        n, r, u, family=family, delta=delta, alpha=1 - confidence, claim=claim, min_scale=min_scale
    )
    return OrderStatsBound(
        family=family,
        epsilon=float(max(0.0, eps)),
        delta=delta,
        confidence=confidence,
        n=n,
        r=r,
        mistakes=u,
        theta=theta,
        capped=capped,
    )


def ceiling(
    n: int,
    r: int,
    *,
    family: str,
    delta: float,
    confidence: float,
    claim: StatedMechanism | None = None,
    min_scale: float | None = None,
) -> float:
    """The bound of a perfect attack (no mistake among the r released of n): the most this test can prove."""
    eps, _, _ = family_bound(
        n, r, 0, family=family, delta=delta, alpha=1 - confidence, claim=claim, min_scale=min_scale
    )
    return eps


def canaries_needed(null: Profile, *, confidence: float, fraction: float, most: int = MOST_CANARIES) -> int | None:
    """The fewest canaries n (on a grid of 2^(k/4)) whose perfect attack, releasing ``fraction`` of them, rejects the
    ``null`` channel (the claim's: its (epsilon, delta), its mu, or its curve) at ``confidence``; None when even
    ``most`` do not."""
    alpha = 1 - confidence

    def proves(n: int) -> bool:
        r = max(1, min(n, round(fraction * n)))
        return bool(pvalue(null, n, r, [0])[0] < alpha)

    return fewest_on_grid(proves, smallest=2, most=most)


def fewest_on_grid(proves: Callable[[int], bool], *, smallest: int, most: int, monotone: bool = True) -> int | None:
    """The fewest canaries n on the grid 2^(k/4) from ``smallest`` to ``most`` for which ``proves(n)``, None when no
    grid point up to ``most`` does: the canaries-needed search of every bound. A ``monotone`` test (false, then true
    from some n on) is bisected: its answer proves and the grid point below it does not. Otherwise the grid is walked
    up from ``smallest``: the answer proves and no smaller grid point does (for a test that is cheap per point, or not
    monotone: Steinke et al.'s perfect attack, whose delta term grows with the canaries, proves a claim on a range of
    sizes and none beyond it)."""
    start = int(round(4 * math.log2(smallest)))
    grid = sorted({int(round(2 ** (k / 4))) for k in range(start, int(4 * math.log2(most)) + 1)})
    if not monotone:
        return next((n for n in grid if proves(n)), None)
    if not proves(grid[-1]):
        return None
    return grid[first_true(lambda i: proves(grid[i]), -1, len(grid) - 1)]
