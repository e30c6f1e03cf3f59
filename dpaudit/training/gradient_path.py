"""Canaries through the real gradient path: the plug-in capability of a trainer whose DP library owns the step.

The cooperative audit block (:mod:`dpaudit.training.gradient_canaries`) needs a trainer that runs on dpaudit's run
skeleton and writes each canary's gradient onto reserved coordinates itself. A trainer that hands sampling, clipping,
noise and accounting to a DP library (Opacus's ``PrivacyEngine``) cannot: the audit must go through the library's
own per-example gradient machinery. Such a trainer implements :class:`GradientPathHost`: it trains once with ``m``
canary inputs added to the training rows (a canary layer only they reach, its loss linear in the canary's row: the
library's own clipping turns canary j's gradient into C along its direction, see ``docs/auditing.md``), and returns
what the release shows on those canary coordinates: every update's noisy clipped sum (the update times the public
normalizer) and the final values. The run directory it writes is a normal one, with a ``privacy.json`` that states
dpaudit's accounting of what ran and the library's own claim in ``details.library``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["PATH_BLOCK", "PATH_GRADIENT", "GradientPathHost", "gradient_path_host"]

#: The cooperative audit block: the trainer writes the canary's gradient onto reserved coordinates.
PATH_BLOCK = "audit-block"
#: The real gradient path: a canary input whose per-example gradient the library itself computes and clips.
PATH_GRADIENT = "gradient-path"


@runtime_checkable
class GradientPathHost(Protocol):
    """What a trainer implements to be audited through its library's real gradient path."""

    #: The DP library that runs the mechanism (e.g. ``"opacus"``).
    library: str

    def train_with_gradient_canaries(
        self, data_dir: Path | None, out_dir: Path, config: Any, *, gains: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Train once in ``out_dir`` (a fresh run directory) with canary j of gradient norm ``gains[j]`` (0: a
        non-member, present in the rows so that N and q do not depend on the coins); return (observations (T, m):
        each of the T updates' noisy clipped sum on the canary coordinates, final (m,): their last values)."""
        ...


def gradient_path_host(trainer: object) -> GradientPathHost | None:
    """``trainer`` as a :class:`GradientPathHost`, or None when it hosts no canaries through its gradient path."""
    return trainer if isinstance(trainer, GradientPathHost) else None
