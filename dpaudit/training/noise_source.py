"""The secret randomness a DP guarantee rests on: Poisson sampling and the Gaussian noise.

A DP guarantee holds against an adversary who knows every training row but one, and everything the
tool releases (the manifest with its ``--seed``, the config, the model). If the sampling or the noise
were a function of the public ``--seed``, that adversary could regenerate them, subtract the noise and
read the target's gradient: epsilon would be infinite. So the generators of the mechanism are seeded
from OS entropy (:func:`secrets.randbits`), kept only in checkpoints (which are private to the data
owner, like the training data), and never in a released file. ``--noise-seed N`` makes a run
reproducible for tests and research; the guarantee then holds only while ``N`` stays secret, and
``privacy.json`` and the command line say so.

Everything else (initialization, masking, the order of public data, the tokenizer) may follow the
public ``--seed``: it is not part of the mechanism the accountant analyses.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import numpy as np

from dpaudit.files.run_dirs import REDACTED  # what a released manifest records instead of a --noise-seed

#: Bits of OS entropy in a drawn noise seed.
SEED_BITS = 128

NOISE_SEED_CONDITION = (
    "the sampling and noise were seeded with an explicit --noise-seed: the guarantee holds only while "
    "that seed is secret (anyone who knows it can regenerate the noise)."
)
OS_ENTROPY_NOTE = (
    "the sampling and noise were drawn from OS entropy (never from --seed); their state lives only in "
    "checkpoints/, which is private to the data owner."
)


@dataclass(frozen=True)
class NoiseSource:
    """Where a run's mechanism randomness comes from.

    Attributes:
        seed: the integer that seeds the sampling and noise generators. Secret: written only to
            checkpoints, never to a released file.
        explicit: True when the user passed ``--noise-seed`` (reproducible; the guarantee is then
            conditional on that seed staying secret).
    """

    seed: int
    explicit: bool

    @classmethod
    def resolve(cls, noise_seed: int | None) -> NoiseSource:
        """The user's ``--noise-seed`` if given, else a fresh :data:`SEED_BITS`-bit seed from OS entropy."""
        if noise_seed is not None:
            if isinstance(noise_seed, bool) or not isinstance(noise_seed, int) or noise_seed < 0:
                raise ValueError(f"--noise-seed must be an integer >= 0, got {noise_seed!r}.")
            return cls(seed=noise_seed, explicit=True)
        return cls(seed=secrets.randbits(SEED_BITS), explicit=False)

    @property
    def note(self) -> str:
        """The sentence ``privacy.json`` and the command line state about this randomness."""
        return NOISE_SEED_CONDITION if self.explicit else OS_ENTROPY_NOTE

    @staticmethod
    def redact(noise_seed: int | None) -> str | None:
        """What a released file (the manifest's config) may say about ``--noise-seed``: never the number."""
        return None if noise_seed is None else REDACTED

    def to_state(self) -> dict[str, object]:
        """JSON for a checkpoint (private to the data owner): the seed as a hex string (it exceeds 2**53)."""
        return {"seed_hex": format(self.seed, "x"), "explicit": self.explicit}

    @classmethod
    def from_state(cls, state: object) -> NoiseSource:
        """Inverse of :meth:`to_state` (a resumed run keeps the secret randomness of its checkpoint).

        Raises:
            ValueError: ``state`` is not what :meth:`to_state` wrote.
        """
        try:
            assert isinstance(state, dict) and isinstance(state["explicit"], bool)
            return cls(seed=int(state["seed_hex"], 16), explicit=state["explicit"])
        except (AssertionError, KeyError, TypeError, ValueError):
            raise ValueError(f"not a NoiseSource state: {state!r}") from None

    def numpy_generator(self, *stream: int) -> np.random.Generator:
        """A numpy Generator for the mechanism's sampling: ``default_rng([seed, *stream])`` (all 128 bits used)."""
        return np.random.default_rng([self.seed, *stream])

    def hashed_words(self, n: int, purpose: str) -> list[int]:
        """``n`` 32-bit words (little-endian) of a BLAKE2b hash of the WHOLE seed, personalized by ``purpose``.

        For a framework whose key is smaller than the seed (JAX's threefry key is 64 bits): every bit
        of the seed changes every word, so the key is a uniform function of all 128 bits, not of a
        fold of them (the former XOR fold of the seed into two words kept 64 bits: seeds ``s`` and
        ``s ^ x ^ (x << 64)`` collided). ``n <= 16``; ``purpose`` (<= 16 bytes) separates the keys of
        different uses of one seed.
        """
        if not 1 <= n <= 16:
            raise ValueError(f"n must be in [1, 16] (a 64-byte BLAKE2b digest), got {n}.")
        size = max(SEED_BITS // 8, (self.seed.bit_length() + 7) // 8)
        digest = hashlib.blake2b(
            self.seed.to_bytes(size, "little"), digest_size=4 * n, person=purpose.encode("utf-8")
        ).digest()
        return [int.from_bytes(digest[4 * i : 4 * i + 4], "little") for i in range(n)]
