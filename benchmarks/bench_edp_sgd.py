"""Time per epoch of sgd, dp-sgd and eDP-SGD in the edp-sgd trainer, and of Opacus DP-SGD (Dupuy et al. Table 2).

Reproduces the shape of Table 2 of Dupuy et al. 2021 on their BERT (``--preset mini``: 4 layers,
hidden 312, 12 heads, intermediate 1200) for intent classification on SNIPS and for masked-LM on
the same utterances. Every mode runs the trainer's own step (``_Run.step``: Poisson sampling,
clipping, noise, Adam) on the same data; the steps of all modes are interleaved round-robin so that
load drift on a shared machine hits them alike, and the ratios to sgd are measured in one run.

Time per epoch = median step time x steps per epoch (ceil(N / batch)); by default only ``--steps``
steps per mode are timed (after ``--warmup``), not whole epochs: the table says so.

Opacus 1.6 DP-SGD (hooks, ``GradSampleModule`` + ``DPOptimizer``, Adam) runs on a copy of the same
model with the same batches and the same per-example loss (for MLM: the head applied at the masked
positions only, as the trainer does). Fixes it needs on transformers 5.23: the MLM head's
``cls.predictions.bias`` duplicate of ``decoder.bias`` is removed (DESIGN section 9); the model is put
in train() mode with dropout p = 0 (Opacus captures activations only in training mode; the trainer
trains without dropout); position and token-type ids are passed as [B, L] tensors (HF's [1, L]
default buffers give the per-sample embedding hooks a batch of 1).

SNIPS is read from ``--snips DIR`` (train.tsv, ``text<TAB>label``), never copied into the project;
an inject directory is written under a temporary folder.

Example:
    python benchmarks/bench_edp_sgd.py --snips ../shared/data/snips --steps 8 --tasks classify,mlm
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


def make_inject_dir(snips: Path, root: Path) -> Path:
    from click.testing import CliRunner

    from dpaudit.cli import cli

    out = root / "data"
    result = CliRunner().invoke(cli, ["inject", "--corpus", str(snips / "train.tsv"), "--out", str(out), "--seed", "0",
                                      "--frequencies", "1,2", "--per-frequency", "1"], catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(result.output)
    return out


def build_run(data: Path, root: Path, **options):
    from trainers.edp_sgd.config import EdpSgdConfig
    from trainers.edp_sgd.trainer import _Run

    config = EdpSgdConfig(**options)
    run = _Run(data, root / f"out-{options['mode']}-{options['task']}", config, seed=0)
    run._setup()
    return run


class OpacusStep:
    """Opacus DP-SGD on a copy of ``run``'s model, fed the trainer's batches."""

    def __init__(self, run, *, noise_multiplier: float, clip_norm: float, batch_size: int) -> None:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        from trainers.edp_sgd.model import per_example_losses

        model = copy.deepcopy(run.model).train()  # Opacus captures activations only in training mode ...
        for module in model.modules():  # ... and the trainer trains without dropout: make train() the same
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        cls = getattr(model, "cls", None)
        if cls is not None and "bias" in cls.predictions._parameters:  # DESIGN section 9 fix
            del cls.predictions._parameters["bias"]
        self.run, self.loss_fn = run, per_example_losses
        self.module = GradSampleModule(model, loss_reduction="sum")
        self.optimizer = DPOptimizer(torch.optim.Adam(self.module.parameters(), lr=1e-3), noise_multiplier=noise_multiplier,
                                     max_grad_norm=clip_norm, expected_batch_size=batch_size, loss_reduction="sum")

    def step(self, step: int, indices: np.ndarray) -> None:
        gen = torch.Generator().manual_seed(step)
        batch = self.run._batch("train", indices, generator=gen)
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
    return {**kwargs, "position_ids": torch.arange(ids.shape[1]).expand_as(ids).contiguous(),
            "token_type_ids": torch.zeros_like(ids)}


class _Encoder:
    def __init__(self, encoder) -> None:
        self.encoder = encoder

    def __call__(self, **kwargs):
        return self.encoder(**_explicit_ids(kwargs))


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
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's default).")
    parser.add_argument("--no-opacus", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_edp_sgd.") as tmp:
        root = Path(tmp)
        data = make_inject_dir(args.snips, root)
        for task in args.tasks.split(","):
            common = dict(task=task, preset=args.preset, batch_size=args.batch_size, micro_batches=args.micro_batches,
                          max_length=args.max_length, epochs=1, eval_examples=0, noise_seed=1,
                          physical_batch=args.batch_size)
            runs = {"sgd": build_run(data, root, mode="sgd", **common)}
            for mode in ("dp-sgd", "edp-sgd"):
                runs[mode] = build_run(data, root, mode=mode, noise_multiplier=1.0, clip_norm=1.0, **common)
            steppers = {mode: run.step for mode, run in runs.items()}
            if not args.no_opacus:
                steppers["opacus dp-sgd"] = OpacusStep(runs["dp-sgd"], noise_multiplier=1.0, clip_norm=1.0,
                                                       batch_size=args.batch_size).step
            times: dict[str, list[float]] = {mode: [] for mode in steppers}
            sampler = runs["sgd"]
            for step in range(args.warmup + args.steps):
                indices = sampler._sample(step)
                for mode, fn in steppers.items():
                    start = time.perf_counter()
                    fn(step, indices)
                    if step >= args.warmup:
                        times[mode].append(time.perf_counter() - start)
                print(f"[{task}] step {step + 1}/{args.warmup + args.steps}", file=sys.stderr)
            plan = sampler.plan
            base = statistics.median(times["sgd"])
            for mode, ts in times.items():
                med = statistics.median(ts)
                results.append({"task": task, "mode": mode, "median_step_s": med,
                                "epoch_s_estimate": med * plan.steps_per_epoch, "ratio_to_sgd": med / base,
                                "timed_steps": len(ts), "steps_per_epoch": plan.steps_per_epoch,
                                "dataset_size": plan.dataset_size})
            if "opacus dp-sgd" in times:
                speedup = statistics.median(times["opacus dp-sgd"]) / statistics.median(times["dp-sgd"])
                results.append({"task": task, "mode": "dp-sgd speed-up over opacus", "ratio": speedup})
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"edp-sgd trainer, preset {args.preset}, batch {args.batch_size}, k = {args.micro_batches} micro-batches, "
          f"max length {args.max_length}, threads {torch.get_num_threads()}; epoch time = median of {args.steps} timed "
          f"steps x steps per epoch (not whole epochs)")
    print(f"{'task':9} {'mode':16} {'step s':>8} {'epoch s (est.)':>15} {'x sgd':>7}")
    for r in results:
        if "ratio_to_sgd" in r:
            print(f"{r['task']:9} {r['mode']:16} {r['median_step_s']:8.3f} {r['epoch_s_estimate']:15.1f} "
                  f"{r['ratio_to_sgd']:7.2f}")
        else:
            print(f"{r['task']:9} {r['mode']:30} {r['ratio']:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
