"""DP-AdamBC: Adam whose second moment has the DP noise's known variance taken out (``--adambc-floor R``).

Why: DP-SGD adds Gaussian noise of a known variance to every coordinate of the averaged gradient,
``Phi = (sigma x sensitivity / B)^2`` (B the expected batch size). Adam's second moment ``v`` then estimates
``E[g]^2 + Var(g) + Phi``, and where the noise dominates, ``sqrt(v) ~ sqrt(Phi)`` is the same for every
coordinate: the update ``m / sqrt(v)`` becomes plain SGD with momentum at the rate ``lr / sqrt(Phi)``, and Adam's
per-coordinate scaling (what makes it train transformers: embeddings, layer norms and heads whose gradients
differ by orders of magnitude) is gone. Tang, Shpilevskiy and Lecuyer 2024 ("DP-AdamBC: Your DP-Adam Is Actually
DP-SGD (Unless You Apply Bias Correction)", AAAI) subtract ``Phi`` from the bias-corrected second moment and floor
the result:

    m_t = b1 m + (1 - b1) g_t                 v_t = b2 v + (1 - b2) g_t^2
    theta <- theta - lr (m_t / (1 - b1^t)) / (sqrt(max(v_t / (1 - b2^t) - Phi_t, gamma')) + eps)

(AdamW's decoupled weight decay before it). Two choices of ours, both written in privacy.json:

- ``Phi_t`` is the noise's own average in ``v``: ``n_t = b2 n + (1 - b2) Phi_t``, ``Phi_t = n_t / (1 - b2^t)``,
  exact when sigma or the batch changes from step to step (a noise decay, an increasing batch schedule), and
  equal to the paper's constant ``Phi`` when neither does.
- The floor ``gamma'`` is ``R x Phi_t`` (a fraction of the noise variance) rather than an absolute number, so it
  needs no retuning when sigma, the clip norm or the batch changes: the paper's absolute floors span five orders
  of magnitude between its tasks.

Every input is public (sigma, the sensitivity and the expected batch size fix the mechanism before the run; the
noised gradients are what DP-SGD releases), so the optimizer is post-processing: the same epsilon and delta.
docs/trainers.md, "DP-AdamBC".
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

__all__ = ["ADAMBC_RULE", "NoiseCorrectedAdamW"]

#: The update, as privacy.json and the docs state it.
ADAMBC_RULE = (
    "theta <- theta - lr m_hat / (sqrt(max(v_hat - Phi_t, R Phi_t)) + 1e-8), Phi_t the bias-corrected running "
    "average (beta2) of (sigma_t x sensitivity / expected batch size)^2"
)


class NoiseCorrectedAdamW(torch.optim.Optimizer):
    """AdamW with the noise variance ``Phi`` taken out of its second moment (DP-AdamBC, Tang et al. 2024).

    :meth:`step` takes the step's ``noise_variance`` (``Phi_t``, per coordinate of the averaged gradient). With
    ``Phi = 0`` at every step it is torch's AdamW (``foreach``), up to rounding. Each tensor's state is
    torch's ``exp_avg`` and ``exp_avg_sq``; the step count and the noise's running average in ``exp_avg_sq`` are
    host floats of the parameter group (``steps``, ``noise_sq``: every tensor of a group steps together), so a
    checkpoint keeps them with the group's hyperparameters and a step reads no device value.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        *,
        lr: float,
        floor: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        if not floor > 0 or not math.isfinite(floor):
            raise ValueError(f"floor must be a positive fraction of the noise variance, got {floor!r}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "floor": floor}
        super().__init__(params, {**defaults, "steps": 0, "noise_sq": 0.0})

    @torch.no_grad()
    def step(self, closure: None = None, *, noise_variance: float = 0.0) -> None:  # type: ignore[override]
        """One update with ``noise_variance`` = Phi_t, the Gaussian noise's variance per coordinate of this step's
        gradient (a public float: no host sync)."""
        if closure is not None:
            raise ValueError("NoiseCorrectedAdamW takes no closure")
        if not noise_variance >= 0:
            raise ValueError(f"noise_variance must be >= 0, got {noise_variance!r}")
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            beta1, beta2 = group["betas"]
            lr, eps, floor, decay = group["lr"], group["eps"], group["floor"], group["weight_decay"]
            for p in params:
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            group["steps"] = t = group["steps"] + 1
            group["noise_sq"] = noise_sq = beta2 * group["noise_sq"] + (1.0 - beta2) * noise_variance
            correction1 = 1.0 - beta1**t
            correction2 = 1.0 - beta2**t
            phi = noise_sq / correction2
            grads = [p.grad for p in params]
            exp_avgs = [self.state[p]["exp_avg"] for p in params]
            exp_avg_sqs = [self.state[p]["exp_avg_sq"] for p in params]
            if decay:
                torch._foreach_mul_(params, 1.0 - lr * decay)
            torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
            denom = torch._foreach_div(exp_avg_sqs, correction2)
            if phi > 0:
                torch._foreach_add_(denom, -phi)
                torch._foreach_clamp_min_(denom, floor * phi)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, eps)
            torch._foreach_addcdiv_(params, exp_avgs, denom, value=-lr / correction1)
