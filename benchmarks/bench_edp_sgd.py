"""Time per epoch of sgd, dp-sgd and eDP-SGD in the edp-sgd trainer, and of Opacus DP-SGD (Dupuy et al. Table 2).

Reproduces the shape of Table 2 of Dupuy et al. 2021 on their BERT (``--preset mini``: 4 layers,
hidden 312, 12 heads, intermediate 1200) for intent classification on SNIPS and for masked-LM on
the same utterances. Every mode runs the trainer's own step (``_Plugin.step``: Poisson sampling,
clipping, noise, Adam) on the same batches (the sampling is keyed by the same noise seed), each mode
in its own fresh process, one after the other, in one invocation: modes interleaved in one process
fragmented each other's heap and made the per-example step 3x slower than it is in a training run.
The trainer applies its allocator tuning (:mod:`dpaudit.training.host_allocator`) in sgd, dp-sgd and edp-sgd.

Time per epoch = median step time x steps per epoch (ceil(N / batch)); by default only ``--steps``
steps per mode are timed (after ``--warmup``), not whole epochs: the table says so. Each mode is
measured in ``--rounds`` fresh processes (order alternating between rounds) and the fastest round
kept, which damps load spikes on a shared machine.

Opacus 1.6 DP-SGD (hooks, ``GradSampleModule`` + ``DPOptimizer``, Adam) runs on a copy of the same
model, twice: ``opacus`` in a process with glibc's defaults (what an Opacus user gets) and
``opacus-tuned`` with the trainer's allocator tuning (a comparison that favours Opacus).
It runs
model with the same batches and the same per-example loss (for MLM: the head applied at the masked
positions only, as the trainer does). Fixes it needs on transformers 5.23: the MLM head's
``cls.predictions.bias`` duplicate of ``decoder.bias`` is removed (measured on a 2-core CPU); the model is put
in train() mode with dropout p = 0 (Opacus captures activations only in training mode; the trainer
trains without dropout); position and token-type ids are passed as [B, L] tensors (HF's [1, L]
default buffers give the per-sample embedding hooks a batch of 1).

SNIPS is read from ``--snips DIR`` (train.tsv, ``text<TAB>label``), never copied into the project;
an inject directory is written under a temporary folder.

``--interleaved`` also times the modes step by step in one process, with a diagnostic beside them:
edp-sgd with its noise draw left out, which separates the clipping's cost from the draw's (one
Gaussian per parameter per step, which every DP mode pays whatever its clipping).

Each worker also reports the median process CPU time per step (on a shared machine wall time
includes other users' load; CPU time mostly does not). ``--device cuda`` times the trainer (and Opacus)
on a GPU, synchronizing after each step; ``--clip-engine vmap`` times the materialized per-example
clippers instead of the ghost/book-keeping one.

Example:
    python benchmarks/bench_edp_sgd.py --snips PATH/TO/snips --steps 8 --tasks classify,mlm [--device cuda]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def make_inject_dir(snips: Path, root: Path, *, frequencies: str = "1,2") -> Path:
    """``dpaudit inject`` of SNIPS ``train.tsv`` (read in place) into ``root/data``: one canary per frequency."""
    from click.testing import CliRunner

    from dpaudit.cli import cli

    out = root / "data"
    result = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            str(snips / "train.tsv"),
            "--out",
            str(out),
            "--seed",
            "0",
            "--frequencies",
            frequencies,
            "--per-frequency",
            "1",
        ],
        catch_exceptions=False,
    )
    if result.exit_code != 0:
        raise SystemExit(result.output)
    return out


def build_run(data: Path, root: Path, **options):
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import _Plugin

    config = EdpSgdConfig(**options)
    run = _Plugin(data, root / f"out-{options['mode']}-{options['task']}", config, seed=0)
    run._setup()
    return run


class OpacusStep:
    """Opacus DP-SGD on a copy of ``run``'s model, fed the trainer's batches."""

    def __init__(self, run, *, noise_multiplier: float, clip_norm: float, batch_size: int) -> None:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        from dpaudit.trainers.torch_common.model import per_example_losses

        model = copy.deepcopy(run.model).train()  # Opacus captures activations only in training mode ...
        for module in model.modules():  # ... and the trainer trains without dropout: make train() the same
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        cls = getattr(model, "cls", None)
        if cls is not None and "bias" in cls.predictions._parameters:  # the Opacus shared-bias fix
            del cls.predictions._parameters["bias"]
        self.run, self.loss_fn = run, per_example_losses
        self.module = GradSampleModule(model, loss_reduction="sum")
        self.optimizer = DPOptimizer(
            torch.optim.Adam(self.module.parameters(), lr=1e-3),
            noise_multiplier=noise_multiplier,
            max_grad_norm=clip_norm,
            expected_batch_size=batch_size,
            loss_reduction="sum",
        )

    def step(self, step: int, indices: np.ndarray) -> None:
        gen = torch.Generator().manual_seed(step)
        batch = self.run._on_device(self.run._batch("train", indices, generator=gen))
        self.optimizer.zero_grad(set_to_none=True)
        losses, _ = self.loss_fn(_Forward(self.module), batch)
        losses.sum().backward()
        self.optimizer.step()


class _Forward:
    """Calls the GradSampleModule (so its hooks run) where the loss function expects the HF model."""

    def __init__(self, gsm) -> None:
        self.gsm = gsm
        self.base_model_prefix = gsm._module.base_model_prefix
        self.cls = getattr(gsm._module, "cls", None)
        setattr(self, self.base_model_prefix, _Encoder(getattr(gsm._module, self.base_model_prefix)))

    def __call__(self, **kwargs):
        return self.gsm(**_explicit_ids(kwargs))


def _explicit_ids(kwargs):
    """Explicit [B, L] position and token-type ids: HF's default [1, L] buffers would give Opacus's
    per-sample embedding hooks a batch of 1."""
    ids = kwargs["input_ids"]
    return {
        **kwargs,
        "position_ids": torch.arange(ids.shape[1], device=ids.device).expand_as(ids).contiguous(),
        "token_type_ids": torch.zeros_like(ids),
    }


class _Encoder:
    def __init__(self, encoder) -> None:
        self.encoder = encoder

    def __call__(self, **kwargs):
        return self.encoder(**_explicit_ids(kwargs))


MODES = ("sgd", "dp-sgd", "edp-sgd", "opacus", "opacus-tuned")


def time_in_fresh_process(args: argparse.Namespace, data: Path, task: str, mode: str) -> tuple[float, float]:
    """Median step time of ``mode`` measured in a fresh interpreter (one mode per process: modes
    interleaved in one process fragmented each other's heap and tripled the per-example step)."""
    import subprocess

    cmd = [
        sys.executable,
        __file__,
        "--snips",
        str(args.snips),
        "--worker",
        mode,
        "--worker-data",
        str(data),
        "--tasks",
        task,
        "--preset",
        args.preset,
        "--batch-size",
        str(args.batch_size),
        "--micro-batches",
        str(args.micro_batches),
        "--max-length",
        str(args.max_length),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--device",
        args.device,
        "--clip-engine",
        args.clip_engine,
    ]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {mode} worker failed:\n{done.stderr[-3000:]}")
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)  # median wall and process-CPU seconds per step


