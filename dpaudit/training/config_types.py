"""Typed validation of a trainer's Config, whatever the source of its values.

Command-line options arrive already typed by click (``click.Choice`` for ``Literal`` fields, ``int``,
``float``, boolean flags); values from a ``--config`` TOML file, a stored checkpoint or a Python caller
do not. ``dpaudit train --config`` used to hand TOML values to the Config unchecked: ``sampling =
"bogus"`` trained with shuffled batches while ``privacy.json`` claimed Poisson sampling, and
``non_private = "false"`` (a non-empty string, so truthy) trained without privacy. :func:`check_types`
closes that gap in one place for every trainer: call it first in the Config's ``__post_init__``.

Rules, from the field annotations (``typing.get_type_hints``, so ``from __future__ import annotations``
works):

- ``bool``: only ``True``/``False``; the TOML string ``"false"`` and the number ``0`` are refused.
- ``int``: an integer that is not a ``bool``; ``5.0`` is refused (a step count is not a float).
- ``float``: any real number that is not a ``bool``; integers are normalized to ``float`` on the
  frozen instance (``learning_rate = 1`` in TOML is ``1.0``).
- ``str``: only strings (``batch_schedule = 5`` is refused).
- ``Literal[...]``: one of the listed values, of the same type.
- ``X | None`` / ``Optional[X]``, other unions: ``None`` when allowed, else the first member that fits.
- ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``: element-wise (normalized to the annotated container).
- any other class: ``isinstance``.

Errors are :class:`ConfigTypeError` (a ``ValueError``) whose message names the option the way the
command line spells it: ``--sampling must be one of poisson, shuffle, got 'bogus'.``; ``field`` and
``reason`` let a caller re-word it for the value's source (``dpaudit.cli.train`` names the ``--config``
file and key).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from dpaudit.files.run_dirs import SECRET_FIELDS as _SECRET_FIELDS

__all__ = [
    "NOISE_MULTIPLIER_MAX",
    "NOISE_MULTIPLIER_MIN",
    "SECRET_FIELDS",
    "SEED_MAX",
    "ConfigTypeError",
    "check_int",
    "check_noise_multiplier",
    "check_real",
    "check_seed",
    "check_types",
    "config_keys",
    "option_name",
    "redacted_dict",
    "seed_type",
]

#: The largest public seed any command takes. Every ``--seed`` (inject, train with every trainer, attack,
#: demo) is an integer in ``[0, SEED_MAX]``: the range every framework that gets it accepts
#: (``jax.random.PRNGKey`` takes a signed 64-bit integer, ``torch.Generator.manual_seed`` and numpy's
#: ``SeedSequence`` more), so a seed one command takes is never refused, or silently wrapped, by another.
#: (``--noise-seed`` is not a public seed: it feeds numpy's ``SeedSequence`` only and should carry 128 bits.)
SEED_MAX = 2**63 - 1
_SEED_RANGE = "an integer from 0 to 2^63 - 1 (9223372036854775807)"


def check_seed(value: Any, option: str = "--seed") -> int:
    """``value`` as a seed (:data:`SEED_MAX`), or a ``ValueError`` naming ``option`` and the range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= SEED_MAX:
        raise ValueError(f"{option} must be {_SEED_RANGE}, got {value!r}.")
    return int(value)


#: The noise multipliers (dp_accounting's sigma) every command takes: ``dpaudit account`` and every trainer's Config
#: (:func:`check_noise_multiplier`). Outside them no figure means anything, and the accountants' float arithmetic
#: fails on the way: below 1e-10 the privacy loss of one full-batch step alone exceeds 1e19 (no privacy at all: train
#: non-private), and near 1e-154 1 / sigma^2 overflows (dp_accounting answered NaN, the trainers "cannot convert
#: float NaN to integer"); above 1e10 the noise is ten billion times one example's contribution (epsilon ~0, the
#: model learns nothing), and near 1e154 sigma^2 overflows (OverflowError).
NOISE_MULTIPLIER_MIN = 1e-10
NOISE_MULTIPLIER_MAX = 1e10


def check_noise_multiplier(value: Any, option: str = "--noise-multiplier", *, no_noise: str | None = None) -> float:
    """``value`` as a noise multiplier in [:data:`NOISE_MULTIPLIER_MIN`, :data:`NOISE_MULTIPLIER_MAX`], or a
    ``ValueError`` naming ``option`` and the range.

    ``no_noise``: how this command says "no noise" (``"--non-private"``); None: 0 itself is accepted, as ``dpaudit
    account`` takes sigma 0 (epsilon infinite). The type was checked already (a real number, not a bool).
    """
    number = float(value)
    if number == 0 and no_noise is None:
        return 0.0
    if not NOISE_MULTIPLIER_MIN <= number <= NOISE_MULTIPLIER_MAX:  # nan and inf too
        if math.isnan(number):
            why = "not a number"
        elif number < 0:
            why = "a noise multiplier is a standard deviation over a bound: never negative"
        elif number < NOISE_MULTIPLIER_MIN:
            why = "below 1e-10 one step alone has epsilon above 1e19: no privacy" + (
                f"; for no noise use {no_noise}" if no_noise else ""
            )
        else:
            why = "above 1e10 the noise drowns every gradient and epsilon is ~0"
        zero = "0 (no noise) or " if no_noise is None else ""
        raise ValueError(f"{option} must be {zero}between 1e-10 and 1e10, got {value!r} ({why}).")
    return number


