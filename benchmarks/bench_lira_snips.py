"""Benchmark: LiRA with many matched shadow models on SNIPS, against the loss attack and the reference code's scoring.

The goal: "LiRA with 64 matched shadows on SNIPS: AUC and TPR at 0.1%/1% FPR tabled against the loss attack
and against the reference code's scoring on the same shadows (agreement within 0.01 AUC)".

What runs (everything through ``dpaudit``; SNIPS is read in place from ``--snips DIR``, never copied):

1. ``dpaudit inject --corpus DIR/train.tsv --public-size P``: members, held-out rows and a public split drawn at
   random from SNIPS' train.tsv (one distribution: members = train rows vs non-members = test.tsv rows would be
   confounded, since the blind baseline tells those two files apart at AUC 0.64 from the text alone;
   ``benchmarks/bench_blind_baseline.py``).
2. A non-private target: ``edp-sgd --task classify --mode sgd --preset tiny`` for ``--epochs`` epochs.
3. ``dpaudit.attack(..., ["loss", "lira"], shadow_models=K, workers=W)``: K shadows trained like the target (same
   trainer, recipe, row count and optimizer steps), each candidate IN for half of them (online protocol), on the fleet.
4. On the very same shadow confidences (captured from the attack as it scores), the reference code's scoring
   (Carlini et al.'s released ``mi_lira_2021``: per-candidate medians, ``fix_variance`` or per-example stds), as the
   test oracle ``tests/attacks/test_lira_reference.py`` re-implements it, is computed and its AUC printed beside ours.

Measured (session 13, shared 2-core machine at load 2-5; ``--shadows 64 --workers 2 --examples 1000 --corpus-size 5000
--public-size 2500 --heldout-size 1000 --epochs 10``: target 1,510 rows, 10 epochs, 92.8% held-out; shadows mean
92.0%, min 80.5%; attack wall 8.8 min with the 64 shadows trained on Ray)::

    attack / task              AUC [95% CI]            TPR@0.1%   TPR@1%
    loss / examples            0.533 [0.507, 0.558]      n/a      0.005
    lira / examples            0.547 [0.521, 0.571]      n/a      0.025
    lira / examples-offline    0.558 [0.532, 0.583]      n/a      0.032
    blind / examples           0.518 [0.492, 0.543]      n/a      0.004
    LiRA online: ours 0.5466, the reference code's scoring on the same shadows 0.5507 (|diff| 0.0041; goal <= 0.01)

(TPR at 0.1% needs >= 1,000 non-members after de-duplication: n/a with 1,000 held-out rows.)

Usage:
    python benchmarks/bench_lira_snips.py --snips ../shared/data/snips [--shadows 64] [--workers 2]
        [--examples 1000] [--public-size 6000] [--epochs 3] [--corpus-size N]
        [--heldout-size 1378] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def dpaudit_cli(*args: str) -> None:
    from click.testing import CliRunner

    from dpaudit.cli import cli

    print("$ dpaudit " + shlex.join(args), flush=True)
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"dpaudit {args[0]} failed:\n{result.output[-3000:]}")


def reference_oracle():
    """The reference code's scoring, as the test suite's oracle writes it (loaded by path: tests are no package)."""
    path = ROOT / "tests" / "attacks" / "test_lira_reference.py"
    spec = importlib.util.spec_from_file_location("lira_reference_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_scores


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snips", type=Path, required=True, help="Folder with SNIPS train.tsv (read in place).")
    parser.add_argument("--shadows", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--examples", type=int, default=1000, help="Members (and as many non-members) audited.")
    parser.add_argument("--public-size", type=int, default=6000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--corpus-size", type=int, default=None, help="Rows drawn at random from train.tsv (default: all)."
    )
    parser.add_argument("--heldout-size", type=int, default=1378, help="Non-member rows of the inject directory.")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-lira-snips-"))
    root.mkdir(parents=True, exist_ok=True)
    data, target = root / "data", root / "target"
    corpus = args.snips / "train.tsv"
    if args.corpus_size:  # a random subsample, written to the work folder (outside the project), seed 0
        lines = corpus.read_text(encoding="utf-8").splitlines()
        keep = np.sort(np.random.default_rng(0).choice(len(lines) - 1, size=args.corpus_size, replace=False)) + 1
        corpus = root / f"snips-{args.corpus_size}.tsv"
        corpus.write_text("\n".join([lines[0], *(lines[i] for i in keep)]) + "\n", encoding="utf-8")
    if not (data / "manifest.json").is_file():
        dpaudit_cli(
            "inject",
            "--corpus",
            str(corpus),
            "--out",
            str(data),
            "--seed",
            "0",
            "--format",
            "digits:4",
            "--frequencies",
            "1",
            "--per-frequency",
            "10",
            "--public-size",
            str(args.public_size),
            "--heldout-size",
            str(args.heldout_size),
        )
    dpaudit_cli(
        "train",
        "--trainer",
        "edp-sgd",
        "--task",
        "classify",
        "--mode",
        "sgd",
        "--data",
        str(data),
        "--out",
        str(target),
        "--seed",
        "0",
        "--preset",
        "tiny",
        "--max-length",
        "32",
        "--batch-size",
        "32",
        "--epochs",
        str(args.epochs),
        "--learning-rate",
        "3e-3",
    )

    import dpaudit
    from dpaudit.attacks import lira
    from dpaudit.audit import roc_curve

    captured = []
    fit_and_score = lira.fit_and_score

    def capture(phi_shadow, member, phi_target, **kw):
        captured.append((np.array(phi_shadow), np.array(member), np.array(phi_target)))
        return fit_and_score(phi_shadow, member, phi_target, **kw)

    lira.fit_and_score = capture
    start = time.perf_counter()
    results = dpaudit.attack(
        target,
        data,
        ["loss", "lira"],
        shadow_models=args.shadows,
        workers=args.workers,
        mia_examples=args.examples,
        shadow_cache=str(root / "cache"),
        seed=0,
        blind_baseline=True,
        out=root / "attack",
        overwrite=True,
    )
    seconds = time.perf_counter() - start
    lira.fit_and_score = fit_and_score

    lira_result = results["lira"]
    print(
        f"\nSNIPS, {args.shadows} matched shadows, {args.workers} workers: attack wall {seconds / 60:.1f} min "
        f"(shadows cached: {lira_result.parameters.get('cached')})"
    )
    info = lira_result.shadow_models
    if info is not None:
        accs = [m.heldout_accuracy for m in info.models if m.heldout_accuracy is not None]
        print(
            f"target held-out accuracy {info.target_heldout_accuracy}, shadows mean {np.mean(accs):.3f} "
            f"(min {min(accs):.3f}, max {max(accs):.3f})"
        )
    print(f"\n  {'attack / task':<34} {'AUC [95% CI]':<24} {'TPR@0.1%':>9} {'TPR@1%':>8}")
    for result in results.attacks:
        for t in result.tasks:
            if t.task.startswith("canaries"):
                continue
            tprs = {round(x["fpr"], 4): x for x in t.tpr_at}

            def cell(f: float) -> str:
                x = tprs.get(f)
                return "-" if x is None else (f"{x['tpr']:.3f}" if x.get("enough_nonmembers", True) else "n/a")

            print(
                f"  {result.attack + ' / ' + t.task:<34} {t.auc:.3f} [{t.auc_ci[0]:.3f}, {t.auc_ci[1]:.3f}]   "
                f"{cell(0.001):>9} {cell(0.01):>8}"
            )

    reference_scores = reference_oracle()
    # The examples task is scored first (membership_tasks' order): its captured fit and the attack's own truth.
    phi_s, member, phi_t = captured[0]
    rows = [
        json.loads(line) for line in (root / "attack" / "scores" / "mia_lira.jsonl").read_text().splitlines() if line
    ]
    rows = [r for r in rows if r.get("task") == "examples"]
    truth = np.array([bool(r["member"]) for r in rows])
    ours = np.array([r["score"] for r in rows])
    if len(truth) != phi_t.shape[0]:
        raise SystemExit(f"captured {phi_t.shape[0]} candidates, the scores file has {len(truth)}")
    fix = args.shadows < lira.PER_EXAMPLE_VARIANCE_FROM
    online, _ = reference_scores(member, phi_s, phi_t, fix_variance=fix)
    ref_auc = roc_curve(-online[truth], -online[~truth]).auc()  # the reference's LOW = member
    our_auc = roc_curve(ours[truth], ours[~truth]).auc()
    print(
        f"\n  LiRA online, examples: ours {our_auc:.4f}, reference code's scoring on the same shadows {ref_auc:.4f} "
        f"(|diff| {abs(our_auc - ref_auc):.4f}; goal <= 0.01; variance {'fixed' if fix else 'per-example'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
