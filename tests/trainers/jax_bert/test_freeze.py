"""``--freeze embeddings`` (jax-bert): the embedding tables get no gradient, no noise and no update, bit for bit; the
trained parameters change; the ghost engine equals the vmap oracle with the tables frozen; one example still moves
the clipped sum by at most C; privacy.json and the summary say what was trained."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from flax import traverse_util

from dpaudit.trainers.jax_bert import dp_step, ghost_clipping, model, optimizer
from dpaudit.trainers.jax_bert.config import JaxBertConfig
from tests.trainers.jax_bert.test_ghost_clipping import batch, removal_move
from tests.trainers.jax_bert.test_ghost_clipping import case as ghost_case

FROZEN = ghost_clipping.EMBEDDING_TABLES


@functools.lru_cache(maxsize=1)
def case():
    """test_ghost_clipping's tiny masked LM with one layer (what is frozen is the embedding tables: one layer shows
    it, and compiles in half the time)."""
    return ghost_case(num_hidden_layers=1)


@functools.lru_cache(maxsize=1)
def frozen_engines():
    """The vmap oracle (``stop_gradient`` on the tables) and the ghost engine, both with the tables frozen."""
    net, _ = case()
    loss_fn = dp_step.freeze_loss(functools.partial(model.example_mlm_loss, model=net), FROZEN)
    vmap = jax.jit(dp_step.make_clipped_sum_fn(loss_fn, clip_norm=1.0, vmap_size=4))
    return vmap, jax.jit(ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=1.0, frozen=FROZEN))


def test_ghost_equals_the_vmap_oracle_with_the_tables_frozen_and_their_sums_are_zero():
    _, params = case()
    data, mask = batch(1)
    vmap, ghost = frozen_engines()
    ref, ref_stats = vmap(params, data, mask, np.float32(0.3))
    got, got_stats = ghost(params, data, mask, np.float32(0.3))
    flat_ref, flat_got = traverse_util.flatten_dict(ref), traverse_util.flatten_dict(got)
    assert flat_ref.keys() == flat_got.keys()
    scale = max(float(np.max(np.abs(v))) for v in flat_ref.values())
    for key in flat_ref:
        if key in FROZEN:
            assert not np.any(np.asarray(flat_ref[key])) and not np.any(np.asarray(flat_got[key])), key
        else:
            np.testing.assert_allclose(
                flat_got[key], flat_ref[key], rtol=1e-4, atol=1e-5 * scale, err_msg="/".join(key)
            )
    assert 0 < float(got_stats.n_clipped) == float(ref_stats.n_clipped)  # clipping is active on both


def test_removing_one_example_moves_the_frozen_sum_by_at_most_c():
    _, params = case()
    _, ghost = frozen_engines()
    assert 0.05 * 0.99 <= removal_move(ghost, params) <= 0.05 * (1 + 1e-5)


def test_frozen_tables_are_bit_identical_after_dp_steps_and_the_rest_is_trained():
    """The DP step (ghost engine, weight decay on): the non-private step keeps the tables by the same
    :func:`dp_step.keep_frozen`."""
    net, params = case()
    loss_fn = functools.partial(model.example_mlm_loss, model=net)
    opt = optimizer.make_optimizer(learning_rate=1e-2, warmup_steps=0, total_steps=10, weight_decay=0.1)
    ghost = ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=0.5, frozen=FROZEN)
    step = dp_step.make_dp_train_step(loss_fn, opt, clip_norm=0.5, clipped_sum_fn=ghost, frozen=FROZEN)
    state = (params, opt.init(params))
    for t in range(2):
        data, mask = batch(10 + t)
        new_params, new_opt, metrics = step(*state, [(data, mask)], jax.random.key(t), 1.0, 8.0)
        state = (new_params, new_opt)
    before, after = traverse_util.flatten_dict(params), traverse_util.flatten_dict(state[0])
    for key in before:
        if key in FROZEN:
            assert np.array_equal(np.asarray(before[key]), np.asarray(after[key])), key  # weight decay too: none
        else:
            assert not np.array_equal(np.asarray(before[key]), np.asarray(after[key])), key
    # The noise drawn for the tables is dropped: the noise norm covers the trained leaves only.
    trained = sum(int(np.prod(v.shape)) for k, v in before.items() if k not in FROZEN)
    assert float(metrics.noise_norm) == pytest.approx(0.5 * np.sqrt(trained), rel=0.05)


def test_a_mismatched_frozen_set_is_refused():
    net, params = case()
    loss_fn = functools.partial(model.example_mlm_loss, model=net)
    opt = optimizer.make_optimizer(learning_rate=1e-2, warmup_steps=0, total_steps=10, weight_decay=0.0)
    with pytest.raises(ValueError, match="frozen"):
        dp_step.make_dp_train_step(
            loss_fn,
            opt,
            clip_norm=1.0,
            clipped_sum_fn=ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=1.0),
            frozen=FROZEN,
        )
    with pytest.raises(ValueError, match="vmap engine"):
        ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=1.0, frozen=frozenset({("cls", "predictions", "bias")}))
    with pytest.raises(ValueError, match="not parameters"):
        dp_step.check_frozen(params, frozenset({("bert", "nope")}))
    with pytest.raises(ValueError, match="--freeze must be one of none, embeddings"):
        JaxBertConfig(freeze="all", noise_multiplier=1.0)


def test_what_a_frozen_run_records_in_privacy_json_and_the_summary():
    """The trainer's record of what it trained (the summary's ``trained``, privacy.json's mechanism), from the real
    functions on real parameters; a whole run costs ~18 s of compilation and is left to the benchmark's runs."""
    from types import SimpleNamespace

    from dpaudit.trainers.jax_bert.trainer import _Plugin, trained_parameters

    _, params = case()
    flat = traverse_util.flatten_dict(params)
    frozen = sum(int(np.prod(flat[key].shape)) for key in FROZEN)
    total = sum(int(np.prod(v.shape)) for v in flat.values())
    assert trained_parameters(params, "embeddings") == {
        "freeze": "embeddings",
        "trained_parameters": total - frozen,
        "frozen_parameters": frozen,
        "frozen": sorted("/".join(key) for key in FROZEN),
    }
    assert trained_parameters(params, "none")["frozen_parameters"] == 0
    run = SimpleNamespace(
        config=JaxBertConfig(freeze="embeddings", noise_multiplier=1.0), params=params, _tokenizer_note=lambda: "t"
    )
    mechanism = _Plugin.record_parts(run, None, 5).mechanism  # type: ignore[arg-type]
    assert f"Trained parameters: {total - frozen:,}" in mechanism and "--freeze embeddings" in mechanism
    assert "bert/embeddings/word_embeddings/embedding" in mechanism and f"({frozen:,})" in mechanism
    unfrozen = SimpleNamespace(config=JaxBertConfig(noise_multiplier=1.0), params=params, _tokenizer_note=lambda: "t")
    assert "Trained parameters" not in _Plugin.record_parts(unfrozen, None, 5).mechanism  # type: ignore[arg-type]
