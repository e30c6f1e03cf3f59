"""``--setup FILE.py:build``: a user's own model, optimizer and loader, checked before anything trains.

``build()`` returns ``(model, optimizer, loader)``, ``(model, optimizer, loader, criterion)`` or a dict with those
keys: an ``nn.Module``, a ``torch.optim.Optimizer`` over that model's parameters, a ``DataLoader`` whose rows are
``(*inputs, label)`` (its ``batch_size`` over its dataset's size is q) and a per-example loss. A file that does not
import, a function that raises, or values of the wrong types are one line naming the file and the fix
(:class:`dpaudit.common.errors.UserInputError`), before any directory is written.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.opacus.loop import LibrarySetup
from dpaudit.trainers.setup_call import call_setup

__all__ = ["load_setup"]

_SHAPE = "build() must return (model, optimizer, loader[, criterion]) or a dict with those keys"


def load_setup(spec: str) -> LibrarySetup:
    """Import ``FILE.py`` of ``spec`` (``FILE.py:FUNCTION``), call the function and check what it returns
    (:func:`dpaudit.trainers.setup_call.call_setup`, shared with the jax-privacy trainer).

    Raises:
        UserInputError: naming ``--setup SPEC`` and the fix.
    """
    return _checked(call_setup(spec), f"--setup {spec}")


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
