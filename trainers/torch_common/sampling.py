"""Poisson sampling and the assignment of examples to micro-batches (numpy only, no torch).

Both follow rules the accountant can rely on (docs/privacy.md, "One example's contribution"):

- Poisson sampling: each example joins a step's batch independently with probability q. The
  generator of step t is keyed by (secret noise seed, stream, t) — :func:`step_rng`, the core's
  :class:`dpaudit.training.sampling.StepKeyedPoisson` — so it is secret, identical on every process
  of a distributed run, and needs no saved state to resume.
- Micro-batch assignment: example x goes to micro-batch ``slot(x) = H(salt, text, label) mod k``, a
  function of x alone. Adding or removing one example therefore changes exactly one micro-batch
  and never moves another example across micro-batch boundaries; slicing a shuffled batch into k
  pieces would (the bound then grows to 2kC). Because each slot is fixed for the run, a step's
  micro-batch j is a Poisson sample of shard j ("Poisson sampling per shard"). Identical rows
  (a repeated canary) share a slot; each is still one example for the accountant.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Streams of the secret seed (sampling and noise never share random numbers).
SAMPLING_STREAM, NOISE_STREAM = 1, 2


def step_rng(seed: int, stream: int, *key: int) -> np.random.Generator:
    """A numpy Generator keyed by (seed, stream, *key): independent streams, no state to save."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(stream), *map(int, key)]))


def derived_seed(seed: int, stream: int, *key: int) -> int:
    """A 63-bit integer derived from (seed, stream, *key) (to seed another framework's generator)."""
    state = np.random.SeedSequence([int(seed), int(stream), *map(int, key)]).generate_state(2, np.uint64)
    return int((int(state[0]) << 1 ^ int(state[1])) & ((1 << 63) - 1))


def example_slots(
    texts: Sequence[str], labels: Sequence[Any] | None, num_microbatches: int, *, salt: int
) -> np.ndarray:
    """Micro-batch index of every example: sha256(salt, text, label) mod k, independent of other rows."""
    out = np.empty(len(texts), dtype=np.int64)
    for i, text in enumerate(texts):  # once per run, at setup
        label = None if labels is None else labels[i]
        digest = hashlib.sha256(json.dumps([int(salt), text, label], ensure_ascii=False).encode("utf-8")).digest()
        out[i] = int.from_bytes(digest[:8], "little") % num_microbatches
    return out


def split_microbatches(indices: np.ndarray, slots: np.ndarray, num_microbatches: int) -> list[np.ndarray]:
    """The sampled ``indices`` grouped by their fixed slot: micro-batch j holds the sampled examples of shard j."""
    own = slots[indices]
    return [indices[own == j] for j in range(num_microbatches)]
