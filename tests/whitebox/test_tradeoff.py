"""The claimed mechanism's trade-off curve and the audits against it (:mod:`dpaudit.audit.tradeoff`)."""

from __future__ import annotations

import statistics

import dp_accounting
import numpy as np
import pytest

from dpaudit import accounting
from dpaudit.audit.gdp import gdp_delta
from dpaudit.audit.one_run import _fdp_mu
from dpaudit.audit.tradeoff import TradeOff, one_run_margin, point_rejects
from tests.claims import poisson_claim

_N = statistics.NormalDist()


def test_the_curve_of_a_gaussian_profile_is_the_gaussian_trade_off_from_below():
    mu = 1.0
    eps = np.linspace(0, 12, 2000)
    curve = TradeOff(eps, gdp_delta(eps, mu))
    for alpha in (0.001, 0.01, 0.1, 0.3, 0.5, 0.9):
        exact = _N.cdf(_N.inv_cdf(1 - alpha) - mu)
        assert exact - 1e-3 <= curve(alpha) <= exact + 1e-12  # never above: rejecting it rejects the claim
    for y in (0.01, 0.2, 0.6):  # the blow-up inverse of mu-GDP is Phi(Phi^-1(y) - mu)
        assert curve.blow_up_inverse(y) == pytest.approx(_N.cdf(_N.inv_cdf(y) - mu), abs=1e-4)


def test_the_one_run_recursion_with_the_gaussian_curve_gives_the_gaussian_bound():
    mu = _fdp_mu(1000, 200, 180, 1e-5, 0.05)  # the existing mu-GDP one-run audit
    eps = np.linspace(0, 30, 4000)
    below, above = (TradeOff(eps, gdp_delta(eps, m)) for m in (mu * 0.97, mu * 1.03))
    assert one_run_margin(below.blow_up_inverse, 1000, 200, 180, 0.05) > 0  # a weaker claim is rejected
    assert one_run_margin(above.blow_up_inverse, 1000, 200, 180, 0.05) <= 0


