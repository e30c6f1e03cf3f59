"""Every event builder against a closed form written here, with the sensitivity worked out in the test.

Unsampled Gaussian mechanisms (q = 1) have exact epsilons: the analytic Gaussian mechanism (Balle &
Wang 2018, Thm 8) for add/remove PLD accounting, and the Gaussian's Renyi divergence alpha * mu^2 / 2
(mu = sensitivity / std) converted as dp_accounting does (Canonne et al. 2020, Prop. 12) for RDP.
Also: the group-privacy bound, the default delta and the round-up printing of figures.
"""

from __future__ import annotations

import math

import dp_accounting
import pytest
from dp_accounting import rdp
from dp_accounting.privacy_accountant import NeighboringRelation
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from dpaudit import accounting as A
from dpaudit.common.figures import format_up

DELTA = 1e-5


def gaussian_delta(eps: float, mu: float) -> float:
    """delta(eps) of the Gaussian mechanism with sensitivity / std = mu (Balle & Wang 2018, Thm 8)."""
    return stats.norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * stats.norm.cdf(-mu / 2 - eps / mu)


def gaussian_epsilon(mu: float, delta: float = DELTA) -> float:
    return optimize.brentq(lambda e: gaussian_delta(e, mu) - delta, 0.0, 200.0, xtol=1e-12)


def rdp_gaussian_epsilon(mu_squared_total: float, delta: float = DELTA) -> float:
    """RDP -> (eps, delta) of a Gaussian with sum of mu^2 = mu_squared_total, over dp_accounting's default orders."""
    best = math.inf
    for a in rdp.RdpAccountant()._orders:
        if a <= 1.01:
            continue
        r = a * mu_squared_total / 2.0
        best = min(best, r + math.log1p(-1 / a) - math.log(delta * a) / (a - 1))
    return max(best, 0.0)


# -- add/remove (PLD): sensitivity factors of the clipping ----------------------------------------


def _one(sigma: float, factor: float = 1.0, steps: int = 1) -> list[A.Segment]:
    return [A.Segment(steps=steps, sampling_probability=1.0, noise_multiplier=sigma, sensitivity_factor=factor)]


# Each case: segments built from sigma = noise std / (factor x C), the noise std over C each segment says
# ran, and mu = sensitivity / std worked out here from the std and the clipping unit (C = 1).
@pytest.mark.parametrize(
    "name,segments,std_over_c,mu",
    [
        # per-example clipping: sensitivity C = 1, noise std 2C: sigma 2.
        ("per-example", _one(2.0), [2.0], 1 / 2),
        # micro-batch clipping: one example moves one clipped micro-batch sum by 2C; std 2C: sigma = 2C / 2C = 1.
        ("micro-batch", _one(1.0, A.microbatch_sensitivity_factor(32)), [2.0], 2 / 2),
        # a shuffled batch sliced into 3 micro-batches: 2kC = 6; std 6C: sigma 1.
        ("sliced", _one(1.0, A.sliced_microbatch_sensitivity_factor(3)), [6.0], 6 / 6),
        # per-layer clip norms 0.3 and 0.4: sensitivity sqrt(0.09 + 0.16) = 0.5 (the C); noise std 1.0 = 2C.
        ("per-layer", _one(1.0 / A.combined_clip_norm([0.3, 0.4])), [2.0], 0.5 / 1.0),
        # 4 steps of the per-example mechanism at std 4: mu^2 adds, mu = sqrt(4 / 16) = 1/2.
        ("composed", _one(4.0, steps=4), [4.0], 1 / 2),
        # per-epoch noise std 2C, 2C, 4C, 4C with micro-batches (bound 2C): sigmas 1, 2; mu^2 = 1 + 1 + 1/4 + 1/4.
        (
            "noise-schedule",
            A.noise_schedule_segments(
                sampling_probability=1.0, steps_per_epoch=2, sigmas=[1.0, 2.0], sensitivity_factor=2.0
            ),
            [2.0, 4.0],
            math.sqrt(2.5),
        ),
        # batch schedule with q = 1 everywhere: 3 + 1 steps at std 4C with micro-batches (sigma 2): mu^2 = 4 / 4.
        (
            "batch-schedule",
            A.batch_schedule_segments(
                dataset_size=10, schedule=[(3, 10), (1, 10)], noise_multiplier=2.0, sensitivity_factor=2.0
            ),
            [4.0, 4.0],
            1.0,
        ),
    ],
)
def test_unsampled_events_match_the_analytic_gaussian(name, segments, std_over_c, mu):
    assert [s.noise_std_over_clip for s in segments] == pytest.approx(std_over_c)
    exact = gaussian_epsilon(mu)
    got = A.epsilon(A.schedule_event(segments), DELTA)
    # PLD is a pessimistic discretization of the exact privacy loss: never below, within 1e-3.
    assert exact - 1e-9 <= got <= exact + 1e-3, (name, got, exact)


# -- replace-one (fixed size, RDP) ----------------------------------------------------------------


