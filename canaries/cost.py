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

import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dpaudit.errors import UserInputError

__all__ = ["InjectCost", "check_fits", "describe", "estimate", "resident_bytes", "worth_saying"]

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
        return BYTES_PER_CANARY + BYTES_PER_CHAR * self.text_chars + BYTES_PER_ROW * self.canary_rows / max(self.canaries, 1)


def estimate(*, canaries: int, canary_rows: int, text_chars: int, corpus_rows: int, corpus_chars: int,
             new_tokens: int, base_bytes: int) -> InjectCost:
    """The cost of drawing ``canaries`` secrets whose canary text is about ``text_chars`` long and writing
    ``canary_rows`` canary lines beside ``corpus_rows`` corpus rows (``corpus_chars`` characters in all);
    ``base_bytes``: the memory the process holds already (its corpus loaded)."""
    rows = canary_rows + corpus_rows
    seconds = (BASE_SECONDS + canaries * (SECONDS_PER_CANARY + SECONDS_PER_CHAR * text_chars)
               + rows * SECONDS_PER_ROW)
    memory = base_bytes + canaries * (BYTES_PER_CANARY + BYTES_PER_CHAR * text_chars) + rows * BYTES_PER_ROW
    line = text_chars + 16  # {"text": "..."} and the newline
    disk = canary_rows * line + canaries * (2 * text_chars + 160) + corpus_chars + corpus_rows * 16
    return InjectCost(canaries=canaries, canary_rows=canary_rows, text_chars=text_chars, seconds=seconds,
                      memory_bytes=int(memory), disk_bytes=int(disk), new_tokens=new_tokens, base_bytes=int(base_bytes))


def worth_saying(cost: InjectCost) -> bool:
    """Whether the cost is large enough to be said before the work starts."""
    return cost.seconds >= SAY_SECONDS or cost.memory_bytes >= SAY_BYTES or cost.new_tokens >= SAY_NEW_TOKENS


def _size(n: float) -> str:
    return f"{math.ceil(n / _GB * 10) / 10:.1f} GB" if n >= 0.1 * _GB else f"{math.ceil(n / 1e6):,} MB"


def _duration(seconds: float) -> str:
    return f"{math.ceil(seconds):,} s" if seconds < 120 else f"{math.ceil(seconds / 60):,} min"


def describe(cost: InjectCost) -> str:
    """One line: what the inject will take, and what its new tokens will cost every model trained on it."""
    text = (f"inject: {cost.canaries:,} canaries ({cost.canary_rows:,} canary rows): about {_duration(cost.seconds)}, "
            f"{_size(cost.memory_bytes)} of memory and {_size(cost.disk_bytes)} of files (upper estimates)")
    if cost.new_tokens:
        weights = cost.new_tokens * HIDDEN * 4
        text += (f"; the vocabulary gains {cost.new_tokens:,} declared new tokens: every model trained on this directory "
                 f"adds {cost.new_tokens:,} embedding rows ({_size(weights)} of float32 weights at hidden {HIDDEN}, about "
                 "4x that while training with Adam)")
    return text + "."


def _available_memory() -> int | None:
    """Memory new allocations can take without swapping (``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _free_disk(out: Path) -> int | None:
    """Free bytes on the file system ``out`` will be written to (its nearest existing parent)."""
    path = Path(os.path.abspath(out))
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def check_fits(cost: InjectCost, out: Path, *, available: int | None = None, free_disk: int | None = None) -> None:
    """Refuse, before any work, an inject whose memory or files exceed what this machine has (``available``: bytes
    of free memory, default ``MemAvailable``; ``free_disk``: bytes free where ``out`` goes, default measured).

    Raises:
        UserInputError: naming what it needs, what there is and how many canaries would fit.
    """
    available = _available_memory() if available is None else available
    free_disk = _free_disk(out) if free_disk is None else free_disk
    if available is not None and cost.memory_bytes > available:
        fit = max(0, int((available - cost.base_bytes) / cost.bytes_per_canary))
        fit -= fit % 10 ** max(0, len(str(fit)) - 2)  # two significant digits, rounded down
        raise UserInputError(f"--per-frequency: {cost.canaries:,} canaries need about {_size(cost.memory_bytes)} of "
                             f"memory and {_size(available)} is available here (about {cost.bytes_per_canary / 1e3:,.1f} kB "
                             f"a canary of {cost.text_chars} characters); use at most about {fit:,} canaries, or a machine "
                             "with more memory.")
    if free_disk is not None and cost.disk_bytes > free_disk:
        raise UserInputError(f"--out {out}: the inject writes about {_size(cost.disk_bytes)} and {_size(free_disk)} is "
                             "free there; free disk space, choose another --out, or use fewer canaries.")


def resident_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``; 0 where unknown)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
