"""The Gaussian-pair one-run bound (:mod:`dpaudit.audit.gauss_pair`) is valid at its confidence where it says so.

500 audits of coin-flip canaries per mechanism are simulated at once (numpy: the canaries' projections, not
trainings); each audit's bound is compared with the truth, and the exceedance count passes when its one-sided
Clopper-Pearson 95% upper limit is at most 5%.

- the Gaussian mechanism (projections N(0, 1) and N(2, 1): a Gaussian pair, the form the bound holds for);
- Poisson-subsampled Gaussians of claims (the white-box audit's q = 0.9 over 4 steps, at sigma 4 where the fit comes
  closest to the truth, and q = 0.5 over 8 steps at sigma 1.2): the projection is a mixture, not a pair; both
  projections the white-box audit reads (each canary's summed observations, and the likelihood ratio over steps)
  against the claim's true epsilon;
- randomized response and the Laplace mechanism, each more private than the q = 0.5 claim (another form): the bound is
  not a bound for them (test_not_a_bound_for_other_forms shows it), and the check is the one a form-restricted bound
  owes: it does not refute the claim (exceed the claim's epsilon).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
import scipy.stats

from dpaudit.audit import gauss_pair as gp
from dpaudit.audit.gdp import gdp_epsilon
from dpaudit.claim import Claim
from tests.claims import poisson_claim

ALPHA = 0.05
DELTA = 1e-5
TRIALS = 500


def _claim(q: float, steps: int, sigma: float) -> Claim:
    return poisson_claim(q, steps, sigma, epsilon=1.0, delta=DELTA)  # epsilon not read: the truth is the curve's own


MU = 2.0
TIGHT = _claim(0.9, 4, 4.0)
SUBSAMPLED = _claim(0.5, 8, 1.2)
#: Randomized response and Laplace more private than SUBSAMPLED: epsilon 0.8 each (its curve's fixed point is at
#: a = 0.30, randomized response's at expit(-0.8) = 0.31: above the claim's convex curve; Laplace's curve is above
#: randomized response's of the same epsilon).
OTHER_EPSILON = 0.8


def _cp_upper(k: int, n: int, level: float = 0.95) -> float:
    return 1.0 if k == n else float(scipy.stats.beta.ppf(level, k + 1, n - k))


def _bounds(coins: np.ndarray, scores: np.ndarray) -> np.ndarray:
    return np.array(
        [gp.gauss_pair_bound(s[c], s[~c], delta=DELTA, confidence=1 - ALPHA).epsilon for c, s in zip(coins, scores)]
    )


def _coins(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random((TRIALS, n)) < 0.5


def _observations(claim: Claim, coins: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(steps, audits, canaries) observations of the claim's DP-SGD canaries (shift 1 when sampled), and std."""
    q, std = claim.per_step()
    sampled = rng.random((q.size, *coins.shape)) < q[:, None, None]
    y = (coins[None] & sampled) + rng.standard_normal((q.size, *coins.shape)) * std[:, None, None]
    return y, std


def _ratio(claim: Claim, y: np.ndarray, std: np.ndarray) -> np.ndarray:
    q, _ = claim.per_step()
    log_q = np.log(q)[:, None, None]
    return np.logaddexp(np.log1p(-q)[:, None, None], log_q + (2 * y - 1) / (2 * std**2)[:, None, None]).sum(axis=0)


def _gaussian(rng):
    coins = _coins(rng, 1000)
    return coins, coins * MU + rng.standard_normal(coins.shape), gdp_epsilon(MU, DELTA)


def _subsampled(claim: Claim, n: int, projection: str):
    def simulate(rng):
        coins = _coins(rng, n)
        y, std = _observations(claim, coins, rng)
        scores = y.sum(axis=0) if projection == "sum" else _ratio(claim, y, std)
        return coins, scores, claim.epsilon_at(1.0)

    return simulate


def _randomized_response(rng):
    coins = _coins(rng, 1000)
    keep = rng.random(coins.shape) < scipy.special.expit(OTHER_EPSILON)
    return coins, np.where(keep, coins, ~coins).astype(float), SUBSAMPLED.epsilon_at(1.0)


def _laplace(rng):
    coins = _coins(rng, 1000)
    return coins, coins + rng.laplace(0.0, 1 / OTHER_EPSILON, coins.shape), SUBSAMPLED.epsilon_at(1.0)


SIMULATE = {
    "gaussian": _gaussian,
    "subsampled-tight-sum": _subsampled(TIGHT, 3000, "sum"),
    "subsampled-tight-ratio": _subsampled(TIGHT, 2000, "ratio"),
    "subsampled-sum": _subsampled(SUBSAMPLED, 1000, "sum"),
    "subsampled-ratio": _subsampled(SUBSAMPLED, 1000, "ratio"),
    "randomized-response (the claim)": _randomized_response,
    "laplace (the claim)": _laplace,
}


