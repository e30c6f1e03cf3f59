"""What ``dpaudit inject --train/--heldout`` leaves for the blind baseline: the duplicate rule, and ``--resplit``.

Two measurements of the blind baseline (:func:`dpaudit.attacks.blind.blind_scores`, cross-fitted; AUC and its 95%
bootstrap CI from :func:`dpaudit.audit.audit_scores`) on the ``train.jsonl`` and ``heldout.jsonl`` that inject writes:

1. **Duplicates.** A duplicate-rich pool (``--pool`` texts drawn with Zipf-like repeats, exponent 0.9, from
   ``builtin:assistant`` utterances, as real intent data repeats its short requests) split at random into train and
   held-out files (4:1): both sides come from one distribution. The old rule (repeats kept among members, held-out
   copies of a train row removed) against the rule inject applies now (repeats collapsed on both sides, held-out
   copies removed; :func:`canaries.pipeline.load_user_split`), run through ``dpaudit.inject``.
2. **Re-split.** A split with a built-in shift (members: the utterances of half the intents, non-members: the other
   half's), as given and after ``--resplit`` (same sizes, pooled and drawn again).

Run: python benchmarks/bench_inject_duplicates.py [--pool 3000] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def blind_auc(train: list[str], held: list[str]) -> tuple[float, float, float]:
    from dpaudit.attacks.blind import blind_scores
    from dpaudit.audit import audit_scores

    member = np.r_[np.ones(len(train), bool), np.zeros(len(held), bool)]
    scores = blind_scores(train + held, None, member, seed=0)
    auc = audit_scores(scores[member], scores[~member], delta=1e-5, seed=0).auc
    return auc.value, auc.ci.low, auc.ci.high


def inject_texts(tmp: Path, name: str, train: list[str], held: list[str], *extra: str) -> tuple[list[str], list[str]]:
    from click.testing import CliRunner

    from dpaudit.cli import cli

    files = []
    for side, texts in (("train", train), ("heldout", held)):
        path = tmp / f"{name}-{side}.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        files.append(str(path))
    out = tmp / name
    args = ["inject", "--no-canaries", "--train", files[0], "--heldout", files[1], "--out", str(out), *extra]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output

    def read(f: str) -> list[str]:
        return [json.loads(line)["text"] for line in (out / f).read_text(encoding="utf-8").splitlines()]

    return read("train.jsonl"), read("heldout.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pool", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    from dpaudit.corpus import assistant
    from dpaudit.corpus.near_duplicates import normalize

    start, cpu = time.time(), time.process_time()
    rows = list(assistant.generate(args.pool // 2, 0))
    texts = [r["text"] for r in rows]
    weights = 1.0 / np.arange(1, len(texts) + 1) ** 0.9
    print("1. duplicates: blind AUC [95% CI] of train.jsonl vs heldout.jsonl (a random split of one pool)")
    print(f"{'seed':>4} {'rule':>5} {'members':>8} {'non-members':>11} {'blind AUC':>24}")
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for seed in range(args.seeds):
            rng = np.random.default_rng(seed)
            pool = [texts[i] for i in rng.choice(len(texts), size=args.pool, p=weights / weights.sum())]
            n_train = args.pool * 4 // 5
            train, held = pool[:n_train], pool[n_train:]
            keys = {normalize(t) for t in train}
            old = (train, [h for h in held if normalize(h) not in keys])
            new = inject_texts(tmp, f"dup{seed}", train, held)
            for rule, (tr, he) in (("old", old), ("new", new)):
                auc, low, high = blind_auc(tr, he)
                print(f"{seed:>4} {rule:>5} {len(tr):>8} {len(he):>11} {auc:>8.3f} [{low:.3f}, {high:.3f}]")
        print("2. --resplit: a split with a built-in shift (members: half the intents, non-members: the other half)")
        labels = sorted({r["label"] for r in rows})
        first = set(labels[: len(labels) // 2])
        shifted_train = [r["text"] for r in rows if r["label"] in first]
        shifted_held = [r["text"] for r in rows if r["label"] not in first][: len(shifted_train) // 4]
        tr, he = inject_texts(tmp, "given", shifted_train, shifted_held)
        auc, low, high = blind_auc(tr, he)
        print(
            f"  as given:           {len(tr)} members, {len(he)} non-members, blind AUC {auc:.3f} [{low:.3f}, {high:.3f}]"
        )
        for seed in range(args.seeds):
            tr, he = inject_texts(
                tmp, f"resplit{seed}", shifted_train, shifted_held, "--resplit", "--resplit-seed", str(seed)
            )
            auc, low, high = blind_auc(tr, he)
            print(
                f"  --resplit-seed {seed}:  {len(tr)} members, {len(he)} non-members, blind AUC {auc:.3f} "
                f"[{low:.3f}, {high:.3f}]"
            )
    print(f"wall {time.time() - start:.1f} s, CPU {time.process_time() - cpu:.1f} s")


if __name__ == "__main__":
    main()
