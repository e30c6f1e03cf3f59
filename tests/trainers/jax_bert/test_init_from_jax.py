"""jax-bert --init-from: Hugging Face BERT masked-LM weights into the Flax model, and back.

The import (:func:`~trainers.jax_bert.hf_io.load_pretrained`) is the inverse of the export: export -> import gives
the same parameters bit for bit and the same MLM logits; a BertForMaskedLM that transformers saved becomes the
run's starting parameters (its logits to 1e-4), with its tokenizer.json as the run's tokenizer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from dpaudit.common.errors import UserInputError
from dpaudit.inject_dir.reader import load_inject_run
from dpaudit.trainers.jax_bert.config import JaxBertConfig
from dpaudit.trainers.jax_bert.hf_io import load_pretrained, save_pretrained
from dpaudit.trainers.jax_bert.model import FlaxBertForMaskedLM, init_params, preset_config
from dpaudit.trainers.jax_bert.trainer import _Plugin
from dpaudit.training.tokenizer import missing_new_tokens, train_wordpiece
from tests.conftest import TINY_JAX_BERT

SEQ = 16


def _batch(vocab_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(5, vocab_size, size=(3, SEQ))
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    ids[mask == 0] = 0
    return ids, mask, np.zeros_like(ids)


def _logits(config, params, ids, mask, types) -> np.ndarray:
    """The model's logits, jitted: run eagerly, the forward pass compiled each of its primitives on its own."""
    apply = jax.jit(FlaxBertForMaskedLM(config).apply)
    return np.asarray(apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask), jnp.asarray(types)))


@pytest.fixture(scope="module")
def tokenizer(data_dir):
    return train_wordpiece(load_inject_run(data_dir).public_texts, vocab_size=128)


def test_export_then_import_gives_identical_parameters_and_logits(tmp_path, tokenizer):
    config = preset_config("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=32)
    rng = np.random.default_rng(3)  # every parameter perturbed: zero biases and unit LayerNorms hide layout mistakes
    params = jax.tree_util.tree_map(
        lambda x: jnp.asarray(np.asarray(x) + 0.1 * rng.standard_normal(x.shape), jnp.float32),
        init_params(config, jax.random.key(0)),
    )
    save_pretrained(tmp_path / "model", params, config, tokenizer)
    loaded, loaded_config, loaded_tokenizer = load_pretrained(tmp_path / "model")
    assert loaded_config == config and loaded_tokenizer.to_str() == tokenizer.to_str()
    flat, flat_loaded = (jax.tree_util.tree_flatten_with_path(p)[0] for p in (params, loaded))
    assert [k for k, _ in flat] == [k for k, _ in flat_loaded]
    for (_, a), (_, b) in zip(flat, flat_loaded, strict=True):
        np.testing.assert_array_equal(np.asarray(b), np.asarray(a))
    batch = _batch(config.vocab_size)
    np.testing.assert_array_equal(_logits(loaded_config, loaded, *batch), _logits(config, params, *batch))


def test_a_transformers_masked_lm_is_the_run_s_start(tmp_path, data_dir, tokenizer):
    torch.manual_seed(0)
    hf = transformers.BertConfig(
        vocab_size=tokenizer.get_vocab_size() + 5,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=32,
    )
    model = transformers.BertForMaskedLM(hf).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorms
        for name, tensor in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                tensor.add_(0.1 * torch.randn_like(tensor))
    start = tmp_path / "bert"
    model.save_pretrained(start)
    tokenizer.save(str(start / "tokenizer.json"))
    settings = {k: v for k, v in TINY_JAX_BERT.items() if k != "vocab_size"}
    plugin = _Plugin(data_dir, tmp_path / "out", JaxBertConfig(**settings, init_from=str(start)), seed=0)
    plugin.skeleton.setup()  # everything before the first step: nothing is written
    assert not (tmp_path / "out").exists()
    assert plugin.bert_config.vocab_size == hf.vocab_size and plugin.bert_config.hidden_size == 32
    assert plugin.tokenizer.to_str() == tokenizer.to_str()
    params = jax.device_get(plugin.params)
    ids, mask, types = _batch(hf.vocab_size)
    with torch.no_grad():
        expected = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()
    np.testing.assert_allclose(_logits(plugin.bert_config, params, ids, mask, types), expected, atol=1e-4, rtol=0)
    assert plugin.skeleton.data.start.weights.keys() == {"model.safetensors"}


def test_a_start_that_does_not_fit_is_one_line(tmp_path, data_dir, tokenizer):
    settings = {k: v for k, v in TINY_JAX_BERT.items() if k != "vocab_size"}
    config = preset_config("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=32)
    save_pretrained(tmp_path / "m", init_params(config, jax.random.key(0)), config, tokenizer)
    long = JaxBertConfig(**{**settings, "max_length": 64}, init_from=str(tmp_path / "m"))
    with pytest.raises(UserInputError, match="--max-length 64 exceeds the start's position table"):
        _Plugin(data_dir, tmp_path / "out", long, seed=0).skeleton.setup()
    with pytest.raises(ValueError, match=r"lacks 1 of the 2 tokens .*\(e\.g\. 'zzqx'\)"):
        missing_new_tokens(tokenizer, ["the", "zzqx"], option="--init-from m")
    assert not (tmp_path / "out").exists()
