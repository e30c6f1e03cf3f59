"""Benchmark: one-run audits with designed canaries (issue 27 part 2) on the demo's masked-LM recipe.

Every figure comes from the ``dpaudit`` commands a user would type (run as subprocesses): ``inject --coin-flip
--per-frequency 1000`` on 3,000 built-in utterances, ``train --trainer jax-bert`` with the demo's recipe (tiny,
1,000 steps, batch 64, 32 tokens, learning rate 3e-3, no weight decay, 30% masking; ``dpaudit.demo.plan.FULL``),
``attack``; the bound is the attack's headline (95%, corrected for the audits of the run; a proof: Steinke, Nasr &
Jagielski 2023 on coin-flip canaries), its delta the claim's (non-private: min(1e-5, 1/(10 N)), the trainers'
default). Rows:

- ``digits:4`` (today's format) non-private, scored by the loss attack (today's score) and by the canary attack
  (exposure, the score that fits digits);
- each design non-private, scored by the canary attack (the default attacks for ``new-tokens``: the canary attack
  joins them on coin-flip canaries);
- each design at epsilon 4, one row per seed (inject ``--seed s``: new coins and tokens; ``--noise-seed s``), and
  their summary: the bound's mean, min and max over the seeds, and how often it exceeded the claim.

Goals (issue 27): non-private TPR >= 50% at 1% FPR and bound >= 2; epsilon 4: bound >= 0.3 x claim, never above it.

Measured on the shared 2-core CPU (``python benchmarks/bench_designed_canaries.py --seeds 10 --jobs 2``, 17 min;
bounds rounded down; TPR at 1% FPR; 1,000 canaries, ~500 members):

    design          model        score             AUC    TPR@1%FPR  bound (95%)          claim
    digits:4        non-private  loss (today)      0.540  0.2%       0.000                -
    digits:4        non-private  canary: exposure  0.572  0.0%       0.065                -
    new-tokens:24   non-private  canary: PLL       1.000  100%       4.342 (the most 1,000 canaries can prove)
    new-tokens:24   eps 4        canary: PLL       0.604  2.5%       mean 0.309, 0.164-0.442  4.00 (ratio <= 0.111)
                    (10 seeds; AUC 0.571-0.633; the bound above the claim in 0 of 10)
    rare-tokens:4   non-private  canary: PLL       0.547  1.0%       0.000                -
                    (``--designs rare-tokens --seeds 0 --no-baseline``, 2.5 min: rare public words still occur
                    in other rows and share their word pieces; only tokens that exist nowhere else are
                    memorized from one insertion)

Why epsilon 4 stays far below 0.3 x claim (1.2) here: a black-box audit of the last iterate sees the SUM of
the canary's clipped gradients and of every step's noise, so even a canary whose whole clipped gradient lands
on its own coordinates, in the same direction at each of its ~qT = 24.5 samplings, separates members from
non-members by at most q sqrt(T) / sigma = 0.0245 x sqrt(1000) / 1.11 = 0.70 standard deviations (0.52 once the
learning rate's quadratic decay weights the steps). Simulated one-run bounds (95%) on Gaussian scores that far
apart, 500 + 500 canaries: 0.87 on average at 0.70 (1.07 with 2,000 canaries), 0.58 at 0.52, 0.37 at 0.37. The
new-token canaries reach 0.37 (AUC 0.60; one token written 24 or 30 times alike, 8 times 0.22, four distinct new
tokens after a name 0.06; a direction fitted on half the members' embedding rows, white-box, did no better on
the other half), and their bound, 0.31 on average, sits where the simulation puts it. 0.3 x claim needs a recipe
whose last iterate carries more (a larger q sqrt(T) / sigma) or an audit that sees every iterate
(``dpaudit audit-trainer``, issue 27 part 1).

Usage:
    python benchmarks/bench_designed_canaries.py [--seeds 10] [--jobs 2] [--designs new-tokens,rare-tokens]
        [--canaries 1000] [--no-baseline] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

EPSILON = 4.0


@dataclass(frozen=True)
class Row:
    design: str
    model: str
    score: str
    seed: int
    auc: float
    tpr_at_1: float
    bound: float
    claim: float | None
    wall_s: float


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # One thread per job: the machine is shared, and --jobs runs trainings side by side.
    env.update(XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1", OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false")
    return env


def dpaudit(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "dpaudit", *args], env=_env(), capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"dpaudit {' '.join(args)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")


def inject(out: Path, design: str, *, seed: int, canaries: int) -> Path:
    from dpaudit.demo.plan import FULL

    if not (out / "manifest.json").is_file():
        chosen = ["--format", design] if design.startswith("digits") else ["--design", design]
        dpaudit("inject", "--corpus", "builtin:assistant", "--corpus-size", str(FULL.corpus_size), "--seed", str(seed),
                "--coin-flip", "--per-frequency", str(canaries), *chosen, "--out", str(out), "--overwrite")
    return out


def train(data: Path, out: Path, *, private: bool, noise_seed: int) -> Path:
    from dpaudit.demo.plan import FULL as s

    if not (out / "privacy.json").is_file():
        privacy = ["--target-epsilon", f"{EPSILON:g}"] if private else ["--non-private"]
        dpaudit("train", "--trainer", "jax-bert", "--data", str(data), "--out", str(out), "--seed", "0", "--preset", "tiny",
                "--steps", str(s.steps), "--batch-size", str(s.batch_size), "--max-length", str(s.max_length),
                "--learning-rate", f"{s.learning_rate:g}", "--weight-decay", "0", "--mask-prob", f"{s.mask_prob:g}",
                "--eval-every", str(s.steps), "--eval-examples", "256", "--noise-seed", str(noise_seed), *privacy)
    return out


def attack(model: Path, data: Path, out: Path, attacks: str | None) -> list[tuple[str, float, float, float, float | None]]:
    """(attack, AUC, TPR at 1% FPR, headline bound, claim) of each attack's canaries task."""
    from dpaudit.attacks.results import MiaResult
    from dpaudit.attacks.run import read_attack_dir
    from dpaudit.headline import headline_of

    dpaudit("attack", "--model", str(model), "--data", str(data), "--out", str(out), "--overwrite",
            *(["--attacks", attacks] if attacks else []))
    results = read_attack_dir(out)
    head = headline_of(results)
    rows = []
    for r in results.attacks:
        if not isinstance(r, MiaResult):
            continue
        for t in r.tasks:
            if t.task != "canaries":
                continue
            bound = next(b.epsilon for b in head.bounds if b.attack == r.attack and b.task == t.task)
            tpr = next(x["tpr"] for x in t.tpr_at if abs(x["fpr"] - 0.01) < 1e-12)
            rows.append((r.attack, t.auc, tpr, bound, head.claim.epsilon))
    return rows


