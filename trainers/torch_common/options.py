"""What the torch trainers' Config dataclasses share: choices, default vocabulary sizes, range checks.

Types and ``Literal`` choices are checked by the core (:func:`dpaudit.training.config_types.check_types`);
these are the range checks after it, with messages that name the CLI option.
"""

from __future__ import annotations

import math
from typing import Literal

from dpaudit.training.config_types import option_name

Task = Literal["mlm", "classify", "clm"]
Preset = Literal["tiny", "mini", "small", "base", "large"]
Decay = Literal["none", "linear", "exp"]

#: Tokenizer vocabulary used when ``--vocab-size`` is not given (as jax-bert).
DEFAULT_VOCAB_SIZE: dict[str, int] = {"tiny": 2000, "mini": 8000, "small": 8000, "base": 30522, "large": 30522}


def help_text(text: str) -> dict[str, str]:
    """Field metadata the CLI reads as the option's help."""
    return {"help": text}


def check_int(name: str, value: int, minimum: int) -> None:
    """A range check; the type was checked by :func:`check_types`."""
    if value < minimum:
        raise ValueError(f"{option_name(name)} must be an integer >= {minimum}, got {value!r}.")


def check_real(name: str, value: float, *, low: float, low_open: bool, high: float = math.inf) -> None:
    """A range check of a number (finite, above ``low``, below ``high``); the type was checked already."""
    if math.isnan(value) or (value <= low if low_open else value < low) or value >= high or not math.isfinite(value):
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        upper = "" if high == math.inf else f" and < {high:g}"
        raise ValueError(f"{option_name(name)} must be a finite number {bound}{upper}, got {value!r}.")
