"""AdamW with decoupled weight decay and a warmup + quadratic-decay learning rate (Anil et al. 2021).

Decoupled weight decay (Loshchilov & Hutter) shrinks the parameters directly instead of adding an L2
term to the gradient, so the decay never enters Adam's moment estimates and never passes through the
DP noise. Anil et al. use weight decay as large as 1.0: with layer norm the layers are scale-invariant,
and the decay keeps the weight norms (hence the effective step size relative to the noise) in check.

This module knows nothing about privacy; it only post-processes the noised gradient.

The schedule's length is run-time state, not a compile-time constant: :func:`make_optimizer` without
``total_steps`` keeps ``count`` and ``total_steps`` as arrays in the optimizer state
(:class:`ScheduleState`, set by :func:`init_optimizer`), so one compiled update serves a 6-step and a
250-step run alike, with the same float32 arithmetic as the fixed schedule.

References:
  Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization".
  Anil et al. 2021, "Large-Scale Differentially Private BERT", Section 4 (optimizer, schedule).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from optax import tree_utils

#: The learning-rate decays after warmup: ``quadratic`` to 0 at the last step (Anil et al. 2021), or ``none`` (the
#: peak rate to the end). A decay weights late steps less; the last iterate of a DP run then carries less of the
#: early steps' signal against the same noise, which is why a black-box audit of released weights trains with none.
DECAYS = ("quadratic", "none")


def _check_decay(decay: str) -> None:
    if decay not in DECAYS:
        raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}.")


def _check(learning_rate: float, warmup_steps: int, total_steps: int) -> None:
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}.")
    if int(total_steps) != total_steps or total_steps < 1:
        raise ValueError(f"total_steps must be a positive integer, got {total_steps}.")
    if int(warmup_steps) != warmup_steps or not 0 <= warmup_steps < total_steps:
        raise ValueError(f"warmup_steps must be an integer in [0, total_steps={total_steps}), got {warmup_steps}.")


def learning_rate_schedule(
    *, learning_rate: float, warmup_steps: int, total_steps: int, decay: str = "quadratic"
) -> optax.Schedule:
    """Linear warmup to ``learning_rate`` then quadratic (power-2 polynomial) decay to 0 (``decay="none"``: the
    peak rate after warmup).

    ``lr(t) = learning_rate * (t + 1) / warmup_steps`` for ``t < warmup_steps`` (the first step already
    moves: under DP every step spends privacy budget, so a zero-rate step would waste it), then
    ``lr(t) = learning_rate * (1 - (t - warmup_steps) / (total_steps - warmup_steps)) ** 2``, which
    is ``learning_rate`` at the end of warmup and reaches 0 at ``t = total_steps``.
    """
    _check(learning_rate, warmup_steps, total_steps)
    _check_decay(decay)
    lr = float(learning_rate)
    warm = int(warmup_steps)
    length = float(total_steps - warmup_steps)

    def schedule(count: jnp.ndarray) -> jnp.ndarray:
        t = jnp.asarray(count, jnp.float32)
        warmup_lr = lr * (t + 1.0) / max(warm, 1)
        frac = jnp.clip((t - warm) / length, 0.0, 1.0)
        decay_lr = lr * (1.0 - frac) ** 2 if decay == "quadratic" else jnp.full_like(t, lr)
        return jnp.where(t < warm, warmup_lr, decay_lr)

    return schedule


def _scheduled_rate(
    count: jax.Array, total_steps: jax.Array, *, lr: float, warm: int, decay: str = "quadratic"
) -> jax.Array:
    """The rate of :func:`learning_rate_schedule` at ``count`` with ``total_steps`` an (int32) array.

    Bit-identical to the schedule with ``total_steps`` a Python constant as it compiled before: XLA
    rewrites a division by a constant ``x / c`` into ``x * (1 / c)`` (the reciprocal rounded to
    float32), so the run-time schedule multiplies by the float32 reciprocal of ``total_steps - warm``
    (converted exactly: integers below 2**24) instead of dividing.
    """
    t = jnp.asarray(count, jnp.float32)
    warmup_lr = lr * (t + 1.0) / max(warm, 1)
    if decay == "none":
        return jnp.where(t < warm, warmup_lr, jnp.float32(lr))
    length = (jnp.asarray(total_steps, jnp.int32) - warm).astype(jnp.float32)
    frac = jnp.clip((t - warm) * (jnp.float32(1.0) / length), 0.0, 1.0)
    decay_lr = lr * (1.0 - frac) ** 2
    return jnp.where(t < warm, warmup_lr, decay_lr)


class ScheduleState(NamedTuple):
    """State of :func:`scale_by_runtime_schedule`: the update count and the schedule's length."""

    count: jax.Array  # int32 scalar
    total_steps: jax.Array  # int32 scalar; set by init_optimizer


