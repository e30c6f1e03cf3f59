"""Option types shared by the ``dpaudit`` commands.

click's ``FLOAT`` reads ``nan`` and ``inf`` (Python's ``float()`` does), and its ``FloatRange`` lets
``nan`` through every bound (each comparison with nan is false), so a range alone does not keep them
out. :class:`FiniteFloat` refuses both first, naming nan as not a number, with a one-line error that
names the option (a :class:`~dpaudit.errors.UserInputError`, exit code 2, like every other bad input).
"""

from __future__ import annotations

import math
from typing import Any

import click

from dpaudit.errors import UserInputError


class FiniteFloat(click.FloatRange):
    """A finite float, optionally within a range: ``FiniteFloat(0, 1, max_open=True)`` is [0, 1)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if math.isnan(number) or math.isinf(number):
            option = param.opts[0] if param is not None and param.opts else "the value"
            what = "not a number (NaN)" if math.isnan(number) else "infinite"
            within = f" in {self._describe_range()}" if self.min is not None or self.max is not None else ""
            raise UserInputError(f"{option} must be a finite number, got {number}. {number} is {what}; "
                                 f"give a number{within}.")
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        low = "-inf" if self.min is None else f"{self.min:g}"
        high = "inf" if self.max is None else f"{self.max:g}"
        if self.max is None:
            return f"{'(' if self.min_open else '['}{low}, inf)" if self.min is not None else "(-inf, inf)"
        return f"{'(' if self.min_open else '['}{low}, {high}{')' if self.max_open else ']'}"


#: Attacks that train models with the target's trainer (or ``--shadow-trainer``), unless given their models.
TRAINING_ATTACKS = frozenset({"shadow", "ref", "lira", "rmia"})


def attack_extras(model: Any, attack_names: str, *, shadow_trainer: str | None, shadow_dirs: tuple[str, ...],
                  reference_model: Any) -> tuple[str, ...]:
    """The extras ``dpaudit attack`` needs (README, "Which extra each command needs"): ``torch`` always (scoring
    loads the model with transformers), and the trainer's extra when an attack trains shadow or reference models
    (``jax`` for a jax-bert target). Read from the options and the target's manifest alone, before any work."""
    import json
    from pathlib import Path

    from dpaudit.extras import trainer_extras

    names = {name.strip() for name in str(attack_names).split(",")}
    every = "all" in names
    trains = ((every or bool(names & (TRAINING_ATTACKS - {"ref"}))) and not shadow_dirs
              or (every or "ref" in names) and reference_model is None)
    if not trains:
        return ("torch",)
    trainer = shadow_trainer
    if trainer is None:
        try:
            manifest = json.loads((Path(model) / "manifest.json").read_text(encoding="utf-8"))
            trainer = str((manifest.get("config") or {}).get("trainer") or "")
        except (OSError, ValueError, AttributeError):
            trainer = ""  # not a train run: the attack says so itself
    return ("torch", *(e for e in trainer_extras(trainer) if e != "torch"))


class NoiseMultiplier(FiniteFloat):
    """A noise multiplier (dp_accounting's sigma): 0 (no noise) or in the range every command shares
    (:func:`dpaudit.training.config_types.check_noise_multiplier`), a one-line error naming the option and the range."""

    def __init__(self) -> None:
        super().__init__(min=0)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from dpaudit.training.config_types import check_noise_multiplier

        number = super().convert(value, param, ctx)
        option = param.opts[0] if param is not None and param.opts else "--noise-multiplier"
        try:
            return check_noise_multiplier(number, option)
        except ValueError as err:
            raise UserInputError(str(err)) from None

    def _describe_range(self) -> str:
        return "0 or [1e-10, 1e10]"
