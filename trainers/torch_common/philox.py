"""Gaussian noise on the CPU from Philox4x32-10, in C compiled at first use.

**Why.** A DP step adds one Gaussian number per parameter: 7.4M for the paper's BERT. torch's CPU
sampler draws them from mt19937, a scalar stream, at ~4.5 ns a number, so at batch 32 the noise alone
was ~10% of a non-private step (20 ms on 2 cores). Philox4x32-10 (Salmon et al. 2011, the
counter-based generator torch uses on CUDA) computes every block independently, so it vectorizes (the
rounds are written with AVX-512 or AVX2 intrinsics, the Box-Muller transform is left to the compiler).

**Reach.** Each block of four 32-bit words gives two normals by Box-Muller with a 96-bit radius
uniform, in double precision (:func:`pairs`, ``philox_normal.c``): the radius reaches
sqrt(194 ln 2) = 11.596 standard deviations, where a 32-bit uniform stopped at 6.66 and let a
neighbour alone on a gradient coordinate be revealed whenever its shift carried the noise past that
edge (:mod:`dpaudit.accounting.noise_tail`). Twice the Philox rounds per number and a double-precision
transform: ~3.2 ns a number on one AVX-512 core, of which the Philox rounds ~1.4 (the 32-bit float32
transform took ~1.3 in all); ``benchmarks/bench_noise_sampler.py`` measures it.

**How.** ``philox_normal.c`` beside this file is compiled with the system C compiler (``$CC``, else
``cc``) into a temporary directory the first time noise is drawn, for the machine it runs on
(``-march=native``; if the compiler refuses that, with plain ``-O3``), and loaded with :mod:`ctypes`;
calls release the GIL, so the noise pool's threads draw in parallel. The build is checked against
Random123's published known answers before use. Its values do not depend on the instruction set or
the build (IEEE operations only, no contraction), so a given key gives the same bits on every x86
machine.

**When it is not used.** Without a working compiler, on a GPU, for dtypes other than float32, or when
``DPAUDIT_NOISE_GENERATOR=torch`` is set, :mod:`trainers.torch_common.noise` draws the same
construction's words from torch's generators and transforms them with torch
(:func:`trainers.torch_common.noise.wide_normal_pairs`). ``privacy.json`` records which generator ran
(:func:`trainers.torch_common.noise.describe`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

__all__ = ["ENV", "PAIR_WORDS", "add_normal_", "available", "block", "normal_", "pairs"]

#: Environment variable that selects the CPU generator: ``philox`` (default when it builds) or ``torch``.
ENV = "DPAUDIT_NOISE_GENERATOR"
#: 32-bit words per Box-Muller pair (one Philox block): three for the radius uniform, one for the angle.
PAIR_WORDS = 4
_SOURCE = Path(__file__).with_name("philox_normal.c")
_FLAGS = ("-O3", "-ffp-contract=off", "-fno-math-errno", "-shared", "-fPIC")
_NATIVE = ("-march=native", "-fopenmp-simd")  # this CPU's vector width; honour the `omp simd` pragmas
# Random123's known answers for Philox4x32-10: (counter, key) -> output.
_KNOWN_ANSWERS = (
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
)


def build(native: bool = True) -> ctypes.CDLL | None:
    """Compile and load the sampler (``native``: vectorized for this CPU; else with the plainest flags,
    for a compiler that refuses those); None when there is no compiler or the build fails its
    known-answer check."""
    command = shlex.split(os.environ.get("CC") or "cc")  # e.g. CC="ccache gcc"
    compiler = shutil.which(command[0]) if command else None
    if compiler is None:
        return None
    with tempfile.TemporaryDirectory(prefix="dpaudit-philox-") as tmp:
        target = Path(tmp) / "philox_normal.so"
        flags = (*_FLAGS, *_NATIVE) if native else _FLAGS
        try:
            subprocess.run(
                [compiler, *command[1:], *flags, "-o", str(target), str(_SOURCE)],
                check=True,
                capture_output=True,
                timeout=120,
            )
            library = ctypes.CDLL(str(target))  # mapped: the file may go with the directory
        except (OSError, subprocess.SubprocessError):
            return None
    library.dpaudit_philox_normal.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_double,
        ctypes.c_int,
    ]
    library.dpaudit_philox_normal.restype = None
    library.dpaudit_philox_add_ranges.argtypes = (
        [ctypes.c_int64] + [ctypes.c_void_p] * 4 + [ctypes.c_double, ctypes.c_void_p]
    )
    library.dpaudit_philox_add_ranges.restype = None
    library.dpaudit_gaussian_pairs.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p]
    library.dpaudit_gaussian_pairs.restype = None
    library.dpaudit_philox4x32_10.argtypes = [ctypes.c_void_p] * 3
    library.dpaudit_philox4x32_10.restype = None
    if any(block(counter, key, library) != want for counter, key, want in _KNOWN_ANSWERS):
        return None
    return library


@functools.cache
def _library() -> ctypes.CDLL | None:
    """This process's build: made once, on the first draw (a fraction of a second)."""
    if os.environ.get(ENV, "philox").strip().lower() == "torch":
        return None
    return build(native=True) or build(native=False)


