"""Exposure of a canary's secret: its rank among every candidate of the secret space, without sampling.

Carlini et al. 2019 ("The Secret Sharer: Evaluating and Testing Unintended Memorization in Neural
Networks", USENIX Security) define the exposure of a secret s in a space R as

    exposure(s) = log2 |R| - log2 rank(s),   rank(s) = 1 + #{r in R scored strictly better than s}.

A masked LM that sees every secret position masked at once scores a candidate by the sum of its
per-position log-probabilities, so the score factorizes over positions and the rank can be counted
exactly over spaces far too large to enumerate (10^12 digit strings):

- ``enumerate``: every candidate scored, |R| <= 1e6; the oracle the other methods are tested against.
- ``exact``: meet in the middle. The positions are split in two halves of balanced size, each
  half's partial sums formed as a few already-sorted runs (the sorted sums of all its positions
  but the last, shifted by each score of the last). The candidates better than the secret are the
  pairs with y > t - x: the thresholds t - x and the y are merged by one stable sort of 64-bit
  integer keys that order float64 values exactly (timsort only merges the runs), and each y
  sorting before a threshold is one better pair; ties are settled for the few thresholds with a
  y within the tolerance. Where the keys do not apply (a threshold above 0, halves beyond 2^24
  sums, very many near-ties) the thresholds are binary-searched in the sorted y instead, with the
  same counts. Half-sums that never or always count are pruned first (most of them for a
  memorized secret). O(sqrt|R| log|R|) time, O(sqrt|R|) memory, float64 throughout; 10^12 digit
  strings in ~43 ms of CPU time on one thread of a loaded 2-core VM, half the binary searches'
  (benchmarks/bench_exposure.py).
- ``bounds``: for spaces beyond ~1e14 (digits:20, words:6 over 1.7K words). Every per-position score is
  rounded down and up onto a power-of-two grid, the integer grid scores are convolved over positions
  (a histogram of the grid score of every candidate), and the candidates whose rounded-down score
  already beats the secret (resp. whose rounded-up score reaches it) give a guaranteed lower (resp.
  upper) bound on the rank.
- ``sampled-interpolation`` / ``sampled-skewnorm``: Carlini et al.'s estimates from m sampled
  reference candidates (sec. 4.2: the secret's rank among the references; and the skew-normal fit of
  the reference scores extrapolated to the secret's score, as TF Privacy's
  ``compute_exposure_extrapolation``), for scorers whose score does not factorize.

Ties. Summation order alone moves a float64 score by a few ulps, enough to swap a candidate to either
side of the secret at a tie. Candidates within ``tolerance`` of the secret's score are therefore
reported as ties and the rank as an interval ``[better + 1, better + tied + 1]`` (the secret itself is
never counted); exposure likewise. Ranks are Python ints and exposure uses :func:`math.log2` on them,
so spaces of 10^20 lose nothing; a secret ranked first has exposure exactly ``log2 |R|``.

This module is pure numpy/scipy: no model, no torch, no jax.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

METHODS = ("enumerate", "exact", "bounds", "sampled-interpolation", "sampled-skewnorm")
ENUMERATE_MAX = 10**6
EXACT_MAX = 10**14
DEFAULT_TOLERANCE = 1e-9
DEFAULT_GRID_CELLS = 1 << 14
_EXACT_HALF_MAX = 2 * 10**8  # 1.6 GB of float64 half-sums: beyond this, use the bounds
_MAX_RUNS = 64  # the exact method's larger half is swept as this many sorted runs at most
_CHUNK = 1 << 20  # query half-sums handled at once by the exact method (bounds its memory)
_MERGED_MAX = 1 << 24  # half-sums (both halves) up to which the exact method merges instead of searching
_TIE_CANDIDATES_MAX = 1 << 16  # near-tie thresholds the merge resolves before deferring to the searches
_U = 2.0**-53  # unit roundoff of float64


@dataclass(frozen=True)
class RankInterval:
    """The rank of a secret among the |R| candidates of its space, as an interval.

    Attributes:
      better: candidates scored strictly better than the secret beyond the tolerance. For
        ``bounds`` a guaranteed lower bound on that count; for the sampled methods an estimate.
      tied: other candidates within the tolerance of the secret's score (``bounds``: the width of
        the bracket, so that ``better + tied`` is a guaranteed upper bound on the candidates scored
        at least as well as the secret; sampled methods: tied references and rounding of the scaled
        estimate).
      space_size: |R|, a Python int (may exceed 2**63).
      method: how it was computed, one of :data:`METHODS`.
    """

    better: int
    tied: int
    space_size: int
    method: str

    def __post_init__(self) -> None:
        for name in ("better", "tied", "space_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"RankInterval.{name} must be an int, got {value!r}.")
            object.__setattr__(self, name, int(value))
        if self.space_size < 1:
            raise ValueError(f"space_size must be >= 1, got {self.space_size}.")
        if self.better < 0 or self.tied < 0:
            raise ValueError(f"better and tied must be >= 0, got {self.better} and {self.tied}.")
        if self.better + self.tied + 1 > self.space_size:
            raise ValueError(f"better + tied + 1 = {self.better + self.tied + 1} exceeds space_size {self.space_size}.")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}.")

    @property
    def rank_low(self) -> int:
        """Best possible rank: 1 + candidates strictly better."""
        return self.better + 1

    @property
    def rank_high(self) -> int:
        """Worst possible rank: 1 + candidates better or tied."""
        return self.better + self.tied + 1

    @property
    def exposure_low(self) -> float:
        """log2 |R| - log2 rank_high (Carlini et al. 2019, Definition 3)."""
        return math.log2(self.space_size) - math.log2(self.rank_high)

    @property
    def exposure_high(self) -> float:
        """log2 |R| - log2 rank_low; exactly log2 |R| for a secret ranked first."""
        return math.log2(self.space_size) - math.log2(self.rank_low)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; ints stay exact Python ints (json writes them digit for digit)."""
        return {
            "method": self.method,
            "space_size": self.space_size,
            "better": self.better,
            "tied": self.tied,
            "rank_low": self.rank_low,
            "rank_high": self.rank_high,
            "exposure_low": self.exposure_low,
            "exposure_high": self.exposure_high,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RankInterval":
        """Inverse of :meth:`to_json` (the derived fields are recomputed, and checked if present)."""
        try:
            out = cls(
                better=int(data["better"]),
                tied=int(data["tied"]),
                space_size=int(data["space_size"]),
                method=str(data["method"]),
            )
        except KeyError as err:
            raise ValueError(f"rank interval JSON lacks the field {err.args[0]!r}.") from None
        for name in ("rank_low", "rank_high"):
            if name in data and int(data[name]) != getattr(out, name):
                raise ValueError(
                    f"rank interval JSON has {name}={data[name]}, inconsistent with "
                    f"better={out.better}, tied={out.tied}."
                )
        return out


# ----------------------------------------------------------------------------------------------
# Input checking


def _tables(log_probs: np.ndarray | Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per-position score rows as contiguous float64 1-D arrays, checked."""
    if isinstance(log_probs, np.ndarray):
        if log_probs.ndim != 2:
            raise ValueError(
                f"log_probs must be [positions, alphabet] (or a list of 1-D arrays), got shape {log_probs.shape}."
            )
        rows = list(log_probs)
    else:
        rows = list(log_probs)
    if not rows:
        raise ValueError("log_probs has no positions.")
    tables = []
    for i, row in enumerate(rows):
        arr = np.asarray(row)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"log_probs position {i} must be numeric, got dtype {arr.dtype}.")
        arr = np.ascontiguousarray(arr, dtype=np.float64)
        if arr.ndim != 1 or arr.size == 0:
            raise ValueError(f"log_probs position {i} must be a non-empty 1-D array, got shape {arr.shape}.")
        bad = ~np.isfinite(arr)
        if bad.any():
            j = int(np.argmax(bad))
            raise ValueError(
                f"log_probs position {i}, symbol {j} is {arr[j]}: scores must be finite "
                f"(a NaN or inf log-probability has no rank)."
            )
        tables.append(arr)
    return tables


def _secret(secret: Sequence[int], tables: list[np.ndarray]) -> tuple[int, ...]:
    idx = np.asarray(secret)
    if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)) or idx.dtype == bool:
        raise ValueError(f"secret must be a 1-D sequence of symbol indices (ints), got {secret!r}.")
    if idx.size != len(tables):
        raise ValueError(f"secret has {idx.size} positions but log_probs has {len(tables)}.")
    for i, (k, t) in enumerate(zip(idx.tolist(), tables)):
        if not 0 <= k < t.size:
            raise ValueError(f"secret position {i} is symbol {k}, outside the alphabet [0, {t.size}).")
    return tuple(int(k) for k in idx.tolist())


def _check_tolerance(tolerance: float) -> float:
    tol = float(tolerance)
    if not (math.isfinite(tol) and tol >= 0):
        raise ValueError(f"tolerance must be finite and >= 0, got {tolerance!r}.")
    return tol


def space_size(log_probs: np.ndarray | Sequence[np.ndarray]) -> int:
    """|R| = the product of the alphabet sizes, as a Python int."""
    return math.prod(t.size for t in _tables(log_probs))


# ----------------------------------------------------------------------------------------------
# Methods


def _all_sums(tables: Sequence[np.ndarray]) -> np.ndarray:
    """Score of every combination, row-major over the positions (position 0 slowest)."""
    sums = np.zeros(1)
    for row in tables:
        sums = np.add.outer(sums, row).ravel()
    return sums


def _flat_index(secret: Sequence[int], sizes: Sequence[int]) -> int:
    index = 0
    for k, n in zip(secret, sizes):
        index = index * n + k
    return index


def _enumerate(tables: list[np.ndarray], secret: tuple[int, ...], tol: float) -> RankInterval:
    sums = _all_sums(tables)
    score = sums[_flat_index(secret, [t.size for t in tables])]
    better = int(np.count_nonzero(sums > score + tol))
    at_least = int(np.count_nonzero(sums >= score - tol))
    return RankInterval(better=better, tied=at_least - better - 1, space_size=sums.size, method="enumerate")


def _split(sizes: Sequence[int]) -> tuple[list[int], list[int]]:
    """Two groups of positions with products as equal as possible (greedy on log sizes)."""
    groups: tuple[list[int], list[int]] = ([], [])
    logs = [0.0, 0.0]
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        g = 0 if logs[0] <= logs[1] else 1
        groups[g].append(i)
        logs[g] += math.log(sizes[i])
    return sorted(groups[0]), sorted(groups[1])


def _sorted_sums(tables: Sequence[np.ndarray], secret: Sequence[int]) -> tuple[np.ndarray, float]:
    """All partial sums of a group of positions, ascending, and the secret's own partial sum.

    Built one position at a time: if s is sorted, the outer sum row + s is |row| sorted runs, which
    a stable (run-detecting, timsort) sort merges in ~log2|row| passes instead of sorting from
    scratch (2-3x faster than sorting the finished array here). The secret's partial sum is formed
    with the same additions as every candidate's, so it is exactly one of the returned values.
    """
    if not tables:  # an empty group (a one-position space): the single empty sum
        return np.zeros(1), 0.0
    sums = np.sort(tables[0])
    own = float(tables[0][secret[0]])
    for row, k in zip(tables[1:], secret[1:]):
        sums = np.add.outer(row, sums).ravel()  # a fresh array: sorted in place, no copy
        sums.sort(kind="stable")
        own = float(row[k] + own)
    return sums, own


def _count_le(sorted_y: np.ndarray, sorted_z: np.ndarray) -> np.ndarray:
    """#{y <= z} for each z. With z ascending, numpy's binary search keeps the previous answer as its
    lower bound and memory access stays local (measured as fast here as a stable merge of the runs)."""
    return np.searchsorted(sorted_y, sorted_z, side="right")


def _count_between(sorted_y: np.ndarray, n_le_hi: np.ndarray, z_lo: np.ndarray) -> int:
    """sum over queries of #{y: z_lo <= y <= z_hi}, given n_le_hi = #{y <= z_hi} per query.

    Ties are rare: one vectorized step down from each query's position in sorted_y settles almost
    every query; the few that still sit on a tie get a binary search (z_lo ascending, so cheap).
    """
    below = n_le_hi - 1  # ascending, so this gather walks sorted_y in order
    hit = (sorted_y[np.maximum(below, 0)] >= z_lo) & (below >= 0)
    if not hit.any():
        return 0
    n_le_hi, z_lo = n_le_hi[hit], z_lo[hit]
    return int((n_le_hi - np.searchsorted(sorted_y, z_lo, side="left")).sum(dtype=np.int64))


def _half(
    tables: Sequence[np.ndarray], secret: Sequence[int], part: Sequence[int]
) -> tuple[np.ndarray, np.ndarray, float]:
    """A half's partial sums as runs ``last[:, None] + base[None, :]`` and the secret's partial sum.

    ``base`` holds the sorted sums of the half's positions but its last one, ``last`` the scores of
    that last position, so every row is ascending and the half's sums are formed with exactly the
    additions :func:`_sorted_sums` makes. A one-position half or one whose last alphabet exceeds
    ``_MAX_RUNS`` is one run: ``last = [0.0]`` and ``base`` all its sums (adding 0.0 changes no
    comparison).
    """
    rows = [tables[i] for i in part]
    keys = [secret[i] for i in part]
    if len(rows) >= 2 and rows[-1].size <= _MAX_RUNS:
        base, own_base = _sorted_sums(rows[:-1], keys[:-1])
        return rows[-1], base, float(rows[-1][keys[-1]] + own_base)
    base, own = _sorted_sums(rows, keys)
    return np.zeros(1), base, own


def _window_items(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(window number, index) of every index in the windows [lo[i], hi[i]), without a Python loop."""
    lengths = np.maximum(hi - lo, 0)
    window = np.repeat(np.arange(lengths.size), lengths)
    offsets = np.cumsum(lengths) - lengths  # where each window starts in the concatenation
    return window, np.arange(int(lengths.sum())) - offsets[window] + lo[window]


def _merged_counts(
    y_last: np.ndarray, y_base: np.ndarray, x_last: np.ndarray, x_base: np.ndarray, t_hi: float, t_lo: float
) -> tuple[int, int] | None:
    """(#pairs y > fl(t_hi - x), #pairs fl(t_lo - x) <= y <= fl(t_hi - x)) by one merge, or None.

    y = fl(y_last[l] + y_base) and x = fl(x_last[k] + x_base): the halves as ascending runs.
    Instead of a binary search per threshold (a mispredicted branch per level, ~20 levels), the
    thresholds z = fl(t_hi - x) and the y are merged by one stable sort of 64-bit integer keys: for
    values <= 0 the float64 bit pattern without its sign bit orders by magnitude, i.e. by value
    reversed, and shifting it left frees the low bit to mark y (1) from z (0), so that at equal
    values a z sorts first. Then y > z exactly when y sorts before z. The runs are already sorted,
    so the sort only merges them (timsort): ~0.6x the time of the searches. Ties need each
    threshold's own lower end fl(t_lo - x): a tied pair lies within W >= max(z_hi - z_lo) of each
    other, so only z next to a key gap that small can have ties; their x are found again by value
    and their tied y counted between the keys of their two thresholds.

    Four steps, one function each: prune what needs no merging (:func:`_merge_windows`), write the
    keys (:func:`_merge_keys`), count the better pairs and find the near-ties in one pass
    (:func:`_scan_merged`), count the ties (:func:`_merged_ties`).

    Returns None where the keys do not apply (a threshold above 0, spaces beyond ``_MERGED_MAX``,
    too many near-ties): the caller then uses the binary searches.
    """
    better, rows, starts, stops = _merge_windows(y_last, y_base, x_last, x_base, t_hi, t_lo)
    if not rows:
        return better, 0
    z_max = max(float(t_hi - (x_last[k] + x_base[starts[k]])) for k in rows)
    z_min = min(float(t_hi - (x_last[k] + x_base[stops[k] - 1])) for k in rows)
    if not z_max <= 0.0:  # the keys order values <= 0 only
        return None
    x_abs = max(abs(float(x_last.min() + x_base[0])), abs(float(x_last.max() + x_base[-1])))
    width = ((t_hi - t_lo) + 4 * math.ulp(abs(t_hi) + abs(t_lo) + x_abs)) * (1 + 2.0**-40)
    # y above every included threshold is better than all of them; y below every lower end is
    # neither: neither needs merging.
    y_lo = [bisect.bisect_left(y_base, z_min - 2 * width, key=_plus(r)) for r in y_last]
    y_hi = [bisect.bisect_right(y_base, z_max, key=_plus(r)) for r in y_last]
    n_z = sum(stops[k] - starts[k] for k in rows)
    better += sum(y_base.size - hi for hi in y_hi) * n_z
    keys = _merge_keys(y_last, y_base, y_lo, y_hi, x_last, x_base, rows, starts, stops, t_hi)
    scanned = _scan_merged(keys, sum(hi - lo for lo, hi in zip(y_lo, y_hi)), width)
    if scanned is None:
        return None
    merged_better, close = scanned
    better += merged_better
    if close is None:
        return better, 0
    between = _merged_ties(keys, close, width, x_last, x_base, t_hi, t_lo)
    return None if between is None else (better, between)


def _plus(r: Any) -> Callable[[Any], Any]:
    """The bisection key ``b -> r + b`` (``r`` bound now)."""
    return lambda b: r + b


def _minus_gap(t: float, r: Any) -> Callable[[Any], Any]:
    """The bisection key ``b -> -(t - (r + b))`` (``t`` and ``r`` bound now)."""
    return lambda b: -(t - (r + b))


def _merge_windows(
    y_last: np.ndarray, y_base: np.ndarray, x_last: np.ndarray, x_base: np.ndarray, t_hi: float, t_lo: float
) -> tuple[int, list[int], list[int], list[int]]:
    """(pairs better by pruning alone, the x runs left to merge, each run's window [starts, stops)).

    Per run, thresholds below every y (all y better) are a suffix and thresholds whose lower end is
    above every y (nothing better or tied) a prefix: found by bisection with the very comparisons
    the search path makes (fl(t - x) is monotone in x), so no full pass is needed.
    """
    n_y = y_last.size * y_base.size
    y_min, y_max = float((y_last + y_base[0]).min()), float((y_last + y_base[-1]).max())
    starts, stops = [], []
    for r in x_last:
        stops.append(bisect.bisect_right(x_base, -y_min, key=_minus_gap(t_hi, r)))
        starts.append(min(bisect.bisect_left(x_base, -y_max, key=_minus_gap(t_lo, r)), stops[-1]))
    better = sum(x_base.size - stop for stop in stops) * n_y
    rows = [k for k in range(x_last.size) if starts[k] < stops[k]]
    return better, rows, starts, stops


def _merge_keys(
    y_last: np.ndarray,
    y_base: np.ndarray,
    y_lo: list[int],
    y_hi: list[int],
    x_last: np.ndarray,
    x_base: np.ndarray,
    rows: list[int],
    starts: list[int],
    stops: list[int],
    t_hi: float,
) -> np.ndarray:
    """The thresholds' keys (low bit 0) then the y's (low bit 1), merged by one stable sort.

    Keys are written in place, run by run (fresh large temporaries cost page faults here).
    """
    n_z = sum(stops[k] - starts[k] for k in rows)
    n_ym = sum(hi - lo for lo, hi in zip(y_lo, y_hi))
    keys = np.empty(n_ym + n_z, dtype=np.uint64)
    at = 0
    for k in rows:  # z = fl(t_hi - fl(base + r)), descending values: ascending magnitudes
        seg = keys[at : at + stops[k] - starts[k]]
        as_float = seg.view(np.float64)
        np.add(x_base[starts[k] : stops[k]], x_last[k], out=as_float)
        np.subtract(t_hi, as_float, out=as_float)
        np.left_shift(seg, 1, out=seg)
        at += seg.size
    for r, lo, hi in zip(y_last, y_lo, y_hi):  # y = fl(base + r), reversed: ascending magnitudes
        seg = keys[at : at + hi - lo]
        as_float = seg.view(np.float64)
        np.add(y_base[lo:hi][::-1], r, out=as_float)
        np.left_shift(seg, 1, out=seg)
        np.bitwise_or(seg, 1, out=seg)
        at += seg.size
    keys.sort(kind="stable")
    return keys


def _scan_merged(keys: np.ndarray, n_ym: int, width: float) -> tuple[int, np.ndarray | None] | None:
    """(better pairs among the merged keys, positions of key pairs close enough to hold a tie or None), or None.

    y > z exactly when y sorts before z: sum over the y of the z after them. Ties: keys of values
    within ``width`` differ by at most 2 (width / ulp + 1) + 1, ulp taken at the smallest magnitude
    present (the first key); the value gaps of those pairs then settle it. Both in cache-sized
    chunks. None: a magnitude near 0 or ties everywhere (the caller falls back to the searches).
    """
    smallest = float(np.array([keys[0] >> np.uint64(1)], dtype=np.uint64).view(np.float64)[0])
    ulps = width / math.ulp(smallest) if smallest > 0.0 else math.inf
    if not ulps < 2.0**60:  # a magnitude near 0: the key gap would cover everything
        return None
    gap = np.uint64(2 * math.ceil(ulps) + 4)
    y_pos_sum = 0
    close_parts = []
    n_close = 0
    step = 1 << 16
    scratch = np.empty(step, dtype=np.uint64)
    for c0 in range(0, keys.size, step):
        chunk = keys[c0 : c0 + step]
        bits = np.bitwise_and(chunk, 1, out=scratch[: chunk.size]).astype(bool)
        pos = np.flatnonzero(bits)
        y_pos_sum += int(pos.sum(dtype=np.int64)) + c0 * pos.size
        nxt = keys[c0 + 1 : c0 + step + 1]
        diff = np.subtract(nxt, chunk[: nxt.size], out=scratch[: nxt.size])
        hits = np.flatnonzero(diff <= gap)
        if hits.size:
            hits = hits[~bits[hits] | ((nxt[hits] & np.uint64(1)) == 0)]  # pairs with a threshold
            n_close += hits.size
            if n_close > _TIE_CANDIDATES_MAX:  # ties everywhere (e.g. a flat table): searches
                return None
            close_parts.append(hits + c0)
    better = n_ym * (keys.size - 1) - y_pos_sum - n_ym * (n_ym - 1) // 2
    return better, (np.concatenate(close_parts) if close_parts else None)


def _merged_ties(
    keys: np.ndarray, close: np.ndarray, width: float, x_last: np.ndarray, x_base: np.ndarray, t_hi: float, t_lo: float
) -> int | None:
    """Pairs fl(t_lo - x) <= y <= fl(t_hi - x) among the close key pairs of :func:`_scan_merged` (None: searches).

    Every x whose threshold may be one of the close values (bracketed by value, so each x once): its
    ties are the y keys between its two thresholds' keys (a tied y is never pruned by the merge).
    """
    m = x_base.size
    magnitude = (keys[np.concatenate([close, close + 1])] >> np.uint64(1)).view(np.float64)
    close = close[magnitude[close.size :] - magnitude[: close.size] <= width]
    if close.size == 0:
        return 0
    near = np.union1d(close, close + 1)
    near = near[(keys[near] & np.uint64(1)) == 0]
    if near.size > _TIE_CANDIDATES_MAX:
        return None
    values = -np.unique(keys[near] >> np.uint64(1)).view(np.float64)
    centre = (t_hi - values)[None, :] - x_last[:, None]
    slack = 4 * np.spacing(np.abs(values)[None, :] + abs(t_hi) + np.abs(x_last)[:, None])
    lo = np.searchsorted(x_base, (centre - slack).ravel(), side="left")
    hi = np.searchsorted(x_base, (centre + slack).ravel(), side="right")
    row = np.repeat(np.arange(x_last.size), values.size)
    which = _window_items(lo, hi)
    flat = np.unique(row[which[0]] * m + which[1])
    xs = x_last[flat // m] + x_base[flat % m]
    z_hi, z_lo = t_hi - xs, t_lo - xs
    if not (z_hi <= 0.0).all():
        return None
    first = np.searchsorted(keys, (z_hi.view(np.uint64) << np.uint64(1)) | np.uint64(1), side="left")
    last = np.searchsorted(keys, (z_lo.view(np.uint64) << np.uint64(1)) | np.uint64(1), side="right")
    _, at_key = _window_items(first, last)
    return int(np.count_nonzero(keys[at_key] & np.uint64(1)))


def _exact(tables: list[np.ndarray], secret: tuple[int, ...], tol: float) -> RankInterval:
    sizes = [t.size for t in tables]
    total = math.prod(sizes)
    part_a, part_b = _split(sizes)
    half = max(math.prod(sizes[i] for i in part_a), math.prod(sizes[i] for i in part_b))
    if half > _EXACT_HALF_MAX:
        raise ValueError(
            f"method 'exact' would enumerate {half} half-sums (|R| = {total}); use "
            f"'bounds' (or 'auto') for spaces this large."
        )
    if math.prod(sizes[i] for i in part_a) > math.prod(sizes[i] for i in part_b):
        part_a, part_b = part_b, part_a
    # y: the smaller half; x: the larger half, as runs x = r + base for each symbol score r of its
    # last position (base: the sorted sums of its other positions), so the largest array is never
    # sorted: each run is already ascending. The y half likewise as runs for the merge.
    part_b = sorted(part_b, key=lambda i: -sizes[i])  # smallest alphabet last: fewest runs
    y_last, y_base, own_y = _half(tables, secret, part_a)
    x_last, x_base, own_x = _half(tables, secret, part_b)
    score = own_y + own_x
    t_hi, t_lo = score + tol, score - tol
    counts = None
    if y_last.size * y_base.size + x_last.size * x_base.size <= _MERGED_MAX:
        counts = _merged_counts(y_last, y_base, x_last, x_base, t_hi, t_lo)
    if counts is None:
        ys = np.sort(np.add.outer(y_last, y_base).ravel(), kind="stable")
        counts = _searched_counts(ys, x_last, x_base, t_hi, t_lo)
    better, between = counts
    # The secret's own pair was counted like any other: as a tie, unless rounding of the threshold
    # t - x pushed it across (possible only with a tolerance below an ulp of the score).
    own_better = bool(own_y > t_hi - own_x)
    own_between = (not own_better) and bool(own_y >= t_lo - own_x)
    return RankInterval(better=better - own_better, tied=between - own_between, space_size=total, method="exact")


def _searched_counts(
    ys: np.ndarray, x_last: np.ndarray, x_base: np.ndarray, t_hi: float, t_lo: float
) -> tuple[int, int]:
    """The counts of :func:`_merged_counts` by ascending binary searches of the thresholds in ys."""
    if x_last.size == 1 and x_last[0] == 0.0:  # one run: chunks of it bound the memory
        runs = [(0.0, x_base[start : start + _CHUNK]) for start in range(0, x_base.size, _CHUNK)]
    else:
        runs = [(float(r), x_base) for r in x_last]
    x_min, x_max = float(x_last.min() + x_base[0]), float(x_last.max() + x_base[-1])
    n_y, y_min, y_max = ys.size, ys[0], ys[-1]
    # y below every threshold t_lo - x never counts; y above every t_hi - x always counts as
    # better (fl(t - x) is monotone in x, so these are the comparisons the search would make).
    # Only the rest is searched: for a memorized secret that is a sliver.
    lo = int(np.searchsorted(ys, t_lo - x_max, side="left"))  # ys[:lo] < t_lo - max(x)
    hi = int(np.searchsorted(ys, t_hi - x_min, side="right"))  # ys[hi:] > t_hi - min(x)
    n_always = n_y - max(hi, lo)
    ys = ys[lo : max(hi, lo)]
    n_mid = ys.size
    better = between = 0  # pairs with y > t_hi - x; pairs with t_lo - x <= y <= t_hi - x
    for shift, rest in runs:
        x = rest + shift  # exact for the chunks of xs (shift 0.0)
        # Thresholds outside the range of y need no search (the comparisons the search would make).
        everything = (t_hi - x) < y_min  # then also t_lo - x <= t_hi - x < y_min
        nothing = (t_lo - x) > y_max  # then also t_hi - x >= t_lo - x > y_max
        better += int(np.count_nonzero(everything)) * n_y
        x = x[~(everything | nothing)][::-1]  # descending x: ascending thresholds
        if x.size == 0:
            continue
        better += x.size * n_always
        if n_mid == 0:
            continue
        n_le = _count_le(ys, t_hi - x)
        better += x.size * n_mid - int(n_le.sum(dtype=np.int64))
        between += _count_between(ys, n_le, t_lo - x)
    return better, between


def _round_count(estimate: float, rel_err: float) -> tuple[int, int]:
    """Integer interval holding a non-negative count computed with relative error <= rel_err."""
    if estimate < 2.0**52 and 2 * estimate * rel_err < 0.5:
        exact = int(round(estimate))
        return exact, exact
    return (max(0, math.floor(estimate * (1 - 2 * rel_err))), math.ceil(estimate * (1 + 2 * rel_err)))


def _grid_distribution(rows: list[np.ndarray]) -> tuple[np.ndarray, int, int]:
    """Histogram (float64 counts) of the sum of integer grid scores over every candidate.

    Returns (counts, offset, terms): counts[k] = #candidates whose summed grid score is offset + k;
    terms bounds the rounding steps any count went through (for the relative error bound).
    """
    counts = np.ones(1)
    offset = 0
    terms = 0
    for row in rows:
        low = int(row.min())
        hist = np.bincount((row - low).astype(np.int64)).astype(np.float64)
        offset += low
        nonzero = np.flatnonzero(hist)
        terms += nonzero.size + 1
        if nonzero.size <= 32:  # a few shifted copies beat a dense convolution
            out = np.zeros(counts.size + hist.size - 1)
            for k in nonzero:
                out[k : k + counts.size] += hist[k] * counts
            counts = out
        else:
            counts = np.convolve(counts, hist)
    return counts, offset, terms


def _bounds(tables: list[np.ndarray], secret: tuple[int, ...], tol: float, grid_cells: int) -> RankInterval:
    """Guaranteed rank bracket from the floor/ceil grid convolution.

    Why it is guaranteed: with h a power of two, v / h is exact, so floor(v/h) h <= v <= ceil(v/h) h
    holds for every per-position score v, hence lo(c) h <= score(c) <= hi(c) h for every candidate c
    (lo, hi: its summed floor/ceil grid scores; score: the exact real sum). A candidate with
    lo(c) h > s + tol + delta is better than the secret whichever order its float64 sum is taken
    in (delta covers float64 summation error of any candidate and of the secret), and one with
    hi(c) h < s - tol - delta is worse. The counts of these come from convolving per-position
    histograms in float64: all terms are non-negative, so every computed count carries a relative
    error <= (1 + u)^n - 1 for n the rounding steps it went through (Higham, Accuracy and Stability
    of Numerical Algorithms, 2002, sec. 3.1 and 4.2), and the counts are widened by that.
    """
    sizes = [t.size for t in tables]
    total = math.prod(sizes)
    score = math.fsum(t[k] for t, k in zip(tables, secret))
    spread = math.fsum(float(t.max() - t.min()) for t in tables)
    if spread == 0.0:  # every candidate scores the same: all tie
        return RankInterval(better=0, tied=total - 1, space_size=total, method="bounds")
    h = 2.0 ** math.floor(math.log2(spread / grid_cells))
    scale = math.fsum(float(np.abs(t).max()) for t in tables) + abs(score) + tol
    delta = 8 * (len(tables) + 4) * _U * scale
    floors = [np.floor(t / h) for t in tables]
    ceils = [np.ceil(t / h) for t in tables]
    lo_counts, lo_offset, lo_terms = _grid_distribution(floors)
    if all(np.array_equal(c, f + 1) for f, c in zip(floors, ceils)):  # no score on the grid: ceil = floor + 1
        hi_counts, hi_offset, hi_terms = lo_counts, lo_offset + len(tables), lo_terms
    else:
        hi_counts, hi_offset, hi_terms = _grid_distribution(ceils)
    # Surely better: lo >= m_better (lo h > s + tol + delta). Possibly as good: hi >= m_atleast.
    m_better = math.floor((score + tol + delta) / h) + 1
    m_atleast = math.ceil((score - tol - delta) / h)
    tail_lo = lo_counts[max(0, m_better - lo_offset) :]
    tail_hi = hi_counts[max(0, m_atleast - hi_offset) :]
    est_better = math.fsum(tail_lo.tolist()) if m_better - lo_offset < lo_counts.size else 0.0
    est_atleast = math.fsum(tail_hi.tolist()) if m_atleast - hi_offset < hi_counts.size else 0.0
    rel_lo = 1.01 * math.expm1((lo_terms + 2) * math.log1p(_U)) + 2 * _U
    rel_hi = 1.01 * math.expm1((hi_terms + 2) * math.log1p(_U)) + 2 * _U
    better_low, _ = _round_count(est_better, rel_lo)
    _, atleast_high = _round_count(est_atleast, rel_hi)
    atleast_high = min(max(atleast_high, better_low + 1), total)  # the secret itself is at least as good
    return RankInterval(better=better_low, tied=atleast_high - better_low - 1, space_size=total, method="bounds")


def exposure_rank(
    log_probs: np.ndarray | Sequence[np.ndarray],
    secret: Sequence[int],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    method: str = "auto",
    grid_cells: int = DEFAULT_GRID_CELLS,
) -> RankInterval:
    """Rank interval of ``secret`` among all candidates of a factorizing secret space.

    Args:
      log_probs: [positions, alphabet] scores (per-position log-probabilities over the space's
        alphabet), or a list of 1-D arrays when alphabet sizes differ. A candidate's score is the sum
        of its per-position entries; higher is better.
      secret: index of the true symbol at each position.
      tolerance: candidates within this distance of the secret's score are ties (float64 summation
        order alone moves a score by a few ulps).
      method: "auto" (enumerate for |R| <= 1e6, exact up to 1e14, bounds above), "enumerate",
        "exact" or "bounds".
      grid_cells: grid resolution of the bounds method (total cells over all positions): finer is
        tighter and slower.

    Returns:
      A :class:`RankInterval`; its ``exposure_low``/``exposure_high`` are Carlini et al.'s exposure.

    Raises:
      ValueError: on shape mismatch, a secret index outside its alphabet, or a non-finite score.
    """
    tables = _tables(log_probs)
    idx = _secret(secret, tables)
    tol = _check_tolerance(tolerance)
    total = math.prod(t.size for t in tables)
    if method == "auto":
        method = "enumerate" if total <= ENUMERATE_MAX else "exact" if total <= EXACT_MAX else "bounds"
    if method == "enumerate":
        if total > 10 * ENUMERATE_MAX:
            raise ValueError(
                f"method 'enumerate' scores every candidate; |R| = {total} is too many (use 'exact' or 'auto')."
            )
        return _enumerate(tables, idx, tol)
    if method == "exact":
        return _exact(tables, idx, tol)
    if method == "bounds":
        if isinstance(grid_cells, bool) or not isinstance(grid_cells, int) or grid_cells < 1:
            raise ValueError(f"grid_cells must be a positive int, got {grid_cells!r}.")
        return _bounds(tables, idx, tol, grid_cells)
    raise ValueError(f"method must be 'auto', 'enumerate', 'exact' or 'bounds', got {method!r}.")


def exposure_ranks(
    log_probs: np.ndarray | Sequence[Any],
    secrets: np.ndarray | Sequence[Sequence[int]],
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    method: str = "auto",
    grid_cells: int = DEFAULT_GRID_CELLS,
    workers: int = 1,
) -> list[RankInterval]:
    """:func:`exposure_rank` for n canaries: log_probs [n, positions, alphabet], secrets [n, positions].

    ``workers`` > 1 ranks canaries in that many threads: numpy releases the GIL in the sorts, binary
    searches and additions that dominate, so canaries overlap on idle cores (results are identical).
    """
    if isinstance(log_probs, np.ndarray) and log_probs.ndim != 3:
        raise ValueError(f"log_probs must be [canaries, positions, alphabet], got shape {log_probs.shape}.")
    if len(log_probs) != len(secrets):
        raise ValueError(f"{len(log_probs)} log-prob tables but {len(secrets)} secrets.")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a positive int, got {workers!r}.")

    def one(pair: tuple[Any, Any]) -> RankInterval:
        return exposure_rank(pair[0], pair[1], tolerance=tolerance, method=method, grid_cells=grid_cells)

    pairs = list(zip(log_probs, secrets))
    if workers == 1 or len(pairs) < 2:
        return [one(p) for p in pairs]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(workers, len(pairs))) as pool:
        return list(pool.map(one, pairs))


# ----------------------------------------------------------------------------------------------
# Sampled estimates (scores that do not factorize)


#: Relative distance below which a scaled rank is taken to be the integer it rounds to: the float error of
#: 2 ** (log2 |R| + log2 fraction) is ~1e-14 relative for |R| up to 2**200; an exact rank |R| (b + 1) / m that
#: is not an integer is at least 1 / m from one, farther than this below ranks of 1e12 / m (above, a float
#: cannot tell neighbouring ranks apart anyway).
_SNAP_REL_TOL = 1e-12


def _scaled_rank_interval(log2_fraction_low: float, log2_fraction_high: float, total: int, method: str) -> RankInterval:
    """Integer ranks bracketing |R| * fraction (fractions given as log2), clamped to [1, |R|].

    A scaled rank within :data:`_SNAP_REL_TOL` (relative) of an integer is that integer before rounding:
    the log2 round trip leaves float error (|R| = 1000 and fraction 1/10 give 100.00000000000004), and a
    ceiling of it would put the interval's upper end one rank too high, a floor its lower end one too low.
    """

    def scaled(log2_fraction: float, rounding) -> int:
        log2_rank = math.log2(total) + log2_fraction
        if log2_rank <= 0:
            return 1
        if log2_rank >= math.log2(total):
            return total
        rank = 2.0**log2_rank
        nearest = round(rank)
        if math.isclose(rank, nearest, rel_tol=_SNAP_REL_TOL):
            return min(total, max(1, int(nearest)))
        return min(total, max(1, int(rounding(rank))))

    low = scaled(log2_fraction_low, math.floor)
    high = max(low, scaled(log2_fraction_high, math.ceil))
    return RankInterval(better=low - 1, tied=high - low, space_size=total, method=method)


def sampled_exposure(
    secret_score: float,
    reference_scores: np.ndarray,
    space_size: int,
    *,
    method: str = "interpolation",
    tolerance: float = DEFAULT_TOLERANCE,
) -> RankInterval:
    """Estimated rank of a secret from the scores of m candidates sampled uniformly from R.

    Carlini et al. 2019, sec. 4.2, for scorers that do not factorize over positions:

    - ``interpolation``: the secret's rank among the m references, (b + 1) with b references scored
      better, scaled to R: rank ~ |R| (b + 1) / m, i.e. exposure ~ log2 m - log2 (b + 1) (as TF
      Privacy's ``compute_exposure_interpolation``). It cannot resolve exposure beyond log2 m.
      References within ``tolerance`` of the secret widen the interval.
    - ``skewnorm``: fit a skew-normal to the reference scores (``scipy.stats.skewnorm.fit``) and read
      the fraction of R scored above the secret off its survival function: rank ~ |R| sf(s), as TF
      Privacy's ``compute_exposure_extrapolation`` (which uses the CDF of perplexities, lower better).

    The interval returned brackets the scaled estimate (integer rounding and ties); it is not a
    confidence interval.
    """
    score = float(secret_score)
    if not math.isfinite(score):
        raise ValueError(f"secret_score must be finite, got {secret_score!r}.")
    refs = np.asarray(reference_scores, dtype=np.float64)
    if refs.ndim != 1 or refs.size == 0:
        raise ValueError(f"reference_scores must be a non-empty 1-D array, got shape {refs.shape}.")
    if not np.isfinite(refs).all():
        raise ValueError("reference_scores must be finite (found NaN or inf).")
    if isinstance(space_size, bool) or not isinstance(space_size, (int, np.integer)) or space_size < 1:
        raise ValueError(f"space_size must be a positive int, got {space_size!r}.")
    total = int(space_size)
    tol = _check_tolerance(tolerance)
    m = refs.size
    if method == "interpolation":
        better = int(np.count_nonzero(refs > score + tol))
        tied = int(np.count_nonzero(refs >= score - tol)) - better
        return _scaled_rank_interval(
            math.log2((better + 1) / m), math.log2((better + tied + 1) / m), total, "sampled-interpolation"
        )
    if method == "skewnorm":
        from scipy import stats

        if m < 3 or float(refs.max() - refs.min()) == 0.0:
            raise ValueError(f"a skew-normal fit needs >= 3 reference scores that are not all equal, got {m}.")
        params = stats.skewnorm.fit(refs)
        log2_sf = float(stats.skewnorm.logsf(score, *params)) / math.log(2)
        return _scaled_rank_interval(log2_sf, log2_sf, total, "sampled-skewnorm")
    raise ValueError(f"method must be 'interpolation' or 'skewnorm', got {method!r}.")
