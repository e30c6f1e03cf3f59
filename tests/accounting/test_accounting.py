"""dpaudit.accounting against dp_accounting itself: golden values, orderings, limits, round trips."""

from __future__ import annotations

import json
import math
import re
import warnings

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp
from dp_accounting.privacy_accountant import NeighboringRelation
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit import accounting as A
from dpaudit.accounting import pld as pld_module
from dpaudit.common.errors import UserInputError

DELTA = 1e-5


def pld_direct(event, delta=DELTA):
    accountant = pld.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def rdp_direct(event, delta=DELTA, relation=NeighboringRelation.ADD_OR_REMOVE_ONE):
    accountant = rdp.RdpAccountant(neighboring_relation=relation)
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def raw_dpsgd(q, sigma, steps):
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )


# ------------------------------------------------------------------------------------------ golden values


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.0, 100), (0.1, 3.0, 60), (1.0, 5.0, 3)])
def test_epsilon_equals_dp_accounting_exactly(q, sigma, steps):
    event = A.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=steps)
    assert event == raw_dpsgd(q, sigma, steps)
    assert A.epsilon(event, DELTA) == pld_direct(event)
    assert A.epsilon(event, DELTA, "rdp") == rdp_direct(event)
    assert A.epsilon(event, DELTA) == pld_direct(event)  # memoized second call: same value


def _dense_parts(pld_pmf):
    dense = pld_pmf.to_dense_pmf()
    return dense._lower_loss, dense._infinity_mass, dense._probs


def _assert_same_pld(ours, theirs):
    """Both sides' PMFs alike bit for bit: the PMF type, lowest key, infinity mass and every probability."""
    for side in ("_pmf_remove", "_pmf_add"):
        assert type(getattr(ours, side)) is type(getattr(theirs, side))
        lower, infinity, probs = _dense_parts(getattr(ours, side))
        lower_ref, infinity_ref, probs_ref = _dense_parts(getattr(theirs, side))
        assert (lower, infinity) == (lower_ref, infinity_ref)
        assert probs.tobytes() == probs_ref.tobytes()


@pytest.mark.parametrize(
    "sigma,q,discretization",
    [
        (0.76, 3.03e-3, 1e-4),  # Anil et al.'s regime, at the accountant's own discretization
        (0.3, 0.05, 1e-4),  # small sigma: the widest loss range
        (5.0, 1e-6, 1e-3),  # tiny q: the q -> 0 branch
        (2.0, 0.999, 1e-3),  # q near 1: the other end of the mixture
        (20.0, 0.5, 1e-4),  # large sigma: a narrow grid
    ],
)
def test_vectorized_single_step_pld_is_bit_identical_to_dp_accounting(sigma, q, discretization):
    ours = A.subsampled_gaussian_pld(sigma, q, discretization)
    theirs = pld.privacy_loss_distribution.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=discretization
    )
    _assert_same_pld(ours, theirs)


def test_single_step_pld_falls_back_to_the_library_build(monkeypatch):
    """Without dp_accounting's private PMF hook (a future version), the library builds the same PLD."""
    monkeypatch.setattr(pld_module, "_CREATE_PMF", None)
    ours = A.subsampled_gaussian_pld(1.0, 0.01, 1e-3)
    theirs = pld.privacy_loss_distribution.from_gaussian_mechanism(
        1.0, sampling_prob=0.01, value_discretization_interval=1e-3
    )
    _assert_same_pld(ours, theirs)


@pytest.mark.parametrize(
    "sigma,q,discretization",
    [
        (1.1, 0.128, 1e-4),  # a white-box audit's claim, at the bound's own discretization
        (0.3, 0.05, 1e-3),  # small sigma: the widest loss range
        (5.0, 1e-6, 1e-3),  # tiny q: a two-point (sparse) PMF
        (2.0, 0.999, 1e-3),  # q near 1
        (20.0, 0.5, 1e-2),  # a coarse grid: a sparse PMF of 50 points
        (1.0, 1.0, 1e-3),  # q = 1: the library's own build
    ],
)
def test_optimistic_single_step_pld_is_bit_identical_to_dp_accounting(sigma, q, discretization):
    """The optimistic (privacy-buckets, rounded down) PLD the white-box bounds read their epsilon from: the same
    PMF types, keys and probabilities, bit for bit, as dp_accounting's scalar walk builds."""
    ours = A.optimistic_subsampled_gaussian_pld(sigma, q, discretization)
    theirs = pld.privacy_loss_distribution.from_gaussian_mechanism(
        sigma,
        sampling_prob=q,
        value_discretization_interval=discretization,
        pessimistic_estimate=False,
        use_connect_dots=False,
    )
    _assert_same_pld(ours, theirs)
    assert ours.self_compose(20).get_epsilon_for_delta(1e-5) == theirs.self_compose(20).get_epsilon_for_delta(1e-5)


