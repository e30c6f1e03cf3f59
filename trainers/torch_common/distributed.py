"""torch.distributed glue: one process per device (torchrun + NCCL on GPUs, gloo on CPU).

A run with ``WORLD_SIZE`` > 1 in its environment (torchrun sets it, with ``RANK`` and
``MASTER_ADDR``/``MASTER_PORT``) joins a process group; ``DPAUDIT_DIST_INIT_METHOD`` (e.g.
``file:///tmp/x``) overrides the rendezvous. Single-process runs need no launcher and touch none of it.
Every process samples the same batch (the sampling generator is keyed by the shared secret seed),
computes its share, and one all-reduce of a single flat buffer sums the shares.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    rank: int
    size: int

    @property
    def primary(self) -> bool:
        return self.rank == 0


def env_rank() -> int:
    """This process's rank as the launcher's environment names it (0 without a launcher); needs no process group."""
    return int(os.environ.get("RANK", "0")) if int(os.environ.get("WORLD_SIZE", "1")) > 1 else 0


def resolve_device(choice: str) -> torch.device:
    """``--device auto|cpu|cuda`` as a torch device; a torchrun process takes GPU ``LOCAL_RANK``."""
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    if choice == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        from dpaudit.common.errors import UserInputError

        raise UserInputError("--device cuda: torch sees no CUDA device here; use --device cpu or auto.")
    index = int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``: to a GPU through pinned memory, asynchronously (a plain copy of pageable memory
    would wait for the GPU: a host sync in the hot loop); ``t`` itself when it is already there."""
    if device.type == "cpu" or t.device == device:
        return t
    return t.pin_memory().to(device, non_blocking=True)


def init_world(device: torch.device | None = None) -> World:
    """Join the process group named by the environment, or a world of one (NCCL for CUDA tensors, else gloo)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return World(0, 1)
    if not dist.is_initialized():
        backend = "nccl" if device is not None and device.type == "cuda" else "gloo"
        method = os.environ.get("DPAUDIT_DIST_INIT_METHOD", "env://")
        dist.init_process_group(backend=backend, init_method=method, rank=int(os.environ["RANK"]), world_size=size)
    return World(dist.get_rank(), dist.get_world_size())


def all_reduce_sum_(tensors: list[torch.Tensor], world: World) -> None:
    """In place: every tensor becomes its sum over processes (one flat all-reduce)."""
    if world.size == 1 or not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat)
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset : offset + n].view_as(t))
        offset += n


def broadcast_seed(seed: int, world: World) -> int:
    """Process 0's secret seed on every process (as four 32-bit words; no pickling)."""
    if world.size == 1:
        return seed
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"  # NCCL moves CUDA tensors only
    words = torch.tensor([(seed >> (32 * i)) & 0xFFFFFFFF for i in range(4)], dtype=torch.int64, device=device)
    dist.broadcast(words, src=0)
    return sum(int(w) << (32 * i) for i, w in enumerate(words.tolist()))


def barrier(world: World) -> None:
    if world.size > 1:
        dist.barrier()
