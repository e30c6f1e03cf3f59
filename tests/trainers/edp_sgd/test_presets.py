"""The fine-tuning-size presets (bert-base, gpt2-small, llama-100m) and the Llama-style causal LM under the ghost
engine: its RMSNorms are covered, and its clipped sums equal the vmap clippers' on a 2-layer instance of the same
architecture (per example and per micro-batch with per-layer bounds). The full-size models are built on the meta
device only (shapes and parameter counts, no weights)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
from dpaudit.trainers.torch_common.clipping.ghost import GhostClipper
from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper, trainable
from dpaudit.trainers.torch_common.data import additive_mask
from dpaudit.trainers.torch_common.model import build_model, layer_groups, per_example_losses
from tests.trainers.edp_sgd.ghost_oracle import max_error, microbatch_sums

_SPECIALS = {"pad": 0, "cls": 2, "sep": 3}


@pytest.fixture(scope="module")
def llama_batch():
    """The llama-tiny preset (2 x 64, SwiGLU 172, tied output layer) and 6 right-padded rows of unequal lengths."""
    model = build_model(
        "clm", preset="llama-tiny", vocab_size=100, max_length=16, label_names=None, seed=0, specials=_SPECIALS
    )
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([12, 7, 9, 12, 5, 10])
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = torch.randint(5, 100, (6, 12), generator=gen) * mask
    ids[:, 0] = 2
    ids[1, 3] = ids[1, 5] = 17  # a repeated token within a row
    with torch.no_grad():  # RMSNorm weights start at 1: move them so that their gradients' scale matters
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    return model, {"input_ids": ids, "next_weights": mask.float(), "mask4": additive_mask(mask)}


def test_llama_is_rmsnorm_rotary_swiglu_and_the_ghost_engine_takes_it(llama_batch):
    model, _ = llama_batch
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.hidden_act == "silu"
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ghost = GhostClipper(model, per_example_losses, bounds=[1.0], param_groups=[0] * len(trainable(model)[1]))
    kinds = {type(m).__name__ for m in ghost.modules.values()}
    assert kinds == {"Linear", "LlamaRMSNorm", "Embedding"}


@pytest.mark.parametrize("clip", [1e-3, 1e6])  # every example clipped / none clipped
def test_llama_ghost_per_example_sum_equals_vmap(llama_batch, clip):
    model, batch = llama_batch
    _, params = trainable(model)
    want = PerExampleClipper(model, per_example_losses, clip_norm=clip, physical_batch=6).clipped_sum(batch)
    got = GhostClipper(model, per_example_losses, bounds=[clip], param_groups=[0] * len(params)).clipped_sum(
        batch, np.arange(6), 6
    )
    assert max_error(got.grads, want.grads) < 1e-5
    assert int(got.clipped) == int(want.clipped) == (6 if clip < 1 else 0)


def test_llama_ghost_per_layer_microbatch_sum_equals_vmap(llama_batch):
    model, batch = llama_batch
    group_names, groups = layer_groups(trainable(model)[0])
    assert group_names == ["model.embed_tokens", "model.layers.0", "model.layers.1", "model.norm"]
    bounds = [1e-3 * (i + 1) for i in range(len(group_names))]  # every micro-batch clipped in every group
    got, want = microbatch_sums(model, batch, bounds, groups)
    assert max_error(got.grads, want.grads) < 1e-5
    assert int(got.clipped) == int(want.clipped) == 3


@pytest.mark.parametrize(
    ("task", "preset", "vocab", "kind", "layers", "width", "millions"),
    [
        ("classify", "bert-base", 30522, "BertForSequenceClassification", 12, 768, 109.2),
        ("clm", "gpt2-small", 50257, "GPT2LMHeadModel", 12, 768, 124.4),
        ("clm", "llama-100m", 32000, "LlamaForCausalLM", 12, 768, 109.5),
    ],
)
def test_full_size_presets_have_the_shapes_people_fine_tune(task, preset, vocab, kind, layers, width, millions):
    assert EdpSgdConfig(task=task, preset=preset, mode="sgd").resolved_vocab_size == vocab
    with torch.device("meta"):  # shapes only: no 100M-parameter model is materialized
        model = build_model(
            task, preset=preset, vocab_size=vocab, max_length=128, label_names=["a", "b"], seed=0, specials=_SPECIALS
        )
    config = model.config
    assert type(model).__name__ == kind
    assert (config.num_hidden_layers, config.hidden_size) == (layers, width)
    assert sum(p.numel() for p in model.parameters()) / 1e6 == pytest.approx(millions, abs=0.05)


@pytest.mark.parametrize(
    ("task", "preset", "says"),
    [
        ("classify", "gpt2-small", "is a causal LM; --task classify takes a BERT preset"),
        ("mlm", "llama-100m", "is a causal LM; --task mlm takes a BERT preset"),
        ("clm", "bert-base", "has no causal (GPT-2 or Llama) shape"),
    ],
)
def test_a_preset_of_the_other_family_is_refused_in_one_line(task, preset, says):
    with pytest.raises(ValueError, match=re.escape(says)) as err:
        EdpSgdConfig(task=task, preset=preset, mode="sgd")
    assert "\n" not in str(err.value)
