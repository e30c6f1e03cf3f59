"""Public parameters of the plan (a declared --dataset-size), the replace-one epsilon and the float-noise tail."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event
from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
from dp_accounting.privacy_accountant import NeighboringRelation

from dpaudit import accounting as A
from dpaudit.common.errors import UserInputError
from dpaudit.training.privacy_plan import plan_privacy


def _plan(n, declared=None, **kw):
    return plan_privacy(
        dataset_size=n,
        stages=[(5, 8)],
        non_private=False,
        noise_multiplier=kw.pop("sigma", 1.0),
        target_epsilon=kw.pop("target", None),
        delta=None,
        declared_size=declared,
        **kw,
    )


def test_a_declared_size_fixes_q_delta_and_sigma_whatever_the_real_n():
    plans = [_plan(n, declared=200_000, sigma=None, target=3.0) for n in (40, 41, 1_000_000)]
    assert all(p.sampling_probability(0) == 8 / 200_000 for p in plans)
    assert len({p.delta for p in plans}) == 1 and plans[0].delta == pytest.approx(5e-7)  # 1/(10 N_declared)
    assert len({p.sigmas for p in plans}) == 1 and len({repr(p.event()) for p in plans}) == 1
    fields = plans[0].public_fields(steps_from_n=True)
    assert fields["dataset_size"] is None and fields["n_public"] is False and "40" not in fields["public_parameters"]


def test_without_a_declared_size_q_comes_from_the_real_n():
    assert _plan(40).sampling_probability(0) == 0.2 and _plan(41).sampling_probability(0) == 8 / 41
    assert _plan(40).n_public and not _plan(40, declared=48).n_public


def test_a_batch_larger_than_the_declared_size_is_refused_naming_it():
    with pytest.raises(UserInputError, match="--dataset-size 4"):
        _plan(40, declared=4)


def test_replace_one_epsilon_matches_dp_accounting_and_respects_the_sensitivity_factor():
    """Golden values from plain dp_accounting: a micro-batch segment (sigma 1, factor 2: noise std 2C) is accounted
    at multiplier sigma under replace-one exactly as under add/remove."""
    golden = PLDAccountant(NeighboringRelation.REPLACE_ONE)
    golden.compose(dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0)), 1000)
    event = A.schedule_event(
        [A.Segment(steps=1000, sampling_probability=0.01, noise_multiplier=1.0, sensitivity_factor=2.0)]
    )
    assert A.epsilon_replace_one(event, 1e-5) == pytest.approx(golden.get_epsilon(1e-5), rel=1e-9)
    assert A.epsilon_replace_one(event, 1e-5) == pytest.approx(2.8434, abs=1e-3)
    assert A.epsilon(event, 1e-5) == pytest.approx(1.8282, abs=1e-3)


def test_tail_figure_sums_each_segment():
    segments = [
        A.Segment(steps=100, sampling_probability=0.1, noise_multiplier=0.5),
        A.Segment(steps=50, sampling_probability=0.2, noise_multiplier=1.0, sensitivity_factor=2.0),
    ]
    upper = lambda x: 0.5 * math.erfc(x / math.sqrt(2))  # noqa: E731
    want = 100 * 0.1 * upper(5.768 - 2.0) + 50 * 0.2 * upper(5.768 - 1.0)
    assert A.tail_figure(segments, 5.768) == pytest.approx(want, rel=1e-12)
    # The same figure read from the DpEvent (what calibration searches over), and the sampler's privacy.json entry.
    assert A.event_tail_figure(A.schedule_event(segments), 5.768) == pytest.approx(want, rel=1e-12)
    entry = A.noise_tail_entry("torch-cpu")
    assert entry["sampler"] == "torch-cpu" and entry["z_max"] == 5.768 and "figure" not in entry


def test_jax_float32_normal_reach_is_measured_on_jax_itself():
    """jax.random.normal(float32) maps 32 random bits to sqrt(2) erfinv(u); the transform below reproduces it bit for
    bit on random bits, and its value at the extreme bits is the sampler's reach (the stated z_max)."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    def transform(bits):  # jax._src.random: uniform from the top 23 bits in [nextafter(-1, 0), 1), then erfinv
        one = np.array(1.0, np.float32).view(np.uint32)
        floats = lax.bitcast_convert_type(
            lax.bitwise_or(lax.shift_right_logical(bits, np.uint32(9)), one), jnp.float32
        ) - np.float32(1.0)
        lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
        return np.float32(math.sqrt(2)) * lax.erf_inv(lax.max(lo, floats * (np.float32(1.0) - lo) + lo))

    key = jax.random.PRNGKey(0)
    bits = jax.random.bits(key, (4096,), jnp.uint32)
    assert bool(jnp.all(transform(bits) == jax.random.normal(key, (4096,), jnp.float32)))
    low, high = (float(v) for v in transform(jnp.array([0, 0xFFFFFFFF], jnp.uint32)))
    assert min(-low, high) == pytest.approx(A.NOISE_SAMPLERS["jax-float32"][1], abs=1e-3)


def test_observed_plans_see_every_plan_made_in_their_block_and_nothing_outside():
    """A cost probe times the accountant apart from its training through ``observed_plans`` (whichever trainer calls
    ``plan_privacy``); nested blocks each see the plans made inside them."""
    from dpaudit.training import privacy_plan

    request = dict(
        dataset_size=100, stages=[(4, 10)], non_private=False, noise_multiplier=1.0, target_epsilon=None, delta=1e-5
    )
    privacy_plan.plan_privacy(**request)
    with privacy_plan.observed_plans() as outer:
        privacy_plan.plan_privacy(**request)
        with privacy_plan.observed_plans() as inner:
            plan = privacy_plan.plan_privacy(**request)
    privacy_plan.plan_privacy(**request)
    assert len(outer) == 2 and len(inner) == 1
    assert inner[0][0] == request and inner[0][1] >= 0 and plan.sigmas == (1.0,)
