"""The floating-point Gaussian's bounded support, and what it costs: a caveat with the run's own figure.

The accountant analyses real Gaussian noise, whose support is unbounded. A sampler in floating point
turns a finite number of random bits into a normal deviate, so its largest |z| is finite: a float32
uniform has 23-24 bits, and sqrt(2) erfinv(u) or Box-Muller's sqrt(-2 ln u) stops a few sigma out.
Consider a neighbour whose clipped gradient is the only one on an otherwise untouched coordinate (a
canary's rare token embedding, say): when it is sampled, that coordinate of the noised sum is
``sensitivity x (1 + sigma z)``, and a value beyond the sampler's reach ``z_max x sigma x sensitivity``
can only happen with it present. So with probability about ``q P(Z > z_max - 1/sigma)`` per step,
membership is revealed exactly, whatever epsilon says; over the run, by the union bound,

    tail figure = sum over steps of q_t P(Z > z_max - 1/sigma_t)

(Mironov 2012, "On significance of the least significant bits for differential privacy", shows the
same class of failure for floating-point Laplace; Canonne, Kamath & Steinke 2020, "The discrete
Gaussian for differential privacy", give the exact alternative.) Most DP libraries share this.
dpaudit does not switch samplers: it states the caveat in ``privacy.json`` with the figure computed for
the run's own steps, q and sigma, compares it with delta, and the train command warns when it exceeds
delta. The figure is the probability of this one out-of-support event for the worst-case neighbour; it
is not a proven additive delta (the float sampler differs from the Gaussian in other ways too, e.g.
its rounding, which this does not bound).

The reach of each sampler (``z_max``, the smaller of its two one-sided edges, in standard deviations) is
derived from how it forms a deviate, and the JAX one is measured by tests/accounting/test_noise_tail.py
on jax's own transform of the extreme random bits:

- JAX float32 ``jax.random.normal``: u from 23 random bits in (-1, 1), z = sqrt(2) erfinv(u): edges
  -5.420 and +5.220 (bits 0 and 2^32 - 1).
- dpaudit's Philox4x32-10 Box-Muller in C (``trainers/torch_common/philox_normal.c``): u >= 2^-32, so the
  radius sqrt(-2 ln u) <= 6.660.
- torch's CPU ``normal_`` (float32 tensors of >= 16 values): u from 24 bits, u >= 2^-24, radius <= 5.768.
- torch's CUDA ``normal_`` (curand Box-Muller): u >= 2^-33, radius <= 6.764 (derived, not measured here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dpaudit.accounting.events import Segment
from dpaudit.figures import format_up

__all__ = ["SAMPLERS", "noise_tail_caveat", "tail_figure"]

#: sampler -> (words, its reach z_max in standard deviations: the smaller one-sided edge).
SAMPLERS: dict[str, tuple[str, float]] = {
    "jax-float32": ("jax.random.normal in float32 (sqrt(2) erfinv of a 23-bit uniform)", 5.220),
    "philox-c": ("dpaudit's Philox4x32-10 Box-Muller in C (u >= 2^-32)", 6.660),
    "torch-cpu": ("torch CPU normal_ (Box-Muller on a 24-bit float32 uniform, u >= 2^-24)", 5.768),
    "torch-cuda": ("torch CUDA normal_ (curand Box-Muller, u >= 2^-33)", 6.764),
}


def _upper_tail(x: float) -> float:
    """P(Z > x) for a standard normal Z."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def tail_figure(segments: Sequence[Segment], z_max: float) -> float:
    """sum over segments of steps x q x P(Z > z_max - 1/sigma), sigma the accountant's multiplier
    (noise std over the unit's own sensitivity: ``Segment.noise_multiplier``)."""
    total = 0.0
    for seg in segments:
        sigma = seg.noise_multiplier
        p = 1.0 if sigma <= 0.0 else _upper_tail(z_max - 1.0 / sigma)
        total += seg.steps * seg.sampling_probability * p
    return min(1.0, total)


def noise_tail_caveat(sampler: str, segments: Sequence[Segment], delta: float) -> dict[str, Any]:
    """The ``privacy.json`` ``noise_tail`` entry of a private run: the sampler, its reach, the run's
    figure and whether it exceeds delta (see the module docstring)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}.")
    words, z_max = SAMPLERS[sampler]
    figure = tail_figure(segments, z_max)
    return {
        "sampler": sampler,
        "sampler_text": words,
        "z_max": z_max,
        "figure": figure,
        "delta": float(delta),
        "exceeds_delta": figure > delta,
        "formula": "sum over steps of q P(Z > z_max - 1/sigma)",
        "caveat": (f"the noise sampler ({words}) never draws |z| beyond {z_max:g} standard deviations, so a neighbour "
                   f"alone on a gradient coordinate is revealed whenever its shift carries the noise past that reach: "
                   f"probability about {format_up(figure, 3)} over this run (sum over steps of q P(Z > z_max - 1/sigma)), "
                   f"{'ABOVE' if figure > delta else 'below'} delta = {format_up(delta, 3)}. Not covered by the accountant, "
                   f"which assumes real Gaussian noise; most DP libraries share this."),
    }
