"""Data-parallel DP step on 2 CPU devices equals the single-device step (trainers.jax_bert.parallel).

``tests/conftest.py`` sets ``XLA_FLAGS=--xla_force_host_platform_device_count=2`` before jax loads.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.jax_bert import dp_step, model, optimizer, parallel, sampling


def mlp_loss(params, example):
    h = jnp.tanh(example["x"] @ params["w1"] + params["b1"])
    logits = h @ params["w2"]
    loss = jax.nn.logsumexp(logits) - logits[example["y"]]
    return loss, {
        "n_correct": (jnp.argmax(logits) == example["y"]).astype(jnp.float32),
        "n_predictions": jnp.float32(1.0),
    }


def mlp_case():
    k1, k2 = jax.random.split(jax.random.key(1))
    params = {"w1": jax.random.normal(k1, (6, 16)), "b1": jnp.zeros(16), "w2": jax.random.normal(k2, (16, 3))}
    rng = np.random.default_rng(0)
    data = {"x": rng.normal(size=(64, 6)).astype(np.float32) * 2, "y": rng.integers(0, 3, 64).astype(np.int32)}
    return mlp_loss, params, data


@functools.lru_cache(maxsize=1)
def bert_case():
    length, n_pred, vocab, n = 8, 2, 40, 32
    cfg = model.preset_config("tiny", vocab_size=vocab, max_position_embeddings=16)
    net = model.FlaxBertForMaskedLM(cfg)
    params = model.init_params(cfg, jax.random.key(0), seq_len=length)
    rng = np.random.default_rng(0)
    data = {
        "input_ids": rng.integers(5, vocab, size=(n, length)).astype(np.int32),
        "attention_mask": (np.arange(length)[None, :] < rng.integers(3, length + 1, size=(n, 1))).astype(np.int32),
        "masked_positions": rng.integers(0, 3, size=(n, n_pred)).astype(np.int32),
        "masked_labels": rng.integers(5, vocab, size=(n, n_pred)).astype(np.int32),
        "masked_weights": np.ones((n, n_pred), np.float32),
    }
    return functools.partial(model.example_mlm_loss, model=net), params, data


def chunks_for(data, indices, m, s):
    return [({k: v[i] for k, v in data.items()}, mask) for i, mask in sampling.pack_microsteps(indices, m, s)]


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol), a, b)


def test_two_cpu_devices() -> None:
    assert jax.device_count() == 2
    mesh = parallel.make_data_mesh()
    assert mesh.axis_names == (parallel.DATA_AXIS,) and mesh.shape[parallel.DATA_AXIS] == 2


@pytest.mark.parametrize("name", ["mlp", "bert"])
def test_sharded_dp_step_matches_single_device(name: str) -> None:
    loss_fn, params, data = mlp_case() if name == "mlp" else bert_case()
    n = len(next(iter(data.values())))
    opt = optimizer.make_optimizer(learning_rate=1e-2, warmup_steps=1, total_steps=10, weight_decay=0.1)
    mesh = parallel.make_data_mesh()
    single = dp_step.make_dp_train_step(loss_fn, opt, clip_norm=1.0)
    sharded = dp_step.make_dp_train_step(loss_fn, opt, clip_norm=1.0, mesh=mesh)
    rng = np.random.default_rng(3)
    p1, s1 = params, opt.init(params)
    p2, s2 = params, opt.init(params)
    for t in range(2):
        idx = sampling.poisson_sample(rng, n, 0.4)
        chunks = chunks_for(data, idx, 4, 2)  # may overflow into several chunks
        key = jax.random.key(10 + t)
        p1, s1, m1 = single(p1, s1, chunks, key, 0.8, n * 0.4)
        p2, s2, m2 = sharded(p2, s2, chunks, key, 0.8, n * 0.4)
        assert_trees_close(p2, p1, rtol=1e-5, atol=1e-6)
        for a, b in zip(m1, m2):
            assert float(a) == pytest.approx(float(b), rel=1e-5, abs=1e-6)
    # The result really is spread over both devices' work and replicated back.
    leaf = jax.tree.leaves(p2)[0]
    assert len(leaf.sharding.device_set) == 2 and leaf.sharding.is_fully_replicated


def test_sharded_nonprivate_step_matches_single_device() -> None:
    loss_fn, params, data = mlp_case()
    opt = optax.adam(1e-2)
    mesh = parallel.make_data_mesh()
    chunks = chunks_for(data, np.arange(3, 40), 4, 3)
    key = jax.random.key(0)
    p1, _, m1 = dp_step.make_nonprivate_train_step(loss_fn, opt)(params, opt.init(params), chunks, key, 0.0, 1.0)
    p2, _, m2 = dp_step.make_nonprivate_train_step(loss_fn, opt, mesh=mesh)(
        params, opt.init(params), chunks, key, 0.0, 1.0
    )
    assert_trees_close(p2, p1)
    assert float(m2.batch_size) == float(m1.batch_size) == 37


def test_noise_is_added_once_not_per_device() -> None:
    """Zero gradients: the sharded update's std is sigma * C, not sqrt(2) sigma * C."""
    params = {"w": jnp.zeros((200_000,))}

    def zero_loss(p, ex):
        return 0.0 * jnp.sum(p["w"]) + 0.0 * ex["x"], {"n_correct": jnp.float32(0), "n_predictions": jnp.float32(0)}

    mesh = parallel.make_data_mesh()
    step = dp_step.make_dp_train_step(zero_loss, optax.sgd(1.0), clip_norm=1.0, mesh=mesh)
    chunk = ({"x": np.zeros((1, 4), np.float32)}, np.ones((1, 4), np.float32))
    new, _, _ = step(params, optax.sgd(1.0).init(params), [chunk], jax.random.key(0), 2.0, 1.0)
    assert float(jnp.std(new["w"])) == pytest.approx(2.0, rel=0.01)


def test_physical_batch_must_divide_over_devices() -> None:
    loss_fn, params, data = mlp_case()
    step = dp_step.make_dp_train_step(loss_fn, optax.sgd(1.0), clip_norm=1.0, mesh=parallel.make_data_mesh())
    with pytest.raises(UserInputError, match="--physical-batch 3"):
        step(params, optax.sgd(1.0).init(params), chunks_for(data, np.arange(5), 3, 2), jax.random.key(0), 1.0, 5.0)


def test_maybe_initialize_distributed_single_host_and_bad_env() -> None:
    assert parallel.maybe_initialize_distributed({}) is False
    assert (
        parallel.maybe_initialize_distributed({"JAX_COORDINATOR_ADDRESS": "localhost:1234", "JAX_NUM_PROCESSES": "1"})
        is False
    )
    with pytest.raises(UserInputError, match="JAX_PROCESS_ID"):
        parallel.maybe_initialize_distributed(
            {"JAX_COORDINATOR_ADDRESS": "localhost:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "5"}
        )
    with pytest.raises(UserInputError, match="JAX_NUM_PROCESSES"):
        parallel.maybe_initialize_distributed({"JAX_COORDINATOR_ADDRESS": "h:1", "JAX_NUM_PROCESSES": "two"})
