"""SNIPS intent accuracy from a real pretrained encoder (MiniLM) against dpaudit's own public start, private and not.

Reads SNIPS (``--snips``, ``train.tsv``) and the MiniLM encoder (``--minilm``: all-MiniLM-L6-v2's ``BertModel``, 6 x
384, WordPiece 30,522) in place; neither is copied anywhere but a temporary folder's inject split. The corpus is a
fixed draw (``--seed 0``) of ``--train-size + --public-size + --heldout-size`` rows of ``train.tsv``, split by
``dpaudit inject`` (10 digit canaries inserted once, 10 never), so that every run stays a few minutes on 2 shared
cores. Starts (``--starts``):

- ``dpaudit``: the edp-sgd ``tiny`` classifier trained non-privately on public.jsonl (``--data-split public
  --non-private``, its WordPiece learned on public.jsonl): dpaudit's own public start;
- ``minilm``: ``--init-from`` MiniLM itself: its encoder, a fresh classification head (MiniLM has none; the trainer
  says so in one line), its own tokenizer;
- ``minilm-public``: MiniLM fine-tuned non-privately on public.jsonl first (a trained head: the public start a
  practitioner would make from it).

From each start: ``--mode sgd`` (non-private), ``--mode dp-sgd`` at each ``--epsilons``, and with ``--lora`` the same
at epsilon 8 over LoRA adapters (rank 8; the head trained in full), with ``--edp`` edp-sgd at epsilon 8. Every
private run evaluates its start on the same held-out rows before its first step (``start_eval``): the start's own
accuracy is printed beside, with the trivial baseline (majority class of the evaluated rows) and the ratio to the
non-private run from the same start. Learning rates are fixed in advance from the literature (not searched on the
private rows, which would itself be a release): 2e-3 for the tiny model and for LoRA adapters, 5e-4 for full
fine-tuning of the pretrained encoder (Li et al. 2022 use 5e-4 for full DP fine-tuning with Adam).

Example (one start per invocation stays under ~8 minutes on 2 shared cores):
    nice -n 10 python benchmarks/bench_pretrained_start.py --snips ../shared/data/snips \\
        --minilm ../shared/models/minilm-l6-h384 --starts minilm
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def dpaudit(*args: str) -> float:
    """Run ``dpaudit ARGS``; the wall seconds it took."""
    print("$ dpaudit " + shlex.join(args), flush=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dpaudit", *args], check=False, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(done.returncode)
    return time.perf_counter() - start


def summary(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text(encoding="utf-8"))["summary"]


def make_data(root: Path, args: argparse.Namespace) -> Path:
    lines = (args.snips / "train.tsv").read_text(encoding="utf-8").splitlines()
    header, rows = lines[0], sorted(set(lines[1:]))
    random.Random(0).shuffle(rows)
    corpus = root / "snips-draw.tsv"
    corpus.write_text(
        "\n".join([header, *rows[: args.train_size + args.public_size + args.heldout_size]]) + "\n", encoding="utf-8"
    )
    data = root / "data"
    dpaudit(
        "inject",
        "--corpus",
        str(corpus),
        "--public-size",
        str(args.public_size),
        "--heldout-size",
        str(args.heldout_size),
        "--frequencies",
        "1",
        "--per-frequency",
        "10",
        "--format",
        "digits:4",
        "--out",
        str(data),
        "--seed",
        "0",
    )
    return data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snips", type=Path, required=True, help="folder with SNIPS train.tsv (read in place)")
    parser.add_argument("--minilm", type=Path, required=True, help="the MiniLM encoder directory (read in place)")
    parser.add_argument("--starts", default="minilm", help="comma-separated: dpaudit, minilm, minilm-public")
    parser.add_argument("--epsilons", default="1,4,8")
    parser.add_argument("--lora", action="store_true", help="also LoRA adapters at epsilon 8")
    parser.add_argument("--edp", action="store_true", help="also edp-sgd at epsilon 8")
    parser.add_argument("--no-sgd", action="store_true", help="skip the non-private run")
    parser.add_argument("--train-size", type=int, default=1000)
    parser.add_argument("--public-size", type=int, default=1000)
    parser.add_argument("--heldout-size", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=24)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    print(f"command: python {' '.join(sys.argv)}")
    print("before: " + subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-pretrained-"))
    root.mkdir(parents=True, exist_ok=True)
    data = make_data(root, args)
    common = ["train", "--trainer", "edp-sgd", "--task", "classify", "--data", str(data), "--seed", "0"]
    common += ["--max-length", str(args.max_length), "--eval-examples", str(args.heldout_size)]
    schedule = ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
    rows: list[tuple[str, str, Path, float]] = []
    for start in args.starts.split(","):
        if start == "dpaudit":
            origin = root / "dpaudit-public"
            seconds = dpaudit(
                *common, "--preset", "tiny", "--out", str(origin), "--data-split", "public", "--non-private",
                "--epochs", "2", "--batch-size", "32", "--learning-rate", "3e-3",
            )  # fmt: skip
            rows.append((start, "public start (sgd on public.jsonl)", origin, seconds))
            full_lr = "2e-3"
        elif start == "minilm-public":
            origin = root / "minilm-public"
            seconds = dpaudit(
                *common, "--init-from", str(args.minilm), "--out", str(origin), "--data-split", "public",
                "--non-private", "--epochs", "2", "--batch-size", "32", "--learning-rate", "2e-4",
            )  # fmt: skip
            rows.append((start, "public start (sgd on public.jsonl)", origin, seconds))
            full_lr = "5e-4"
        elif start == "minilm":
            origin, full_lr = args.minilm, "5e-4"
        else:
            raise SystemExit(f"--starts: unknown start {start!r}")
        runs: list[tuple[str, list[str]]] = []
        if not args.no_sgd:
            runs.append(("sgd", ["--mode", "sgd", "--learning-rate", full_lr]))
        for eps in filter(None, args.epsilons.split(",")):
            runs.append(
                (f"dp-sgd eps {eps}", ["--mode", "dp-sgd", "--target-epsilon", eps, "--learning-rate", full_lr])
            )
        if args.edp:
            runs.append(("edp-sgd eps 8", ["--mode", "edp-sgd", "--target-epsilon", "8", "--learning-rate", full_lr]))
        if args.lora:
            runs.append(
                (
                    "LoRA dp-sgd eps 8",
                    ["--mode", "dp-sgd", "--target-epsilon", "8", "--peft", "lora", "--learning-rate", "2e-3"],
                )
            )
        for name, extra in runs:
            out = root / f"{start}-{name.replace(' ', '-')}"
            seconds = dpaudit(*common, *schedule, "--init-from", str(origin), "--out", str(out), *extra)
            rows.append((start, name, out, seconds))
            s = summary(out)
            print(f"  -> {s.get('eval_accuracy'):.4f} (start {(s.get('start_eval') or {}).get('eval_accuracy')})")
    records = [
        json.loads(p.read_text(encoding="utf-8")) for *_, out, _ in rows if (p := out / "privacy.json").is_file()
    ]
    deltas = sorted({repr(r["delta"]) for r in records if r.get("private")})  # as the runs state it, never rounded
    print(
        f"\nSNIPS intent classification (edp-sgd trainer): {args.train_size} private rows (+10 canary rows), "
        f"{args.public_size} public, {args.heldout_size} held-out evaluated; batch {args.batch_size}, "
        f"{args.epochs} epochs, max length {args.max_length}; delta {' / '.join(deltas) or '-'} (add/remove, N public)"
    )
    print(f"  {'start':<14} {'run':<36} {'held-out':>9} {'baseline':>9} {'start acc':>9} {'x sgd':>6} {'wall s':>7}")
    reference: dict[str, float] = {}
    for start, name, out, seconds in rows:
        s = summary(out)
        acc, base = s.get("eval_accuracy"), s.get("heldout_accuracy_baseline")
        before = (s.get("start_eval") or {}).get("eval_accuracy")
        if name == "sgd":
            reference[start] = acc
        ratio = f"{acc / reference[start]:.2f}" if start in reference and name != "sgd" else ""
        print(
            f"  {start:<14} {name:<36} {acc:>9.1%} {base:>9.1%} "
            f"{(f'{before:.1%}' if before is not None else '-'):>9} {ratio:>6} {seconds:>7.0f}"
        )
    print("after: " + subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
