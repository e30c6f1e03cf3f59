"""Shared fixtures of the edp-sgd tests: tiny models, tiny batches, and a few finished runs."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models run fastest on one thread, and on a shared 2-core machine two spinning OpenMP
    threads made a tiny step 100x slower (2.5 s instead of 0.02 s)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)

#: Trainer options shared by the edp-sgd test files (tiny model, short runs).
TINY_EDP = dict(preset="tiny", vocab_size=300, max_length=16, epochs=2, batch_size=16, micro_batches=4,
                eval_examples=24, checkpoint_every=3, noise_seed=1234, learning_rate=1e-3)


@pytest.fixture(scope="session")
def edp_config():
    """Factory: the tiny edp-sgd Config with overrides."""
    from trainers.edp_sgd.config import EdpSgdConfig

    def make(**overrides):
        values = {**TINY_EDP, **overrides}
        if values.get("mode") == "sgd":
            values.pop("noise_seed", None) if "noise_seed" not in overrides else None
        elif values.get("noise_multiplier") is None and values.get("target_epsilon") is None:
            values["noise_multiplier"] = 1.0
        return EdpSgdConfig(**values)

    return make


@pytest.fixture(scope="session")
def tiny_batches():
    """(classify model, classify batch, mlm model, mlm batch): tiny BERTs and 6-example batches."""
    import torch

    from trainers.torch_common.data import additive_mask, mask_tokens
    from trainers.torch_common.model import build_model

    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([12, 7, 9, 12, 5, 10])
    ids = torch.randint(5, 100, (6, 12), generator=gen)
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    ids[:, 0] = 2
    clf = build_model("classify", preset="tiny", vocab_size=100, max_length=16, label_names=["a", "b", "c"], seed=0)
    clf_batch = {"input_ids": ids, "labels": torch.tensor([0, 1, 2, 1, 0, 2]), "mask4": additive_mask(mask)}
    mlm = build_model("mlm", preset="tiny", vocab_size=100, max_length=16, label_names=None, seed=0)
    mlm_batch = mask_tokens(ids, mask, generator=gen, mask_id=4, vocab_size=100, special_ids=[0, 1, 2, 3, 4],
                            mask_prob=0.3, n_predictions=5)
    mlm_batch["mask4"] = additive_mask(mask)
    return clf, clf_batch, mlm, mlm_batch
