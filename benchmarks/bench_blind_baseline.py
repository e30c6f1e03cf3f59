"""The blind baseline on real intent data: members = SNIPS train rows, non-members = SNIPS test rows.

Das et al. (2024): a classifier that never queries the model can tell members from non-members when the two
are not drawn from one distribution. This measures :func:`dpaudit.attacks.blind.blind_scores` (cross-fitted,
so each AUC is out of sample) on SNIPS read in place from ``--snips DIR`` (``train.tsv`` and ``test.tsv``,
``text<TAB>label``; never copied): ``--per-side`` rows of ``train.tsv`` drawn by seed (members) against as
many of ``test.tsv`` (non-members), with every feature group and each alone. The control draws both sides
from ``train.tsv`` (disjoint halves, exchangeable by construction): its AUC must cover 0.5. AUC [95% CI] from
:func:`dpaudit.audit.audit_scores` (bootstrap), the mean over ``--seeds`` draws with the first draw's CI.

Run: python benchmarks/bench_blind_baseline.py --snips ../shared/data/snips [--per-side 700] [--seeds 3]
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

import numpy as np


def read_tsv(path: Path) -> tuple[list[str], list[str]]:
    with path.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if r]
    if rows and rows[0][:2] == ["text", "label"]:
        rows = rows[1:]
    return [r[0] for r in rows], [r[1] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--snips", type=Path, required=True, help="Folder with SNIPS train.tsv and test.tsv (read in place)."
    )
    parser.add_argument("--per-side", type=int, default=700)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    from dpaudit.attacks.blind import blind_scores
    from dpaudit.audit import audit_scores

    train_x, train_y = read_tsv(args.snips / "train.tsv")
    test_x, test_y = read_tsv(args.snips / "test.tsv")
    names = sorted(set(train_y) | set(test_y))
    code = {name: i for i, name in enumerate(names)}
    n = min(args.per_side, len(test_x))
    variants = {
        "text + length + label": ("text", "length", "label"),
        "text only": ("text",),
        "length only": ("length",),
        "label only": ("label",),
        "text + length": ("text", "length"),
    }
    print(
        f"SNIPS blind baseline: {n} train rows (members) vs {n} test rows (non-members), {args.seeds} draws; "
        "AUC mean over draws, [95% CI] of draw 0"
    )
    print(f"{'setting':>28} {'features':>22} {'AUC':>6} {'95% CI':>16} {'seconds':>8}")
    for setting in ("train vs test", "train vs train (control)"):
        for label, features in variants.items():
            aucs, ci, start = [], None, time.perf_counter()
            for seed in range(args.seeds):
                rng = np.random.default_rng([seed, 0xB11D])
                pick = rng.permutation(len(train_x))
                members = pick[:n]
                if setting == "train vs test":
                    others = rng.choice(len(test_x), size=n, replace=False)
                    texts = [train_x[i] for i in members] + [test_x[i] for i in others]
                    labels = [code[train_y[i]] for i in members] + [code[test_y[i]] for i in others]
                else:
                    others = pick[n : 2 * n]
                    texts = [train_x[i] for i in np.r_[members, others]]
                    labels = [code[train_y[i]] for i in np.r_[members, others]]
                member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
                scores = blind_scores(texts, labels, member, seed=seed, features=features)
                audit = audit_scores(scores[member], scores[~member], delta=1e-5, seed=seed)
                aucs.append(audit.auc.value)
                ci = ci or (audit.auc.ci.low, audit.auc.ci.high)
            seconds = (time.perf_counter() - start) / args.seeds
            print(
                f"{setting:>28} {label:>22} {np.mean(aucs):>6.3f} {f'[{ci[0]:.3f}, {ci[1]:.3f}]':>16} {seconds:>8.2f}"
            )


if __name__ == "__main__":
    main()
