"""The floating-point Gaussian sampler's bounded reach, and its tail figure counted inside delta.

**The failure.** The accountant analyses real Gaussian noise, whose support is unbounded. A sampler in
floating point turns a finite number of random bits into a normal deviate, so its largest |z| is finite.
Consider a neighbour whose clipped gradient is the only one on an otherwise untouched coordinate (a
canary's rare token embedding, say): when it is sampled, that coordinate of the noised sum is
``sensitivity x (1 + sigma z)``, and a value beyond the sampler's reach ``z_max x sigma x sensitivity``
can only happen with it present. So with probability about ``q P(Z > z_max - 1/sigma)`` per step,
membership is revealed exactly, whatever epsilon says; over the run, by the union bound,

    tail figure = sum over steps of q_t P(Z > z_max - 1/sigma_t)

(Mironov 2012, "On significance of the least significant bits for differential privacy", shows the
same class of failure for floating-point Laplace; Canonne, Kamath & Steinke 2020, "The discrete
Gaussian for differential privacy", give the exact alternative.) The samplers dpaudit used to draw
with stopped between 5.22 (JAX float32 ``jax.random.normal``) and 6.76 (CUDA) standard deviations: the
demo's epsilon-8 BERT had a figure of 0.0014 against delta = 1e-5.

**The sampler.** Every trainer now draws its DP noise by Box-Muller with a 96-bit radius uniform
(``bm96``): four random 32-bit words give two normals, u = (w0 2^64 + w1 2^32 + w2 + 1/2) 2^-96 (never 0,
resolution 2^-96), radius sqrt(-2 ln u), the angle from w3. The smallest u is 2^-97, so the radius
reaches sqrt(2 x 97 ln 2) = sqrt(194 ln 2) = 11.5961 standard deviations, in both directions of both
outputs (the angle grid puts a point within 2^-31 pi of every axis). The tail beyond the old edges is
the exact law: with w0 = 0 the radius squared minus 64 ln 2 is Exponential with mean 2, which the tests
check on the real code paths. Where the construction runs:

- ``jax-bm96``: jax-bert (``trainers/jax_bert/dp_step.py``, ``wide_normal_pairs``): Threefry words,
  float32 arithmetic (u keeps its whole dynamic range: a term of the sum only matters when the words
  before it are 0); measured reach 11.596144 at words (0, 0, 0, 2^29).
- ``philox-c-bm96``: the torch trainers on the CPU (``trainers/torch_common/philox_normal.c``): Philox4x32-10
  words, double precision; measured reach 11.596144.
- ``torch-cpu-bm96``: the torch trainers without a C compiler: words from a keyed mt19937, the
  transform in torch float64 (``trainers/torch_common/noise.py``, ``wide_normal_pairs``); same reach.
- ``torch-cuda-bm96``: the same torch transform on words from torch's CUDA Philox generator.

``tests/trainers/test_noise_reach.py`` measures each reach on its own code with the extreme words, and
the recorded ``z_max`` (11.596) is that value rounded down. Per sampled step, P(Z > 11.596 - 1/sigma) is
2e-11 at sigma 0.2, 7e-17 at 0.3, 4e-22 at 0.5 and 2e-26 at 1 (at the old 5.22: 0.41, 0.03, 6e-4, 1e-5),
so the figure stays below delta / 100 unless sigma is tiny (an epsilon in the tens or hundreds).

**Inside delta.** The figure is not a caveat beside the claim: it is part of delta. A run that states
(epsilon, delta) had its epsilon computed by the accountant at ``delta - tail`` (the accountant's delta),
with the tail of the whole planned run reserved before the first step (:func:`split_delta`); calibration
searches sigma with ``epsilon(sigma, delta - tail(sigma)) <= target`` (the tail falls as sigma grows, so
the search stays monotone: :func:`dpaudit.accounting.calibrate_noise`'s ``noise_reach``). A run whose tail
alone would reach delta is refused unless accepted explicitly; it then states ``delta + tail``, the
delta that holds. ``privacy.json`` records both parts (``accountant_delta``, ``noise_tail_delta``) and
the sampler (``noise_tail``).

What the figure covers: the out-of-support event for the worst-case neighbour whose whole shift lies on
one coordinate. A shift spread over d coordinates leaves the support with probability at most about
sqrt(d) phi(z_max) / sigma per sampled step, below 3e-25 / sigma for d <= 10^10 at this reach. The
figure does not bound other differences between a float sampler and the real Gaussian (rounding to the
parameters' precision, the grid of the far tail), which no DP library bounds either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dp_accounting.dp_event import DpEvent

from dpaudit.accounting.events import Segment
from dpaudit.accounting.pld import _flatten_for_pld, _NotFlat, _PldItem
from dpaudit.accounting.serialization import Json
from dpaudit.common.errors import UserInputError
from dpaudit.common.figures import format_up

__all__ = [
    "BM96_REACH",
    "DeltaSplit",
    "RETIRED_MIN_REACH",
    "RETIRED_SAMPLERS",
    "SAMPLERS",
    "event_tail_figure",
    "noise_tail_entry",
    "sampler_reach",
    "split_delta",
    "tail_figure",
]

#: The reach of Box-Muller with a 96-bit radius uniform: sqrt(194 ln 2) = 11.59614, rounded down.
BM96_REACH = 11.596
#: What the figure sums (one formula, stated in privacy.json).
FORMULA = "sum over steps of q P(Z > z_max - 1/sigma)"

#: sampler -> (words, its reach z_max in standard deviations: the smaller one-sided edge).
SAMPLERS: dict[str, tuple[str, float]] = {
    "jax-bm96": (
        "JAX Threefry words, Box-Muller with a 96-bit radius uniform in float32 arithmetic (u >= 2^-97)",
        BM96_REACH,
    ),
    "philox-c-bm96": (
        "dpaudit's Philox4x32-10 words, Box-Muller with a 96-bit radius uniform in C, double precision (u >= 2^-97)",
        BM96_REACH,
    ),
    "torch-cpu-bm96": (
        "torch CPU generator words (keyed mt19937), Box-Muller with a 96-bit radius uniform in torch "
        "float64 (u >= 2^-97)",
        BM96_REACH,
    ),
    "torch-cuda-bm96": (
        "torch CUDA Philox words, Box-Muller with a 96-bit radius uniform in torch float64 (u >= 2^-97)",
        BM96_REACH,
    ),
    # The samplers of earlier dpaudit versions, named in the privacy.json files they wrote.
    "jax-float32": ("jax.random.normal in float32 (sqrt(2) erfinv of a 23-bit uniform)", 5.220),
    "philox-c": ("dpaudit's Philox4x32-10 Box-Muller in C (u >= 2^-32)", 6.660),
    "torch-cpu": ("torch CPU normal_ (Box-Muller on a 24-bit float32 uniform, u >= 2^-24)", 5.768),
    "torch-cuda": ("torch CUDA normal_ (curand Box-Muller, u >= 2^-33)", 6.764),
}
#: Samplers no trainer draws with any more: readable in old files, never planned with.
RETIRED_SAMPLERS = frozenset({"jax-float32", "philox-c", "torch-cpu", "torch-cuda"})
#: The shortest reach of those: what the steps of a run resumed from a checkpoint of an earlier dpaudit are counted at.
RETIRED_MIN_REACH = min(SAMPLERS[name][1] for name in RETIRED_SAMPLERS)


def sampler_reach(sampler: str) -> float:
    """The reach z_max of a :data:`SAMPLERS` entry (ValueError for an unknown name)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"noise sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}.")
    return SAMPLERS[sampler][1]


