"""Benchmark: public pretraining, then private training (issue 28): each model's held-out accuracy beside its
trivial baseline and beside the non-private model trained from the same start.

Everything runs through the ``dpaudit`` commands the demo types (each printed before it runs): ``inject`` with a
public split (``--public-size``), a public model (``train --data-split public --non-private``), then the
non-private and the epsilon-8 models ``--init-from`` it. Goals (issue 28), at epsilon 8: the DP MLM's held-out
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
    non-private (before issue 28)     random   3e-3   48.8%     6%        -
    DP-SGD eps 8 (before issue 28)    random   3e-3   5.8%      6%        0.12

    canaries (exposure bits, 10 per group; controls 0.9)     1x (p)        10x (p)        100x (p, exact)
    non-private from public                                  2.2 (0.019)   3.6 (0.0014)   12.3 (7.5e-5, 6/10)
    DP eps 8 from public, lr 3e-3                            1.8 (0.21)    1.8 (0.032)    5.0 (4e-4, 0/10)
    DP eps 8 from public, lr 1e-3                            2.3 (0.07)    1.9 (0.12)     3.7 (0.002, 0/10)

    edp-sgd intent classifier          start    lr     held-out  baseline  x sgd   train wall s
    public (sgd, public.jsonl, 1 ep)   random   3e-3   98%       13%       -       46
    sgd                                public   3e-3   99%       13%       1.00    23
    dp-sgd eps 8                       public   3e-3   98%       13%       0.99    40
    edp-sgd eps 8                      public   3e-3   98%       13%       0.99    59
    sgd (before issue 28)              random   3e-3   82%       -         -
    edp-sgd eps 8 (before issue 28)    random   3e-3   9%        -         0.11

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

SNIPS (``--snips ../shared/data/snips``: ``inject --corpus .../train.tsv --format digits:4 --frequencies 1,10
--per-frequency 10 --public-size 6000``: 6,406 members + 110 canary rows, 1,378 held-out (512 evaluated), 6,000
public; classifiers as above with the label set of public.jsonl, DP learning rate 1e-3)::

    edp-sgd intent classifier (SNIPS)  start    lr     held-out  baseline  x sgd   train wall s
    public (sgd, public.jsonl, 1 ep)   random   3e-3   94.1%     15.6%     -       9
    sgd                                public   3e-3   97.3%     15.6%     1.00    14
    dp-sgd eps 8                       public   1e-3   95.9%     15.6%     0.99    21
    edp-sgd eps 8                      public   1e-3   95.5%     15.6%     0.98    23
    jax-bert MLM (SNIPS, 1,000 steps)  start    lr     held-out  baseline  x non-private  train wall s
    public (public.jsonl)              random   3e-3   25.6%     5.4%      -              81
    non-private                        public   3e-3   33.9%     5.4%      1.00           80
    DP-SGD eps 8                       public   1e-3   25.6%     5.4%      0.75 (goal 0.8: NOT met)  90

On SNIPS the MLM goal is not met: the epsilon-8 model ends exactly where its start was (25.6%, the same figure to
every digit on the same 512 held-out rows), while 1,000 non-private steps on the private rows add 8 points. The
public model is undertrained (1,000 steps on 6,000 rows; SNIPS' text is far more varied than the built-in
grammar), so what is left to learn is large and the epsilon-8 noise at N ~6,500 and learning rate 1e-3 drowns
it. Levers not measured for lack of time: a longer public pretraining (it raises both, and the ratio with it),
a larger DP learning rate or batch size at the same epsilon.

Why it works, and its limit: the public utterances come from the same grammar as the private ones, so the public
model alone is already close (MLM 55.7%, intents 98%); the private training mostly has to not undo it. At epsilon 8
with N ~3,800 and 1,000 steps the DP noise is large next to the signal: at learning rate 3e-3 the DP MLM loses 3
points against its start, at 1e-3 it keeps it and gains 0.6. edp-sgd mode reaches dp-sgd's accuracy here; its
micro-batch clipping (sensitivity 2C) costs nothing visible when the start already classifies. rgp was not measured
in this benchmark (no time in this session). On text whose public part does not resemble the private part the gap
will be larger.
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
    for key, base in (("mlm_accuracy", "heldout_mlm_accuracy_baseline"), ("eval_accuracy", "heldout_accuracy_baseline")):
        found = [r for r in rows if r.get(key) is not None]
        if found:
            return found[-1][key], found[-1].get(base)
    raise SystemExit(f"{model}: no held-out accuracy in metrics.jsonl")


def labels() -> str:
    from dpaudit.corpus.assistant import INTENTS

    return ",".join(intent.name for intent in INTENTS)


def run_mlm(root: Path, args: argparse.Namespace, corpus: list[str]) -> list[tuple[str, Path, str]]:
    data = root / "data-mlm"
    dpaudit("inject", *corpus, "--out", str(data), "--seed", "0", "--format", "digits:4", "--frequencies", "1,10,100",
            "--per-frequency", "10", "--public-size", str(args.public_size), "--overwrite")
    common = ["train", "--trainer", "jax-bert", "--data", str(data), "--seed", "0", "--preset", "tiny",
              "--batch-size", "64", "--max-length", "32", "--weight-decay", "0", "--mask-prob", "0.3",
              "--eval-every", str(args.steps), "--eval-examples", "512"]
    public = root / "mlm-public"
    dpaudit(*common, "--out", str(public), "--data-split", "public", "--non-private", "--steps", str(args.public_steps),
            "--learning-rate", "3e-3")
    runs = [("public model (public.jsonl only)", public, "-")]
    for name, start, rate, privacy in (("non-private", public, "3e-3", ["--non-private"]),
                                       ("DP-SGD eps 8", public, args.dp_learning_rate, ["--target-epsilon", "8"]),
                                       ("non-private, from scratch", None, "3e-3", ["--non-private"]),
                                       ("DP-SGD eps 8, from scratch", None, "3e-3", ["--target-epsilon", "8"])):
        if start is None and not args.scratch:
            continue
        out = root / f"mlm-{len(runs)}"
        dpaudit(*common, "--out", str(out), *(["--init-from", str(start)] if start else []), "--steps", str(args.steps),
                "--learning-rate", rate, *privacy)
        runs.append((name, out, "public" if start else "scratch"))
    return runs


def run_classify(root: Path, args: argparse.Namespace, corpus: list[str], label_args: list[str]) -> list[tuple[str, Path, str]]:
    data = root / "data-clf"
    dpaudit("inject", *corpus, "--out", str(data), "--seed", "0", "--format", "digits:4", "--frequencies", "1,10",
            "--per-frequency", "10", "--public-size", str(args.classifier_public_size), "--overwrite")
    common = ["train", "--trainer", "edp-sgd", "--task", "classify", "--data", str(data), "--seed", "0", "--preset", "tiny",
              "--max-length", "32", "--batch-size", str(args.classifier_batch_size), *label_args]
    public = root / "clf-public"
    dpaudit(*common, "--out", str(public), "--data-split", "public", "--non-private", "--epochs",
            str(args.classifier_public_epochs), "--learning-rate", "3e-3")
    runs = [("public classifier (public.jsonl only)", public, "-")]
    for mode, private in (("sgd", False), ("dp-sgd", True), ("edp-sgd", True)):
        out = root / f"clf-{mode}"
        dpaudit(*common, "--out", str(out), "--mode", mode, "--init-from", str(public), "--epochs",
                str(args.classifier_epochs), "--learning-rate", args.dp_learning_rate if private else "3e-3",
                *(["--target-epsilon", "8"] if private else []))
        runs.append((f"{mode}{' eps 8' if private else ''}", out, "public"))
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
        table(f"jax-bert MLM ({what}): held-out MLM accuracy (baseline: always the most frequent token)",
              run_mlm(root, args, corpus))
    if args.task in ("classify", "both"):
        table(f"edp-sgd intent classifier ({what}): held-out accuracy (baseline: always the majority class)",
              run_classify(root, args, clf_corpus, label_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
