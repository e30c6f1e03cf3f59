"""Mechanisms as ``dp_accounting`` DpEvents: DP-SGD segments, batch and noise schedules, sensitivity factors, fixed-size sampling.

One meaning of "noise multiplier" everywhere, ``dp_accounting``'s (and jax_privacy's, against its
``NeighboringRelation``): sigma = noise std on the summed clipped gradients / the L2 bound on one
privacy unit's contribution to that sum (C for per-example clipping, 2C for micro-batch clipping,
i.e. ``sensitivity_factor * C``). The same sigma gives the same epsilon whatever the clipping unit.
The noise std over C alone (what Dupuy et al. 2021 and Opacus call the noise multiplier when the
unit is one example) is :attr:`Segment.noise_std_over_clip` = sigma x sensitivity_factor.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from dp_accounting.dp_event import (
    ComposedDpEvent,
    DpEvent,
    GaussianDpEvent,
    PoissonSampledDpEvent,
    SampledWithoutReplacementDpEvent,
    SelfComposedDpEvent,
)

from dpaudit.accounting.segment import Segment as Segment
from dpaudit.accounting.segment import _require_int as _require_int
from dpaudit.accounting.segment import _require_real as _require_real

FIXED_SIZE_LABEL = (
    "fixed-size batches sampled without replacement: replace-one adjacency (sensitivity twice one "
    "unit's bound, 2C per example: the accountant sees sigma / 2), RDP accountant only; NOT the "
    "add/remove Poisson guarantee the rest of dpaudit reports"
)


#: Replace-one adjacency: one example swapped for another moves the clipped sum by up to 2C.
REPLACE_ONE_FACTOR = 2.0


def dpsgd_event(*, noise_multiplier: float, sampling_probability: float, steps: int) -> DpEvent:
    """DP-SGD: `steps` Poisson-subsampled Gaussian steps (add/remove-one adjacency).

    ``noise_multiplier`` is sigma, noise std over the bound on one unit's contribution (C per example,
    2C per micro-batch): the clipping unit is already divided out, so there is no factor to pass.
    """
    return Segment(steps=steps, sampling_probability=sampling_probability, noise_multiplier=noise_multiplier).event()


def _merge_adjacent(segments: Sequence[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for segment in segments:
        if not isinstance(segment, Segment):
            raise TypeError(f"segments must be Segment instances, got {type(segment).__name__}.")
        if merged and merged[-1].mechanism == segment.mechanism:
            merged[-1] = merged[-1].with_steps(merged[-1].steps + segment.steps)
        else:
            merged.append(segment)
    return merged


def schedule_event(segments: Sequence[Segment]) -> DpEvent:
    """A ``ComposedDpEvent`` of one ``SelfComposedDpEvent`` per segment (variable batch or sigma).

    Consecutive segments with the same (q, sigma) are merged first, which is exact (they
    are the same mechanism) and makes PLD accounting cheaper. An empty schedule is an empty
    composition (epsilon 0).
    """
    return ComposedDpEvent([segment.event() for segment in _merge_adjacent(segments)])


def batch_schedule_segments(
    *, dataset_size: int, schedule: Sequence[tuple[int, int]], noise_multiplier: float, sensitivity_factor: float = 1.0
) -> list[Segment]:
    """Segments for a batch-size schedule ``[(steps, expected_batch_size), ...]`` at one sigma (q = B / N)."""
    n = _require_int("dataset_size", dataset_size, 1)
    segments = []
    for index, item in enumerate(schedule):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise ValueError(f"schedule[{index}] must be (steps, expected_batch_size), got {item!r}.")
        steps, batch = item
        batch = _require_int(f"schedule[{index}] batch size", batch, 1)
        if batch > n:
            raise ValueError(f"schedule[{index}] batch size must be <= dataset_size {n}, got {batch}.")
        segments.append(
            Segment(
                steps=steps,
                sampling_probability=batch / n,
                noise_multiplier=noise_multiplier,
                sensitivity_factor=sensitivity_factor,
            )
        )
    return segments


def parse_batch_schedule(text: str, *, option: str = "--batch-schedule") -> list[tuple[int, int]]:
    """Parse ``"steps:batch,steps:batch"`` into ``[(steps, expected_batch), ...]`` (any order of batches:
    the segments are composed in the order they run).

    Raises:
        ValueError: one line naming ``option``, the bad item and the expected form.
    """
    segments: list[tuple[int, int]] = []
    for index, part in enumerate(p.strip() for p in str(text).split(",")):
        pieces = part.split(":")
        try:
            if len(pieces) != 2:
                raise ValueError
            steps, batch = int(pieces[0]), int(pieces[1])
        except ValueError:
            raise ValueError(
                f"{option} item {index + 1} {part!r}: expected STEPS:BATCH items separated by commas, "
                f"e.g. '100:64,100:128'."
            ) from None
        if steps <= 0 or batch <= 0:
            raise ValueError(f"{option} item {index + 1} {part!r}: steps and batch sizes must be > 0.")
        segments.append((steps, batch))
    return segments


def noise_schedule_segments(
    *, sampling_probability: float, steps_per_epoch: int, sigmas: Sequence[float], sensitivity_factor: float = 1.0
) -> list[Segment]:
    """One segment per epoch (or per stage) with its own sigma, e.g. eDP-SGD's decayed sigmas."""
    return [
        Segment(
            steps=steps_per_epoch,
            sampling_probability=sampling_probability,
            noise_multiplier=sigma,
            sensitivity_factor=sensitivity_factor,
        )
        for sigma in sigmas
    ]


