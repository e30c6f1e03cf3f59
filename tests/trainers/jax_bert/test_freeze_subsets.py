"""``--freeze below-top`` and ``--freeze weights`` (jax-bert): which parameters each leaves untrained, what the summary
counts, and the config asking for the vmap engine in one line. How a step treats a frozen set (``stop_gradient``
before the per-example norm, so one example still moves the clipped sum by at most C; no noise and no update on
the frozen leaves, bit for bit) is the same code for every set: test_freeze.py checks it (a program compiled for
another set here would cost ~10 s of CPU for no new code path)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dpaudit.trainers.jax_bert import dp_step, model
from dpaudit.trainers.jax_bert.config import JaxBertConfig
from dpaudit.trainers.jax_bert.ghost_clipping import EMBEDDING_TABLES
from dpaudit.trainers.jax_bert.trainer import frozen_parameters, parameter_keys, trained_parameters


def _shapes():
    """The tiny preset's parameter shapes (two encoder layers), traced only: no array is computed."""
    config = model.preset_config("tiny", vocab_size=64, max_position_embeddings=16)
    return jax.eval_shape(lambda: model.init_params(config, jax.random.key(0)))


def test_which_parameters_each_choice_freezes():
    keys = parameter_keys(_shapes())
    weights = frozen_parameters("weights", keys)
    assert weights and all(key[-1] in ("kernel", "embedding") for key in weights)
    assert keys - weights == {key for key in keys if key[-1] in ("bias", "scale")}
    assert EMBEDDING_TABLES <= weights and ("cls", "predictions", "bias") not in weights
    below = frozen_parameters("below-top", keys)
    assert EMBEDDING_TABLES <= below and ("bert", "embeddings", "LayerNorm", "scale") in below
    assert any(key[:4] == ("bert", "encoder", "layer", "0") for key in below)
    assert all(key[:4] != ("bert", "encoder", "layer", "1") and key[0] != "cls" for key in below)
    assert frozen_parameters("embeddings", keys) == EMBEDDING_TABLES and not frozen_parameters("none", keys)
    with pytest.raises(ValueError, match="not one of"):
        frozen_parameters("everything", keys)


def test_the_summary_counts_what_each_choice_trains():
    shapes = _shapes()
    sizes = {
        dp_step.path_key(p): int(np.prod(leaf.shape)) for p, leaf in jax.tree_util.tree_flatten_with_path(shapes)[0]
    }
    total = sum(sizes.values())
    for choice in ("weights", "below-top"):
        frozen = frozen_parameters(choice, frozenset(sizes))
        dp_step.check_frozen(shapes, frozen)  # every frozen path is a parameter of the model
        trained = trained_parameters(shapes, choice)
        assert trained["trained_parameters"] == total - sum(sizes[key] for key in frozen) > 0
        assert trained["frozen"] == sorted("/".join(key) for key in frozen)
    assert trained_parameters(shapes, "weights")["trained_parameters"] < total / 10


def test_the_ghost_engine_is_refused_in_one_line_with_the_fix():
    for choice in ("weights", "below-top"):
        with pytest.raises(ValueError, match=f"--freeze {choice} needs --clip-engine vmap"):
            JaxBertConfig(freeze=choice, noise_multiplier=1.0)
        assert JaxBertConfig(freeze=choice, noise_multiplier=1.0, clip_engine="vmap").freeze == choice
        assert JaxBertConfig(freeze=choice, non_private=True).freeze == choice  # no clipping: no engine to refuse
