"""The demo's non-private causal LM against the training-free attacks: the issue's goal measured on the demo itself.

Runs only the stages of ``dpaudit demo --causal`` the causal LM needs, with the demo's own commands (built by
:func:`dpaudit.demo.plan.build_plan` for ``--quick`` or the full sizes, printed as they run): the inject (at the full
size the masked LMs', then the causal LMs' own, drawn with a seed of its own and ``--exclude`` of the masked
``public.jsonl``), the public causal LM (``public.jsonl`` only) and the non-private causal LM fine-tuned from it;
``--epochs N`` replaces the demo's fine-tuning epochs (to see how memorization moves the figures; the demo's own recipe
when omitted; a comma-separated list fine-tunes once per count from the same public LM), ``--seed S`` draws the
demo's data as ``dpaudit demo --seed S`` would (0, the demo's own, by default), ``--public-epochs P`` trains the public
causal LM (the base the training-free attacks compare with) P epochs instead of the demo's. Then each membership attack runs alone on the examples task (members: the non-canary ``train.jsonl``
rows; non-members: the ``heldout.jsonl`` rows, the same distribution) and is timed (wall, this machine, model loading
included): ``loss`` (with the blind baseline beside it, read from the same run), ``base-ratio``, ``error-zone`` and
``min-k++-base``. Printed: AUC [95% CI], TPR at 1% FPR [95% CI] and wall seconds, and the goal's checks (the best
training-free attack at >= 60% TPR at 1% FPR and >= 2x the loss attack's, in under 2 minutes, its AUC interval above
the blind baseline's).

Example:
    nice -n 10 python benchmarks/bench_demo_causal_mia.py --size full [--epochs 20 | --epochs 12,16,20] [--seed 0]
        [--public-epochs 3] [--keep DIR]

Measured (shared 2-core machine, load 7-9, ``nice -n 10``), ``nice -n 10 python benchmarks/bench_demo_causal_mia.py
--size full --keep DIR`` with the demo's recipe (its own inject directory, drawn with its own seed,
:func:`dpaudit.demo.plan.causal_inject_seed`, and ``--exclude`` of the masked LMs' ``public.jsonl`` only: 900
non-canary members beside 555 canary rows, 397 non-members after duplicates, 20,000 public rows; the public causal LM
3 epochs, 152.4 s; 20 fine-tuning epochs, 81.6 s):

============  ====================  =====================  ======
attack        AUC [95% CI]          TPR at 1% FPR [CI]     wall s
============  ====================  =====================  ======
loss          0.963 [0.953, 0.974]  0.605 [0.539, 0.700]   16.1
blind         0.485 [0.447, 0.528]  0.003 [0.000, 0.008]   n/a
base-ratio    0.985 [0.979, 0.991]  0.829 [0.582, 0.866]   16.7
error-zone    0.952 [0.939, 0.965]  0.474 [0.249, 0.673]   15.7
min-k++-base  0.963 [0.952, 0.975]  0.529 [0.416, 0.665]   16.7
============  ====================  =====================  ======

The goal: base-ratio >= 60% TPR at 1% FPR (yes, 82.9%, its interval reaching down to 58.2%), in under 2 minutes (yes),
its AUC interval above the blind baseline's (yes); >= 2x the loss attack's TPR: no, 1.4x. The same command on the two
earlier draws (both directories from the demo's seed; load 4-8 and 12-19): with ``--exclude`` of all three masked
splits, loss 0.946 / 0.463, blind 0.502 / 0.015, base-ratio 0.979 / 0.683, error-zone 0.945 / 0.332, min-k++-base
0.966 / 0.625 (1.5x); without it, loss 0.961 / 0.449, blind 0.479 / 0.013, base-ratio 0.986 / 0.717, error-zone
0.954 / 0.379, min-k++-base 0.968 / 0.439 (1.6x). Each training draws its batches from OS entropy: the figures move
between runs (here the loss attack's TPR moved most, 0.45-0.61). The recipe was chosen on public rows (the table in
:mod:`dpaudit.demo.plan`'s docstring: the masked LMs' ``public.jsonl``, none of whose rows may be a causal private row,
so it was not re-run): there, as here, the ratio to the base beats the loss attack by less as the model memorizes more
(3.4x at 8.6% TPR, 1.85x at 41%, 1.6x at 55%, 1.3x at 81%), and no recipe tried reached both 60% and 2x; dividing
each token's ratio by the base's own spread of log p at that position (a Min-K%++-style calibration, not an attack of
dpaudit) moved the pseudo figures little (0.48 vs 0.41 at 11 epochs, 0.54 vs 0.55 at 16, 0.85 vs 0.81 at 24). Before
(the masked LMs' directory: 2,700 members, 293 non-members, a 1-epoch public LM, 8 epochs, load 8-10): loss 0.622 /
0.027, base-ratio 0.716 / 0.020, error-zone 0.709 / 0.038, min-k++-base 0.697 / 0.048, the tiny 2 x 64 model barely
memorizing its rows.

Whether any fine-tuning length meets both halves of the goal, on three other draws of the demo's data (``--seed 1``,
``2``, ``3`` with ``--epochs 12,14,16,18,20``; load 2.5-3, three draws side by side; the best training-free attack's
TPR at 1% FPR against the loss attack's, the mean over the draws, then the ratio of the means and each draw's):

======  =========================  ===========  ========================
epochs  best training-free (mean)  loss (mean)  ratio (draws)
======  =========================  ===========  ========================
12      43.9%                      25.8%        1.70x (2.03, 1.44, 1.73)
14      45.8%                      26.8%        1.71x (4.28, 1.08, 1.89)
16      61.2%                      41.2%        1.49x (1.64, 1.21, 1.76)
18      74.2%                      56.3%        1.32x (1.55, 1.16, 1.31)
20      62.1%                      43.5%        1.43x (2.08, 1.14, 1.28)
======  =========================  ===========  ========================

One of the 15 runs met both (seed 1, 20 epochs: base-ratio 69.8% against 33.5%); the means meet both at none: the
more the model memorizes, the more the loss attack finds too. The loss attack's TPR at 1% FPR is the least stable
figure (9.3% to 45.2% between draws at 14 epochs: 1% of 397 non-members is four texts). Other training-free scores
from the same two passes did no better than base-ratio on the first draw (the ratio over tokens the base finds
unlikely, at the base's or the target's error positions, weighted by surprisal or by the base's spread, the lowest or
highest token ratios, the count of tokens newly top-1), and a neighbourhood calibration (Mattern et al. 2023: the
ratio minus the mean ratio of the text with one token replaced by the base's next most likely) fell to a third of
base-ratio's TPR: on a grammar's text the neighbours are texts the target has learned as well.

A base closer to where public training ends (``--public-epochs 12``, four times the demo's; its mean held-out
log-likelihood per token -1.310 against -1.327 at 3 epochs), on the draws of seeds 1 and 2 above, with the demo's
commands; TPR at 1% FPR over all 397 non-members (the empirical ROC, not the attacks' seeded-half threshold), base-ratio
against the loss attack, each fine-tuning length trained once (the 3-epoch columns: the trainings of the table above's
first measurement):

======  ===================  ===================  ===================  ===================
epochs  seed 1, public 12    seed 1, public 3     seed 2, public 12    seed 2, public 3
======  ===================  ===================  ===================  ===================
8       44.6 / 13.9%, 3.2x
10      45.3 / 17.4%, 2.6x                        41.7 / 28.4%, 1.5x
12      63.7 / 18.6%, 3.4x   48.6 / 11.1%, 4.4x   59.5 / 52.0%, 1.1x   32.2 / 20.1%, 1.6x
14      66.5 / 31.0%, 2.1x                        52.8 / 56.8%, 0.9x   50.8 / 46.7%, 1.1x
16      71.0 / 49.4%, 1.4x   71.5 / 29.0%, 2.5x                        57.8 / 44.7%, 1.3x
20      79.1 / 53.4%, 1.5x   67.8 / 39.5%, 1.7x
======  ===================  ===================  ===================  ===================

On the first draw 12-14 epochs from the longer public LM meet both halves; on the second the loss attack gains as much
as base-ratio (52.0% at 12 epochs against 20.1% from the 3-epoch LM; one training each, so partly the loss attack's
instability above). One draw of two is what the 3-epoch LM gave too, so the demo's recipe stays; the longer public LM
was not run further (a public LM of 24 epochs was stopped unread).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ATTACKS = ("loss", "base-ratio", "error-zone", "min-k++-base")
TRAINING_FREE = ("base-ratio", "error-zone", "min-k++-base")


def run(args: list[str]) -> float:
    print("$ dpaudit " + shlex.join(args), flush=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "dpaudit", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dpaudit {args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    return time.perf_counter() - start


def examples(out: Path, attack: str) -> dict:
    results = json.loads((out / "results.json").read_text())
    result = next(a for a in results["attacks"] if a["attack"] == attack)
    task = next(t for t in result["tasks"] if t["task"] == "examples")
    at = next(x for x in task["tpr_at"] if abs(x["fpr"] - 0.01) < 1e-9)
    return {"auc": task["auc"], "ci": task["auc_ci"], "tpr": at["tpr"], "tpr_ci": at["ci"], "n": task["n_nonmembers"]}


def attack_rows(model: Path, data: Path, root: Path, seed: int) -> dict[str, dict]:
    """Each membership attack alone on ``model`` (timed), the blind baseline read from the loss attack's run."""
    rows = {}
    for attack in ATTACKS:
        out = root / f"attack-{attack}"
        blind = [] if attack == "loss" else ["--no-blind-baseline"]
        cmd = ["attack", "--model", str(model), "--data", str(data), "--out", str(out), "--attacks", attack]
        wall = run([*cmd, "--seed", str(seed), "--overwrite", *blind])
        rows[attack] = {**examples(out, attack), "wall": wall}
        if attack == "loss":
            rows["blind"] = {**examples(out, "blind"), "wall": None}
    return rows


