"""The ghost clipper on GPT-2 (--task clm) equals the vmap clippers: Conv1D weights (stored transposed),
the word embedding tied to lm_head (the cross term), the position table, LayerNorms; per example and
per micro-batch with per-layer bounds, with every matrix in the Gram form, the direct form, or chosen."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpaudit.trainers.torch_common.clipping.ghost import GhostClipper
from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper, trainable
from dpaudit.trainers.torch_common.data import additive_mask
from dpaudit.trainers.torch_common.model import build_model, layer_groups, per_example_losses
from tests.trainers.edp_sgd.ghost_oracle import max_error as _max_error
from tests.trainers.edp_sgd.ghost_oracle import microbatch_sums


@pytest.fixture(scope="module")
def gpt2_batch():
    """A tiny GPT-2 (vocabulary 100, tied lm_head) and 6 right-padded rows of unequal lengths."""
    model = build_model(
        "clm",
        preset="tiny",
        vocab_size=100,
        max_length=16,
        label_names=None,
        seed=0,
        specials={"pad": 0, "cls": 2, "sep": 3},
    )
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([12, 7, 9, 12, 5, 10])
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = torch.randint(5, 100, (6, 12), generator=gen) * mask
    ids[:, 0] = 2
    ids[1, 3] = ids[1, 5] = 17  # a repeated token within a row (the embedding's id-equality terms)
    batch = {"input_ids": ids, "next_weights": mask.float(), "mask4": additive_mask(mask)}
    return model, batch


def test_tied_embedding_and_conv1d_layers_are_what_the_clipper_sees(gpt2_batch):
    model, _ = gpt2_batch
    assert model.lm_head.weight is model.transformer.wte.weight
    ghost = GhostClipper(model, per_example_losses, bounds=[1.0], param_groups=[0] * len(trainable(model)[1]))
    kinds = {type(m).__name__ for m in ghost.modules.values()}
    assert kinds == {"Conv1D", "Linear", "LayerNorm", "Embedding"}


@pytest.mark.parametrize("clip", [1e-3, 1e6])  # every example clipped / none clipped
def test_gpt2_ghost_per_example_sum_equals_vmap(gpt2_batch, clip):
    model, batch = gpt2_batch
    _, params = trainable(model)
    want = PerExampleClipper(model, per_example_losses, clip_norm=clip, physical_batch=6).clipped_sum(batch)
    got = GhostClipper(model, per_example_losses, bounds=[clip], param_groups=[0] * len(params)).clipped_sum(
        batch, np.arange(6), 6
    )
    assert _max_error(got.grads, want.grads) < 1e-5
    assert [g.shape for g in got.grads] == [p.shape for p in params]  # Conv1D sums in its own [in, out] layout
    assert float(got.loss_sum) == pytest.approx(float(want.loss_sum), rel=1e-6)
    assert int(got.clipped) == int(want.clipped) == (6 if clip < 1 else 0)


@pytest.mark.parametrize("scale", [1e-3, 1e6])
@pytest.mark.parametrize("form", ["auto", "gram", "direct"])
def test_gpt2_ghost_per_layer_microbatch_sum_equals_vmap(gpt2_batch, scale, form, monkeypatch):
    from dpaudit.trainers.torch_common.clipping import ghost as ghost_module

    if form != "auto":  # every matrix and embedding one way (the tiny widths pick a mix by themselves)
        monkeypatch.setattr(ghost_module, "_gram_is_cheaper", lambda rows, d, p: form == "gram")
        monkeypatch.setattr(ghost_module, "_embedding_gram_is_cheaper", lambda rows, vocab: form == "gram")
    model, batch = gpt2_batch
    names, _ = trainable(model)
    group_names, groups = layer_groups(names)
    assert group_names == [
        "transformer.wte",
        "transformer.wpe",
        "transformer.h.0",
        "transformer.h.1",
        "transformer.ln_f",
    ]
    bounds = [scale * (i + 1) / 10 for i in range(len(group_names))]
    got, want = microbatch_sums(model, batch, bounds, groups)
    assert _max_error(got.grads, want.grads) < 1e-5
    assert int(got.clipped) == int(want.clipped) == (3 if scale < 1 else 0)


def test_padding_width_changes_no_example_loss(gpt2_batch):
    """Causal mask alone, right padding: a row's loss is the same alone (its own width) as in the batch."""
    model, batch = gpt2_batch
    with torch.no_grad():
        together, _ = per_example_losses(model, batch)
        n = 5  # row 4's length
        alone, _ = per_example_losses(
            model, {k: v[4:5, :n] if v.dim() == 2 else v[4:5, ..., :n] for k, v in batch.items()}
        )
    assert float(alone[0]) == pytest.approx(float(together[4]), rel=1e-5)


def test_unpadded_rows_skip_the_row_copy_and_still_equal_vmap(gpt2_batch, monkeypatch):
    """Every token real (rows packed to the full width) and per-example units: the rows grouped by unit are all rows
    in order, so the engine reads the captures in place instead of copying them; the sum is still the oracle's, and
    bit for bit the one the copied rows give."""
    from dpaudit.trainers.torch_common.clipping import ghost as ghost_module

    model, padded = gpt2_batch
    ids = padded["input_ids"].clone()
    ids[ids == 0] = 7
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "next_weights": mask.float(), "mask4": additive_mask(mask)}
    _, params = trainable(model)
    select, in_place = ghost_module._Units._select, []

    def spy(self, t, r, seq):
        out = select(self, t, r, seq)
        in_place.append(out is t)
        return out

    monkeypatch.setattr(ghost_module._Units, "_select", spy)
    want = PerExampleClipper(model, per_example_losses, clip_norm=1e-3, physical_batch=6).clipped_sum(batch)
    got = GhostClipper(model, per_example_losses, bounds=[1e-3], param_groups=[0] * len(params)).clipped_sum(
        batch, np.arange(6), 6
    )
    assert in_place and all(in_place)
    assert _max_error(got.grads, want.grads) < 1e-5 and int(got.clipped) == int(want.clipped) == 6

    def copy(self, t, r, seq):  # the rows copied out as for padded rows (the index_select path)
        self._rows(r, seq)
        self._identity.clear()
        return select(self, t, r, seq)

    monkeypatch.setattr(ghost_module._Units, "_select", copy)
    copied = GhostClipper(model, per_example_losses, bounds=[1e-3], param_groups=[0] * len(params)).clipped_sum(
        batch, np.arange(6), 6
    )
    assert all(torch.equal(a, b) for a, b in zip(got.grads, copied.grads, strict=True))  # bit-identical to a copy
    monkeypatch.setattr(ghost_module._Units, "_select", spy)
    in_place.clear()  # padded rows: the real ones are copied out, as before
    GhostClipper(model, per_example_losses, bounds=[1e-3], param_groups=[0] * len(params)).clipped_sum(
        padded, np.arange(6), 6
    )
    assert in_place and not any(in_place)
