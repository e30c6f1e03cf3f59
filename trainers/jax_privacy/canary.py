"""Canaries through JAX Privacy's real gradient path: a canary table only canary inputs reach.

The same design as the opacus trainer's canary layer (:mod:`dpaudit.trainers.opacus.canary_layer`; ``docs/auditing.md``,
"Canaries through the real gradient path"), in JAX: the parameters become ``{"model": params, "canary": w}`` with
``w`` a vector of ``m + 1`` zeros; the data gains two columns, ``canary`` (0 for a real row, j + 1 for canary j) and
``canary_gain`` (0 for a real row or a non-member). The loss of one row is ``real * loss(params, row) + gain * w[c]``:
a real row's loss is the user's (its gradient on ``w`` is 0), canary j's is linear in ``w[j + 1]`` with its model
loss multiplied by 0 (its row content is a copy of real row 0, only its id matters). So canary j's per-example
gradient, as ``jax_privacy.clipped_grad`` computes it (``vmap`` of ``value_and_grad`` over the whole parameter tree),
is ``gain_j`` on ``w[j + 1]`` and exactly 0 elsewhere; the library's own clipping brings it to C, and the released
update on ``w[j + 1]`` is 0 or C plus the noise (Nasr et al. 2023, Dirac canaries produced by the model's own
backward pass). A non-member (gain 0) is present but adds nothing: N and q do not depend on the auditor's coins.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["CANARY_KEY", "with_canaries"]

#: The canary table's key in the parameter tree (and the canary id column of the data).
CANARY_KEY = "canary"
_GAIN = "canary_gain"


@functools.lru_cache(maxsize=16)
def _audited_loss(loss: Callable[[Any, dict[str, Any]], Any]) -> Callable[[Any, dict[str, Any]], Any]:
    """``loss`` with the canary term (one function per user loss: its compiled code is shared by every run)."""

    def audited(params: Any, batch: dict[str, Any]) -> Any:
        ids = batch[CANARY_KEY]
        rest = {k: v for k, v in batch.items() if k not in (CANARY_KEY, _GAIN)}
        real = (ids == 0).astype(jnp.float32)
        model_term = loss(params["model"], rest) * jnp.mean(real)
        return model_term + jnp.sum(batch[_GAIN] * params[CANARY_KEY][ids])

    return audited


def with_canaries(
    loss: Callable[[Any, dict[str, Any]], Any], params: Any, data: dict[str, np.ndarray], gains: np.ndarray
) -> tuple[Callable[[Any, dict[str, Any]], Any], dict[str, Any], dict[str, np.ndarray]]:
    """(the audited loss, the parameters with the canary table, the data with the m canary rows appended)."""
    m = int(gains.size)
    if m < 1:
        raise ValueError("a canary table needs at least one canary.")
    if CANARY_KEY in data or _GAIN in data:
        raise ValueError(f"the training data must not have columns named {CANARY_KEY!r} or {_GAIN!r}.")
    n = int(len(next(iter(data.values()))))
    if n < 1:
        raise ValueError("the training data is empty.")
    rows = {k: np.concatenate([np.asarray(v), np.repeat(np.asarray(v)[:1], m, axis=0)]) for k, v in data.items()}
    rows[CANARY_KEY] = np.concatenate([np.zeros(n, np.int32), np.arange(1, m + 1, dtype=np.int32)])
    rows[_GAIN] = np.concatenate([np.zeros(n, np.float32), gains.astype(np.float32)])
    return _audited_loss(loss), {"model": params, CANARY_KEY: jnp.zeros(m + 1, jnp.float32)}, rows