def check_int(name: str, value: int, minimum: int) -> None:
    """A range check of an integer field, naming its option: ``--epochs must be an integer >= 1, got 0.`` (the
    type was checked by :func:`check_types`)."""
    if value < minimum:
        raise ValueError(f"{option_name(name)} must be an integer >= {minimum}, got {value!r}.")


def check_real(name: str, value: float, *, low: float, low_open: bool, high: float = math.inf) -> None:
    """A range check of a number field (finite, above ``low``, below ``high``), naming its option:
    ``--clip-norm must be a finite number > 0, got inf.`` (the type was checked by :func:`check_types`)."""
    if math.isnan(value) or (value <= low if low_open else value < low) or value >= high or not math.isfinite(value):
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        upper = "" if high == math.inf else f" and < {high:g}"
        raise ValueError(f"{option_name(name)} must be a finite number {bound}{upper}, got {value!r}.")


def seed_type() -> Any:
    """The click type of every ``--seed`` option: :func:`check_seed` as a one-line error.

    An out-of-range seed is a :class:`~dpaudit.common.errors.UserInputError` (``Error: --seed must be ...``,
    exit 2), not click's usage block; text that is not an integer is click's usual usage error.
    """
    import click

    from dpaudit.common.errors import UserInputError

    class _Seed(click.ParamType):
        name = "integer"

        def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
            if isinstance(value, str):
                try:
                    value = int(value.strip(), 10)
                except ValueError:
                    self.fail(f"{value!r} is not a valid integer.", param, ctx)
            option = param.opts[0] if param is not None and param.opts else "--seed"
            try:
                return check_seed(value, option)
            except ValueError as err:
                raise UserInputError(str(err)) from None

    return _Seed()


