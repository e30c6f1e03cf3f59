"""Training-free membership attacks against the public start vs the loss attack, the blind baseline and a shadow-
trained attack, on a causal LM (or an intent classifier) fine-tuned non-privately on real text.

Setup (every step by dpaudit's own commands, printed): ``--corpus`` (SNIPS ``train.tsv``, read in place) is drawn at
random into members, held-out rows (non-members: the same distribution by construction) and public rows, written to
a temporary folder outside the repository for ``dpaudit inject --train/--heldout/--public`` (no canary); ``dpaudit train --trainer edp-sgd --task clm --data-split public``
trains the public start on the public rows; the target is fine-tuned from it (``--init-from``) non-privately on the
members. Then each attack runs alone through ``dpaudit.attack`` on the examples task (members vs held-out rows) and
is timed (wall and this process's CPU, model loading included): loss; the training-free base attacks (base-ratio,
error-zone, min-k++-base), which read the start from the target's ``privacy.json``; the blind baseline; and ``ref``,
which trains one reference model like the target on public rows (its training counted in its time). AUC [95% CI]
and TPR at 1% FPR [95% CI] from :func:`dpaudit.audit.audit_scores`.

With ``--task classify`` the target is an intent classifier (the start: a classifier trained on the public rows)
and the shadow-trained comparison is LiRA with 4 shadow models; error-zone and min-k++-base need a causal LM.

With ``--dp-epsilon 8`` it checks validity instead: ``--dp-seeds`` targets fine-tuned with DP-SGD from the one
start (each its own seed and noise seed), every attack's examples-task lower bound beside the accounted claim.

Without ``--corpus`` (or with ``--corpus builtin:assistant``) the rows are the built-in corpus's utterances and
intents, written first by ``dpaudit inject --corpus builtin:assistant --no-canaries``.

Run: python benchmarks/bench_reference_mia.py [--corpus ../shared/data/snips/train.tsv] [--task clm|classify]
  [--members 600] [--public 2000] [--start-epochs 3] [--epochs 12] [--preset tiny] [--seed 0]
  [--dp-epsilon 8 --dp-seeds 10 --dp-epochs 4]

Measured, the built-in corpus's classifier (``nice -n 10 python benchmarks/bench_reference_mia.py --task classify``,
shared 2-core machine at load 16-20; 599 members vs 599 non-members; wall and CPU of the attack alone, model loading
and LiRA's shadow training included):

==========  =====  ==============  =========  ======  =====
attack      AUC    95% CI          TPR@1%FPR  wall s  CPU s
==========  =====  ==============  =========  ======  =====
loss        0.566  [0.534, 0.597]  0.018      33.8    3.2
base-ratio  0.566  [0.534, 0.598]  0.025      9.0     0.9
blind       0.533  [0.501, 0.566]  0.017      87.3    8.8
lira (4)    0.559  [0.526, 0.591]  0.025      369.3   26.6
==========  =====  ==============  =========  ======  =====

base-ratio is within 0.02 AUC of LiRA with 4 shadows (+0.007) at 1/41 of its wall time (1/30 of its CPU); on this
corpus neither beats the blind baseline (its AUC interval's upper end 0.566): the tiny classifier fine-tuned 12 epochs
on 600 template utterances barely tells its members apart.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

#: --corpus's built-in choice: dpaudit's template corpus of assistant requests.
BUILTIN = "builtin:assistant"


def _run(args: list[str]) -> float:
    """Run ``dpaudit ARGS`` (printed), return its wall seconds."""
    cmd = [sys.executable, "-m", "dpaudit", *args]
    print("$ dpaudit " + " ".join(shlex.quote(a) for a in args), flush=True)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"dpaudit {args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--corpus",
        default=BUILTIN,
        help=f"A text corpus (SNIPS train.tsv), read in place, or {BUILTIN} (default: the built-in corpus's rows, "
        "written by dpaudit inject --no-canaries to the temporary folder first).",
    )
    parser.add_argument("--members", type=int, default=600, help="Members, and as many held-out rows.")
    parser.add_argument("--public", type=int, default=2000, help="Public rows (the start's training data).")
    parser.add_argument("--start-epochs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=12, help="Fine-tuning epochs of the target.")
    parser.add_argument("--preset", default="tiny", choices=("tiny", "mini"))
    parser.add_argument(
        "--task",
        default="clm",
        choices=("clm", "classify"),
        help="clm: a causal LM (ref as the shadow-trained comparison); classify: an intent classifier (LiRA with 4 "
        "shadows as the comparison).",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="Keep the runs in this folder (default: a temp one).")
    parser.add_argument(
        "--dp-epsilon",
        type=float,
        default=None,
        help="Validity instead: fine-tune --dp-seeds targets with DP-SGD at this epsilon from the one start and check "
        "that no attack's lower bound exceeds the claim.",
    )
    parser.add_argument("--dp-seeds", type=int, default=10)
    parser.add_argument("--dp-epochs", type=int, default=4)
    args = parser.parse_args()
    if args.corpus != BUILTIN and not Path(args.corpus).is_file():
        raise SystemExit(
            f"--corpus {args.corpus}: no such file; pass SNIPS train.tsv (../shared/data/snips/train.tsv) or {BUILTIN}."
        )
    print("$ " + shlex.join(["python", *sys.argv]), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-reference-mia-") as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        if args.corpus == BUILTIN:
            args.corpus = _builtin_corpus(root / "builtin", rows=2 * args.members + args.public, seed=args.seed)
        else:
            args.corpus = Path(args.corpus)
        _bench(args, root)


def _builtin_corpus(folder: Path, *, rows: int, seed: int) -> Path:
    """The built-in corpus's utterances and intents as one TSV (``text``, ``label``): ``dpaudit inject --corpus
    builtin:assistant --no-canaries`` writes 2x ``rows`` of them (its template grammar repeats some; the random split
    and inject's duplicate handling then see one pool, as for SNIPS), read back from its three files."""
    import json

    out = folder / "inject"
    _run(
        ["inject", "--corpus", BUILTIN, "--corpus-size", str(2 * rows), "--no-canaries", "--seed", str(seed)]
        + ["--out", str(out)]
    )
    lines = ["text\tlabel\n"]
    for name in ("train.jsonl", "heldout.jsonl", "public.jsonl"):
        path = out / name
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    row = json.loads(line)
                    lines.append(f"{row['text']}\t{row['label']}\n")
    corpus = folder / "corpus.tsv"
    corpus.write_text("".join(lines), encoding="utf-8")
    return corpus


def _random_split(corpus: Path, folder: Path, *, sizes: tuple[int, int, int], seed: int) -> list[Path]:
    """Three disjoint random draws of the corpus's rows (train, held-out, public: one distribution by construction),
    as TSV files in ``folder`` (a temporary folder outside the repository, removed afterwards)."""
    import csv

    import numpy as np

    with corpus.open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if r]
    header, rows = (rows[0], rows[1:]) if rows and rows[0][:1] == ["text"] else (["text", "label"], rows)
    if sum(sizes) > len(rows):
        raise SystemExit(f"--corpus {corpus}: {len(rows)} rows, fewer than the {sum(sizes)} asked for.")
    order = np.random.default_rng([seed, 0x5245]).permutation(len(rows))
    folder.mkdir(parents=True, exist_ok=True)
    out, start = [], 0
    for name, size in zip(("train", "heldout", "public"), sizes):
        path = folder / f"{name}.tsv"
        lines = [header] + [rows[i] for i in order[start : start + size]]
        # written as read: tab-separated, no quoting (dpaudit's TSV reader and the corpus's own format)
        path.write_text("".join("\t".join(r) + "\n" for r in lines), encoding="utf-8")
        out.append(path)
        start += size
    return out