@pytest.mark.parametrize(
    "sigma,q,discretization,count",
    [
        (1.1, 0.128, 1e-4, 20),  # a white-box audit's claim at the bound's discretization
        (0.76, 3.03e-3, 1e-3, 1000),  # many steps: the Chernoff range cuts the support
        (5.0, 1e-6, 1e-3, 10),  # a sparse PMF: the library's own composition
        (1.0, 1.0, 1e-3, 7),  # q = 1: one symmetric PMF
    ],
)
def test_self_composition_is_bit_identical_to_dp_accounting(sigma, q, discretization, count):
    """accounting.self_compose (the Chernoff truncation range in fewer array passes) gives the PLD dp_accounting's
    self_compose gives, bit for bit, pessimistic and optimistic."""
    for single in (
        A.subsampled_gaussian_pld(sigma, q, discretization),
        A.optimistic_subsampled_gaussian_pld(sigma, q, discretization),
    ):
        ours, theirs = A.self_compose(single, count), single.self_compose(count)
        _assert_same_pld(ours, theirs)


def test_self_convolve_bounds_equal_dp_accounting_on_odd_arrays():
    """The truncation range on arrays a PLD can hold: zeros at either end, a single point, round-off below zero
    (logsumexp's own branch), all zeros."""
    from dp_accounting.pld import common

    rng = np.random.default_rng(0)
    arrays = [
        np.r_[np.zeros(5), rng.random(100), np.zeros(7)],
        np.r_[np.zeros(3), 1.0, np.zeros(4)],
        np.array([1.0]),
        np.r_[-1e-18, rng.random(50), -1e-19],
        np.zeros(10),
        rng.random(3000) ** 8,
    ]
    for probs in arrays:
        for count in (1, 4, 1000):
            assert pld_module._self_convolve_bounds(probs, count, 1e-15) == common.compute_self_convolve_bounds(
                probs, count, 1e-15
            )


@pytest.mark.parametrize("sigma,q", [(1.1, 0.128), (0.6, 0.9), (5.0, 0.01), (2.0, 0.5)])
def test_replace_one_single_step_pld_is_bit_identical_to_dp_accounting(sigma, q):
    """The replace-one PLD of one Poisson-subsampled Gaussian step (the inverse privacy loss on whole arrays) is the
    PMF dp_accounting's from_gaussian_mechanism(neighboring_relation=REPLACE_ONE) builds, bit for bit."""
    theirs = pld.privacy_loss_distribution.from_gaussian_mechanism(
        sigma, sampling_prob=q, value_discretization_interval=1e-3, neighboring_relation=NeighboringRelation.REPLACE_ONE
    )
    _assert_same_pld(pld_module.replace_one_gaussian_pld(sigma, q, 1e-3), theirs)


def test_replace_one_epsilon_equals_the_pld_accountants_exactly():
    """epsilon_replace_one composes what PLDAccountant(REPLACE_ONE) composes, in its order, with the library: the
    same float for a run, a batch schedule, a Gaussian without sampling and a run with a non-private step (inf)."""
    from dp_accounting.pld.pld_privacy_accountant import PLDAccountant

    events = [
        A.dpsgd_event(noise_multiplier=2.0, sampling_probability=0.25, steps=6),
        A.schedule_event(
            A.batch_schedule_segments(dataset_size=10_000, schedule=[(40, 20), (60, 50)], noise_multiplier=2.0)
        ),
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0), 4),
        dp_accounting.ComposedDpEvent(
            [dp_accounting.NonPrivateDpEvent(), A.dpsgd_event(noise_multiplier=2.0, sampling_probability=0.5, steps=3)]
        ),
    ]
    for event in events:
        accountant = PLDAccountant(NeighboringRelation.REPLACE_ONE, value_discretization_interval=A.PLD_DISCRETIZATION)
        accountant.compose(event)
        pld_module.clear_caches()
        assert A.epsilon_replace_one(event, 1e-5) == accountant.get_epsilon(1e-5)


def _same_epsilon(ours: float, theirs: float) -> bool:
    return ours == theirs or (math.isinf(ours) and math.isinf(theirs))


