"""Benchmark: choose an epsilon-8 DP fine-tuning recipe on PUBLIC data only, then run it once on the private data.

A hyperparameter search on the private rows would itself be a release (each tried recipe's outcome depends on
them, and picking the best leaks through the choice), so the search here never reads a private row. The public
rows of the real inject directory (``public.jsonl``) are split at random into three disjoint parts:

- pseudo-public: a pseudo public start is pretrained on them exactly as the real public start is;
- pseudo-private: as many rows as the real training set (so the Poisson rate q = B / N, and with it the noise the
  accountant calls for at epsilon 8, is the real run's);
- pseudo-held-out: the rows the candidates are scored on.

Each candidate (learning rate; steps and expected batch size: Anil et al. 2021's large batches, where the noise in
the mean gradient scales like sigma C / B; the trained parameters, where the trainer has such an option) is trained
at epsilon 8 from the pseudo start on the pseudo-private rows, and the one with the best pseudo-held-out figure is
the recipe. Then, on the real data: the public start, the non-private model from it, and the chosen recipe with
``--seeds`` noise seeds (``--noise-seed``: the Poisson sampling and the noise; ``--seed 0`` for every run, so every
run, its start and the non-private model are scored on the same held-out masks), each private run's start evaluated
on the same held-out rows before its first step (``start_eval``: what ``dpaudit train`` compares against when it
warns that a private run ended below its start). Printed: the start, the non-private model, the DP runs (each, their mean and spread), the trivial
baseline (the most frequent token), the ratio to the non-private model, the margin above the start, and whether
that margin exceeds the seeds' spread (max - min). Goals at epsilon 8: above the start by a measured margin and
>= 0.85x the non-private model from the same start.

Usage (every command is printed before it runs; ``nice -n 10`` on a shared machine)::

    python benchmarks/bench_dp_recipe.py --task mlm [--workdir W] [--seeds 3] [--smoke]
    python benchmarks/bench_dp_recipe.py --task clm [--workdir W] [--seeds 3] [--smoke]
        [--search-default] (also search the demo's recipe) [--default-seeds N] (run it on the real rows too)

``--task mlm``: jax-bert masked LM, the demo's directory (``inject --corpus builtin:assistant --corpus-size 3000
--public-size 20000``, digit canaries 1, 10 and 100 times, 10 per group) and the demo's public start (1,000 steps of
64, learning rate 3e-3, 30% masking, 32 tokens). ``--task clm``: edp-sgd ``--task clm`` (GPT-2-shaped tiny causal LM),
the demo's causal directory sizes (1,300 rows, 400 held-out, 5 canaries per group, 20,000 public rows) and its public
start (3 epochs of 64 at 3e-3). ``--smoke`` shrinks every run (a check that the script runs, not a measurement).
Runs are cached in ``--workdir`` (a finished run directory is reused), so a rerun with more ``--seeds`` only trains
the new seeds.

Measured (session of 2026-11-30, the shared 2-core machine at load 8-10, the former recipes' rows
(``--default-seeds``) at load 2-5, ``uptime`` printed by the script; every figure one run unless said; the cores
shared with two other sessions, so no wall times are given)::

    nice -n 10 python benchmarks/bench_dp_recipe.py --task mlm --workdir W --seeds 3

    search on PUBLIC rows only (3,810 pseudo-private, 1,000 pseudo-held-out, 15,190 pseudo-public rows of the real
    public.jsonl), epsilon 8, noise seed 0; jax-bert tiny, --max-length 32 --mask-prob 0.3 --weight-decay 0
      recipe                              held-out  - start  x non-private   sigma
      pseudo start (1,000 steps, public)    58.13%
      non-private from it (1000 x 64, 3e-3) 64.03%
      lr 1e-3, 250 x 64                     57.74%   -0.39%   0.90            0.569
      --freeze embeddings, lr 1e-3, 250x64  57.52%   -0.61%   0.90            0.569
      lr 1e-3, 63 x 256                     57.24%   -0.89%   0.89            0.716
      --freeze embeddings, lr 1e-3, 63x256  57.38%   -0.75%   0.90            0.716
      lr 3e-4, 250 x 64  (chosen)           58.02%   -0.11%   0.91            0.569
      lr 3e-4, 1000 x 64                    57.69%   -0.45%   0.90            0.688
      lr 1e-4, 1000 x 64                    57.91%   -0.22%   0.90            0.688
      lr 1e-3, 250 x 256                    57.57%   -0.56%   0.90            0.953
      lr 1e-3, 63 x 1024                    57.55%   -0.59%   0.90            1.518
      (the demo's own recipe, lr 1e-3 x 1000 x 64, was not searched: 4x the compute of the 250-step rows)

    real data (2,700 members + 1,110 canary rows, 300 held-out rows, all evaluated; the start on the same masks)
      trivial baseline (most frequent token)   6.28%
      public start                            56.84%
      non-private from it                     61.55%   1.00
      DP lr 3e-4, 250 x 64, noise seed 0      56.56%   -0.28%   0.92
      DP lr 3e-4, 250 x 64, noise seed 1      57.76%   +0.92%   0.94
      DP lr 3e-4, 250 x 64, noise seed 2      57.49%   +0.65%   0.93
      mean 57.27%, spread 1.20 points: mean margin +0.43 points, NOT above the spread; 0.93x non-private (goal met)
      noise seeds 3-5 (``--seeds 6``)         56.93%, 57.30%, 57.49%   (+0.09, +0.46, +0.65)
      6 seeds: mean 57.26%, margin +0.42 points (standard deviation 0.42, so +0.42 +- 0.17 standard error of the
      mean over the noise seeds; 5 of 6 above the start), spread 1.20: not above the spread
      the demo's recipe (lr 1e-3, 1000 x 64, ``--default-seeds 3``): 54.81%, 56.01%, 55.82% (-2.03, -0.83, -1.02
      points; mean -1.29): every run of it below every run of the chosen recipe
      (an earlier run of the same recipe varied --seed, so each run had its own held-out masks: margins -0.28,
      -0.09, -0.65 against each run's own start figure: 56.84%, 61.18%, 58.69%)

Reading: at epsilon 8 with N = 3,810 no recipe tried moves the masked LM measurably above its public start, on the
public pseudo split (every candidate below it, the least-moving ones least) or on the real rows (+0.43 +- 1.2
points). The ratio goal (>= 0.85x the non-private model from the same start) is met by every recipe (0.89-0.94x);
the margin goal is not. The recipe knobs do not change the signal-to-noise ratio much: with DP-Adam the second
moment is the noise's variance, so every coordinate steps by about the learning rate in a noise-driven direction,
and at fixed epsilon the accumulated signal against the accumulated noise is set by N and epsilon rather than by
the batch size or the number of steps (larger batches: larger sigma; more steps: larger sigma). Freezing the
embedding tables (125,760 of the tiny model's 198,955 coordinates) did not help at lr 1e-3.

The held-out set is small (300 rows, about 2,500 masked predictions: a binomial standard error near 1 point), so
the seeds' spread is of the size of the margins sought; a measured margin needs more held-out rows or a larger N.

::

    nice -n 10 python benchmarks/bench_dp_recipe.py --task clm --workdir W --seeds 3 --search-default

    search on PUBLIC rows only (1,455 pseudo-private, 1,000 pseudo-held-out, 17,545 pseudo-public rows), epsilon 8,
    noise seed 0; edp-sgd --task clm tiny (GPT-2-shaped 2 x 64), --max-length 32, --mode dp-sgd, 20 epochs
      recipe                              held-out  - start  x non-private   sigma
      pseudo start (3 epochs, public)       57.11%
      non-private from it (20 ep x 64, 3e-3) 53.57%  (it overfits 1,455 rows in 20 epochs: the demo's recipe)
      demo: lr 1e-3, 20 ep x 64             57.02%   -0.09%   1.06            0.887
      lr 1e-3, 20 ep x 256  (chosen)        57.45%   +0.34%   1.07            1.403
      LoRA r8, lr 3e-3, 20 ep x 64          57.13%   +0.01%   1.07            0.887

    real data (900 members + 555 canary rows, 400 held-out rows; inject seed 0, the demo's causal sizes)
      trivial baseline (most frequent token)   8.34%
      public start                            57.39%
      non-private from it                     52.83%   1.00
      DP lr 1e-3, 20 ep x 256, noise seed 0   57.76%   +0.37%   1.09
      DP lr 1e-3, 20 ep x 256, noise seed 1   57.55%   +0.16%   1.09
      DP lr 1e-3, 20 ep x 256, noise seed 2   57.89%   +0.50%   1.10
      mean 57.73%, spread 0.34 points: mean margin +0.35 points, above the spread, every seed above the start;
      1.09x non-private (goal met; the non-private model overfits)
      the old recipe (20 ep x 64, ``--default-seeds 3``): 56.85%, 57.54%, 57.23% (-0.54, +0.15, -0.16 points;
      mean -0.18)

So the chosen masked recipe is measured better than the demo's (by 1.7 points on average), but not above the start
by more than its seeds' spread, the criterion set for changing the demo: the demo keeps its masked recipe.

The causal LM's goals are met on the built-in corpus, narrowly: the margin (+0.35) is just above the three seeds'
spread (0.34), on 400 held-out rows that every run shares. The demo now trains its epsilon-8 causal LM so
(``causal_dp_batch_size``). Not measured: SNIPS (``../shared/data/snips``), LoRA on the masked LM (jax-bert has no
LoRA; ``--freeze embeddings`` is its fewer-parameters knob), more than one seed per search row.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from dpaudit.files.run_dirs import read_jsonl, write_jsonl

EPSILON = "8"


def dpaudit(*args: str) -> None:
    """Run one ``dpaudit`` command (printed first); a failure stops the benchmark with its output."""
    command = [sys.executable, "-m", "dpaudit", *args]
    print("$ dpaudit " + shlex.join(args), flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(done.returncode)
    print(f"  ({time.perf_counter() - started:.0f} s)", flush=True)


def slug(name: str) -> str:
    """A recipe's name as a run directory's: ``lr 1e-3, 250 x 64`` -> ``lr1e-3_250x64``."""
    return name.replace(" ", "").replace(",", "_").replace(":", "")


def finished(run: Path) -> bool:
    return (run / "manifest.json").is_file() and (run / "metrics.jsonl").is_file()


def train(run: Path, *args: str) -> Path:
    """``dpaudit train ... --out run`` unless ``run`` already holds a finished run (the cache)."""
    if finished(run):
        print(f"(cached) {run}", flush=True)
        return run
    dpaudit("train", *args, "--out", str(run))
    return run


@dataclass(frozen=True)
class Figure:
    """A run's last held-out figure, its trivial baseline, and its start's figure on the same rows (if recorded)."""

    value: float
    baseline: float | None
    start: float | None


KEYS = (
    ("mlm_accuracy", "heldout_mlm_accuracy_baseline"),
    ("next_token_accuracy", "heldout_next_token_accuracy_baseline"),
    ("eval_accuracy", "heldout_accuracy_baseline"),
)


def figure(run: Path) -> Figure:
    rows = list(read_jsonl(run / "metrics.jsonl"))
    summary = json.loads((run / "manifest.json").read_text(encoding="utf-8"))["summary"]
    start_eval = summary.get("start_eval") or {}
    for key, base_key in KEYS:
        found = [r for r in rows if r.get(key) is not None]
        if found:
            base = found[-1].get(base_key, summary.get(base_key))
            return Figure(found[-1][key], base, start_eval.get(key))
    raise SystemExit(f"{run}: no held-out figure in metrics.jsonl")


@dataclass(frozen=True)
class Recipe:
    """One DP candidate: its name and the train options it adds to the common ones."""

    name: str
    args: tuple[str, ...]


def pseudo_directory(real: Path, root: Path, heldout: int) -> Path:
    """The search's inject directory, from the real ``public.jsonl`` only: pseudo-private rows (as many as the real
    train.jsonl), ``heldout`` pseudo-held-out rows and the rest as pseudo-public rows, drawn at random (seed 0)."""
    pseudo = root / "pseudo-data"
    if (pseudo / "manifest.json").is_file():
        return pseudo
    rows = [{"text": r["text"]} for r in read_jsonl(real / "public.jsonl")]
    n_train = sum(1 for _ in read_jsonl(real / "train.jsonl"))
    if n_train + heldout >= len(rows):
        raise SystemExit(f"{real / 'public.jsonl'}: {len(rows)} public rows cannot hold {n_train} + {heldout} rows")
    random.Random(0).shuffle(rows)
    src = root / "pseudo-src"
    src.mkdir(parents=True, exist_ok=True)
    write_jsonl(src / "train.jsonl", rows[:n_train])
    write_jsonl(src / "heldout.jsonl", rows[n_train : n_train + heldout])
    write_jsonl(src / "public.jsonl", rows[n_train + heldout :])
    dpaudit(
        "inject",
        "--train",
        str(src / "train.jsonl"),
        "--heldout",
        str(src / "heldout.jsonl"),
        "--public",
        str(src / "public.jsonl"),
        "--no-canaries",
        "--out",
        str(pseudo),
        "--seed",
        "0",
        "--overwrite",
    )
    return pseudo


@dataclass(frozen=True)
class Task:
    """What differs between the masked and the causal LM: the inject sizes, the common train options, the public
    start's options, the non-private options and the DP candidates."""

    name: str
    inject: tuple[str, ...]
    common: tuple[str, ...]
    public: tuple[str, ...]
    nonprivate: tuple[str, ...]
    default: Recipe
    candidates: tuple[Recipe, ...]
    eval_rows: str
    search_eval_rows: str