def _bench(args: argparse.Namespace, root: Path) -> None:
    data, start, target = root / "data", root / "start", root / "target"
    n = args.members
    common = ["--trainer", "edp-sgd", "--task", args.task, "--preset", args.preset, "--max-length", "48"]
    # --noise-seed fixes the batch order too (drawn from the secret stream otherwise): a rerun trains the same models
    common += ["--batch-size", "16", "--seed", str(args.seed), "--noise-seed", str(args.seed), "--non-private"]
    setup = {}
    if args.keep is not None and (target / "manifest.json").is_file():  # the runs of an earlier call: attacks only
        print(f"reusing the runs in {root} (remove it to train them again)\n", flush=True)
        if args.dp_epsilon is not None:
            return _validity(args, root, data, start)
        return _attacks(args, root, data, target)
    files = _random_split(args.corpus, root / "split", sizes=(n, n, args.public), seed=args.seed)
    setup["inject"] = _run(
        ["inject", "--train", str(files[0]), "--heldout", str(files[1]), "--public", str(files[2])]
        + ["--no-canaries", "--seed", str(args.seed), "--out", str(data)]
    )
    setup["public start"] = _run(
        ["train", *common, "--data", str(data), "--data-split", "public", "--epochs", str(args.start_epochs)]
        + ["--out", str(start)]
    )
    setup["fine-tune"] = _run(
        ["train", *common, "--data", str(data), "--init-from", str(start), "--epochs", str(args.epochs)]
        + ["--learning-rate", "1e-3", "--out", str(target)]
    )
    print(
        f"\nsetup seconds: inject {setup['inject']:.1f}, public start {setup['public start']:.1f}, "
        f"fine-tuning {setup['fine-tune']:.1f}; {os.getloadavg()[0]:.1f} load average (1 min), "
        f"{os.cpu_count()} cores\n",
        flush=True,
    )
    if args.dp_epsilon is not None:
        return _validity(args, root, data, start)
    _attacks(args, root, data, target)