@pytest.mark.parametrize("chunk", [1 << 15, 7])  # the default, and chunk boundaries inside the walk
def test_epsilon_for_delta_is_bit_identical_to_dp_accounting(chunk, monkeypatch):
    """accounting.epsilon_for_delta (the walk from the largest loss down on whole arrays) reads the epsilon
    dp_accounting's get_epsilon_for_delta reads, bit for bit: composed optimistic and pessimistic PLDs, deltas from
    1e-10 to above the largest hockey stick (0) and below the infinity mass (inf), and dense PMFs that stop early,
    run to the end, carry infinite mass or lose exp(-loss) to underflow (the library's early return)."""
    monkeypatch.setattr(pld_module, "_WALK_CHUNK", chunk)
    plds = []
    if chunk > 7:  # PLDs of ~10^4 points: at the default chunk only (a chunk of 7 walks them slowly)
        for sigma, q, steps in ((1.1, 0.128, 20), (0.8, 0.5, 4), (3.0, 0.01, 300)):
            for single in (
                A.optimistic_subsampled_gaussian_pld(sigma, q, 1e-3),
                A.subsampled_gaussian_pld(sigma, q, 1e-3),
            ):
                plds += [single, A.self_compose(single, steps)]
    rng = np.random.default_rng(0)
    for k in range(24):
        n, infinity = int(rng.integers(1, 60)), (0.004 if k % 3 == 0 else 0.0)
        probs = rng.dirichlet(np.ones(n)) * (1 - infinity)
        # every fourth: losses from 750 up, where exp(-loss) underflows to 0
        lower, step = (int(rng.integers(-40, 40)), float(rng.choice([1e-2, 0.5]))) if k % 4 else (250, 3.0)
        dense = pld.pld_pmf.DensePLDPmf(step, lower, probs, infinity, bool(k % 2))
        plds.append(pld.privacy_loss_distribution.PrivacyLossDistribution(dense))
    early_returns = 0
    for distribution in plds:
        for delta in (1e-10, 1e-5, 1e-3, 0.003, 0.2, 0.7, 0.999):
            ours, theirs = A.epsilon_for_delta(distribution, delta), distribution.get_epsilon_for_delta(delta)
            assert _same_epsilon(ours, theirs), (ours, theirs, delta)
            early_returns += ours > 700
    assert early_returns > 0  # the underflow branch was reached


def test_known_configuration_golden_value():
    # q = 0.01, sigma = 1.0, 100 steps, delta = 1e-5: the textbook DP-SGD setting.
    event = A.dpsgd_event(noise_multiplier=1.0, sampling_probability=0.01, steps=100)
    assert A.epsilon(event, 1e-5) == pytest.approx(0.7180367, abs=1e-6)
    assert A.epsilon(event, 1e-5, "rdp") == pytest.approx(1.2141453, abs=1e-6)


def test_schedule_and_nested_events_equal_dp_accounting_exactly():
    segments = A.batch_schedule_segments(dataset_size=10_000, schedule=[(40, 200), (60, 500)], noise_multiplier=2.0)
    event = A.schedule_event(segments)
    assert isinstance(event, dp_accounting.ComposedDpEvent)
    assert all(isinstance(e, dp_accounting.SelfComposedDpEvent) for e in event.events)
    assert A.epsilon(event, DELTA) == pld_direct(event)
    assert A.epsilon(event, DELTA, "rdp") == rdp_direct(event)
    nested = dp_accounting.SelfComposedDpEvent(
        dp_accounting.ComposedDpEvent(
            [raw_dpsgd(0.02, 2.0, 10), dp_accounting.GaussianDpEvent(20.0), dp_accounting.NoOpDpEvent()]
        ),
        3,
    )
    assert A.epsilon(nested, DELTA) == pld_direct(nested)
    # The cached prefix of the schedule is reused for a longer run: still exact.
    longer = A.schedule_event(segments + [A.Segment(steps=5, sampling_probability=0.08, noise_multiplier=2.0)])
    assert A.epsilon(longer, DELTA) == pld_direct(longer)


def test_delta_for_epsilon_inverts_epsilon():
    event = A.dpsgd_event(noise_multiplier=1.0, sampling_probability=0.01, steps=200)
    eps = A.epsilon(event, DELTA)
    accountant = pld.PLDAccountant()
    accountant.compose(event)
    assert A.delta_for_epsilon(event, eps) == accountant.get_delta(eps)
    assert A.delta_for_epsilon(event, eps) <= DELTA * 1.001
    assert A.delta_for_epsilon(event, eps * 0.9) > DELTA


def test_non_private_steps_have_infinite_epsilon():
    event = A.dpsgd_event(noise_multiplier=0.0, sampling_probability=0.01, steps=10)
    assert A.epsilon(event, DELTA) == math.inf
    assert A.epsilon(event, DELTA, "rdp") == math.inf
    assert A.epsilon(dp_accounting.NonPrivateDpEvent(), DELTA) == math.inf
    assert A.epsilon(A.schedule_event([]), DELTA) == 0.0


# -------------------------------------------------------------------------------------------- orderings


