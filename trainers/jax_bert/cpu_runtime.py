"""Process-wide CPU runtime settings the jax-bert trainer applies at start-up (none on import).

Both exist because the CPU defaults cost DP-SGD far more than non-private training, and a user
should not have to know environment tunables to get the speed the benchmarks report:

- :func:`tune_host_allocator`: glibc keeps freed blocks mapped, so XLA's large per-step buffers are
  reused instead of page-faulted in afresh every step.
- :func:`unroll_threefry_on_cpu`: ``jax.random`` on CPU lowers the Threefry-2x32 hash as a rolled
  5-iteration loop whose every iteration streams the whole state through memory. The DP step
  draws one Gaussian per parameter per logical batch (14M for BERT-mini), and the rolled hash made
  that draw ~20% of a batch-32 DP step. JAX's own unrolled lowering (the one it uses on GPU/TPU)
  computes the same bits ~3x sooner.

:func:`tune_cpu_runtime` is the one entry point: it applies both when JAX's backend is the CPU,
once per process (later calls return what the first applied), and every failure of the private
hooks leaves JAX as it was: training still works, only slower. The trainer calls it at the start
of every run, so a process that trains several models in a row (shadow models, tests) compiles
every one of them under the same settings as a fresh process would.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

import jax

from dpaudit.training.host_allocator import tune_host_allocator  # noqa: F401  (moved to the core: framework-free)


def unroll_threefry_on_cpu() -> bool:
    """Lowers ``jax.random``'s Threefry-2x32 hash on CPU with JAX's unrolled rule.

    The bits are identical (same hash, same counters; ``tests/trainers/jax_bert/test_cpu_runtime.py`` compares them),
    so every key, noise draw and resumed run is unchanged; only functions compiled afterwards are
    faster. Returns False, changing nothing, where this JAX version lacks the private hooks.
    """
    try:
        from jax._src.interpreters import mlir
        from jax._src.random import threefry2x32 as threefry

        primitive = getattr(threefry, "threefry2x32_p", None)
        unrolled = getattr(threefry, "_threefry2x32_lowering_rule", None)
        if primitive is None or unrolled is None:
            return False
        mlir.register_lowering(primitive, unrolled, platform="cpu")
    except Exception:  # a private JAX module moved or changed: keep JAX's own (slower) lowering
        return False
    return True


def _cpu_backend_expected() -> bool:
    """Whether JAX will run on the CPU, decided without initializing a backend (initializing one
    starts XLA's worker threads, and glibc settings made after that miss their arenas)."""
    platforms = jax.config.jax_platforms
    if platforms:
        return platforms.split(",")[0].strip() == "cpu"
    # Unrequested, JAX picks an accelerator whose PJRT plugin (or libtpu) is installed.
    if importlib.util.find_spec("jax_plugins") is not None or importlib.util.find_spec("libtpu") is not None:
        return False
    return not list(importlib.metadata.entry_points(group="jax_plugins"))


_APPLIED: dict[str, bool] | None = None


def tune_cpu_runtime() -> dict[str, bool]:
    """Applies :func:`tune_host_allocator` and :func:`unroll_threefry_on_cpu` when JAX runs on the
    CPU; returns what was applied (the trainer records it in the run summary of ``manifest.json``).

    Call it before anything has run on a JAX device: the allocator setting reaches only threads
    that have not allocated yet, so it is applied before the backend (and its thread pool) starts.
    """
    global _APPLIED
    if _APPLIED is None:
        allocator = _cpu_backend_expected() and tune_host_allocator()
        threefry = jax.default_backend() == "cpu" and unroll_threefry_on_cpu()
        _APPLIED = {"host_allocator": bool(allocator), "unrolled_threefry": bool(threefry)}
    return dict(_APPLIED)
