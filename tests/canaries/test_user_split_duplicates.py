"""`dpaudit inject --train --heldout`: duplicates treated by one rule on both sides, and `--resplit`.

The rule (docs/canaries.md, "Splits, labels and randomness"): rows equal after normalization collapse to one row
within train, held-out and public alike; a held-out row equal to a train row is removed and the train row counted;
near-duplicate pairs are counted and kept (the attack leaves both ends out). `--resplit` pools train and held-out
rows and draws them again, same sizes, reproducibly from a public seed.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import read_jsonl
from tests.cli.test_inject_cli import one_line_error


def invoke(*args: str):
    return CliRunner().invoke(cli, ["inject", "--no-canaries", *args], catch_exceptions=False)


def write(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    return path


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()
# distinct rows, far apart (no two share enough 5-grams to be near duplicates)
UNIQUE = [f"{WORDS[i % 13]} {i * 7919} {WORDS[(i * 5) % 13]} zone {i}" for i in range(60)]


def texts_of(path: Path) -> list[str]:
    return [r["text"] for r in read_jsonl(path)]


def test_duplicates_on_both_sides_are_treated_alike_and_counted(tmp_path):
    train = UNIQUE[:30] + [UNIQUE[0], UNIQUE[1].upper() + "!", UNIQUE[2]]  # 3 repeats among members
    heldout = UNIQUE[30:50] + [UNIQUE[30], UNIQUE[31] + " ."]  # 2 repeats among non-members
    heldout += [UNIQUE[3], UNIQUE[4].title(), UNIQUE[4]]  # 3 copies of 2 train rows
    heldout += [UNIQUE[5] + " x"]  # a near duplicate of a train row: counted, kept
    public = UNIQUE[50:] + [UNIQUE[50], UNIQUE[6], UNIQUE[40]]  # 1 repeat, 2 copies of private rows
    out = tmp_path / "run"
    files = [write(tmp_path / f"{n}.txt", t) for n, t in (("train", train), ("test", heldout), ("public", public))]
    result = invoke("--train", str(files[0]), "--heldout", str(files[1]), "--public", str(files[2]), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "3 --train and 2 --heldout repeats collapsed to one row" in result.output
    assert "3 --heldout rows equal to a --train row removed (2 --train rows had such a copy)" in result.output
    assert "1 member/non-member pairs of near duplicates kept" in result.output

    assert sorted(texts_of(out / "train.jsonl")) == sorted(UNIQUE[:30])  # one row per member text
    assert sorted(texts_of(out / "heldout.jsonl")) == sorted(UNIQUE[30:50] + [UNIQUE[5] + " x"])
    assert sorted(texts_of(out / "public.jsonl")) == sorted(UNIQUE[50:])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["overlap_removed"] == {
        "train_duplicates_collapsed": 3,
        "heldout_duplicates_collapsed": 2,
        "heldout_in_train": 3,
        "train_rows_in_heldout": 2,
        "near_duplicate_pairs": 1,
        "public_duplicates_collapsed": 1,
        "public_in_train_or_heldout": 2,
    }
    assert "within each of train, held-out and public alike" in manifest["duplicates_rule"]
    assert manifest["corpus"]["near_duplicate_threshold"] == 0.8


def test_resplit_keeps_the_sizes_permutes_the_rows_and_is_reproducible(tmp_path):
    train = write(tmp_path / "train.txt", UNIQUE[:40])
    heldout = write(tmp_path / "test.txt", [f"other template {t}" for t in UNIQUE[40:]])
    given = sorted(UNIQUE[:40] + [f"other template {t}" for t in UNIQUE[40:]])

    def run(name: str, *extra: str) -> Path:
        out = tmp_path / name
        result = invoke("--train", str(train), "--heldout", str(heldout), "--out", str(out), "--resplit", *extra)
        assert result.exit_code == 0, result.output
        assert "Re-split (--resplit" in result.output
        return out

    a, b, c = run("a", "--resplit-seed", "11"), run("b", "--resplit-seed", "11"), run("c", "--resplit-seed", "12")
    members, nonmembers = texts_of(a / "train.jsonl"), texts_of(a / "heldout.jsonl")
    assert (len(members), len(nonmembers)) == (40, 20)  # the sizes given
    assert sorted(members + nonmembers) == given  # a permutation of the pooled rows, nothing added or lost
    assert 0 < sum(t.startswith("other template") for t in members) < 20  # both sources on both sides
    for name in ("train.jsonl", "heldout.jsonl"):
        assert (a / name).read_bytes() == (b / name).read_bytes()  # the same seed, the same split
    assert set(texts_of(c / "train.jsonl")) != set(members)  # another seed, another draw
    record = json.loads((a / "manifest.json").read_text())["resplit"]
    assert (record["seed"], record["train"], record["heldout"]) == (11, 40, 20)
    assert "not a privacy mechanism" in record["note"]
    assert json.loads((run("d") / "manifest.json").read_text())["resplit"]["seed"] == 0  # --seed by default


def test_resplit_options_are_refused_where_they_mean_nothing(tmp_path):
    one_line_error(invoke("--corpus", "builtin:assistant", "--out", str(tmp_path / "x"), "--resplit"), "--resplit")
    train = write(tmp_path / "train.txt", UNIQUE[:10])
    heldout = write(tmp_path / "test.txt", UNIQUE[10:20])
    seed_alone = invoke(
        "--train", str(train), "--heldout", str(heldout), "--out", str(tmp_path / "y"), "--resplit-seed", "3"
    )
    one_line_error(seed_alone, "--resplit-seed", "--resplit")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
    help_text = " ".join(CliRunner().invoke(cli, ["inject", "--help"]).output.split())
    assert "--resplit-seed" in help_text and "The split is not a privacy mechanism: the seed is public" in help_text


def test_resplit_counts_the_near_duplicate_pairs_of_the_split_it_wrote(tmp_path):
    from dpaudit.corpus.near_duplicates import cross_pairs

    train = write(tmp_path / "train.txt", UNIQUE[:39] + [UNIQUE[0] + " x"])  # a near-duplicate pair within train
    heldout = write(tmp_path / "test.txt", UNIQUE[40:])
    counts = []
    for seed in range(8):
        out = tmp_path / f"s{seed}"
        args = ("--train", str(train), "--heldout", str(heldout), "--out", str(out), "--resplit")
        result = invoke(*args, "--resplit-seed", str(seed))
        assert result.exit_code == 0, result.output
        written = cross_pairs(texts_of(out / "train.jsonl"), texts_of(out / "heldout.jsonl"))
        count = json.loads((out / "manifest.json").read_text())["counts"]["overlap_removed"]["near_duplicate_pairs"]
        assert count == len(written.pairs)  # the pairs of train.jsonl x heldout.jsonl, not of the files given
        counts.append(count)
    assert set(counts) == {0, 1}  # the within-train pair lands on both sides under some seeds, one side under others
