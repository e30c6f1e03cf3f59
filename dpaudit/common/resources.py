"""What this machine has (free memory, free disk, this process's resident size), and how a cost is said.

Long work states its cost before it starts and refuses what cannot fit (``dpaudit inject``'s
:mod:`dpaudit.canaries.cost`, ``dpaudit audit-trainer``'s :mod:`dpaudit.whitebox.cost`); both read the machine and
word the figures here, rounded up (an estimate that says less than it costs misleads).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

__all__ = ["available_memory", "format_bytes", "format_duration", "free_disk", "resident_bytes"]

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
