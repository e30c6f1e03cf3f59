"""The shared statistics: intervals and tests checked against closed forms and simulation."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.audit.intervals import (
    bootstrap_interval,
    clopper_pearson,
    log_frequency_slope,
    mann_whitney_greater,
)


def test_clopper_pearson_closed_forms():
    # k = 0: the upper end solves (1 - p)^n = alpha/2; k = n: the lower end solves p^n = alpha/2.
    n, alpha = 20, 0.05
    zero = clopper_pearson(0, n)
    assert zero.low == 0.0 and zero.high == pytest.approx(1 - (alpha / 2) ** (1 / n), rel=1e-10)
    full = clopper_pearson(n, n)
    assert full.high == 1.0 and full.low == pytest.approx((alpha / 2) ** (1 / n), rel=1e-10)
    mid = clopper_pearson(7, 20)
    assert mid.low < 7 / 20 < mid.high
    assert clopper_pearson(0, 0) is None
    with pytest.raises(ValueError):
        clopper_pearson(3, 2)


def test_clopper_pearson_covers_at_least_the_nominal_rate():
    rng = np.random.default_rng(0)
    p, n = 0.3, 25
    draws = rng.binomial(n, p, size=2000)
    covered = np.mean([(ci := clopper_pearson(int(k), n)).low <= p <= ci.high for k in draws])
    assert covered >= 0.95


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    x = np.random.default_rng(1).normal(5.0, 1.0, size=200)
    a = bootstrap_interval(x, np.mean, seed=3)
    assert a == bootstrap_interval(x, np.mean, seed=3)
    assert a != bootstrap_interval(x, np.mean, seed=4)
    # The percentile interval of the mean has half-width about 1.96 * s / sqrt(n).
    half = 1.96 * x.std(ddof=1) / np.sqrt(x.size)
    assert a.low < x.mean() < a.high
    assert (a.high - a.low) / 2 == pytest.approx(half, rel=0.15)
    single = bootstrap_interval([2.5], np.median, seed=0)
    assert single.low == single.high == 2.5
    assert bootstrap_interval([], np.mean, seed=0) is None


def test_mann_whitney_is_one_sided():
    low, high = np.arange(10.0), np.arange(10.0) + 100
    assert mann_whitney_greater(high, low).p_value < 1e-3
    assert mann_whitney_greater(low, high).p_value > 0.99
    # Exact distribution for 4 vs 4 with complete separation: p = 1 / C(8, 4).
    assert mann_whitney_greater([5, 6, 7, 8], [1, 2, 3, 4]).p_value == pytest.approx(1 / 70)
    assert mann_whitney_greater([], [1.0]) is None


def test_log_frequency_slope():
    f = np.array([0, 0, 1, 2, 4, 8])
    assert log_frequency_slope(f, 3.0 * np.log2(np.maximum(f, 1)) + 1) == pytest.approx(3.0)
    assert log_frequency_slope([0, 5, 5], [1.0, 2.0, 3.0]) is None
