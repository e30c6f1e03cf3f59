"""Streaming readers for user corpora: plain text, JSON Lines, CSV and TSV.

Every stage that reads a user's corpus goes through :class:`CorpusReader`, so the rules are the
same everywhere: one example per record, blank texts skipped (and counted), a label column that is
either present on every record or on none, and errors that name the file and the line to fix.

Columns: the text is the ``text`` column (CSV/TSV header, JSONL key) and the label the ``label`` one,
unless ``text_column``/``label_column`` (``--text-column``/``--label-column``) name others. A file
with no label column is read as unlabelled only when it holds nothing but its text: a CSV whose
labels sit in a column named ``category`` (as in popular public intent datasets) would otherwise
train a classifier on "no labels" and fail only at train time, so it is refused at once, naming the
columns found and the option to pass. ``label_column="none"`` (:data:`NO_LABELS`) reads any file as
unlabelled.

Files are read line by line in binary and decoded one line at a time. That costs little and is
the only way to report *which line* holds undecodable bytes (a text-mode file only knows a byte
offset inside its read buffer). ``errors="replace"`` accepts such lines with U+FFFD in place of
the bad bytes and counts them, so the manifest can say how many lines were damaged.
"""

from __future__ import annotations

import csv
import errno
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from dpaudit.errors import UserInputError

#: A label as it appears in a corpus: a string (intent name) or an integer class id.
Label = str | int

CorpusFormat = Literal["auto", "text", "jsonl", "csv", "tsv"]
EncodingErrors = Literal["strict", "replace"]

#: ``--label-column none``: read the file as unlabelled whatever other columns it has.
NO_LABELS = "none"
TEXT_COLUMN, LABEL_COLUMN = "text", "label"

_SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv", ".tab": "tsv"}


class CorpusRow(NamedTuple):
    """One example: the 1-based line it ends on, its text, and its label (None when unlabelled)."""

    line: int
    text: str
    label: Label | None


@dataclass
class ReadStats:
    """What a reader skipped or repaired, filled in while it streams (for the manifest)."""

    rows: int = 0
    blank_skipped: int = 0
    replaced_lines: int = 0
    labelled: bool | None = None


def detect_format(path: str | os.PathLike[str]) -> str:
    """The corpus format implied by a file name: .jsonl/.ndjson, .csv, .tsv/.tab, else plain text."""
    return _SUFFIX_FORMATS.get(Path(path).suffix.lower(), "text")