@pytest.mark.parametrize("q", [0.01, 0.1])
@pytest.mark.parametrize("sigma", [0.9, 3.0])
def test_pld_at_most_rdp(q, sigma):
    event = A.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=100)
    assert A.epsilon(event, DELTA) <= A.epsilon(event, DELTA, "rdp")


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_epsilon_monotone_in_sigma_q_and_steps(accountant):
    def eps(q=0.02, sigma=2.0, steps=100):
        return A.epsilon(A.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=steps), DELTA, accountant)

    by_sigma = [eps(sigma=s) for s in (1.0, 1.5, 2.0, 3.0)]
    by_q = [eps(q=q) for q in (0.005, 0.01, 0.02, 0.05)]
    by_steps = [eps(steps=s) for s in (10, 50, 100, 400)]
    assert by_sigma == sorted(by_sigma, reverse=True) and len(set(by_sigma)) == 4
    assert by_q == sorted(by_q) and len(set(by_q)) == 4
    assert by_steps == sorted(by_steps) and len(set(by_steps)) == 4


def test_schedule_of_identical_segments_equals_single_event():
    segments = A.batch_schedule_segments(
        dataset_size=50_000, schedule=[(100, 500), (200, 500), (50, 500)], noise_multiplier=2.0
    )
    single = A.dpsgd_event(noise_multiplier=2.0, sampling_probability=0.01, steps=350)
    merged = A.schedule_event(segments)
    assert merged == dp_accounting.ComposedDpEvent([single])
    assert A.epsilon(merged, DELTA) == A.epsilon(single, DELTA)
    # Composing the three pieces separately (no merging) agrees to PLD's discretization accuracy.
    split = dp_accounting.ComposedDpEvent([s.event() for s in segments])
    assert A.epsilon(split, DELTA) == pytest.approx(A.epsilon(single, DELTA), rel=2e-3)
    assert A.epsilon(split, DELTA, "rdp") == pytest.approx(A.epsilon(single, DELTA, "rdp"), rel=1e-9)


def test_microbatch_segment_accounts_sigma_and_states_the_noise_std_over_c():
    assert A.microbatch_sensitivity_factor(1) == 1.0
    assert A.microbatch_sensitivity_factor(8) == 2.0
    assert A.sliced_microbatch_sensitivity_factor(4) == 8.0
    # Noise std 2.4C with micro-batch clipping (bound 2C): sigma 1.2, the per-example mechanism at sigma 1.2.
    micro = A.Segment(
        steps=150,
        sampling_probability=0.02,
        noise_multiplier=1.2,
        sensitivity_factor=A.microbatch_sensitivity_factor(16),
    )
    assert micro.noise_std_over_clip == pytest.approx(2.4)
    per_example = A.dpsgd_event(noise_multiplier=1.2, sampling_probability=0.02, steps=150)
    assert (
        micro.event()
        == per_example
        == dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(0.02, dp_accounting.GaussianDpEvent(1.2)), 150
        )
    )
    assert A.epsilon(micro.event(), DELTA) > A.epsilon(
        A.dpsgd_event(noise_multiplier=2.4, sampling_probability=0.02, steps=150), DELTA
    )
    assert A.combined_clip_norm([3.0, 4.0]) == 5.0
    assert A.combined_clip_norm([1.0] * 4) == 2.0


def test_noise_schedules():
    linear = A.linear_decay_sigmas(3.0, 0.2, 5, 1.5)
    assert linear == pytest.approx([3.0, 2.4, 1.8, 1.5, 1.5])
    expo = A.exponential_decay_sigmas(2.0, 0.5, 3)
    assert expo == pytest.approx([2.0, 2.0 * math.exp(-0.5), 2.0 * math.exp(-1.0)])
    with pytest.raises(ValueError, match="sigma_min must be > 0"):
        A.linear_decay_sigmas(2.0, 0.3, 5, 0.0)
    segments = A.noise_schedule_segments(sampling_probability=0.01, steps_per_epoch=100, sigmas=linear)
    event = A.schedule_event(segments)
    assert len(event.events) == 4  # the two floor epochs merge
    direct = dp_accounting.ComposedDpEvent(
        [raw_dpsgd(0.01, s, n) for s, n in [(3.0, 100), (linear[1], 100), (linear[2], 100), (1.5, 200)]]
    )
    assert event == direct
    assert A.epsilon(event, DELTA) == pld_direct(direct)
    # Decay spends more than holding sigma0, less than holding the floor.
    flat_hi = A.dpsgd_event(noise_multiplier=3.0, sampling_probability=0.01, steps=500)
    flat_lo = A.dpsgd_event(noise_multiplier=1.5, sampling_probability=0.01, steps=500)
    assert A.epsilon(flat_hi, DELTA) < A.epsilon(event, DELTA) < A.epsilon(flat_lo, DELTA)