def mlm_task(smoke: bool) -> Task:
    steps = (lambda n: str(max(2, n // 50))) if smoke else str
    size = "1500" if smoke else "3000"
    public = "6000" if smoke else "20000"
    return Task(
        name="jax-bert masked LM",
        inject=("--corpus", "builtin:assistant", "--corpus-size", size, "--public-size", public)
        + ("--format", "digits:4", "--frequencies", "1,10,100", "--per-frequency", "10"),
        common=("--trainer", "jax-bert", "--preset", "tiny", "--max-length", "32", "--weight-decay", "0")
        + ("--mask-prob", "0.3", "--eval-every", steps(1000)),
        public=("--data-split", "public", "--non-private", "--steps", steps(1000), "--batch-size", "64")
        + ("--learning-rate", "3e-3"),
        nonprivate=("--non-private", "--steps", steps(1000), "--batch-size", "64", "--learning-rate", "3e-3"),
        default=Recipe(
            "demo: lr 1e-3, 1000 x 64", ("--steps", steps(1000), "--batch-size", "64", "--learning-rate", "1e-3")
        ),
        candidates=(
            Recipe("lr 1e-3, 250 x 64", ("--steps", steps(250), "--batch-size", "64", "--learning-rate", "1e-3")),
            Recipe(
                "frozen tables, lr 1e-3, 250 x 64",
                ("--steps", steps(250), "--batch-size", "64", "--learning-rate", "1e-3", "--freeze", "embeddings"),
            ),
            Recipe("lr 1e-3, 63 x 256", ("--steps", steps(63), "--batch-size", "256", "--learning-rate", "1e-3")),
            Recipe(
                "frozen tables, lr 1e-3, 63 x 256",
                ("--steps", steps(63), "--batch-size", "256", "--learning-rate", "1e-3", "--freeze", "embeddings"),
            ),
            Recipe("lr 3e-4, 250 x 64", ("--steps", steps(250), "--batch-size", "64", "--learning-rate", "3e-4")),
            Recipe("lr 3e-4, 1000 x 64", ("--steps", steps(1000), "--batch-size", "64", "--learning-rate", "3e-4")),
            Recipe("lr 1e-4, 1000 x 64", ("--steps", steps(1000), "--batch-size", "64", "--learning-rate", "1e-4")),
            Recipe("lr 1e-3, 250 x 256", ("--steps", steps(250), "--batch-size", "256", "--learning-rate", "1e-3")),
            Recipe("lr 1e-3, 63 x 1024", ("--steps", steps(63), "--batch-size", "1024", "--learning-rate", "1e-3")),
        ),
        eval_rows="512",
        search_eval_rows="1000",
    )


def clm_task(smoke: bool) -> Task:
    epochs = (lambda n: "1") if smoke else str
    size = "1300"
    public = "6000" if smoke else "20000"
    return Task(
        name="edp-sgd causal LM",
        inject=("--corpus", "builtin:assistant", "--corpus-size", size, "--public-size", public)
        + ("--heldout-size", "100" if smoke else "400")
        + ("--format", "digits:4", "--frequencies", "1,10,100", "--per-frequency", "5"),
        common=("--trainer", "edp-sgd", "--task", "clm", "--preset", "tiny", "--max-length", "32"),
        public=("--mode", "sgd", "--data-split", "public", "--non-private", "--epochs", epochs(3))
        + ("--batch-size", "64", "--learning-rate", "3e-3"),
        nonprivate=("--mode", "sgd", "--non-private", "--epochs", epochs(20), "--batch-size", "64")
        + ("--learning-rate", "3e-3"),
        default=Recipe(
            "demo: lr 1e-3, 20 ep x 64",
            ("--mode", "dp-sgd", "--epochs", epochs(20), "--batch-size", "64", "--learning-rate", "1e-3"),
        ),
        candidates=(
            Recipe(
                "lr 1e-3, 20 ep x 256",
                ("--mode", "dp-sgd", "--epochs", epochs(20), "--batch-size", "256", "--learning-rate", "1e-3"),
            ),
            Recipe(
                "LoRA r8, lr 3e-3, 20 ep x 64",
                ("--mode", "dp-sgd", "--epochs", epochs(20), "--batch-size", "64", "--learning-rate", "3e-3")
                + ("--peft", "lora", "--lora-rank", "8"),
            ),
        ),
        eval_rows="400",
        search_eval_rows="1000",
    )


def search(task: Task, root: Path, real: Path, names: list[str] | None, search_default: bool) -> Recipe:
    """Train every candidate at epsilon 8 on the pseudo split; return the best by pseudo-held-out figure."""
    pseudo = pseudo_directory(real, root, int(task.search_eval_rows))
    base = ("--data", str(pseudo), "--seed", "0", *task.common, "--eval-examples", task.search_eval_rows)
    start = train(root / "pseudo-public", *base, *task.public)
    nonprivate = figure(train(root / "pseudo-nonprivate", *base, "--init-from", str(start), *task.nonprivate))
    candidates = [*([task.default] if search_default else []), *task.candidates]
    if names:
        candidates = [c for c in candidates if c.name in names] or candidates
    scored = []
    for recipe in candidates:
        run = train(
            root / f"pseudo-dp-{slug(recipe.name)}",
            *base,
            "--init-from",
            str(start),
            "--target-epsilon",
            EPSILON,
            "--noise-seed",
            "0",
            *recipe.args,
        )
        scored.append((recipe, figure(run)))
    start_value = scored[0][1].start
    print(
        f"\nsearch ({task.name}, PUBLIC rows only: pseudo-private {sum(1 for _ in read_jsonl(pseudo / 'train.jsonl'))} rows, "
        f"{task.search_eval_rows} pseudo-held-out), epsilon {EPSILON}, one seed each"
    )
    print(f"  {'recipe':<34} {'held-out':>9} {'- start':>8} {'x non-private':>14}")
    print(f"  {'pseudo start':<34} {start_value if start_value is not None else float('nan'):>9.2%}")
    print(f"  {'non-private from it':<34} {nonprivate.value:>9.2%}")
    for recipe, fig in scored:
        margin = fig.value - fig.start if fig.start is not None else float("nan")
        print(f"  {recipe.name:<34} {fig.value:>9.2%} {margin:>+8.2%} {fig.value / nonprivate.value:>14.2f}")
    best = max(scored, key=lambda item: item[1].value)[0]
    print(f"  chosen: {best.name}")
    return best


def real_runs(task: Task, root: Path, real: Path, recipe: Recipe, seeds: int, default_seeds: int) -> None:
    base = ("--data", str(real), *task.common, "--eval-examples", task.eval_rows)
    start = train(root / "real-public", *base, "--seed", "0", *task.public)
    nonprivate = figure(
        train(root / "real-nonprivate", *base, "--seed", "0", "--init-from", str(start), *task.nonprivate)
    )

    def dp(tag: str, chosen: Recipe, n: int) -> list[Figure]:
        # --seed 0 for every run (the held-out masks, and so the start's figure, are the non-private model's); the
        # seeds vary what DP randomizes: the Poisson sampling and the noise (--noise-seed).
        return [
            figure(
                train(
                    root / f"real-dp-{slug(chosen.name)}-noise{s}",
                    *base,
                    "--seed",
                    "0",
                    "--noise-seed",
                    str(1000 + s),
                    "--init-from",
                    str(start),
                    "--target-epsilon",
                    EPSILON,
                    *chosen.args,
                )
            )
            for s in range(n)
        ]

    chosen = dp("chosen", recipe, seeds)
    default = dp("default", task.default, default_seeds) if recipe != task.default and default_seeds else []
    start_fig = figure(start)
    baseline = nonprivate.baseline
    print(f"\nreal data ({task.name}), epsilon {EPSILON}; uptime: {os.getloadavg()}")
    print(f"  {'model':<40} {'held-out':>9} {'start (same rows)':>18} {'- start':>8} {'x non-private':>14}")
    print(
        f"  {'trivial baseline (most frequent token)':<40} {baseline if baseline is not None else float('nan'):>9.2%}"
    )
    print(f"  {'public start (its own eval)':<40} {start_fig.value:>9.2%}")
    print(f"  {'non-private from the start':<40} {nonprivate.value:>9.2%} {'':>18} {'':>8} {1.0:>14.2f}")
    for label, figs, rec in (("chosen", chosen, recipe), ("demo default", default, task.default)):
        for s, fig in enumerate(figs):
            margin = fig.value - fig.start if fig.start is not None else float("nan")
            name = f"DP {label} noise seed {s} ({rec.name})"
            print(
                f"  {name:<40} {fig.value:>9.2%} {fig.start or float('nan'):>18.2%} {margin:>+8.2%} "
                f"{fig.value / nonprivate.value:>14.2f}"
            )
        if not figs:
            continue
        values = [f.value for f in figs]
        margins = [f.value - f.start for f in figs if f.start is not None]
        mean, spread = statistics.fmean(values), max(values) - min(values)
        mean_margin = statistics.fmean(margins) if margins else float("nan")
        print(
            f"  DP {label}: mean {mean:.2%}, spread (max - min) {spread:.2%}, mean margin above the start "
            f"{mean_margin:+.2%} ({'exceeds' if mean_margin > spread else 'does NOT exceed'} the spread; every seed "
            f"{'above' if margins and min(margins) > 0 else 'NOT above'} its start), {mean / nonprivate.value:.2f}x "
            f"non-private (goal >= 0.85: {'met' if mean / nonprivate.value >= 0.85 else 'not met'})"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["mlm", "clm"], default="mlm")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--seeds", type=int, default=3, help="Seeds of the chosen recipe on the real data.")
    parser.add_argument("--default-seeds", type=int, default=0, help="Seeds of the demo's recipe on the real data.")
    parser.add_argument("--search-default", action="store_true", help="Also try the demo's recipe in the search.")
    parser.add_argument("--only", action="append", default=None, help="Search only these candidates (by name).")
    parser.add_argument("--search-only", action="store_true", help="Stop after the public search.")
    parser.add_argument("--smoke", action="store_true", help="Tiny sizes: a check that the script runs.")
    args = parser.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-dp-recipe-"))
    root.mkdir(parents=True, exist_ok=True)
    task = (mlm_task if args.task == "mlm" else clm_task)(args.smoke)
    real = root / "data"
    if not (real / "manifest.json").is_file():
        dpaudit("inject", *task.inject, "--out", str(real), "--seed", "0", "--overwrite")
    print(f"uptime at start: {os.getloadavg()}", flush=True)
    recipe = search(task, root, real, args.only, args.search_default)
    if not args.search_only:
        real_runs(task, root, real, recipe, args.seeds, args.default_seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
