"""Shared fixtures of the rgp tests: one torch thread, tiny BERTs with tiny batches, a Config factory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every rgp test runs on one torch thread (tests/trainers/conftest.py says why)."""


#: Trainer options shared by the rgp test files (tiny model, short runs).
TINY_RGP = {
    "preset": "tiny",
    "vocab_size": 300,
    "max_length": 16,
    "epochs": 1,
    "batch_size": 16,
    "rank": 4,
    "warmup_steps": 2,
    "eval_examples": 24,
    "checkpoint_every": 3,
    "noise_seed": 1234,
    "noise_multiplier": 1.0,
    "learning_rate": 1e-3,
}


@pytest.fixture(scope="session")
def rgp_config():
    """Factory: the tiny rgp Config with overrides."""
    from dpaudit.trainers.rgp.config import RgpConfig

    def make(**overrides):
        return RgpConfig(**{**TINY_RGP, **overrides})

    return make


@pytest.fixture(scope="session")
def tiny_batches(token_batches):
    """task -> a 6-example batch of a 100-token vocabulary."""
    return token_batches


@pytest.fixture(scope="session")
def make_model():
    """Factory: a fresh tiny BERT (same init every call) for ``task``; a tiny GPT-2 for ``clm``."""
    from dpaudit.trainers.torch_common.model import build_model

    def make(task, preset="tiny"):
        labels = ["a", "b", "c"] if task == "classify" else None
        return build_model(
            task,
            preset=preset,
            vocab_size=100,
            max_length=16,
            label_names=labels,
            seed=0,
            specials={"pad": 0, "cls": 2, "sep": 3},
        )  # clm: a GPT-2

    return make
