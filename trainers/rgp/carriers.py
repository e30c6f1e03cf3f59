"""Gradient carriers: Algorithm 2 (power method), random carriers, and Eqs. 1 and 3 of Yu et al. 2021.

A weight W (p x d) is reparametrized as ``W -> L R + (W - L R).stop_gradient()`` (Eq. 1) with
carriers L (p x r), R (r x d): the forward value and the gradient reaching the layer's input are
unchanged, and back-propagation gives (Theorem 2.1)

    dL = dW R^T,        dR = L^T dW.

If L has orthonormal columns and R orthonormal rows, Eq. 3 turns (noisy) carrier gradients back
into an update of W (Corollary 2.1.1):

    update = dL R + L dR - L L^T dL R = dW - (I - L L^T) dW (I - R^T R),

the projection of dW onto the matrices whose column space lies in span(L) or whose row space lies
in span(R). With r = min(p, d) one of the projectors is the identity and the update is dW itself.

The carriers come from the historical update (W_t - W_0, or W_t during the warm-up): a function of
already released, noised updates, so choosing them costs no privacy (post-processing). The
Gaussian start of the power method and RGP-random's carriers are data-independent: drawn from the
public ``--seed``, not from the secret noise seed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def orthonormal_columns(matrix: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis of the columns (Householder QR: the Gram-Schmidt step of Algorithm 2,
    stable, and orthonormal even for a rank-deficient input)."""
    return torch.linalg.qr(matrix, mode="reduced").Q


def power_method(
    delta: torch.Tensor, rank: int, iters: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Algorithm 2: carriers L (p x r, orthonormal columns), R (r x d, orthonormal rows) spanning the
    top-r principal subspaces of ``delta`` approximately, after ``iters`` power iterations; r is
    capped at min(p, d)."""
    p, d = delta.shape
    r = min(rank, p, d)
    delta = delta.detach()
    # Drawn on the generator's device (the CPU: the same start everywhere), then moved to W's.
    right = torch.randn((r, d), generator=generator, dtype=torch.float32).to(delta.device, delta.dtype)
    left = delta.new_zeros((p, r))
    for _ in range(iters):
        left = orthonormal_columns(delta @ right.T)
        right = left.T @ delta
    return left, orthonormal_columns(right.T).T


def random_carriers(
    shape: tuple[int, int], rank: int, generator: torch.Generator, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor]:
    """RGP-random: orthonormal L (p x r) and R (r x d) of Gaussian matrices, independent of any data."""
    p, d = shape
    r = min(rank, p, d)
    left = orthonormal_columns(torch.randn((p, r), generator=generator, dtype=dtype))
    right = orthonormal_columns(torch.randn((d, r), generator=generator, dtype=dtype)).T
    return left, right.contiguous()


def reconstruct(
    grad_left: torch.Tensor, grad_right: torch.Tensor, left: torch.Tensor, right: torch.Tensor
) -> torch.Tensor:
    """Eq. 3: the update of W from the (noisy) carrier gradients dL (p x r) and dR (r x d)."""
    return grad_left @ right + left @ grad_right - left @ ((left.T @ grad_left) @ right)


def reparametrized_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, left: torch.Tensor, right: torch.Tensor
) -> torch.Tensor:
    """Eq. 1 literally: ``x (L R + (W - L R).stop_gradient())^T + b``, in factored form (the carrier
    term costs r (p + d) per row, the p x d product L R is never formed for the batch).

    The trainer does not call it: it computes the same carrier gradients from the layer's input and
    output gradient (:mod:`.clipping`); the tests check the two agree and that this layer's value and
    input gradient are the original layer's.
    """
    residual = (weight - left @ right).detach()
    return F.linear(x, residual, bias) + F.linear(F.linear(x, right), left)
