"""``--setup FILE.py:build``: a user's own model, optimizer and loader, checked before anything trains.

``build()`` returns ``(model, optimizer, loader)``, ``(model, optimizer, loader, criterion)`` or a dict with those
keys: an ``nn.Module``, a ``torch.optim.Optimizer`` over that model's parameters, a ``DataLoader`` whose rows are
``(*inputs, label)`` (its ``batch_size`` over its dataset's size is q) and a per-example loss. A file that does not
import, a function that raises, or values of the wrong types are one line naming the file and the fix
(:class:`dpaudit.common.errors.UserInputError`), before any directory is written.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.opacus.loop import LibrarySetup

__all__ = ["load_setup"]

_SHAPE = "build() must return (model, optimizer, loader[, criterion]) or a dict with those keys"


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def load_setup(spec: str) -> LibrarySetup:
    """Import ``FILE.py`` of ``spec`` (``FILE.py:FUNCTION``), call the function and check what it returns.

    Raises:
        UserInputError: naming ``--setup SPEC`` and the fix.
    """
    where = f"--setup {spec}"
    path_text, _, function = spec.rpartition(":")
    path = Path(path_text)
    if not path_text or not function.isidentifier():
        raise UserInputError(f"{where}: expected FILE.py:FUNCTION (e.g. my_setup.py:build).")
    if not path.is_file():
        raise UserInputError(f"{where}: {path} is not a file; give the path of your setup file.")
    name = f"_dpaudit_setup_{abs(hash(str(path.resolve())))}"
    try:
        loader = importlib.util.spec_from_file_location(name, path)
        if loader is None or loader.loader is None:
            raise ImportError("not a Python file")
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        loader.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any failure of the user's file is one line naming it
        sys.modules.pop(name, None)
        raise UserInputError(f"{where}: {path} fails to import ({_first_line(err)}); fix the file.") from None
    build = getattr(module, function, None)
    if not callable(build):
        raise UserInputError(f"{where}: {path} defines no function {function}(); define it or name the right one.")
    try:
        built = build()
    except Exception as err:  # noqa: BLE001 - the user's code
        raise UserInputError(f"{where}: {function}() raised {_first_line(err)}; fix the function.") from None
    return _checked(built, where)


def _checked(built: Any, where: str) -> LibrarySetup:
    if isinstance(built, dict):
        try:
            parts = [built["model"], built["optimizer"], built["loader"], built.get("criterion")]
        except KeyError as err:
            raise UserInputError(f"{where}: the dict has no {err.args[0]!r}; {_SHAPE}.") from None
    elif isinstance(built, (tuple, list)) and len(built) in (3, 4):
        parts = [*built, None][:4]
    else:
        raise UserInputError(f"{where}: got {type(built).__name__}; {_SHAPE}.")
    model, optimizer, loader, criterion = parts
    for value, kind, word in (
        (model, nn.Module, "model: a torch.nn.Module"),
        (optimizer, torch.optim.Optimizer, "optimizer: a torch.optim.Optimizer"),
        (loader, torch.utils.data.DataLoader, "loader: a torch.utils.data.DataLoader"),
    ):
        if not isinstance(value, kind):
            raise UserInputError(f"{where}: the {word.split(':')[0]} is a {type(value).__name__}; return the {word}.")
    own = {id(p) for p in model.parameters()}
    if any(id(p) not in own for group in optimizer.param_groups for p in group["params"]):
        raise UserInputError(
            f"{where}: the optimizer holds parameters that are not the model's; build it from model.parameters()."
        )
    if criterion is not None and not callable(criterion):
        raise UserInputError(
            f"{where}: the criterion is a {type(criterion).__name__}; return a loss (e.g. torch.nn.CrossEntropyLoss())."
        )
    try:
        size = len(loader.dataset)  # type: ignore[arg-type]
    except TypeError:
        raise UserInputError(f"{where}: the loader's dataset has no length; use a map-style Dataset.") from None
    if size < 1 or not loader.batch_size:
        raise UserInputError(f"{where}: the loader is empty or has no batch_size; give it rows and a batch size.")
    return LibrarySetup(model=model, optimizer=optimizer, loader=loader, criterion=criterion)
