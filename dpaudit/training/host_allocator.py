"""glibc allocator settings that stop large per-step buffers from being page-faulted in afresh.

Framework-free (ctypes only), shared by the JAX and torch trainers: per-example DP steps allocate
hundreds of MB of gradients each step, glibc serves them with fresh ``mmap``s and returns them with
``munmap``, and every step then pays one page fault per 4 KiB (measured on a 2-core CPU). Moved here from
``trainers/jax_bert/cpu_runtime.py`` unchanged.
"""

from __future__ import annotations

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8


def tune_host_allocator() -> bool:
    """Makes glibc keep freed memory mapped, so per-step buffers are reused instead of re-faulted.

    XLA's CPU runtime allocates each step's temporary buffers (the per-example gradients of a DP
    step are hundreds of MB) with ``malloc``; glibc serves blocks this large with fresh ``mmap``s and
    returns them with ``munmap``, so every step touches new pages and pays one page fault per 4 KiB
    (measured on a 2-core CPU: 1.5M+ faults per step, more time than the arithmetic). With ``mmap`` disabled
    for ``malloc`` and trimming off, the heap keeps its pages and later steps reuse them. Same
    effect as ``GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=...``, but
    applied by the trainer so users need not set anything. Process-wide and irreversible; it reaches
    only threads that have not allocated yet, so call it before the JAX backend starts
    (:func:`tune_cpu_runtime` does). Returns False where glibc is not available.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = mallopt(_M_MMAP_MAX, 0) == 1
    ok &= mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1
    ok &= mallopt(_M_TOP_PAD, 64 << 20) == 1
    # Worker threads' arenas are limited to 64 MB heaps and fall back to mmap for anything larger
    # whatever M_MMAP_MAX says; one (main, brk-grown) arena serves XLA's few large blocks.
    ok &= mallopt(_M_ARENA_MAX, 1) == 1
    return bool(ok)
