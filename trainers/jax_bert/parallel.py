"""Data parallelism for the DP step: a 1-D device mesh, chunk placement, and psum of clipped sums.

The DP step is data parallel over the micro-batch axis ``m``: every device computes per-example
clipped gradients for its ``m / D`` slots and the partial sums are ``psum``-ed, so the result is the
same clipped sum a single device would compute. The noise is added *after* the psum by replicated
code from one key, so it enters exactly once per logical batch (not once per device), which is what
the accountant assumes.

Multi-host runs use :func:`maybe_initialize_distributed` before any other JAX call; the mesh then
spans every process's devices and the same code runs unchanged (every process samples the same
global indices from the shared seed and materializes only the slots its devices own).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from dpaudit.common.errors import UserInputError

#: Name of the mesh axis the micro-batch is sharded over.
DATA_AXIS = "data"

_ENV_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
_ENV_NUM_PROCESSES = "JAX_NUM_PROCESSES"
_ENV_PROCESS_ID = "JAX_PROCESS_ID"
_ENV_LOCAL_DEVICES = "JAX_LOCAL_DEVICE_IDS"


def _env_int(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name)
    if raw is None:
        raise UserInputError(
            f"environment variable {name} is not set; multi-host training needs "
            f"{_ENV_COORDINATOR}, {_ENV_NUM_PROCESSES} and {_ENV_PROCESS_ID}."
        )
    try:
        return int(raw)
    except ValueError:
        raise UserInputError(f"environment variable {name} must be an integer, got {raw!r}.") from None


def maybe_initialize_distributed(env: Mapping[str, str] | None = None) -> bool:
    """Calls ``jax.distributed.initialize`` when the multi-host environment variables are set.

    Reads ``JAX_COORDINATOR_ADDRESS`` (host:port of process 0), ``JAX_NUM_PROCESSES``,
    ``JAX_PROCESS_ID`` and optionally ``JAX_LOCAL_DEVICE_IDS`` (comma-separated). Without a
    coordinator address, or with a single process, this is a single-host run and nothing happens.
    Must run before any other JAX computation. Returns whether the distributed runtime is in use.
    """
    env = os.environ if env is None else env
    coordinator = env.get(_ENV_COORDINATOR, "").strip()
    if not coordinator:
        return False
    num_processes = _env_int(env, _ENV_NUM_PROCESSES)
    if num_processes < 1:
        raise UserInputError(f"{_ENV_NUM_PROCESSES} must be >= 1, got {num_processes}.")
    if num_processes == 1:
        return False
    process_id = _env_int(env, _ENV_PROCESS_ID)
    if not 0 <= process_id < num_processes:
        raise UserInputError(f"{_ENV_PROCESS_ID} must be in [0, {num_processes}), got {process_id}.")
    local = env.get(_ENV_LOCAL_DEVICES, "").strip()
    local_ids = [int(x) for x in local.split(",")] if local else None
    if jax.distributed.is_initialized():
        return True
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        local_device_ids=local_ids,
    )
    return True


def env_process_index(env: Mapping[str, str] | None = None) -> int:
    """This process's index in a multi-host run, from the environment alone (no JAX call).

    The same rule as :func:`maybe_initialize_distributed`: 0 unless a coordinator address and more than
    one process are set. Lets the command line decide who takes the run-directory lock before JAX starts.
    """
    env = os.environ if env is None else env
    if not env.get(_ENV_COORDINATOR, "").strip() or _env_int(env, _ENV_NUM_PROCESSES) <= 1:
        return 0
    return _env_int(env, _ENV_PROCESS_ID)


def make_data_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh with axis ``"data"`` over ``devices`` (default: every device of every process)."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must not be empty.")
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def replicated(mesh: Mesh) -> NamedSharding:
    """The sharding of parameters, optimizer state and gradient sums: a full copy on each device."""
    return NamedSharding(mesh, P())


def chunk_sharding(mesh: Mesh) -> NamedSharding:
    """The sharding of a chunk's ``[S, m, ...]`` arrays: the micro-batch axis ``m`` split over devices."""
    return NamedSharding(mesh, P(None, DATA_AXIS))


