"""Secret spaces, the vocabulary inject (the write side, canaries/) and attack share: the set R a canary's secret is drawn from,
and what the exposure attack needs of it. They live in the core so that neither side imports the other.

Exposure (Carlini et al. 2019) is ``log2 |R| - log2 rank``, so every space knows its exact size.
The attack on a masked LM scores candidates position by position, so the product spaces
(``digits:N``, ``words:N``) also expose :meth:`ProductSpace.positions` — the candidate tokens at
each position — and :meth:`SecretSpace.split`, which cuts a secret into those positions.

Formats:
    ``digits:N``  N decimal digits separated by spaces ("2 8 1 8 6 ..."), one token each; |R| = 10^N.
    ``words:N``   N words drawn uniformly from a word list of size V; |R| = V^N. The list is the
                  shipped ``dpaudit/data/words.txt``, a user file, or derived from the public split.
    ``phrases:K`` K consecutive words of a sentence from a separate phrase corpus (Anil et al. 2021,
                  section 5.4: mask a phrase of real text); the rest of the sentence is the
                  canary's context. ``phrases`` means ``phrases:3``.

Every space draws distinct secrets in uniformly random order from a numpy ``Generator``, so the
caller can filter the stream (e.g. drop secrets that occur in the corpus) and still get a uniform
sample without replacement of what is left.
"""

from __future__ import annotations

import abc
import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from dpaudit.errors import UserInputError

#: Product spaces up to this size are sampled by a lazy permutation of all indices; larger ones by
#: rejection of repeats (a permutation of 10^12 indices would not fit in memory).
_PERMUTE_MAX = 1 << 22
_BLOCK = 1024
# The shipped list's name in manifests (kept from when it lived in canaries/data/: it names the list, not a path).
SHIPPED_WORDS = "canaries/data/words.txt"
DEFAULT_PHRASE_WORDS = 3
#: How many words ``--word-list public`` keeps: the most frequent in the public split.
PUBLIC_WORDS_MAX = 1000
_WORD = re.compile(r"[a-z]{2,}")


@dataclass(frozen=True)
class Draw:
    """One secret and the context the space puts around it (phrases: the rest of its sentence)."""

    secret: str
    left: str = ""
    right: str = ""


class SecretSpace(abc.ABC):
    """A finite set R of secrets with an exact size and a uniform, collision-free sampler."""

    #: The format string, e.g. ``"digits:10"``.
    format: str

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """|R|, exactly."""

    @property
    def log2_size(self) -> float:
        """log2 |R|: the largest exposure a secret from this space can have."""
        return math.log2(self.size)  # exact for ints of any size, no float overflow

    @abc.abstractmethod
    def draws(self, rng: np.random.Generator) -> Iterator[Draw]:
        """Distinct secrets of R in uniformly random order; ends when R is exhausted."""

    def split(self, secret: str) -> list[str]:
        """The secret cut into its positions (whitespace-separated tokens)."""
        return secret.split(" ")

    def positions(self) -> list[list[str]] | None:
        """Candidate strings per position, or None when R does not factorize by position."""
        return None

    @abc.abstractmethod
    def describe(self) -> dict[str, Any]:
        """The manifest entry: enough to rebuild the space with :func:`space_from_manifest`."""


