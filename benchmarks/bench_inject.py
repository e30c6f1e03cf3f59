"""Benchmark: ``dpaudit inject`` on a 1,000,000-line corpus with 13 frequencies x 100 canaries.

Targets: under 30 s wall time and under 1 GiB peak RSS on a 2-core CPU VM.

The corpus (labelled JSONL from ``builtin:assistant``) is generated first, outside the timing.
The inject runs in a child process, so its peak RSS (``RUSAGE_CHILDREN``) is the inject's alone
and not the generator's.

Usage:
    python benchmarks/bench_inject.py [--lines 1000000] [--per-frequency 100] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 30.0
TARGET_RSS_BYTES = 1 << 30
FREQUENCIES = "1,2,3,4,5,6,7,8,9,10,20,50,100"


def make_corpus(path: Path, lines: int, seed: int) -> float:
    """Write ``lines`` labelled assistant utterances as JSONL; returns seconds taken."""
    from dpaudit.corpus import assistant
    from dpaudit.files.run_dirs import dumps_jsonl_line

    start = time.perf_counter()
    with open(path, "w", encoding="utf-8", newline="\n") as handle:
        buffer = []
        for row in assistant.generate(lines, seed):
            buffer.append(dumps_jsonl_line(row))
            if len(buffer) == 8192:
                handle.write("".join(buffer))
                buffer.clear()
        handle.write("".join(buffer))
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--per-frequency", type=int, default=100)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the corpus and run directory")
    args = parser.parse_args()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="dpaudit-bench-inject-"))
    workdir.mkdir(parents=True, exist_ok=True)
    corpus = workdir / f"corpus-{args.lines}.jsonl"
    if not corpus.exists():
        seconds = make_corpus(corpus, args.lines, seed=1)
        print(f"generated {corpus} ({args.lines:,} lines, {corpus.stat().st_size / 2**20:.1f} MiB) in {seconds:.1f} s")
    out = workdir / "run"
    command = [
        sys.executable,
        "-m",
        "dpaudit",
        "inject",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--seed",
        "0",
        "--frequencies",
        FREQUENCIES,
        "--per-frequency",
        str(args.per_frequency),
        "--overwrite",
        "--json",
    ]
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        print(result.stdout + result.stderr, file=sys.stderr)
        return result.returncode
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss = usage.ru_maxrss * 1024  # kilobytes on Linux
    cpu = usage.ru_utime + usage.ru_stime  # less sensitive than wall time to other load on a shared box
    counts = json.loads(result.stdout)["counts"]

    print(
        f"inject: {args.lines:,} corpus lines, 13 frequencies x {args.per_frequency} canaries "
        f"(+{args.per_frequency} controls), {counts['train_rows']:,} train rows, "
        f"{counts['canary_insertions']:,} canary insertions"
    )
    print(f"{'metric':<14}{'measured':>14}{'target':>14}  verdict")
    print(f"{'wall time':<14}{wall:>12.1f} s{TARGET_SECONDS:>12.0f} s  {'ok' if wall < TARGET_SECONDS else 'MISSED'}")
    print(f"{'CPU time':<14}{cpu:>12.1f} s{'':>14}  (user+sys; wall > CPU means the box was busy)")
    print(
        f"{'peak RSS':<14}{rss / 2**20:>11.0f} MiB{TARGET_RSS_BYTES / 2**20:>10.0f} MiB  "
        f"{'ok' if rss < TARGET_RSS_BYTES else 'MISSED'}"
    )
    if not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0 if wall < TARGET_SECONDS and rss < TARGET_RSS_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
