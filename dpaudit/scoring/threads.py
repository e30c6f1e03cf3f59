"""How many threads torch uses: the cores actually free, unless the user said (``OMP_NUM_THREADS``).

Torch starts one intra-op thread per core it can see, whatever else runs on them. On a loaded machine
those threads wait for each other at every parallel region: the same edp-sgd run took 307 s with torch's
default threads and 37 s with ``OMP_NUM_THREADS=1`` at load 10 on a shared 2-core machine.
So the torch trainers and the scorer start with the cores this process may run on
(``os.sched_getaffinity``) minus the 1-minute load average, at least one; ``OMP_NUM_THREADS`` (or
``DPAUDIT_THREADS``, which wins) set by the user is kept as is. Torch only: jax picks its own threads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

__all__ = ["apply_torch_threads", "free_cores", "torch_threads"]

#: The environment variables a user sets to choose the thread count (the first one set wins).
THREAD_VARIABLES = ("DPAUDIT_THREADS", "OMP_NUM_THREADS")


def free_cores(*, cores: int | None = None, load: float | None = None) -> int:
    """Cores this process may use (its CPU affinity) minus the 1-minute load average, rounded, at least 1.

    ``cores`` and ``load`` override what the system reports (for tests)."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # not on Linux
            cores = os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):
            load = 0.0
    if not math.isfinite(load) or load < 0:
        load = 0.0
    return max(1, min(cores, round(cores - load)))


def torch_threads(environ: Mapping[str, str] | None = None, **system: float | int | None) -> tuple[int | None, str]:
    """(threads to set, why): None when the user chose (``DPAUDIT_THREADS`` is then returned as the count to set,
    ``OMP_NUM_THREADS`` is left to torch, which reads it); else :func:`free_cores`.

    Raises:
        ValueError: ``DPAUDIT_THREADS`` is not an integer >= 1.
    """
    environ = os.environ if environ is None else environ
    chosen = (environ.get("DPAUDIT_THREADS") or "").strip()
    if chosen:
        if not chosen.isdigit() or int(chosen) < 1:
            raise ValueError(f"DPAUDIT_THREADS must be an integer >= 1, got {chosen!r}.")
        return int(chosen), "DPAUDIT_THREADS"
    if (environ.get("OMP_NUM_THREADS") or "").strip():
        return None, "OMP_NUM_THREADS"
    n = free_cores(**system)  # type: ignore[arg-type]
    return n, "cores free (CPU affinity minus the 1-minute load average)"


def apply_torch_threads() -> int:
    """Set torch's intra-op thread count by :func:`torch_threads` (once per process is enough; later calls
    follow the load again). Returns the count torch now uses."""
    import torch

    from dpaudit.common.errors import UserInputError

    try:
        n, _why = torch_threads()
    except ValueError as err:
        raise UserInputError(f"{err} Set it to the number of cores torch may use, or unset it.") from None
    if n is not None and n != torch.get_num_threads():
        torch.set_num_threads(n)
    return torch.get_num_threads()
