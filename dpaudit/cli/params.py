"""Option types shared by the ``dpaudit`` commands, and the options generated from a Config dataclass.

click's ``FLOAT`` reads ``nan`` and ``inf`` (Python's ``float()`` does), and its ``FloatRange`` lets
``nan`` through every bound (each comparison with nan is false), so a range alone does not keep them
out. :class:`FiniteFloat` refuses both first, naming nan as not a number, with a one-line error that
names the option (a :class:`~dpaudit.common.errors.UserInputError`, exit code 2, like every other bad input).

:func:`config_options` is the one generator of command-line options from a frozen Config: ``dpaudit train``'s
from the trainer's Config, ``dpaudit attack``'s from :class:`~dpaudit.attacks.options.RunOptions` and the
attacks' Configs.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Collection
from typing import Any, Literal

import click

from dpaudit.common.errors import UserInputError


class FiniteFloat(click.FloatRange):
    """A finite float, optionally within a range: ``FiniteFloat(0, 1, max_open=True)`` is [0, 1)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if math.isnan(number) or math.isinf(number):
            option = param.opts[0] if param is not None and param.opts else "the value"
            what = "not a number (NaN)" if math.isnan(number) else "infinite"
            within = f" in {self._describe_range()}" if self.min is not None or self.max is not None else ""
            raise UserInputError(
                f"{option} must be a finite number, got {number}. {number} is {what}; give a number{within}."
            )
        return super().convert(number, param, ctx)

    def _describe_range(self) -> str:
        low = "-inf" if self.min is None else f"{self.min:g}"
        high = "inf" if self.max is None else f"{self.max:g}"
        if self.max is None:
            return f"{'(' if self.min_open else '['}{low}, inf)" if self.min is not None else "(-inf, inf)"
        return f"{'(' if self.min_open else '['}{low}, {high}{')' if self.max_open else ']'}"


def attack_extras(
    model: Any, attack_names: str, *, shadow_trainer: str | None, shadow_dirs: tuple[str, ...], reference_model: Any
) -> tuple[str, ...]:
    """The extras ``dpaudit attack`` needs (README, "Which extra each command needs"): ``torch`` always (scoring
    loads the model with transformers), and the trainer's extra when an attack trains shadow or reference models
    (``jax`` for a jax-bert target: an attack class's ``trains_models(options)``). Read from the options and the
    target's manifest alone, before any work."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from dpaudit.attacks.registry import attack_class, available_attacks, prop, registered_classes
    from dpaudit.common.extras import trainer_extras

    names = {name.strip() for name in str(attack_names).split(",")}
    classes = registered_classes() if "all" in names else [attack_class(n) for n in names if n in available_attacks()]
    options = SimpleNamespace(
        shadow_trainer=shadow_trainer, shadow_dirs=tuple(shadow_dirs or ()), reference_model=reference_model
    )
    if not any(prop(cls, "trains_models")(options) for cls in classes):
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


def _click_type(annotation: Any, metadata: typing.Mapping[str, Any]) -> tuple[Any, bool, bool]:
    """The click type of a Config field, whether it is a boolean flag, and whether the option repeats (a
    ``tuple[X, ...]`` field), from its annotation and its metadata's ``min``/``max``/``min_open``/``max_open``,
    ``path``/``file`` and ``seed`` (:func:`dpaudit.attacks.options.option`)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(members) == 1:
            return _click_type(members[0], metadata)
        return str, False, False
    if origin is tuple and typing.get_args(annotation)[-1:] == (Ellipsis,):
        return _click_type(typing.get_args(annotation)[0], metadata)[0], False, True
    if origin is Literal:
        return click.Choice([str(v) for v in typing.get_args(annotation)]), False, False
    if annotation is bool:
        return bool, True, False
    bounds = {k: metadata[k] for k in ("min", "max", "min_open", "max_open") if k in metadata}
    if metadata.get("seed"):
        from dpaudit.training.config_types import seed_type

        return seed_type(), False, False
    if metadata.get("path") or metadata.get("file"):
        return click.Path(dir_okay=not metadata.get("file")), False, False
    if annotation is int and bounds:
        return click.IntRange(**bounds), False, False
    if annotation is float and bounds:
        return FiniteFloat(**bounds), False, False
    if annotation in (int, float, str):
        return annotation, False, False
    return str, False, False


def config_options(
    config_cls: type, *, reserved: Collection[str] = (), fields: Collection[str] | None = None
) -> list[click.Option]:
    """One click option per field of a Config dataclass (a trainer's, an attack's), or of ``fields`` only.

    The field's metadata gives the help (``help``) and, when set, the option's spelling (``flag``), ``metavar``,
    a range, a path or seed type (:func:`_click_type`), ``hidden``; a ``python_only`` field gets no option. A
    boolean field is a flag (``--x/--no-x`` when it defaults to True); a ``tuple[X, ...]`` field repeats. Former
    field names (the Config's ``RENAMED_FIELDS``) are hidden options that the caller warns about. The Config's own
    fields come first, then each shared base's, nearest first.

    Raises:
        TypeError: a field named like one of the command's own options (``reserved``).
    """
    hints = typing.get_type_hints(config_cls)
    options = []
    # How far up the bases a field was first declared: 0 for the Config's own, then each shared base, nearest first
    # (a trainer's fields, then the torch trainers' shared ones, then DpOptions'); a redeclared field stays with its base.
    depth = {
        f.name: i
        for i, base in enumerate(config_cls.__mro__)
        if dataclasses.is_dataclass(base)
        for f in dataclasses.fields(base)
    }
    chosen = [
        f
        for f in dataclasses.fields(config_cls)
        if (fields is None or f.name in fields) and not f.metadata.get("python_only")
    ]
    for f in sorted(chosen, key=lambda f: depth[f.name]):
        if f.name in reserved:
            raise TypeError(f"{config_cls.__qualname__}.{f.name} clashes with one of the command's own options.")
        click_type, is_flag, multiple = _click_type(hints[f.name], f.metadata)
        default = f.default if f.default is not dataclasses.MISSING else None
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        common = {"help": f.metadata.get("help", ""), "hidden": bool(f.metadata.get("hidden"))}
        if "metavar" in f.metadata:
            common["metavar"] = f.metadata["metavar"]
        if is_flag and not default:
            options.append(click.Option([flag, f.name], is_flag=True, default=False, **common))
        elif is_flag:
            options.append(
                click.Option([f"{flag}/--no-{flag[2:]}", f.name], default=default, show_default=True, **common)
            )
        elif multiple:
            options.append(click.Option([flag, f.name], type=click_type, multiple=True, **common))
        else:
            options.append(click.Option([flag, f.name], type=click_type, default=default, show_default=True, **common))
    if fields is None:
        for old, new in dict(getattr(config_cls, "RENAMED_FIELDS", {})).items():  # hidden; the caller warns
            options.append(
                click.Option(
                    ["--" + old.replace("_", "-"), old], type=_click_type(hints[new], {})[0], default=None, hidden=True
                )
            )
    return options
