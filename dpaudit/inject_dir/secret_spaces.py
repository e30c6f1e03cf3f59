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

Designs (``dpaudit inject --design``, for one-run audits of a released model, after Panda et al. 2025):
    ``format``          the secret comes from ``--format`` (the default).
    ``new-tokens[:L]``  a token that exists nowhere else, written L times (default 24): a random lowercase word
                        of :data:`NEW_TOKEN_LETTERS` letters, its own for each canary. The set of every canary's
                        token is declared in the inject manifest and added to the tokenizer's vocabulary
                        (``dpaudit.training.tokenizer``), so each is one token that only its own canary trains.
                        One token written L times, rather than L different ones: whichever positions the MLM
                        masks, every sampled insertion pushes the same embedding row the same way, so a
                        single insertion leaves the most signal per unit of clipped gradient (measured in
                        ``benchmarks/bench_designed_canaries.py``).
    ``rare-tokens[:L]`` L words (default 4) drawn uniformly from the :data:`RARE_WORDS_MAX` rarest words of the
                        public split: tokens the public vocabulary knows but the data seldom uses.

Every space draws distinct secrets in uniformly random order from a numpy ``Generator``, so the
caller can filter the stream (e.g. drop secrets that occur in the corpus) and still get a uniform
sample without replacement of what is left.

References:
  Panda, Tang, Nasr, Choquette-Choo & Mittal 2025, "Privacy Auditing of Large Language Models"
    (canaries of new tokens, memorized from one insertion).
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

from dpaudit.common.errors import UserInputError

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
#: Canary designs (``dpaudit inject --design``).
DESIGN_FORMAT, NEW_TOKENS, RARE_TOKENS = "format", "new-tokens", "rare-tokens"
DESIGNS = (DESIGN_FORMAT, NEW_TOKENS, RARE_TOKENS)
#: Secret kinds whose canaries need no template context: a phrase's own sentence; a new token's own copies (each
#: scored with the others shown). The exposure attack's shared-context warning does not apply to them.
CONTEXT_FREE_KINDS = ("phrases", NEW_TOKENS)
#: Positions of a designed secret when ``--design`` names no count: the new token's repetitions, the rare words.
DEFAULT_DESIGN_LENGTH = {"new-tokens": 24, "rare-tokens": 4}
#: Letters of a new token: 26^10 ~ 1.4e14 words, so two draws or a corpus word coincide with negligible probability.
NEW_TOKEN_LETTERS = 10
#: How many words ``rare-tokens`` draws from: the least frequent of the public split.
RARE_WORDS_MAX = 200


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
    #: What kind of secrets: ``digits``, ``words``, ``phrases``, ``new-tokens`` or ``rare-tokens`` (the manifest's
    #: ``secret_space.kind``; the canary attack picks its score by it).
    kind: str

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

    def units(self, secret: str) -> list[str]:
        """What must occur nowhere in the corpus for ``secret`` to be usable: the secret itself (a new-token
        secret: each of its tokens, which must exist nowhere else)."""
        return [secret]

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
        if self.kind in ("words", RARE_TOKENS):
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

    kind = "phrases"

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
            spans: set[str] = set()
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


class NewTokenSpace(SecretSpace):
    """``new-tokens:L``: secrets of L positions filled by ``distinct`` new tokens, each a random word of
    ``letters`` lowercase ASCII letters (``distinct`` < L repeats them in turn: "t t t ..." for one).

    Every token drawn is distinct from every other one of the stream (so two canaries never share a
    token), and a secret's tokens must each occur nowhere in the corpus (:meth:`units`): a new token is
    trained by its own canary only. |R| counts the ``distinct``-sequences of distinct tokens.
    """

    kind = NEW_TOKENS

    def __init__(self, *, length: int, distinct: int | None = None, letters: int = NEW_TOKEN_LETTERS) -> None:
        distinct = length if distinct is None else distinct
        if length < 1:
            raise ValueError(f"length must be >= 1, got {length}.")
        if not 1 <= distinct <= length:
            raise ValueError(f"distinct must be in [1, length={length}], got {distinct}.")
        if letters < 4:
            raise ValueError(f"letters must be >= 4, got {letters}.")
        self.length = length
        self.distinct = distinct
        self.letters = letters
        self.format = f"{NEW_TOKENS}:{length}"

    @property
    def size(self) -> int:
        return math.perm(26**self.letters, self.distinct)

    def units(self, secret: str) -> list[str]:
        return sorted(set(self.split(secret)))

    def draws(self, rng: np.random.Generator) -> Iterator[Draw]:
        seen: set[str] = set()
        alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
        while True:
            block = alphabet[rng.integers(0, 26, size=(_BLOCK, self.distinct, self.letters))]
            for row in block:
                tokens = [bytes(t).decode("ascii") for t in row]
                if len(set(tokens)) < self.distinct or not seen.isdisjoint(tokens):
                    continue
                seen.update(tokens)
                yield Draw(" ".join(tokens[i % self.distinct] for i in range(self.length)))

    def describe(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "kind": self.kind,
            "positions": self.length,
            "distinct_tokens": self.distinct,
            "token_letters": self.letters,
            "size": self.size,
            "log2_size": self.log2_size,
        }


