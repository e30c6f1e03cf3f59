"""Dupuy et al. 2021 Table 1 / Yu et al. 2021 Tables 4-5 in miniature: MIA AUC and accuracy of sgd vs dp-sgd vs edp-sgd vs rgp on SNIPS.

Intent classification on SNIPS (read in place from ``--snips DIR``'s ``train.tsv``, never copied):
``dpaudit inject`` draws train/heldout/public splits from it (no canaries are needed beyond a few
controls), one classifier is trained per mode — ``sgd``, ``dp-sgd`` and ``edp-sgd`` by the
``edp-sgd`` trainer (``--task classify --mode ...``), ``rgp`` by the ``rgp`` trainer (Yu et al. 2021),
the private modes at one ``--epsilon`` — and ``dpaudit attack`` runs the loss and shadow-model
membership attacks on each (members = train rows, non-members = heldout rows; shadow models are
trained by the target's trainer). The table prints, per mode: the accountant's epsilon, heldout
accuracy, and MIA AUC [95% CI] with the empirical epsilon lower bound. The papers' finding to
reproduce: MIA AUC falls toward 0.5 under (e)DP-SGD and RGP at a small cost in accuracy, and RGP is
more accurate than DP-SGD at the same epsilon.

``--modes`` picks the modes (default: every mode whose trainer is registered in this install; if
none is, the script says so and exits 0).

Run: python benchmarks/bench_mia.py --snips PATH/TO/snips [--modes sgd,dp-sgd,edp-sgd,rgp] [--heldout 1000]
     [--public 2000] [--epsilon 8] [--shadow-models 2] [--out /tmp/bench_mia] [--train-arg --epochs=3 ...]
     [--edp-arg --micro-batches=8 ...] [--rgp-arg --rank=8 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

MODES = ("sgd", "dp-sgd", "edp-sgd", "rgp")
TRAINER_OF = {"sgd": "edp-sgd", "dp-sgd": "edp-sgd", "edp-sgd": "edp-sgd", "rgp": "rgp"}


def cli(*args: str) -> str:
    from click.testing import CliRunner

    from dpaudit.cli import cli as group

    result = CliRunner().invoke(group, list(args), catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(f"dpaudit {' '.join(args[:2])} failed:\n{result.output}")
    return result.output


def accuracy(model: Path, data: Path) -> float:
    import numpy as np

    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.scoring import load

    run = load_inject_run(data)
    held = run.split("heldout.jsonl")
    scorer = load(model, progress=False)
    labels = scorer.source.label_set()  # the model's own id2label, not the data's labels
    ids = [labels.id_of(lab) for lab in held.labels]
    keep = [i for i, class_id in enumerate(ids) if class_id is not None]  # a label the model lacks: left out
    probs = scorer.class_probs([held.texts[i] for i in keep])
    return float((probs.argmax(1) == np.asarray([ids[i] for i in keep])).mean())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snips", type=Path, required=True, help="SNIPS directory holding train.tsv (read in place).")
    parser.add_argument(
        "--heldout", type=int, default=1000, help="Non-member rows (>= 1000 measures TPR at 0.1%% FPR)."
    )
    parser.add_argument("--public", type=int, default=2000, help="Public rows (shadow models train on halves).")
    parser.add_argument("--epsilon", type=float, default=8.0, help="Target epsilon of the private modes.")
    parser.add_argument("--shadow-models", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/dpaudit_bench_mia"))
    parser.add_argument(
        "--modes",
        default=None,
        help=f"Comma-separated subset of {','.join(MODES)} (default: all whose trainer is registered).",
    )
    parser.add_argument(
        "--train-arg",
        action="append",
        default=[],
        help="Extra 'dpaudit train' option of every mode (repeatable), e.g. --train-arg=--epochs=3.",
    )
    parser.add_argument(
        "--edp-arg", action="append", default=[], help="Extra option of the edp-sgd trainer's modes only."
    )
    parser.add_argument(
        "--rgp-arg", action="append", default=[], help="Extra option of the rgp mode only, e.g. --rank=8."
    )
    args = parser.parse_args()

    from dpaudit.training.api import available_trainers

    registered = set(available_trainers())
    if args.modes is None:
        modes = [m for m in MODES if TRAINER_OF[m] in registered]
    else:
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        unknown = [m for m in modes if m not in MODES]
        if unknown:
            raise SystemExit(f"--modes: unknown mode(s) {', '.join(unknown)}; choose from {', '.join(MODES)}.")
        missing = [m for m in modes if TRAINER_OF[m] not in registered]
        if missing:
            raise SystemExit(f"--modes {','.join(missing)}: trainer {TRAINER_OF[missing[0]]} is not registered here.")
    if not modes:
        print(
            "bench_mia: neither the edp-sgd nor the rgp trainer is registered in this install; skipping. "
            f"Registered trainers: {', '.join(sorted(registered)) or 'none'}."
        )
        return 0
    corpus = args.snips / "train.tsv"
    if not corpus.is_file():
        raise SystemExit(f"--snips {args.snips}: no train.tsv there.")
    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "data"
    if not data.exists():
        cli(
            "inject",
            "--corpus",
            str(corpus),
            "--heldout-size",
            str(args.heldout),
            "--public-size",
            str(args.public),
            "--frequencies",
            "1",
            "--per-frequency",
            "4",
            "--seed",
            "0",
            "--out",
            str(data),
        )
    rows = []
    for mode in modes:
        model = args.out / f"model-{mode}"
        privacy = [] if mode == "sgd" else ["--target-epsilon", str(args.epsilon)]
        trainer = TRAINER_OF[mode]
        specific = ["--mode", mode, *args.edp_arg] if trainer == "edp-sgd" else list(args.rgp_arg)
        start = time.perf_counter()
        if not (model / "manifest.json").is_file():
            cli(
                "train",
                "--trainer",
                trainer,
                "--task",
                "classify",
                *specific,
                *privacy,
                *args.train_arg,
                "--seed",
                "0",
                "--data",
                str(data),
                "--out",
                str(model),
            )
        train_s = time.perf_counter() - start
        attack = args.out / f"attack-{mode}"
        cli(
            "attack",
            "--model",
            str(model),
            "--data",
            str(data),
            "--out",
            str(attack),
            "--overwrite",
            "--attacks",
            "loss,shadow",
            "--shadow-models",
            str(args.shadow_models),
            "--shadow-cache",
            str(args.out / "shadows"),
        )
        results = json.loads((attack / "results.json").read_text())
        mia = {a["attack"]: a["tasks"][0] for a in results["attacks"]}
        eps = results["claimed_privacy"].get("epsilon")
        rows.append((mode, eps, accuracy(model, data), mia, train_s))
    print(
        f"{'mode':>8} {'epsilon':>8} {'accuracy':>9} {'loss AUC [CI]':>22} {'shadow AUC [CI]':>22} {'eps LB':>7} {'train s':>8}"
    )
    for mode, eps, acc, mia, train_s in rows:
        cells = [f"{m['auc']:.3f} [{m['auc_ci'][0]:.3f}, {m['auc_ci'][1]:.3f}]" for m in (mia["loss"], mia["shadow"])]
        lb = max(mia["loss"]["epsilon_lower_bound"], mia["shadow"]["epsilon_lower_bound"])
        print(
            f"{mode:>8} {'inf' if eps is None else f'{eps:.2f}':>8} {acc:>9.3f} {cells[0]:>22} {cells[1]:>22} "
            f"{lb:>7.3f} {train_s:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
