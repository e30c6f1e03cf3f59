"""One DP step of LoRA (``--peft lora``) against full fine-tuning, edp-sgd ``--mode dp-sgd --clip-engine ghost``.

For each BERT preset (default ``tiny`` 2 x 64 and ``small`` 4 x 512) two runs of the edp-sgd trainer are built in
ONE process from the same weights (both from ``--seed 0``) on the built-in assistant corpus (``dpaudit inject
--corpus builtin:assistant``, written to a temporary folder), same task, batches and clip norm:

- ``full``: every parameter trained, each example clipped to C by the ghost engine, noise, AdamW;
- ``lora``: ``--peft lora`` (rank ``--rank``, peft's default targets query and value, plus the classifier head
  and pooler in ``--task classify``): the same step over the adapters only.

Both take the trainer's own step (``_Plugin.step``: batch building, clipped sum, secret Gaussian noise, AdamW),
timed in rounds, interleaved step by step (order rotating) after ``--warmup`` steps each; the median wall and
process CPU time per step, the trained parameter counts and the ratio lora / full are printed, with ``uptime``
before and after (the figures mean something only on a quiet machine). docs/trainers.md, "LoRA adapters".

Example:
    OMP_NUM_THREADS=2 python benchmarks/bench_lora.py --presets tiny,small --steps 8 --rounds 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_clm_step import make_inject_dir  # noqa: E402  (the same inject folder as the other step benchmarks)


def build_run(data: Path, root: Path, name: str, **options):
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import _Plugin

    config = EdpSgdConfig(**options)
    run = _Plugin(data, root / name, config, seed=0)
    run._setup()
    assert run.ghost is not None, run.ghost_refused
    return run


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def time_size(preset: str, data: Path, root: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    common = dict(
        task=args.task,
        preset=preset,
        max_length=args.max_length,
        batch_size=args.batch,
        epochs=1,
        eval_examples=0,
        learning_rate=1e-3,
        checkpoint_every=10**6,
        mode="dp-sgd",
        clip_engine="ghost",
        noise_multiplier=1.0,
        noise_seed=1,
    )
    runs = {
        "full": build_run(data, root, f"{preset}-full", **common),
        "lora": build_run(data, root, f"{preset}-lora", peft="lora", lora_rank=args.rank, **common),
    }
    n = len(runs["full"].data.train.texts)
    rng = np.random.default_rng(0)
    batches = [rng.choice(n, size=args.batch, replace=False) for _ in range(args.warmup + args.steps)]
    wall: dict[str, list[float]] = {m: [] for m in runs}
    cpu: dict[str, list[float]] = {m: [] for m in runs}
    names = list(runs)
    for r in range(args.rounds):
        for name in names:
            for i in range(args.warmup):
                runs[name].step(i, batches[i])
        for i in range(args.warmup, args.warmup + args.steps):
            order = names[(i + r) % len(names) :] + names[: (i + r) % len(names)]
            for name in order:
                start, cpu_start = time.perf_counter(), time.process_time()
                runs[name].step(i, batches[i])
                wall[name].append(time.perf_counter() - start)
                cpu[name].append(time.process_time() - cpu_start)
    out: dict[str, dict[str, float]] = {}
    for name, run in runs.items():
        out[name] = {
            "wall": statistics.median(wall[name]),
            "cpu": statistics.median(cpu[name]),
            "trained": sum(p.numel() for p in run.params),
            "total": sum(p.numel() for p in run.model.parameters()),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="tiny,small")
    parser.add_argument("--task", default="classify", choices=["classify", "mlm"])
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=2000, help="corpus rows (train and public)")
    args = parser.parse_args(argv)
    print(f"command: python {' '.join(sys.argv)}")
    print(f"before: {uptime()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_inject_dir(root, args.rows)
        for preset in args.presets.split(","):
            results[preset] = time_size(preset, data, root, args)
    print(
        f"\nedp-sgd --mode dp-sgd --clip-engine ghost, --task {args.task}, batch {args.batch}, max length "
        f"{args.max_length}, LoRA rank {args.rank}; median of {args.rounds} rounds x {args.steps} steps"
    )
    print(f"{'preset':7} {'run':5} {'trained':>11} {'of':>11} {'wall ms/step':>13} {'cpu ms/step':>12}")
    for preset, rows in results.items():
        for name, r in rows.items():
            print(
                f"{preset:7} {name:5} {int(r['trained']):11,d} {int(r['total']):11,d} {1e3 * r['wall']:13.1f} "
                f"{1e3 * r['cpu']:12.1f}"
            )
    print()
    for preset, rows in results.items():
        lora, full = rows["lora"], rows["full"]
        print(
            f"{preset}: lora / full = {lora['wall'] / full['wall']:.2f}x wall, {lora['cpu'] / full['cpu']:.2f}x cpu; "
            f"trained parameters {lora['trained'] / full['trained']:.4f}x"
        )
    print(f"after: {uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