def test_fixed_size_without_sampling_is_a_gaussian_at_sensitivity_2c():
    # b = N: every step sees the whole data; replacing one row moves the clipped sum by 2C.
    # sigma 3, 5 steps: mu = 2 / 3 per step, mu^2 total = 5 * 4 / 9.
    event = A.fixed_size_event(dataset_size=50, batch_size=50, steps=5, noise_multiplier=3.0)
    assert A.epsilon(event, DELTA, "rdp") == pytest.approx(rdp_gaussian_epsilon(5 * 4 / 9), rel=1e-9)
    # With micro-batch clipping on top, the factors multiply (2 * 2 = 4C, conservative): noise std 3C is
    # sigma = 3C / 2C = 1.5 of the micro-batch bound, and mu = 4 / 3.
    micro = A.fixed_size_event(
        dataset_size=50, batch_size=50, steps=5, noise_multiplier=3.0 / A.microbatch_sensitivity_factor(8)
    )
    assert A.epsilon(micro, DELTA, "rdp") == pytest.approx(rdp_gaussian_epsilon(5 * 16 / 9), rel=1e-9)


def test_replace_one_costs_what_add_remove_costs_at_half_the_sigma():
    # Without sampling both are Gaussians: replace-one at sigma equals add/remove at sigma / 2.
    replace_one = A.fixed_size_event(dataset_size=20, batch_size=20, steps=7, noise_multiplier=2.4)
    add_remove = A.dpsgd_event(noise_multiplier=1.2, sampling_probability=1.0, steps=7)
    assert A.epsilon(replace_one, DELTA, "rdp") == pytest.approx(A.epsilon(add_remove, DELTA, "rdp"), rel=1e-12)
    assert A.epsilon(replace_one, DELTA, "rdp") > 1.5 * A.epsilon(
        A.dpsgd_event(noise_multiplier=2.4, sampling_probability=1.0, steps=7), DELTA, "rdp"
    )


def test_the_issue_repro_fixed_size_gives_7_60():
    # N = 60000, B = 256, 1000 steps, sigma 1.1, delta 1/N: sensitivity 2C, so plain dp_accounting sees 0.55.
    n = 60_000
    plain = rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    plain.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(n, 256, dp_accounting.GaussianDpEvent(1.1 / 2)), 1000
        )
    )
    expected = plain.get_epsilon(1 / n)
    got = A.epsilon(A.fixed_size_event(dataset_size=n, batch_size=256, steps=1000, noise_multiplier=1.1), 1 / n, "rdp")
    assert got == expected and 7.60 < got < 7.61  # the old event (sigma 1.1) gave 1.2322


# -- group privacy ----------------------------------------------------------------------------------


def test_group_privacy_is_the_chained_bound():
    eps, delta = 0.5, 1e-6
    assert A.group_privacy(eps, delta, 1) == (pytest.approx(eps), pytest.approx(delta))
    g_eps, g_delta = A.group_privacy(eps, delta, 3)
    assert g_eps == pytest.approx(1.5)
    assert g_delta == pytest.approx(delta * (1 + math.exp(0.5) + math.exp(1.0)), rel=1e-12)
    assert g_delta <= 3 * math.exp(2 * eps) * delta  # the textbook (f eps, f e^{(f-1) eps} delta) form
    assert A.group_privacy(0.0, delta, 4)[1] == pytest.approx(4 * delta)
    assert A.group_privacy(5.0, 1e-3, 4)[1] > 1  # vacuous: callers print "no guarantee"


@pytest.mark.parametrize("f", [2, 3, 5])
def test_group_bound_holds_for_a_gaussian_mechanism(f):
    # A Gaussian at mu = 0.5 is (eps, delta(eps))-DP; f rows changed together is a Gaussian at mu = f / 2,
    # whose exact delta at f * eps must not exceed the group bound's delta.
    eps = 1.0
    delta = gaussian_delta(eps, 0.5)
    g_eps, g_delta = A.group_privacy(eps, delta, f)
    assert gaussian_delta(g_eps, f * 0.5) <= g_delta


# -- delta --------------------------------------------------------------------------------------------


def test_default_delta_is_well_below_one_over_n():
    assert A.default_delta(96) == 1e-5
    assert A.default_delta(60_000) == pytest.approx(1 / 600_000)
    for n in (1, 10, 96, 10**5, 10**9):
        assert A.default_delta(n) <= 0.1 / n and A.delta_warning(A.default_delta(n), n) is None
    assert "1/N" in A.delta_warning(1 / 1000, 1000) and A.delta_warning(0.01, 1000) is not None
    assert A.delta_warning(0.999 / 1000, 1000) is None and A.delta_warning(0.5, None) is None


# -- printing rounds up -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,digits,text",
    [
        (0.0013928, 3, "0.00140"),
        (7.601367477275393, 5, "7.6014"),
        (1.2321989580586576, 4, "1.233"),
        (3.0, 3, "3.00"),
        (1 / 600_000, 3, "1.67e-6"),
        (1e-5, 2, "1.0e-5"),
        (12345.6, 3, "12400"),
        (math.inf, 3, "inf"),
        (None, 3, "inf"),
        (0.0, 3, "0"),
    ],
)
def test_format_up_examples(value, digits, text):
    assert format_up(value, digits) == text


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=1e-12, max_value=1e9, allow_nan=False), st.integers(min_value=1, max_value=8))
def test_format_up_never_prints_less_and_stays_within_one_unit(value, digits):
    text = format_up(value, digits)
    printed = float(text)
    assert printed >= value
    unit = 10.0 ** (math.floor(math.log10(value)) - digits + 1)
    assert printed - value <= unit * (1 + 1e-9)
