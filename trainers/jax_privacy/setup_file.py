"""``--setup FILE.py:build`` of the jax-privacy trainer: a user's own JAX loss, parameters and data, checked before
anything trains.

``build()`` returns a dict: ``loss`` (``loss(params, batch) -> scalar`` for a batch dict with a leading axis; JAX
Privacy's ``clipped_grad`` calls it on one example at a time), ``params`` (a pytree of arrays), ``data`` (a dict of
arrays whose leading axis is the N training rows), ``batch_size`` (the expected batch: q = batch_size / N) and
optionally ``optimizer`` (an ``optax.GradientTransformation``). The file is imported and the function called by the
shared :func:`dpaudit.trainers.setup_call.call_setup`; a wrong shape, or a loss that JAX cannot differentiate on one
row, is one line naming the file and the fix, before any directory is written.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.jax_privacy.loop import JaxSetup
from dpaudit.trainers.setup_call import call_setup, first_line

__all__ = ["load_setup"]

_SHAPE = "build() must return a dict with loss, params, data and batch_size (and optionally optimizer)"


def load_setup(spec: str) -> JaxSetup:
    """Import ``FILE.py`` of ``spec``, call the function and check what it returns.

    Raises:
        UserInputError: naming ``--setup SPEC`` and the fix.
    """
    return _checked(call_setup(spec), f"--setup {spec}")


def _checked(built: Any, where: str) -> JaxSetup:
    import jax

    if not isinstance(built, dict):
        raise UserInputError(f"{where}: got {type(built).__name__}; {_SHAPE}.")
    missing = [k for k in ("loss", "params", "data", "batch_size") if k not in built]
    if missing:
        raise UserInputError(f"{where}: the dict has no {missing[0]!r}; {_SHAPE}.")
    loss, params, data, batch = built["loss"], built["params"], built["data"], built["batch_size"]
    if not callable(loss):
        raise UserInputError(f"{where}: the loss is a {type(loss).__name__}; return loss(params, batch) -> scalar.")
    if not isinstance(data, dict) or not data:
        raise UserInputError(f"{where}: the data is a {type(data).__name__}; return a dict of arrays (N rows each).")
    arrays = {str(k): np.asarray(v) for k, v in data.items()}
    sizes = {k: (v.shape[0] if v.ndim else 0) for k, v in arrays.items()}
    n = next(iter(sizes.values()))
    if n < 1 or any(s != n for s in sizes.values()):
        raise UserInputError(f"{where}: the data's arrays must share a leading axis of N >= 1 rows, got {sizes}.")
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= n:
        raise UserInputError(f"{where}: batch_size must be an integer in [1, {n}] (q = batch_size / N), got {batch!r}.")
    optimizer = built.get("optimizer")
    if optimizer is not None and not (hasattr(optimizer, "init") and hasattr(optimizer, "update")):
        raise UserInputError(
            f"{where}: the optimizer is a {type(optimizer).__name__}; return an optax.GradientTransformation."
        )
    try:
        one = {k: v[:1] for k, v in arrays.items()}
        grads = jax.eval_shape(jax.grad(loss), params, one)  # shapes only: nothing runs
    except Exception as err:  # noqa: BLE001 - the user's loss
        raise UserInputError(
            f"{where}: JAX cannot differentiate loss(params, one row) ({first_line(err)}); return a scalar loss of "
            "params and a batch dict."
        ) from None
    # JAX Privacy's gaussian_privatizer draws its noise in the gradient's dtype; the record's noise-tail figure is
    # float32's (privacy.NOISE_SAMPLER): a bfloat16 draw reaches far fewer sigma, a float64 one more
    dtypes = sorted({str(g.dtype) for g in jax.tree_util.tree_leaves(grads)} - {"float32"})
    if dtypes:
        raise UserInputError(
            f"{where}: the gradient of params has dtype {dtypes[0]}; JAX Privacy draws its noise in the gradient's "
            "dtype and dpaudit's claim counts float32's noise tail: return float32 params."
        )
    return JaxSetup(loss=loss, params=params, data=arrays, batch_size=batch, optimizer=optimizer)
