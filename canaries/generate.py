"""Canary generation: template, secrets that never occur in the corpus, labels and membership.

A canary is ``prefix + secret + suffix``. The template (``"{name}'s account number is {secret}"``)
gives the prefix and suffix, with ``{name}`` filled by a unique key per canary (:mod:`canaries.keys`); a phrase space adds the rest of the secret's sentence around it.

Secrets are taken from the space's uniformly random, collision-free stream, dropping any whose
token sequence already occurs in the corpus (or in the template itself; for a new-token secret, any of
whose tokens does): a secret the model saw
elsewhere would be "memorized" for reasons that have nothing to do with the canary. Filtering a
uniform stream and keeping the first n survivors is a uniform sample of the survivors.
"""

from __future__ import annotations

import re
import string
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import numpy as np

from dpaudit.common.errors import UserInputError
from dpaudit.common.progress import progress_counter
from dpaudit.inject_dir.reader import Canary, Label  # noqa: F401 (the record lives in the core; re-exported here)
from dpaudit.inject_dir.secret_spaces import CONTEXT_FREE_KINDS, Draw, SecretSpace

DEFAULT_TEMPLATE = "{name}'s account number is {secret}"  # {name}: a per-canary key (canaries.keys)
PHRASE_TEMPLATE = "{secret}"
PLACEHOLDER = "{secret}"


# Occurrence checks compare lowercase tokens with punctuation treated as a separator, so
# "call 4 5 6, 7" contains the secret "4 5 6" but "0123" does not contain "0".
_PUNCT_TO_SPACE = str.maketrans({c: " " for c in string.punctuation})


def normalize_tokens(text: str) -> list[str]:
    """Lowercase tokens of ``text``, punctuation as whitespace: the unit of "occurs in the corpus"."""
    return text.lower().translate(_PUNCT_TO_SPACE).split()


#: The placeholders a template may hold: the secret, and the per-canary key of :mod:`canaries.keys`.
KEY_PLACEHOLDER = "{name}"
_KNOWN = (PLACEHOLDER, KEY_PLACEHOLDER)
#: ``{word}``: a placeholder by its shape; one dpaudit does not know is a typo (``{nmae}``), never literal text.
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def parse_template(template: str, *, option: str = "--template") -> tuple[str, str]:
    """Split a template at its single ``{secret}`` into (prefix, suffix).

    The template is not a format string: text in braces that is not a placeholder's shape (``{not a
    field}``) is kept literally. Refused, each with a one-line error naming the template: no or several
    ``{secret}``; an unknown placeholder (``{nmae}``: a typo would otherwise put the word "{nmae}" into
    every canary and drop the key); a format-string escape (``{{secret}}``, which would put braces around
    the secret); and a stray brace (``{name's ...``), which is a broken placeholder.
    """
    example = f'e.g. {option} "{DEFAULT_TEMPLATE}"'
    if "{{" in template or "}}" in template:
        raise UserInputError(
            f"{option} {template!r}: doubled braces ({{{{ or }}}}); the template is not a format string "
            f"and needs no escapes: write the placeholders {PLACEHOLDER} and {KEY_PLACEHOLDER} as they are, "
            f"{example}."
        )
    unknown = sorted({f"{{{m}}}" for m in _FIELD.findall(template)} - set(_KNOWN))
    if unknown:
        raise UserInputError(
            f"{option} {template!r}: unknown placeholder {', '.join(unknown)}; a template knows {PLACEHOLDER} "
            f"(the secret) and {KEY_PLACEHOLDER} (a distinct name per canary), {example}."
        )
    rest = template
    for known in _KNOWN:
        rest = rest.replace(known, "")
    depth = 0
    for char in rest:
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0 or depth > 1:
            break
    if depth != 0:
        raise UserInputError(
            f"{option} {template!r}: a stray brace (an unclosed or unopened {{...}}); the placeholders "
            f"are {PLACEHOLDER} and {KEY_PLACEHOLDER}, {example}."
        )
    count = template.count(PLACEHOLDER)
    if count != 1:
        raise UserInputError(
            f"{option} {template!r} needs exactly one {PLACEHOLDER} placeholder (found {count}), "
            f'e.g. {option} "{DEFAULT_TEMPLATE}".'
        )
    prefix, _, suffix = template.partition(PLACEHOLDER)
    return prefix, suffix


