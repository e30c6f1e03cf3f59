"""The DP-SGD step against oracles and limits (trainers.jax_bert.dp_step).

Two tiny models: an MLP classifier defined here (fast, exact) and the tiny Flax BERT masked-LM of
``trainers.jax_bert.model`` (the model the trainer actually clips).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpaudit.trainers.jax_bert import dp_step, model, optimizer, sampling

# ------------------------------------------------------------------------------------------------
# Tiny models and data


def mlp_loss(params, example):
    h = jnp.tanh(example["x"] @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    loss = jax.nn.logsumexp(logits) - logits[example["y"]]
    return loss, {
        "n_correct": (jnp.argmax(logits) == example["y"]).astype(jnp.float32),
        "n_predictions": jnp.float32(1.0),
    }


def mlp_params(seed: int = 0, d: int = 6, h: int = 16, k: int = 4):
    k1, k2 = jax.random.split(jax.random.key(seed))
    return {
        "w1": jax.random.normal(k1, (d, h)) * 1.5,
        "b1": jnp.zeros(h),
        "w2": jax.random.normal(k2, (h, k)),
        "b2": jnp.zeros(k),
    }


def mlp_data(n: int = 40, d: int = 6, k: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {"x": rng.normal(size=(n, d)).astype(np.float32) * 2, "y": rng.integers(0, k, n).astype(np.int32)}


def gather(data, idx):
    return {key: value[idx] for key, value in data.items()}


BERT_L, BERT_P, BERT_V = 8, 2, 40


@functools.lru_cache(maxsize=1)
def tiny_bert():
    cfg = model.preset_config(
        "tiny",
        vocab_size=BERT_V,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    net = model.FlaxBertForMaskedLM(cfg)
    params = model.init_params(cfg, jax.random.key(0), seq_len=BERT_L)
    loss = functools.partial(model.example_mlm_loss, model=net)
    return params, loss


def bert_data(n: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, BERT_V, size=(n, BERT_L)).astype(np.int32)
    lengths = rng.integers(4, BERT_L + 1, size=n)
    att = (np.arange(BERT_L)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(att > 0, ids, 0)
    pos = np.stack([rng.choice(lengths[i], size=BERT_P, replace=False) for i in range(n)]).astype(np.int32)
    labels = rng.integers(5, BERT_V, size=(n, BERT_P)).astype(np.int32)
    weights = np.ones((n, BERT_P), np.float32)
    weights[::3, 1] = 0.0
    return {
        "input_ids": ids,
        "attention_mask": att,
        "masked_positions": pos,
        "masked_labels": labels,
        "masked_weights": weights,
    }


@functools.lru_cache(maxsize=None)
def _jitted_example_grad(loss_fn):
    """One batch-size-1 gradient per model, jitted once and shared by the oracles."""
    return jax.jit(jax.grad(lambda p, ex: loss_fn(p, ex)[0]))


def loop_grads(loss_fn, params, data, n):
    """Oracle: a Python loop of batch-size-1 gradients."""
    grad = _jitted_example_grad(loss_fn)
    return [grad(params, {k: v[i] for k, v in data.items()}) for i in range(n)]


@functools.lru_cache(maxsize=None)
def _jitted_per_example_grads(loss_fn):
    """``dp_step.per_example_grads`` for one model, jitted once: run eagerly, a BERT's vmapped backward pass
    compiled each of its hundreds of primitives on its own."""
    return jax.jit(functools.partial(dp_step.per_example_grads, loss_fn))


def tree_norm(tree) -> float:
    return float(np.sqrt(sum(np.sum(np.square(np.asarray(x, np.float64))) for x in jax.tree.leaves(tree))))


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol), a, b)


def models():
    bert_params, bert_loss = tiny_bert()
    return {
        "mlp": (mlp_loss, mlp_params(), mlp_data()),
        "bert": (bert_loss, bert_params, bert_data()),
    }


@pytest.fixture(params=["mlp", "bert"])
def case(request):
    return models()[request.param]


@pytest.fixture(params=["mlp", "bert"])
def clip_case(request):
    """A model, its data and a clip norm C that clips some of the first 8 examples but not all."""
    return (*models()[request.param], CLIPS[request.param])


@functools.lru_cache(maxsize=None)
def _jitted_clipped_sum(loss_fn, clip: float):
    """One compiled clipped-sum per (model, C), shared by the tests (compiles dominate test time)."""
    return jax.jit(dp_step.make_clipped_sum_fn(loss_fn, clip_norm=clip))


def oracle_clipped_sum(loss_fn, params, data, idx, clip):
    grads = loop_grads(loss_fn, params, gather(data, idx), len(idx))
    norms = np.array([tree_norm(g) for g in grads])
    total = jax.tree.map(
        lambda *gs: sum(np.asarray(g, np.float64) * min(1.0, clip / nrm) for g, nrm in zip(gs, norms)), *grads
    )
    return total, norms


#: Every clipped-sum call below uses chunks of S = 2 micro-steps of m = 4 slots (one compile).
S, M = 2, 4
CLIPS = {"mlp": 5.0, "bert": 10.0}


# ------------------------------------------------------------------------------------------------
# Oracles


def test_vmap_per_example_grads_equal_loop_oracle(case) -> None:
    loss_fn, params, data = case
    n = 8
    batch = gather(data, np.arange(n))
    got = _jitted_per_example_grads(loss_fn)(params, batch)
    for i, want in enumerate(loop_grads(loss_fn, params, batch, n)):
        assert_trees_close(jax.tree.map(lambda g, i=i: g[i], got), want, rtol=1e-4, atol=1e-6)


def test_clipped_norms_bounded_and_clipped_sum_equals_loop_oracle(clip_case) -> None:
    loss_fn, params, data, clip = clip_case
    n = S * M
    batch = gather(data, np.arange(n))
    want, norms = oracle_clipped_sum(loss_fn, params, data, np.arange(n), clip)
    assert 0 < np.sum(norms > clip) < n  # some examples are clipped, some are not
    clipped, got_norms = jax.jit(dp_step.clip_by_global_norm_per_example, static_argnums=1)(
        _jitted_per_example_grads(loss_fn)(params, batch), clip
    )
    np.testing.assert_allclose(np.asarray(got_norms), norms, rtol=1e-4)
    for i in range(n):
        assert tree_norm(jax.tree.map(lambda g, i=i: g[i], clipped)) <= clip * (1 + 1e-5)
    # Through the scan: 2 micro-steps of 4.
    idx, mask = sampling.pack_microsteps(np.arange(n), M, S)[0]
    got, stats = _jitted_clipped_sum(loss_fn, clip)(params, gather(data, idx), mask)
    assert_trees_close(got, want, rtol=1e-4, atol=1e-5)
    assert dp_step.make_clipped_sum_fn(loss_fn, clip_norm=clip).sensitivity == clip
    assert float(stats.batch_size) == n
    assert float(stats.n_clipped) == np.sum(norms > clip)


def test_padding_slots_contribute_nothing(clip_case) -> None:
    loss_fn, params, data, clip = clip_case
    fn = _jitted_clipped_sum(loss_fn, clip)
    real = np.array([1, 2, 3, 5, 7], np.int64)
    idx, mask = sampling.pack_microsteps(real, M, S)[0]  # 8 slots, 3 of them padding
    want, want_stats = fn(params, gather(data, idx), mask)
    # Padding slots now point at other (real) examples: nothing may change.
    idx2 = np.where(mask > 0, idx, 9)
    got, stats = fn(params, gather(data, idx2), mask)
    assert_trees_close(got, want, rtol=0, atol=0)
    assert stats == want_stats
    assert float(stats.batch_size) == 5
    # ...and equals the oracle sum over the real examples alone.
    alone, _ = oracle_clipped_sum(loss_fn, params, data, real, clip)
    assert_trees_close(got, alone, rtol=1e-4, atol=1e-5)


def test_empirical_sensitivity_removing_one_example_moves_sum_by_at_most_c(clip_case) -> None:
    loss_fn, params, data, clip = clip_case
    n = S * M
    fn = _jitted_clipped_sum(loss_fn, clip)
    idx, mask = sampling.pack_microsteps(np.arange(n), M, S)[0]
    batch = gather(data, idx)
    full, _ = fn(params, batch, mask)
    diffs = []
    for i in range(n):
        neighbour_mask = mask.copy()
        neighbour_mask.ravel()[i] = 0.0
        without, _ = fn(params, batch, neighbour_mask)
        diffs.append(tree_norm(jax.tree.map(jnp.subtract, full, without)))
    assert max(diffs) <= clip * (1 + 1e-4)
    assert max(diffs) >= clip * (1 - 1e-3)  # clipping is active: the bound is attained


# ------------------------------------------------------------------------------------------------
# The full step: noise, limits, metrics


def test_noise_std_matches_sigma_times_c() -> None:
    params = {"a": jnp.zeros((300, 400)), "b": jnp.zeros((50_000,))}

    def zero_loss(p, ex):  # gradient exactly zero: the update is the noise alone
        return 0.0 * (jnp.sum(p["a"]) + jnp.sum(p["b"])) + 0.0 * ex["x"], {
            "n_correct": jnp.float32(0),
            "n_predictions": jnp.float32(0),
        }

    sigma, clip, ebs = 1.3, 0.7, 2.0
    step = dp_step.make_dp_train_step(zero_loss, optax.sgd(1.0), clip_norm=clip)
    assert step.sensitivity == clip  # the step owns its sensitivity: the caller passes sigma only
    assert step.noise_std(sigma) == sigma * clip
    chunk = ({"x": np.zeros((1, 4), np.float32)}, np.ones((1, 4), np.float32))
    state = optax.sgd(1.0).init(params)
    new, _, metrics = step(params, state, [chunk], jax.random.key(7), sigma, ebs)
    noise = -np.concatenate([np.asarray(x).ravel() for x in jax.tree.leaves(new)]) * ebs
    n = noise.size
    assert abs(noise.std() / (sigma * clip) - 1) < 4 / np.sqrt(2 * n)
    assert abs(noise.mean()) < 4 * sigma * clip / np.sqrt(n)
    # Each leaf gets its own key: no correlation between leaves.
    a = noise[:120_000]
    b = np.resize(noise[120_000:], a.size)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.02
    assert float(metrics.noise_norm) == pytest.approx(np.linalg.norm(noise), rel=1e-4)
    assert float(metrics.clipped_sum_norm) == 0.0
    assert float(metrics.grad_snr) == 0.0
    # Same key, same noise; another key, other noise.
    again, _, _ = step(params, state, [chunk], jax.random.key(7), sigma, ebs)
    assert_trees_close(again, new, rtol=0, atol=0)
    other, _, _ = step(params, state, [chunk], jax.random.key(8), sigma, ebs)
    assert not np.allclose(np.asarray(other["a"]), np.asarray(new["a"]))


def test_sigma_zero_and_infinite_clip_equals_nonprivate_step_for_step(case) -> None:
    loss_fn, params, data = case
    n_data = len(next(iter(data.values())))
    opt = optimizer.make_optimizer(learning_rate=1e-2, warmup_steps=1, total_steps=10, weight_decay=0.1)
    dp = dp_step.make_dp_train_step(loss_fn, opt, clip_norm=float("inf"))
    plain = dp_step.make_nonprivate_train_step(loss_fn, opt)
    rng = np.random.default_rng(0)
    p_dp, s_dp = params, opt.init(params)
    p_np, s_np = params, opt.init(params)
    for t in range(4):
        idx = sampling.poisson_sample(rng, n_data, 0.5)
        chunks = [(gather(data, i), m) for i, m in sampling.pack_microsteps(idx, M, S)]
        key = jax.random.key(t)
        p_dp, s_dp, m_dp = dp(p_dp, s_dp, chunks, key, 0.0, float(idx.size))
        p_np, s_np, m_np = plain(p_np, s_np, chunks, key, 123.0, 1.0)  # ignored arguments
        assert_trees_close(p_dp, p_np, rtol=1e-5, atol=2e-6)
        assert float(m_dp.loss) == pytest.approx(float(m_np.loss), rel=1e-5)
        assert float(m_dp.batch_size) == float(m_np.batch_size) == idx.size
        assert float(m_dp.clip_fraction) == 0.0
        assert float(m_dp.noise_norm) == 0.0 and np.isinf(float(m_dp.grad_snr))


def test_overflow_chunks_equal_one_big_chunk_and_metrics() -> None:
    params, data = mlp_params(), mlp_data()
    opt = optax.sgd(0.1)
    step = dp_step.make_dp_train_step(mlp_loss, opt, clip_norm=1.0)
    idx = np.arange(3, 30, dtype=np.int64)  # 27 examples
    small = [(gather(data, i), m) for i, m in sampling.pack_microsteps(idx, 4, 2)]  # 4 chunks
    big = [(gather(data, i), m) for i, m in sampling.pack_microsteps(idx, 4, 8)]  # 1 chunk
    assert len(small) == 4 and len(big) == 1
    key = jax.random.key(0)
    p1, _, m1 = step(params, opt.init(params), small, key, 0.5, 27.0)
    p2, _, m2 = step(params, opt.init(params), big, key, 0.5, 27.0)
    assert_trees_close(p1, p2, rtol=1e-5, atol=1e-6)
    assert float(m1.batch_size) == 27
    grads = loop_grads(mlp_loss, params, gather(data, idx), 27)
    norms = np.array([tree_norm(g) for g in grads])
    assert float(m1.clip_fraction) == pytest.approx(np.mean(norms > 1.0))
    want_sum = jax.tree.map(lambda *gs: sum(g * min(1.0, 1.0 / n) for g, n in zip(gs, norms)), *grads)
    assert float(m1.clipped_sum_norm) == pytest.approx(tree_norm(want_sum), rel=1e-4)
    assert float(m1.grad_snr) == pytest.approx(float(m1.clipped_sum_norm) / float(m1.noise_norm), rel=1e-5)
    losses = [float(mlp_loss(params, {k: v[i] for k, v in data.items()})[0]) for i in idx]
    assert float(m1.loss) == pytest.approx(np.mean(losses), rel=1e-5)
    assert float(m1.n_predictions) == 27


def test_noise_and_batch_size_are_traced_not_recompiled() -> None:
    params, data = mlp_params(), mlp_data()
    opt = optax.sgd(0.1)
    step = dp_step.make_dp_train_step(mlp_loss, opt, clip_norm=1.0)
    chunks = [(gather(data, i), m) for i, m in sampling.pack_microsteps(np.arange(10), 4, 3)]
    state = opt.init(params)
    for t, (std, ebs) in enumerate([(1.0, 10.0), (2.0, 20.0), (0.5, 40.0)]):
        step(params, state, chunks, jax.random.key(t), std, ebs)
    assert step._finish._cache_size() == 1
    assert step._accumulate._cache_size() == 1


def test_the_clip_norm_is_traced_one_program_for_every_c_and_bit_identical_to_a_compiled_in_c() -> None:
    """The step passes C to its jitted accumulation as a float32 argument: steps that differ in C only lower to
    the same program (one compile), and a traced C gives bit for bit the sums of C compiled in as a constant
    (C = 5 clips some of these examples, C = inf none)."""
    params, data = mlp_params(), mlp_data()
    idx, mask = sampling.pack_microsteps(np.arange(7), M, S)[0]
    batch = gather(data, idx)
    programs = set()
    for clip in (0.5, 5.0, float("inf")):
        step = dp_step.make_dp_train_step(mlp_loss, optax.sgd(1.0), clip_norm=clip)
        args = (params, step._zeros(params), step.zero_stats(), batch, mask, *step._clip_args)
        programs.add(step._accumulate.lower(*args).as_text())
    assert len(programs) == 1
    for clip, n_clipped in ((5.0, (1, 6)), (float("inf"), (0, 0))):
        fn = dp_step.make_clipped_sum_fn(mlp_loss, clip_norm=clip)
        constant, constant_stats = jax.jit(fn)(params, batch, mask)
        traced, traced_stats = jax.jit(fn)(params, batch, mask, np.float32(clip))
        assert_trees_close(traced, constant, rtol=0, atol=0)
        assert traced_stats == constant_stats
        assert n_clipped[0] <= float(traced_stats.n_clipped) <= n_clipped[1]


def test_division_by_expected_not_realized_batch_size() -> None:
    params, data = mlp_params(), mlp_data()
    step = dp_step.make_dp_train_step(mlp_loss, optax.sgd(1.0), clip_norm=1.0)
    chunks = [(gather(data, i), m) for i, m in sampling.pack_microsteps(np.arange(6), 4, 2)]
    state = optax.sgd(1.0).init(params)
    p1, _, _ = step(params, state, chunks, jax.random.key(0), 0.0, 6.0)
    p2, _, _ = step(params, state, chunks, jax.random.key(0), 0.0, 12.0)
    d1 = jax.tree.map(jnp.subtract, p1, params)
    d2 = jax.tree.map(jnp.subtract, p2, params)
    assert_trees_close(d1, jax.tree.map(lambda x: 2 * x, d2), rtol=1e-4, atol=2e-6)


def test_rejects_bad_clip_norm_and_empty_chunks() -> None:
    with pytest.raises(ValueError, match="clip_norm"):
        dp_step.make_dp_train_step(mlp_loss, optax.sgd(1.0), clip_norm=0.0)
    with pytest.raises(ValueError, match="clip_norm"):
        dp_step.make_clipped_sum_fn(mlp_loss, clip_norm=float("nan"))
    step = dp_step.make_dp_train_step(mlp_loss, optax.sgd(1.0), clip_norm=1.0)
    params = mlp_params()
    with pytest.raises(ValueError, match="chunks"):
        step(params, optax.sgd(1.0).init(params), [], jax.random.key(0), 1.0, 1.0)


def test_vmap_size_is_a_performance_knob_only() -> None:
    params, data = mlp_params(), mlp_data()
    idx, mask = sampling.pack_microsteps(np.arange(11), 6, 2)[0]
    batch = gather(data, idx)
    sums = [
        jax.jit(dp_step.make_clipped_sum_fn(mlp_loss, clip_norm=5.0, vmap_size=k))(params, batch, mask)
        for k in (1, 4, 6, 100)  # groups of 1, 3 (largest divisor of 6 <= 4), 6, 6
    ]
    for got, stats in sums[1:]:
        assert_trees_close(got, sums[0][0], rtol=1e-5, atol=1e-6)
        assert float(stats.batch_size) == 11 and float(stats.n_clipped) == float(sums[0][1].n_clipped)
    with pytest.raises(ValueError, match="vmap_size"):
        dp_step.make_clipped_sum_fn(mlp_loss, clip_norm=1.0, vmap_size=0)