class ProductSpace(SecretSpace):
    """``length`` positions, each uniform over the same ``alphabet``: |R| = len(alphabet)^length."""

    def __init__(self, *, kind: str, alphabet: Sequence[str], length: int, source: str = "") -> None:
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}.")
        if len(alphabet) < 2:
            raise ValueError(f"alphabet must have at least 2 symbols, got {len(alphabet)}.")
        if len(set(alphabet)) != len(alphabet):
            raise ValueError("alphabet must not contain duplicates.")
        if any(not a or any(c.isspace() for c in a) for a in alphabet):
            raise ValueError("alphabet symbols must be non-empty and contain no whitespace.")
        self.kind = kind
        self.source = source
        self.alphabet = list(alphabet)
        self.length = length
        self.format = f"{kind}:{length}"

    @property
    def size(self) -> int:
        return len(self.alphabet) ** self.length

    def positions(self) -> list[list[str]]:
        return [list(self.alphabet) for _ in range(self.length)]

    def secret_of(self, digits: Sequence[int]) -> str:
        """The secret whose position i holds ``alphabet[digits[i]]``."""
        return " ".join(self.alphabet[d] for d in digits)

    def index_of(self, secret: str) -> list[int]:
        """Inverse of :meth:`secret_of`; raises ValueError for a string outside R."""
        parts = self.split(secret)
        if len(parts) != self.length:
            raise ValueError(f"{secret!r} has {len(parts)} positions, expected {self.length}.")
        lookup = {a: i for i, a in enumerate(self.alphabet)}
        try:
            return [lookup[p] for p in parts]
        except KeyError as err:
            raise ValueError(f"{secret!r}: {err.args[0]!r} is not in the {self.kind} alphabet.") from None

    def draws(self, rng: np.random.Generator) -> Iterator[Draw]:
        base = len(self.alphabet)
        if self.size <= _PERMUTE_MAX:
            # One permutation of all indices, decoded lazily in blocks (mixed radix, MSB first).
            order = rng.permutation(self.size)
            for start in range(0, self.size, _BLOCK):
                for index in order[start : start + _BLOCK].tolist():
                    digits = [0] * self.length
                    for pos in range(self.length - 1, -1, -1):
                        index, digits[pos] = divmod(index, base)
                    yield Draw(self.secret_of(digits))
            return
        seen: set[tuple[int, ...]] = set()
        while True:
            for row in map(tuple, rng.integers(0, base, size=(_BLOCK, self.length)).tolist()):
                if row not in seen:
                    seen.add(row)
                    yield Draw(self.secret_of(row))

    def describe(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "format": self.format,
            "kind": self.kind,
            "positions": self.length,
            "size": self.size,
            "log2_size": self.log2_size,
        }
        if self.kind == "words":
            entry["word_list"] = {
                "source": self.source,
                "size": len(self.alphabet),
                "sha256": words_sha256(self.alphabet),
                "words": list(self.alphabet),
            }
        return entry


class PhraseSpace(SecretSpace):
    """K-word phrases of real sentences; the rest of the sentence becomes the canary's context.

    R is the set of distinct K-word spans of the eligible sentences (those with more than K words,
    so a canary always has context). Drawing picks an unused sentence uniformly, then a span in it
    uniformly, skipping a phrase already drawn, so each canary comes from a different sentence.
    """

    def __init__(self, *, sentences: Sequence[str], words: int = DEFAULT_PHRASE_WORDS, source: str = "") -> None:
        if words < 1:
            raise ValueError(f"words must be >= 1, got {words}.")
        self.words = words
        self.source = source
        self.format = f"phrases:{words}"
        self.sentences = [s.split() for s in sentences]
        self.eligible = [i for i, s in enumerate(self.sentences) if len(s) > words]
        self._size: int | None = None

    @property
    def size(self) -> int:
        if self._size is None:
            spans = set()
            for i in self.eligible:
                toks = self.sentences[i]
                spans.update(" ".join(toks[s : s + self.words]) for s in range(len(toks) - self.words + 1))
            self._size = len(spans)
        return self._size

    def draws(self, rng: np.random.Generator) -> Iterator[Draw]:
        used: set[str] = set()
        for i in rng.permutation(len(self.eligible)).tolist():
            toks = self.sentences[self.eligible[i]]
            start = int(rng.integers(0, len(toks) - self.words + 1))
            secret = " ".join(toks[start : start + self.words])
            if secret in used:
                continue
            used.add(secret)
            left = " ".join(toks[:start])
            right = " ".join(toks[start + self.words :])
            yield Draw(secret, left + " " if left else "", " " + right if right else "")

    def describe(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "kind": "phrases",
            "phrase_words": self.words,
            "size": self.size,
            "log2_size": self.log2_size,
            "phrase_corpus": {"source": self.source, "sentences": len(self.sentences), "eligible": len(self.eligible)},
        }


# -- word lists --------------------------------------------------------------------------------


