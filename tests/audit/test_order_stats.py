"""The order-statistics one-run bound (:mod:`dpaudit.audit.order_stats`) is valid at its confidence.

Each mechanism's epsilon is known; 600 audits of 1,000 coin-flip canaries each are simulated at once (numpy), and
for each null family the test counts the audits whose bound exceeds the truth. A bound exceeds the true parameter
exactly when the true parameter's p-value is below alpha (the p-value falls as the parameter grows), so the count is
read from the p-values at the truth (one vectorized call), and :func:`test_the_bound_search_agrees_with_the_pvalue`
checks that equivalence on the search itself. The count passes when the one-sided Clopper-Pearson interval of the
exceedance rate reaches down to 5% at 99.9% (a count above that is evidence the bound exceeds the truth more often
than 5%); the Clopper-Pearson upper limit is printed beside it.

Mechanisms: the Gaussian mechanism (mu-GDP, mu = 2); the Poisson-subsampled Gaussian of a claim (q = 0.5, 8 steps,
sigma 1.2, all-iterates likelihood-ratio scores); randomized response chosen more private than that claim (another
form: a pure-DP bit). Families: (epsilon, delta) (any mechanism), mu-GDP (Gaussian mechanisms), and the claim's
noise scaling (mechanisms of the claimed form; validity: the claim itself, scale 1, is rejected in at most 5%).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats

from dpaudit.audit import order_stats as ost
from dpaudit.audit.gdp import gdp_epsilon
from dpaudit.claim import Claim
from tests.claims import poisson_claim

ALPHA = 0.05
DELTA = 1e-5
N = 1000
TRIALS = 600
RELEASED = (100, 300, N)


def _claim(q: float, steps: int, sigma: float) -> Claim:
    return poisson_claim(q, steps, sigma, epsilon=1.0, delta=DELTA)  # epsilon not read: the truth is each curve's own


MU = 2.0
GAUSSIAN = _claim(1.0, 1, 1 / MU)
SUBSAMPLED = _claim(0.5, 8, 1.2)


def _fixed_point(curve) -> float:
    lo, hi = 0.0, 0.5
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if curve(mid) > mid else (lo, mid)
    return lo


#: Randomized response whose fixed point equals the subsampled claim's: its curve (max of two lines through that
#: point and the corners) lies above the claim's convex curve, so RR is f-DP for the claim, a mechanism of another
#: form that is more private than claimed.
RR_EPSILON = math.log((1 - _fixed_point(SUBSAMPLED.curve(1.0))) / _fixed_point(SUBSAMPLED.curve(1.0))) - 1e-6
#: ... and the mu-GDP it is more private than (the Gaussian curve through the same fixed point).
RR_MU = -2 * float(scipy.special.ndtri(float(scipy.special.expit(-RR_EPSILON))))


def _mistakes(scores: np.ndarray, coins: np.ndarray, r: int, center: float) -> np.ndarray:
    """Mistakes among the r most confident guesses of every audit (rows), ties broken by a fixed random order."""
    conf = np.abs(scores - center) + 1e-12 * np.random.default_rng(1).random(scores.shape[1])
    top = np.argsort(-conf, axis=1, kind="stable")[:, :r]
    guess = np.take_along_axis(scores, top, 1) > center
    return (guess != np.take_along_axis(coins, top, 1)).sum(axis=1)


def _gaussian(rng):
    coins = rng.random((TRIALS, N)) < 0.5
    return coins, coins * MU + rng.standard_normal((TRIALS, N)), MU / 2


def _subsampled(rng):
    q, std = SUBSAMPLED.per_step()
    coins = rng.random((TRIALS, N)) < 0.5
    sampled = rng.random((TRIALS, q.size, N)) < q[None, :, None]
    y = (coins[:, None, :] & sampled) + rng.standard_normal((TRIALS, q.size, N)) * std[None, :, None]
    # the likelihood ratio of member (shift 1 with probability q per step) against non-member, summed over steps
    ratio = np.logaddexp(
        np.log1p(-q)[None, :, None], np.log(q)[None, :, None] + (2 * y - 1) / (2 * std**2)[None, :, None]
    )
    return coins, ratio.sum(axis=1), 0.0


def _randomized_response(rng):
    coins = rng.random((TRIALS, N)) < 0.5
    keep = rng.random((TRIALS, N)) < scipy.special.expit(RR_EPSILON)
    return coins, np.where(keep, coins, ~coins).astype(float), 0.5


def _truths(mechanism: str):
    """(family, the true parameter's profile, truth's epsilon at DELTA) of each family valid for the mechanism."""
    if mechanism == "gaussian":
        eps = gdp_epsilon(MU, DELTA)
        return [
            ("mu-GDP", ost.gdp_profile(MU)),
            ("(epsilon, delta)", ost.dp_profile(eps, DELTA)),
            ("claim", ost.curve_profile(GAUSSIAN.curve(1.0))),
        ]
    if mechanism == "subsampled":
        return [
            ("(epsilon, delta)", ost.dp_profile(SUBSAMPLED.epsilon_at(1.0), DELTA)),
            ("claim", ost.curve_profile(SUBSAMPLED.curve(1.0))),
        ]
    return [
        ("(epsilon, delta)", ost.dp_profile(RR_EPSILON, DELTA)),
        ("mu-GDP", ost.gdp_profile(RR_MU)),
        ("claim", ost.curve_profile(SUBSAMPLED.curve(1.0))),
    ]


def _cp_lower(k: int, n: int, level: float) -> float:
    return 0.0 if k == 0 else float(scipy.stats.beta.ppf(1 - level, k, n - k + 1))


def _cp_upper(k: int, n: int, level: float) -> float:
    return 1.0 if k == n else float(scipy.stats.beta.ppf(level, k + 1, n - k))


SIMULATE = {"gaussian": _gaussian, "subsampled": _subsampled, "randomized-response": _randomized_response}


@pytest.mark.parametrize("mechanism", list(SIMULATE))
def test_each_bound_exceeds_the_true_epsilon_in_at_most_5_percent(mechanism):
    coins, scores, center = SIMULATE[mechanism](np.random.default_rng(20250910))
    rows = []
    for r in RELEASED:
        u = _mistakes(scores, coins, r, center)
        for family, profile in _truths(mechanism):
            k = int((ost.pvalue(profile, N, r, u) < ALPHA).sum())
            rows.append((family, r, k, _cp_lower(k, TRIALS, 0.999), _cp_upper(k, TRIALS, 0.95)))
    for family, r, k, low, up in rows:
        print(f"{mechanism} {family} r={r}: {k}/{TRIALS} exceed (CP 99.9% lower {low:.3f}, 95% upper {up:.3f})")
    assert all(low <= ALPHA for _, _, _, low, _ in rows), rows


def test_a_wrong_null_is_caught():
    """The count can fail: the same audits tested against a Gaussian 15% more private than the truth reject it in
    far more than 5% of them (so a p-value computed too small would be seen)."""
    coins, scores, center = _gaussian(np.random.default_rng(3))
    u = _mistakes(scores, coins, N, center)
    k = int((ost.pvalue(ost.gdp_profile(0.85 * MU), N, N, u) < ALPHA).sum())
    assert _cp_lower(k, TRIALS, 0.999) > ALPHA, k


def test_the_bound_search_agrees_with_the_pvalue_and_is_tight_on_the_gaussian():
    rng = np.random.default_rng(11)
    coins = rng.random(N) < 0.5
    for trial in range(4):
        s = np.where(coins, MU, 0.0) + rng.standard_normal(N)
        found = ost.order_stats_bound(s[coins], s[~coins], r=N, center=MU / 2, family="mu-GDP", delta=DELTA)
        p_true = ost.pvalue(ost.gdp_profile(MU), N, N, [found.mistakes])[0]
        assert (found.theta is not None and found.theta > MU) == (p_true < ALPHA)
        # ... and the figure is most of the truth (Steinke et al.'s bound is far below it on these canaries)
        assert found.epsilon > 0.7 * gdp_epsilon(MU, DELTA), (trial, found)
    dp = ost.order_stats_bound(s[coins], s[~coins], r=N, center=MU / 2, family="(epsilon, delta)", delta=DELTA)
    assert 0 < dp.epsilon < found.epsilon and dp.holds_for == "any mechanism"


def test_the_ceiling_is_the_perfect_attack_and_the_canaries_it_needs():
    claim = SUBSAMPLED
    target = claim.epsilon_at(1.0)
    nulls = {"(epsilon, delta)": ost.dp_profile(target, DELTA), "claim": ost.curve_profile(claim.curve(1.0))}
    for family, null in nulls.items():
        n = ost.canaries_needed(null, confidence=0.95, fraction=0.1)
        assert n is not None
        fewer = int(round(n / 2**0.25))
        assert (
            ost.pvalue(null, n, round(0.1 * n), [0])[0] < ALPHA <= ost.pvalue(null, fewer, round(0.1 * fewer), [0])[0]
        )
        # a perfect attack's bound is the ceiling (no mistake released), above the claim exactly when n suffices
        coins = np.arange(n) % 2 == 0
        s = coins.astype(float)
        kw = dict(family=family, delta=DELTA, confidence=0.95, claim=claim, min_scale=0.5)
        found = ost.order_stats_bound(s[coins], s[~coins], r=round(0.1 * n), center=0.5, **kw)
        at = ost.ceiling(n, round(0.1 * n), **kw)
        assert found.mistakes == 0 and abs(found.epsilon - at) < 1e-9 and at >= target - 1e-9
        assert ost.ceiling(fewer, round(0.1 * fewer), **kw) <= target + 0.05


@pytest.mark.parametrize("profile", [ost.dp_profile(1.0, 1e-3), ost.gdp_profile(1.0)], ids=["dp", "gdp"])
def test_the_pvalue_is_an_upper_riemann_sum_within_its_stated_slack(profile):
    """P[T <= u] = E_W[BinCDF(u; r, gbar(W))], W ~ Beta(n - r, r + 1): the quadrature never under-states it (the
    integrand grows with w, the sum takes each cell's right end) and over-states it by at most 1 / QUADRATURE. The
    reference is the LOWER Riemann sum on a 32x finer equal-probability grid (each cell's left end): at most E."""
    n, r, fine = 300, 90, 32 * ost.QUADRATURE
    left = scipy.special.betaincinv(r + 1, n - r, 1.0 - np.arange(fine) / fine)  # top masses at w = F^-1(k / K')
    g = profile.mean_error(left)
    for u in (0, 5, 15, 30):
        lower = float(scipy.special.bdtr(u, r, g).mean())
        got = float(ost.pvalue(profile, n, r, [u])[0])
        assert lower - 1e-12 <= got <= lower + 1.0 / ost.QUADRATURE, (u, lower, got)
