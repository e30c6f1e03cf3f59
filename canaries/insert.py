"""Insertion: the schedule arithmetic, the member/heldout/public split, and streaming the splits to disk.

The corpus is held in memory once, as a list of texts plus one small label index per row; the
splits and the shuffled training order are integer arrays over that list, and rows are encoded
to JSON Lines in blocks as they are written. A 1,000,000-row corpus therefore costs its texts
plus a few bytes per row, never a second copy.

Schedule (the canary design): each frequency f gets ``per_frequency`` canaries inserted f times,
and ``holdout`` control canaries (frequency 0) are generated the same way but never inserted.
In coin-flip mode (Steinke et al. 2023, one-run auditing) there is one frequency and each canary
is a member with probability 1/2, independently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Any, TextIO

import numpy as np

from dpaudit.common.errors import UserInputError
from dpaudit.common.progress import progress_counter

DEFAULT_FREQUENCIES: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 50, 100)
#: The schedules ``dpaudit inject`` picks from when --frequencies is not given, fullest first: each keeps the
#: repetition counts spread from 1 up (Carlini et al. 2019 and Anil et al. 2021 read memorization off such a
#: ladder), thinned and then shortened from the top for a smaller corpus.
DEFAULT_LADDERS: tuple[tuple[int, ...], ...] = (
    DEFAULT_FREQUENCIES,
    (1, 2, 5, 10, 20, 50, 100),
    (1, 2, 5, 10, 20, 50),
    (1, 2, 5, 10, 20),
    (1, 2, 5, 10),
    (1, 2, 5),
    (1, 2),
    (1,),
)
#: The most canary rows a default schedule may make of train.jsonl: a quarter, so the training set stays mostly the
#: corpus the audit is about (the full ladder at 20 canaries per frequency is 24.3% of a 20,000-row built-in corpus).
DEFAULT_CANARY_SHARE = 0.25
MEMBER, HELDOUT, PUBLIC = 0, 1, 2
_WRITE_BLOCK = 8192


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """How many canaries, at which frequencies, and how membership is decided.

    Attributes:
        frequencies: insertion counts, each a distinct positive integer.
        per_frequency: canaries per frequency (coin-flip: the number of canaries).
        holdout: control canaries, never inserted (must be 0 in coin-flip mode).
        coin_flip: decide each canary's membership by an independent fair coin.
    """

    frequencies: tuple[int, ...] = DEFAULT_FREQUENCIES
    per_frequency: int = 20
    holdout: int = 20
    coin_flip: bool = False

    def __post_init__(self) -> None:
        if not self.frequencies:
            raise ValueError("frequencies must be non-empty, got ().")
        for f in self.frequencies:
            if isinstance(f, bool) or not isinstance(f, int) or f <= 0:
                raise ValueError(f"frequencies must be positive integers, got {f!r}.")
        if len(set(self.frequencies)) != len(self.frequencies):
            raise ValueError(f"frequencies must be distinct, got {self.frequencies}.")
        if self.per_frequency < 1:
            raise ValueError(f"per_frequency must be >= 1, got {self.per_frequency}.")
        if self.holdout < 0:
            raise ValueError(f"holdout must be >= 0, got {self.holdout}.")
        if max(self.frequencies) > MAX_FREQUENCY:
            raise ValueError(
                f"frequencies must be at most {MAX_FREQUENCY:,} insertions each, got {max(self.frequencies):,}."
            )
        if self.n_canaries > MAX_CANARIES:
            raise ValueError(
                f"--per-frequency x frequencies + --holdout: {self.n_canaries:,} canaries, above the limit of "
                f"{MAX_CANARIES:,} (each is a secret drawn without collision); audits use tens to thousands."
            )
        if self.per_frequency * sum(self.frequencies) > MAX_INSERTIONS:
            raise ValueError(
                f"--per-frequency x frequencies: {self.per_frequency * sum(self.frequencies):,} canary rows, above "
                f"the limit of {MAX_INSERTIONS:,} rows of train.jsonl; lower the frequencies or --per-frequency."
            )
        if self.coin_flip and len(self.frequencies) != 1:
            raise ValueError(f"coin_flip needs exactly one frequency, got {self.frequencies}.")
        if self.coin_flip and self.holdout:
            raise ValueError(
                f"holdout must be 0 in coin-flip mode (the coin picks the non-members), got {self.holdout}."
            )

    @property
    def mode(self) -> str:
        return "coin-flip" if self.coin_flip else "schedule"

    @property
    def n_canaries(self) -> int:
        """Canaries generated: inserted ones and controls."""
        return self.per_frequency * len(self.frequencies) + self.holdout

    def canary_frequencies(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """Frequency of each canary in id order (0 = not inserted).

        Schedule mode: frequencies in the order given, ``per_frequency`` each, then the controls.
        Coin-flip mode: one fair coin per canary from ``rng`` (required).
        """
        if self.coin_flip:
            if rng is None:
                raise ValueError("rng is required in coin-flip mode.")
            coins = rng.integers(0, 2, size=self.per_frequency)
            return (coins * self.frequencies[0]).astype(np.int64)
        inserted = np.repeat(np.asarray(self.frequencies, dtype=np.int64), self.per_frequency)
        return np.concatenate([inserted, np.zeros(self.holdout, dtype=np.int64)])


def default_frequencies(members: int, per_frequency: int) -> tuple[int, ...]:
    """The fullest of :data:`DEFAULT_LADDERS` whose canary rows stay within :data:`DEFAULT_CANARY_SHARE` of train.jsonl.

    ``members`` corpus rows are trained on, beside ``per_frequency x sum(frequencies)`` canary rows. A 4,000-row
    corpus (2,800 members at the default splits) gets 1,2,5,10,20 (760 canary rows, 21.3%); 20,000 rows keep the
    full ladder up to 100. When even one insertion per canary is above the share, the shortest ladder ``(1,)`` is
    returned and the canary-share check (:func:`canaries.pipeline.check_canary_share`) decides.
    """
    for ladder in DEFAULT_LADDERS:
        rows = per_frequency * sum(ladder)
        if rows <= DEFAULT_CANARY_SHARE * (rows + members):
            return ladder
    return DEFAULT_LADDERS[-1]


#: The largest insertion count a frequency may ask for: each insertion is one row of ``train.jsonl`` (and
#: 8 bytes of the shuffled training order in memory), and memorization studies stop far below it
#: (Carlini et al. 2019 and Anil et al. 2021 go up to a few hundred repetitions).
MAX_FREQUENCY = 1_000_000
#: The most canaries (inserted and controls) one run may draw: each is a row of ``canaries.jsonl`` and a
#: secret drawn without collision; audits use tens to thousands.
MAX_CANARIES = 1_000_000
#: The most canary rows (insertions, all frequencies together) one run may write to ``train.jsonl``, --force or not.
MAX_INSERTIONS = 100_000_000


def parse_count(entry: str, *, option: str, text: str | None = None, maximum: int, why: str, example: str) -> int:
    """One positive integer written in ASCII digits (``"12"``), at most ``maximum``, or a one-line error.

    Python's ``int()`` also reads other scripts' digits (``"١٢"`` is 12) and ``str.isdigit()`` accepts
    superscripts that ``int()`` then refuses (``"²"``), so only ``0-9`` are accepted here.

    Args:
        entry: the text of one number.
        option: the option named in the error; ``text`` the whole value given to it, when ``entry`` is one item.
        maximum: the largest value accepted; ``why`` says why, in a clause ("each insertion is a row").
        example: a valid value for the error message.

    Raises:
        dpaudit.common.errors.UserInputError
    """
    given = f"{option} {text!r}" if text is not None else f"{option} {entry!r}"
    if not (entry.isascii() and entry.isdigit()) or int(entry) <= 0:
        what = "an empty item" if not entry else repr(entry)
        raise UserInputError(f"{given}: {what} is not a positive integer in the digits 0-9; give e.g. {example}.")
    value = int(entry)
    if value > maximum:
        raise UserInputError(f"{given}: {value:,} is above the limit of {maximum:,} ({why}).")
    return value


def parse_frequencies(text: str, *, option: str = "--frequencies") -> tuple[int, ...]:
    """``"1,2,5"`` -> ``(1, 2, 5)``, with a one-line error naming the bad entry.

    Each frequency is a positive ASCII integer of at most :data:`MAX_FREQUENCY`; an empty list is refused.

    Raises:
        dpaudit.common.errors.UserInputError
    """
    if not text.strip():
        raise UserInputError(f"{option} is empty; give a comma-separated list of insertion counts such as 1,2,5,10.")
    out: list[int] = []
    for entry in (e.strip() for e in text.split(",")):
        value = parse_count(
            entry,
            option=option,
            text=text,
            maximum=MAX_FREQUENCY,
            example="1,2,5,10",
            why="each insertion is one row of train.jsonl; memorization studies use at most a few hundred",
        )
        if value in out:
            raise UserInputError(f"{option} {text!r}: {entry} is listed twice; give each frequency once.")
        out.append(value)
    return tuple(out)


# -- splits ------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SplitSpec:
    """How the corpus is divided: fractions, or absolute sizes that override them."""

    heldout_fraction: float = 0.1
    public_fraction: float = 0.2
    heldout_size: int | None = None
    public_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("heldout_fraction", "public_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}.")
        for name in ("heldout_size", "public_size"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}.")


@dataclass(frozen=True, kw_only=True)
class SplitCounts:
    """Rows per split; members + heldout + public = the corpus."""

    members: int
    heldout: int
    public: int

    @property
    def total(self) -> int:
        return self.members + self.heldout + self.public


def requested_sizes(n_rows: int, spec: SplitSpec) -> tuple[int, int]:
    """The held-out and public sizes ``spec`` asks of a corpus of ``n_rows`` (fractions rounded half up)."""

    def size(fraction: float, absolute: int | None) -> int:
        return absolute if absolute is not None else math.floor(fraction * n_rows + 0.5)

    return size(spec.heldout_fraction, spec.heldout_size), size(spec.public_fraction, spec.public_size)


def public_beyond(n_rows: int, spec: SplitSpec) -> int:
    """The public rows a generated corpus makes beyond its ``n_rows``: an absolute ``public_size`` that leaves no
    member beside the held-out rows (while the held-out rows alone leave some), else 0 (the splits fit)."""
    heldout, public = requested_sizes(n_rows, spec)
    if spec.public_size is None or heldout >= n_rows or heldout + public < n_rows:
        return 0
    return public


def split_counts(n_rows: int, spec: SplitSpec) -> SplitCounts:
    """Exact split sizes for ``n_rows`` (fractions rounded half up; at least one member).

    Raises:
        dpaudit.common.errors.UserInputError: when the held-out and public rows leave no members.
    """
    heldout, public = requested_sizes(n_rows, spec)
    if public_beyond(n_rows, spec):
        raise UserInputError(
            f"--public-size {public}: the corpus has {n_rows} examples and {heldout} are held out, leaving no training "
            f"members beside {public} public ones; lower --public-size to at most {n_rows - heldout - 1} or use a larger "
            "corpus (only --corpus builtin:assistant generates public rows beyond the corpus)."
        )
    if heldout + public >= n_rows:
        raise UserInputError(
            f"the corpus has {n_rows} examples but {heldout} held-out and {public} public ones are requested, "
            "leaving no training members; lower --heldout-size/--public-size (or the fractions) or use a larger corpus."
        )
    return SplitCounts(members=n_rows - heldout - public, heldout=heldout, public=public)


def assign_splits(counts: SplitCounts, rng: np.random.Generator) -> np.ndarray:
    """A split code per row (MEMBER, HELDOUT or PUBLIC), uniformly at random with exact counts."""
    codes = np.empty(counts.total, dtype=np.int8)
    order = rng.permutation(counts.total)
    codes[order[: counts.public]] = PUBLIC
    codes[order[counts.public : counts.public + counts.heldout]] = HELDOUT
    codes[order[counts.public + counts.heldout :]] = MEMBER
    return codes


def train_order(member_rows: np.ndarray, frequencies: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The shuffled training stream: row index ``i >= 0`` is corpus row i, ``-(c + 1)`` is canary c.

    Canary c appears exactly ``frequencies[c]`` times; every member row exactly once.
    """
    frequencies = np.asarray(frequencies, dtype=np.int64)
    if frequencies.size and frequencies.min() < 0:
        raise ValueError("frequencies must be >= 0.")
    repeats = np.repeat(np.arange(frequencies.size, dtype=np.int64), frequencies)
    order = np.concatenate([np.asarray(member_rows, dtype=np.int64), -(repeats + 1)])
    rng.shuffle(order)
    return order