def run_one(work: Path, design: str, *, private: bool, seed: int, canaries: int, attacks: str | None) -> list[Row]:
    start = time.perf_counter()
    name = design.replace(":", "")
    data = inject(work / f"data-{name}-s{seed}", design, seed=seed, canaries=canaries)
    model = train(data, work / f"model-{name}-{'eps4' if private else 'np'}-s{seed}", private=private, noise_seed=seed)
    scored = attack(model, data, work / f"attack-{name}-{'eps4' if private else 'np'}-s{seed}", attacks)
    wall = time.perf_counter() - start
    label = f"eps {EPSILON:g}" if private else "non-private"
    return [Row(design=design, model=label, score=a, seed=seed, auc=auc, tpr_at_1=tpr, bound=bound, claim=claim, wall_s=wall)
            for a, auc, tpr, bound, claim in scored]


def _down(x: float) -> str:
    """A lower bound (or its ratio to the claim) rounded down to 3 decimals, as dpaudit prints bounds."""
    return f"{math.floor(x * 1000) / 1000:.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="Epsilon-4 runs (inject seed = noise seed = 0..n-1).")
    parser.add_argument("--jobs", type=int, default=1, help="Runs side by side (one thread each).")
    parser.add_argument("--designs", default="new-tokens", help="Comma-separated designs (new-tokens, rare-tokens, ...).")
    parser.add_argument("--canaries", type=int, default=1000, help="Coin-flip canaries per inject directory.")
    parser.add_argument("--no-baseline", action="store_true", help="Skip the digits:4 baseline (today's canaries).")
    parser.add_argument("--workdir", type=Path, default=None, help="Folder for the runs (default: a temporary one).")
    parser.add_argument("--keep", action="store_true", help="Keep the run folder.")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-designed-"))
    work.mkdir(parents=True, exist_ok=True)
    designs = [d.strip() for d in args.designs.split(",") if d.strip()]
    jobs = []
    if not args.no_baseline:
        jobs.append(dict(design="digits:4", private=False, seed=0, attacks="loss,canary"))
    jobs += [dict(design=d, private=False, seed=0, attacks=None) for d in designs]  # None: the default attacks
    jobs += [dict(design=d, private=True, seed=s, attacks="canary") for d in designs for s in range(args.seeds)]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, work, canaries=args.canaries, **job) for job in jobs]
        rows = [row for f in futures for row in f.result()]
    total = time.perf_counter() - start
    print(f"{args.canaries} coin-flip canaries, {len(jobs)} runs in {total / 60:.1f} min (wall, {args.jobs} at a time); "
          f"bound = the attack's headline, 95% (one run, Steinke et al. 2023), rounded down")
    print(f"{'design':<15} {'model':<12} {'score':<7} {'seed':>4} {'AUC':>6} {'TPR@1%FPR':>10} {'bound':>7} {'claim':>6} "
          f"{'ratio':>6} {'wall s':>7}")
    for r in rows:
        claim = "-" if r.claim is None else f"{r.claim:.2f}"
        ratio = "-" if r.claim is None else _down(r.bound / r.claim)
        print(f"{r.design:<15} {r.model:<12} {r.score:<7} {r.seed:>4} {r.auc:>6.3f} {r.tpr_at_1:>10.1%} "
              f"{_down(r.bound):>7} {claim:>6} {ratio:>6} {r.wall_s:>7.0f}")
    for design in designs:
        private = [r for r in rows if r.design == design and r.claim is not None]
        if private:
            bounds = [r.bound for r in private]
            above = sum(r.bound > r.claim for r in private)
            print(f"{design} at epsilon {EPSILON:g}, {len(private)} seeds: bound mean {_down(sum(bounds) / len(bounds))}, "
                  f"min {_down(min(bounds))}, max {_down(max(bounds))} (ratio to the claim "
                  f"{_down(max(bounds) / private[0].claim)} at most); above the claim in {above} of {len(private)}; mean AUC "
                  f"{sum(r.auc for r in private) / len(private):.3f}, mean TPR at 1% FPR "
                  f"{sum(r.tpr_at_1 for r in private) / len(private):.1%}")
    if not args.keep and args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"runs kept in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
