"""Exposure per canary: exact rank (meet in the middle), grid bounds and sampled estimates.

Times ``dpaudit.attacks.exposure_rank`` on random per-position log-probability tables (Dirichlet(1)
per position) for two kinds of secret: a random one (a control canary: its score sits in the bulk,
the worst case, nothing pruned) and the top-ranked one (a memorized canary: most half-sums pruned).
Times are per canary, after the forward pass (the scores are given), min and median over repeats
of wall time (on a shared machine also compare CPU time: the batch rows print it).

"naive" is the first numpy prototype's algorithm: the same two half-sum arrays, one sorted and
every sum of the other binary-searched in it (np.searchsorted with unsorted queries); for digits:6
also brute-force enumeration of all 10^6 candidates. Ratios are measured side by side in one run.
The sampled estimates are timed on m reference scores already computed (scoring the m references
is a forward pass per reference, which dominates in practice and is not counted here).

The batch rows are the speed goal (digits:12, |R| = 10^12, per canary after the forward pass): 8
canaries with random secrets, median over --repeats of wall and CPU time per canary, single thread
(BLAS/OpenMP pools pinned to 1 by environment and threadpoolctl, one Python thread) for the merge
(the default), for the binary searches it replaced (``_MERGED_MAX = 0`` forces them: the previous
algorithm, same counts), and with workers=2 threads.

Run: python benchmarks/bench_exposure.py [--repeats 5] [--skip-16]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: single-thread figures are single-thread

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from dpaudit.attacks import exposure_rank as X  # noqa: E402


def timed(fn, repeats):
    times, value = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - start)
    return value, min(times), statistics.median(times)


def naive_exact(table, secret, tol=1e-9):
    """Sort one half, binary-search every sum of the other (the prototype): O(n log n) random access."""
    half = table.shape[0] // 2
    a = X._all_sums(table[:half])
    b = np.sort(X._all_sums(table[half:]))
    score = table[np.arange(table.shape[0]), secret].sum()
    return int((b.size - np.searchsorted(b, score + tol - a, side="right")).sum())


def row(name, ms_min, ms_med, extra=""):
    print(f"{name:<66} {ms_min:>10.2f} {ms_med:>10.2f}  {extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-16", action="store_true", help="skip digits:16 exact (halves of 1e8, ~3 GB)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'case':<66} {'min ms':>10} {'median ms':>10}")

    for digits in (6, 12, 16):
        if digits == 16 and args.skip_16:
            continue
        repeats = 1 if digits == 16 else args.repeats
        table = np.log(rng.dirichlet(np.ones(10), size=digits))
        for kind, secret in (("random", rng.integers(0, 10, digits)), ("top-ranked", table.argmax(axis=1))):
            got, t_min, t_med = timed(lambda: X.exposure_rank(table, secret, method="exact"), repeats)
            extra = f"exposure [{got.exposure_low:.3f}, {got.exposure_high:.3f}]"
            if digits <= 12:
                better, n_min, n_med = timed(lambda: naive_exact(table, secret), max(1, repeats // 2))
                assert better == got.better, (better, got)
                extra += f"  naive {n_min * 1e3:.1f} ms: {n_min / t_min:.1f}x"
            if digits == 6:
                enum, e_min, _ = timed(lambda: X.exposure_rank(table, secret, method="enumerate"), repeats)
                assert (enum.better, enum.tied) == (got.better, got.tied)
                extra += f"  enumerate {e_min * 1e3:.1f} ms"
            row(f"digits:{digits} exact, {kind} secret", t_min * 1e3, t_med * 1e3, extra)

    batch = np.log(rng.dirichlet(np.ones(10), size=(8, 12)))  # 8 canaries, random secrets
    secrets = rng.integers(0, 10, (8, 12))
    reference = None
    cases = (
        ("merge, 1 thread", True, 1),
        ("binary searches (before), 1 thread", False, 1),
        ("merge, workers=2", True, 2),
    )
    for label, merged, workers in cases:
        walls, cpus = [], []
        saved = X._MERGED_MAX
        X._MERGED_MAX = saved if merged else 0
        try:
            with threadpool_limits(limits=1):
                for _ in range(args.repeats):
                    start_wall, start_cpu = time.perf_counter(), time.process_time()
                    got = X.exposure_ranks(batch, secrets, method="exact", workers=workers)
                    walls.append((time.perf_counter() - start_wall) / 8)
                    cpus.append((time.process_time() - start_cpu) / 8)
        finally:
            X._MERGED_MAX = saved
        reference = reference or got
        assert got == reference, "the merge and the binary searches must give identical intervals"
        row(
            f"digits:12 exact, batch of 8, {label}",
            min(walls) * 1e3,
            statistics.median(walls) * 1e3,
            f"per canary; CPU time median {statistics.median(cpus) * 1e3:.1f} ms per canary",
        )

    for name, positions, alphabet in (("digits:20", 20, 10), ("words:6 (1,695 words)", 6, 1695)):
        table = np.log(rng.dirichlet(np.ones(alphabet), size=positions))
        secret = rng.integers(0, alphabet, positions)
        got, t_min, t_med = timed(lambda: X.exposure_rank(table, secret, method="bounds"), args.repeats)
        row(
            f"{name} bounds, random secret",
            t_min * 1e3,
            t_med * 1e3,
            f"exposure [{got.exposure_low:.3f}, {got.exposure_high:.3f}] "
            f"(width {got.exposure_high - got.exposure_low:.4f} bits)",
        )

    table = np.log(rng.dirichlet(np.ones(10), size=12))
    pool = rng.integers(0, 10, (1000, 12))  # a secret in the top 0.1% of 1,000 random candidates
    secret = pool[np.argmax(table[np.arange(12), pool].sum(axis=1))]
    exact = X.exposure_rank(table, secret, method="exact")
    score = float(table[np.arange(12), secret].sum())
    for m in (1_000, 10_000):
        refs = table[np.arange(12), rng.integers(0, 10, (m, 12))].sum(axis=1)
        for method in ("interpolation", "skewnorm"):
            got, t_min, t_med = timed(lambda: X.sampled_exposure(score, refs, 10**12, method=method), args.repeats)
            row(
                f"digits:12 sampled-{method}, m={m}",
                t_min * 1e3,
                t_med * 1e3,
                f"exposure {got.exposure_high:.3f} vs exact {exact.exposure_high:.3f}",
            )


if __name__ == "__main__":
    main()