def _validity(args: argparse.Namespace, root: Path, data: Path, start: Path) -> None:
    """DP targets from the one start, one per seed (its own noise seed): each attack's examples-task lower bound
    (rounded down) beside the accounted claim (rounded up); none may exceed it."""
    import dpaudit
    from dpaudit.common.figures import format_down, format_up

    free = ("base-ratio", "error-zone", "min-k++-base") if args.task == "clm" else ("base-ratio",)
    names = ["loss", *free]
    print(f"validity: {args.dp_seeds} DP-SGD targets at --target-epsilon {args.dp_epsilon:g}, {args.dp_epochs} epochs")
    print(f"{'seed':>4} {'claim eps':>9} " + " ".join(f"{n + ' AUC/LB':>22}" for n in names) + f" {'train s':>8}")
    exceed, worst = 0, 0.0
    for seed in range(args.dp_seeds):
        out = root / f"dp-{seed}"
        seconds = 0.0
        if not (out / "manifest.json").is_file():
            run = ["train", "--trainer", "edp-sgd", "--task", args.task, "--preset", args.preset, "--max-length", "48"]
            run += ["--batch-size", "16", "--seed", str(seed), "--noise-seed", str(1000 + seed), "--data", str(data)]
            run += ["--init-from", str(start), "--epochs", str(args.dp_epochs)]
            seconds = _run([*run, "--target-epsilon", f"{args.dp_epsilon:g}", "--out", str(out)])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = dpaudit.attack(out, data, names, progress=False, blind_baseline=False)
        cells, claim = [], None
        for name in names:
            task = results[name]["examples"]
            claim = task.claimed_epsilon
            exceed += bool(task.exceeds_claim)
            worst = max(worst, task.epsilon_lower_bound)
            cells.append(f"{task.auc:.3f}/{format_down(task.epsilon_lower_bound)}")
        print(
            f"{seed:>4} {format_up(claim):>9} " + " ".join(f"{c:>22}" for c in cells) + f" {seconds:8.1f}", flush=True
        )
    print(
        f"\n{args.dp_seeds} targets x {len(names)} attacks: {exceed} lower bounds above the claim; the largest "
        f"{format_down(worst)} (claim {args.dp_epsilon:g}; each bound at 95% for its audit alone, heuristic: the "
        "examples of one model)"
    )


