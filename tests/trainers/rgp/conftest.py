"""Shared fixtures of the rgp tests: one torch thread, tiny BERTs with tiny batches, a Config factory."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models run fastest on one thread (and the machine is shared)."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


#: Trainer options shared by the rgp test files (tiny model, short runs).
TINY_RGP = {"preset": "tiny", "vocab_size": 300, "max_length": 16, "epochs": 1, "batch_size": 16, "rank": 4,
            "warmup_steps": 2, "eval_examples": 24, "checkpoint_every": 3, "noise_seed": 1234, "noise_multiplier": 1.0,
            "learning_rate": 1e-3}


@pytest.fixture(scope="session")
def rgp_config():
    """Factory: the tiny rgp Config with overrides."""
    from trainers.rgp.config import RgpConfig

    def make(**overrides):
        return RgpConfig(**{**TINY_RGP, **overrides})

    return make


def _batches():
    import torch

    from trainers.torch_common.data import additive_mask, mask_tokens

    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([12, 7, 9, 12, 5, 10])
    ids = torch.randint(5, 100, (6, 12), generator=gen)
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    ids[:, 0] = 2
    clf_batch = {"input_ids": ids, "labels": torch.tensor([0, 1, 2, 1, 0, 2]), "mask4": additive_mask(mask)}
    mlm_batch = mask_tokens(ids, mask, generator=gen, mask_id=4, vocab_size=100, special_ids=[0, 1, 2, 3, 4],
                            mask_prob=0.3, n_predictions=5)
    mlm_batch["mask4"] = additive_mask(mask)
    return {"classify": clf_batch, "mlm": mlm_batch}


@pytest.fixture(scope="session")
def tiny_batches():
    """task -> a 6-example batch of a 100-token vocabulary."""
    return _batches()


@pytest.fixture(scope="session")
def make_model():
    """Factory: a fresh tiny BERT (same init every call) for ``task``."""
    from trainers.torch_common.model import build_model

    def make(task, preset="tiny"):
        labels = ["a", "b", "c"] if task == "classify" else None
        return build_model(task, preset=preset, vocab_size=100, max_length=16, label_names=labels, seed=0)

    return make
