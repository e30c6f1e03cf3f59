"""One step of causal-LM training (``--task clm``): non-private, dp-sgd (ghost engine) and Opacus 1.6, one process.

The goal: on the ``mini`` GPT-2 preset (4 layers, width 256, 4 heads) at batch 32 on CPU, the
dp-sgd step costs <= 1.1x the non-private step, and Opacus DP-SGD on the same ``GPT2LMHeadModel`` costs
>= 2x ours. All three run in ONE process on the same model weights and the same fixed batches of 32 rows
of the built-in assistant corpus (``dpaudit inject --corpus builtin:assistant``, written to a temporary
folder), with the same loss (:func:`trainers.torch_common.model.causal_losses`: mean next-token NLL):

- ``sgd``: the edp-sgd trainer's own step (``_Plugin.step``) in ``--mode sgd``: one backward pass, AdamW;
- ``dp-sgd``: the trainer's own step in ``--mode dp-sgd --clip-engine ghost``: each example clipped to C
  by the ghost/book-keeping engine (one backward pass, :mod:`trainers.torch_common.clipping.ghost`), the
  secret Gaussian noise drawn and added, AdamW (``--clip-engine vmap`` times the vmap clipper instead);
- ``opacus``: Opacus 1.6 ``GradSampleModule`` (grad_sample_mode "hooks") + ``DPOptimizer`` (Adam) on a copy
  of the same model in train() mode (dropout is 0 in the preset), position ids passed as [B, T] (GPT-2's
  [1, T] default gives the per-sample hooks of ``wpe`` a batch of one). transformers' ``Conv1D`` has no
  Opacus grad sampler: Opacus computes its per-sample gradients by its functorch fallback, as any user gets.

The modes are timed in rounds, interleaved step by step (order rotating), after ``--warmup`` steps each;
the median wall time and process CPU time per step are printed with the ratios, and ``uptime`` before
and after (the figures mean something only on a quiet machine).

Example:
    OMP_NUM_THREADS=2 python benchmarks/bench_clm_step.py --steps 10 --rounds 3
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import torch


def make_inject_dir(root: Path, rows: int) -> Path:
    from click.testing import CliRunner

    from dpaudit.cli import cli

    out = root / "data"
    result = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            str(rows),
            "--public-size",
            str(rows),
            "--out",
            str(out),
            "--seed",
            "0",
            "--frequencies",
            "1,2",
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

    config = EdpSgdConfig(task="clm", **options)
    run = _Plugin(data, root / f"out-{options['mode']}", config, seed=0)
    run._setup()
    return run


class OpacusStep:
    """Opacus DP-SGD (hooks) on a copy of ``run``'s GPT-2, fed the trainer's batches and loss."""

    def __init__(self, run, *, noise_multiplier: float, clip_norm: float, batch_size: int) -> None:
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer

        model = copy.deepcopy(run.model).train()  # Opacus captures activations only in training mode
        self.run = run
        self.module = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        self.optimizer = DPOptimizer(
            torch.optim.Adam(self.module.parameters(), lr=1e-3),
            noise_multiplier=noise_multiplier,
            max_grad_norm=clip_norm,
            expected_batch_size=batch_size,
            loss_reduction="sum",
        )

    def step(self, step: int, indices: np.ndarray) -> None:
        del step
        from dpaudit.trainers.torch_common.model import causal_losses

        batch = self.run._on_device(self.run._batch("train", indices, generator=None))
        b, t = batch["input_ids"].shape
        positions = torch.arange(t).expand(b, t)  # [B, T]: the position lookup's per-sample hook needs B rows
        self.optimizer.zero_grad(set_to_none=True)
        losses, _ = causal_losses(lambda **kw: self.module(**kw, position_ids=positions), batch)
        losses.sum().backward()
        self.optimizer.step()


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per mode per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=2000, help="corpus rows (train and public)")
    parser.add_argument("--clip-engine", default="ghost", choices=["ghost", "vmap"])
    parser.add_argument("--no-opacus", action="store_true")
    args = parser.parse_args(argv)
    print(f"before: {uptime()}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    common = dict(
        preset=args.preset,
        max_length=args.max_length,
        batch_size=args.batch,
        epochs=1,
        eval_examples=0,
        learning_rate=1e-3,
        checkpoint_every=10**6,
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_inject_dir(root, args.rows)
        sgd = build_run(data, root, mode="sgd", **common)
        dp = build_run(
            data, root, mode="dp-sgd", noise_multiplier=1.0, clip_engine=args.clip_engine, noise_seed=1, **common
        )
        assert args.clip_engine != "ghost" or dp.ghost is not None, dp.ghost_refused
        dp.model.load_state_dict(sgd.model.state_dict())  # the same weights (both from --seed 0 anyway)
        steppers = {"sgd": sgd.step, "dp-sgd": dp.step}
        if not args.no_opacus:
            steppers["opacus"] = OpacusStep(dp, noise_multiplier=1.0, clip_norm=1.0, batch_size=args.batch).step
        n = len(sgd.data.train.texts)
        params = sum(p.numel() for p in sgd.params)
        lengths = sgd.encoded["train"].lengths.float()
        print(
            f"{args.preset} GPT-2: {params / 1e6:.2f}M parameters, vocabulary {sgd.vocab_size}, {n} rows of mean "
            f"{float(lengths.mean()):.1f} tokens (max {args.max_length}), batch {args.batch}, engine {args.clip_engine}"
        )
        rng = np.random.default_rng(0)
        batches = [rng.choice(n, size=args.batch, replace=False) for _ in range(args.warmup + args.steps)]
        wall: dict[str, list[float]] = {m: [] for m in steppers}
        cpu: dict[str, list[float]] = {m: [] for m in steppers}
        names = list(steppers)
        for r in range(args.rounds):
            for mode in names:
                for i in range(args.warmup):
                    steppers[mode](i, batches[i])
            for i in range(args.warmup, args.warmup + args.steps):
                order = names[(i + r) % len(names) :] + names[: (i + r) % len(names)]
                for mode in order:
                    start, cpu_start = time.perf_counter(), time.process_time()
                    steppers[mode](i, batches[i])
                    wall[mode].append(time.perf_counter() - start)
                    cpu[mode].append(time.process_time() - cpu_start)
    med = {m: statistics.median(v) for m, v in wall.items()}
    med_cpu = {m: statistics.median(v) for m, v in cpu.items()}
    print(f"\n{'mode':8} {'wall ms/step':>13} {'cpu ms/step':>12}   ({args.rounds} rounds x {args.steps} steps)")
    for mode in names:
        print(f"{mode:8} {1e3 * med[mode]:13.1f} {1e3 * med_cpu[mode]:12.1f}")
    print(
        f"\ndp-sgd / sgd: {med['dp-sgd'] / med['sgd']:.2f}x wall, {med_cpu['dp-sgd'] / med_cpu['sgd']:.2f}x cpu "
        "(goal <= 1.1x)"
    )
    if "opacus" in med:
        print(
            f"opacus / dp-sgd: {med['opacus'] / med['dp-sgd']:.2f}x wall, "
            f"{med_cpu['opacus'] / med_cpu['dp-sgd']:.2f}x cpu (goal >= 2x)"
        )
    print(f"after: {uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
