"""Fixtures of the attack tests: broken copies of the shared model, made per test."""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture
def bare_model(canary_model, tmp_path):
    """A writable copy of the shared run's Hugging Face directory (no run manifest around it)."""
    path = tmp_path / "hf"
    shutil.copytree(canary_model / "model", path)
    return path


@pytest.fixture(scope="session")
def classifier_model(canary_model, tmp_path_factory):
    """A tiny BERT sequence classifier (random weights, safetensors) with the shared run's tokenizer."""
    from transformers import BertConfig, BertForSequenceClassification

    path = tmp_path_factory.mktemp("classifier") / "hf"
    config = BertConfig(
        vocab_size=512,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        num_labels=3,
    )
    BertForSequenceClassification(config).save_pretrained(path)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(canary_model / "model" / name, path / name)
    return path
