"""Atomic training checkpoints: arrays in safetensors, everything else in JSON, never pickle.

A checkpoint is a directory ``checkpoints/step_00000100/`` holding

- ``arrays.safetensors``: every leaf of the ``params`` and optimizer-state pytrees, named by its
  ``jax.tree_util`` key path (``params/['bert']['encoder']...``, ``opt_state/[0].mu[...]``), and
- ``state.json``: the step, the JAX PRNG key data, the numpy sampling Generator's state, the
  serialized :class:`~dpaudit.accounting.ledger.PrivacyLedger`, the run's config and identity, and the
  sha256 of ``arrays.safetensors``.

The directory is built under a temporary name and renamed into place, so a kill at any moment
leaves either the previous checkpoint or the new one, whole. Restoring needs a *template* pytree
(freshly initialized params and optimizer state of the same config): the stored leaves are put back
into the template's structure by key path, and any missing, extra or reshaped leaf is an error
rather than a silently different model.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import sha256_file
from dpaudit.trainers.jax_bert.config import JaxBertConfig
from dpaudit.training.train_dir import (
    CHECKPOINT_ARRAYS,
    CHECKPOINT_STATE,
    write_checkpoint,
)

ARRAYS_NAME = CHECKPOINT_ARRAYS
STATE_NAME = CHECKPOINT_STATE


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """A restored checkpoint: pytrees in the template's structure plus the JSON state."""

    step: int
    params: Any
    opt_state: Any
    state: dict[str, Any]
    path: Path


def flatten_with_names(tree: Any, prefix: str) -> dict[str, np.ndarray]:
    """Leaves of ``tree`` as host numpy arrays keyed ``prefix/<key path>``."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        f"{prefix}/{jax.tree_util.keystr(path)}": np.array(jax.device_get(leaf), order="C") for path, leaf in leaves
    }


def unflatten_like(template: Any, arrays: dict[str, np.ndarray], prefix: str, *, source: Path) -> Any:
    """Put ``arrays`` back into ``template``'s structure, checking names, shapes and dtypes."""
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(template)
    expected = {f"{prefix}/{jax.tree_util.keystr(path)}" for path, _ in paths_and_leaves}
    stored = {name for name in arrays if name.startswith(prefix + "/")}
    if expected != stored:
        missing, extra = sorted(expected - stored)[:3], sorted(stored - expected)[:3]
        raise UserInputError(
            f"{source}: checkpoint does not match this model (missing {missing}, unexpected {extra}); use a new --out."
        )
    leaves = []
    for path, leaf in paths_and_leaves:
        name = f"{prefix}/{jax.tree_util.keystr(path)}"
        value = arrays[name]
        if value.shape != np.shape(leaf) or value.dtype != np.asarray(leaf).dtype:
            raise UserInputError(
                f"{source}: {name} is {value.dtype}{list(value.shape)} in the checkpoint but "
                f"{np.asarray(leaf).dtype}{list(np.shape(leaf))} in this model; use a new --out."
            )
        leaves.append(value)
    return jax.tree_util.tree_unflatten(treedef, leaves)


def save_checkpoint(
    directory: str | os.PathLike[str],
    *,
    step: int,
    params: Any,
    opt_state: Any,
    state: dict[str, Any],
    keep: int = 2,
) -> Path:
    """Write checkpoint ``step`` atomically into ``directory`` and keep only the newest ``keep``.

    Args:
        directory: the run's ``checkpoints/`` folder (created if needed).
        step: optimizer steps completed.
        params, opt_state: pytrees of arrays (device or host).
        state: JSON-serializable state (RNG states, ledger, config...); ``step`` is added.
        keep: how many checkpoints to keep (older ones are deleted after the new one is in place).
    """
    arrays = {**flatten_with_names(params, "params"), **flatten_with_names(opt_state, "opt_state")}
    return write_checkpoint(
        directory, step=step, write_arrays=lambda path: save_file(arrays, str(path)), state=state, keep=keep
    )


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON state of the checkpoint at ``path`` (without loading arrays), its identity's config in
    today's field names (:meth:`~.config.JaxBertConfig.upgrade_stored`: a run checkpointed before a
    rename still resumes)."""
    state_path = Path(path) / STATE_NAME
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise UserInputError(
            f"{state_path}: unreadable checkpoint state ({err}); delete that checkpoint folder."
        ) from None
    identity = state.get("identity") if isinstance(state, dict) else None
    if isinstance(identity, dict) and isinstance(identity.get("config"), dict):
        identity["config"] = JaxBertConfig.upgrade_stored(identity["config"])
    return state


def restore_checkpoint(path: str | os.PathLike[str], *, params_template: Any, opt_state_template: Any) -> Checkpoint:
    """Load the checkpoint at ``path`` into the structures of the templates.

    Raises:
        UserInputError: if the arrays file was changed or does not fit the templates.
    """
    path = Path(path)
    state = read_state(path)
    arrays_path = path / ARRAYS_NAME
    if sha256_file(arrays_path) != state.get("arrays_sha256"):
        raise UserInputError(
            f"{arrays_path} does not match its state.json hash; delete {path} to resume from an older one."
        )
    try:
        arrays = load_file(str(arrays_path))
    except (SafetensorError, OSError) as err:  # truncated or garbled, though its recorded hash was rewritten to match
        raise UserInputError(
            f"{arrays_path}: unreadable checkpoint arrays ({err}); delete {path} to resume from an older one."
        ) from None
    params = unflatten_like(params_template, arrays, "params", source=arrays_path)
    opt_state = unflatten_like(opt_state_template, arrays, "opt_state", source=arrays_path)
    return Checkpoint(step=int(state["step"]), params=params, opt_state=opt_state, state=state, path=path)