def test_fixed_size_is_rdp_replace_one_only_and_labelled():
    event = A.fixed_size_event(dataset_size=10_000, batch_size=100, steps=300, noise_multiplier=1.1)
    assert A.is_fixed_size(event)
    assert "replace-one" in A.FIXED_SIZE_LABEL and "RDP" in A.FIXED_SIZE_LABEL
    # Replace-one: sensitivity 2C, so plain dp_accounting must be handed sigma / 2.
    plain = dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(10_000, 100, dp_accounting.GaussianDpEvent(1.1 / 2)), 300
    )
    expected = rdp_direct(plain, relation=NeighboringRelation.REPLACE_ONE)
    assert A.epsilon(event, DELTA, "rdp") == expected
    with pytest.raises(UserInputError, match="PLD cannot account"):
        A.epsilon(event, DELTA, "pld")
    poisson = A.dpsgd_event(noise_multiplier=1.1, sampling_probability=0.01, steps=300)
    assert expected > A.epsilon(poisson, DELTA, "rdp")  # replace-one is the stronger neighbour relation


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(steps=0, sampling_probability=0.1, noise_multiplier=1.0), "steps must be an integer >= 1"),
        (dict(steps=1, sampling_probability=1.5, noise_multiplier=1.0), "sampling_probability must be in"),
        (dict(steps=1, sampling_probability=0.1, noise_multiplier=-1.0), "noise_multiplier must be >= 0"),
        (dict(steps=1, sampling_probability=0.1, noise_multiplier=1.0, sensitivity_factor=0.5), "sensitivity_factor"),
        (dict(steps=True, sampling_probability=0.1, noise_multiplier=1.0), "steps must be an integer"),
    ],
)
def test_segment_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        A.Segment(**kwargs)


def test_bad_accountant_and_delta_are_user_errors():
    event = A.dpsgd_event(noise_multiplier=1.0, sampling_probability=0.01, steps=10)
    with pytest.raises(UserInputError, match="accountant must be one of"):
        A.epsilon(event, DELTA, "moments")
    with pytest.raises(UserInputError, match="delta must be in"):
        A.epsilon(event, 0.0)


# ------------------------------------------------------------------------------------------------- TAN


def test_tan_formulas():
    eta = A.tan_eta(sampling_probability=0.01, steps=2000, noise_multiplier=5.0)
    assert eta == pytest.approx(0.01 * math.sqrt(1000) / 5.0)
    eps = A.tan_epsilon(sampling_probability=0.01, steps=2000, noise_multiplier=5.0, delta=1e-5)
    assert eps == pytest.approx(eta**2 + 2 * eta * math.sqrt(math.log(1e5)))
    # eta^2 adds over segments: two halves give the eta of the whole.
    half = A.Segment(steps=1000, sampling_probability=0.01, noise_multiplier=5.0)
    assert A.tan_eta_segments([half, half]) == pytest.approx(eta)


def test_tan_warns_at_and_below_the_wall_only():
    with pytest.warns(A.TanValidityWarning, match="sigma > 2"):
        A.tan_epsilon(sampling_probability=0.01, steps=100, noise_multiplier=1.5, delta=1e-5)
    with pytest.warns(A.TanValidityWarning):
        A.tan_epsilon(sampling_probability=0.01, steps=100, noise_multiplier=2.0, delta=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        A.tan_epsilon(sampling_probability=0.01, steps=100, noise_multiplier=2.5, delta=1e-5)


def _steps_for_eta(eta, sigma, q):
    return int(round(2 * (eta * sigma / q) ** 2))


@pytest.mark.parametrize("sigma", [2.0, 3.0, 5.0, 10.0])
def test_tan_within_ten_percent_of_pld_above_the_wall(sigma):
    # Sander et al.'s regime: delta = 1/N for a large corpus, eta = 2 (epsilon ~ 20). TAN approximates
    # RDP with the classic conversion, so it sits above PLD; the gap shrinks as delta -> 0 and eta grows.
    q, delta = (0.25 if sigma >= 5 else 0.1), 1e-8
    steps = _steps_for_eta(2.0, sigma, q)
    pld_eps = A.epsilon(A.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=steps), delta)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", A.TanValidityWarning)
        tan = A.tan_epsilon(sampling_probability=q, steps=steps, noise_multiplier=sigma, delta=delta)
    assert abs(tan / pld_eps - 1.0) <= 0.10


@pytest.mark.parametrize("sigma", [3.0, 10.0])
@pytest.mark.parametrize("eta", [0.5, 2.0])
def test_tan_overestimates_pld_above_the_wall_but_not_wildly(sigma, eta):
    q = 0.25 if sigma >= 5 else 0.1
    steps = _steps_for_eta(eta, sigma, q)
    event = A.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=steps)
    for delta in (1e-5, 1e-8):
        ratio = A.tan_epsilon(sampling_probability=q, steps=steps, noise_multiplier=sigma, delta=delta) / A.epsilon(
            event, delta
        )
        assert 1.0 < ratio < 1.3


