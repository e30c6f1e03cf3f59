"""CSV/TSV corpora that Python's csv module reads wrongly or explains badly (hardening).

A header naming a column twice, a field over Python's 128 KiB limit, a quote that never closes
(Python notices at the end of the file) and CR-only line endings: each is read correctly or refused
in one line naming the file, the line to edit and what to do, exit code 2, nothing written.
"""

from __future__ import annotations

import csv
import hashlib
import io
import random

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.corpus import CorpusReader, readers


def _csv(path, rows, *, header="text,label", ending="\n"):
    path.write_text(ending.join([header, *rows]) + ending, encoding="utf-8", newline="")
    return path


def _plain_rows(n=240):
    return [f"example number {i} about the weather,l{i % 3}" for i in range(n)]


def _inject_refuses(tmp_path, corpus, *needles):
    """Run the real `dpaudit inject` on ``corpus``: exit 2, one line holding every needle, nothing written."""
    before = hashlib.sha256(corpus.read_bytes()).hexdigest()
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["inject", "--corpus", str(corpus), "--out", str(out), "--seed", "0"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)
    assert not out.exists()
    assert hashlib.sha256(corpus.read_bytes()).hexdigest() == before
    return result.output


def test_header_naming_text_twice_is_refused(tmp_path):
    corpus = _csv(tmp_path / "dup.csv", [f"a {i},b {i},l{i % 3}" for i in range(240)], header="text,Text,label")
    _inject_refuses(tmp_path, corpus, "dup.csv:1:", "'text' 2 times", "columns 1, 2", "rename")


def test_header_naming_the_label_column_twice_is_refused(tmp_path):
    corpus = _csv(tmp_path / "c.csv", ["call mom,call,x"], header="label,text,label")
    with pytest.raises(UserInputError, match=r"c\.csv:1: the header names 'label' 2 times \(columns 1, 3\)"):
        list(CorpusReader(corpus))
    # A named column counts the same way; a duplicated column that is not used is harmless.
    corpus = _csv(tmp_path / "d.csv", ["call mom,call,x,y"], header="utterance,intent,id,id")
    assert [tuple(r) for r in CorpusReader(corpus, text_column="utterance", label_column="intent")] == [
        (2, "call mom", "call")
    ]
    corpus = _csv(tmp_path / "e.csv", ["a,b,c"], header="utterance,intent,intent")
    with pytest.raises(UserInputError, match=r"e\.csv:1: the header names 'intent' 2 times \(columns 2, 3\)"):
        list(CorpusReader(corpus, text_column="utterance", label_column="intent"))


def test_field_over_128_kib_is_read(tmp_path):
    long_text = "word " * 40_000  # 200,000 characters: over Python's default field limit of 131,072
    rows = _plain_rows(4)
    rows[2] = f'"{long_text}",l1'
    corpus = _csv(tmp_path / "long.csv", rows)
    got = [tuple(r) for r in CorpusReader(corpus)]
    assert got[2] == (4, long_text, "l1") and len(got) == 4


def test_field_over_the_limit_names_the_record_and_the_fix(tmp_path, monkeypatch):
    previous = csv.field_size_limit()
    monkeypatch.setattr(readers, "CSV_FIELD_LIMIT", 1000)
    try:
        csv.field_size_limit(1000)
        rows = _plain_rows(6)
        rows[3] = '"' + "x" * 1500 + '",l1'  # closed, just long
        corpus = _csv(tmp_path / "c.csv", rows)
        with pytest.raises(UserInputError, match=r"c\.csv:5: a field of this record is over 1,000 characters; split "):
            list(CorpusReader(corpus))
        rows[3] = '"' + "x " * 100  # never closes: the rest of the file is one field
        rows += [f"more {i},l1" for i in range(600)]
        corpus = _csv(tmp_path / "d.csv", rows)
        with pytest.raises(UserInputError, match=r"d\.csv:5: a quoted field opens here and never closes"):
            list(CorpusReader(corpus))
    finally:
        csv.field_size_limit(previous)