def available() -> bool:
    """Whether CPU noise is drawn with the Philox sampler in this process (building it if needed)."""
    return _library() is not None


def _loaded(library: ctypes.CDLL | None) -> ctypes.CDLL:
    """``library``, else this process's build; an error when there is none."""
    library = library or _library()
    if library is None:
        raise RuntimeError(f"the Philox sampler is not available (no C compiler, or {ENV}=torch)")
    return library


def block(counter: Sequence[int], key: Sequence[int], library: ctypes.CDLL | None = None) -> tuple[int, ...]:
    """One Philox4x32-10 block: the four 32-bit output words of ``counter`` (4 words) under ``key`` (2)."""
    library = _loaded(library)
    c, k, out = (np.asarray(counter, np.uint32), np.asarray(key, np.uint32), np.zeros(4, np.uint32))
    library.dpaudit_philox4x32_10(c.ctypes.data, k.ctypes.data, out.ctypes.data)
    return tuple(int(v) for v in out)


def pairs(words: np.ndarray, library: ctypes.CDLL | None = None) -> np.ndarray:
    """The sampler's Box-Muller transform on given words: ``words`` is ``(n, 4)`` 32-bit words (w0, w1,
    w2 the radius uniform, most significant first; w3 the angle), the result ``(n, 2)`` float64: each
    row's (r cos, r sin), exactly as :func:`normal_` computes them from a Philox block before the
    multiplication by std and the rounding to float32. For the tests of the sampler's reach (the
    extreme words) and of its far tail (w0 = 0)."""
    library = _loaded(library)
    words = np.ascontiguousarray(words, dtype=np.uint32)
    if words.ndim != 2 or words.shape[1] != PAIR_WORDS:
        raise ValueError(f"pairs takes an (n, {PAIR_WORDS}) array of 32-bit words")
    out = np.empty((words.shape[0], 2), np.float64)
    library.dpaudit_gaussian_pairs(words.shape[0], words.ctypes.data, out.ctypes.data)
    return out


def normal_(
    out: torch.Tensor, key: Sequence[int], std: float, *, add: bool = False, library: ctypes.CDLL | None = None
) -> torch.Tensor:
    """Fill ``out`` (contiguous float32 on the CPU) with N(0, std^2) numbers, or add them when ``add``.

    ``key`` is 4 secret 32-bit words: the Philox key and the two counter words that are not the
    block index. The values depend only on (key, number of elements, std).
    """
    library = _loaded(library)
    words = _checked([out], key, "normal_")
    library.dpaudit_philox_normal(out.data_ptr(), out.numel(), words.ctypes.data, float(std), int(add))
    return out


def add_normal_(
    outs: Sequence[torch.Tensor],
    starts: Sequence[int],
    key: Sequence[int],
    std: float,
    *,
    library: ctypes.CDLL | None = None,
) -> tuple[float, float]:
    """Add to each ``outs[j]`` the numbers ``starts[j] .. starts[j] + outs[j].numel() - 1`` of the stream
    that :func:`normal_` draws under ``key`` (so a stream's numbers can go straight into the tensors
    they noise), in one call.

    Returns (squared norm of ``outs`` before the add, squared norm of the numbers added), summed in the
    same pass (single precision within each 512 numbers, double across them: telemetry, not part of
    the mechanism).
    """
    library = _loaded(library)
    if len(outs) != len(starts):
        raise ValueError("add_normal_ needs one stream position per tensor")
    words = _checked(outs, key, "add_normal_")
    if any(start < 0 for start in starts):
        raise ValueError("a stream position is >= 0")
    pointers = np.array([t.data_ptr() for t in outs], np.uint64)
    positions, lengths = np.array(starts, np.int64), np.array([t.numel() for t in outs], np.int64)
    sums = np.zeros(2, np.float64)
    library.dpaudit_philox_add_ranges(
        len(outs),
        pointers.ctypes.data,
        positions.ctypes.data,
        lengths.ctypes.data,
        words.ctypes.data,
        float(std),
        sums.ctypes.data,
    )
    return float(sums[0]), float(sums[1])


def _checked(outs: Sequence[torch.Tensor], key: Sequence[int], name: str) -> np.ndarray:
    """The 4 key words, after checking that ``outs`` are tensors the sampler may write."""
    if any(t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous() for t in outs):
        raise ValueError(f"philox.{name} fills contiguous float32 CPU tensors")
    words = np.asarray(key, np.uint32)
    if words.shape != (4,):
        raise ValueError("a Philox noise key is 4 words of 32 bits")
    return words
