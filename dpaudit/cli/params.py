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
