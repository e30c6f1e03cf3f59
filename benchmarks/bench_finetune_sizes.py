"""DP step / non-private step at the sizes people fine-tune: ``bert-base``, ``gpt2-small``, ``llama-100m``, full and LoRA.

For each ``--presets`` entry (``bert-base``: ``--task classify``; ``gpt2-small`` and ``llama-100m``: ``--task clm``),
four configurations of the edp-sgd trainer, each in its OWN subprocess (so that its peak resident memory,
``getrusage`` maxrss, is its own):

- ``full sgd``: every parameter trained, no clipping, no noise (AdamW);
- ``full dp``: ``--mode dp-sgd --clip-engine ghost``: each example clipped to C, secret Gaussian noise, AdamW;
- ``lora sgd`` / ``lora dp``: the same over ``--peft lora`` adapters (rank ``--rank``, peft's default targets; a
  classifier also trains its head and pooler).

Each child builds the run (``_Plugin._setup``: tokenizer, model, engines), takes ``--warmup`` steps, then times
``--steps`` steps of the trainer's own step (batch building, clipped sum, noise, AdamW) at batch ``--batch`` over
rows of exactly ``--max-length`` (128) tokens (the built-in assistant corpus, rows joined until they are longer), and
prints the median wall and process CPU time per step and its maxrss. The tokenizer is the trainer's WordPiece learned
on public.jsonl, padded with unused whole-word tokens to the family's vocabulary (30,522 / 50,257 / 32,000) so that the
embedding and output layers have the sizes people fine-tune (a small public corpus alone stops at a few thousand).

The DP / non-private ratio divides the medians of two children run one after the other (memory must be measured
apart): on a shared machine the load moves between them, so the CPU-time ratio is printed beside the wall ratio and
``uptime`` before and after. docs/trainers.md, "LoRA adapters".

The DP children also time the clipped sum (the ghost engine's ``clipped_sum``) and the noise (``noised_total``: the
secret Gaussian draw of every trained coordinate, added in place) inside their steps ("clip cpu", "noise cpu").

The trainers run a batch in passes of about 1 GiB of estimated activations (``trainers.torch_common.pass_size``: 5
examples of 128 tokens for gpt2-small); ``--one-pass`` runs each batch in one pass, the former default. Measured one
after the other (load 0.9-1.9): gpt2-small full at batch 32, dp-sgd 43.3 CPU s and 4,994 MiB in passes, 45.5 s and
12,737 MiB in one pass (non-private 41.0 and 51.3 s); at batch 8, 12.0 and 11.3 s; llama-100m at batch 32, 37.5 s and
4,612 MiB against 39.3 s and 10,958 MiB (README, "DP fine-tuning with LoRA").

Example (one preset and one of full / lora per invocation stays within ~8 minutes on 2 shared cores at load ~10):
    OMP_NUM_THREADS=2 nice -n 10 python benchmarks/bench_finetune_sizes.py --presets bert-base --runs lora
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The task and the family's vocabulary size of each preset.
PRESETS = {"bert-base": ("classify", 30522), "gpt2-small": ("clm", 50257), "llama-100m": ("clm", 32000)}
CONFIGS = (("full", "sgd"), ("full", "dp-sgd"), ("lora", "sgd"), ("lora", "dp-sgd"))


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_long_data(root: Path, rows: int, words: int) -> Path:
    """An inject directory whose texts are built-in assistant rows joined until each has ``words`` words or more
    (every row then fills the 128-token window), labelled by their first row."""
    from click.testing import CliRunner

    from dpaudit.cli import cli

    def inject(args: list[str]) -> None:
        result = CliRunner().invoke(cli, ["inject", *args, "--seed", "0"], catch_exceptions=False)
        if result.exit_code != 0:
            raise SystemExit(result.output)

    short = root / "short"
    inject(["--corpus", "builtin:assistant", "--corpus-size", "2000", "--public-size", "2000", "--out", str(short)])
    pool = [
        json.loads(line) for name in ("train", "public") for line in (short / f"{name}.jsonl").read_text().splitlines()
    ]
    rng = random.Random(0)
    corpus = root / "long.jsonl"
    with corpus.open("w", encoding="utf-8") as out:
        for _ in range(rows):
            first = rng.choice(pool)
            parts = [first["text"]]
            while sum(len(p.split()) for p in parts) < words:
                parts.append(rng.choice(pool)["text"])
            row = {"text": " ".join(parts)}
            if "label" in first:
                row["label"] = first["label"]
            out.write(json.dumps(row) + "\n")
    data = root / "data"
    inject(
        ["--corpus", str(corpus), "--public-size", str(rows // 2), "--heldout-size", "16", "--no-canaries"]
        + ["--out", str(data)]
    )
    return data


def _fillers(count: int) -> list[str]:
    """``count`` lowercase whole words no English text contains (``qzq`` + letters)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = []
    i = 0
    while len(out) < count:
        n, word = i, ""
        for _ in range(4):
            n, r = divmod(n, 26)
            word = letters[r] + word
        out.append("qzq" + word)
        i += 1
    return out


