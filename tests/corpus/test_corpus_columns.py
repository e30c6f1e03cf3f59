"""--text-column/--label-column for CSV, TSV and JSONL, and the refusal of a file whose labels sit in another column."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.corpus import CorpusReader


def rows(path, **kw):
    return [tuple(r) for r in CorpusReader(path, **kw)]


def test_named_columns_in_csv_tsv_and_jsonl(tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text("id,Utterance,Category\n1,wake me at 7,alarm\n2,play jazz,music\n", encoding="utf-8")
    assert rows(csv, text_column="utterance", label_column="category") == [
        (2, "wake me at 7", "alarm"),
        (3, "play jazz", "music"),
    ]
    tsv = tmp_path / "c.tsv"
    tsv.write_text("sentence\tintent\nwake me at 7\talarm\n", encoding="utf-8")
    assert rows(tsv, text_column="sentence", label_column="intent") == [(2, "wake me at 7", "alarm")]
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text(
        '{"utterance": "wake me", "category": "alarm", "id": 1}\n{"utterance": "jazz", "category": 3}\n',
        encoding="utf-8",
    )
    assert rows(jsonl, text_column="utterance", label_column="category") == [(1, "wake me", "alarm"), (2, "jazz", 3)]
    # "none" reads a file with other columns as unlabelled
    reader = CorpusReader(csv, text_column="Utterance", label_column="none")
    assert [r.label for r in reader] == [None, None] and reader.stats.labelled is False


@pytest.mark.parametrize(
    ("name", "content", "kw", "match"),
    [
        (
            "c.csv",
            "text,category\nwake me,alarm\n",
            {},
            r"c\.csv:1: no 'label' column but others beside the text \('category'\): if one holds the labels, pass "
            r"--label-column category; to read the file as unlabelled, pass --label-column none\.",
        ),
        (
            "c.jsonl",
            '{"text": "wake me", "category": "alarm"}\n',
            {},
            r"c\.jsonl:1: no 'label' key but others beside the text \('category'\): if one holds the labels, pass "
            r"--label-column category",
        ),
        (
            "c.csv",
            "text,category\nwake me,alarm\n",
            {"label_column": "intent"},
            r"c\.csv:1: --label-column intent: no such column \(found 'text', 'category'\)",
        ),
        (
            "c.csv",
            "sentence,label\nwake me,alarm\n",
            {"text_column": "utterance"},
            r"c\.csv:1: --text-column utterance: the header has no such column \(found 'sentence', 'label'\)",
        ),
        ("c.csv", "sentence,label\nwake me,alarm\n", {}, r"the header has no 'text' column .* --text-column NAME"),
        (
            "c.jsonl",
            '{"sentence": "wake me"}\n',
            {},
            r"c\.jsonl:1: no \"text\" key \(found 'sentence'\); .*--text-column",
        ),
        ("c.txt", "wake me\n", {"label_column": "category"}, r"--label-column applies to JSONL, CSV and TSV files"),
        (
            "c.csv",
            "text,label\nwake me,alarm\n",
            {"text_column": "label", "label_column": "LABEL"},
            r"--text-column and --label-column both name 'label'",
        ),
    ],
)
def test_column_errors_name_the_columns_found_and_the_option(tmp_path, name, content, kw, match):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserInputError, match=match):
        rows(path, **kw)


def test_a_text_only_file_is_still_unlabelled(tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text("text\nwake me\n", encoding="utf-8")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "wake me"}\n', encoding="utf-8")
    assert rows(csv) == [(2, "wake me", None)] and rows(jsonl) == [(1, "wake me", None)]


def test_inject_refuses_a_category_column_in_one_line_and_reads_it_when_named(tmp_path):
    corpus = tmp_path / "intents.csv"
    corpus.write_text(
        "text,category\n" + "".join(f"utterance {i},intent{i % 4}\n" for i in range(300)), encoding="utf-8"
    )
    out = tmp_path / "run"
    base = ["inject", "--corpus", str(corpus), "--frequencies", "1", "--per-frequency", "2"]
    result = CliRunner().invoke(cli, [*base, "--out", str(out)])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "pass --label-column category" in result.output and not out.exists()
    result = CliRunner().invoke(cli, [*base, "--out", str(out), "--label-column", "category"])
    assert result.exit_code == 0, result.output
    assert '"label": "intent' in (out / "train.jsonl").read_text(encoding="utf-8").splitlines()[0]
    result = CliRunner().invoke(
        cli, [*base, "--out", str(tmp_path / "builtin"), "--corpus", "builtin:assistant", "--label-column", "category"]
    )
    assert result.exit_code == 2 and "--label-column applies to your own files" in result.output