# -- writing -----------------------------------------------------------------------------------


@dataclass
class RowEncoder:
    """Encodes corpus rows and canaries as JSON Lines identical to :func:`dpaudit.files.run_dirs.dumps_jsonl_line`.

    Labels are encoded once each (rows carry a label index), and the text with the C string
    encoder json.dumps itself uses, so a million rows encode in about a second.
    """

    labels: Sequence[Any] | None = None
    _label_json: list[str] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.labels is not None:
            self._label_json = [json.dumps(label, ensure_ascii=False) for label in self.labels]

    def line(self, text: str, label_index: int | None = None) -> str:
        if self.labels is None:
            return '{"text": ' + encode_basestring(text) + "}\n"
        return '{"text": ' + encode_basestring(text) + ', "label": ' + self._label_json[label_index] + "}\n"  # type: ignore[index]


def write_rows(
    handle: TextIO,
    rows: np.ndarray,
    *,
    texts: Sequence[str],
    label_ids: Sequence[int] | None,
    encoder: RowEncoder,
    canary_lines: Sequence[str] = (),
    desc: str = "",
) -> int:
    """Write the rows named by ``rows`` (see :func:`train_order`) in blocks; returns the count."""
    written = 0
    # dpaudit's bars: redrawn on a terminal, a plain line every 15 s in a log (tqdm alone printed nothing there,
    # and a million-canary inject wrote its files in silence).
    with progress_counter(total=len(rows), desc=desc, unit="rows") as bar:
        for start in range(0, len(rows), _WRITE_BLOCK):
            block = rows[start : start + _WRITE_BLOCK].tolist()
            if label_ids is None:
                lines = [encoder.line(texts[i]) if i >= 0 else canary_lines[-i - 1] for i in block]
            else:
                lines = [encoder.line(texts[i], label_ids[i]) if i >= 0 else canary_lines[-i - 1] for i in block]
            handle.write("".join(lines))
            written += len(lines)
            bar.update(len(lines))
    return written