class ConfigTypeError(ValueError):
    """A Config field holds a value of the wrong type or outside its ``Literal`` choices.

    Attributes:
      field: the dataclass field name (``"batch_schedule"``).
      reason: what is wrong, without the option name (``"must be a string, got 5 (int)."``).
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{option_name(field)} {reason}")
        self.field = field
        self.reason = reason


def option_name(field: str) -> str:
    """The command-line spelling of a Config field: ``batch_size`` -> ``--batch-size``."""
    return "--" + field.replace("_", "-")


def config_keys(
    raw: Mapping[str, Any], config_cls: type, where: str, *, warn: Callable[[str], None] | None = None
) -> dict[str, tuple[str, Any]]:
    """The Config fields a config file sets: ``{field name: (key as written, value)}``.

    The one reader of a config file's keys, shared by ``dpaudit train --config FILE.toml`` and ``dpaudit attack
    --shadow-config FILE.json``, so that both files mean the same thing: a key is a field name with dashes or
    underscores; a former name (the Config's ``RENAMED_FIELDS``) is read as the current one, with a warning; an
    unknown key is refused, since a misspelt ``noise_multipler`` would otherwise be dropped and the model trained
    with the default; two spellings of one field are refused. The values are not checked here: the Config's
    ``__post_init__`` (:func:`check_types`) does that.

    Args:
        raw: the file's keys and values.
        config_cls: the trainer's Config dataclass.
        where: the option and file for messages (``"--config run.toml"``).
        warn: called with each deprecation warning (none printed when None).

    Raises:
        UserInputError: an unknown key (the valid ones listed) or a field set twice, naming ``where`` and the key.
    """
    from dpaudit.common.errors import UserInputError

    names = {f.name for f in dataclasses.fields(config_cls)}
    renamed = dict(getattr(config_cls, "RENAMED_FIELDS", {}))
    values: dict[str, tuple[str, Any]] = {}
    for key, value in raw.items():
        name = str(key).replace("-", "_")
        if name in renamed:
            if warn is not None:
                warn(
                    f"warning: {where}: key {key!r} is deprecated and will be removed; use {renamed[name]!r} "
                    "(the same setting)."
                )
            name = renamed[name]
        if name not in names:
            raise UserInputError(f"{where}: unknown key {key!r}; valid keys are {', '.join(sorted(names))}.")
        if name in values:
            raise UserInputError(f"{where}: keys {values[name][0]!r} and {key!r} both set {name}; keep one.")
        values[name] = (key, value)
    return values


class _Mismatch(Exception):
    """Internal: the value does not fit; ``expected`` says what would."""

    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


def _describe(value: Any) -> str:
    """``'bogus'`` for a string (quoted already), ``5 (int)`` for anything else."""
    return repr(value) if isinstance(value, str) else f"{value!r} ({type(value).__name__})"


def _coerce(value: Any, annotation: Any, *, lenient: bool = True) -> Any:
    """The value, normalized to `annotation` (int -> float for float fields), or raise :class:`_Mismatch`."""
    if annotation is Any:
        return value
    if annotation is None or annotation is type(None):
        if value is None:
            return None
        raise _Mismatch("None")
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Literal:
        for choice in args:
            if value == choice and type(value) is type(choice):
                return value
        raise _Mismatch(_expected(annotation))
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        # Exact fits first, so that `int | float` keeps an int and `float | int` does not turn 3 into 3.0.
        for strict in (True, False) if lenient else (True,):
            for member in members:
                try:
                    return _coerce(value, member, lenient=not strict)
                except _Mismatch:
                    pass
        raise _Mismatch(_expected(annotation))
    if origin in (list, tuple):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise _Mismatch(_expected(annotation))
        try:
            if origin is tuple and args and args[-1] is not Ellipsis:
                if len(value) != len(args):
                    raise _Mismatch(_expected(annotation))
                return tuple(_coerce(v, a, lenient=lenient) for v, a in zip(value, args))
            items = [_coerce(v, args[0] if args else Any, lenient=lenient) for v in value]
        except _Mismatch:
            raise _Mismatch(_expected(annotation)) from None
        return tuple(items) if origin is tuple else items
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise _Mismatch(_expected(bool))
    if annotation is int:
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        raise _Mismatch("an integer")
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _Mismatch("a number")
        if isinstance(value, float) or lenient:
            return float(value)
        raise _Mismatch("a number")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise _Mismatch("a string")
    if isinstance(annotation, type):
        if isinstance(value, annotation):
            return value
        raise _Mismatch(f"a {annotation.__name__}")
    raise TypeError(
        f"check_types cannot check the annotation {annotation!r}; use a simple type, Literal, Optional, list or tuple."
    )


def _expected(annotation: Any) -> str:
    """What a field of this annotation takes, in words (``"an integer"``, ``"one of poisson, shuffle"``)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(str(c) for c in args)
    if origin in (typing.Union, types.UnionType):
        members = " or ".join(_expected(a) for a in args if a is not type(None))
        return members + (" (or left unset)" if type(None) in args else "")
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"a list of {len(args)} items: " + "; ".join(_expected(a) for a in args)
    if origin in (list, tuple):
        return f"a list whose items are each {_expected(args[0])}" if args else "a list"
    words = {
        bool: "true or false (a boolean, not a string or number)",
        int: "an integer",
        float: "a number",
        str: "a string",
        type(None): "None",
    }
    if annotation in words:
        return words[annotation]
    return f"a {getattr(annotation, '__name__', annotation)}"


def check_types(config: Any) -> None:
    """Check every field of the dataclass instance `config` against its annotation; normalize ints to floats.

    Call it first in a frozen Config's ``__post_init__`` (it writes normalized values with
    ``object.__setattr__``). Raises :class:`ConfigTypeError` naming the first bad field.

    Raises:
      ConfigTypeError: e.g. ``--sampling must be one of poisson, shuffle, got 'bogus'.``
      TypeError: `config` is not a dataclass instance, or a field's annotation is not supported.
    """
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"check_types needs a dataclass instance, got {type(config).__name__}.")
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        try:
            normalized = _coerce(value, hints[f.name])
        except _Mismatch as err:
            raise ConfigTypeError(f.name, f"must be {err.expected}, got {_describe(value)}.") from None
        if normalized is not value:
            object.__setattr__(config, f.name, normalized)


#: Config fields whose value is secret: the guarantee holds only while they stay unknown (``--noise-seed``
#: seeds the Poisson sampling and the DP noise). :func:`redacted_dict` never writes their value. The one list
#: is :data:`dpaudit.files.run_dirs.SECRET_FIELDS` (manifests, commands and ``--set`` words are redacted from it too).
SECRET_FIELDS = _SECRET_FIELDS


def redacted_dict(config: Any) -> dict[str, Any]:
    """Every trainer Config's ``to_dict()``: the field values (JSON-serializable) with each of
    :data:`SECRET_FIELDS` replaced by :meth:`~dpaudit.training.noise_source.NoiseSource.redact` (``None`` when
    unset, a fixed marker when set, never the number). The manifest's config and the resume check read
    this; the secret itself lives only in the checkpoints' noise state (private to the data owner).

    Raises:
      TypeError: `config` is not a dataclass instance.
    """
    from dpaudit.training.noise_source import NoiseSource  # numpy only; imported here to keep this module light

    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"redacted_dict needs a dataclass instance, got {type(config).__name__}.")
    out = dataclasses.asdict(config)
    for name in SECRET_FIELDS:
        if name in out:
            out[name] = NoiseSource.redact(out[name])
    return out
