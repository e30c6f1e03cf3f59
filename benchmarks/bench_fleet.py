"""Model fleets (dpaudit.fleet.fleet): throughput of 1 and 2 workers per engine, peak memory, and 64 shadows.

Each model is the demo's intent classifier (``dpaudit demo``'s ``clf-edp-sgd`` recipe: edp-sgd trainer,
edp-sgd mode at epsilon 8, tiny preset, 3 epochs of batch 32, max length 32, the built-in intents) on
an inject directory of the demo's classifier size (1,000 utterances, 3,000 public), each with its own
seed: the cost of one LiRA shadow trained like the target (same rows, same steps). Not started from
the demo's public classifier (``--init-from``): the same architecture and steps, so the same cost.

For each engine (inline: one after the other in the driver, as before the fleet; process: a spawn
process per model; ray: a Ray task per model on a local instance started for the run) and each worker
count, a fresh driver process trains ``--models`` new models and prints:

- throughput, models per minute of wall time, engine start-up included (a local Ray instance takes
  seconds to start), and its ratio to the same engine with 1 worker and to inline;
- warm throughput: ``workers`` over the median wall time of a model trained by a worker that had already
  trained one (the jobs after the first ``workers``, which go to fresh workers): what a long fleet, such
  as 64 shadows, runs at once its workers are up, and the figure the 2-worker goal is about;
- the largest peak RSS of a worker process (MiB; for inline, the driver's, which trains) and the
  driver's own peak RSS.

``--shadows 64`` instead trains 64 such models with ``--workers`` (default 2) and prints the total
time: the goal, "64 LiRA shadows of the demo's classifier in under 10 minutes on 2 cores".

Usage: python benchmarks/bench_fleet.py [--models 4] [--engines inline,process,ray] [--workers 1,2]
       python benchmarks/bench_fleet.py --shadows 64 [--workers 2] [--engine auto]
The machine's load (``uptime``) is printed before and after: on a shared machine it bounds the ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")


def demo_classifier_config() -> dict:
    """The demo's edp-sgd classifier at epsilon 8 (dpaudit/demo/plan.py: FULL sizes, CLASSIFIER_MODES)."""
    from dpaudit.corpus.assistant import INTENTS
    from dpaudit.demo.plan import FULL, TARGET_EPSILON
    from dpaudit.training.api import load_trainer

    trainer = load_trainer("edp-sgd")
    config = trainer.Config(
        mode="edp-sgd",
        task="classify",
        preset="tiny",
        max_length=FULL.max_length,
        epochs=FULL.classifier_epochs,
        batch_size=FULL.classifier_batch_size,
        learning_rate=FULL.learning_rate,
        labels=",".join(i.name for i in INTENTS),
        target_epsilon=TARGET_EPSILON,
    )
    return dataclasses.asdict(config)