def test_tan_badly_underestimates_below_the_wall():
    q, sigma, steps = 0.01, 0.6, 2000
    with pytest.warns(A.TanValidityWarning):
        tan = A.tan_epsilon(sampling_probability=q, steps=steps, noise_multiplier=sigma, delta=DELTA)
    assert A.epsilon(A.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=steps), DELTA) > 1.5 * tan


def test_tan_simulation_keeps_eta_step_and_is_labelled_non_private():
    sim = A.tan_simulate(
        dataset_size=1_000_000, batch_size=65_536, noise_multiplier=4.0, steps=1000, simulated_batch_size=1024
    )
    assert sim.private is False and "NON-PRIVATE" in sim.label
    assert sim.simulated_noise_multiplier == pytest.approx(4.0 * 1024 / 65_536)
    assert sim.simulated_sampling_probability / sim.simulated_noise_multiplier == pytest.approx(
        sim.reference_sampling_probability / sim.reference_noise_multiplier
    )
    assert sim.eta_step == pytest.approx(0.065536 / (math.sqrt(2) * 4.0))
    assert sim.eta == pytest.approx(A.tan_eta(sampling_probability=0.065536, steps=1000, noise_multiplier=4.0))
    assert sim.compute_saving == 64.0
    assert json.loads(json.dumps(sim.to_json()))["private"] is False


# ---------------------------------------------------------------------------------------- serialization

EVENTS = [
    A.dpsgd_event(noise_multiplier=1.1, sampling_probability=0.013, steps=77),
    A.schedule_event(
        A.batch_schedule_segments(dataset_size=10_000, schedule=[(10, 100), (20, 300)], noise_multiplier=2.0)
    ),
    A.fixed_size_event(dataset_size=1000, batch_size=10, steps=5, noise_multiplier=2.0),
    dp_accounting.NonPrivateDpEvent(),
    dp_accounting.SelfComposedDpEvent(
        dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(3.0), dp_accounting.NoOpDpEvent()]), 4
    ),
]


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_event_json_round_trip_preserves_event_and_epsilon(event):
    text = json.dumps(A.event_to_json(event))
    back = A.event_from_json(json.loads(text))
    assert back == event
    accountant = "rdp" if A.is_fixed_size(event) else "pld"
    A.clear_caches()
    original = A.epsilon(event, DELTA, accountant)
    A.clear_caches()
    assert A.epsilon(back, DELTA, accountant) == original


def test_event_json_refuses_unknown_classes_and_fields():
    good = A.event_to_json(A.dpsgd_event(noise_multiplier=1.0, sampling_probability=0.1, steps=2))
    with pytest.raises(UserInputError, match="unknown DpEvent class_name 'os.system'"):
        A.event_from_json({"class_name": "os.system"})
    bad = json.loads(json.dumps(good))
    del bad["event"]["sampling_probability"]
    with pytest.raises(UserInputError, match=r"event\.event: PoissonSampledDpEvent needs fields"):
        A.event_from_json(bad)
    with pytest.raises(UserInputError):
        A.event_from_json(["not", "an", "object"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 500), st.integers(1, 1000), st.sampled_from([0.5, 1.0, 2.0])), min_size=0, max_size=6
    )
)
def test_schedule_events_merge_and_round_trip(parts):
    segments = [A.Segment(steps=s, sampling_probability=b / 1000, noise_multiplier=sigma) for s, b, sigma in parts]
    event = A.schedule_event(segments)
    assert sum(e.count for e in event.events) == sum(s for s, _, _ in parts)
    mechanisms = [(e.event.sampling_probability, e.event.event.noise_multiplier) for e in event.events]
    assert all(a != b for a, b in zip(mechanisms, mechanisms[1:]))  # adjacent equal mechanisms were merged
    assert A.event_from_json(json.loads(json.dumps(A.event_to_json(event)))) == event


# ---------------------------------------------------------------------------- calibration, reverse search


def test_calibrate_noise_is_feasible_and_minimal():
    q, steps, target = 0.1, 60, 1.2

    def build(sigma):
        return A.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=steps)

    sigma = A.calibrate_noise(build, target, DELTA, tolerance=1e-3)
    assert pld_direct(build(sigma)) <= target  # the guarantee, checked by dp_accounting itself
    assert pld_direct(build(sigma / 1.001)) > target  # within tolerance of the smallest such sigma


