"""Corpus readers: every format, the line numbers in errors, encoding handling, and laziness."""

from __future__ import annotations

import pytest

from dpaudit.common.errors import UserInputError
from dpaudit.corpus import CorpusReader, detect_format, read_corpus


def _rows(path, **kw):
    return [tuple(r) for r in read_corpus(path, **kw)]


def test_plain_text_skips_blank_lines_and_keeps_line_numbers(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"\xef\xbb\xbfcall mom\r\n\n   \nplay jazz\nlast line without newline")
    reader = CorpusReader(path)
    assert [tuple(r) for r in reader] == [
        (1, "call mom", None),
        (4, "play jazz", None),
        (5, "last line without newline", None),
    ]
    assert reader.stats.rows == 3 and reader.stats.blank_skipped == 2 and reader.stats.labelled is False


def test_jsonl_with_labels_and_detection(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "call mom", "label": "call"}\n\n{"text": "play jazz", "label": 3}\n', encoding="utf-8")
    assert detect_format(path) == "jsonl"
    assert _rows(path) == [(1, "call mom", "call"), (3, "play jazz", 3)]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (
            '{"text": "a"}\n{"text": "b", "label": "x"}\n',
            r"c\.jsonl:2: this record has a \"label\" but line 1 had none",
        ),
        (
            '{"text": "a", "label": "x"}\n{"text": "b"}\n',
            r"c\.jsonl:2: this record has no \"label\" but line 1 had one",
        ),
        ('{"text": "a"}\n{"text": "b"\n', r"c\.jsonl:2: not valid JSON"),
        ('{"text": "a"}\n["b"]\n', r"c\.jsonl:2: expected an object with a string \"text\" field"),
        ('{"text": 5}\n', r"c\.jsonl:1: expected an object"),
        ('{"text": "a", "label": [1]}\n', r"c\.jsonl:1: label must be a string or an integer"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, content, match):
    path = tmp_path / "c.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UserInputError, match=match):
        _rows(path)


def test_csv_quoted_fields_and_multiline_records(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text('id,Text,label\n1,"call mom, then dad",call\n2,"two\nlines",note\n3,plain,x\n', encoding="utf-8")
    assert _rows(path) == [(2, "call mom, then dad", "call"), (4, "two\nlines", "note"), (5, "plain", "x")]


def test_tsv_keeps_quotes_literally(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text('text\n"quoted" start\nsay "hi"\n', encoding="utf-8")
    assert _rows(path) == [(2, '"quoted" start', None), (3, 'say "hi"', None)]


def test_csv_without_text_column_is_an_error(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("sentence,label\ncall mom,call\n", encoding="utf-8")
    with pytest.raises(
        UserInputError, match=r"c\.csv:1: the header has no 'text' column \(found 'sentence', 'label'\)"
    ):
        _rows(path)


def test_csv_wrong_field_count_names_line(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("text,label\nok,a\ntoo,many,fields\n", encoding="utf-8")
    with pytest.raises(UserInputError, match=r"c\.csv:3: 3 fields but the header has 2"):
        _rows(path)


def test_undecodable_bytes_strict_names_line_and_replace_counts(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff\xfe byte\nfine again\n")
    with pytest.raises(UserInputError, match=r"c\.txt:3: not valid UTF-8 .*--encoding-errors replace"):
        _rows(path)
    reader = CorpusReader(path, errors="replace")
    rows = [r.text for r in reader]
    assert rows == ["fine", "also fine", "bad \ufffd\ufffd byte", "fine again"]
    assert reader.stats.replaced_lines == 1


def test_missing_file_and_directory_are_user_errors(tmp_path):
    with pytest.raises(UserInputError, match="no such file"):
        CorpusReader(tmp_path / "nope.txt")
    with pytest.raises(UserInputError, match="is not a file"):
        CorpusReader(tmp_path)


def test_reader_is_lazy(tmp_path):
    # The second line is broken: a reader that loaded the file up front would fail before yielding.
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "first"}\n{broken\n', encoding="utf-8")
    rows = read_corpus(path)
    assert next(rows).text == "first"
    with pytest.raises(UserInputError, match=":2:"):
        next(rows)
