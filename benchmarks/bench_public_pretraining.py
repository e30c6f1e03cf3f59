"""Benchmark: public pretraining, then private training: each model's held-out accuracy beside its
trivial baseline and beside the non-private model trained from the same start.

Everything runs through the ``dpaudit`` commands the demo types (each printed before it runs): ``inject`` with a
public split (``--public-size``), a public model (``train --data-split public --non-private``), then the
non-private and the epsilon-8 models ``--init-from`` it. Goals, at epsilon 8: the DP MLM's held-out
MLM accuracy >= 0.8x the non-private model's from the same start; the dp-sgd intent classifier >= 0.9x sgd's.

Usage:
    python benchmarks/bench_public_pretraining.py [--task mlm|classify|both] [--quick] [--workdir DIR]
        [--dp-learning-rate LR] [--public-steps N] [--snips PATH/TO/snips]

``--snips DIR`` reads SNIPS ``train.tsv`` (``text<TAB>label``) in place, never copied into the project: its rows
are split by ``dpaudit inject`` into public (``--public-size``, e.g. 6000), private members and held-out rows.

Measured on the demo's data (2-core CPU shared with other engineers, load 3-4; tiny preset; seed 0; OS-entropy
noise; one run each). MLM: ``inject --corpus builtin:assistant --corpus-size 3000 --public-size 20000`` (2,700
private members + 1,110 canary rows, 300 held-out, 20,000 public utterances), every jax-bert run ``--preset tiny
--batch-size 64 --max-length 32 --weight-decay 0 --mask-prob 0.3 --eval-examples 512``, 1,000 steps. Classifier:
``inject --corpus-size 1000 --frequencies 1,10 --public-size 5000`` (900 members + 110 canary rows, 100 held-out),
edp-sgd ``--task classify --preset tiny --max-length 32 --batch-size 32 --labels <the corpus intents>``, 3 epochs::

    jax-bert MLM                      start    lr     held-out  baseline  x non-private  train wall s
    public (public.jsonl, 1000 steps) random   3e-3   55.7%     6.3%      -              82
    non-private                       public   3e-3   61.9%     6.3%      1.00           81
    DP-SGD eps 8                      public   3e-3   52.7%     6.3%      0.85           98
    DP-SGD eps 8                      public   1e-3   56.3%     6.3%      0.91           101   <- the demo
    non-private (no public start)     random   3e-3   48.8%     6%        -
    DP-SGD eps 8 (no public start)    random   3e-3   5.8%      6%        0.12

    canaries (exposure bits, 10 per group; controls 0.9)     1x (p)        10x (p)        100x (p, exact)
    non-private from public                                  2.2 (0.019)   3.6 (0.0014)   12.3 (7.5e-5, 6/10)
    DP eps 8 from public, lr 3e-3                            1.8 (0.21)    1.8 (0.032)    5.0 (4e-4, 0/10)
    DP eps 8 from public, lr 1e-3                            2.3 (0.07)    1.9 (0.12)     3.7 (0.002, 0/10)

    edp-sgd intent classifier          start    lr     held-out  baseline  x sgd   train wall s
    public (sgd, public.jsonl, 1 ep)   random   3e-3   98%       13%       -       46
    sgd                                public   3e-3   99%       13%       1.00    23
    dp-sgd eps 8                       public   3e-3   98%       13%       0.99    40
    edp-sgd eps 8                      public   3e-3   98%       13%       0.99    59
    sgd (no public start)              random   3e-3   82%       -         -
    edp-sgd eps 8 (no public start)    random   3e-3   9%        -         0.11

    the demo itself (bench_demo.py --keep: 3,000 public classifier rows, DP learning rate 1e-3; OS noise):
    MLM public 57.7%, non-private 61.6%, DP eps 8 56.3% (0.91x; baseline 6.3%); classifier public 94.0%,
    sgd 96.0%, dp-sgd 95.0% (0.99x), edp-sgd 95.0% (0.99x; baseline 13.0%)

Commands (``J`` = ``dpaudit train --trainer jax-bert --data D --seed 0 --preset tiny --batch-size 64 --max-length 32
--weight-decay 0 --mask-prob 0.3 --eval-examples 512 --eval-every 500``)::

    dpaudit inject --corpus builtin:assistant --corpus-size 3000 --out D --seed 0 --format digits:4 \
        --frequencies 1,10,100 --per-frequency 10 --public-size 20000 --overwrite
    J --out PUB --steps 1000 --learning-rate 3e-3 --data-split public --non-private
    J --out NP --steps 1000 --learning-rate 3e-3 --init-from PUB --non-private
    J --out DP --steps 1000 --learning-rate 1e-3 --init-from PUB --target-epsilon 8      (and 3e-3)
    dpaudit attack --model M --data D --out A --attacks exposure,reconstruction,loss --seed 0 --overwrite
    dpaudit inject --corpus builtin:assistant --corpus-size 1000 --out C --seed 0 --format digits:4 \
        --frequencies 1,10 --per-frequency 10 --public-size 5000 --overwrite
    dpaudit train --trainer edp-sgd --task classify --data C --seed 0 --preset tiny --max-length 32 \
        --batch-size 32 --labels L --out CPUB --mode sgd --data-split public --non-private --epochs 1 --learning-rate 3e-3
    ... --mode sgd|dp-sgd|edp-sgd --epochs 3 --learning-rate 3e-3 --init-from CPUB [--target-epsilon 8]

rgp from the same starts (session 13, ``--rgp``, load 5-10: ``python benchmarks/bench_public_pretraining.py --task mlm
--rgp --workdir W`` and ``--task classify --rgp``; rgp MLM: batch 64, 10 epochs, learning rate 1e-3, from the jax-bert
public model, which the torch trainers load as a Hugging Face BERT)::

    built-in corpus                     held-out  baseline  x non-private / x sgd
    MLM public (1000 steps)             57.8%     6.3%      -
    MLM non-private                     63.5%     6.3%      1.00
    MLM DP-SGD eps 8 (lr 1e-3)          56.0%     6.3%      0.88
    MLM rgp eps 8                       52.7%     5.8%*     0.83
    classifier public (1 epoch)         98.0%     13.0%     -
    classifier sgd                      95.0%     13.0%     1.00  (100 held-out rows: +-2 points is noise)
    classifier dp-sgd / edp-sgd / rgp   98.0%     13.0%     1.03 each

rgp's MLM is the lowest DP figure (0.83x, still above the 0.8x goal set for dp-sgd). A likely reason, not measured:
after its 10 warm-up steps its rank-16 carriers come from the historical update W_t - W_0, which in a noisy run from
a trained start is mostly accumulated noise, so the low-rank projection keeps less of the signal than dp-sgd's full
gradient; as a classifier from a public start it matches dp-sgd.

SNIPS (``--snips ../shared/data/snips``, read in place: ``inject --corpus .../train.tsv --format digits:4`` with
6,000 public rows; the MLM's inject ``--frequencies 1,10,100`` (6,406 members + 1,110 canary rows, 1,378 held-out, 512
evaluated), the classifiers' ``--frequencies 1,10``; classifiers with the label set of public.jsonl). Measured in
session 13 (load 5-9 on the shared 2-core machine: wall times not comparable, left out)::

    python benchmarks/bench_public_pretraining.py --task both --rgp --snips ../shared/data/snips \
        --public-size 6000 --classifier-public-size 6000 --public-steps 3000 --workdir W

    jax-bert MLM (SNIPS)               start    lr     held-out  baseline  x non-private
    public (public.jsonl, 3000 steps)  random   3e-3   38.3%     5.4%      -
    non-private                        public   3e-3   39.0%     5.4%      1.00
    DP-SGD eps 8                       public   1e-3   36.1%     5.4%      0.93   (goal 0.8: met)
    DP-SGD eps 8                       public   3e-4   36.8%     5.4%      0.94
    DP-SGD eps 8, batch 256, 500 steps public   1e-3   36.8%     5.4%      0.94
    rgp eps 8 (torch, 10 epochs, b 64) public   1e-3   35.7%     4.5%*     0.92
    before (1,000 public steps): public 25.6%, non-private 33.9%, DP-SGD eps 8 25.6% (0.75x, not met)

    edp-sgd / rgp intent classifier    start    lr     held-out  baseline  x sgd
    public (sgd, public.jsonl, 1 ep)   random   3e-3   89.8%     15.6%     -
    sgd                                public   3e-3   94.7%     15.6%     1.00
    dp-sgd eps 8                       public   1e-3   94.9%     15.6%     1.00   (goal 0.9: met)
    edp-sgd eps 8                      public   1e-3   95.3%     15.6%     1.01
    rgp eps 8                          public   1e-3   95.1%     15.6%     1.00

    * rgp is a torch trainer: its held-out masks are drawn by torch_common.data.mask_tokens, not jax-bert's, so the
      most-frequent-token baseline is computed on other masked positions of the same 512 rows.

What made the SNIPS MLM goal: the public model. With 1,000 public steps (25.6%) the start was undertrained for SNIPS'
varied text; at 3,000 steps (38.3%) it is the model a practitioner would start from, the non-private private
training adds 0.7 points and the epsilon-8 models stay within 3 points of it. The honest reading: on SNIPS the
epsilon-8 training (jax-bert and rgp alike, at learning rates 3e-4 and 1e-3, batch 64 and 256) ends 1.5-2.6 points
BELOW its public start: at N ~7,500 and epsilon 8 the noise outweighs what the private rows add to a start that
already knows the language, and 15% of the private rows are canary rows that a held-out figure does not reward.
The goal (>= 0.8x the non-private model from the same start) is met by every DP recipe tried; that DP private
training improves on the public start is not, on this corpus and at this size.

Why it works, and its limit: the public utterances come from the same grammar as the private ones, so the public
model alone is already close (MLM 55.7%, intents 98%); the private training mostly has to not undo it. At epsilon 8
with N ~3,800 and 1,000 steps the DP noise is large next to the signal: at learning rate 3e-3 the DP MLM loses 3
points against its start, at 1e-3 it keeps it and gains 0.6. edp-sgd mode reaches dp-sgd's accuracy here; its
micro-batch clipping (sensitivity 2C) costs nothing visible when the start already classifies. rgp was not measured
on the built-in corpus with ``--rgp``: see the table above. On text whose public part does not resemble the private
part the gap will be larger.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path


def dpaudit(*args: str) -> None:
    command = [sys.executable, "-m", "dpaudit", *args]
    print("$ dpaudit " + shlex.join(args), flush=True)
    done = subprocess.run(command, check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(done.returncode)


def utility(model: Path) -> tuple[float, float | None]:
    """The last held-out figure of a train run and its trivial baseline (metrics.jsonl)."""
    rows = [json.loads(line) for line in (model / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if line]
    for key, base in (
        ("mlm_accuracy", "heldout_mlm_accuracy_baseline"),
        ("eval_accuracy", "heldout_accuracy_baseline"),
    ):
        found = [r for r in rows if r.get(key) is not None]
        if found:
            return found[-1][key], found[-1].get(base)
    raise SystemExit(f"{model}: no held-out accuracy in metrics.jsonl")


def labels() -> str:
    from dpaudit.corpus.assistant import INTENTS

    return ",".join(intent.name for intent in INTENTS)


def run_mlm(root: Path, args: argparse.Namespace, corpus: list[str]) -> list[tuple[str, Path, str]]:
    data = root / "data-mlm"
    dpaudit(
        "inject",
        *corpus,
        "--out",
        str(data),
        "--seed",
        "0",
        "--format",
        "digits:4",
        "--frequencies",
        "1,10,100",
        "--per-frequency",
        "10",
        "--public-size",
        str(args.public_size),
        "--overwrite",
    )
    common = [
        "train",
        "--trainer",
        "jax-bert",
        "--data",
        str(data),
        "--seed",
        "0",
        "--preset",
        "tiny",
        "--batch-size",
        "64",
        "--max-length",
        "32",
        "--weight-decay",
        "0",
        "--mask-prob",
        "0.3",
        "--eval-every",
        str(args.steps),
        "--eval-examples",
        "512",
    ]
    public = root / "mlm-public"
    dpaudit(
        *common,
        "--out",
        str(public),
        "--data-split",
        "public",
        "--non-private",
        "--steps",
        str(args.public_steps),
        "--learning-rate",
        "3e-3",
    )
    runs = [("public model (public.jsonl only)", public, "-")]
    for name, start, rate, privacy in (
        ("non-private", public, "3e-3", ["--non-private"]),
        ("DP-SGD eps 8", public, args.dp_learning_rate, ["--target-epsilon", "8"]),
        ("non-private, from scratch", None, "3e-3", ["--non-private"]),
        ("DP-SGD eps 8, from scratch", None, "3e-3", ["--target-epsilon", "8"]),
    ):
        if start is None and not args.scratch:
            continue
        out = root / f"mlm-{len(runs)}"
        dpaudit(
            *common,
            "--out",
            str(out),
            *(["--init-from", str(start)] if start else []),
            "--steps",
            str(args.steps),
            "--learning-rate",
            rate,
            *privacy,
        )
        runs.append((name, out, "public" if start else "scratch"))
    if args.rgp:
        out = root / "mlm-rgp"
        torch_common = [
            "train",
            "--trainer",
            "rgp",
            "--task",
            "mlm",
            "--data",
            str(data),
            "--seed",
            "0",
            "--batch-size",
            "64",
            "--max-length",
            "32",
            "--mask-prob",
            "0.3",
            "--eval-examples",
            "512",
        ]
        dpaudit(
            *torch_common,
            "--out",
            str(out),
            "--init-from",
            str(public),
            "--epochs",
            str(args.rgp_mlm_epochs),
            "--learning-rate",
            args.rgp_learning_rate,
            "--target-epsilon",
            "8",
        )
        runs.append(("rgp eps 8 (torch, from the jax start)", out, "public"))
    return runs


def run_classify(
    root: Path, args: argparse.Namespace, corpus: list[str], label_args: list[str]
) -> list[tuple[str, Path, str]]:
    data = root / "data-clf"
    dpaudit(
        "inject",
        *corpus,
        "--out",
        str(data),
        "--seed",
        "0",
        "--format",
        "digits:4",
        "--frequencies",
        "1,10",
        "--per-frequency",
        "10",
        "--public-size",
        str(args.classifier_public_size),
        "--overwrite",
    )
    common = [
        "train",
        "--trainer",
        "edp-sgd",
        "--task",
        "classify",
        "--data",
        str(data),
        "--seed",
        "0",
        "--preset",
        "tiny",
        "--max-length",
        "32",
        "--batch-size",
        str(args.classifier_batch_size),
        *label_args,
    ]
    public = root / "clf-public"
    dpaudit(
        *common,
        "--out",
        str(public),
        "--data-split",
        "public",
        "--non-private",
        "--epochs",
        str(args.classifier_public_epochs),
        "--learning-rate",
        "3e-3",
    )
    runs = [("public classifier (public.jsonl only)", public, "-")]
    for mode, private in (("sgd", False), ("dp-sgd", True), ("edp-sgd", True)):
        out = root / f"clf-{mode}"
        dpaudit(
            *common,
            "--out",
            str(out),
            "--mode",
            mode,
            "--init-from",
            str(public),
            "--epochs",
            str(args.classifier_epochs),
            "--learning-rate",
            args.dp_learning_rate if private else "3e-3",
            *(["--target-epsilon", "8"] if private else []),
        )
        runs.append((f"{mode}{' eps 8' if private else ''}", out, "public"))
    if args.rgp:
        out = root / "clf-rgp"
        rgp = [("rgp" if previous == "--trainer" else arg) for previous, arg in zip(["", *common], common)]
        dpaudit(
            *rgp,
            "--out",
            str(out),
            "--init-from",
            str(public),
            "--epochs",
            str(args.classifier_epochs),
            "--learning-rate",
            args.rgp_learning_rate,
            "--target-epsilon",
            "8",
        )
        runs.append(("rgp eps 8", out, "public"))
    return runs


def table(title: str, runs: list[tuple[str, Path, str]]) -> None:
    print(f"\n{title}")
    print(f"  {'model':<40} {'start':<8} {'held-out':>9} {'baseline':>9} {'x non-private':>14}")
    reference = None
    for name, path, start in runs:
        value, base = utility(path)
        if name in ("non-private", "sgd"):
            reference = value
        ratio = f"{value / reference:.2f}" if reference and start == "public" else ""
        print(f"  {name:<40} {start:<8} {value:>9.1%} {(f'{base:.1%}' if base is not None else '?'):>9} {ratio:>14}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=["mlm", "classify", "both"], default="both")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--snips", type=Path, default=None, help="Folder with SNIPS train.tsv (read in place).")
    parser.add_argument("--corpus-size", type=int, default=3000)
    parser.add_argument("--public-size", type=int, default=20000)
    parser.add_argument("--public-steps", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--dp-learning-rate", default="1e-3", help="Learning rate of the DP models (the demo's: 1e-3).")
    parser.add_argument("--scratch", action="store_true", help="Also train both MLMs from random weights.")
    parser.add_argument("--classifier-corpus-size", type=int, default=1000)
    parser.add_argument("--classifier-public-size", type=int, default=5000)
    parser.add_argument("--classifier-public-epochs", type=int, default=1)
    parser.add_argument("--classifier-epochs", type=int, default=3)
    parser.add_argument("--classifier-batch-size", type=int, default=32)
    parser.add_argument("--rgp", action="store_true", help="Also train rgp (epsilon 8) from the same public start.")
    parser.add_argument(
        "--rgp-mlm-epochs",
        type=int,
        default=10,
        help="Epochs of the rgp MLM (batch 64: about 1,000 steps on SNIPS' ~6,500 private rows).",
    )
    parser.add_argument("--rgp-learning-rate", default="1e-3", help="Learning rate of the rgp models.")
    args = parser.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-public-"))
    root.mkdir(parents=True, exist_ok=True)
    if args.snips is not None:
        corpus = clf_corpus = ["--corpus", str(args.snips / "train.tsv")]
        label_args: list[str] = []  # SNIPS: the label set of public.jsonl
    else:
        corpus = ["--corpus", "builtin:assistant", "--corpus-size", str(args.corpus_size)]
        clf_corpus = ["--corpus", "builtin:assistant", "--corpus-size", str(args.classifier_corpus_size)]
        label_args = ["--labels", labels()]
    what = "SNIPS" if args.snips is not None else "built-in corpus"
    if args.task in ("mlm", "both"):
        table(
            f"jax-bert MLM ({what}): held-out MLM accuracy (baseline: always the most frequent token)",
            run_mlm(root, args, corpus),
        )
    if args.task in ("classify", "both"):
        table(
            f"edp-sgd intent classifier ({what}): held-out accuracy (baseline: always the majority class)",
            run_classify(root, args, clf_corpus, label_args),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
