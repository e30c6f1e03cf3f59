"""`dpaudit inject --train --heldout [--public]`: a user's own split kept, duplicates removed and counted, canaries
into the train rows only; default frequencies chosen from the training rows."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.canaries.insert import DEFAULT_FREQUENCIES, default_frequencies
from dpaudit.cli import cli
from dpaudit.files.run_dirs import read_jsonl
from dpaudit.inject_dir.reader import canary_frequencies, load_inject_run
from tests.cli.test_inject_cli import one_line_error  # the inject CLI's one-line error check


def invoke(*args: str):
    return CliRunner().invoke(cli, ["inject", *args], catch_exceptions=False)


def write_csv(path: Path, rows: list[tuple[str, str]], header: str = "text,category") -> Path:
    body = "".join(f"{t},{label}\n" if "," in header else f"{t}\n" for t, label in rows)
    path.write_text(header + "\n" + body, encoding="utf-8")
    return path


ROWS = [(f"set an alarm for item {i}", f"intent{i % 3}") for i in range(200)]


@pytest.fixture
def split_files(tmp_path):
    # train 0-119; heldout 110-169 (10 exact duplicates of train rows); public 160-199 (10 duplicates of heldout rows)
    return (
        write_csv(tmp_path / "train.csv", ROWS[:120]),
        write_csv(tmp_path / "test.csv", ROWS[110:170]),
        write_csv(tmp_path / "public.csv", ROWS[160:]),
    )


def test_a_users_split_is_kept_and_exact_duplicates_are_removed_and_counted(split_files, tmp_path):
    train, heldout, public = split_files
    out = tmp_path / "run"
    result = invoke(
        "--train",
        str(train),
        "--heldout",
        str(heldout),
        "--public",
        str(public),
        "--label-column",
        "category",
        "--out",
        str(out),
        "--frequencies",
        "1,3",
        "--per-frequency",
        "2",
    )
    assert result.exit_code == 0, result.output
    assert "10 --heldout rows equal to a --train row removed (10 --train rows had such a copy)" in result.output
    assert "10 --public rows equal to a --train or --heldout row removed" in result.output
    run = load_inject_run(out)
    canaries = run.canaries
    assert Counter(c.frequency for c in canaries) == {1: 2, 3: 2, 0: 2}
    train_rows = list(read_jsonl(out / "train.jsonl"))
    canary_texts = {c.text for c in canaries}
    members = [(r["text"], r["label"]) for r in train_rows if r["text"] not in canary_texts]
    assert sorted(members) == sorted(ROWS[:120])  # every train row, nothing else
    assert Counter(r["text"] for r in train_rows if r["text"] in canary_texts) == {
        c.text: c.frequency for c in canaries if c.member
    }
    assert sorted((r["text"], r["label"]) for r in read_jsonl(out / "heldout.jsonl")) == sorted(ROWS[120:170])
    assert sorted((r["text"], r["label"]) for r in read_jsonl(out / "public.jsonl")) == sorted(ROWS[170:])
    manifest = run.manifest
    removed = manifest["counts"]["overlap_removed"]
    assert (removed["heldout_in_train"], removed["train_rows_in_heldout"], removed["public_in_train_or_heldout"]) == (
        10,
        10,
        10,
    )
    assert removed["train_duplicates_collapsed"] == removed["heldout_duplicates_collapsed"] == 0
    assert (manifest["counts"]["members"], manifest["counts"]["heldout"], manifest["counts"]["public"]) == (120, 50, 30)
    assert set(manifest["inputs"]) == {str(train), str(heldout), str(public)}
    assert manifest["corpus"]["files"]["heldout"] == {
        "path": str(heldout),
        "format": "csv",
        "rows": 60,
        "kept": 50,
        "blank_skipped": 0,
        "replaced_lines": 0,
    }
    assert manifest["config"]["label_column"] == "category" and "corpus_size" in manifest["config"]
    # the same files and seed give the same bytes
    again = tmp_path / "again"
    assert (
        invoke(
            "--train",
            str(train),
            "--heldout",
            str(heldout),
            "--public",
            str(public),
            "--label-column",
            "category",
            "--out",
            str(again),
            "--frequencies",
            "1,3",
            "--per-frequency",
            "2",
        ).exit_code
        == 0
    )
    for name in ("train.jsonl", "heldout.jsonl", "public.jsonl", "canaries.jsonl"):
        assert (again / name).read_bytes() == (out / name).read_bytes(), name


def test_no_canaries_and_no_public_write_the_rows_alone_and_say_what_an_empty_public_split_means(split_files, tmp_path):
    train, heldout, _ = split_files
    out = tmp_path / "run"
    result = invoke(
        "--train",
        str(train),
        "--heldout",
        str(heldout),
        "--label-column",
        "category",
        "--no-canaries",
        "--out",
        str(out),
        "--json",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["mode"] == "no-canaries" and summary["counts"]["canaries"] == 0
    assert "dpaudit train" in summary["public_split"] and "need --public FILE" in summary["public_split"]
    assert (out / "canaries.jsonl").read_bytes() == b"" and (out / "public.jsonl").read_bytes() == b""
    assert sorted(r["text"] for r in read_jsonl(out / "train.jsonl")) == sorted(t for t, _ in ROWS[:120])
    run = load_inject_run(out)
    assert run.canaries == [] and canary_frequencies(run.manifest) == ()  # no group-privacy line for absent canaries
    text = invoke(
        "--train",
        str(train),
        "--heldout",
        str(heldout),
        "--label-column",
        "category",
        "--no-canaries",
        "--out",
        str(tmp_path / "printed"),
    ).output
    assert "No canaries (--no-canaries)" in text and "public.jsonl is empty" in text


@pytest.mark.parametrize(
    ("make", "args", "needles"),
    [
        (lambda d: [], ["--train", "{train}"], ["--train needs --heldout FILE"]),
        (
            lambda d: [],
            ["--corpus", "builtin:assistant", "--train", "{train}", "--heldout", "{heldout}"],
            ["--corpus and --train both name the rows"],
        ),
        (
            lambda d: [],
            ["--train", "{train}", "--heldout", "{heldout}", "--heldout-size", "5"],
            ["--heldout-size splits --corpus"],
        ),
        (
            lambda d: [],
            ["--train", "{train}", "--heldout", "{heldout}", "--no-canaries", "--frequencies", "1"],
            ["--frequencies sets the canaries, and --no-canaries writes none"],
        ),
        (
            lambda d: [],
            ["--corpus", "builtin:assistant", "--public", "{heldout}"],
            ["--public applies to your own split"],
        ),
        (lambda d: [], [], ["dpaudit inject needs rows"]),
        (
            lambda d: write_csv(d / "test.csv", ROWS[:30]),
            ["--train", "{train}", "--heldout", "{heldout}"],
            ["--heldout", "every one of its 30 rows is an exact duplicate of a --train row"],
        ),
        (
            lambda d: (
                write_csv(d / "train.csv", ROWS[:120], header="text,label"),
                write_csv(d / "test.csv", ROWS[150:170], header="text"),
            ),
            ["--train", "{train}", "--heldout", "{heldout}"],
            ["--heldout", "has no labels but --train", "has labels"],
        ),
        (
            lambda d: (d / "test.csv").write_text("text,category\n", encoding="utf-8"),
            ["--train", "{train}", "--heldout", "{heldout}"],
            ["--heldout", "no examples"],
        ),
    ],
)
def test_bad_split_input_is_one_line_and_writes_nothing(split_files, tmp_path, make, args, needles):
    train, heldout, _ = split_files
    make(tmp_path)
    out = tmp_path / "deep" / "run"
    default_columns = "label" in (tmp_path / "train.csv").read_text().splitlines()[0]
    label = ["--label-column", "category"] if "{train}" in args and not default_columns else []
    filled = [a.format(train=train, heldout=heldout) for a in args]
    one_line_error(invoke(*filled, *label, "--out", str(out)), *needles)
    assert not out.exists() and not (tmp_path / "deep").exists()


def test_default_frequencies_fit_a_4000_row_corpus_without_flags(tmp_path):
    assert default_frequencies(14_000, 20) == DEFAULT_FREQUENCIES  # the 20,000-row default keeps its schedule
    assert default_frequencies(2_800, 20) == (1, 2, 5, 10, 20)
    assert default_frequencies(10, 20) == (1,)  # then the 50% check decides
    out = tmp_path / "run"
    result = invoke("--corpus", "builtin:assistant", "--corpus-size", "4000", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output  # before: 20 x (1..10, 20, 50, 100) = 4,500 canary rows, refused
    summary = json.loads(result.output)
    counts = summary["counts"]
    assert counts["members"] == 2800 and counts["canary_insertions"] == 20 * (1 + 2 + 5 + 10 + 20)
    assert (
        counts["canary_share"] <= 0.25 and "1,2,5,10,20 chosen for 2,800 training rows" in summary["frequencies_chosen"]
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["config"]["schedule"]["frequencies"] == [1, 2, 5, 10, 20]
        and manifest["config"]["frequencies_from_size"]
    )
    small = json.loads(
        invoke(
            "--corpus", "builtin:assistant", "--corpus-size", "50", "--out", str(tmp_path / "small"), "--json"
        ).stdout
    )  # stderr warns: its 10 public rows lack 7 of the labels
    assert small["counts"]["canary_share"] == 20 / (35 + 20)  # 1 insertion x 20 canaries: no default fits 25%
    assert "the shortest default schedule, and still 36.36% canary rows" in small["frequencies_chosen"]
