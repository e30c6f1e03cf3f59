"""The seeded, stratified percentile bootstrap of the ROC statistics (AUC, advantage, TPR at FPR).

Members and non-members are resampled separately (stratified) with one seeded generator; all the
statistics of one call share the resamples. Percentile intervals (Efron & Tibshirani 1993);
jax-privacy applies a bias correction instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
from numpy.typing import NDArray

from dpaudit.audit.checks import _check_unit, _json_int, _json_number
from dpaudit.audit.counts import _counts, _pool

if TYPE_CHECKING:
    from dpaudit.accounting.serialization import Json

#: A statistic of many ROCs at once: (true positives, false positives) at every vertex of each row (one resample
#: per row), n_members, n_nonmembers -> one value per row.
Statistic: TypeAlias = Callable[[NDArray[np.int64], NDArray[np.int64], int, int], NDArray[np.float64]]


@dataclass(frozen=True, kw_only=True)
class BootstrapCI:
    """A percentile bootstrap confidence interval.

    Members and non-members are resampled separately (a stratified bootstrap), each with replacement
    to its own size, ``num_samples`` times from ``numpy.random.default_rng(seed)``.

    Attributes:
        low, high: the (1 - level) / 2 and (1 + level) / 2 quantiles of the bootstrap distribution.
        level: the nominal coverage (0.95 for a 95% interval).
        num_samples: bootstrap resamples.
        seed: the seed of the resampling generator.
    """

    low: float
    high: float
    level: float
    num_samples: int
    seed: int

    def to_json(self) -> Json:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> BootstrapCI:
        return cls(
            low=_json_number(obj["low"]),
            high=_json_number(obj["high"]),
            level=_json_number(obj["level"]),
            num_samples=_json_int(obj["num_samples"]),
            seed=_json_int(obj["seed"]),
        )


#: Bootstrap rows evaluated per block (bounds the memory of the vectorized bootstrap).
_BOOTSTRAP_CELLS = 4_000_000


def _bootstrap(
    member: NDArray[np.float64],
    nonmember: NDArray[np.float64],
    statistics: Mapping[str, Statistic],
    *,
    seed: int,
    num_samples: int,
    level: float,
) -> dict[str, BootstrapCI]:
    """Stratified percentile bootstrap CIs of ``statistics`` (name -> fn(tp, fp, n_m, n_n) -> (B,)).

    Resamples are drawn as multiplicity weights on the original scores, so every resample's ROC
    comes from one cumulative sum over the pre-sorted pool (no per-resample sorting), and all the
    statistics share the same resamples (so one call or several with the same seed agree).
    """
    level = _check_unit(level, "level")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    pool = _pool(member, nonmember)
    rng = np.random.default_rng(seed)
    n_m, n_n = member.size, nonmember.size
    n = n_m + n_n
    member_pos = np.flatnonzero(pool.is_member)  # sorted positions of the members
    nonmember_pos = np.flatnonzero(~pool.is_member)
    block = max(1, _BOOTSTRAP_CELLS // n)
    values: dict[str, list[NDArray[np.float64]]] = {name: [] for name in statistics}
    for start in range(0, num_samples, block):
        b = min(block, num_samples - start)
        offsets = (np.arange(b) * n)[:, None]
        draws_m = member_pos[rng.integers(0, n_m, size=(b, n_m))] + offsets
        draws_n = nonmember_pos[rng.integers(0, n_n, size=(b, n_n))] + offsets
        w_m = np.bincount(draws_m.ravel(), minlength=b * n).reshape(b, n)
        w_n = np.bincount(draws_n.ravel(), minlength=b * n).reshape(b, n)
        tp, fp = _counts(pool, w_m, w_n)
        for name, fn in statistics.items():
            values[name].append(fn(tp, fp, n_m, n_n))
    out: dict[str, BootstrapCI] = {}
    for name, chunks in values.items():
        low, high = np.quantile(np.concatenate(chunks), [(1 - level) / 2, (1 + level) / 2])
        out[name] = BootstrapCI(low=float(low), high=float(high), level=level, num_samples=num_samples, seed=int(seed))
    return out