def test_unterminated_quote_is_reported_where_it_opens(tmp_path):
    rows = _plain_rows()
    rows[6] = 'a 5" screen,l1'  # a quote inside an unquoted field is text, not an opening quote
    rows[99] = '"the quote that never closes,l1'
    corpus = _csv(tmp_path / "quote.csv", rows)
    message = _inject_refuses(tmp_path, corpus, "quote.csv:101:", "never closes", 'two quotes ("")')
    assert ":241:" not in message  # where Python noticed (the end of the file)


def test_unterminated_quote_after_a_closed_multiline_field(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text(
        'id,text,label\n1,"two\nlines",a\n2,"fine ""quoted"" text",b\n3,"x\ny","oops\n4,z,w\n', encoding="utf-8"
    )
    with pytest.raises(UserInputError, match=r"c\.csv:6: a quoted field opens here and never closes"):
        list(CorpusReader(path))


def test_text_after_a_closing_quote_says_how_to_quote(tmp_path):
    rows = _plain_rows(10)
    rows[4] = '"say "hi" please",l1'
    corpus = _csv(tmp_path / "c.csv", rows)
    with pytest.raises(
        UserInputError,
        match=r"c\.csv:6: a quoted field\'s closing quote is followed by more text; "
        r'write a quote inside a quoted field as two quotes \(""\)',
    ):
        list(CorpusReader(corpus))


@pytest.mark.parametrize("name", ["c.csv", "c.tsv", "c.txt", "c.jsonl"])
def test_cr_only_line_endings_read_like_lf(tmp_path, name):
    texts = [f"example {i} about the weather" for i in range(20)]
    if name.endswith(".csv"):
        lines = ["text,label", *(f"{t},l{i % 3}" for i, t in enumerate(texts))]
        lines[5] = '"a quoted, two-line\rfield",l1'  # a CR inside a quoted field stays in the text
    elif name.endswith(".tsv"):
        lines = ["text\tlabel", *(f"{t}\tl{i % 3}" for i, t in enumerate(texts))]
    elif name.endswith(".jsonl"):
        lines = [f'{{"text": "{t}", "label": "l{i % 3}"}}' for i, t in enumerate(texts)]
    else:
        lines = texts
    lf, cr = tmp_path / "lf", tmp_path / "cr"
    lf.mkdir(), cr.mkdir()
    (lf / name).write_text("\n".join(lines).replace("\r", "\n") + "\n", encoding="utf-8", newline="")
    (cr / name).write_text("\r".join(lines) + "\r", encoding="utf-8", newline="")
    got_cr = [tuple(r) for r in CorpusReader(cr / name)]
    got_lf = [tuple(r) for r in CorpusReader(lf / name)]
    assert len(got_cr) == 20
    assert [(line, text.replace("\r", "\n"), label) for line, text, label in got_cr] == got_lf


def test_cr_only_csv_injects(tmp_path):
    corpus = _csv(tmp_path / "mac.csv", _plain_rows(), ending="\r")
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["inject", "--corpus", str(corpus), "--out", str(out), "--seed", "0"])
    assert result.exit_code == 0, result.output
    assert sum(1 for _ in (out / "heldout.jsonl").open()) > 1


def test_line_splitting_across_chunk_boundaries(monkeypatch):
    """Every ending (LF, CR LF, lone CR) is found wherever the chunks fall, also a CR LF split between two."""
    monkeypatch.setattr(readers, "_CHUNK", 7)
    rng = random.Random(0)
    for _ in range(200):
        data = b"".join(
            rng.choice([b"ab", b"c", b"\n", b"\r", b"\r\n", b"xyzxyzxyz"]) for _ in range(rng.randrange(30))
        )
        assert list(readers._read_lines(io.BytesIO(data), None)) == data.splitlines(keepends=True)
