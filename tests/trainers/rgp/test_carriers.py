"""Eq. 1, Theorem 2.1, Corollary 2.1.1 and Algorithm 2 of Yu et al. 2021 on random matrices.

Oracles are worked out here with plain torch autograd and explicit projectors P_L = L L^T,
P_R = R^T R: the reparametrized layer must be the original layer for the forward value and the
input gradient, its carriers must receive dW R^T and L^T dW, and Eq. 3 must give
dW - (I - P_L) dW (I - P_R).
"""

from __future__ import annotations

import pytest
import torch

from dpaudit.trainers.rgp.carriers import (
    orthonormal_columns,
    power_method,
    random_carriers,
    reconstruct,
    reparametrized_linear,
)

P, D, T = 7, 5, 4  # W is P x D; inputs are T rows


def _gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("rank", [1, 2, 5])
def test_reparametrized_layer_is_the_original_layer_forward_and_backward(rank):
    gen = _gen(rank)
    w, b = torch.randn(P, D, generator=gen, dtype=torch.float64), torch.randn(P, generator=gen, dtype=torch.float64)
    x = torch.randn(T, D, generator=gen, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(T, P, generator=gen, dtype=torch.float64)
    left, right = random_carriers((P, D), rank, gen, dtype=torch.float64)
    left.requires_grad_(True)
    right.requires_grad_(True)

    y = reparametrized_linear(x, w, b, left, right)
    torch.testing.assert_close(y, x @ w.T + b, atol=1e-12, rtol=1e-12)  # forward value unchanged
    (y * upstream).sum().backward()
    torch.testing.assert_close(x.grad, upstream @ w, atol=1e-12, rtol=1e-12)  # backward signal unchanged
    grad_w = upstream.T @ x.detach()  # dW of the original layer, by hand
    torch.testing.assert_close(left.grad, grad_w @ right.detach().T, atol=1e-12, rtol=1e-12)  # Theorem 2.1
    torch.testing.assert_close(right.grad, left.detach().T @ grad_w, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(("p", "d", "rank"), [(7, 5, 1), (7, 5, 3), (4, 9, 2), (6, 6, 5)])
def test_reconstruction_is_the_projection_of_the_gradient(p, d, rank):
    gen = _gen(p * 100 + d * 10 + rank)
    grad_w = torch.randn(p, d, generator=gen, dtype=torch.float64)
    left, right = random_carriers((p, d), rank, gen, dtype=torch.float64)
    torch.testing.assert_close(left.T @ left, torch.eye(rank, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(right @ right.T, torch.eye(rank, dtype=torch.float64), atol=1e-12, rtol=0)
    update = reconstruct(grad_w @ right.T, left.T @ grad_w, left, right)  # Eq. 3 from Theorem 2.1's gradients
    p_left, p_right = left @ left.T, right.T @ right
    projection = grad_w - (torch.eye(p, dtype=torch.float64) - p_left) @ grad_w @ (
        torch.eye(d, dtype=torch.float64) - p_right
    )
    torch.testing.assert_close(update, projection, atol=1e-12, rtol=1e-12)
    # A projection: applying it again changes nothing, and it is not the identity below full rank.
    again = reconstruct(update @ right.T, left.T @ update, left, right)
    torch.testing.assert_close(again, update, atol=1e-12, rtol=1e-12)
    assert float((update - grad_w).norm()) > 1e-3


@pytest.mark.parametrize(("p", "d"), [(7, 5), (4, 9), (6, 6)])
def test_full_rank_recovers_the_full_gradient(p, d):
    gen = _gen(p + d)
    grad_w = torch.randn(p, d, generator=gen, dtype=torch.float64)
    history = torch.randn(p, d, generator=gen, dtype=torch.float64)
    left, right = power_method(history, rank=100, iters=1, generator=gen)  # capped at min(p, d)
    assert left.shape == (p, min(p, d)) and right.shape == (min(p, d), d)
    torch.testing.assert_close(
        reconstruct(grad_w @ right.T, left.T @ grad_w, left, right), grad_w, atol=1e-10, rtol=1e-10
    )


def test_power_method_finds_the_principal_subspace_of_a_low_rank_history():
    gen = _gen(3)
    u = orthonormal_columns(torch.randn(40, 3, generator=gen, dtype=torch.float64))
    v = orthonormal_columns(torch.randn(30, 3, generator=gen, dtype=torch.float64))
    history = u @ torch.diag(torch.tensor([5.0, 3.0, 2.0], dtype=torch.float64)) @ v.T  # exactly rank 3
    left, right = power_method(history, rank=3, iters=1, generator=gen)
    torch.testing.assert_close(left.T @ left, torch.eye(3, dtype=torch.float64), atol=1e-12, rtol=0)
    torch.testing.assert_close(right @ right.T, torch.eye(3, dtype=torch.float64), atol=1e-12, rtol=0)
    # Same subspaces as the history's singular vectors: the projectors agree.
    torch.testing.assert_close(left @ left.T, u @ u.T, atol=1e-10, rtol=0)
    torch.testing.assert_close(right.T @ right, v @ v.T, atol=1e-10, rtol=0)
    # So the reconstruction of the history's own gradient is exact.
    torch.testing.assert_close(
        reconstruct(history @ right.T, left.T @ history, left, right), history, atol=1e-10, rtol=0
    )


def test_more_power_iterations_align_better_with_the_top_subspace():
    gen = _gen(5)
    history = torch.randn(60, 50, generator=gen, dtype=torch.float64)
    u = torch.linalg.svd(history).U
    top = u[:, :2] @ u[:, :2].T

    def error(iters):
        left, _ = power_method(history, rank=2, iters=iters, generator=_gen(9))
        return float((left @ left.T - top).norm())

    assert error(8) < error(1)


def test_carriers_are_keyed_by_their_generator():
    w = torch.randn(8, 6, generator=_gen(0))
    a = power_method(w, 2, 1, _gen(1))
    b = power_method(w, 2, 1, _gen(1))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
