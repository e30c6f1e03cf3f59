"""Per-canary keys: a unique name in each canary's context ("Dana Whitfield's account number is ...").

A masked LM sees a canary's context only once its secret is masked. If every canary read "my
account number is {secret}", all canaries would be the same input and the model could learn only
the frequency-weighted mixture of their secrets per position; exposure would then measure that
mixture, not memorization of one canary. Real secrets sit in unique contexts, so digit and word
canaries get a ``{name}`` slot filled collision-free with a first + last name from the shipped lists
(``canaries/data/first_names.txt``, ``last_names.txt``: 275 x 256 = 70,400 distinct keys).

A name never contains a token of any canary's secret (a word secret such as "grant" must not also
appear in another canary's key, where the model would see it whether or not that canary was
inserted).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from importlib import resources
from typing import TypeVar

import numpy as np

from dpaudit.common.errors import UserInputError

KEY_SLOT = "{name}"
#: The default template of digit and word canaries.
KEYED_TEMPLATE = "{name}'s account number is {secret}"
#: The numpy stream (``SeedSequence(seed, spawn_key=(KEY_STREAM,))``) the names are drawn from.
KEY_STREAM = 6

C = TypeVar("C")


def _read(name: str) -> list[str]:
    text = resources.files("dpaudit.canaries").joinpath(f"data/{name}").read_text(encoding="utf-8")
    return [w for w in text.split("\n") if w]


def shipped_names() -> tuple[list[str], list[str]]:
    """The shipped first and last names (one per line, distinct)."""
    return _read("first_names.txt"), _read("last_names.txt")


def draw_keys(n: int, rng: np.random.Generator, *, avoid: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """``n`` distinct "First Last" names in uniformly random order, none containing a token in ``avoid``.

    Raises:
        UserInputError: if fewer than ``n`` distinct names are available.
    """
    firsts, lasts = shipped_names()
    firsts = [f for f in firsts if f.lower() not in avoid]
    lasts = [s for s in lasts if s.lower() not in avoid]
    total = len(firsts) * len(lasts)
    if n > total:
        raise UserInputError(
            f"--template {KEY_SLOT}: only {total} distinct names for {n} canaries; use fewer canaries "
            "or a template without {name}."
        )
    picks = rng.choice(total, size=n, replace=False)
    return [f"{firsts[i // len(lasts)]} {lasts[i % len(lasts)]}" for i in picks.tolist()]


def fill_keys(canaries: Sequence[C], rng: np.random.Generator) -> list[C]:
    """Replace ``{name}`` in each canary's prefix and suffix with its own distinct name.

    Canaries without the slot are returned unchanged (and no randomness is used).
    """
    keyed = [KEY_SLOT in c.prefix or KEY_SLOT in c.suffix for c in canaries]  # type: ignore[attr-defined]
    if not any(keyed):
        return list(canaries)
    avoid = {t.lower() for c in canaries for t in c.secret.split()}  # type: ignore[attr-defined]
    names = iter(draw_keys(sum(keyed), rng, avoid=avoid))
    out = []
    for c, has_slot in zip(canaries, keyed):
        if has_slot:
            name = next(names)
            c = dataclasses.replace(c, prefix=c.prefix.replace(KEY_SLOT, name), suffix=c.suffix.replace(KEY_SLOT, name))  # type: ignore[type-var]
        out.append(c)
    return out
