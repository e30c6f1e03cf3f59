"""What an inject will cost, said before it starts, and refused when the machine cannot hold it.

A million new-token canaries (``inject --coin-flip --per-frequency 1000000 --design new-tokens``) ran for minutes
without a word, and what they cost later (a vocabulary a million tokens larger, in every model trained on the
directory) was said nowhere. :func:`estimate` gives the time, the peak memory, the size of ``train.jsonl`` and the
vocabulary growth from the counts alone; :func:`check_fits` refuses, before any secret is drawn, an inject whose
memory or disk need exceeds what the machine has, naming the number it would need; :func:`describe` is the line
``dpaudit inject`` prints first when the work is long (:func:`worth_saying`).

The coefficients are measured (``dpaudit inject --coin-flip --design new-tokens`` and ``--format digits:10`` at
10,000 to 100,000 canaries, on the project's 2-core machine at load 5-7): time and memory grow linearly with the
canaries, each canary's share with the length of its text. A free machine is faster; the figures are upper
estimates, rounded up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dpaudit.common import resources
from dpaudit.common.errors import UserInputError
from dpaudit.common.resources import format_bytes, format_duration

__all__ = ["InjectCost", "check_fits", "describe", "estimate", "worth_saying"]

#: Seconds of a run before the first canary (imports, the corpus, the splits).
BASE_SECONDS = 1.5
#: Seconds per canary: drawing its secret, checking it against the corpus, its record and its line.
SECONDS_PER_CANARY = 1.0e-4
#: ... and per character of its text (a new-token canary is 24 ten-letter tokens: 264 characters).
SECONDS_PER_CHAR = 2.5e-7
#: Seconds per row written to train.jsonl.
SECONDS_PER_ROW = 1.0e-6
#: Bytes of memory per canary held while it is built (its draw, record, text, line) ...
BYTES_PER_CANARY = 900
#: ... and per character of its text (about six copies of it live at the peak).
BYTES_PER_CHAR = 6
#: Bytes per train.jsonl row held in memory (the shuffled order of rows).
BYTES_PER_ROW = 16
#: The hidden size the vocabulary growth is stated at (BERT-base's) and the bytes of one float32.
HIDDEN = 768
#: Said before the work when it lasts at least this long, holds this much memory, or adds this many new tokens.
SAY_SECONDS = 15.0
SAY_BYTES = 1 << 30
SAY_NEW_TOKENS = 10_000

_GB = 1e9


@dataclass(frozen=True)
class InjectCost:
    """The estimated cost of one inject.

    Attributes:
        canaries: canaries drawn (inserted and controls).
        canary_rows: canary lines in train.jsonl (the insertions).
        text_chars: the length of one canary's text (an example's).
        seconds: wall time, upper estimate.
        memory_bytes: peak memory of the process, upper estimate (``base_bytes`` included).
        disk_bytes: the files written (train.jsonl and canaries.jsonl; the corpus rows included).
        new_tokens: tokens the vocabulary of every model trained on the directory gains (design new-tokens).
        base_bytes: the memory the process held before the canaries (its corpus loaded).
    """

    canaries: int
    canary_rows: int
    text_chars: int
    seconds: float
    memory_bytes: int
    disk_bytes: int
    new_tokens: int
    base_bytes: int = 0

    @property
    def bytes_per_canary(self) -> float:
        return (
            BYTES_PER_CANARY
            + BYTES_PER_CHAR * self.text_chars
            + BYTES_PER_ROW * self.canary_rows / max(self.canaries, 1)
        )


def estimate(
    *,
    canaries: int,
    canary_rows: int,
    text_chars: int,
    corpus_rows: int,
    corpus_chars: int,
    new_tokens: int,
    base_bytes: int,
) -> InjectCost:
    """The cost of drawing ``canaries`` secrets whose canary text is about ``text_chars`` long and writing
    ``canary_rows`` canary lines beside ``corpus_rows`` corpus rows (``corpus_chars`` characters in all);
    ``base_bytes``: the memory the process holds already (its corpus loaded)."""
    rows = canary_rows + corpus_rows
    seconds = BASE_SECONDS + canaries * (SECONDS_PER_CANARY + SECONDS_PER_CHAR * text_chars) + rows * SECONDS_PER_ROW
    memory = base_bytes + canaries * (BYTES_PER_CANARY + BYTES_PER_CHAR * text_chars) + rows * BYTES_PER_ROW
    line = text_chars + 16  # {"text": "..."} and the newline
    disk = canary_rows * line + canaries * (2 * text_chars + 160) + corpus_chars + corpus_rows * 16
    return InjectCost(
        canaries=canaries,
        canary_rows=canary_rows,
        text_chars=text_chars,
        seconds=seconds,
        memory_bytes=int(memory),
        disk_bytes=int(disk),
        new_tokens=new_tokens,
        base_bytes=int(base_bytes),
    )


def worth_saying(cost: InjectCost) -> bool:
    """Whether the cost is large enough to be said before the work starts: the canaries' own memory, not what the
    process held before them (a test worker or notebook holding a framework would otherwise announce 9 canaries)."""
    return (
        cost.seconds >= SAY_SECONDS
        or cost.memory_bytes - cost.base_bytes >= SAY_BYTES
        or cost.new_tokens >= SAY_NEW_TOKENS
    )


def describe(cost: InjectCost) -> str:
    """One line: what the inject will take, and what its new tokens will cost every model trained on it."""
    text = (
        f"inject: {cost.canaries:,} canaries ({cost.canary_rows:,} canary rows): about {format_duration(cost.seconds)}, "
        f"{format_bytes(cost.memory_bytes)} of memory and {format_bytes(cost.disk_bytes)} of files (upper estimates)"
    )
    if cost.new_tokens:
        weights = cost.new_tokens * HIDDEN * 4
        text += (
            f"; the vocabulary gains {cost.new_tokens:,} declared new tokens: every model trained on this directory "
            f"adds {cost.new_tokens:,} embedding rows ({format_bytes(weights)} of float32 weights at hidden {HIDDEN}, about "
            "4x that while training with Adam)"
        )
    return text + "."


def check_fits(cost: InjectCost, out: Path, *, available: int | None = None, free_disk: int | None = None) -> None:
    """Refuse, before any work, an inject whose memory or files exceed what this machine has (``available``: bytes
    of free memory, default ``MemAvailable``; ``free_disk``: bytes free where ``out`` goes, default measured).

    Raises:
        UserInputError: naming what it needs, what there is and how many canaries would fit.
    """
    available = resources.available_memory() if available is None else available
    free_disk = resources.free_disk(out) if free_disk is None else free_disk
    if available is not None and cost.memory_bytes > available:
        fit = max(0, int((available - cost.base_bytes) / cost.bytes_per_canary))
        fit -= fit % 10 ** max(0, len(str(fit)) - 2)  # two significant digits, rounded down
        raise UserInputError(
            f"--per-frequency: {cost.canaries:,} canaries need about {format_bytes(cost.memory_bytes)} of "
            f"memory and {format_bytes(available)} is available here (about {cost.bytes_per_canary / 1e3:,.1f} kB "
            f"a canary of {cost.text_chars} characters); use at most about {fit:,} canaries, or a machine "
            "with more memory."
        )
    if free_disk is not None and cost.disk_bytes > free_disk:
        raise UserInputError(
            f"--out {out}: the inject writes about {format_bytes(cost.disk_bytes)} and {format_bytes(free_disk)} is "
            "free there; free disk space, choose another --out, or use fewer canaries."
        )