def verdict(rows: dict[str, dict]) -> None:
    """The goal's checks for one fine-tuned model."""
    best = max(TRAINING_FREE, key=lambda a: rows[a]["tpr"])
    b, loss, blind = rows[best], rows["loss"], rows["blind"]
    print(f"\nnon-members: {b['n']}; best training-free attack at 1% FPR: {best}")
    print(f"  TPR >= 0.60: {b['tpr']:.3f} -> {'yes' if b['tpr'] >= 0.6 else 'NO'}")
    ratio = b["tpr"] / loss["tpr"] if loss["tpr"] > 0 else float("inf")
    print(f"  >= 2x the loss attack's TPR ({loss['tpr']:.3f}): {ratio:.1f}x -> {'yes' if ratio >= 2 else 'NO'}")
    print(f"  under 2 minutes: {b['wall']:.1f} s -> {'yes' if b['wall'] < 120 else 'NO'}")
    clears = b["ci"][0] > blind["ci"][1]
    print(f"  AUC CI {b['ci']} above the blind baseline's {blind['ci']}: {'yes' if clears else 'NO'}")


def main() -> None:
    from dpaudit.demo.plan import FULL, QUICK, build_plan

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=("quick", "full"), default="full")
    parser.add_argument(
        "--epochs",
        default=None,
        help="Fine-tuning epochs, or a comma-separated list of them (each from the same public LM; default: the demo's).",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="The demo's --seed: which draw of its data (default 0, the demo's own)."
    )
    parser.add_argument(
        "--public-epochs",
        type=int,
        default=None,
        help="Epochs of the public causal LM (default: the demo's); the base the training-free attacks compare with.",
    )
    parser.add_argument("--keep", type=Path, default=None, help="Keep the runs here (default: a temporary folder).")
    args = parser.parse_args()
    sizes = QUICK if args.size == "quick" else FULL
    if args.public_epochs is not None:
        if args.public_epochs < 1:
            parser.error(f"--public-epochs {args.public_epochs}: give a positive number")
        sizes = dataclasses.replace(sizes, causal_public_epochs=args.public_epochs)
    try:
        epochs = [int(e) for e in args.epochs.split(",")] if args.epochs else [sizes.causal_epochs]
        if min(epochs) < 1:
            raise ValueError(args.epochs)
    except ValueError:
        parser.error(f"--epochs {args.epochs}: give a positive number or a comma-separated list of them")
    print("$ " + shlex.join(["python", *sys.argv]))
    tables = {}
    with tempfile.TemporaryDirectory(prefix="bench-demo-clm-") as tmp:
        root = args.keep or Path(tmp)
        plan = build_plan(root, sizes, seed=args.seed, report=root / "report.html", classifiers=False, causal=True)
        stages = {s.name: s for s in plan.stages}
        # the masked LMs' inject, then the causal LMs' own (its own seed, --exclude of the masked public.jsonl), if any
        injects = [stages[name].args for name in ("inject", "inject-causal") if name in stages]
        for cmd in (*injects, stages["train-clm-public"].args):
            print(f"  {run(list(cmd)):.1f} s", flush=True)
        for count in epochs:
            train = list(stages["train-clm-nonprivate"].args)
            train[train.index("--epochs") + 1] = str(count)
            if len(epochs) > 1:  # one model directory per epoch count
                train[train.index("--out") + 1] += f"-{count}ep"
            print(f"  {run(train):.1f} s", flush=True)
            model, data = Path(train[train.index("--out") + 1]), Path(train[train.index("--data") + 1])
            tables[count] = attack_rows(model, data, model.parent / f"{model.name}-attacks", args.seed)
    for count, rows in tables.items():
        print(f"\n{args.size} demo sizes, seed {args.seed}, fine-tuned {count} epochs; examples task")
        print("| attack | AUC [95% CI] | TPR at 1% FPR [95% CI] | wall s |\n|---|---|---|---|")
        for name, r in rows.items():
            wall = "-" if r["wall"] is None else f"{r['wall']:.1f}"
            print(
                f"| {name} | {r['auc']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['tpr']:.3f} "
                f"[{r['tpr_ci'][0]:.3f}, {r['tpr_ci'][1]:.3f}] | {wall} |"
            )
        verdict(rows)


if __name__ == "__main__":
    main()