def _attacks(args: argparse.Namespace, root: Path, data: Path, target: Path) -> None:
    import shutil

    import dpaudit

    shutil.rmtree(root / "shadows", ignore_errors=True)  # the shadow-trained attack trains its models in its time
    import sklearn.linear_model  # noqa: F401 - imported before the clocks start: no attack's time is an import's
    import torch  # noqa: F401
    import transformers  # noqa: F401

    free = ("base-ratio", "error-zone", "min-k++-base") if args.task == "clm" else ("base-ratio",)
    shadowed = (
        ("ref", {"shadow_cache": str(root / "shadows")})
        if args.task == "clm"
        else ("lira", {"shadow_cache": str(root / "shadows"), "shadow_models": 4})
    )
    attacks = [("loss", {}), *((name, {}) for name in free), ("blind", {}), shadowed]
    rows = []
    for name, extra in attacks:
        wall, cpu = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = dpaudit.attack(
                target,
                data,
                [name],
                progress=False,
                blind_baseline=name == "blind",
                **extra,
            )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        task = results[name]["examples"]
        at1 = next(t for t in task.tpr_at if abs(t["fpr"] - 0.01) < 1e-12)
        rows.append((name, task, at1, wall, cpu))
    members = rows[0][1].n_members
    near = rows[0][1].info.get("near_duplicates", {})
    print(
        f"examples task: {members} members vs {rows[0][1].n_nonmembers} non-members (random split of one corpus); "
        f"near-duplicate pairs (5-gram Jaccard >= {near.get('threshold')}): {near.get('pairs')}, left out "
        f"{near.get('members_excluded')} members and {near.get('nonmembers_excluded')} non-members; collapsed within "
        f"a side: {near.get('collapsed_within_train')} train, {near.get('collapsed_within_heldout')} held-out rows"
    )
    print(f"{'attack':>13} {'AUC':>6} {'95% CI':>16} {'TPR@1%FPR':>10} {'95% CI':>16} {'wall s':>7} {'CPU s':>7}")
    for name, task, at1, wall, cpu in rows:
        ci = f"[{task.auc_ci[0]:.3f}, {task.auc_ci[1]:.3f}]"
        tci = f"[{at1['ci'][0]:.3f}, {at1['ci'][1]:.3f}]"
        print(f"{name:>13} {task.auc:6.3f} {ci:>16} {at1['tpr']:10.3f} {tci:>16} {wall:7.1f} {cpu:7.1f}")
    by = {name: (task, at1, wall) for name, task, at1, wall, _ in rows}
    best = max(free, key=lambda a: by[a][1]["tpr"])
    other = shadowed[0]
    loss_tpr = by["loss"][1]["tpr"]
    ratio = by[best][1]["tpr"] / loss_tpr if loss_tpr > 0 else float("inf")
    trains = "one reference model" if other == "ref" else "4 shadow models"
    print(
        f"\nbest training-free attack by TPR at 1% FPR: {best}, {ratio:.2f}x the loss attack's; AUC {by[best][0].auc:.3f} "
        f"vs {other}'s {by[other][0].auc:.3f} ({by[best][0].auc - by[other][0].auc:+.3f}); wall time {by[best][2]:.1f} s vs "
        f"{other}'s {by[other][2]:.1f} s ({by[other][2] / by[best][2]:.1f}x, {other} trains {trains}); its AUC CI "
        f"lower end {by[best][0].auc_ci[0]:.3f} vs the blind AUC CI upper end {by['blind'][0].auc_ci[1]:.3f}"
    )


if __name__ == "__main__":
    main()