def worker(args: argparse.Namespace) -> int:
    """Times one mode on the trainer's batches (keyed by the same noise seed in every worker)."""
    import dpaudit.trainers.torch_common.loop as trainer_module  # the loop that calls tune_host_allocator

    mode = args.worker
    if mode == "opacus":  # the environment an Opacus user gets: glibc defaults
        trainer_module.tune_host_allocator = lambda: False
    elif mode == "opacus-tuned":  # Opacus with the trainer's allocator tuning (a conservative comparison)
        from dpaudit.training.host_allocator import tune_host_allocator

        tune_host_allocator()
    data = Path(args.worker_data)
    with tempfile.TemporaryDirectory(prefix="bench_edp_sgd_worker.") as tmp:
        options = _common(args, args.tasks)
        if mode == "sgd":
            run = build_run(data, Path(tmp), mode="sgd", **options)
            step = run.step
        else:
            trainer_mode = "edp-sgd" if mode == "edp-sgd" else "dp-sgd"
            run = build_run(data, Path(tmp), mode=trainer_mode, noise_multiplier=1.0, clip_norm=1.0, **options)
            step = run.step
            if mode.startswith("opacus"):
                step = OpacusStep(run, noise_multiplier=1.0, clip_norm=1.0, batch_size=args.batch_size).step
        times, cpu_times = [], []
        cuda = run.device.type == "cuda"
        for i in range(args.warmup + args.steps):
            indices = run._sample(i)
            start, cpu_start = time.perf_counter(), time.process_time()
            step(i, indices)
            if cuda:
                torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
                cpu_times.append(time.process_time() - cpu_start)
        print(f"{len(run.data.train.texts)} {run.steps_per_epoch}")
    print(statistics.median(times), statistics.median(cpu_times))
    return 0


