"""AdamW with decoupled weight decay and the warmup + quadratic-decay schedule (optimizer.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpaudit.trainers.jax_bert import optimizer


def test_schedule_warmup_then_quadratic_decay_values() -> None:
    lr, warm, total = 1e-3, 4, 12
    sched = optimizer.learning_rate_schedule(learning_rate=lr, warmup_steps=warm, total_steps=total)
    got = np.array([float(sched(t)) for t in range(total + 3)])
    # Linear warmup: lr (t + 1) / W; the first step already moves.
    np.testing.assert_allclose(got[:warm], lr * np.arange(1, warm + 1) / warm, rtol=1e-6)
    # Quadratic decay from lr at t = W to 0 at t = T, and 0 afterwards.
    t = np.arange(warm, total + 3)
    expected = lr * np.clip(1 - (t - warm) / (total - warm), 0, 1) ** 2
    np.testing.assert_allclose(got[warm:], expected, rtol=1e-6, atol=1e-12)
    assert got[warm] == pytest.approx(lr)
    assert got[warm + (total - warm) // 2] == pytest.approx(lr / 4)
    # Golden values from optax's own power-2 polynomial schedule.
    golden = optax.polynomial_schedule(
        init_value=lr, end_value=0.0, power=2, transition_steps=total - warm, transition_begin=warm
    )
    for step in range(warm, total + 3):
        assert float(sched(step)) == pytest.approx(float(golden(step)), rel=1e-6, abs=1e-12)


def test_schedule_without_warmup_starts_at_peak() -> None:
    sched = optimizer.learning_rate_schedule(learning_rate=0.5, warmup_steps=0, total_steps=4)
    np.testing.assert_allclose([float(sched(t)) for t in range(5)], [0.5, 0.28125, 0.125, 0.03125, 0.0])


def _adamw_oracle(params, grads_seq, lrs, wd, b1, b2, eps):
    """AdamW written out in numpy (Loshchilov & Hutter, Algorithm 2 with schedule multiplier lr_t)."""
    p = np.array(params, np.float64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    out = []
    for t, (g, lr) in enumerate(zip(grads_seq, lrs), start=1):
        g = np.asarray(g, np.float64)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        p = p - lr * (m_hat / (np.sqrt(v_hat) + eps) + wd * p)
        out.append(p.copy())
    return out


def test_make_optimizer_matches_adamw_oracle() -> None:
    kw = dict(learning_rate=0.1, warmup_steps=2, total_steps=6, weight_decay=0.5)
    opt = optimizer.make_optimizer(**kw, b1=0.8, b2=0.95, eps=1e-6)
    sched = optimizer.learning_rate_schedule(**{k: kw[k] for k in ("learning_rate", "warmup_steps", "total_steps")})
    rng = np.random.default_rng(0)
    p0 = rng.normal(size=5).astype(np.float32)
    grads = [rng.normal(size=5).astype(np.float32) for _ in range(5)]
    oracle = _adamw_oracle(p0, grads, [float(sched(t)) for t in range(5)], 0.5, 0.8, 0.95, 1e-6)
    params = jnp.asarray(p0)
    state = opt.init(params)
    for g, want in zip(grads, oracle):
        updates, state = opt.update(jnp.asarray(g), state, params)
        params = optax.apply_updates(params, updates)
        np.testing.assert_allclose(np.asarray(params), want, rtol=1e-5, atol=1e-6)


def test_weight_decay_is_decoupled_from_adam_moments() -> None:
    params = {"w": jnp.array([1.0, -2.0, 3.0])}
    base = dict(learning_rate=0.1, warmup_steps=0, total_steps=100)
    # Zero gradient: Adam's direction is 0, so only the decay acts: p <- p (1 - lr_t * wd).
    opt = optimizer.make_optimizer(**base, weight_decay=1.0)
    state = opt.init(params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    p = params
    expected = np.array([1.0, -2.0, 3.0])
    sched = optimizer.learning_rate_schedule(**base)
    for t in range(3):
        updates, state = opt.update(zeros, state, p)
        p = optax.apply_updates(p, updates)
        expected = expected * (1 - float(sched(t)) * 1.0)
        np.testing.assert_allclose(np.asarray(p["w"]), expected, rtol=1e-6)
    # Nonzero gradient: the update with decay minus the update without is exactly -lr * wd * p
    # (an L2 penalty would instead pass through Adam's normalization and not separate this way).
    g = {"w": jnp.array([0.3, -0.1, 2.0])}
    with_wd = optimizer.make_optimizer(**base, weight_decay=0.7)
    no_wd = optimizer.make_optimizer(**base, weight_decay=0.0)
    u1, _ = with_wd.update(g, with_wd.init(params), params)
    u0, _ = no_wd.update(g, no_wd.init(params), params)
    np.testing.assert_allclose(
        np.asarray(u1["w"] - u0["w"]), -float(sched(0)) * 0.7 * np.asarray(params["w"]), rtol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(total_steps=0), "total_steps"),
        (dict(warmup_steps=10, total_steps=10), "warmup_steps"),
        (dict(weight_decay=-1.0), "weight_decay"),
        (dict(b2=1.0), "b2"),
    ],
)
def test_make_optimizer_validates(kwargs: dict, match: str) -> None:
    full = dict(learning_rate=1e-3, warmup_steps=1, total_steps=10, weight_decay=0.01)
    full.update(kwargs)
    with pytest.raises(ValueError, match=match):
        optimizer.make_optimizer(**full)


def test_runtime_schedule_length_is_bit_identical_to_the_fixed_schedule_and_compiles_once() -> None:
    # total_steps lives in the optimizer state: one compiled update serves every run length, with the
    # same float32 updates as the schedule that had total_steps as a compile-time constant.
    params = {"w": jnp.linspace(-1.0, 1.0, 7, dtype=jnp.float32)}
    grads = {"w": jnp.linspace(0.3, -0.2, 7, dtype=jnp.float32)}
    runtime = optimizer.make_optimizer(learning_rate=3e-3, warmup_steps=2, weight_decay=0.1)
    update = jax.jit(runtime.update)
    for total in (6, 9, 250):
        fixed = optimizer.make_optimizer(learning_rate=3e-3, warmup_steps=2, total_steps=total, weight_decay=0.1)
        fixed_update = jax.jit(fixed.update)
        s_fixed, s_run = fixed.init(params), optimizer.init_optimizer(runtime, params, total_steps=total)
        for _ in range(total):
            u_fixed, s_fixed = fixed_update(grads, s_fixed, params)
            u_run, s_run = update(grads, s_run, params)
            np.testing.assert_array_equal(np.asarray(u_run["w"]), np.asarray(u_fixed["w"]))
    assert update._cache_size() == 1
    with pytest.raises(ValueError, match="total_steps"):
        optimizer.init_optimizer(runtime, params, total_steps=0)


def test_no_decay_keeps_the_peak_rate_after_warmup_in_both_schedules() -> None:
    sched = optimizer.learning_rate_schedule(learning_rate=0.5, warmup_steps=2, total_steps=6, decay="none")
    np.testing.assert_allclose([float(sched(t)) for t in range(8)], [0.25, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    params = {"w": jnp.ones(3, jnp.float32)}
    grads = {"w": jnp.full(3, 0.5, jnp.float32)}
    runtime = optimizer.make_optimizer(learning_rate=0.5, warmup_steps=2, weight_decay=0.0, decay="none")
    fixed = optimizer.make_optimizer(learning_rate=0.5, warmup_steps=2, total_steps=6, weight_decay=0.0, decay="none")
    s_run, s_fixed = optimizer.init_optimizer(runtime, params, total_steps=6), fixed.init(params)
    for _ in range(6):
        u_run, s_run = runtime.update(grads, s_run, params)
        u_fixed, s_fixed = fixed.update(grads, s_fixed, params)
        np.testing.assert_array_equal(np.asarray(u_run["w"]), np.asarray(u_fixed["w"]))
    np.testing.assert_allclose(
        np.asarray(u_run["w"]), -0.5, rtol=1e-5
    )  # Adam's direction 1 at the peak rate, last step
    with pytest.raises(ValueError, match="decay"):
        optimizer.make_optimizer(learning_rate=0.5, warmup_steps=0, weight_decay=0.0, decay="cosine")
