"""The Flax BERT masked-LM: shapes, the masked-position head, padding, losses and config validation."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpaudit.trainers.jax_bert.model import (
    PRESETS,
    BertConfig,
    FlaxBertForMaskedLM,
    batch_mlm_loss,
    example_mlm_loss,
    init_params,
    preset_config,
)

VOCAB = 97
SEQ = 12


@pytest.fixture(scope="module")
def tiny():
    config = preset_config("tiny", vocab_size=VOCAB, max_position_embeddings=32)
    params = init_params(config, jax.random.key(0))
    return config, FlaxBertForMaskedLM(config), params


# Eager (op-by-op) Flax is slow; every model evaluation in these tests is jitted.
class _Jitted(NamedTuple):
    apply: Callable
    loss: Callable
    batch_loss: Callable
    grad: Callable


@functools.lru_cache
def _jitted(model: FlaxBertForMaskedLM) -> _Jitted:
    return _Jitted(
        apply=jax.jit(model.apply),
        loss=jax.jit(functools.partial(example_mlm_loss, model=model)),
        batch_loss=jax.jit(functools.partial(batch_mlm_loss, model=model)),
        grad=jax.jit(jax.grad(functools.partial(example_mlm_loss, model=model), has_aux=True)),
    )


def _batch(seed: int, batch: int = 3, predictions: int = 4) -> dict[str, jnp.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCAB, size=(batch, SEQ)).astype(np.int32)
    lengths = rng.integers(6, SEQ + 1, size=batch)
    lengths[0] = SEQ
    mask = (np.arange(SEQ)[None, :] < lengths[:, None]).astype(np.int32)
    ids = np.where(mask == 1, ids, 0)
    positions = np.stack([rng.choice(int(n), size=predictions, replace=False) for n in lengths]).astype(np.int32)
    labels = rng.integers(5, VOCAB, size=(batch, predictions)).astype(np.int32)
    weights = np.ones((batch, predictions), np.float32)
    weights[1, -1] = 0.0
    return {
        "input_ids": jnp.asarray(ids),
        "attention_mask": jnp.asarray(mask),
        "token_type_ids": jnp.asarray((np.arange(SEQ)[None, :] >= SEQ // 2).astype(np.int32).repeat(batch, 0)),
        "masked_positions": jnp.asarray(positions),
        "masked_labels": jnp.asarray(labels),
        "masked_weights": jnp.asarray(weights),
    }


def test_presets_have_the_documented_shapes():
    assert PRESETS["mini"] == {
        "num_hidden_layers": 4,
        "hidden_size": 312,
        "num_attention_heads": 12,
        "intermediate_size": 1200,
    }
    assert PRESETS["base"]["hidden_size"] == 768 and PRESETS["large"]["num_hidden_layers"] == 24
    config = preset_config("mini", vocab_size=30522, max_position_embeddings=64)
    assert (config.vocab_size, config.max_position_embeddings, config.head_dim) == (30522, 64, 26)
    assert preset_config("tiny", vocab_size=10, hidden_dropout_prob=0.0).hidden_dropout_prob == 0.0
    with pytest.raises(ValueError, match="preset must be one of"):
        preset_config("huge", vocab_size=10)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("hidden_size", 65, "multiple of num_attention_heads"),
        ("vocab_size", 0, "vocab_size must be a positive integer"),
        ("hidden_dropout_prob", 1.0, r"hidden_dropout_prob must be in \[0, 1\)"),
        ("hidden_act", "swish", "hidden_act must be one of"),
        ("pad_token_id", 97, "pad_token_id must be an integer"),
        ("layer_norm_eps", 0.0, "layer_norm_eps must be > 0"),
    ],
)
def test_config_validation(field, value, message):
    base = preset_config("tiny", vocab_size=VOCAB)
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(base, **{field: value})


def test_config_hf_dict_round_trip():
    config = preset_config("tiny", vocab_size=VOCAB, max_position_embeddings=32, hidden_act="gelu_new")
    d = config.to_hf_dict()
    assert d["model_type"] == "bert" and d["architectures"] == ["BertForMaskedLM"] and d["tie_word_embeddings"]
    assert BertConfig.from_hf_dict(d) == config
    with pytest.raises(ValueError, match="model_type must be 'bert'"):
        BertConfig.from_hf_dict({**d, "model_type": "roberta"})
    with pytest.raises(ValueError, match="tie_word_embeddings"):
        BertConfig.from_hf_dict({**d, "tie_word_embeddings": False})


def test_parameter_tree_and_init(tiny):
    config, _, params = tiny
    assert set(params) == {"bert", "cls"}
    assert set(params["bert"]["encoder"]["layer"]) == {"0", "1"}
    layer = params["bert"]["encoder"]["layer"]["0"]
    assert layer["attention"]["self"]["query"]["kernel"].shape == (64, 64)
    assert layer["intermediate"]["dense"]["kernel"].shape == (64, 128)
    assert layer["output"]["dense"]["kernel"].shape == (128, 64)
    words = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert words.shape == (VOCAB, 64) and words.dtype == jnp.float32
    np.testing.assert_array_equal(words[config.pad_token_id], 0.0)  # HF zeroes the [PAD] row
    assert 0.015 < float(jnp.std(words[1:])) < 0.025  # normal(initializer_range=0.02)
    np.testing.assert_array_equal(params["cls"]["predictions"]["bias"], 0.0)
    assert "decoder" not in params["cls"]["predictions"]  # tied to the word embeddings


def test_declared_new_token_rows_start_at_zero_and_nothing_else_moves(tiny):
    config, _, params = tiny
    zeroed = init_params(config, jax.random.key(0), zero_rows=[VOCAB - 1, 5])
    before = np.asarray(params["bert"]["embeddings"]["word_embeddings"]["embedding"])
    after = np.asarray(zeroed["bert"]["embeddings"]["word_embeddings"]["embedding"])
    np.testing.assert_array_equal(after[[5, VOCAB - 1, config.pad_token_id]], 0.0)
    keep = np.setdiff1d(np.arange(VOCAB), [5, VOCAB - 1])
    np.testing.assert_array_equal(after[keep], before[keep])  # the same draw: only the declared rows differ
    assert np.abs(before[[5, VOCAB - 1]]).sum() > 0


def test_shapes_and_masked_positions_equal_gathered_full_logits(tiny):
    _, model, params = tiny
    batch = _batch(1)
    args = ({"params": params}, batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    full = _jitted(model).apply(*args)
    assert full.shape == (3, SEQ, VOCAB) and full.dtype == jnp.float32
    gathered = _jitted(model).apply(*args, batch["masked_positions"])
    assert gathered.shape == (3, 4, VOCAB)
    expected = jnp.take_along_axis(full, batch["masked_positions"][..., None], axis=1)
    np.testing.assert_allclose(gathered, expected, rtol=1e-5, atol=1e-5)


def test_padding_does_not_change_real_positions_and_token_types_matter(tiny):
    _, model, params = tiny
    batch = _batch(2)
    ids, mask = batch["input_ids"][:1, :8], batch["attention_mask"][:1, :8]
    short = _jitted(model).apply({"params": params}, ids, mask)
    padded_ids = jnp.concatenate([ids, jnp.full((1, 4), 7, jnp.int32)], axis=1)  # junk behind the mask
    padded_mask = jnp.concatenate([mask, jnp.zeros((1, 4), jnp.int32)], axis=1)
    padded = _jitted(model).apply({"params": params}, padded_ids, padded_mask)
    np.testing.assert_allclose(padded[:, :8], short, rtol=1e-5, atol=1e-5)
    # Without the mask the junk would be attended to; token types are an input of the model.
    unmasked = _jitted(model).apply({"params": params}, padded_ids, jnp.ones_like(padded_mask))
    assert float(jnp.max(jnp.abs(unmasked[:, :8] - short))) > 1e-3
    typed = _jitted(model).apply({"params": params}, ids, mask, jnp.ones_like(ids))
    assert float(jnp.max(jnp.abs(typed - short))) > 1e-3


def test_sequence_longer_than_positions_is_refused(tiny):
    _, model, params = tiny
    ids = jnp.ones((1, 33), jnp.int32)
    with pytest.raises(ValueError, match="max_position_embeddings=32"):
        _jitted(model).apply({"params": params}, ids, ids)


def _reference_loss(logits: np.ndarray, labels: np.ndarray, weights: np.ndarray) -> tuple[float, float, float]:
    logits = logits.astype(np.float64)
    logp = (
        logits
        - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    nll = -logp[np.arange(len(labels)), labels]
    n = weights.sum()
    loss = (nll * weights).sum() / n if n > 0 else 0.0
    return loss, float(((logits.argmax(-1) == labels) * weights).sum()), float(n)


def test_example_loss_matches_numpy_reference_and_batch_loss(tiny):
    _, model, params = tiny
    batch = _batch(3)
    # Make one prediction correct by construction, so n_correct is exercised.
    full = _jitted(model).apply(
        {"params": params},
        batch["input_ids"],
        batch["attention_mask"],
        batch["token_type_ids"],
        batch["masked_positions"],
    )
    batch["masked_labels"] = batch["masked_labels"].at[0, 0].set(jnp.argmax(full[0, 0]))
    losses = []
    for i in range(3):
        example = {k: v[i] for k, v in batch.items()}
        loss, aux = _jitted(model).loss(params, example)
        ref_loss, ref_correct, ref_n = _reference_loss(
            np.asarray(full[i]), np.asarray(batch["masked_labels"][i]), np.asarray(batch["masked_weights"][i])
        )
        np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5)
        assert float(aux["n_correct"]) == ref_correct and float(aux["n_predictions"]) == ref_n
        losses.append(float(loss))
    assert float(aux["n_predictions"]) == 4.0
    example0 = {k: v[0] for k, v in batch.items()}
    assert float(_jitted(model).loss(params, example0)[1]["n_correct"]) >= 1.0
    loss, aux = _jitted(model).batch_loss(params, batch)
    np.testing.assert_allclose(float(loss), np.mean(losses), rtol=1e-5)
    assert float(aux["n_predictions"]) == 11.0  # 12 slots, one with weight 0


def test_example_without_predictions_has_zero_loss_and_zero_gradient(tiny):
    _, model, params = tiny
    example = {k: v[0] for k, v in _batch(4).items()}
    example["masked_weights"] = jnp.zeros_like(example["masked_weights"])
    loss, aux = _jitted(model).loss(params, example)
    assert float(loss) == 0.0 and float(aux["n_predictions"]) == 0.0
    grads, _ = _jitted(model).grad(params, example)
    assert all(bool(jnp.all(g == 0)) for g in jax.tree_util.tree_leaves(grads))


def test_vmapped_per_example_gradients_equal_single_example_gradients(tiny):
    _, model, params = tiny
    batch = _batch(5)
    grad_fn = jax.grad(functools.partial(example_mlm_loss, model=model), has_aux=True)
    per_example, aux = jax.jit(jax.vmap(grad_fn, in_axes=(None, 0)))(params, batch)
    assert aux["n_predictions"].shape == (3,)
    for i in range(3):
        single, _ = _jitted(model).grad(params, {k: v[i] for k, v in batch.items()})
        for a, b in zip(jax.tree_util.tree_leaves(per_example), jax.tree_util.tree_leaves(single), strict=True):
            np.testing.assert_allclose(a[i], b, rtol=1e-4, atol=1e-6)
    # The decoder is tied: the word embedding gradient includes the output layer's gradient.
    words = per_example["bert"]["embeddings"]["word_embeddings"]["embedding"]
    assert float(jnp.max(jnp.abs(words[0, batch["masked_labels"][0, 0]]))) > 0


def test_dropout_is_off_by_default_and_on_with_a_key(tiny):
    _, model, params = tiny
    example = {k: v[0] for k, v in _batch(6).items()}
    base, _ = _jitted(model).loss(params, example)
    again, _ = _jitted(model).loss(params, example)
    assert float(base) == float(again)
    first, _ = _jitted(model).loss(params, example, dropout_rng=jax.random.key(1))
    second, _ = _jitted(model).loss(params, example, dropout_rng=jax.random.key(2))
    assert float(first) != float(base) and float(first) != float(second)
    same, _ = _jitted(model).loss(params, example, dropout_rng=jax.random.key(1))
    assert float(same) == float(first)