def _check_decay(sigma0: float, k: float, epochs: int) -> tuple[float, float, int]:
    """Validated (sigma0 > 0, k >= 0, epochs >= 1) of a noise-decay schedule."""
    sigma0 = _require_real("sigma0", sigma0)
    k = _require_real("k", k)
    epochs = _require_int("epochs", epochs, 1)
    if sigma0 <= 0.0:
        raise ValueError(f"sigma0 must be > 0, got {sigma0}.")
    if k < 0.0:
        raise ValueError(f"k must be >= 0, got {k}.")
    return sigma0, k, epochs


def linear_decay_sigmas(sigma0: float, k: float, epochs: int, sigma_min: float) -> list[float]:
    """eDP-SGD linear decay fixed in advance: sigma_e = max(sigma0 * (1 - k * e), sigma_min), e = 0..epochs-1.

    The floor must be positive: zero noise is not differentially private.
    """
    sigma0, k, epochs = _check_decay(sigma0, k, epochs)
    sigma_min = _require_real("sigma_min", sigma_min)
    if sigma_min <= 0.0:
        raise ValueError(f"sigma_min must be > 0 (zero noise is not DP), got {sigma_min}.")
    return [max(sigma0 * (1.0 - k * e), sigma_min) for e in range(epochs)]


def exponential_decay_sigmas(sigma0: float, k: float, epochs: int) -> list[float]:
    """eDP-SGD exponential decay fixed in advance: sigma_e = sigma0 * exp(-k * e), e = 0..epochs-1."""
    sigma0, k, epochs = _check_decay(sigma0, k, epochs)
    return [sigma0 * math.exp(-k * e) for e in range(epochs)]


def microbatch_sensitivity_factor(microbatch_size: int) -> float:
    """1.0 for per-example clipping (micro-batch size 1), else 2.0.

    Adding or removing one example changes one clipped micro-batch gradient by up to 2C, not C
    (TF Privacy's ``used_microbatching=True``). This assumes examples are assigned to micro-batches
    by a rule that does not depend on other examples (hash of the id, or Poisson sampling per
    shard); slicing a shuffled batch into k pieces needs :func:`sliced_microbatch_sensitivity_factor`.
    """
    size = _require_int("microbatch_size", microbatch_size, 1)
    return 1.0 if size == 1 else 2.0


def sliced_microbatch_sensitivity_factor(num_microbatches: int) -> float:
    """2k: a shuffled batch sliced into k micro-batches lets one example shift others across all k."""
    return 2.0 * _require_int("num_microbatches", num_microbatches, 1)