def shipped_words() -> list[str]:
    """The word list shipped with dpaudit (common lowercase English words, one per line)."""
    text = resources.files("dpaudit").joinpath("data/words.txt").read_text(encoding="utf-8")
    return [w for w in text.split("\n") if w]


def words_sha256(words: Iterable[str]) -> str:
    """sha256 of a word list as it is written to disk: one word per line, newline-terminated."""
    return hashlib.sha256("".join(w + "\n" for w in words).encode("utf-8")).hexdigest()


def read_word_list(path: str, *, option: str = "--word-list") -> list[str]:
    """A user word list: one word per line, no whitespace inside words, no duplicates."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except FileNotFoundError:
        raise UserInputError(f"{option} {path}: no such file; pass a word list (one word per line) or 'public'.") from None
    except UnicodeDecodeError:
        raise UserInputError(f"{option} {path}: not valid UTF-8; save the word list as UTF-8.") from None
    words, seen = [], {}
    for lineno, line in enumerate(lines, start=1):
        word = line.strip()
        if not word:
            continue
        if any(c.isspace() for c in word):
            raise UserInputError(f"{option} {path}:{lineno}: {word!r} contains whitespace; put one word per line.")
        if word in seen:
            raise UserInputError(f"{option} {path}:{lineno}: {word!r} repeats line {seen[word]}; remove duplicates.")
        seen[word] = lineno
        words.append(word)
    if len(words) < 2:
        raise UserInputError(f"{option} {path}: needs at least 2 words, found {len(words)}.")
    return words


def words_from_texts(texts: Iterable[str], *, limit: int = PUBLIC_WORDS_MAX) -> list[str]:
    """The ``limit`` most frequent lowercase words (2+ letters a-z) of ``texts``, by count then name.

    Used for ``--word-list public``: words a tokenizer trained on the public split has most likely
    seen whole, so each secret word is one token and the exposure attack can enumerate them.
    """
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(_WORD.findall(text.lower()))
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return sorted(w for w, _ in ranked[:limit])


# -- parsing -----------------------------------------------------------------------------------


def parse_format(spec: str) -> tuple[str, int]:
    """``"digits:10"`` -> ``("digits", 10)``; ``"phrases"`` -> ``("phrases", 3)``.

    Raises:
        UserInputError: naming ``--format`` and the accepted forms.
    """
    hint = "use digits:N, words:N or phrases[:K], e.g. --format digits:10"
    kind, _, count = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in ("digits", "words", "phrases"):
        raise UserInputError(f"--format {spec!r}: unknown secret format; {hint}.")
    if not count:
        if kind == "phrases":
            return kind, DEFAULT_PHRASE_WORDS
        raise UserInputError(f"--format {spec!r}: say how many {kind}, e.g. --format {kind}:6.")
    if not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= 64:
        raise UserInputError(f"--format {spec!r}: the count must be an integer from 1 to 64; {hint}.")
    return kind, int(count)


def digit_space(length: int) -> ProductSpace:
    """``digits:N``: |R| = 10^N."""
    return ProductSpace(kind="digits", alphabet=[str(d) for d in range(10)], length=length)


def word_space(length: int, words: Sequence[str], *, source: str) -> ProductSpace:
    """``words:N`` over ``words``; ``source`` says where the list came from (for the manifest)."""
    return ProductSpace(kind="words", alphabet=words, length=length, source=source)


def space_from_manifest(entry: dict[str, Any]) -> SecretSpace:
    """Rebuild a product space from its manifest entry (phrase spaces need their corpus file).

    Raises:
        UserInputError: if the entry is damaged (the word list no longer matches its sha256).
    """
    kind, length = entry["kind"], entry.get("positions")
    if kind == "digits":
        return digit_space(int(length))
    if kind == "words":
        wl = entry["word_list"]
        if words_sha256(wl["words"]) != wl["sha256"]:
            raise UserInputError("manifest word list does not match its sha256; the run directory is damaged, rerun inject.")
        return word_space(int(length), wl["words"], source=wl["source"])
    raise UserInputError(f"secret space {entry.get('format')!r} cannot be rebuilt from a manifest alone.")