def child(spec: dict) -> dict:
    """One configuration: build, warm up, time; returns its figures (printed as one JSON line by ``--child``)."""
    import numpy as np
    import torch

    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import _Plugin
    from dpaudit.trainers.torch_common import loop
    from dpaudit.training.tokenizer import train_wordpiece

    vocab = spec["vocab"]

    def padded(texts, *, vocab_size, new_tokens=()):  # the family's vocabulary size (see the module docstring)
        texts = list(texts)
        learned = train_wordpiece(texts, vocab_size=vocab_size, new_tokens=new_tokens)
        extra = _fillers(vocab - learned.get_vocab_size())
        return train_wordpiece(texts, vocab_size=vocab_size, new_tokens=(*new_tokens, *extra))

    loop.train_wordpiece = padded
    if spec.get("one_pass"):  # the former default: the whole batch in one forward and backward pass
        from dpaudit.trainers.torch_common import pass_size

        pass_size.PASS_BYTES = 1 << 62
    options = dict(
        task=spec["task"],
        preset=spec["preset"],
        vocab_size=vocab,
        max_length=spec["max_length"],
        batch_size=spec["batch"],
        epochs=1,
        eval_examples=0,
        learning_rate=1e-4,
        checkpoint_every=10**6,
        mode=spec["mode"],
    )
    if spec["mode"] != "sgd":
        options.update(clip_engine="ghost", noise_multiplier=1.0, noise_seed=1, physical_batch=spec["batch"])
    if spec["peft"] == "lora":
        options.update(peft="lora", lora_rank=spec["rank"])
    start = time.perf_counter()
    run = _Plugin(Path(spec["data"]), Path(spec["out"]), EdpSgdConfig(**options), seed=0)
    run._setup()
    setup_s = time.perf_counter() - start
    rss_setup = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    parts = {"clip": [0.0, 0.0], "noise": [0.0, 0.0]}  # wall, cpu inside the clipped sum and the noise, all steps

    def timed(fn, part):
        def wrapper(*a, **kw):
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                parts[part][0] += time.perf_counter() - t0
                parts[part][1] += time.process_time() - c0

        return wrapper

    from dpaudit.trainers.edp_sgd import trainer as edp_trainer

    edp_trainer.noised_total = timed(edp_trainer.noised_total, "noise")
    if run.ghost is not None:
        run.ghost.clipped_sum = timed(run.ghost.clipped_sum, "clip")
    elif run.clipper is not None:
        run.clipper.clipped_sum = timed(run.clipper.clipped_sum, "clip")
    n = len(run.data.train.texts)
    rng = np.random.default_rng(0)
    batches = [rng.choice(n, size=spec["batch"], replace=False) for _ in range(spec["warmup"] + spec["steps"])]
    widths = {int(run.encoded["train"].batch(b)[0].shape[1]) for b in batches}
    wall, cpu = [], []
    for i, b in enumerate(batches):
        if i == spec["warmup"]:
            parts = {k: [0.0, 0.0] for k in parts}  # timed steps only
        t0, c0 = time.perf_counter(), time.process_time()
        run.step(i, b)
        if i >= spec["warmup"]:
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    per_step = {f"{k}_cpu": v[1] / spec["steps"] for k, v in parts.items()}
    return {
        "wall": statistics.median(wall),
        "cpu": statistics.median(cpu),
        "setup_s": setup_s,
        "maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "setup_rss_mib": rss_setup / 1024,
        "trained": sum(p.numel() for p in run.params),
        "total": sum(p.numel() for p in run.model.parameters()),
        "engine": "ghost" if run.ghost is not None else ("vmap" if spec["mode"] != "sgd" else "-"),
        "widths": sorted(widths),
        "threads": torch.get_num_threads(),
        **per_step,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="bert-base", help=f"comma-separated: {', '.join(PRESETS)}")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--rows", type=int, default=400, help="long rows (half train, half public)")
    parser.add_argument("--runs", default="full,lora", help="which of full, lora (each measured with and without DP)")
    parser.add_argument(
        "--budget-s", type=float, default=450, help="start no configuration after this many seconds (printed)"
    )
    parser.add_argument(
        "--one-pass",
        action="store_true",
        help="run each batch in one forward and backward pass (the former default) instead of trainers.torch_common."
        "pass_size's passes",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))), flush=True)
        return 0
    print(f"command: python {' '.join(sys.argv)}")
    print(f"before: {uptime()}")
    results: dict[tuple[str, str, str], dict] = {}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = make_long_data(root, args.rows, words=2 * args.max_length)
        for preset in args.presets.split(","):
            task, vocab = PRESETS[preset]
            for peft, mode in CONFIGS:
                if peft not in args.runs.split(","):
                    continue
                if time.perf_counter() - began > args.budget_s:
                    print(f"  {preset} {peft} {mode}: not run (past --budget-s {args.budget_s:g})", flush=True)
                    continue
                spec = dict(
                    preset=preset,
                    task=task,
                    vocab=vocab,
                    peft=peft,
                    mode=mode,
                    data=str(data),
                    out=str(root / f"{preset}-{peft}-{mode}"),
                    batch=args.batch,
                    max_length=args.max_length,
                    rank=args.rank,
                    steps=args.steps,
                    warmup=args.warmup,
                    one_pass=args.one_pass,
                )
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, check=False
                )
                if proc.returncode != 0:
                    print(proc.stderr[-3000:])
                    raise SystemExit(f"{preset} {peft} {mode} failed")
                results[(preset, peft, mode)] = r = json.loads(proc.stdout.strip().splitlines()[-1])
                print(
                    f"  {preset} {peft} {mode}: {1e3 * r['wall']:.0f} ms/step wall, {1e3 * r['cpu']:.0f} ms cpu, "
                    f"maxrss {r['maxrss_mib']:.0f} MiB ({uptime()})",
                    flush=True,
                )
    print(
        f"\nedp-sgd, batch {args.batch}, {args.max_length} tokens per row, LoRA rank {args.rank}; dp = --mode dp-sgd "
        f"(per-example clipping, noise); median of {args.steps} steps after {args.warmup} warm-up, one process per row"
    )
    header = f"{'preset':10} {'run':4} {'mode':6} {'engine':6} {'trained':>12} {'of':>12} {'s/step':>7} {'cpu s':>7}"
    print(header + f" {'clip cpu':>8} {'noise cpu':>9} {'maxrss MiB':>10} {'after setup':>11}")
    for (preset, peft, mode), r in results.items():
        print(
            f"{preset:10} {peft:4} {mode:6} {r['engine']:6} {r['trained']:12,d} {r['total']:12,d} {r['wall']:7.2f} "
            f"{r['cpu']:7.2f} {r['clip_cpu']:8.2f} {r['noise_cpu']:9.2f} {r['maxrss_mib']:10.0f} "
            f"{r['setup_rss_mib']:11.0f}"
        )
    print()
    for preset in args.presets.split(","):
        for peft, goal in (("full", 1.25), ("lora", 1.15)):
            if (preset, peft, "dp-sgd") not in results or (preset, peft, "sgd") not in results:
                continue
            dp, sgd = results[(preset, peft, "dp-sgd")], results[(preset, peft, "sgd")]
            print(
                f"{preset} {peft}: dp / non-private = {dp['wall'] / sgd['wall']:.2f}x wall, "
                f"{dp['cpu'] / sgd['cpu']:.2f}x cpu (goal <= {goal}x); peak memory {dp['maxrss_mib'] / sgd['maxrss_mib']:.2f}x"
            )
    print(f"after: {uptime()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
