"""Ghost norms + book-keeping equal the vmap per-example oracle, leaf by leaf (trainers/jax_bert/ghost_clipping.py)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from flax import traverse_util

from dpaudit.trainers.jax_bert import dp_step, ghost_clipping, model, optimizer, parallel, sampling
from tests.trainers.jax_bert.test_dp_parallel import bert_case

VOCAB, LENGTH, N_PRED = 53, 12, 4


@functools.lru_cache(maxsize=1)
def case(**overrides):
    """The tiny masked LM (``overrides``: of its preset config) and its parameters."""
    cfg = model.preset_config("tiny", vocab_size=VOCAB, max_position_embeddings=16, **overrides)
    net = model.FlaxBertForMaskedLM(cfg)
    params = model.init_params(cfg, jax.random.key(0), seq_len=LENGTH)
    # Train a little so the LayerNorm scales/biases and the output bias are not at their init values.
    params = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(jax.random.key(7), p.shape), params)
    return net, params


def batch(seed: int, s: int = 2, m: int = 4, token_types: bool = True):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, LENGTH + 1, size=(s, m, 1))
    out = {
        # Few distinct ids, so rows repeat within an example and the masked labels hit input ids.
        "input_ids": rng.integers(5, 14, size=(s, m, LENGTH)).astype(np.int32),
        "attention_mask": (np.arange(LENGTH) < lengths).astype(np.int32),
        "masked_positions": rng.integers(0, 5, size=(s, m, N_PRED)).astype(np.int32),
        "masked_labels": rng.integers(5, 14, size=(s, m, N_PRED)).astype(np.int32),
        "masked_weights": (rng.random((s, m, N_PRED)) < 0.8).astype(np.float32),
    }
    if token_types:
        out["token_type_ids"] = rng.integers(0, 2, size=(s, m, LENGTH)).astype(np.int32)
    mask = np.ones((s, m), np.float32)
    mask[-1, -1] = 0.0  # a padding slot contributes nothing
    return out, mask


@functools.lru_cache(maxsize=1)
def engines():
    """The vmap oracle and the ghost engine, jitted once: the clip norm is their traced fourth argument, as the
    DP step passes it (their own ``clip_norm`` here is a default the calls below override), so every C below
    runs the same two compiled programs."""
    net, _ = case()
    loss_fn = functools.partial(model.example_mlm_loss, model=net)
    vmap = jax.jit(dp_step.make_clipped_sum_fn(loss_fn, clip_norm=1.0, vmap_size=4))
    return vmap, jax.jit(ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=1.0))


# Every clip norm regime (all clipped, some, none) with token types, and the path without token types once: the
# clipping does not depend on them (the suite's time is the constraint).
@pytest.mark.parametrize(("clip_norm", "token_types"), [(1e-3, True), (0.3, True), (float("inf"), True), (0.3, False)])
def test_clipped_sum_equals_vmap_oracle_leaf_by_leaf(clip_norm, token_types):
    _, params = case()
    data, mask = batch(1, token_types=token_types)
    vmap, ghost = engines()
    ref, ref_stats = vmap(params, data, mask, np.float32(clip_norm))
    got, got_stats = ghost(params, data, mask, np.float32(clip_norm))
    flat_ref, flat_got = traverse_util.flatten_dict(ref), traverse_util.flatten_dict(got)
    assert flat_ref.keys() == flat_got.keys()
    # Tolerance relative to the whole sum: some leaves are exactly zero in exact arithmetic (the
    # attention key bias cannot change a softmax), so both sides hold only float noise there.
    scale = max(float(np.max(np.abs(v))) for v in flat_ref.values())
    for key in flat_ref:
        np.testing.assert_allclose(flat_got[key], flat_ref[key], rtol=1e-4, atol=1e-5 * scale, err_msg="/".join(key))
    for a, b in zip(ref_stats, got_stats):
        assert float(a) == pytest.approx(float(b), rel=1e-5, abs=1e-6)
    if clip_norm == float("inf"):
        assert float(got_stats.n_clipped) == 0.0  # a traced C = inf clips nothing
    if clip_norm == 1e-3:
        assert float(got_stats.n_clipped) == float(mask.sum())  # every real example was clipped
        # Each clipped example contributes a vector of norm exactly C; the sum is at most 7C.
        total = np.sqrt(sum(float(np.sum(np.square(x))) for x in jax.tree.leaves(got)))
        assert total <= 7 * clip_norm * (1 + 1e-5)


def removal_move(ghost, params) -> float:
    """How far removing one example (from the middle of :func:`batch` 2) moves ``ghost``'s clipped sum at C = 0.05."""
    data, mask = batch(2)
    full, _ = ghost(params, data, mask, np.float32(0.05))
    fewer = mask.copy()
    fewer[0, 1] = 0.0
    less, _ = ghost(params, data, fewer, np.float32(0.05))
    return float(
        np.sqrt(sum(float(np.sum(np.square(a - b))) for a, b in zip(jax.tree.leaves(full), jax.tree.leaves(less))))
    )