def new_token_space(length: int) -> NewTokenSpace:
    """``new-tokens:L``: one new token per canary, written L times."""
    return NewTokenSpace(length=length, distinct=1)


def rare_token_space(length: int, public_texts: Iterable[str]) -> ProductSpace:
    """``rare-tokens:L``: L words, each uniform over the :data:`RARE_WORDS_MAX` rarest words of ``public_texts``.

    Raises:
        UserInputError: when the public split has fewer than 2 distinct words.
    """
    words = rare_words(public_texts)
    if len(words) < 2:
        raise UserInputError(
            f"--design {RARE_TOKENS}: the public split has {len(words)} distinct word(s) to draw rare "
            "tokens from; use a corpus with a larger public split."
        )
    return ProductSpace(kind=RARE_TOKENS, alphabet=words, length=length, source="public.jsonl (rarest words)")


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
        raise UserInputError(
            f"{option} {path}: no such file; pass a word list (one word per line) or 'public'."
        ) from None
    except UnicodeDecodeError:
        raise UserInputError(f"{option} {path}: not valid UTF-8; save the word list as UTF-8.") from None
    words: list[str] = []
    seen: dict[str, int] = {}  # word -> its line
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


def rare_words(texts: Iterable[str], *, limit: int = RARE_WORDS_MAX) -> list[str]:
    """The ``limit`` (:data:`RARE_WORDS_MAX`) least frequent lowercase words (2+ letters a-z) of ``texts``, by
    count then name, sorted: the alphabet of ``rare-tokens`` secrets (the public vocabulary knows their pieces)."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(_WORD.findall(text.lower()))
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return sorted(w for w, _ in ranked[:limit])


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


def parse_design(spec: str) -> tuple[str, int | None]:
    """``"new-tokens:4"`` -> ``("new-tokens", 4)``; ``"rare-tokens"`` -> ``("rare-tokens", 4)``; ``"format"`` ->
    ``("format", None)`` (the secret then comes from ``--format``).

    Raises:
        UserInputError: naming ``--design`` and the accepted names.
    """
    hint = f"use {DESIGN_FORMAT}, {NEW_TOKENS}[:L] or {RARE_TOKENS}[:L], e.g. --design {NEW_TOKENS}:4"
    name, colon, count = spec.strip().partition(":")
    name = name.lower()
    if name not in DESIGNS:
        raise UserInputError(f"--design {spec!r}: unknown canary design; {hint}.")
    if name == DESIGN_FORMAT:
        if colon:
            raise UserInputError(
                f"--design {spec!r}: the format design takes its secret from --format; write --design "
                f"{DESIGN_FORMAT} --format digits:N."
            )
        return name, None
    if not colon:
        return name, DEFAULT_DESIGN_LENGTH[name]
    if not (count.isascii() and count.isdigit()) or not 1 <= int(count) <= 64:
        raise UserInputError(f"--design {spec!r}: the count must be an integer from 1 to 64; {hint}.")
    return name, int(count)


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
    kind = entry["kind"]
    length: Any = entry.get("positions")  # a JSON value: int() reads it
    if kind == "digits":
        return digit_space(int(length))
    if kind == "words":
        wl = entry["word_list"]
        if words_sha256(wl["words"]) != wl["sha256"]:
            raise UserInputError(
                "manifest word list does not match its sha256; the run directory is damaged, rerun inject."
            )
        return word_space(int(length), wl["words"], source=wl["source"])
    raise UserInputError(f"secret space {entry.get('format')!r} cannot be rebuilt from a manifest alone.")
