"""Hugging Face export/import: transformers' BertForMaskedLM gives the Flax model's logits (1e-4)."""

from __future__ import annotations

import functools
import json
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from safetensors.numpy import load_file

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.jax_bert.hf_io import load_pretrained, save_pretrained
from dpaudit.trainers.jax_bert.model import BertConfig, FlaxBertForMaskedLM, init_params, preset_config
from dpaudit.training.tokenizer import train_wordpiece

SEQ = 16
TOL = 1e-4


@pytest.fixture(scope="module")
def tokenizer():
    rng = random.Random(0)
    words = "the cat sat on a mat with my account number is secret".split()
    texts = [" ".join(rng.choice(words) for _ in range(10)) + f" {rng.randint(0, 9999)}" for _ in range(60)]
    return train_wordpiece(texts, vocab_size=120)


@pytest.fixture(scope="module")
def flax_model(tokenizer):
    """A tiny model with every parameter perturbed (zero biases and unit LayerNorms would hide
    transposition and naming mistakes)."""
    config = preset_config("tiny", vocab_size=tokenizer.get_vocab_size() + 3, max_position_embeddings=32)
    rng = np.random.default_rng(1)
    params = jax.tree_util.tree_map(
        lambda x: jnp.asarray(np.asarray(x) + 0.1 * rng.standard_normal(x.shape), jnp.float32),
        init_params(config, jax.random.key(0)),
    )
    return config, params


def _inputs(vocab_size: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab_size, size=(4, SEQ))
    mask = np.ones_like(ids)
    mask[1, 11:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    types = np.zeros_like(ids)
    types[:, SEQ // 2 :] = 1
    types[3] = rng.integers(0, 2, size=SEQ)
    return ids, mask, types


@functools.lru_cache
def _jitted_apply(config: BertConfig):
    return jax.jit(FlaxBertForMaskedLM(config).apply)


def _flax_logits(config: BertConfig, params, ids, mask, types, positions=None) -> np.ndarray:
    apply = _jitted_apply(config)
    args = [jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(types)]
    if positions is not None:
        args.append(jnp.asarray(positions))
    return np.asarray(apply({"params": params}, *args))


def _torch_logits(model, ids, mask, types) -> np.ndarray:
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(types))
    return out.logits.numpy()


def test_exported_model_in_transformers_gives_the_flax_logits(tmp_path, tokenizer, flax_model):
    config, params = flax_model
    out = tmp_path / "model"
    save_pretrained(out, params, config, tokenizer)
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name != "model"]  # no staging leftovers
    hf_config = json.loads((out / "config.json").read_text())
    assert hf_config["model_type"] == "bert" and hf_config["architectures"] == ["BertForMaskedLM"]
    state = load_file(str(out / "model.safetensors"))
    assert "cls.predictions.decoder.weight" not in state  # tied, as transformers 5 writes it
    np.testing.assert_array_equal(
        state["cls.predictions.transform.dense.weight"],
        np.asarray(params["cls"]["predictions"]["transform"]["dense"]["kernel"]).T,
    )

    model, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    model.eval()
    assert type(model) is transformers.BertForMaskedLM
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()

    ids, mask, types = _inputs(config.vocab_size)
    expected = _torch_logits(model, ids, mask, types)
    actual = _flax_logits(config, params, ids, mask, types)
    assert actual.shape == expected.shape == (4, SEQ, config.vocab_size)
    np.testing.assert_allclose(actual, expected, atol=TOL, rtol=0)
    # Logits at masked positions only equal transformers' full logits gathered there.
    positions = np.array([[1, 5, 9], [0, 3, 10], [1, 2, 3], [4, 8, 15]])
    gathered = _flax_logits(config, params, ids, mask, types, positions)
    np.testing.assert_allclose(gathered, np.take_along_axis(expected, positions[..., None], axis=1), atol=TOL, rtol=0)
    # Default token types are zeros in both.
    with torch.no_grad():
        no_types = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(
        _flax_logits(config, params, ids, mask, np.zeros_like(types)), no_types, atol=TOL, rtol=0
    )


def test_round_trip_is_exact_and_replaces_the_directory(tmp_path, tokenizer, flax_model):
    config, params = flax_model
    out = tmp_path / "model"
    out.mkdir()
    (out / "stale.txt").write_text("from an older save")
    save_pretrained(out, params, config, tokenizer)
    assert not (out / "stale.txt").exists()
    loaded, loaded_config, loaded_tokenizer = load_pretrained(out)
    assert loaded_config == config
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(params)
    for a, b in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(params), strict=True):
        assert a.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert loaded_tokenizer.to_str() == tokenizer.to_str()
    # A failing save leaves the previous directory untouched.
    before = (out / "model.safetensors").read_bytes()
    with pytest.raises(ValueError, match="tokenizer vocabulary must fit"):
        save_pretrained(out, params, preset_config("tiny", vocab_size=50, max_position_embeddings=32), tokenizer)
    assert (out / "model.safetensors").read_bytes() == before


@pytest.mark.parametrize(
    ("architecture", "hidden_act"), [("BertForMaskedLM", "gelu"), ("BertForPreTraining", "gelu_new")]
)
def test_imports_a_model_that_transformers_saved(tmp_path, architecture, hidden_act):
    torch.manual_seed(0)
    hf_config = transformers.BertConfig(
        vocab_size=77,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=24,
        type_vocab_size=3,
        hidden_act=hidden_act,
        layer_norm_eps=1e-7,
    )
    model = getattr(transformers, architecture)(hf_config).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms
        for name, tensor in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                tensor.add_(0.1 * torch.randn_like(tensor))
    model.save_pretrained(tmp_path)
    params, config, tok = load_pretrained(tmp_path)
    assert tok is None  # transformers saves no tokenizer with a bare model
    assert (config.vocab_size, config.type_vocab_size, config.hidden_act, config.layer_norm_eps) == (
        77,
        3,
        hidden_act,
        1e-7,
    )
    ids, mask, types = _inputs(77, seed=1)
    types[0] = 2
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask), token_type_ids=torch.tensor(types))
    expected = out.logits.numpy() if architecture == "BertForMaskedLM" else out.prediction_logits.numpy()
    np.testing.assert_allclose(_flax_logits(config, params, ids, mask, types), expected, atol=TOL, rtol=0)


def test_load_errors_are_one_line_user_errors(tmp_path, tokenizer, flax_model):
    with pytest.raises(UserInputError, match="config.json is missing"):
        load_pretrained(tmp_path)
    config, params = flax_model
    out = tmp_path / "model"
    save_pretrained(out, params, config, tokenizer)
    (out / "model.safetensors").rename(out / "pytorch_model.bin")
    with pytest.raises(UserInputError, match="never pickle"):
        load_pretrained(out)
    save_pretrained(out, params, config, tokenizer)
    hf_config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**hf_config, "model_type": "roberta"}))
    with pytest.raises(UserInputError, match="model_type must be 'bert'"):
        load_pretrained(out)
    (out / "config.json").write_text(json.dumps({**hf_config, "hidden_size": 32}))
    with pytest.raises(UserInputError, match="has shape"):
        load_pretrained(out)