def combined_clip_norm(layer_clip_norms: Sequence[float]) -> float:
    """The clip norm C of per-layer clipping: sqrt(sum_l C_l^2); the sensitivity uses this C."""
    norms = [_require_real("layer clip norm", c) for c in layer_clip_norms]
    if not norms:
        raise ValueError("layer_clip_norms must not be empty.")
    if any(c <= 0.0 for c in norms):
        raise ValueError(f"layer clip norms must be > 0, got {norms}.")
    return math.sqrt(math.fsum(c * c for c in norms))


def fixed_size_event(*, dataset_size: int, batch_size: int, steps: int, noise_multiplier: float) -> DpEvent:
    """Fixed-size batches sampled WITHOUT replacement. Labelled: see :data:`FIXED_SIZE_LABEL`.

    ``dp_accounting`` accounts for this only with RDP under replace-one adjacency, a different
    neighbouring relation from the add/remove Poisson guarantee; :func:`epsilon` refuses it with PLD.
    ``noise_multiplier`` is sigma as everywhere: noise std over the bound on one unit's contribution
    (C per example, 2C per micro-batch, 2kC for sliced ones). Under replace-one, swapping one example
    moves the clipped sum from one clipped vector to another: twice that bound
    (:data:`REPLACE_ONE_FACTOR`), while ``dp_accounting``'s Gaussian takes std / sensitivity. So the
    event carries ``noise_multiplier / 2``: a conservative bound for micro-batches too (a replaced
    example may land in another micro-batch and move two micro-batch sums, each by up to the unit's
    bound).
    """
    n = _require_int("dataset_size", dataset_size, 1)
    b = _require_int("batch_size", batch_size, 1)
    if b > n:
        raise ValueError(f"batch_size must be <= dataset_size {n}, got {b}.")
    s = _require_int("steps", steps, 1)
    sigma = _require_real("noise_multiplier", noise_multiplier)
    if sigma < 0.0:
        raise ValueError(f"noise_multiplier must be >= 0, got {noise_multiplier}.")
    effective = sigma / REPLACE_ONE_FACTOR
    return SelfComposedDpEvent(SampledWithoutReplacementDpEvent(n, b, GaussianDpEvent(effective)), s)


def _walk(event: DpEvent) -> Iterator[DpEvent]:
    yield event
    if isinstance(event, (SelfComposedDpEvent, PoissonSampledDpEvent, SampledWithoutReplacementDpEvent)):
        yield from _walk(event.event)
    elif isinstance(event, ComposedDpEvent):
        for sub in event.events:
            yield from _walk(sub)


def segments_of_event(event: DpEvent) -> tuple[Segment, ...] | None:
    """The Poisson-subsampled Gaussian segments an event composes, in order (each ``SelfComposedDpEvent`` of a
    ``PoissonSampledDpEvent(q, GaussianDpEvent(sigma))``, or one such step alone); None for any other event (sampling
    without replacement, a bare Gaussian): its trade-off curve is not one of Poisson-subsampled Gaussian steps.
    The sensitivity factor is not part of an event: the segments carry 1 (the accountant's sigma already divides it)."""

    def one(sub: DpEvent) -> Segment | None:
        steps = 1
        if isinstance(sub, SelfComposedDpEvent):
            steps = int(sub.count)
            sub = sub.event
        if isinstance(sub, PoissonSampledDpEvent) and isinstance(sub.event, GaussianDpEvent) and steps >= 1:
            return Segment(
                steps=steps,
                sampling_probability=float(sub.sampling_probability),
                noise_multiplier=float(sub.event.noise_multiplier),
            )
        return None

    parts = event.events if isinstance(event, ComposedDpEvent) else [event]
    found = [one(sub) for sub in parts]
    return None if any(seg is None for seg in found) else tuple(s for s in found if s is not None)


def is_fixed_size(event: DpEvent) -> bool:
    """True if the event contains sampling without replacement (replace-one, RDP-only accounting)."""
    return any(isinstance(e, SampledWithoutReplacementDpEvent) for e in _walk(event))