def _upper_tail(x: float) -> float:
    """P(Z > x) for a standard normal Z."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def _step_tail(sigma: float, z_max: float) -> float:
    """P(Z > z_max - 1/sigma): a sampled neighbour's chance of carrying one step's noise past the reach."""
    return 1.0 if sigma <= 0.0 else _upper_tail(z_max - 1.0 / sigma)


def tail_figure(segments: Sequence[Segment], z_max: float) -> float:
    """sum over segments of steps x q x P(Z > z_max - 1/sigma), sigma the accountant's multiplier
    (noise std over the unit's own sensitivity: ``Segment.noise_multiplier``); at most 1. An infinite
    ``z_max`` (an exact sampler) gives 0."""
    if math.isinf(z_max):
        return 0.0
    total = sum(seg.steps * seg.sampling_probability * _step_tail(seg.noise_multiplier, z_max) for seg in segments)
    return min(1.0, total)


def event_tail_figure(event: DpEvent, z_max: float) -> float:
    """:func:`tail_figure` of a DpEvent of (Poisson-subsampled) Gaussian steps, read from the event itself
    (what :func:`dpaudit.accounting.calibrate_noise` and the reverse searches build); 1 for a non-private
    step. ValueError for an event of another kind (e.g. fixed-size sampling: no figure is defined)."""
    if math.isinf(z_max):
        return 0.0
    items: list[_PldItem] = []
    try:
        _flatten_for_pld(event, 1, items)
    except _NotFlat:
        raise ValueError("the noise tail figure is defined for Poisson-subsampled Gaussian steps only") from None
    total = 0.0
    for item in items:
        if item[0] == "nonprivate":
            return 1.0
        if item[0] == "poisson":
            _, q, sigma, count = item
        else:
            (_, sigma, count), q = item, 1.0
        total += count * q * _step_tail(sigma, z_max)
    return min(1.0, total)


@dataclass(frozen=True)
class DeltaSplit:
    """A stated delta and its two parts: ``delta = accountant + tail`` (up to rounding, and to the unspent
    tail of a run that stopped early), ``accepted`` when the tail alone reached the requested delta and the
    user accepted it (``--accept-noise-tail``): the stated delta is then the requested one plus the tail."""

    delta: float
    accountant: float
    tail: float
    accepted: bool = False


def split_delta(
    requested: float,
    tail: float,
    *,
    accept: bool = False,
    option: str = "--noise-multiplier",
    delta_option: str = "--delta",
) -> DeltaSplit:
    """The accountant's delta for a run whose sampler's tail figure is ``tail``: ``requested - tail``, the
    claim stating ``requested``.

    Raises:
        UserInputError: the tail alone is >= ``requested`` (one line naming ``option``, the setting that
            made it so, and ``--accept-noise-tail``), unless ``accept``; then the accountant keeps
            ``requested`` and the stated delta is ``requested + tail``, refused only when that reaches 1.
    """
    requested, tail = float(requested), float(tail)
    if tail < requested:
        return DeltaSplit(delta=requested, accountant=requested - tail, tail=tail)
    if not accept:
        raise UserInputError(
            f"{option}: the noise sampler's tail figure {format_up(tail, 3)} ({FORMULA}) alone reaches {delta_option} "
            f"{requested:g}, so no epsilon holds at that delta; raise the noise multiplier (or take fewer or smaller "
            f"steps), or pass --accept-noise-tail to state delta = {format_up(requested + tail, 3)} instead."
        )
    if requested + tail >= 1.0:
        raise UserInputError(
            f"{option}: the noise sampler's tail figure {format_up(tail, 3)} leaves no guarantee even "
            f"with --accept-noise-tail (delta would reach 1); raise the noise multiplier."
        )
    # the sum rounded up: a float sum rounds to nearest, and the stated delta must hold both parts
    return DeltaSplit(delta=math.nextafter(requested + tail, math.inf), accountant=requested, tail=tail, accepted=True)


def noise_tail_entry(sampler: str) -> Json:
    """The ``privacy.json`` ``noise_tail`` entry of a private run: which sampler drew the noise, its reach
    and the formula of the figure (the figure itself is the record's ``noise_tail_delta``)."""
    words, z_max = SAMPLERS[sampler] if sampler in SAMPLERS else (None, sampler_reach(sampler))
    return {
        "sampler": sampler,
        "sampler_text": words,
        "z_max": z_max,
        "formula": FORMULA,
        "text": (
            f"the noise sampler ({words}) never draws |z| beyond {z_max:g} standard deviations, so a neighbour "
            f"alone on a gradient coordinate is revealed when its shift carries the noise past that reach: "
            f"probability at most {FORMULA} over the run (noise_tail_delta), counted inside delta "
            f"(the accountant's epsilon is at accountant_delta = delta - noise_tail_delta)."
        ),
    }
