"""AdamW with decoupled weight decay and a warmup + quadratic-decay learning rate (Anil et al. 2021).

Decoupled weight decay (Loshchilov & Hutter) shrinks the parameters directly instead of adding an L2
term to the gradient, so the decay never enters Adam's moment estimates and never passes through the
DP noise. Anil et al. use weight decay as large as 1.0: with layer norm the layers are scale-invariant,
and the decay keeps the weight norms (hence the effective step size relative to the noise) in check.

This module knows nothing about privacy; it only post-processes the noised gradient.

References:
  Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization".
  Anil et al. 2021, "Large-Scale Differentially Private BERT", Section 4 (optimizer, schedule).
"""

from __future__ import annotations

import jax.numpy as jnp
import optax


def _check(learning_rate: float, warmup_steps: int, total_steps: int) -> None:
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}.")
    if int(total_steps) != total_steps or total_steps < 1:
        raise ValueError(f"total_steps must be a positive integer, got {total_steps}.")
    if int(warmup_steps) != warmup_steps or not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"warmup_steps must be an integer in [0, total_steps={total_steps}), got {warmup_steps}."
        )


def learning_rate_schedule(
    *, learning_rate: float, warmup_steps: int, total_steps: int
) -> optax.Schedule:
    """Linear warmup to ``learning_rate`` then quadratic (power-2 polynomial) decay to 0.

    ``lr(t) = learning_rate * (t + 1) / warmup_steps`` for ``t < warmup_steps`` (the first step already
    moves: under DP every step spends privacy budget, so a zero-rate step would waste it), then
    ``lr(t) = learning_rate * (1 - (t - warmup_steps) / (total_steps - warmup_steps)) ** 2``, which
    is ``learning_rate`` at the end of warmup and reaches 0 at ``t = total_steps``.
    """
    _check(learning_rate, warmup_steps, total_steps)
    lr = float(learning_rate)
    warm = int(warmup_steps)
    decay = float(total_steps - warmup_steps)

    def schedule(count: jnp.ndarray) -> jnp.ndarray:
        t = jnp.asarray(count, jnp.float32)
        warmup_lr = lr * (t + 1.0) / max(warm, 1)
        frac = jnp.clip((t - warm) / decay, 0.0, 1.0)
        decay_lr = lr * (1.0 - frac) ** 2
        return jnp.where(t < warm, warmup_lr, decay_lr)

    return schedule


def make_optimizer(
    *,
    learning_rate: float,
    warmup_steps: int,
    total_steps: int,
    weight_decay: float,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-6,
) -> optax.GradientTransformation:
    """AdamW (decoupled weight decay, applied to every parameter) on the warmup/quadratic schedule.

    The update is ``-lr(t) * (adam_direction + weight_decay * params)``, i.e. optax's ``adamw``: the
    decay is scaled by the scheduled rate, as in Loshchilov & Hutter and in BERT's reference code.
    """
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}.")
    if not 0.0 <= b1 < 1.0:
        raise ValueError(f"b1 must be in [0, 1), got {b1}.")
    if not 0.0 <= b2 < 1.0:
        raise ValueError(f"b2 must be in [0, 1), got {b2}.")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}.")
    schedule = learning_rate_schedule(
        learning_rate=learning_rate, warmup_steps=warmup_steps, total_steps=total_steps
    )
    return optax.adamw(
        learning_rate=schedule, b1=b1, b2=b2, eps=eps, weight_decay=float(weight_decay)
    )