def check_context(template: str, *, kind: str, option: str = "--template") -> None:
    """Refuse a ``digits:N`` or ``words:N`` template with no text besides ``{secret}``.

    Such a canary is its secret alone: with the secret masked the model sees only mask tokens, so there
    is nothing it could have memorized the secret from, and exposure measures nothing about the canary.
    Phrase canaries are exempt: the phrase's own sentence is their context (``{secret}`` is their default);
    so are new-token canaries: their tokens exist nowhere else, and the pseudo-log-likelihood that scores
    them masks one token at a time with the others shown.
    """
    if kind not in CONTEXT_FREE_KINDS and not template.replace(PLACEHOLDER, "").strip():
        raise UserInputError(
            f"{option} {template!r} gives {kind}:N canaries no context: with the secret masked the model "
            f"would see only mask tokens; add words and {KEY_PLACEHOLDER}, e.g. {option} "
            f'"{DEFAULT_TEMPLATE}".'
        )


def shared_context_warning(template: str, *, kind: str, n_canaries: int, option: str = "--template") -> str | None:
    """A warning when every canary of a ``digits:N`` or ``words:N`` run would present the same context.

    Without ``{name}`` a template gives all such canaries one context ("my pin is {secret}", or none at
    all for ``{secret}`` alone). Once the secret is masked a masked LM then sees one input and can learn
    only the frequency-weighted mixture of their secrets, so exposure measures that mixture, not
    memorization of one canary (docs/canaries.md, "One context per canary").
    Phrase canaries keep their own sentence around the phrase, so they are never warned about.
    ``dpaudit attack`` repeats the warning on the canaries it audits.
    """
    if kind in CONTEXT_FREE_KINDS or n_canaries < 2 or KEY_PLACEHOLDER in template:
        return None
    context = template.replace(PLACEHOLDER, "").strip()
    return (
        f"{option} {template!r} has no {KEY_PLACEHOLDER}: all {n_canaries} canaries share the context {context!r}, so once the secret "
        "is masked a masked LM sees one input for all of them and exposure measures the mixture of their secrets, "
        f"not memorization of one canary; add {KEY_PLACEHOLDER} for a distinct name per canary, e.g. "
        f'"{DEFAULT_TEMPLATE}".'
    )


def canary_ids(n: int) -> list[str]:
    """``c0000``, ``c0001``, ...: zero-padded so they sort in order (wider past 10,000)."""
    width = max(4, len(str(max(n - 1, 0))))
    return [f"c{i:0{width}d}" for i in range(n)]


