"""What this machine has (free memory, free disk, this process's resident size), and how a cost is said.

Long work states its cost before it starts and refuses what cannot fit (``dpaudit inject``'s
:mod:`dpaudit.canaries.cost`, ``dpaudit audit-trainer``'s :mod:`dpaudit.whitebox.cost`); both read the machine and
word the figures here, rounded up (an estimate that says less than it costs misleads). Estimates of CPU time
measured on one machine are carried to this one by :func:`speed_factor` (a short fixed probe timed now against the
same probe on the machine the figures were measured on), and turned into wall time at the current load by
:func:`wall_seconds`.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path

__all__ = [
    "available_memory",
    "available_cores",
    "current_load",
    "format_bytes",
    "format_duration",
    "free_disk",
    "probe_seconds",
    "resident_bytes",
    "speed_factor",
    "wall_seconds",
]

#: Iterations of one chunk of the speed probe, and chunks timed (the fastest counts: an interruption only slows one).
PROBE_CHUNK, PROBE_CHUNKS = 1_000_000, 4
#: Weight of the load average in :func:`wall_seconds`, fitted on two ``dpaudit demo --quick`` runs on the 2-core
#: machine (wall / CPU 1.9 at load about 6, 1.7 at load 6.8 falling to 3.5: 0.66-0.69; the unweighted load predicted
#: 2.8).
LOAD_WEIGHT = 0.67
#: CPU seconds of one probe chunk on the reference machine (the project's 2-core machine, where the cost tables of
#: :mod:`dpaudit.common.cost_model` and :mod:`dpaudit.whitebox.cost` were measured): the fastest of 5, 0.117-0.120 s,
#: at load 4.5.
REFERENCE_PROBE_SECONDS = 0.117

_GB = 1e9


def available_memory() -> int | None:
    """Memory new allocations can take without swapping (``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def free_disk(out: str | os.PathLike[str]) -> int | None:
    """Free bytes on the file system ``out`` will be written to (its nearest existing parent), or None where unknown."""
    path = Path(os.path.abspath(out))
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def resident_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``; 0 where unknown)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def format_bytes(n: float) -> str:
    """ "2.6 GB" (one decimal, rounded up) from 0.1 GB, "815 MB" below."""
    return f"{math.ceil(n / _GB * 10) / 10:.1f} GB" if n >= 0.1 * _GB else f"{math.ceil(n / 1e6):,} MB"


def format_duration(seconds: float) -> str:
    """ "45 s" below two minutes, "4 min" above (rounded up)."""
    return f"{math.ceil(seconds):,} s" if seconds < 120 else f"{math.ceil(seconds / 60):,} min"


def _probe_chunk(n: int) -> int:
    """A fixed interpreter-bound workload (integer arithmetic and a small dict): no numpy, no jax, no allocation that
    grows, so its time depends on the core's speed only."""
    acc = 0
    table: dict[int, int] = {}
    for i in range(n):
        acc = (acc * 31 + i) % 1_000_003
        table[acc & 1023] = i
    return acc + len(table)


def probe_seconds(chunks: int = PROBE_CHUNKS) -> float:
    """CPU seconds of one probe chunk on this machine now (the fastest of ``chunks``; about 0.5 s in all on the
    reference machine). CPU time, not wall time: the load is accounted for separately (:func:`wall_seconds`)."""
    best = math.inf
    for _ in range(chunks):
        start = time.process_time()
        _probe_chunk(PROBE_CHUNK)
        best = min(best, time.process_time() - start)
    return best


def speed_factor(probe: float | None = None) -> float:
    """How many times slower this machine is than the reference one (> 1: slower; CPU figures measured there are
    multiplied by it), from ``probe`` (:func:`probe_seconds`; measured now when None)."""
    probe = probe_seconds() if probe is None else probe
    return max(probe, 1e-9) / REFERENCE_PROBE_SECONDS


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where unknown)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def current_load() -> float:
    """The machine's load now: ``os.getloadavg()``'s last minute (runnable threads); 0 where unknown."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def wall_seconds(cpu: float, *, threads: float, load: float | None = None, cores: int | None = None) -> float:
    """Wall seconds of work costing ``cpu`` CPU seconds that keeps ``threads`` cores busy on a free machine, run now.

    At load L (``os.getloadavg()``'s last minute: runnable threads) on C cores, the scheduler gives the work's
    ``threads`` about C x threads / (w L + threads) cores, never more than ``threads`` nor C: wall = cpu / that.
    ``w`` (:data:`LOAD_WEIGHT`) is fitted: the load counts threads that do not compete all the time.
    """
    load = current_load() if load is None else load
    cores = available_cores() if cores is None else cores
    usable = min(threads, cores, cores * threads / (LOAD_WEIGHT * max(load, 0.0) + threads))
    return cpu / max(usable, 1e-9)