def test_removing_one_example_moves_the_sum_by_at_most_c():
    _, params = case()
    _, ghost = engines()
    diff = removal_move(ghost, params)
    assert 0.05 * 0.99 <= diff <= 0.05 * (1 + 1e-5)  # the removed example was clipped, so the bound is met


def test_dp_step_with_ghost_clipping_matches_vmap_step_and_shards_over_two_devices():
    """On test_dp_parallel.py's tiny BERT, data, chunk shape and optimizer (its parameters moved off their init as in
    :func:`case`; no token types: the leaf-by-leaf cases cover them), so that the vmap step and both finishes are
    the programs that file and test_dp_step.py compile. Margin measured (step seeds 0, 1; every example clipped;
    the second step overflows into two chunks): the largest |difference| is 0.01 of the tolerance."""
    loss_fn, params, data = bert_case()
    net = loss_fn.keywords["model"]
    params = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(jax.random.key(7), p.shape), params)
    opt = optimizer.make_optimizer(learning_rate=1e-2, warmup_steps=1, total_steps=10, weight_decay=0.1)
    ghost = ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=0.5)
    vmap_step = dp_step.make_dp_train_step(loss_fn, opt, clip_norm=0.5)
    ghost_step = dp_step.make_dp_train_step(loss_fn, opt, clip_norm=0.5, clipped_sum_fn=ghost)
    sharded = dp_step.make_dp_train_step(
        loss_fn, opt, clip_norm=0.5, clipped_sum_fn=ghost, mesh=parallel.make_data_mesh()
    )
    states = [(params, opt.init(params)) for _ in range(3)]
    rng = np.random.default_rng(0)
    n_chunks = []
    for t in range(2):
        idx = sampling.poisson_sample(rng, 32, 0.25)
        chunks = [({k: v[i] for k, v in data.items()}, m) for i, m in sampling.pack_microsteps(idx, 4, 2)]
        n_chunks.append(len(chunks))
        key = jax.random.key(t)
        outs = [step(p, s, chunks, key, 0.4, 8.0) for step, (p, s) in zip((vmap_step, ghost_step, sharded), states)]
        assert float(outs[0][2].clip_fraction) > 0  # clipping is active
        states = [out[:2] for out in outs]
    assert max(n_chunks) > 1  # a batch overflowed into a second chunk
    for other in states[1:]:
        jax.tree.map(
            lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5),
            states[0][0],
            other[0],
        )


def test_sensitivity_must_match_the_clip_norm():
    net, _ = case()
    loss_fn = functools.partial(model.example_mlm_loss, model=net)
    ghost = ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=1.0)
    assert ghost.sensitivity == 1.0
    with pytest.raises(ValueError, match="sensitivity must equal clip_norm"):
        dp_step.make_dp_train_step(
            loss_fn,
            optimizer.make_optimizer(learning_rate=1e-3, warmup_steps=0, total_steps=2, weight_decay=0.0),
            clip_norm=2.0,
            clipped_sum_fn=ghost,
        )
