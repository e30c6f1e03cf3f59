"""Streaming readers for user corpora: plain text, JSON Lines, CSV and TSV.

Every stage that reads a user's corpus goes through :class:`CorpusReader`, so the rules are the
same everywhere: one example per record, blank texts skipped (and counted), a label column that is
either present on every record or on none, and errors that name the file and the line to fix.

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

    Iterating again re-reads the file; :attr:`stats` describes the last complete pass.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: CorpusFormat = "auto",
        errors: EncodingErrors = "strict",
        option: str = "--corpus",
    ) -> None:
        if format not in ("auto", "text", "jsonl", "csv", "tsv"):
            raise ValueError(f"format must be one of auto, text, jsonl, csv, tsv, got {format!r}.")
        if errors not in ("strict", "replace"):
            raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}.")
        self.path = Path(path)
        self.format = detect_format(self.path) if format == "auto" else format
        self.errors = errors
        self.option = option
        self.stats = ReadStats()
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
        labelled: bool | None = None
        first_line = 0
        for lineno, line in self._lines():
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise UserInputError(f"{self._where(lineno)}: not valid JSON ({err.msg}); fix or remove that line.") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise UserInputError(
                    f"{self._where(lineno)}: expected an object with a string \"text\" field, e.g. "
                    '{"text": "call mom", "label": "call"}.'
                )
            has_label = "label" in record and record["label"] is not None
            if labelled is None:
                labelled, first_line = has_label, lineno
                self.stats.labelled = labelled
            elif has_label != labelled:
                state = "has a" if has_label else "has no"
                other = "had one" if labelled else "had none"
                raise UserInputError(
                    f"{self._where(lineno)}: this record {state} \"label\" but line {first_line} {other}; "
                    "label every record or none."
                )
            yield CorpusRow(lineno, record["text"], self._check_label(record.get("label"), lineno) if has_label else None)

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
        if "text" not in names:
            found = ", ".join(repr(n) for n in names) or "nothing"
            raise UserInputError(
                f"{self._where(1)}: the header has no 'text' column (found {found}); "
                "add a header row naming the text column 'text' (and optionally 'label')."
            )
        text_col = names.index("text")
        label_col = names.index("label") if "label" in names else None
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
) -> Iterator[CorpusRow]:
    """Stream the rows of a corpus file (see :class:`CorpusReader` for the rules)."""
    return iter(CorpusReader(path, format=format, errors=errors, option=option))
