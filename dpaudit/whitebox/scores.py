"""Scores of the white-box audit: how member-like each canary's coordinate looks.

All iterates (the noisy clipped sums a DP-SGD release reveals, Nasr et al. 2023): the log-likelihood
ratio of coordinate j's observations under "canary j was a member" against "it was not", given the
claimed q_t, noise std_t and clip norm: each step's observation is a mixture of Gaussians around the
layout's shifts (:meth:`~dpaudit.whitebox.layout.CanaryLayout.mixtures`). By Neyman-Pearson it is the
most powerful score if the claim is true; any score keeps the bounds valid (they test the guesses, not
the score), so a wrong claim only costs power, never validity.

Step to step (:func:`reused_noise_members`): the likelihood ratio assumes fresh noise at every step, and a trainer
that draws its noise once and reuses it (a noise seed reset per step) hides behind that assumption: the ratio sums T
copies of one noise draw and its guesses get WORSE. Compared step to step, such a canary's observations differ only
by its clipped contributions: they lie on the lattice z + k C of one offset z, exactly (to float rounding), and a
range of more steps of C than a non-member can move is a member beyond doubt. Under fresh Gaussian noise that lattice
has probability zero (at the rounding tolerance: below 1e-5 per canary at T = 2, vanishing with T), so marking those
canaries as the most confident member guesses (:func:`checked_scores`) costs a correct trainer nothing, and any
score keeps the bounds valid.

Last iterate (what a released model shows): minus the canary coordinate's final value (a canary's
gradient points along +e_j, so descent moves its coordinate down).
"""

from __future__ import annotations

import numpy as np

from dpaudit.whitebox.layout import CanaryLayout

__all__ = ["all_iterates_scores", "checked_scores", "last_iterate_scores", "reused_noise_members"]


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


#: Lattice tolerance of the step-to-step check, in units of C, plus a share of the observation's size (float32
#: rounding of z + k C).
LATTICE_TOLERANCE = 1e-5
ROUNDING_SHARE = 1e-6


def reused_noise_members(observations: np.ndarray, layout: CanaryLayout, shift: float) -> np.ndarray:
    """Canaries (bool ``(m,)``) whose T observations are one offset plus whole multiples of the clipped shift C, over
    a range a non-member cannot reach (0 with per-example clipping; C with micro-batch partners): members beyond doubt
    when the trainer reused one noise draw at every step (module docstring)."""
    y = np.asarray(observations, dtype=np.float64)
    if y.shape[0] < 2:
        return np.zeros(y.shape[1], dtype=bool)
    shifts, _, outside = layout.mixtures(np.full(1, 0.5), shift)
    reach = shifts[outside[0] > 0]
    nonmember_range = float(reach.max() - reach.min()) / shift
    d = (y - y[:1]) / shift
    tol = LATTICE_TOLERANCE + ROUNDING_SHARE * np.abs(y).max(axis=0) / shift
    on_lattice = (np.abs(d - np.round(d)) <= tol[None, :]).all(axis=0)
    steps = np.round(d.max(axis=0) - d.min(axis=0))
    return np.asarray(on_lattice & (steps > nonmember_range + 0.5), dtype=bool)


def checked_scores(
    observations: np.ndarray, layout: CanaryLayout, q: np.ndarray, std: np.ndarray, shift: float
) -> np.ndarray:
    """The all-iterates likelihood ratio, with the step-to-step check's members beyond doubt
    (:func:`reused_noise_members`) raised above every other score."""
    score = all_iterates_scores(observations, layout, q, std, shift)
    sure = reused_noise_members(observations, layout, shift)
    if sure.any():
        finite = score[np.isfinite(score)]
        top = float(np.abs(finite).max()) if finite.size else 0.0
        score = np.where(sure, 2.0 * top + 1.0, score)
    return score