#: The interleaved diagnostic: edp-sgd with its noise draw left out (same clipping, same plumbing).
NO_NOISE = "edp-sgd, no noise draw (diagnostic)"


def _without_noise(real: type):
    """``trainers.edp_sgd.trainer.StepNoise`` with no draws, for the diagnostic run only: the step adds
    zeros. It shows the clipping's share of a step apart from the noise draw's (a draw of one Gaussian
    per parameter that every DP mode pays whatever its clipping); not a mode of the trainer."""

    def step_noise(like, draws, seed, private):  # StepNoise's signature
        return real(like, [], seed, private)

    return step_noise


def interleaved(args: argparse.Namespace, data: Path, task: str) -> dict[str, tuple[float, float, float]]:
    """sgd, dp-sgd, edp-sgd and the no-noise diagnostic in ONE process, step by step in rotating order
    on the same batches: median wall and CPU seconds per step, and the median over steps of the step's
    wall time over sgd's in the same round (load spikes on a shared machine then hit every mode alike;
    the ghost clippers allocate no large per-example buffers, so the modes do not fragment each
    other's heap the way the vmap clippers did)."""
    import dpaudit.trainers.edp_sgd.trainer as trainer_module

    real = trainer_module.StepNoise
    with tempfile.TemporaryDirectory(prefix="bench_edp_sgd_inter.") as tmp:
        options = _common(args, task)
        runs = {"sgd": build_run(data, Path(tmp), mode="sgd", **options)}
        for name, mode in (("dp-sgd", "dp-sgd"), ("edp-sgd", "edp-sgd"), (NO_NOISE, "edp-sgd")):
            runs[name] = build_run(data, Path(tmp), mode=mode, noise_multiplier=1.0, clip_norm=1.0, **options)
        cuda = runs["sgd"].device.type == "cuda"
        times: dict[str, list[tuple[float, float]]] = {mode: [] for mode in runs}
        modes = list(runs)
        try:
            for i in range(args.warmup + args.steps):
                order = modes[i % len(modes) :] + modes[: i % len(modes)]
                for mode in order:
                    run = runs[mode]
                    trainer_module.StepNoise = _without_noise(real) if mode == NO_NOISE else real
                    indices = run._sample(i)
                    start, cpu_start = time.perf_counter(), time.process_time()
                    run.step(i, indices)
                    if cuda:
                        torch.cuda.synchronize()
                    if i >= args.warmup:
                        times[mode].append((time.perf_counter() - start, time.process_time() - cpu_start))
        finally:
            trainer_module.StepNoise = real
    sgd = [w for w, _ in times["sgd"]]
    return {
        mode: (
            statistics.median(w for w, _ in v),
            statistics.median(c for _, c in v),
            statistics.median(w / base for (w, _), base in zip(v, sgd)),
        )
        for mode, v in times.items()
    }


