"""Which tokens of a canary are its secret, checked against what the secret space assumes.

The exact exposure rank (Carlini et al. 2019) needs the model's score of every candidate secret to
be the sum of one log-probability per position, with position ``i`` ranging over the space's
alphabet. That holds only if, for this tokenizer, every symbol of the alphabet is exactly one token
and the canary's secret, in its sentence, is exactly those tokens. A tokenizer that splits a digit
or a word into pieces breaks the factorization, so it is an error naming the canary (a silent skip
would bias the statistics toward the canaries that happen to tokenize well). Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpaudit.common.errors import UserInputError


class CanaryLike(Protocol):
    """What scoring needs of a canary (``canaries.jsonl`` rows as records or objects)."""

    id: str
    prefix: str
    secret: str
    suffix: str


class SpaceLike(Protocol):
    """What scoring needs of a finite product secret space (``digits:N``, ``words:N``)."""

    format: str
    alphabet: list[str]
    length: int

    def split(self, secret: str) -> list[str]: ...


class ProductSpaceLike(SpaceLike, Protocol):
    """A product space whose secrets scoring also builds from symbol indices (the causal-LM candidates)."""

    def secret_of(self, digits: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class CanaryTokens:
    """A tokenized canary: its token ids and the token positions of its secret, in order."""

    input_ids: list[int]
    secret_positions: list[int]


def _trimmed(text: str, offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """Token spans without the whitespace they cover outside [start, end): a byte-level BPE token such as GPT-2's
    "Ġ1234" spans the space before it, which belongs to the context, yet the token is the secret's own."""
    out = []
    for a, b in offsets:
        while a < b and a < start and text[a].isspace():
            a += 1
        while b > a and b > end and text[b - 1].isspace():
            b -= 1
        out.append((a, b))
    return out


def _overlapping(offsets: Sequence[tuple[int, int]], start: int, end: int) -> list[int]:
    """Token indices whose character span overlaps [start, end) (special tokens have empty spans)."""
    return [i for i, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


def alphabet_token_ids(tokenizer: Any, space: SpaceLike) -> np.ndarray:
    """The token id of each alphabet symbol, tokenized in running text (one call for the alphabet).

    Raises:
        UserInputError: if a symbol is not exactly one known token, or two symbols share one.
    """
    # Each symbol after a space, as a secret's symbols stand in a canary's sentence: a byte-level BPE (GPT-2, RoBERTa)
    # has one token for "4" at the start of a text and another ("Ġ4") after a space; the first symbol must not be
    # read in the start-of-text form when every secret symbol is in the other one.
    text = " " + " ".join(space.alphabet)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    # Every token's edge whitespace trimmed (start past the end, end before it): symbols have none of their own.
    offsets, ids = _trimmed(text, enc["offset_mapping"], len(text), 0), enc["input_ids"]
    unk = getattr(tokenizer, "unk_token_id", None)
    out, start = [], 1
    for symbol in space.alphabet:
        end = start + len(symbol)
        tokens = _overlapping(offsets, start, end)
        if len(tokens) != 1 or tuple(offsets[tokens[0]]) != (start, end) or ids[tokens[0]] == unk:
            pieces = [tokenizer.convert_ids_to_tokens(ids[t]) for t in tokens]
            raise UserInputError(
                f"the {space.format} secret space assumes each symbol is one token, but this model's tokenizer turns "
                f"{symbol!r} into {pieces}; audit with a tokenizer that keeps each symbol whole (e.g. a words:N list "
                "from --word-list public, or digits split individually)."
            )
        out.append(ids[tokens[0]])
        start = end + 1
    if len(set(out)) != len(out):
        raise UserInputError(
            f"this model's tokenizer maps two symbols of the {space.format} space to one token; "
            "the secrets cannot be told apart."
        )
    return np.asarray(out, dtype=np.int64)


def locate_secrets(
    tokenizer: Any, canaries: Sequence[CanaryLike], space: SpaceLike, *, max_length: int
) -> list[CanaryTokens]:
    """Tokenize canaries (one batched call) and find each secret's tokens, one per position.

    Raises:
        UserInputError: naming the canary whose secret is not one token per position, or whose
            text is longer than the model accepts.
    """
    enc = tokenizer([c.prefix + c.secret + c.suffix for c in canaries], return_offsets_mapping=True, truncation=False)
    out = []
    for c, ids, offsets in zip(canaries, enc["input_ids"], enc["offset_mapping"]):
        parts = space.split(c.secret)
        start = len(c.prefix)
        offsets = _trimmed(c.prefix + c.secret + c.suffix, offsets, start, start + len(c.secret))
        positions = _overlapping(offsets, start, start + len(c.secret))
        if len(positions) != len(parts):
            tokens = [tokenizer.convert_ids_to_tokens(ids[p]) for p in positions]
            raise UserInputError(
                f"canary {c.id}: its secret {c.secret!r} tokenizes as {tokens} ({len(positions)} tokens), but the "
                f"{space.format} space assumes one token per position ({len(parts)}); audit with a tokenizer that "
                "keeps each digit or word whole."
            )
        if len(ids) > max_length:
            raise UserInputError(
                f"canary {c.id} is {len(ids)} tokens, longer than the model's {max_length}; use a shorter --template."
            )
        out.append(CanaryTokens(input_ids=list(ids), secret_positions=positions))
    return out


def check_secret_tokens(
    tokenizer: Any,
    canaries: Sequence[CanaryLike],
    located: Sequence[CanaryTokens],
    space: SpaceLike,
    alphabet_ids: np.ndarray,
) -> None:
    """Each secret position's token, in context, must be the alphabet token of that symbol.

    Raises:
        UserInputError: naming the first canary whose secret tokens differ (e.g. a word that is one
            token alone but merges with its neighbours in the sentence).
    """
    id_of = dict(zip(space.alphabet, alphabet_ids.tolist()))
    for c, t in zip(canaries, located):
        actual = [t.input_ids[p] for p in t.secret_positions]
        if actual != [id_of.get(part) for part in space.split(c.secret)]:
            tokens = [tokenizer.convert_ids_to_tokens(i) for i in actual]
            raise UserInputError(
                f"canary {c.id}: its secret {c.secret!r} tokenizes in its sentence as {tokens}, not as "
                f"the {space.format} alphabet's tokens; audit with a tokenizer that keeps each symbol whole."
            )


def locate_spans(tokenizer: Any, canaries: Sequence[CanaryLike], *, max_length: int) -> list[CanaryTokens]:
    """Tokenize canaries with no finite alphabet (phrases): the secret is whatever tokens cover it.

    Raises:
        UserInputError: naming the canary whose secret has no token of its own or is too long.
    """
    enc = tokenizer([c.prefix + c.secret + c.suffix for c in canaries], return_offsets_mapping=True, truncation=False)
    out = []
    for c, ids, offsets in zip(canaries, enc["input_ids"], enc["offset_mapping"]):
        start = len(c.prefix)
        offsets = _trimmed(c.prefix + c.secret + c.suffix, offsets, start, start + len(c.secret))
        positions = _overlapping(offsets, start, start + len(c.secret))
        inside = all(offsets[p][0] >= start and offsets[p][1] <= start + len(c.secret) for p in positions)
        if not positions or not inside:
            raise UserInputError(
                f"canary {c.id}: its secret {c.secret!r} shares a token with its context for this "
                "tokenizer; the secret cannot be masked on its own."
            )
        if len(ids) > max_length:
            raise UserInputError(f"canary {c.id} is {len(ids)} tokens, longer than the model's {max_length}.")
        out.append(CanaryTokens(input_ids=list(ids), secret_positions=positions))
    return out
