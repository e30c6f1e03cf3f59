"""Run a trainer with gradient canaries and collect what the audit observes.

The trainer runs unchanged through its own plug-in and the one run skeleton (its own sampling,
clipping, noise, accounting and ``privacy.json``); the harness only asks it to host the canaries
(:mod:`dpaudit.training.gradient_canaries`) and records each step's noisy canary coordinates and the
block's final values. The coins that decide membership are the auditor's, drawn here from their own
generator: independent of everything the trainer does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.training.gradient_canaries import canary_host
from dpaudit.training.privacy_record import read_privacy_record
from dpaudit.whitebox.layout import CanaryLayout
from dpaudit.whitebox.mechanism import ClaimedMechanism

__all__ = ["PluginFactory", "RunEvidence", "run_with_canaries"]

#: Builds the trainer's plug-in for one run writing ``out_dir`` (e.g. ``trainer.Plugin(data, out, config, seed=s)``).
PluginFactory = Callable[[Path], Any]


@dataclass(frozen=True)
class RunEvidence:
    """One audited training run: the layout (with its coins), the claim its ``privacy.json`` makes, the
    per-step noisy canary coordinates ``observations`` (T, m) and their final values ``final`` (m,)."""

    layout: CanaryLayout
    claim: ClaimedMechanism
    observations: np.ndarray
    final: np.ndarray


def run_with_canaries(factory: PluginFactory, out_dir: Path, *, canaries: int, partners: int,
                      rng: np.random.Generator) -> RunEvidence:
    """Train once in ``out_dir`` (fresh) hosting ``canaries`` gradient canaries; return the evidence."""
    from dpaudit.training.skeleton import RunSkeleton

    plugin = factory(Path(out_dir))
    host = canary_host(plugin)
    unit, slots = host.gradient_canary_unit()
    layout = CanaryLayout.draw(canaries, unit=unit, slots=slots, partners=partners, rng=rng)
    seen: dict[int, np.ndarray] = {}

    def observe(step: int, values: np.ndarray) -> None:
        seen[int(step)] = np.array(values, dtype=np.float64, copy=True).reshape(-1)

    host.host_gradient_canaries(layout.canaries(observe))
    skeleton = getattr(plugin, "skeleton", None)
    (skeleton if isinstance(skeleton, RunSkeleton) else RunSkeleton(plugin, Path(out_dir))).execute()
    claim = ClaimedMechanism.from_record(read_privacy_record(Path(out_dir) / "privacy.json"))
    steps = claim.steps
    missing = [t for t in range(steps) if t not in seen or seen[t].shape != (canaries,)]
    if missing:
        raise RuntimeError(f"the trainer reported {len(seen)} canary observations for {steps} steps (first missing: "
                           f"step {missing[0]}); its gradient-canary hook does not observe every step.")
    final = np.asarray(host.canary_parameters(), dtype=np.float64).reshape(-1)
    if final.shape != (canaries,):
        raise RuntimeError(f"canary_parameters() returned shape {final.shape}, not ({canaries},).")
    return RunEvidence(layout=layout, claim=claim, observations=np.stack([seen[t] for t in range(steps)]), final=final)
