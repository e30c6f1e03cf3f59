"""Scores of the white-box audit: how member-like each canary's coordinate looks.

All iterates (the noisy clipped sums a DP-SGD release reveals, Nasr et al. 2023): the log-likelihood
ratio of coordinate j's observations under "canary j was a member" against "it was not", given the
claimed q_t, noise std_t and clip norm: each step's observation is a mixture of Gaussians around the
layout's shifts (:meth:`~dpaudit.whitebox.layout.CanaryLayout.mixtures`). By Neyman-Pearson it is the
most powerful score if the claim is true; any score keeps the bounds valid (they test the guesses, not
the score), so a wrong claim only costs power, never validity.

Last iterate (what a released model shows): minus the canary coordinate's final value (a canary's
gradient points along +e_j, so descent moves its coordinate down).
"""

from __future__ import annotations

import numpy as np

from dpaudit.whitebox.layout import CanaryLayout

__all__ = ["all_iterates_scores", "last_iterate_scores"]


def all_iterates_scores(
    observations: np.ndarray, layout: CanaryLayout, q: np.ndarray, std: np.ndarray, shift: float
) -> np.ndarray:
    """The log-likelihood ratio of each canary's T observations (``observations``: (T, m))."""
    y = np.asarray(observations, dtype=np.float64)
    std = np.asarray(std, dtype=np.float64)
    if y.ndim != 2 or y.shape[0] != std.size or y.shape[1] != layout.size:
        raise ValueError(f"observations must be (steps={std.size}, canaries={layout.size}), got {y.shape}.")
    shifts, inside, outside = layout.mixtures(q, shift)
    with np.errstate(divide="ignore"):
        log_in, log_out = np.log(inside), np.log(outside)  # (T, K); log 0 = -inf drops a component
    z = (y[:, :, None] - shifts[None, None, :]) / np.maximum(std, 1e-300)[:, None, None]
    log_density = -0.5 * z * z  # (T, m, K): the Gaussian normalizer is common to both hypotheses
    ratio = _logsumexp_last(log_density + log_in[:, None, :]) - _logsumexp_last(log_density + log_out[:, None, :])
    return ratio.sum(axis=0)


def _logsumexp_last(a: np.ndarray) -> np.ndarray:
    """log sum exp over the last axis (scipy's, without its per-call overhead: the plan scores 10^6 draws)."""
    top = a.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)  # a row of -inf stays -inf
    with np.errstate(divide="ignore"):
        return np.log(np.exp(a - top).sum(axis=-1)) + top[..., 0]


def last_iterate_scores(final: np.ndarray) -> np.ndarray:
    """Minus each canary coordinate's final value."""
    return -np.asarray(final, dtype=np.float64)
