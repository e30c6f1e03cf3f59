"""Benchmark: ``dpaudit demo`` stage by stage (wall and CPU seconds), full or ``--quick``.

Targets: the whole demo under 10 minutes and ``--quick`` under 3 on a 2-core CPU.

The demo runs in a child process (a fresh interpreter: jax and torch compile from scratch, as for a
user), into a temporary folder, and writes ``stage-times.json`` there (each stage's wall time and the
process CPU time it used, summed over threads). The table printed is that file, plus the child's
total wall and CPU time (interpreter start, imports and the verdict included). On a shared machine
wall time is inflated by other load; CPU time is the steadier figure.

How the sizes were chosen (tiny preset, digits:4, frequencies 1,10,100, batch 64, 32 tokens,
learning rate 3e-3, no weight decay; exposure of the 100x canaries vs the controls in bits (13.3 at
most), exact reconstructions of the 100x canaries, held-out MLM accuracy; CPU s of the training on a
shared 2-core machine):

    corpus  /group  mask  steps  model        100x vs ctrl   p        exact  MLM acc  train CPU s
    3000    10      0.15  1000   non-private  11.4 vs 0.9    8e-5     5/10   43%      103
    3000    10      0.15  2000   non-private  13.2 vs 0.7    4e-5     9/10   57%      162
    3000    10      0.30  1000   non-private  13.3 vs 0.9    3e-5     10/10  49%      92   <- full demo
    3000    10      0.15  1000   eps 8        3.8 vs 0.9     9e-4     0/10   6%       114
    3000    10      0.30  1000   eps 8, lr 1e-3  3.1 vs 1.0  2e-3     0/10   5%       110
    3000    10      0.30  4000   eps 8, batch 16 5.1 vs 0.7  2e-4     0/10   8%       184
    10000   10      0.30  2000   eps 8        4.9 vs 1.1     7e-4     0/10   15%      203
    1000    5       0.30  400    non-private  12.1 vs 1.9    6e-3     2/5    18%      41
    1500    8       0.30  600    non-private  12.4 vs 0.5    4e-4     3/8    31%      62

The epsilon-8 model's 100x canaries were above the controls in every run (a group of 100 rows:
epsilon 8 proves nothing for it); its 1x and 10x canaries gave p = 0.08-0.37 in the runs above,
0.016-0.06 in the two full demos and 0.27-0.85 at the quick size (5 canaries per group, 5 runs). Predicting the most
frequent token scores 6% MLM accuracy. 20K rows, digits:6, 1,500 steps (an earlier session): 7.9 vs
1.1 bits, no exact reconstruction.

The demo now pretrains on public utterances first (20,000 generated beside the private rows; a
train-public stage of 1,000 steps, and a public intent classifier on 3,000) and trains the non-private and
epsilon-8 models from it (DP learning rate 1e-3); the table above is from random weights. Measured with the
public start (``--workdir /tmp/pp/full --keep``, load 3-4 on the 2 cores from other engineers, 8 shadow models
and a 5,000-row public classifier then): 720 s wall, 970 s CPU, of which the three classifier attacks took 272 s
wall: hence 4 shadow models per classifier attack and a 3,000-row public classifier. The held-out figures and
the canary picture with the public start are in ``benchmarks/bench_public_pretraining.py`` and the README.

Usage:
    python benchmarks/bench_demo.py [--quick] [--no-classifiers] [--workdir DIR] [--keep]
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

TARGET_SECONDS = {False: 600.0, True: 180.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="Benchmark dpaudit demo --quick.")
    parser.add_argument("--no-classifiers", action="store_true", help="Skip the edp-sgd classifiers.")
    parser.add_argument("--workdir", type=Path, default=None, help="Folder for the run (default: a temporary one).")
    parser.add_argument("--keep", action="store_true", help="Keep the run folder.")
    args = parser.parse_args()

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-demo-"))
    out, report = workdir / "demo", workdir / "report.html"
    command = [
        sys.executable,
        "-m",
        "dpaudit",
        "demo",
        "--out",
        str(out),
        "--report",
        str(report),
        *(["--quick"] if args.quick else []),
        *(["--no-classifiers"] if args.no_classifiers else []),
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, check=False, stdout=subprocess.PIPE, text=True)  # progress bars go to stderr
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:])
        return done.returncode
    stages = json.loads((out / "stage-times.json").read_text(encoding="utf-8"))["stages"]
    print(f"dpaudit demo{' --quick' if args.quick else ''}: stage times (wall s, CPU s)")
    print(f"  {'stage':<24} {'wall':>8} {'CPU':>8}")
    for s in stages:
        print(f"  {s['name']:<24} {s['wall_s']:>8.1f} {s['cpu_s']:>8.1f}{'  (skipped)' if s['skipped'] else ''}")
    print(f"  {'stages total':<24} {sum(s['wall_s'] for s in stages):>8.1f} {sum(s['cpu_s'] for s in stages):>8.1f}")
    print(f"  {'process total':<24} {wall:>8.1f} {cpu:>8.1f}")
    target = TARGET_SECONDS[args.quick]
    print(f"target: under {target:.0f} s wall on 2 cores: {'met' if wall < target else 'NOT met'}")
    print("verdict:\n" + "\n".join(line for line in done.stdout.splitlines()[-3:]))
    if not args.keep and args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