def check_physical_batch(mesh: Mesh, physical_batch: int) -> None:
    """Raises if a micro-step's examples (``--physical-batch``) cannot be split evenly over the mesh's devices."""
    n = mesh.shape[DATA_AXIS]
    if physical_batch % n:
        raise UserInputError(f"--physical-batch {physical_batch} must be a multiple of the number of devices ({n}).")


def place_chunk(mesh: Mesh, batch: Any, mask: Any) -> tuple[Any, jax.Array]:
    """Builds global arrays for one chunk, each device (of each process) getting its ``m / D`` slots.

    Inputs already placed as JAX arrays are passed through ``device_put`` (a no-op when already
    sharded this way). Host arrays are assembled with ``make_array_from_callback``, which only reads
    the slices the local devices own, so the same call works on one host and on many.
    """
    check_physical_batch(mesh, int(np.shape(mask)[1]))
    sharding = chunk_sharding(mesh)

    multi_process = jax.process_count() > 1

    def put(x: Any) -> jax.Array:
        if isinstance(x, jax.Array) and (not multi_process or x.sharding == sharding):
            return jax.device_put(x, sharding)
        # Multi-process: a process-local array (e.g. masked on this process's device) cannot be
        # device_put onto a mesh spanning other processes without a cross-process equality check;
        # every process holds the same values, so each contributes its own slices from host memory.
        x = np.asarray(jax.device_get(x))
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree.map(put, batch), put(mask)


def replicate(mesh: Mesh, tree: Any) -> Any:
    """``tree``'s leaves as global arrays with a full copy on every device of ``mesh``.

    Unlike ``jax.device_put``, this also works for process-local arrays when the mesh spans several
    processes (every process must pass the same values, which is how the trainer computes them):
    each process fills its own devices from host memory, with no cross-process transfer or check.
    """
    sharding = replicated(mesh)

    def put(x: Any) -> jax.Array:
        if isinstance(x, jax.Array) and x.sharding == sharding:
            return x
        host = np.asarray(jax.device_get(x))
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree)


def is_primary() -> bool:
    """Whether this process writes files: process 0 (the only process of a single-host run)."""
    return jax.process_index() == 0


def broadcast_from_primary(value: int, *, bits: int = 128) -> int:
    """Process 0's non-negative integer ``value`` (< 2**bits) on every process (itself with one process).

    Multi-host runs draw the secret noise seed from OS entropy on each process; they must all use
    process 0's, or their Poisson samples and noise would differ.
    """
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    n = -(-bits // 32)
    words = np.array([(value >> (32 * i)) & 0xFFFFFFFF for i in range(n)], dtype=np.uint32)
    shared = np.asarray(multihost_utils.broadcast_one_to_all(words), dtype=np.uint64)
    return sum(int(w) << (32 * i) for i, w in enumerate(shared))


def sync_processes(name: str) -> None:
    """A barrier across all processes of a multi-host run (a no-op with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def shard_over_data(fn: Callable[..., Any], mesh: Mesh) -> Callable[..., Any]:
    """Wraps ``fn(params, batch [S, m, ...], mask [S, m], *extra) -> pytree of sums`` to run data parallel.

    Each device applies ``fn`` to its slots of the micro-batch axis; the outputs (sums over
    examples) are ``psum``-ed over the mesh, so the wrapped function returns exactly the single-device
    sums, replicated. Only sums may be returned by ``fn``; means would be averaged wrongly. ``extra``
    arguments (a clipped sum's traced clip norm) are replicated.
    """

    def local(params: Any, batch: Any, mask: jax.Array, *extra: Any) -> Any:
        return jax.lax.psum(fn(params, batch, mask, *extra), DATA_AXIS)

    def sharded(params: Any, batch: Any, mask: jax.Array, *extra: Any) -> Any:
        return jax.shard_map(
            local,
            mesh=mesh,
            in_specs=(P(), P(None, DATA_AXIS), P(None, DATA_AXIS), *(P() for _ in extra)),
            out_specs=P(),
            # The scan carries of ``fn`` start as (unvarying) zeros and become device-varying; the psum
            # makes the output replicated, which is all the type check would verify.
            check_vma=False,
        )(params, batch, mask, *extra)

    return sharded