def test_calibrate_noise_rdp_matches_dp_accounting_calibration():
    q, steps, target = 0.02, 300, 2.0
    sigma = A.calibrate_noise(
        lambda s: A.dpsgd_event(noise_multiplier=s, sampling_probability=q, steps=steps),
        target,
        DELTA,
        accountant="rdp",
        tolerance=1e-4,
    )
    reference = dp_accounting.calibrate_dp_mechanism(
        rdp.RdpAccountant, lambda s: raw_dpsgd(q, s, steps), target, DELTA, tol=1e-6
    )
    assert sigma == pytest.approx(reference, rel=1e-4)
    assert rdp_direct(raw_dpsgd(q, sigma, steps)) <= target


def test_calibrate_noise_certified_and_rdp():
    def build(sigma):
        return A.schedule_event(
            A.batch_schedule_segments(dataset_size=2_000, schedule=[(30, 100), (30, 200)], noise_multiplier=sigma)
        )

    sigma = A.calibrate_noise(build, 1.5, DELTA, certify_minimal=True, tolerance=2e-3)
    assert pld_direct(build(sigma)) <= 1.5 < pld_direct(build(sigma / 1.002))
    sigma_rdp = A.calibrate_noise(build, 1.5, DELTA, accountant="rdp")
    assert rdp_direct(build(sigma_rdp)) <= 1.5 < rdp_direct(build(sigma_rdp / 1.001))
    assert sigma_rdp > sigma  # RDP is looser, so it needs more noise


def test_calibrate_noise_for_micro_batches_gives_the_same_sigma_and_doubles_the_std():
    def build(factor):
        return lambda s: A.schedule_event(
            [A.Segment(steps=60, sampling_probability=0.1, noise_multiplier=s, sensitivity_factor=factor)]
        )

    per_example = A.calibrate_noise(build(1.0), 1.2, DELTA, certify_minimal=True)
    micro = A.calibrate_noise(build(2.0), 1.2, DELTA, certify_minimal=True)
    assert micro == per_example  # sigma is std over the unit's own bound: the unit does not change it
    assert (
        A.Segment(
            steps=60, sampling_probability=0.1, noise_multiplier=micro, sensitivity_factor=2.0
        ).noise_std_over_clip
        == 2 * per_example
    )


def test_calibrate_noise_unreachable_target_is_a_user_error():
    with pytest.raises(UserInputError, match="no noise multiplier"):
        A.calibrate_noise(
            lambda s: A.dpsgd_event(noise_multiplier=s, sampling_probability=1.0, steps=10**6),
            1e-4,
            DELTA,
            accountant="rdp",
            sigma_bounds=(0.1, 10.0),
        )


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_max_steps_is_the_exact_boundary(accountant):
    q, sigma, target = 0.05, 2.0, 2.0
    n = A.max_steps(
        sampling_probability=q, noise_multiplier=sigma, target_epsilon=target, delta=DELTA, accountant=accountant
    )
    direct = pld_direct if accountant == "pld" else rdp_direct
    assert 50 < n < 10_000
    assert direct(raw_dpsgd(q, sigma, n)) <= target < direct(raw_dpsgd(q, sigma, n + 1))


def test_max_steps_after_preceding_segments_and_edge_cases():
    first = A.Segment(steps=100, sampling_probability=0.05, noise_multiplier=2.0)
    n = A.max_steps(sampling_probability=0.1, noise_multiplier=2.0, target_epsilon=2.0, delta=DELTA, preceding=[first])
    within = A.schedule_event([first, A.Segment(steps=n, sampling_probability=0.1, noise_multiplier=2.0)])
    beyond = A.schedule_event([first, A.Segment(steps=n + 1, sampling_probability=0.1, noise_multiplier=2.0)])
    assert pld_direct(within) <= 2.0 < pld_direct(beyond)
    assert A.max_steps(sampling_probability=1.0, noise_multiplier=0.3, target_epsilon=0.1, delta=DELTA) == 0
    assert (
        A.max_steps(sampling_probability=1e-4, noise_multiplier=50.0, target_epsilon=5.0, delta=DELTA, limit=1000)
        == 1000
    )


def test_max_batch_size_is_the_boundary():
    n_data, steps, sigma, target = 10_000, 100, 2.0, 1.5
    batch = A.max_batch_size(
        dataset_size=n_data, steps=steps, noise_multiplier=sigma, target_epsilon=target, delta=DELTA
    )
    assert 1 < batch < n_data
    assert pld_direct(raw_dpsgd(batch / n_data, sigma, steps)) <= target
    assert pld_direct(raw_dpsgd((batch + 1) / n_data, sigma, steps)) > target


# ------------------------------------------------------------------ bounded calibration, tiny delta


