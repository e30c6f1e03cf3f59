"""Peak memory and examples/s of RGP (a few ranks) vs DP-SGD at the same batch (Yu et al. 2021, Table 1 in miniature).

Both run the trainers' own steps on the same Poisson-sampled batches of an inject run of SNIPS
(``--snips DIR`` holding ``train.tsv``): DP-SGD is the ``edp-sgd`` trainer in ``--mode dp-sgd``, twice:
``dp-sgd-vmap`` materializes the per-example gradients of every parameter by ``torch.func.vmap`` (one
chunk of the whole batch: the textbook DP-SGD that Yu et al. compare with, and the baseline of the
ratios), ``dp-sgd-ghost`` is the trainer's default engine (per-example norms from activations and
output gradients, no per-example gradient is formed: Li et al. 2022, Bu et al. 2023). RGP
is the ``rgp`` trainer (per-example carrier gradients, memory O(m r d)). Each mode runs in a fresh
process: set up, ``--warmup`` untimed steps, then ``--steps`` timed steps. Reported per mode:

- examples/s: realized examples of the timed steps / their wall time (and / their CPU time of the
  process, which the load of other users inflates less on a shared machine);
- peak MB: the process's peak resident memory during the steps (warm-up and timed) above its
  resident memory once set up (Linux ``/proc/self/status`` VmHWM, reset through
  ``/proc/self/clear_refs``): per-example gradients, activations, optimizer state;
- per-example floats: the size of one example's gradient that the method materializes (all trainable
  parameters for DP-SGD; sum over matrices of r (p + d) plus the non-matrix parameters for RGP);

and the ratios to DP-SGD. Run: python benchmarks/bench_rgp.py --snips PATH/TO/snips [--preset mini]
[--batch-size 32] [--ranks 1,4,16] [--steps 4] [--threads 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _status(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return float(line.split()[1]) / 1024.0  # kB -> MB
    return float("nan")


def worker(args: argparse.Namespace) -> int:
    """One mode in this process; prints one JSON line."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    common = {
        "task": args.task,
        "preset": args.preset,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "epochs": 1,
        "eval_examples": 0,
        "noise_seed": 1,
        "noise_multiplier": 1.0,
        "clip_norm": 1.0,
    }
    with tempfile.TemporaryDirectory(prefix="bench_rgp_worker.") as tmp:
        if args.worker.startswith("dp-sgd"):
            from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
            from dpaudit.trainers.edp_sgd.trainer import _Plugin as EdpRun

            engine = args.worker.split("-")[-1]
            run = EdpRun(
                Path(args.worker_data),
                Path(tmp) / "out",
                EdpSgdConfig(mode="dp-sgd", physical_batch=args.batch_size, clip_engine=engine, **common),
                seed=0,
            )
            run._setup()
            # The ghost engine forms no per-example gradient (norms only): 0 materialized floats.
            per_example = sum(p.numel() for p in run.params) if engine == "vmap" else 0
        else:
            from dpaudit.trainers.rgp.config import RgpConfig
            from dpaudit.trainers.rgp.trainer import _Plugin as RgpRun

            rank = int(args.worker.split("-r")[1])
            run = RgpRun(
                Path(args.worker_data),
                Path(tmp) / "out",
                RgpConfig(rank=rank, physical_batch=args.batch_size, warmup_steps=0, **common),
                seed=0,
            )
            run._setup()
            k = len(run.reparam.matrices)
            per_example = sum(min(rank, *w.shape) * sum(w.shape) for w in run.reparam.matrices)
            per_example += sum(p.numel() for p in run.reparam.params[k:])
        # Measured from the set-up model on: the first step's buffers stay mapped afterwards (the
        # trainer's allocator tuning), so a later baseline would hide them.
        before = _status("VmRSS")
        try:
            Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        except OSError:
            pass
        for i in range(args.warmup):
            run.step(i, run._sample(i))
        examples, wall, cpu = 0, 0.0, 0.0
        for i in range(args.warmup, args.warmup + args.steps):
            indices = run._sample(i)
            start, start_cpu = time.perf_counter(), time.process_time()
            run.step(i, indices)
            wall += time.perf_counter() - start
            cpu += time.process_time() - start_cpu
            examples += len(indices)
        peak = _status("VmHWM") - before
    print(
        json.dumps(
            {
                "mode": args.worker,
                "examples": examples,
                "wall_s": wall,
                "cpu_s": cpu,
                "peak_mb": peak,
                "per_example_floats": per_example,
            }
        )
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snips", type=Path, required=True, help="Folder with SNIPS train.tsv (text<TAB>label).")
    parser.add_argument("--task", default="classify", choices=["classify", "mlm"])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--ranks", default="1,4,16", help="RGP ranks to measure (comma-separated).")
    parser.add_argument("--steps", type=int, default=4, help="Timed steps per mode (after --warmup).")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch.set_num_threads in each worker (0 = torch's default)."
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-data", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args)
    if not (args.snips / "train.tsv").is_file():
        raise SystemExit(f"--snips {args.snips}: no train.tsv there.")
    modes = ["dp-sgd-vmap", "dp-sgd-ghost"] + [f"rgp-r{int(r)}" for r in args.ranks.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_rgp.") as tmp:
        # A sibling script: run as `python benchmarks/bench_rgp.py`, benchmarks/ is on sys.path.
        from bench_edp_sgd import make_inject_dir

        data = make_inject_dir(args.snips, Path(tmp), frequencies="1")
        for mode in modes:
            cmd = [
                sys.executable,
                __file__,
                "--snips",
                str(args.snips),
                "--worker",
                mode,
                "--worker-data",
                str(data),
                "--task",
                args.task,
                "--preset",
                args.preset,
                "--batch-size",
                str(args.batch_size),
                "--max-length",
                str(args.max_length),
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
                "--threads",
                str(args.threads),
            ]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"the {mode} worker failed:\n{done.stderr[-3000:]}")
            results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = results[0]
    for r in results:
        r["examples_per_s"] = r["examples"] / r["wall_s"]
        r["examples_per_cpu_s"] = r["examples"] / r["cpu_s"]
        r["speedup_vs_dp_sgd"] = r["examples_per_s"] / (base["examples"] / base["wall_s"])
        r["cpu_speedup_vs_dp_sgd"] = r["examples_per_cpu_s"] / (base["examples"] / base["cpu_s"])
        r["peak_ratio_to_dp_sgd"] = r["peak_mb"] / base["peak_mb"] if base["peak_mb"] > 0 else float("nan")
        r["per_example_ratio_to_dp_sgd"] = r["per_example_floats"] / base["per_example_floats"]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"preset {args.preset}, task {args.task}, batch {args.batch_size}, max length {args.max_length}, "
        f"{args.steps} timed steps, {args.threads or 'default'} torch thread(s)"
    )
    print(
        f"{'mode':>10} {'ex/s':>8} {'ex/cpu-s':>9} {'x dp-sgd':>9} {'x cpu':>7} {'peak MB':>8} {'x peak':>7} "
        f"{'per-ex floats':>14} {'x floats':>9}"
    )
    for r in results:
        print(
            f"{r['mode']:>10} {r['examples_per_s']:>8.1f} {r['examples_per_cpu_s']:>9.1f} {r['speedup_vs_dp_sgd']:>9.2f} "
            f"{r['cpu_speedup_vs_dp_sgd']:>7.2f} {r['peak_mb']:>8.0f} {r['peak_ratio_to_dp_sgd']:>7.3f} "
            f"{r['per_example_floats']:>14,} {r['per_example_ratio_to_dp_sgd']:>9.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
