"""Shared fixtures of the edp-sgd tests: tiny models, tiny batches, and a few finished runs."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every edp-sgd test runs on one torch thread (tests/trainers/conftest.py says why)."""


#: Trainer options shared by the edp-sgd test files (tiny model, short runs).
TINY_EDP = dict(
    preset="tiny",
    vocab_size=300,
    max_length=16,
    epochs=2,
    batch_size=16,
    micro_batches=4,
    eval_examples=24,
    checkpoint_every=3,
    noise_seed=1234,
    learning_rate=1e-3,
)


@pytest.fixture(scope="session")
def edp_config():
    """Factory: the tiny edp-sgd Config with overrides."""
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig

    def make(**overrides):
        values = {**TINY_EDP, **overrides}
        if values.get("mode") == "sgd":
            values.pop("noise_seed", None) if "noise_seed" not in overrides else None
        elif values.get("noise_multiplier") is None and values.get("target_epsilon") is None:
            values["noise_multiplier"] = 1.0
        return EdpSgdConfig(**values)

    return make


@pytest.fixture(scope="session")
def tiny_batches(token_batches):
    """(classify model, classify batch, mlm model, mlm batch): tiny BERTs and 6-example batches."""
    from dpaudit.trainers.torch_common.model import build_model

    clf = build_model("classify", preset="tiny", vocab_size=100, max_length=16, label_names=["a", "b", "c"], seed=0)
    mlm = build_model("mlm", preset="tiny", vocab_size=100, max_length=16, label_names=None, seed=0)
    return clf, token_batches["classify"], mlm, token_batches["mlm"]


@pytest.fixture
def assert_resume_equals_straight(data_dir, tmp_path, killed_after_checkpoint, assert_same_model):
    """Checker: an edp-sgd run of ``config`` killed after checkpoint ``step`` and resumed exports the model of the
    same run trained straight through, bit for bit (state a checkpoint must carry: moments, averages, counters)."""
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    def check(config, *, step: int = 4, seed: int = 5) -> None:
        EdpSgdTrainer().train(data_dir, tmp_path / "straight", config, seed=seed)
        resumed = tmp_path / "resumed"
        killed_after_checkpoint(lambda: EdpSgdTrainer().train(data_dir, resumed, config, seed=seed), step=step)
        EdpSgdTrainer().train(data_dir, resumed, config, seed=seed)
        assert_same_model(tmp_path / "straight", resumed, atol=0, rtol=0)

    return check
