"""Attacks on a trained model: one module per attack, a registry, one typed result.

Canary attacks (this package): exact exposure (:mod:`.exposure`, Carlini et al. 2019; its rank
mathematics in :mod:`.exposure_rank`) and
masked-secret reconstruction (:mod:`.reconstruction`, Anil et al. 2021). Statistics every attack
shares live in :mod:`.stats`; results in :mod:`.results`; the composition of a whole run (the
Python API behind ``dpaudit attack``) in :mod:`.run`. Importing this package imports neither torch
nor jax.
"""

from __future__ import annotations

from typing import Any

__all__ = ["attack"]


def attack(*args: Any, **kwargs: Any):  # noqa: ANN201
    """See :func:`dpaudit.attacks.run.attack`."""
    from dpaudit.attacks.run import attack as run_attack

    return run_attack(*args, **kwargs)