def scale_by_runtime_schedule(
    *, learning_rate: float, warmup_steps: int, decay: str = "quadratic"
) -> optax.GradientTransformation:
    """``optax.scale_by_learning_rate(schedule)`` with ``total_steps`` read from the state at run time.

    The same ops as optax's ``scale_by_schedule(lambda c: -1 * schedule(c))``: the negated rate cast
    to the update's dtype times the update, then a saturating count increment.
    """
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}.")
    if int(warmup_steps) != warmup_steps or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0, got {warmup_steps}.")
    _check_decay(decay)
    lr, warm = float(learning_rate), int(warmup_steps)

    def init_fn(params: Any) -> ScheduleState:
        del params
        return ScheduleState(count=jnp.zeros([], jnp.int32), total_steps=jnp.zeros([], jnp.int32))

    def update_fn(updates: Any, state: ScheduleState, params: Any = None) -> tuple[Any, ScheduleState]:
        del params
        step_size = -1 * _scheduled_rate(state.count, state.total_steps, lr=lr, warm=warm, decay=decay)
        updates = jax.tree.map(lambda g: jnp.array(step_size, dtype=g.dtype) * g, updates)
        return updates, ScheduleState(count=optax.safe_increment(state.count), total_steps=state.total_steps)

    return optax.GradientTransformation(init_fn, update_fn)


def init_optimizer(optimizer: optax.GradientTransformation, params: Any, *, total_steps: int) -> optax.OptState:
    """``optimizer.init(params)`` with the run-time schedule's length set to ``total_steps``."""
    if int(total_steps) != total_steps or total_steps < 1:
        raise ValueError(f"total_steps must be a positive integer, got {total_steps}.")
    state = optimizer.init(params)
    return tree_utils.tree_set(state, total_steps=jnp.asarray(total_steps, jnp.int32))


def make_optimizer(
    *,
    learning_rate: float,
    warmup_steps: int,
    total_steps: int | None = None,
    weight_decay: float,
    decay: str = "quadratic",
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
) -> optax.GradientTransformation:
    """AdamW (decoupled weight decay, applied to every parameter) on the warmup/quadratic schedule.

    The update is ``-lr(t) * (adam_direction + weight_decay * params)``, i.e. optax's ``adamw``: the
    decay is scaled by the scheduled rate, as in Loshchilov & Hutter and in BERT's reference code.
    ``total_steps=None``: the schedule's length is run-time state; initialize with
    :func:`init_optimizer` (the compiled update then does not depend on the run's length).
    """
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}.")
    if not 0.0 <= b1 < 1.0:
        raise ValueError(f"b1 must be in [0, 1), got {b1}.")
    if not 0.0 <= b2 < 1.0:
        raise ValueError(f"b2 must be in [0, 1), got {b2}.")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}.")
    if total_steps is None:
        return optax.chain(
            optax.scale_by_adam(b1=b1, b2=b2, eps=eps),
            optax.add_decayed_weights(float(weight_decay)),
            scale_by_runtime_schedule(learning_rate=learning_rate, warmup_steps=warmup_steps, decay=decay),
        )
    schedule = learning_rate_schedule(
        learning_rate=learning_rate, warmup_steps=warmup_steps, total_steps=total_steps, decay=decay
    )
    return optax.adamw(learning_rate=schedule, b1=b1, b2=b2, eps=eps, weight_decay=float(weight_decay))
