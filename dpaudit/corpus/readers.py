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
the bad bytes and counts them, so the manifest can say how many lines were damaged. A line ends at
LF, CR LF or a lone CR (the old Mac ending some spreadsheet exports still write), as in Python's
universal newlines, so line numbers match what an editor shows.

CSV and TSV: a header that names the text or label column twice is refused (which of the two is the
text?). A field may hold up to :data:`CSV_FIELD_LIMIT` characters (Python's own limit of 128 KiB
refuses a long document). Python's ``csv`` errors are translated into a fix: an unterminated quoted
field is reported at the line where its quote opens (Python reports the end of the file, where it
noticed), and a closing quote followed by text says how to write a literal quote.
"""

from __future__ import annotations

import csv
import errno
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from dpaudit.common.errors import UserInputError

#: A label as it appears in a corpus: a string (intent name) or an integer class id.
Label = str | int

CorpusFormat = Literal["auto", "text", "jsonl", "csv", "tsv"]
EncodingErrors = Literal["strict", "replace"]

#: ``--label-column none``: read the file as unlabelled whatever other columns it has.
NO_LABELS = "none"
TEXT_COLUMN, LABEL_COLUMN = "text", "label"

#: The largest CSV/TSV field read, in characters (Python's csv module stops at 128 KiB). A text over 64 MiB
#: is no training example (every trainer cuts it to --max-length tokens); it is nearly always a quote that
#: never closes, which the error then reports at the line where it opens.
CSV_FIELD_LIMIT = 64 * 1024 * 1024

#: Bytes read at a time when splitting a file into lines.
_CHUNK = 1 << 16

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
        if (
            text_column is not None
            and label_column is not None
            and text_column.strip().lower() == label_column.strip().lower()
        ):
            raise UserInputError(
                f"--text-column and --label-column both name {text_column!r}; the label must be another column."
            )
        if self.format == "text" and (text_column is not None or label_column not in (None, NO_LABELS)):
            option_name = "--text-column" if text_column is not None else "--label-column"
            raise UserInputError(
                f"{option_name} applies to JSONL, CSV and TSV files, not to the plain-text {option} "
                f"{self.path} (one example per line); remove it or pass --corpus-format."
            )
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
                raise UserInputError(
                    f"{self._where(lineno)}: not valid JSON ({err.msg}); fix or remove that line."
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get(text_key), str):
                if isinstance(record, dict) and text_key not in record and self.text_column is None:
                    raise UserInputError(
                        f'{self._where(lineno)}: no "text" key (found {_names(record)}); name the text\'s '
                        "key with --text-column KEY."
                    )
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
            raise UserInputError(
                f"{where}: --label-column {self.label_column}: no such {kind} (found {_names(found)}); "
                f"pass one of them, or --label-column {NO_LABELS} for an unlabelled corpus."
            )
        others = [n for n in found if n != text]
        if others:
            raise UserInputError(
                f"{where}: no 'label' {kind} but others beside the text ({_names(others)}): if one "
                f"holds the labels, pass --label-column {others[0]}; to read the file as unlabelled, "
                f"pass --label-column {NO_LABELS}."
            )

    def _csv_rows(self) -> Iterator[CorpusRow]:
        tsv = self.format == "tsv"
        lines = self._lines()
        numbered = _LineTracker(lines)
        if csv.field_size_limit() < CSV_FIELD_LIMIT:  # raised, never lowered: process-wide, see CSV_FIELD_LIMIT
            csv.field_size_limit(CSV_FIELD_LIMIT)
        reader = (
            csv.reader(numbered, strict=False, delimiter="\t", quoting=csv.QUOTE_NONE)
            if tsv
            else csv.reader(numbered, strict=True)
        )
        try:
            header = next(reader, None)
        except csv.Error as err:
            raise self._csv_error(err, numbered, start=1, header=True) from None
        names = [name.strip().lower() for name in header or []]
        shown = [name.strip() for name in header or []]
        wanted = (self.text_column or TEXT_COLUMN).strip().lower()
        if wanted not in names:
            found = _names(shown) if shown else "nothing"
            if self.text_column is not None:
                raise UserInputError(
                    f"{self._where(1)}: --text-column {self.text_column}: the header has no such column "
                    f"(found {found}); pass one of them."
                )
            raise UserInputError(
                f"{self._where(1)}: the header has no 'text' column (found {found}); name the text column with "
                "--text-column NAME, or add a header row naming it 'text'."
            )
        text_col = self._column(names, wanted, "text")
        label_col = None
        if self.label_column != NO_LABELS:
            label_name = (self.label_column or LABEL_COLUMN).strip().lower()
            if label_name in names:
                label_col = self._column(names, label_name, "labels")
            else:
                self._check_unlabelled(shown, shown[text_col], where=self._where(1), kind="column")
        self.stats.labelled = label_col is not None
        width = len(names)
        while True:
            start = numbered.lineno + 1  # the record about to be read starts on the next line
            try:
                fields = next(reader)
            except StopIteration:
                return
            except csv.Error as err:
                raise self._csv_error(err, numbered, start=start) from None
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
                    raise UserInputError(
                        f"{self._where(lineno)}: empty label; every row needs a label when the header has one."
                    )
                label = raw_label
            yield CorpusRow(lineno, fields[text_col], label)

    def _column(self, names: list[str], name: str, role: str) -> int:
        """The index of header column ``name``, refusing a header that names it twice.

        ``text,text,label`` would otherwise train on whichever column came first, silently.
        """
        found = [i for i, n in enumerate(names) if n == name]
        if len(found) > 1:
            columns = ", ".join(str(i + 1) for i in found)
            raise UserInputError(
                f"{self._where(1)}: the header names {name!r} {len(found)} times (columns {columns}); "
                f"rename every one of them but the column that holds the {role}."
            )
        return found[0]

    def _csv_error(self, err: csv.Error, numbered: _LineTracker, *, start: int, header: bool = False) -> UserInputError:
        """Python's csv error as a one-line fix, at the line the user has to edit.

        Args:
            numbered: the line tracker (its line is where Python stopped).
            start: the first line of the record being read.
        """
        kind = self.format.upper()
        message = str(err)
        record = f"the {kind} header" if header else "this record"
        if message.startswith("field larger than field limit"):
            opened = self._unclosed_quote_line(start)
            if opened is not None:
                return self._unclosed_quote(opened)
            return UserInputError(
                f"{self._where(start)}: a field of {record} is over {CSV_FIELD_LIMIT:,} characters; "
                "split that text into shorter examples (a trainer keeps only its first --max-length "
                "tokens)."
            )
        if message == "unexpected end of data":
            return self._unclosed_quote(self._unclosed_quote_line(start) or start)
        expected = re.fullmatch(r"'(.)' expected after '(.)'", message)
        if expected:
            return UserInputError(
                f"{self._where(numbered.lineno)}: a quoted field's closing quote is followed by more "
                'text; write a quote inside a quoted field as two quotes (""), or quote the whole '
                "field."
            )
        return UserInputError(
            f"{self._where(numbered.lineno)}: malformed {kind} ({message}); check the quoting and "
            "delimiters on that line."
        )

    def _unclosed_quote(self, line: int) -> UserInputError:
        return UserInputError(
            f"{self._where(line)}: a quoted field opens here and never closes (the file ends inside "
            "it); add the closing quote, or write a quote that is part of the text as two quotes "
            '("") inside a quoted field.'
        )

    def _unclosed_quote_line(self, start: int) -> int | None:
        """The line where the quoted field left open at the end of the file opens, reading on from ``start``.

        Runs only after Python's csv reader failed: it re-reads the file from the failing record's first line
        and follows the same rules (a quote opens a field only at its start; two quotes inside a quoted field
        are one literal quote), jumping to the next quote or delimiter rather than stepping a character at a
        time. None when every quoted field closes (the field is just long).
        """
        if self.format != "csv":  # TSV is read with quoting off
            return None
        delimiter, quote = ",", '"'
        field_end = re.compile(r"[,\r\n]")
        start_field, in_field, quoted, after_quote = range(4)
        state, opened = start_field, None
        for lineno, line in self._lines():
            if lineno < start:
                continue
            i, n = 0, len(line)
            while i < n:
                if state == quoted:
                    j = line.find(quote, i)
                    if j < 0:
                        break
                    i, state = j + 1, after_quote
                    continue
                char = line[i]
                if state == after_quote and char == quote:
                    state = quoted
                    i += 1
                elif state == in_field:
                    match = field_end.search(line, i)
                    if match is None:
                        break
                    i, state = match.end(), start_field
                elif char == quote and state == start_field:
                    state, opened = quoted, lineno
                    i += 1
                else:  # a delimiter or line end starts a field; any other character an unquoted one
                    state = start_field if char in (delimiter, "\r", "\n") else in_field
                    i += 1
        return opened if state == quoted else None

    def _check_label(self, label: object, lineno: int) -> Label:
        if isinstance(label, bool) or not isinstance(label, (str, int)):
            raise UserInputError(
                f"{self._where(lineno)}: label must be a string or an integer, got {json.dumps(label)}."
            )
        return label


def _names(names: Any) -> str:
    """``'a', 'b'`` for an error message (at most 8 names, then how many more)."""
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:8])
    return shown + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def _read_lines(handle: Any, error: Any) -> Iterator[bytes]:
    """The lines of a binary file, each with its ending (``\\n``, ``\\r\\n`` or a lone ``\\r``).

    A read that fails (EIO) becomes ``error(err, lines read so far)``. ``readline`` splits at ``\\n`` only
    and reads at most :data:`_CHUNK` bytes at a time (a file with no ``\\n``, such as one with CR-only
    endings, is not read whole); a piece holding a lone ``\\r`` is split again by ``bytes.splitlines``,
    which knows exactly the three endings. A piece that may be incomplete (no ending yet, or a ``\\r``
    whose ``\\n`` may follow) waits for the next; pieces with no ending at all are only collected, so a
    very long line costs linear time.
    """
    lineno = 0
    waiting: list[bytes] = []  # the start of the current line, in the pieces read so far
    while True:
        try:
            piece = handle.readline(_CHUNK)
        except OSError as err:
            raise error(err, lineno) from None
        if not piece:
            if waiting:
                yield b"".join(waiting)
            return
        if not waiting and piece.endswith(b"\n") and piece.find(b"\r", 0, len(piece) - 2) < 0:
            lineno += 1  # the common case: one whole line, LF or CR LF
            yield piece
            continue
        waiting.append(piece)
        follows_cr = len(waiting) > 1 and waiting[-2].endswith(b"\r")
        if b"\n" not in piece and b"\r" not in piece and not follows_cr:
            continue
        lines = b"".join(waiting).splitlines(keepends=True)
        last = lines.pop()
        if last.endswith(b"\n"):
            lines.append(last)
            waiting = []
        else:
            waiting = [last]
        for raw in lines:
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
    return iter(
        CorpusReader(
            path, format=format, errors=errors, option=option, text_column=text_column, label_column=label_column
        )
    )
