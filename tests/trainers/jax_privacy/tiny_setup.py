"""A user's own JAX Privacy training, as ``--setup tiny_setup.py:build`` takes it: a tiny linear classifier."""

import jax
import jax.numpy as jnp
import numpy as np


def loss(params, batch):
    logits = batch["x"] @ params["w"] + params["b"]
    return jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits), batch["y"][:, None], axis=1))


def build():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    params = {"w": jnp.zeros((8, 2)), "b": jnp.zeros(2)}
    return {"loss": loss, "params": params, "data": {"x": x, "y": y}, "batch_size": 32}
