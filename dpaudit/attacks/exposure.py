"""Exposure (Carlini et al. 2019), exact, by repetition count.

exposure(s) = log2 |R| - log2 rank(s), rank = 1 + #candidates scored strictly better. With every
secret position masked at once, a masked LM scores a candidate by the sum of its per-position
log-probabilities, so the rank is computed exactly from the [positions, alphabet] table
(:func:`dpaudit.attacks.exposure_rank.exposure_rank`), never by sampling. Ties within the tolerance
make the rank an interval; the statistics use the lower end of each canary's exposure (ties counted
against the canary), so they never overstate memorization.

With ``--reveal K`` the first K secret tokens are shown and the rank is over the remaining
positions' space, |R| = |alphabet|^(positions - K).

References:
  Carlini et al. 2019, "The Secret Sharer: Evaluating and Testing Unintended Memorization in
  Neural Networks", sections 4-5.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome, by_frequency
from dpaudit.attacks.results import ExposureParameters, ExposureResult, ExposureRow
from dpaudit.audit.intervals import (
    bootstrap_interval,
    log_frequency_slope,
    mann_whitney_greater,
)
from dpaudit.progress import progress_bar
from dpaudit.scoring.source import MASKED_LM

PHRASES_WARNING = ("exposure needs a secret space with a finite per-position alphabet (digits:N, words:N); phrase and "
                   "designed (new-tokens, rare-tokens) canaries have none, so exposure was not computed (see the "
                   "reconstruction attack, and the canary attack's pseudo-log-likelihood).")


def exposure_rows(exposures: np.ndarray, frequencies: np.ndarray, *, seed: int, level: float) -> tuple[ExposureRow, ...]:
    """Statistics of per-canary exposures by frequency; each inserted group tested against the controls."""
    controls = exposures[frequencies == 0]
    rows = []
    for f, idx in by_frequency(frequencies):
        x = exposures[idx]
        rows.append(ExposureRow(
            frequency=f, n=int(x.size), mean=float(x.mean()), median=float(np.median(x)), max=float(x.max()),
            mean_ci=bootstrap_interval(x, np.mean, seed=seed, level=level),
            median_ci=bootstrap_interval(x, np.median, seed=seed, level=level),
            vs_controls=None if f == 0 else mann_whitney_greater(x, controls),
        ))
    return tuple(rows)


class ExposureAttack:
    """Exact exposure of every canary; statistics by frequency with the controls as the baseline."""

    name: ClassVar[str] = "exposure"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM})

    def run(self, context: AttackContext) -> AttackOutcome:
        options, space = context.options, context.space
        if space is None:
            params = ExposureParameters(secret_format=context.canaries[0].format if context.canaries else "phrases",
                                        log2_space_size=None, reveal=options.reveal, tolerance=options.tolerance,
                                        bootstrap_seed=options.seed)
            return AttackOutcome(ExposureResult(parameters=params, warnings=(PHRASES_WARNING,)))
        fields, low = {}, np.empty(len(context.canaries))
        bar = progress_bar(context.canaries, desc="exposure ranks", unit="canary")
        for i, (canary, interval) in enumerate(zip(bar, context.exposure_intervals)):
            low[i] = interval.exposure_low
            fields[canary.id] = {"rank_low": int(interval.rank_low), "rank_high": int(interval.rank_high),
                                 "rank_method": interval.method, "exposure_low": float(interval.exposure_low),
                                 "exposure_high": float(interval.exposure_high)}
        freqs = context.frequencies
        params = ExposureParameters(secret_format=space.format,
                                    log2_space_size=(space.length - options.reveal) * math.log2(len(space.alphabet)),
                                    reveal=options.reveal, tolerance=options.tolerance, bootstrap_seed=options.seed)
        warnings = () if (freqs == 0).any() else ("no control canaries (frequency 0): no baseline to compare with.",)
        result = ExposureResult(parameters=params, rows=exposure_rows(low, freqs, seed=options.seed, level=options.level),
                                slope_per_doubling=log_frequency_slope(freqs, low), warnings=warnings)
        return AttackOutcome(result, fields)
