"""DpEvents to and from JSON (only ``dp_accounting.dp_event`` classes, so reading a privacy.json never imports code)."""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import TypeAlias

import attr
from dp_accounting import dp_event
from dp_accounting.dp_event import (
    DpEvent,
)

from dpaudit.common.errors import UserInputError

#: A JSON value as :mod:`json` writes and reads it (a tuple or any other sequence is written as an array). The one
#: spelling of JSON data in dpaudit's typed packages: :data:`Json` is a JSON object.
JsonValue: TypeAlias = "str | int | float | bool | None | Sequence[JsonValue] | Mapping[str, JsonValue]"
#: A JSON object: what every ``to_json`` returns.
Json: TypeAlias = "dict[str, JsonValue]"


def _to_json_value(value: object, path: str) -> JsonValue:
    if isinstance(value, DpEvent):
        return _event_to_json(value, path)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{path} is {value}; JSON cannot hold it.")
        return value
    if isinstance(value, (list, tuple)):
        return [_to_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise ValueError(f"{path}: cannot serialize {type(value).__name__} {value!r}.")


def _event_to_json(event: DpEvent, path: str) -> Json:
    cls = type(event)
    if getattr(dp_event, cls.__name__, None) is not cls:
        raise ValueError(f"{path}: only dp_accounting.dp_event classes serialize, got {cls.__module__}.{cls.__name__}.")
    out: Json = {"class_name": cls.__name__}
    for field in attr.fields(cls):
        out[field.name] = _to_json_value(getattr(event, field.name), f"{path}.{field.name}")
    return out


def event_to_json(event: DpEvent) -> Json:
    """A JSON-ready dict: ``{"class_name": "ComposedDpEvent", "events": [...]}``, recursively.

    Only classes of ``dp_accounting.dp_event`` are written (and read back), so loading a
    ``privacy.json`` never imports arbitrary code. Floats are written by ``json`` with ``repr``,
    which round-trips them exactly, so the recomputed epsilon equals the original.
    """
    if not isinstance(event, DpEvent):
        raise TypeError(f"event must be a dp_accounting DpEvent, got {type(event).__name__}.")
    return _event_to_json(event, "event")


def _from_json_value(value: object, path: str) -> object:
    if isinstance(value, dict):
        return _event_from_json(value, path)
    if isinstance(value, list):
        return [_from_json_value(v, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def _event_from_json(obj: Mapping[str, object], path: str) -> DpEvent:
    name = obj.get("class_name")
    cls: object = getattr(dp_event, name, None) if isinstance(name, str) else None
    if not (isinstance(cls, type) and attr.has(cls) and issubclass(cls, DpEvent)):
        raise UserInputError(f"{path}: unknown DpEvent class_name {name!r}; expected a dp_accounting.dp_event class.")
    fields = [f.name for f in attr.fields(cls)]
    given = set(obj) - {"class_name"}
    if given != set(fields):
        raise UserInputError(f"{path}: {name} needs fields {sorted(fields)}, got {sorted(given)}.")
    values = {f: _from_json_value(obj[f], f"{path}.{f}") for f in fields}
    try:
        return cls(**values)
    except (TypeError, ValueError) as err:
        raise UserInputError(f"{path}: cannot build {name}: {err}") from None


def event_from_json(obj: object) -> DpEvent:
    """Inverse of :func:`event_to_json`; malformed input raises :class:`UserInputError`."""
    if not isinstance(obj, dict):
        raise UserInputError(f"event: expected a JSON object with class_name, got {type(obj).__name__}.")
    return _event_from_json(obj, "event")


def _event_key(event: DpEvent) -> str:
    return json.dumps(event_to_json(event), sort_keys=True, separators=(",", ":"))
