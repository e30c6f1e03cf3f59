"""Atomic training checkpoints: tensors in safetensors, everything else in JSON, never pickle.

``checkpoints/step_00000100/`` holds ``arrays.safetensors`` (the trainable parameters by name and the
optimizer's per-parameter state) and ``state.json`` (step, optimizer hyperparameters, the privacy
ledger, the secret noise seed, per-layer clip norms, the run's identity, and the sha256 of the
arrays). It is built under a temporary name and renamed into place, so a kill leaves the previous
checkpoint or the new one, whole. checkpoints/ is private to the data owner (it holds the noise seed)
and is deleted when the run finishes unless ``--keep-checkpoints``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from dpaudit.common.errors import UserInputError
from dpaudit.training.train_dir import (
    CHECKPOINT_ARRAYS,
    CHECKPOINT_STATE,
    write_checkpoint,
)

ARRAYS_NAME = CHECKPOINT_ARRAYS
STATE_NAME = CHECKPOINT_STATE


def save_checkpoint(
    directory: Path,
    *,
    step: int,
    names: list[str],
    params: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    keep: int = 2,
    average: list[torch.Tensor] | None = None,
) -> Path:
    """Write checkpoint ``step`` atomically and keep only the newest ``keep`` (:func:`write_checkpoint`);
    ``average``: the parameter average of the first tensors of ``names`` (--ema-decay), stored beside them."""
    arrays = {f"params/{n}": p.detach().cpu().contiguous() for n, p in zip(names, params)}
    for n, a in zip(names, average or ()):
        arrays[f"average/{n}"] = a.detach().cpu().contiguous()
    opt = optimizer.state_dict()
    for index, slots in opt["state"].items():
        for key, value in slots.items():
            arrays[f"opt/{index}/{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    return write_checkpoint(
        directory,
        step=step,
        write_arrays=lambda path: save_file(arrays, str(path)),
        state={**state, "param_groups": opt["param_groups"]},
        keep=keep,
    )


def read_state(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / STATE_NAME).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise UserInputError(f"{path / STATE_NAME}: unreadable checkpoint state ({err}); delete that folder.") from None


def restore_checkpoint(
    path: Path,
    *,
    names: list[str],
    params: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    average: list[torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Load parameters and optimizer state in place; returns the JSON state. The arrays' sha256 and header were
    checked by the run skeleton before the model was built (:func:`dpaudit.training.train_dir.check_checkpoint_arrays`):
    they are not hashed a second time here."""
    state = read_state(path)
    arrays = load_file(str(path / ARRAYS_NAME))
    expected = {f"params/{n}" for n in names}
    stored = {k for k in arrays if k.startswith("params/")}
    if expected != stored:
        raise UserInputError(
            f"{path}: checkpoint does not match this model "
            f"(differences {sorted(expected ^ stored)[:3]}); use a new --out."
        )
    with torch.no_grad():
        for n, p in zip(names, params):
            if arrays[f"params/{n}"].shape != p.shape:
                raise UserInputError(
                    f"{path}: {n} has shape {list(arrays[f'params/{n}'].shape)}, expected {list(p.shape)}."
                )
            p.copy_(arrays[f"params/{n}"])
        for n, a in zip(names, average or ()):
            if f"average/{n}" not in arrays:
                raise UserInputError(
                    f"{path}: the checkpoint holds no parameter average (--ema-decay) for {n}; resume with the "
                    "run's own options or use a new --out."
                )
            a.copy_(arrays[f"average/{n}"])
    opt_state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in arrays.items():
        if key.startswith("opt/"):
            _, index, slot = key.split("/", 2)
            opt_state.setdefault(int(index), {})[slot] = value
    optimizer.load_state_dict({"state": opt_state, "param_groups": state["param_groups"]})
    return state