def test_privacy_profile_is_dp_accountings_and_a_point_below_the_curve_rejects():
    event = accounting.dpsgd_event(noise_multiplier=1.1, sampling_probability=0.1, steps=50)
    grid, deltas = accounting.privacy_profile(event, reach_delta=1e-5, discretization=1e-3)
    pld = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3)
    pld.compose(event)
    for i in (0, len(grid) // 3, len(grid) - 1):
        assert deltas[i] == pytest.approx(pld.get_delta(float(grid[i])), rel=1e-6, abs=1e-15)
    curve = TradeOff(grid, deltas)
    assert point_rejects(curve, 0.01, 0.5 * float(curve(0.01)))
    assert not point_rejects(curve, 0.01, float(curve(0.01)) + 1e-6)


@pytest.mark.parametrize(
    "segments",
    [
        [(1.1, 0.128, 20)],  # a white-box audit's claim
        [(0.76, 3.03e-3, 1000)],  # many steps: the Chernoff range cuts the support
        [(2.0, 0.05, 30), (1.3, 0.2, 7)],  # a batch schedule: two segments
        [(5.0, 1e-6, 10)],  # a sparse PMF
    ],
)
def test_the_profiles_restated_composition_gives_the_librarys_curve_bit_for_bit(segments):
    """A claim curve's segments are composed by accounting.self_compose (the audits' fast path, cached apart from the
    claim's own epsilon): its grid and deltas are exactly those of the PLD composed by dp_accounting's self_compose."""
    from dpaudit.accounting import pld as pld_module

    event = dp_accounting.ComposedDpEvent(
        [accounting.dpsgd_event(noise_multiplier=s, sampling_probability=q, steps=t) for s, q, t in segments]
    )
    discretization = 1e-3
    accounting.clear_caches()
    grid, deltas = accounting.privacy_profile(event, reach_delta=1e-5, discretization=discretization)
    cached = [*pld_module._PREFIX_PLDS.data, *pld_module._SEGMENT_PLDS.data]
    assert cached and all(key[-1] is True for key in cached)  # a claim's epsilon never reads the restated PLDs
    items: list = []
    pld_module._flatten_for_pld(event, 1, items)
    library = pld_module._composed_pld(tuple(items), discretization)  # each segment by the library's self_compose
    top = min(3.0 * accounting.epsilon_for_delta(library, 1e-5) + 4.0, 700.0)
    assert grid.max() == top
    expected = np.maximum(
        pld_module._hockey_stick(library._pmf_remove, grid), pld_module._hockey_stick(library._pmf_add, grid)
    )
    assert np.array_equal(deltas, np.clip(expected, 0.0, 1.0))


def test_the_family_bound_is_the_claim_epsilon_exactly_when_the_claim_is_the_weakest_rejected():
    claim = poisson_claim(0.2, 20, 1.5, epsilon=0.0)
    at_claim = claim.curve(1.0)
    found = claim.lower_bound(lambda curve: curve(0.1) >= at_claim(0.1) - 1e-12)  # rejects s >= 1 only
    assert found.scale == pytest.approx(1.0) and found.epsilon <= claim.epsilon_at(1.0) + 1e-9
    assert found.epsilon == pytest.approx(accounting.epsilon(claim.scaled_event(1.0), 1e-5), abs=0.02)
    assert claim.lower_bound(lambda curve: False).epsilon == 0.0


def test_best_test_finds_the_test_that_rejects_the_least_private_scaling():
    claim = poisson_claim(1.0, 1, 2.0, epsilon=0.0)
    # test j rejects a scaled claim when its f(0.1) reaches that of scale s_j: every scale >= s_j
    thresholds = [float(claim.curve(s)(0.1)) for s in (2.0, 0.8, 1.3)]
    tests = [lambda curve, t=t: curve(0.1) >= t - 1e-12 for t in thresholds]
    best, scale = claim.best_test(tests)
    assert best == 1 and 0.8 <= scale < 0.8 * 2 ** (1 / 64)  # the plan's coarse grid
    # the bound searches the last grid step again on sub-steps of 2^(1/256): the smallest rejected one
    fine = claim.lower_bound(tests[1]).scale
    assert fine is not None and 0.8 <= fine < 0.8 * 2 ** (1 / 256) and fine <= scale
    assert claim.best_test([lambda curve: False]) == (None, None)


def test_the_pooled_points_test_on_its_lower_left_points_decides_as_on_every_threshold():
    """points_test keeps only the thresholds no other is below and to the left of: on pooled scores (ties included)
    and Gaussian curves from far too private to far too weak, its verdict is the one every threshold gives, and both
    verdicts occur."""
    from dpaudit.whitebox.bounds import _cp_upper, points_test

    rng = np.random.default_rng(3)
    eps = np.linspace(0, 12, 400)
    verdicts = set()
    for shift, ties in ((0.5, False), (1.5, True)):
        member = rng.normal(shift, 1.0, 3000)
        nonmember = rng.normal(0.0, 1.0, 3000)
        if ties:
            member, nonmember = np.round(member, 1), np.round(nonmember, 1)
        member, nonmember = np.sort(member), np.sort(nonmember)
        thresholds = np.unique(np.concatenate([member, nonmember]))
        fn = np.searchsorted(member, thresholds, side="left")
        fp = nonmember.size - np.searchsorted(nonmember, thresholds, side="left")
        test = points_test(fp, nonmember.size, fn, member.size, 0.05)
        fpr_up = _cp_upper(fp, nonmember.size, 0.05 / 2 / nonmember.size)
        fnr_up = _cp_upper(fn, member.size, 0.05 / 2 / member.size)
        keep = (fpr_up < 1) & (fnr_up < 1)
        for mu in np.linspace(0.05, 3.0, 40):
            curve = TradeOff(eps, gdp_delta(eps, mu))
            every = bool(np.any(fnr_up[keep] < curve(fpr_up[keep])))
            assert test(curve) == every, (shift, mu)
            verdicts.add(every)
    assert verdicts == {True, False}
