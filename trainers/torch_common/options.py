"""What the torch trainers' Config dataclasses share: choices and default vocabulary sizes.

Types and ``Literal`` choices are checked by the core (:func:`dpaudit.training.config_types.check_types`), and so
are the range checks (:func:`~dpaudit.training.config_types.check_int`,
:func:`~dpaudit.training.config_types.check_real`); the field help helper is the core's too
(:func:`dpaudit.training.dp_options.help_text`, re-exported here).
"""

from __future__ import annotations

from typing import Literal

from dpaudit.training.config_types import check_int, check_real
from dpaudit.training.dp_options import help_text

__all__ = ["DEFAULT_VOCAB_SIZE", "Decay", "Preset", "Task", "check_int", "check_real", "help_text"]

Task = Literal["mlm", "classify", "clm"]
Preset = Literal["tiny", "mini", "small", "base", "large", "bert-base", "gpt2-small", "llama-tiny", "llama-100m"]
Decay = Literal["none", "linear", "exp"]

#: Tokenizer vocabulary used when ``--vocab-size`` is not given (as jax-bert).
#: ``gpt2-small`` and ``llama-100m`` take their families' vocabulary sizes (GPT-2's 50,257, Llama's 32,000): a WordPiece
#: tokenizer trained on a small public.jsonl stops earlier, at the words it saw.
DEFAULT_VOCAB_SIZE: dict[str, int] = {
    "tiny": 2000,
    "mini": 8000,
    "small": 8000,
    "base": 30522,
    "large": 30522,
    "bert-base": 30522,
    "gpt2-small": 50257,
    "llama-tiny": 2000,
    "llama-100m": 32000,
}