class CorpusReader:
    """Iterate over a corpus file as :class:`CorpusRow` records without loading it.

    Args:
        path: the corpus file.
        format: ``"auto"`` (from the file suffix), ``"text"``, ``"jsonl"``, ``"csv"`` or ``"tsv"``.
        errors: ``"strict"`` (undecodable UTF-8 is an error naming the line) or ``"replace"``.
        option: the command-line option that named the file, used in error messages.
        text_column: the CSV/TSV column (header name, case-insensitive) or JSONL key of the text
            [default: ``text``].
        label_column: the label's column or key [default: ``label``, and a file with other columns but
            no ``label`` one is refused]; :data:`NO_LABELS` reads the file as unlabelled.

    Iterating again re-reads the file; :attr:`stats` describes the last complete pass.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: CorpusFormat = "auto",
        errors: EncodingErrors = "strict",
        option: str = "--corpus",
        text_column: str | None = None,
        label_column: str | None = None,
    ) -> None:
        if format not in ("auto", "text", "jsonl", "csv", "tsv"):
            raise ValueError(f"format must be one of auto, text, jsonl, csv, tsv, got {format!r}.")
        if errors not in ("strict", "replace"):
            raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}.")
        self.path = Path(path)
        self.format = detect_format(self.path) if format == "auto" else format
        self.errors = errors
        self.option = option
        self.text_column = text_column
        self.label_column = label_column
        self.stats = ReadStats()
        for name, value in (("--text-column", text_column), ("--label-column", label_column)):
            if value is not None and not value.strip():
                raise UserInputError(f"{name} is empty; name a column of {self.path} (its header or JSONL key).")
        if text_column is not None and label_column is not None and text_column.strip().lower() == label_column.strip().lower():
            raise UserInputError(f"--text-column and --label-column both name {text_column!r}; the label must be another column.")
        if self.format == "text" and (text_column is not None or label_column not in (None, NO_LABELS)):
            option_name = "--text-column" if text_column is not None else "--label-column"
            raise UserInputError(f"{option_name} applies to JSONL, CSV and TSV files, not to the plain-text {option} "
                                 f"{self.path} (one example per line); remove it or pass --corpus-format.")
        if not self.path.exists():
            raise UserInputError(f"{option} {self.path}: no such file; check the path.")
        if not self.path.is_file():
            raise UserInputError(f"{option} {self.path} is not a file; pass a text, JSONL, CSV or TSV corpus file.")
        try:  # unreadable (mode 000, another user's file): say so now, before anything else is read or written
            with open(self.path, "rb"):
                pass
        except OSError as err:
            raise self._read_error(err) from None

    def _read_error(self, err: OSError, lineno: int | None = None) -> UserInputError:
        """The one-line error for a corpus that cannot be read (permissions, a failing disk)."""
        where = f"{self.option} {self.path}" + ("" if lineno is None else f" (after line {lineno})")
        if err.errno in (errno.EACCES, errno.EPERM):
            fix = "give yourself read permission (chmod u+r) or pass a copy you can read"
        else:
            fix = "the device reported an error: copy the file to a healthy disk and pass the copy"
        return UserInputError(f"{where}: cannot read it ({err.strerror or err}); {fix}.")

    def __iter__(self) -> Iterator[CorpusRow]:
        self.stats = ReadStats()
        rows = {"text": self._text_rows, "jsonl": self._jsonl_rows, "csv": self._csv_rows, "tsv": self._csv_rows}
        for row in rows[self.format]():
            if not row.text.strip():
                self.stats.blank_skipped += 1
                continue
            self.stats.rows += 1
            yield row

    # -- decoding ------------------------------------------------------------------------------

    def _where(self, lineno: int) -> str:
        return f"{self.option} {self.path}:{lineno}"

    def _lines(self) -> Iterator[tuple[int, str]]:
        """(line number, decoded line including its newline), one line at a time."""
        try:
            handle = open(self.path, "rb")
        except OSError as err:
            raise self._read_error(err) from None
        with handle:
            for lineno, raw in enumerate(_read_lines(handle, self._read_error), start=1):
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    if self.errors == "strict":
                        raise UserInputError(
                            f"{self._where(lineno)}: not valid UTF-8 (byte {err.start + 1} of the line); "
                            "re-encode the file as UTF-8 or pass --encoding-errors replace."
                        ) from None
                    line = raw.decode("utf-8", errors="replace")
                    self.stats.replaced_lines += 1
                yield lineno, line

    # -- formats -------------------------------------------------------------------------------

    def _text_rows(self) -> Iterator[CorpusRow]:
        self.stats.labelled = False
        for lineno, line in self._lines():
            yield CorpusRow(lineno, line.rstrip("\r\n"), None)

    def _jsonl_rows(self) -> Iterator[CorpusRow]:
        text_key = self.text_column or TEXT_COLUMN
        label_key = None if self.label_column == NO_LABELS else self.label_column or LABEL_COLUMN
        labelled: bool | None = None
        first_line = 0
        for lineno, line in self._lines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserInputError(f"{self._where(lineno)}: not valid JSON ({err.msg}); fix or remove that line.") from None
            if not isinstance(record, dict) or not isinstance(record.get(text_key), str):
                if isinstance(record, dict) and text_key not in record and self.text_column is None:
                    raise UserInputError(f"{self._where(lineno)}: no \"text\" key (found {_names(record)}); name the text's "
                                         "key with --text-column KEY.")
                raise UserInputError(
                    f"{self._where(lineno)}: expected an object with a string {json.dumps(text_key)} field, e.g. "
                    f'{{{json.dumps(text_key)}: "call mom", {json.dumps(label_key or LABEL_COLUMN)}: "call"}}.'
                )
            has_label = label_key is not None and label_key in record and record[label_key] is not None
            if labelled is None:
                if not has_label and label_key is not None:
                    self._check_unlabelled(list(record), text_key, where=self._where(lineno), kind="key")
                labelled, first_line = has_label, lineno
                self.stats.labelled = labelled
            elif has_label != labelled:
                state = "has a" if has_label else "has no"
                other = "had one" if labelled else "had none"
                raise UserInputError(
                    f"{self._where(lineno)}: this record {state} {json.dumps(label_key)} but line {first_line} {other}; "
                    "label every record or none."
                )
            label = self._check_label(record.get(label_key), lineno) if has_label else None  # type: ignore[arg-type]
            yield CorpusRow(lineno, record[text_key], label)

    def _check_unlabelled(self, found: list[str], text: str, *, where: str, kind: str) -> None:
        """A file without the label column is unlabelled only when it has no other column, or the user said so.

        Args:
            found: every column (or the first record's keys), ``text`` the text's among them.

        Raises:
            UserInputError: ``--label-column NAME`` was given and is missing, or other columns exist (one of
                them may hold the labels): the message lists them and names the option to pass.
        """
        if self.label_column is not None:
            raise UserInputError(f"{where}: --label-column {self.label_column}: no such {kind} (found {_names(found)}); "
                                 f"pass one of them, or --label-column {NO_LABELS} for an unlabelled corpus.")
        others = [n for n in found if n != text]
        if others:
            raise UserInputError(f"{where}: no 'label' {kind} but others beside the text ({_names(others)}): if one "
                                 f"holds the labels, pass --label-column {others[0]}; to read the file as unlabelled, "
                                 f"pass --label-column {NO_LABELS}.")

    def _csv_rows(self) -> Iterator[CorpusRow]:
        tsv = self.format == "tsv"
        dialect = {"delimiter": "\t", "quoting": csv.QUOTE_NONE} if tsv else {}
        lines = self._lines()
        numbered = _LineTracker(lines)
        reader = csv.reader(numbered, strict=not tsv, **dialect)
        try:
            header = next(reader, None)
        except csv.Error as err:
            raise UserInputError(f"{self._where(numbered.lineno)}: bad CSV header ({err}).") from None
        names = [name.strip().lower() for name in header or []]
        shown = [name.strip() for name in header or []]
        wanted = (self.text_column or TEXT_COLUMN).strip().lower()
        if wanted not in names:
            found = _names(shown) if shown else "nothing"
            if self.text_column is not None:
                raise UserInputError(f"{self._where(1)}: --text-column {self.text_column}: the header has no such column "
                                     f"(found {found}); pass one of them.")
            raise UserInputError(
                f"{self._where(1)}: the header has no 'text' column (found {found}); name the text column with "
                "--text-column NAME, or add a header row naming it 'text'."
            )
        text_col = names.index(wanted)
        label_col = None
        if self.label_column != NO_LABELS:
            label_name = (self.label_column or LABEL_COLUMN).strip().lower()
            if label_name in names:
                label_col = names.index(label_name)
            else:
                self._check_unlabelled(shown, shown[text_col], where=self._where(1), kind="column")
        self.stats.labelled = label_col is not None
        width = len(names)
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                raise UserInputError(f"{self._where(numbered.lineno)}: malformed {self.format.upper()} ({err}).") from None
            lineno = numbered.lineno
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                self.stats.blank_skipped += 1
                continue
            if len(fields) != width:
                raise UserInputError(
                    f"{self._where(lineno)}: {len(fields)} fields but the header has {width}; "
                    f"quote fields that contain the delimiter."
                )
            label = None
            if label_col is not None:
                raw_label = fields[label_col].strip()
                if not raw_label:
                    raise UserInputError(f"{self._where(lineno)}: empty label; every row needs a label when the header has one.")
                label = raw_label
            yield CorpusRow(lineno, fields[text_col], label)

    def _check_label(self, label: object, lineno: int) -> Label:
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            raise UserInputError(f"{self._where(lineno)}: label must be a string or an integer, got {json.dumps(label)}.")
        return label


def _names(names: Any) -> str:
    """``'a', 'b'`` for an error message (at most 8 names, then how many more)."""
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def _read_lines(handle: Any, error: Any) -> Iterator[bytes]:
    """The lines of a binary file; a read that fails (EIO) becomes ``error(err, lines read so far)``."""
    lineno = 0
    while True:
        try:
            raw = handle.readline()
        except OSError as err:
            raise error(err, lineno) from None
        if not raw:
            return
        lineno += 1
        yield raw


class _LineTracker:
    """Feeds decoded lines to ``csv.reader`` and remembers the last line number handed out.

    A quoted CSV field may span several physical lines; the record's line number is the line on
    which it ends, which is what an editor's "go to line" needs to find the closing quote.
    """

    def __init__(self, lines: Iterator[tuple[int, str]]) -> None:
        self._lines = lines
        self.lineno = 0

    def __iter__(self) -> _LineTracker:
        return self

    def __next__(self) -> str:
        self.lineno, line = next(self._lines)
        return line


def read_corpus(
    path: str | os.PathLike[str],
    *,
    format: CorpusFormat = "auto",
    errors: EncodingErrors = "strict",
    option: str = "--corpus",
    text_column: str | None = None,
    label_column: str | None = None,
) -> Iterator[CorpusRow]:
    """Stream the rows of a corpus file (see :class:`CorpusReader` for the rules)."""
    return iter(CorpusReader(path, format=format, errors=errors, option=option, text_column=text_column,
                             label_column=label_column))