def inject(work: Path) -> Path:
    """The demo's classifier inject directory (FULL sizes), made once under ``work``."""
    from dpaudit.demo.plan import FULL

    data = work / "data"
    if not (data / "manifest.json").is_file():
        subprocess.run(
            [
                sys.executable,
                "-m",
                "dpaudit",
                "inject",
                "--corpus",
                "builtin:assistant",
                "--corpus-size",
                str(FULL.classifier_corpus_size),
                "--out",
                str(data),
                "--seed",
                "0",
                "--format",
                FULL.secret_format,
                "--frequencies",
                ",".join(map(str, FULL.classifier_frequencies)),
                "--per-frequency",
                str(FULL.per_frequency),
                "--public-size",
                str(FULL.classifier_public_size),
                "--overwrite",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return data


def one(work: Path, engine: str, workers: int, models: int, seed0: int, progress: bool) -> dict:
    """Train ``models`` new models in this process's fleet; the figures as a dict."""
    from dpaudit.fleet.fleet import FleetJob, run_fleet

    data = inject(work)
    config = demo_classifier_config()
    out = Path(tempfile.mkdtemp(prefix=f"{engine}-{workers}-", dir=work))
    jobs = [
        FleetJob(
            trainer="edp-sgd",
            config=config,
            data_dir=data,
            out_dir=out / f"m{i}",
            seed=seed0 + i,
            label=f"model {i + 1}/{models}",
        )
        for i in range(models)
    ]
    t0 = time.monotonic()
    outcomes = run_fleet(jobs, workers=workers, engine=engine, progress=progress, desc="models")
    wall = time.monotonic() - t0
    assert len(outcomes) == models and not any(o.cached for o in outcomes)
    return {
        "engine": engine,
        "workers": workers,
        "models": models,
        "wall_s": wall,
        "per_model_s": [round(o.seconds, 1) for o in outcomes],
        "worker_peak_rss_mb": max(o.peak_rss_mb or 0 for o in outcomes),
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def warm_rate(row: dict) -> float:
    """Models per minute of ``row``'s workers once started: workers / median time of a model after the first ones."""
    import statistics

    warm = row["per_model_s"][row["workers"] :] or row["per_model_s"]
    return 60 * row["workers"] / statistics.median(warm)


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=4)
    parser.add_argument("--engines", default="inline,process,ray")
    parser.add_argument("--workers", default=None, help="worker counts (default 1,2; with --shadows, 2)")
    parser.add_argument("--shadows", type=int, default=0, help="train this many models with --workers and time it")
    parser.add_argument("--engine", default="auto", help="the engine of --shadows")
    parser.add_argument("--work", type=Path, default=None, help="working directory (default: a new temporary one)")
    parser.add_argument("--one", nargs=3, metavar=("ENGINE", "WORKERS", "SEED0"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    work.mkdir(parents=True, exist_ok=True)

    if args.one:  # a child: one configuration in a fresh driver
        engine, workers, seed0 = args.one[0], int(args.one[1]), int(args.one[2])
        print(json.dumps(one(work, engine, workers, args.models, seed0, progress=False)))
        return

    print(f"load before: {uptime()}")
    inject(work)
    if args.shadows:
        workers = int(args.workers or 2)
        t0 = time.monotonic()
        result = one(work, args.engine, workers, args.shadows, 1000, progress=True)
        print(
            f"{args.shadows} demo-classifier shadows, engine {args.engine}, {workers} workers: "
            f"{(time.monotonic() - t0) / 60:.2f} min wall ({result['wall_s'] / 60:.2f} min in run_fleet); "
            f"worker peak RSS {result['worker_peak_rss_mb']:.0f} MiB, driver {result['driver_peak_rss_mb']:.0f} MiB"
        )
        print(f"load after: {uptime()}")
        return

    rows = []
    for engine in args.engines.split(","):
        for workers in [int(w) for w in (args.workers or "1,2").split(",")]:
            if engine == "inline" and workers > 1:
                continue  # inline is one worker by definition
            seed0 = 100 * len(rows)
            proc = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--work",
                    str(work),
                    "--models",
                    str(args.models),
                    "--one",
                    engine,
                    str(workers),
                    str(seed0),
                ],
                capture_output=True,
                text=True,
            )
            if proc.returncode:
                sys.exit(f"{engine} x{workers} failed:\n{proc.stderr[-3000:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(f"  {engine} x{workers}: {row['wall_s']:.1f} s ({uptime()})", flush=True)
    base = {r["engine"]: r for r in rows if r["workers"] == 1}
    inline = base.get("inline")
    print(f"\n{args.models} new demo-classifier models per configuration (edp-sgd, epsilon 8, 3 epochs of 1,010 rows)")
    print(
        f"{'engine':8} {'workers':>7} {'wall s':>7} {'models/min':>10} {'vs 1 worker':>11} {'vs inline':>9} "
        f"{'warm models/min':>15} {'vs 1 worker':>11} {'worker RSS MiB':>14} {'driver RSS MiB':>14}"
    )
    for r in rows:
        rate = 60 * r["models"] / r["wall_s"]
        own = base.get(r["engine"])
        vs_one = rate / (60 * own["models"] / own["wall_s"]) if own else float("nan")
        vs_inline = rate / (60 * inline["models"] / inline["wall_s"]) if inline else float("nan")
        warm = warm_rate(r)
        warm_one = warm / warm_rate(own) if own else float("nan")
        print(
            f"{r['engine']:8} {r['workers']:>7} {r['wall_s']:>7.1f} {rate:>10.2f} {vs_one:>10.2f}x {vs_inline:>8.2f}x "
            f"{warm:>15.2f} {warm_one:>10.2f}x {r['worker_peak_rss_mb']:>14.0f} {r['driver_peak_rss_mb']:>14.0f}"
        )
    print(f"load after: {uptime()}")


if __name__ == "__main__":
    main()