class OccurrenceIndex:
    """Which of a set of secrets occur, as contiguous token sequences, in a stream of texts.

    Built once per batch of candidates; :meth:`scan` touches each text once, and skips a text at
    C speed (``set.isdisjoint``) unless it contains a candidate's first token.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        self.by_length: dict[int, set[tuple[str, ...]]] = defaultdict(set)
        self.firsts: set[str] = set()
        for secret in secrets:
            tokens = tuple(normalize_tokens(secret))
            if not tokens:
                raise ValueError(f"secret {secret!r} has no tokens.")
            self.by_length[len(tokens)].add(tokens)
            self.firsts.add(tokens[0])

    def scan(self, texts: Iterable[str]) -> set[tuple[str, ...]]:
        """The normalized token tuples of the secrets that occur in ``texts``."""
        found: set[tuple[str, ...]] = set()
        firsts, groups = self.firsts, list(self.by_length.items())
        for text in texts:
            tokens = normalize_tokens(text)
            if firsts.isdisjoint(tokens):
                continue
            for i, token in enumerate(tokens):
                if token in firsts:
                    for length, group in groups:
                        window = tuple(tokens[i : i + length])
                        if window in group:
                            found.add(window)
        return found


def check_space_size(space: SecretSpace, n: int) -> None:
    """Refuse ``n`` canaries from a space of fewer secrets (a check of counts alone, before any draw)."""
    if n > space.size:
        raise UserInputError(
            f"--format {space.format} has only {space.size} possible secrets but {n} canaries are requested; "
            "use a larger space (e.g. more digits or words) or fewer canaries."
        )


def draw_secrets(
    space: SecretSpace,
    n: int,
    *,
    rng: np.random.Generator,
    corpus_texts: Sequence[str],
    context_texts: Sequence[str] = (),
) -> tuple[list[Draw], int]:
    """The first ``n`` secrets of the space's random stream that occur in no corpus or context text
    (checked unit by unit, :meth:`~dpaudit.inject_dir.secret_spaces.SecretSpace.units`: a new-token secret's every token).

    Candidates are checked in batches of the number still needed plus an eighth (and 64), so the corpus is
    scanned once in the usual case (fewer than one candidate in nine occurs) and a few times when many
    candidates occur. (Batches of twice the number drew every secret twice over: for a million new-token
    canaries, half of a several-minute inject. The draws chosen are the same: the first ``n`` usable ones of
    the stream, in order, whatever the batch size.)

    Returns:
        The draws, and how many candidates were rejected because they occur in the texts.

    Raises:
        UserInputError: if the space has fewer than ``n`` secrets, or too few that are absent
            from the corpus.
    """
    check_space_size(space, n)
    chosen: list[Draw] = []
    crossing = _CrossCheck()
    rejected = 0
    # A bar over the candidates drawn (the first batch's size: all of them when few occur in the texts).
    with progress_counter(total=n + n // 8 + 64, desc="drawing secrets", unit="secret", enabled=n > 0) as bar:
        stream = _counted(space.draws(rng), bar)
        while len(chosen) < n:
            left = n - len(chosen)
            batch = list(islice(stream, left + left // 8 + 64))
            if not batch:
                raise UserInputError(
                    f"--format {space.format}: only {len(chosen)} of its {space.size} secrets are usable (absent from the "
                    f"corpus and from the other canaries' text), but {n} canaries are requested; use a larger space or fewer canaries."
                )
            units = [space.units(d.secret) for d in batch]  # the secret, or each new token of it
            index = OccurrenceIndex(u for us in units for u in us)
            occurring = index.scan(corpus_texts)
            occurring |= index.scan(context_texts)
            for draw, draw_units in zip(batch, units):
                if any(tuple(normalize_tokens(u)) in occurring for u in draw_units) or not crossing.accept(draw):
                    rejected += 1
                    continue
                chosen.append(draw)
                if len(chosen) == n:
                    break
        stream.close()  # the bar counts every candidate drawn
    return chosen, rejected


def _counted(items: Iterator[Draw], bar: Any, every: int = 1024) -> Iterator[Draw]:
    """``items``, advancing ``bar`` by every ``every`` items (one tqdm update per item would slow the draws); the rest
    when the generator is closed."""
    count = 0
    try:
        for item in items:
            count += 1
            if count == every:
                bar.update(count)
                count = 0
            yield item
    finally:
        bar.update(count)


class _CrossCheck:
    """Keeps canaries with their own context (phrases) from leaking each other's secrets.

    A phrase canary's sentence is trained on, so if it contained another canary's secret, that
    secret would be seen even when its own canary is a control. A draw is accepted only if its
    secret is in no accepted draw's context and no accepted secret is in its context.
    """

    def __init__(self) -> None:
        self.secrets: list[str] = []
        self.contexts: list[str] = []

    @staticmethod
    def _padded(text: str) -> str:
        return " " + " ".join(normalize_tokens(text)) + " "

    def accept(self, draw: Draw) -> bool:
        if not draw.left and not draw.right:
            return True  # no context of its own: the template was already checked
        secret = self._padded(draw.secret)
        contexts = [self._padded(c) for c in (draw.left, draw.right) if c.strip()]
        if any(secret in c for c in self.contexts) or any(s in c for s in self.secrets for c in contexts):
            return False
        self.secrets.append(secret)
        self.contexts.extend(contexts)
        return True


def draw_labels(label_counts: Sequence[int], n: int, *, rng: np.random.Generator) -> np.ndarray:
    """Label indices for ``n`` canaries, in proportion to each label's count in the corpus.

    Proportional (not uniform) so that canaries do not over-represent rare labels, which would
    make the label itself a hint that a training row is a canary.
    """
    counts = np.asarray(label_counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0 or counts.min() < 0 or counts.sum() <= 0:
        raise ValueError(f"label_counts must be non-negative with a positive sum, got {label_counts!r}.")
    return rng.choice(counts.size, size=n, p=counts / counts.sum())


def build_canaries(
    draws: Sequence[Draw],
    frequencies: Sequence[int],
    *,
    template_prefix: str,
    template_suffix: str,
    format: str,
    labels: Sequence[Label | None] | None = None,
) -> list[Canary]:
    """Canaries from draws, one frequency each (0 = control); ids follow the order given."""
    if len(draws) != len(frequencies):
        raise ValueError(f"draws and frequencies must have the same length, got {len(draws)} and {len(frequencies)}.")
    if labels is not None and len(labels) != len(draws):
        raise ValueError(f"labels must have one entry per draw, got {len(labels)} for {len(draws)}.")
    out = []
    for i, (cid, draw, freq) in enumerate(zip(canary_ids(len(draws)), draws, frequencies)):
        out.append(
            Canary(
                id=cid,
                prefix=template_prefix + draw.left,
                secret=draw.secret,
                suffix=draw.right + template_suffix,
                format=format,
                frequency=int(freq),
                member=int(freq) > 0,
                label=None if labels is None else labels[i],
            )
        )
    return out
