"""The CPU runtime settings the jax-bert trainer applies: faster, and changing no result.

Both are process-wide, so each test runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys


def _run(script: str) -> str:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_tune_host_allocator_makes_freed_blocks_reusable_without_page_faults() -> None:
    """A freed 256 MB block comes back fault-free."""
    _run("""
import ctypes, resource
from dpaudit.trainers.jax_bert.cpu_runtime import tune_host_allocator
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
def faults_of_fresh_block(n=256 << 20):
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    p = libc.malloc(n); ctypes.memset(p, 1, n); libc.free(p)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
before = [faults_of_fresh_block() for _ in range(2)]
assert tune_host_allocator()
after = [faults_of_fresh_block() for _ in range(2)]
print(before, after)
assert min(before) > 10_000, before   # glibc default: mmap/munmap, one fault per 4 KiB page
assert after[1] < 1_000, after        # tuned: the heap keeps the pages
""")


def test_unrolled_threefry_gives_the_same_bits_and_normals_without_a_loop() -> None:
    """Same keys, same draws (so noise, masking and resume are unchanged); the hash is no longer a
    rolled while loop in the lowered program."""
    _run("""
import jax, jax.numpy as jnp, numpy as np
from dpaudit.trainers.jax_bert.cpu_runtime import unroll_threefry_on_cpu

def draws(k):
    a, b = jax.random.split(k)
    return jax.random.bits(a, (1001,)), jax.random.normal(b, (7, 333)), jax.random.bernoulli(a, 0.3, (513,))

key = jax.random.key(123)
before = jax.jit(draws)(key)
assert "while" in jax.jit(draws).lower(key).as_text()
assert unroll_threefry_on_cpu()
fresh = jax.jit(lambda k: draws(k))  # a new function: lowered with the rule now registered
after = fresh(key)
assert "while" not in fresh.lower(key).as_text()
for x, y in zip(before, after):
    assert np.array_equal(np.asarray(x), np.asarray(y))
""")


_FAULTS_PER_CALL = """
import resource, sys
import jax, jax.numpy as jnp
from dpaudit.trainers.jax_bert.cpu_runtime import tune_cpu_runtime
if sys.argv[1] == "late":
    jnp.ones(3).block_until_ready()  # the backend and its worker threads are already running
if sys.argv[1] != "default":
    print(sorted(tune_cpu_runtime().items()))
# A 256 MB temporary (the [8192, 8192] product) that XLA's worker threads allocate on every call.
f = jax.jit(lambda a, b: jnp.sum(jnp.tanh(a @ b) @ b.T, axis=0))
a, b = jnp.ones((8192, 64), jnp.float32), jnp.ones((64, 8192), jnp.float32)
for _ in range(3):
    f(a, b).block_until_ready()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    f(a, b).block_until_ready()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) // 3)
"""


def _faults_per_call(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", _FAULTS_PER_CALL, mode], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    *report, faults = out.stdout.split()
    return " ".join(report), int(faults)


def test_tune_cpu_runtime_reaches_xla_worker_buffers_and_reports_what_it_applied() -> None:
    """Called where the trainer calls it (jax imported, nothing run yet), the allocator setting
    reaches XLA's worker threads: a step's large temporaries are no longer page-faulted in afresh.
    Called after the backend has run, it would miss them (why the trainer calls it first)."""
    report, tuned = _faults_per_call("tuned")
    assert report == "[('host_allocator', True), ('unrolled_threefry', True)]"
    _, default = _faults_per_call("default")
    _, late = _faults_per_call("late")
    assert default > 30_000, default  # glibc default: one fault per 4 KiB page of 256 MB
    assert late > 30_000, late
    assert tuned < 3_000, tuned


def test_tune_cpu_runtime_applies_once_per_process() -> None:
    """The second call (a second model trained in the same process) changes nothing and reports the first."""
    out = _run("""
from dpaudit.trainers.jax_bert import cpu_runtime
calls = []
real = cpu_runtime.unroll_threefry_on_cpu
cpu_runtime.unroll_threefry_on_cpu = lambda: calls.append(1) or real()
first, second = cpu_runtime.tune_cpu_runtime(), cpu_runtime.tune_cpu_runtime()
print(first == second, len(calls))
""")
    assert out.split() == ["True", "1"]


def test_a_changed_private_jax_hook_only_costs_speed() -> None:
    """If JAX's private lowering hook misbehaves after an upgrade, tuning reports False and random
    draws still work, with the same bits as JAX's own lowering."""
    out = _run("""
import jax, numpy as np
from jax._src.interpreters import mlir
def broken(*args, **kwargs):
    raise TypeError("register_lowering() changed its signature")
mlir.register_lowering = broken
from dpaudit.trainers.jax_bert import cpu_runtime
report = cpu_runtime.tune_cpu_runtime()
draw = np.asarray(jax.jit(lambda k: jax.random.normal(k, (5,)))(jax.random.key(0)))
print(report["unrolled_threefry"], np.isfinite(draw).all())
""")
    assert out.split() == ["False", "True"]