@pytest.mark.parametrize("mechanism", list(SIMULATE))
def test_the_bound_exceeds_the_truth_in_at_most_5_percent(mechanism):
    coins, scores, truth = SIMULATE[mechanism](np.random.default_rng(20260612))
    bounds = _bounds(coins, scores)
    k = int((bounds > truth).sum())
    up = _cp_upper(k, TRIALS)
    print(f"{mechanism}: {k}/{TRIALS} above {truth:.3f} (CP 95% upper {up:.4f}); median bound {np.median(bounds):.3f}")
    assert up <= ALPHA, (k, up)
    assert np.median(bounds) > 0  # not vacuous: every mechanism here gives a positive bound


def test_the_count_can_fail():
    """A truth 25% below the Gaussian's is exceeded by far more than 5% of the same audits' bounds (at 1,000
    canaries the bound's median is about 0.85 of mu: the intervals' price)."""
    coins, scores, _ = _gaussian(np.random.default_rng(3))
    k = int((_bounds(coins, scores) > gdp_epsilon(0.75 * MU, DELTA)).sum())
    assert float(scipy.stats.beta.ppf(0.05, k, TRIALS - k + 1)) > 0.5, k  # CP 95% lower limit


def test_not_a_bound_for_other_forms():
    coins, scores, _ = _randomized_response(np.random.default_rng(5))
    bounds = _bounds(coins[:50], scores[:50])
    assert (bounds > OTHER_EPSILON).all(), bounds  # a +-1 bit's Gaussian fit reads far more than its epsilon


def test_the_bound_is_tight_on_the_gaussian_and_rounded_down():
    rng = np.random.default_rng(11)
    coins = rng.random(100_000) < 0.5
    s = coins * MU + rng.standard_normal(coins.size)
    found = gp.gauss_pair_bound(s[coins], s[~coins], delta=DELTA)
    assert 0.97 * MU < found.mu < MU and found.epsilon <= gdp_epsilon(found.mu, DELTA)
    assert found.epsilon > 0.95 * gdp_epsilon(MU, DELTA) and found.holds_for == gp.GUARANTEE_GAUSS_PAIR
    # reversed roles (members lower) prove nothing: the sign is fixed in advance
    assert gp.gauss_pair_bound(s[~coins], s[coins], delta=DELTA).epsilon == 0.0


def test_the_ceiling_and_the_canaries_needed():
    cap = gp.ceiling(delta=DELTA)
    assert cap == pytest.approx(gdp_epsilon(gp.MAX_MU, DELTA), abs=1e-6) and cap < gdp_epsilon(gp.MAX_MU, DELTA)
    target = gdp_epsilon(1.5, DELTA)
    n = gp.canaries_needed(target, delta=DELTA, confidence=0.95, mu=1.6)
    assert n is not None
    fewer = int(round(n / 2**0.25))
    assert (
        gp.expected_mu(1.6, n - n // 2, n // 2, ALPHA)
        >= 1.5
        > gp.expected_mu(1.6, fewer - fewer // 2, fewer // 2, ALPHA)
    )
    assert gp.canaries_needed(target, delta=DELTA, confidence=0.95, mu=1.4) is None  # below the truth: never
    assert gp.canaries_needed(target, delta=DELTA, confidence=0.95) <= 16  # a perfect attack: a handful
    assert math.isfinite(cap)


def test_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        gp.gauss_pair_bound([1.0], [0.0, 1.0], delta=DELTA)
    with pytest.raises(ValueError, match="delta"):
        gp.gauss_pair_bound([1.0, 2.0], [0.0, 1.0], delta=0.0)


@pytest.mark.parametrize("sigma", [4.0, 1.2])
def test_at_many_canaries_the_fit_of_a_subsampled_claim_stays_below_its_epsilon(sigma):
    """The estimation error shrinks with the canaries; what is left is the fit's own bias, which must stay below the
    truth: 200,000 canaries of the white-box audit's q = 0.9 over 4 steps, both projections."""
    claim = _claim(0.9, 4, sigma)
    rng = np.random.default_rng(7)
    coins = rng.random((1, 200_000)) < 0.5
    y, std = _observations(claim, coins, rng)
    truth = claim.epsilon_at(1.0)
    for scores in (y.sum(axis=0)[0], _ratio(claim, y, std)[0]):
        found = gp.gauss_pair_bound(scores[coins[0]], scores[~coins[0]], delta=DELTA)
        assert 0.6 * truth < found.epsilon < truth, (sigma, found.epsilon, truth)
