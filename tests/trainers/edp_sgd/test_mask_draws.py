"""``--mask-draws K``: each example's gradient is the mean over K maskings before it is clipped (augmentation
multiplicity, De et al. 2022): the engines agree with a plain autograd oracle, draw 0 masks as one draw does, and a
run records what ran at the same epsilon (its sensitivity contract is in tests/test_sensitivity_contract.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpaudit.trainers.torch_common.clipping.ghost import GhostClipper
from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper, trainable
from dpaudit.trainers.torch_common.data import additive_mask, content_hashes, draw_contents, mask_tokens
from dpaudit.trainers.torch_common.model import build_model, per_example_losses

K = 3


def _examples() -> tuple[torch.Tensor, torch.Tensor]:
    """Four examples of a 100-token vocabulary, ragged lengths (ids, attention mask)."""
    gen = torch.Generator().manual_seed(1)
    lengths = torch.tensor([12, 7, 9, 10])
    ids = torch.randint(5, 100, (4, 12), generator=gen)
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    ids[:, 0] = 2
    return ids, mask


def _masked(ids: torch.Tensor, mask: torch.Tensor, draws: int) -> dict[str, torch.Tensor]:
    """The batch the trainer builds (``TorchPlugin._batch``): each example's ``draws`` rows together, each masked by
    its draw key and weighted 1 / draws."""
    content = content_hashes(ids, mask.sum(1))
    if draws > 1:
        content = draw_contents(content, draws)
    ids, mask = ids.repeat_interleave(draws, 0), mask.repeat_interleave(draws, 0)
    batch = mask_tokens(
        ids,
        mask,
        generator=torch.Generator().manual_seed(7),
        mask_id=4,
        vocab_size=100,
        special_ids=[0, 1, 2, 3, 4],
        mask_prob=0.3,
        n_predictions=5,
        content=content,
    )
    batch["mask4"] = additive_mask(mask)
    if draws > 1:
        batch["draw_weight"] = torch.full((len(ids),), 1.0 / draws)
    return batch


def _model(saved: bool) -> torch.nn.Module:
    """The tiny masked LM (decoder tied to the word embeddings), or LoRA over it with the word embeddings trained."""
    model = build_model("mlm", preset="tiny", vocab_size=100, max_length=16, label_names=None, seed=0)
    if not saved:
        return model
    from dpaudit.trainers.torch_common.lora import apply_lora

    lora = apply_lora(model, task="mlm", rank=4, alpha=8, targets=None, seed=0, modules_to_save=["word_embeddings"])
    with torch.no_grad():  # B starts at zero: give the adapters a gradient path
        for name, p in lora.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2)
    return lora.model


def _oracle(model: torch.nn.Module, batch: dict[str, torch.Tensor], clip: float) -> list[torch.Tensor]:
    """Plain autograd, one example at a time: the gradient of its K rows' weighted losses (their mean), clipped to
    ``clip``, summed over examples."""
    _, params = trainable(model)
    total = [torch.zeros_like(p) for p in params]
    for u in range(len(batch["input_ids"]) // K):
        rows = {key: v[u * K : (u + 1) * K] for key, v in batch.items()}
        losses, _ = per_example_losses(model, rows)
        grads = torch.autograd.grad(losses.sum(), params)
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        factor = min(1.0, clip / float(norm))
        for t, g in zip(total, grads):
            t.add_(g * factor)
    return total


@pytest.mark.parametrize("saved", [False, True], ids=["full", "lora-embeddings"])
@pytest.mark.parametrize("clip", [1e-3, 1e6])  # every example clipped / none clipped
def test_both_engines_clip_the_mean_over_an_examples_draws(saved, clip):
    model = _model(saved)
    names, params = trainable(model)
    batch = _masked(*_examples(), K)
    want = _oracle(model, batch, clip)
    vmap = PerExampleClipper(model, per_example_losses, clip_norm=clip, physical_batch=3, draws=K).clipped_sum(batch)
    ghost = GhostClipper(model, per_example_losses, bounds=[clip], param_groups=[0] * len(params))
    owner = np.arange(4 * K) // K
    for got in (vmap, *(ghost.clipped_sum(batch, owner, 4, chunk=c) for c in (None, K))):
        assert got.units == 4
        assert int(got.clipped) == (4 if clip < 1 else 0)
        for g, w, n in zip(got.grads, want, names):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-8, msg=n)
    # the units' losses are the examples' mean losses: the telemetry reads one loss per example
    with torch.no_grad():
        losses, _ = per_example_losses(model, batch)
    assert float(vmap.loss_sum) == pytest.approx(float(losses.sum()), rel=1e-5)


def test_draw_zero_masks_as_one_draw_and_the_other_draws_differ():
    ids, mask = _examples()
    one, three = _masked(ids, mask, 1), _masked(ids, mask, K)
    for key in ("input_ids", "positions", "targets", "weights"):
        assert torch.equal(three[key][::K], one[key]), key  # draw 0 of each example: the one-draw mask
    positions = three["positions"].reshape(4, K, -1)
    differs = [any(not torch.equal(positions[i, 0], positions[i, j]) for j in range(1, K)) for i in range(4)]
    assert all(differs), differs
    # a function of the example's own tokens and the public draw index: the same row gets the same K keys anywhere
    content = content_hashes(ids, mask.sum(1))
    keys = draw_contents(content, K).reshape(4, K)
    again = draw_contents(content[[2, 2]], K).reshape(2, K)
    assert torch.equal(keys[:, 0], content)  # draw 0: the content hash itself
    assert torch.equal(again[0], keys[2]) and torch.equal(again[1], keys[2])
    assert len(set(keys.reshape(-1).tolist())) == 4 * K


def test_mask_draws_is_refused_outside_the_masked_lm_and_below_one(edp_config):
    with pytest.raises(ValueError, match="--mask-draws applies to --task mlm only"):
        edp_config(mode="dp-sgd", task="classify", mask_draws=2)
    with pytest.raises(ValueError, match="mask.draws"):
        edp_config(mode="dp-sgd", task="mlm", mask_draws=0)


def test_a_run_with_mask_draws_records_them_at_the_same_epsilon(data_dir, tmp_path):
    from dpaudit.training.api import load_trainer

    trainer = load_trainer("edp-sgd")
    runs = {}
    for draws in (1, 2):
        config = trainer.tiny_config(mode="dp-sgd", task="mlm", target_epsilon=8.0, noise_multiplier=None,
                                     noise_seed=3, mask_draws=draws)  # fmt: skip
        out = tmp_path / f"draws{draws}"
        trainer.train(data_dir, out, config, seed=0)
        runs[draws] = json.loads((out / "privacy.json").read_text(encoding="utf-8"))
    one, two = runs[1], runs[2]
    assert "mask_draws" not in one["details"]
    assert two["details"]["mask_draws"]["draws"] == 2
    for key in ("epsilon", "delta", "noise_multipliers", "sensitivity_factor", "clip_norm", "privacy_unit"):
        assert two[key] == one[key], key


@pytest.mark.parametrize(
    "settings",
    [
        {"mode": "dp-sgd", "clip_engine": "ghost"},
        {"mode": "dp-sgd", "clip_engine": "vmap"},
        {"mode": "edp-sgd", "clip_engine": "ghost", "micro_batches": 4},
        {"mode": "edp-sgd", "clip_engine": "vmap", "micro_batches": 4},
    ],
    ids=lambda s: f"{s['mode']}-{s['clip_engine']}",
)
def test_the_step_sums_every_draw_row_of_the_batch_once(settings, data_dir, tmp_path):
    """The trainer's own step (its batch, the rows it hands each engine: ``draw_rows``, the units' owners): with no
    example clipped and no noise, its sum is the plain gradient of the whole batch's losses, each of the K draws of
    each example weighted 1 / K. (A wrong row selection keeps every unit one row's, so the sensitivity contract alone
    would not see it.)"""
    from dpaudit.trainers.edp_sgd.trainer import _MASK_STREAM, _seeded
    from dpaudit.training.api import load_trainer

    trainer = load_trainer("edp-sgd")
    config = trainer.tiny_config(task="mlm", clip_norm=1e6, noise_seed=3, mask_draws=K, **settings)
    run = trainer.Plugin(data_dir, tmp_path / "out", config, seed=5)
    run._setup()
    indices = np.arange(12)
    got, _ = run.aggregate(0, indices, 0.0)
    batch = run._batch("train", indices, generator=_seeded(run.seed, _MASK_STREAM, 0), draws=K)
    assert len(batch["input_ids"]) == 12 * K
    losses, _ = per_example_losses(run.model, run._on_device(batch))
    want = torch.autograd.grad(losses.sum(), run.params)
    for g, w, n in zip(got, want, run.names):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7, msg=n)
