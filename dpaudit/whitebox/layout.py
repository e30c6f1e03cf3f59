"""Where the white-box audit's gradient canaries go, and what each role expects to observe.

Per-example clipping (DP-SGD; Nasr et al. 2023): canary j is one audit row whose gradient is a Dirac
vector of norm ``gain`` (above C) on block coordinate j. Clipped, it adds exactly C to coordinate j in
the steps that sample it, and nothing anywhere else: coordinate j then sees the claimed mechanism
itself, 0 or C plus Gaussian noise.

Micro-batch clipping (eDP-SGD, claimed sensitivity 2C): one example can FLIP its micro-batch's clipped
gradient, a move of 2C, but only if the micro-batch already points the other way. Each canary j
therefore has ``partners`` rows in its micro-batch (slot j mod k) whose gradients point along -e_j
with a small norm; the canary's own gain dwarfs their sum. A step that samples a partner and not the
canary sees -C; one that samples the canary sees +C: the canary moves its coordinate by 2C whenever a
partner is there. Canaries in the same slot share its clipping, so at most k canaries per run keep
their coordinates apart (the layout puts canary j in slot j mod k; more canaries than slots is allowed
and only costs power).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpaudit.training.gradient_canaries import UNIT_EXAMPLE, UNIT_MICROBATCH, GradientCanaries

__all__ = ["CANARY_GAIN", "PARTNER_GAIN", "CanaryLayout"]

#: A canary's gradient norm: far above any clip norm (clipping brings it to C), small enough for
#: float32 arithmetic in every engine (its square, 1e12, is far below float32's 3e38).
CANARY_GAIN = 1e6
#: A partner's gradient norm: above any clip norm, and 16 partners (the default) sum to 1.6% of a canary.
PARTNER_GAIN = 1e3


@dataclass(frozen=True)
class CanaryLayout:
    """One run's canaries: who is a member (the coins), the clipping unit, the partners.

    Attributes:
        member: bool ``(m,)``: the fair coins (True: canary j is an audit row of this run).
        unit: the trainer's clipping unit (:data:`UNIT_EXAMPLE` or :data:`UNIT_MICROBATCH`).
        slots: micro-batches per step (1 for per-example clipping).
        partners: partner rows per canary (micro-batch clipping only; 0 otherwise).
    """

    member: np.ndarray
    unit: str
    slots: int = 1
    partners: int = 0

    @classmethod
    def draw(cls, m: int, *, unit: str, slots: int, partners: int, rng: np.random.Generator) -> CanaryLayout:
        """m canaries, each a member by an independent fair coin from ``rng``."""
        if m < 2:
            raise ValueError(f"an audit needs at least 2 canaries, got {m}.")
        if unit not in (UNIT_EXAMPLE, UNIT_MICROBATCH):
            raise ValueError(f"unknown clipping unit {unit!r}.")
        member = rng.integers(0, 2, size=m).astype(bool)
        return cls(
            member=member, unit=unit, slots=max(1, int(slots)), partners=int(partners) if unit == UNIT_MICROBATCH else 0
        )

    @property
    def size(self) -> int:
        return int(self.member.size)

    def canaries(self, observe: Callable[[int, np.ndarray], None]) -> GradientCanaries:
        """The audit rows a trainer hosts: one row per canary (gain ``CANARY_GAIN`` for a member, 0 for a
        non-member), then ``partners`` rows per canary.

        A non-member's row has a zero gradient: sampled or not, it adds nothing, so the mechanism's
        output is exactly that of a dataset without it (add/remove adjacency). It is there so that the
        row count N, and with it q = B / N and everything ``privacy.json`` says, is the same whatever
        the coins: the claim then neither reveals the coins nor differs between runs, and R runs test
        one mechanism."""
        m = self.size
        coordinate = np.concatenate([np.arange(m), np.repeat(np.arange(m), self.partners)])
        gain = np.concatenate([np.where(self.member, CANARY_GAIN, 0.0), np.full(m * self.partners, -PARTNER_GAIN)])
        slot = coordinate % self.slots if self.unit == UNIT_MICROBATCH else None
        return GradientCanaries(size=m, coordinate=coordinate, gain=gain, slot=slot, observe=observe)

    def mixtures(self, q: np.ndarray, shift: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(shifts (K,), member weights (T, K), non-member weights (T, K)) of one coordinate's clipped
        sum per step, given the claimed q_t and the claimed shift of one clipped unit (C)."""
        q = np.asarray(q, dtype=np.float64)[:, None]
        if self.unit == UNIT_EXAMPLE:
            shifts = np.array([0.0, shift])
            return shifts, np.hstack([1 - q, q]), np.hstack([np.ones_like(q), np.zeros_like(q)])
        present = 1 - (1 - q) ** self.partners  # at least one partner sampled
        shifts = np.array([-shift, 0.0, shift])
        inside = np.hstack([(1 - q) * present, (1 - q) * (1 - present), q])
        outside = np.hstack([present, 1 - present, np.zeros_like(q)])
        return shifts, inside, outside
