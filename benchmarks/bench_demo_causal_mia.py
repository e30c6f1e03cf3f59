"""The demo's non-private causal LM against the training-free attacks: the issue's goal measured on the demo itself.

Runs only the stages of ``dpaudit demo --causal`` the causal LM needs, with the demo's own commands (built by
:func:`dpaudit.demo.plan.build_plan` for ``--quick`` or the full sizes, printed as they run): the inject, the public
causal LM (``public.jsonl`` only) and the non-private causal LM fine-tuned from it; ``--epochs N`` replaces the demo's
fine-tuning epochs (to see how memorization moves the figures; the demo's own recipe when omitted). Then each
membership attack runs alone on the examples task (members: the non-canary ``train.jsonl`` rows; non-members: the
``heldout.jsonl`` rows, the same distribution) and is timed (wall, this machine, model loading included): ``loss``
(with the blind baseline beside it, read from the same run), ``base-ratio``, ``error-zone`` and ``min-k++-base``.
Printed: AUC [95% CI], TPR at 1% FPR [95% CI] and wall seconds, and the goal's checks (the best training-free attack
at >= 60% TPR at 1% FPR and >= 2x the loss attack's, in under 2 minutes, its AUC interval above the blind baseline's).

Example:
    nice -n 10 python benchmarks/bench_demo_causal_mia.py --size full [--epochs 20] [--keep DIR]

Measured (shared 2-core machine, load 8-10, ``nice -n 10``), ``--size full`` (the demo's recipe: 2,700 non-canary
train rows, 8 epochs; 293 non-members after duplicates): loss AUC 0.622, TPR at 1% FPR 0.027; base-ratio 0.716 /
0.020; error-zone 0.709 / 0.038; min-k++-base 0.697 [0.657, 0.735] / 0.048, 17.9 s; blind 0.510 [0.467, 0.552]. The
goal's 60% is not reached: the demo's tiny causal LM (2 x 64) barely memorizes its rows (members' mean token
log-likelihood -1.27 against -1.48 for held-out rows; held-out next-token accuracy 0.56). With the same stages run by
hand: 20 epochs at full size, base-ratio 0.881 / 0.242 against loss 0.799 / 0.109; ``--quick`` sizes (900 members,
100 non-members) at 8 epochs base-ratio 0.860 / 0.41 against loss 0.747 / 0.04, at 24 epochs 0.962 / 0.67 against
0.951 / 0.41 (each training draws its batches from OS entropy: the figures move between runs, 0.754 / 0.068 for
base-ratio in another 8-epoch full run).
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    from dpaudit.demo.plan import FULL, QUICK, build_plan

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=("quick", "full"), default="full")
    parser.add_argument("--epochs", type=int, default=None, help="Fine-tuning epochs (default: the demo's).")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the runs here (default: a temporary folder).")
    args = parser.parse_args()
    sizes = QUICK if args.size == "quick" else FULL
    print("$ " + shlex.join(["python", *sys.argv]))
    with tempfile.TemporaryDirectory(prefix="bench-demo-clm-") as tmp:
        root = args.keep or Path(tmp)
        plan = build_plan(root, sizes, seed=0, report=root / "report.html", classifiers=False, causal=True)
        stages = {s.name: s for s in plan.stages}
        train = list(stages["train-clm-nonprivate"].args)
        if args.epochs is not None:
            train[train.index("--epochs") + 1] = str(args.epochs)
        for cmd in (stages["inject"].args, stages["train-clm-public"].args, tuple(train)):
            run(list(cmd))
        model, data = Path(train[train.index("--out") + 1]), Path(train[train.index("--data") + 1])
        rows = {}
        for attack in ATTACKS:
            out = root / f"attack-{attack}"
            blind = [] if attack == "loss" else ["--no-blind-baseline"]
            cmd = ["attack", "--model", str(model), "--data", str(data), "--out", str(out), "--attacks", attack]
            wall = run([*cmd, "--seed", "0", "--overwrite", *blind])
            rows[attack] = {**examples(out, attack), "wall": wall}
            if attack == "loss":
                rows["blind"] = {**examples(out, "blind"), "wall": None}
    print(f"\n{args.size} demo sizes, fine-tuned {args.epochs or sizes.causal_epochs} epochs; examples task")
    print("| attack | AUC [95% CI] | TPR at 1% FPR [95% CI] | wall s |\n|---|---|---|---|")
    for name, r in rows.items():
        wall = "-" if r["wall"] is None else f"{r['wall']:.1f}"
        print(
            f"| {name} | {r['auc']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {r['tpr']:.3f} "
            f"[{r['tpr_ci'][0]:.3f}, {r['tpr_ci'][1]:.3f}] | {wall} |"
        )
    best = max(TRAINING_FREE, key=lambda a: rows[a]["tpr"])
    b, loss, blind = rows[best], rows["loss"], rows["blind"]
    print(f"\nnon-members: {b['n']}; best training-free attack at 1% FPR: {best}")
    print(f"  TPR >= 0.60: {b['tpr']:.3f} -> {'yes' if b['tpr'] >= 0.6 else 'NO'}")
    ratio = b["tpr"] / loss["tpr"] if loss["tpr"] > 0 else float("inf")
    print(f"  >= 2x the loss attack's TPR ({loss['tpr']:.3f}): {ratio:.1f}x -> {'yes' if ratio >= 2 else 'NO'}")
    print(f"  under 2 minutes: {b['wall']:.1f} s -> {'yes' if b['wall'] < 120 else 'NO'}")
    clears = b["ci"][0] > blind["ci"][1]
    print(f"  AUC CI {b['ci']} above the blind baseline's {blind['ci']}: {'yes' if clears else 'NO'}")


if __name__ == "__main__":
    main()
