"""JAX Privacy's noise reach, measured on its own privatizer: what the tail figure inside delta is computed from.

``gaussian_privatizer`` draws ``jax.random.normal`` in float32: ``sqrt(2) erfinv(u)`` of a uniform built from the top
23 bits of a 32-bit word, monotone in those bits, so the all-ones and all-zeros words give its two edges. The record
names the sampler ``jax-float32`` (:data:`dpaudit.trainers.jax_privacy.privacy.NOISE_SAMPLER`), whose recorded reach
must not exceed the measured upper edge (a larger reach would under-count the tail figure: ``docs/privacy.md``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpaudit.accounting.noise_tail import sampler_reach
from dpaudit.trainers.jax_privacy.privacy import NOISE_SAMPLER


def _noise_with_bits(fill: int, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """The privatizer's noise (stddev 1, on a float32 zero gradient) when every random word is ``fill``."""
    from jax._src.random import core
    from jax_privacy import noise_addition

    def bits(key, bit_width, shape):  # noqa: ANN001, ANN202
        return jnp.full(shape, fill, dtype=jnp.uint32)

    with monkeypatch.context() as patch:
        patch.setattr(core, "_random_bits", bits)
        with jax.disable_jit():  # the patched words reach the traced code only when it runs op by op
            privatizer = noise_addition.gaussian_privatizer(stddev=1.0, prng_key=jax.random.key(0))
            zeros = {"w": jnp.zeros(4, jnp.float32)}
            noisy, _ = privatizer.update(zeros, privatizer.init(zeros))
    assert noisy["w"].dtype == jnp.float32
    return np.asarray(noisy["w"], dtype=np.float64)


def test_the_recorded_reach_is_the_privatizers_upper_edge_rounded_down(monkeypatch):
    upper = _noise_with_bits(0xFFFFFFFF, monkeypatch)
    lower = _noise_with_bits(0, monkeypatch)
    reach = sampler_reach(NOISE_SAMPLER)
    assert np.all(upper == upper[0]) and np.all(lower == lower[0])
    assert reach <= upper[0] < reach + 1e-3, (reach, upper[0])  # measured 5.220113
    assert -lower[0] >= reach, lower[0]  # measured -5.419983: the upward edge is the shorter one