def _common(args: argparse.Namespace, task: str) -> dict:
    return dict(
        task=task,
        preset=args.preset,
        batch_size=args.batch_size,
        micro_batches=args.micro_batches,
        max_length=args.max_length,
        epochs=1,
        eval_examples=0,
        noise_seed=1,
        physical_batch=args.batch_size,
        device=args.device,
        clip_engine=args.clip_engine,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snips", type=Path, required=True, help="Folder with SNIPS train.tsv (text<TAB>label).")
    parser.add_argument("--tasks", default="classify,mlm")
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=8, help="Timed steps per mode (after --warmup).")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="Fresh-process measurements per mode, in alternating order; the fastest is kept.",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default).")
    parser.add_argument("--no-opacus", action="store_true")
    parser.add_argument(
        "--interleaved",
        action="store_true",
        help="Also time sgd, dp-sgd, edp-sgd and edp-sgd without its noise draw (a diagnostic) interleaved "
        "step by step in one process; their 'x sgd' is the median of per-round ratios.",
    )
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="The trainer's --device (Opacus runs on the same device).",
    )
    parser.add_argument(
        "--clip-engine",
        choices=("ghost", "vmap"),
        default="ghost",
        help="The trainer's --clip-engine for dp-sgd and edp-sgd.",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", choices=MODES, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-data", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        return worker(args)
    results = []
    modes = [m for m in MODES if not (args.no_opacus and m.startswith("opacus"))]
    with tempfile.TemporaryDirectory(prefix="bench_edp_sgd.") as tmp:
        data = make_inject_dir(args.snips, Path(tmp))
        n = sum(1 for _ in open(data / "train.jsonl", encoding="utf-8"))
        per_epoch = math.ceil(n / args.batch_size)
        for task in args.tasks.split(","):
            rounds: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
            for r in range(args.rounds):  # alternate the order so load drift does not favour one mode
                for mode in modes if r % 2 == 0 else modes[::-1]:
                    rounds[mode].append(time_in_fresh_process(args, data, task, mode))
                    print(
                        f"[{task}] round {r + 1} {mode}: {rounds[mode][-1][0]:.3f} s/step "
                        f"(cpu {rounds[mode][-1][1]:.3f} s)",
                        file=sys.stderr,
                    )
            best = {mode: min(values) for mode, values in rounds.items()}  # least-disturbed round (by wall time)
            times = {mode: wall for mode, (wall, _) in best.items()}
            for mode, (med, cpu) in best.items():
                results.append(
                    {
                        "task": task,
                        "mode": mode,
                        "median_step_s": med,
                        "epoch_s_estimate": med * per_epoch,
                        "ratio_to_sgd": med / times["sgd"],
                        "cpu_step_s": cpu,
                        "cpu_ratio_to_sgd": cpu / best["sgd"][1],
                        "timed_steps": args.steps,
                        "steps_per_epoch": per_epoch,
                        "dataset_size": n,
                    }
                )
            if args.interleaved:
                inter = interleaved(args, data, task)
                for mode, (wall, cpu, ratio) in inter.items():
                    results.append(
                        {
                            "task": task,
                            "mode": f"{mode} (interleaved)",
                            "median_step_s": wall,
                            "epoch_s_estimate": wall * per_epoch,
                            "ratio_to_sgd": ratio,
                            "cpu_step_s": cpu,
                            "cpu_ratio_to_sgd": cpu / inter["sgd"][1],
                            "timed_steps": args.steps,
                            "steps_per_epoch": per_epoch,
                            "dataset_size": n,
                        }
                    )
            for ref in ("opacus", "opacus-tuned"):
                if ref in times:
                    results.append(
                        {"task": task, "mode": f"dp-sgd speed-up over {ref}", "ratio": times[ref] / times["dp-sgd"]}
                    )
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"edp-sgd trainer, preset {args.preset}, batch {args.batch_size}, k = {args.micro_batches} micro-batches, "
        f"device {args.device}, clip engine {args.clip_engine}, "
        f"max length {args.max_length}, threads {torch.get_num_threads()}; epoch time = median of {args.steps} timed "
        f"steps (best of {args.rounds} fresh-process rounds) x steps per epoch (not whole epochs)"
    )
    print(f"{'task':9} {'mode':50} {'step s':>8} {'epoch s (est.)':>15} {'x sgd':>7} {'cpu s':>7} {'cpu x sgd':>9}")
    for r in results:
        if "ratio_to_sgd" in r:
            print(
                f"{r['task']:9} {r['mode']:50} {r['median_step_s']:8.3f} {r['epoch_s_estimate']:15.1f} "
                f"{r['ratio_to_sgd']:7.2f} {r['cpu_step_s']:7.3f} {r['cpu_ratio_to_sgd']:9.2f}"
            )
        else:
            print(f"{r['task']:9} {r['mode']:72} {r['ratio']:5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
