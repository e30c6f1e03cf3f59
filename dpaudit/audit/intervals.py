"""Statistics shared by every attack: bootstrap and Clopper-Pearson intervals, one-sided tests.

One place, so that exposure, reconstruction and the membership attacks state their uncertainty the
same way. Randomness (bootstrap resampling) enters as an explicit ``seed``; the same inputs and
seed give the same interval.

References:
  Efron & Tibshirani 1993, "An Introduction to the Bootstrap" (percentile intervals).
  Clopper & Pearson 1934, "The use of confidence or fiducial limits illustrated in the case of the
  binomial" (exact binomial intervals).
  Mann & Whitney 1947 (rank-sum test; scipy's exact/asymptotic implementation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

#: Confidence level of every interval unless a caller says otherwise.
LEVEL = 0.95
#: Bootstrap resamples: the percentile interval's Monte Carlo error is ~1% of its width at 2,000.
BOOTSTRAP_RESAMPLES = 2000


@dataclass(frozen=True, kw_only=True)
class Interval:
    """A two-sided confidence interval and how it was computed."""

    low: float
    high: float
    level: float
    method: str


@dataclass(frozen=True, kw_only=True)
class OneSidedTest:
    """A one-sided two-sample test of "group scores higher than the baseline"."""

    statistic: float
    p_value: float
    n: int
    n_baseline: int
    alternative: str
    method: str


class VectorStatistic(Protocol):
    """A statistic of many samples at once, one per row along ``axis`` (``np.mean``, ``np.median``)."""

    def __call__(self, a: NDArray[np.float64], /, axis: int) -> NDArray[np.float64]: ...


def bootstrap_interval(
    values: ArrayLike,
    statistic: VectorStatistic = np.mean,
    *,
    seed: int,
    level: float = LEVEL,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Interval | None:
    """Percentile bootstrap interval of ``statistic`` (vectorized: it must take ``axis=-1``).

    Returns None for an empty sample; a single value gives the degenerate interval [v, v].
    """
    x = np.asarray(values, dtype=np.float64)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}.")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}.")
    if x.size == 0:
        return None
    rng = np.random.default_rng(seed)
    draws = x[rng.integers(0, x.size, size=(resamples, x.size))]
    stats = statistic(draws, axis=-1)
    tail = (1 - level) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    return Interval(
        low=float(low), high=float(high), level=level, method=f"percentile bootstrap ({resamples} resamples)"
    )


def clopper_pearson(successes: int, trials: int, *, level: float = LEVEL) -> Interval | None:
    """Exact (Clopper-Pearson) two-sided interval for a binomial proportion; None when trials = 0."""
    from scipy.stats import beta

    if not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}.")
    if trials == 0:
        return None
    alpha = 1 - level
    low = 0.0 if successes == 0 else float(beta.ppf(alpha / 2, successes, trials - successes + 1))
    high = 1.0 if successes == trials else float(beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    return Interval(low=low, high=high, level=level, method="Clopper-Pearson")


def mann_whitney_greater(group: ArrayLike, baseline: ArrayLike) -> OneSidedTest | None:
    """One-sided Mann-Whitney U test that ``group`` tends to exceed ``baseline``; None if either is empty."""
    from scipy.stats import mannwhitneyu

    x, y = np.asarray(group, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if x.size == 0 or y.size == 0:
        return None
    result = mannwhitneyu(x, y, alternative="greater")
    return OneSidedTest(
        statistic=float(result.statistic),
        p_value=float(result.pvalue),
        n=int(x.size),
        n_baseline=int(y.size),
        alternative="greater",
        method="Mann-Whitney U (scipy)",
    )


def fisher_greater(hits: int, n: int, control_hits: int, n_controls: int) -> OneSidedTest | None:
    """One-sided Fisher exact test that a group's success rate exceeds the controls'; None without controls.
    The statistic is the difference of the two rates (finite, unlike the odds ratio at 0 or n successes)."""
    from scipy.stats import fisher_exact

    if n == 0 or n_controls == 0:
        return None
    table = [[hits, n - hits], [control_hits, n_controls - control_hits]]
    p_value = float(fisher_exact(table, alternative="greater").pvalue)
    return OneSidedTest(
        statistic=hits / n - control_hits / n_controls,
        p_value=p_value,
        n=n,
        n_baseline=n_controls,
        alternative="greater",
        method="Fisher exact (scipy), rate difference",
    )


def log_frequency_slope(frequencies: ArrayLike, values: ArrayLike) -> float | None:
    """Least-squares slope of ``values`` against log2(frequency) over inserted canaries (frequency > 0).

    Memorization grows roughly linearly in the log of the repetition count (Carlini et al. 2019,
    Figure 3; Anil et al. 2021, Figure 7), so this slope summarizes a whole frequency sweep. None
    when fewer than two distinct frequencies were inserted.
    """
    f = np.asarray(frequencies, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    keep = f > 0
    if np.unique(f[keep]).size < 2:
        return None
    return float(np.polyfit(np.log2(f[keep]), v[keep], 1)[0])