def test_calibrate_noise_refuses_targets_below_the_grid_floor_with_a_true_claim():
    # This target needs sigma ~0.005, where PLD's grid would take tens of GB.
    build = lambda s: A.dpsgd_event(noise_multiplier=s, sampling_probability=0.01, steps=100)  # noqa: E731
    with pytest.raises(UserInputError, match="lower the target") as err:
        A.calibrate_noise(build, 1000.0, 1e-3)
    message = str(err.value)
    sigma, eps = (
        float(v)
        for v in re.search(
            r"below ([\d.e+-]+) \(PLD at discretization 0.001 gives epsilon "
            r"([\d.e+-]+) there\)",
            message,
        ).groups()
    )
    assert f"more than {A.PLD_MAX_GRID_POINTS:,} grid points" in message
    # The claim, checked with a fresh dp_accounting PLDAccountant at that discretization.
    accountant = pld.PLDAccountant(value_discretization_interval=1e-3)
    accountant.compose(raw_dpsgd(0.01, sigma, 100))
    assert accountant.get_epsilon(1e-3) == pytest.approx(eps, rel=1e-3) and eps <= 1000.0
    # ... and that sigma really is where the accountant of record's PLD stops fitting.
    assert pld_module._item_grid_points(("poisson", 0.01, sigma, 100), A.PLD_DISCRETIZATION) <= A.PLD_MAX_GRID_POINTS
    assert (
        pld_module._item_grid_points(("poisson", 0.01, sigma * 0.9, 100), A.PLD_DISCRETIZATION) > A.PLD_MAX_GRID_POINTS
    )


@pytest.mark.parametrize("target", [math.inf, math.nan, True])
def test_calibrate_noise_target_must_be_a_finite_number(target):
    with pytest.raises(UserInputError, match="finite number > 0"):
        A.calibrate_noise(
            lambda s: A.dpsgd_event(noise_multiplier=s, sampling_probability=0.01, steps=10), target, DELTA
        )


def test_pld_refuses_a_tiny_sigma_instead_of_exhausting_memory():
    event = A.dpsgd_event(noise_multiplier=0.003, sampling_probability=0.01, steps=100)
    with pytest.raises(A.PldGridTooLargeError, match="noise multiplier 0.003 is too small"):
        A.epsilon(event, 1e-3)
    assert A.epsilon(event, 1e-3, "rdp") == rdp_direct(raw_dpsgd(0.01, 0.003, 100), 1e-3)


@pytest.mark.parametrize(("sigma", "q", "steps"), [(1.0, 0.01, 100), (0.7, 0.1, 1000), (0.6, 0.0005, 5000)])
def test_grid_estimate_is_close_to_what_dp_accounting_allocates(sigma, q, steps):
    from dp_accounting.pld import common

    single = A.subsampled_gaussian_pld(sigma, q)
    real = 0
    for pmf in (single._pmf_remove, single._pmf_add):
        lower, upper = common.compute_self_convolve_bounds(pmf._probs, steps, 1e-15)  # self_compose's own range
        real = max(real, upper - lower + 1)
    estimate = pld_module._item_grid_points(("poisson", q, sigma, steps), A.PLD_DISCRETIZATION)
    assert 0.75 * real <= estimate <= 1.5 * real, (estimate, real)


def test_pld_refuses_delta_below_its_reliable_range_and_rdp_answers():
    # At delta <= 1e-16 PLD said "inf" at sigma 1 (RDP: ~4.4); between ~1e-15 and 1e-12
    # its FFT round-off gave epsilons below the exact value of a composed Gaussian.
    event, raw = A.dpsgd_event(noise_multiplier=1.0, sampling_probability=0.01, steps=100), raw_dpsgd(0.01, 1.0, 100)
    for delta in (1e-17, A.PLD_MIN_DELTA / 2):
        with pytest.raises(UserInputError, match="below 1e-10, where the PLD accountant is not reliable"):
            A.epsilon(event, delta)
        assert A.epsilon(event, delta, "rdp") == rdp_direct(raw, delta)
    assert A.epsilon(event, A.PLD_MIN_DELTA) == pld_direct(raw, A.PLD_MIN_DELTA)  # exact down to the floor
    assert 4.0 < A.epsilon(event, 1e-16, "rdp") < 5.0
    with pytest.raises(UserInputError, match="below 1e-10"):
        A.calibrate_noise(lambda s: A.dpsgd_event(noise_multiplier=s, sampling_probability=0.01, steps=100), 3.0, 1e-17)
    sigma = A.calibrate_noise(
        lambda s: A.dpsgd_event(noise_multiplier=s, sampling_probability=0.01, steps=100), 3.0, 1e-17, accountant="rdp"
    )
    assert rdp_direct(raw_dpsgd(0.01, sigma, 100), 1e-17) <= 3.0 < rdp_direct(raw_dpsgd(0.01, sigma / 1.01, 100), 1e-17)
