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

from dpaudit.claim import Claim, claim_of_record, read_privacy_record
from dpaudit.training.gradient_canaries import canary_host
from dpaudit.whitebox.layout import CanaryLayout

__all__ = [
    "PluginFactory",
    "RunEvidence",
    "evidence_path",
    "load_evidence",
    "run_job",
    "run_with_canaries",
    "save_evidence",
]

#: Builds the trainer's plug-in for one run writing ``out_dir`` (e.g. ``trainer.Plugin(data, out, config, seed=s)``).
PluginFactory = Callable[[Path], Any]


@dataclass(frozen=True)
class RunEvidence:
    """One audited training run: the layout (with its coins), the claim its ``privacy.json`` makes, the
    per-step noisy canary coordinates ``observations`` (T, m) and their final values ``final`` (m,)."""

    layout: CanaryLayout
    claim: Claim
    observations: np.ndarray
    final: np.ndarray


def _audited_claim(record: Any) -> Claim:
    """The claim a run's ``privacy.json`` makes, as the audit tests it (a proven claim that states its mechanism)."""
    claim = claim_of_record(record)
    if not claim.states_mechanism:
        raise ValueError("the run is not private: there is no claim to audit.")
    return claim


def run_with_canaries(
    factory: PluginFactory, out_dir: Path, *, canaries: int, partners: int, rng: np.random.Generator
) -> RunEvidence:
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
    claim = _audited_claim(read_privacy_record(Path(out_dir) / "privacy.json"))
    steps = claim.steps
    missing = [t for t in range(steps) if t not in seen or seen[t].shape != (canaries,)]
    if missing:
        raise RuntimeError(
            f"the trainer reported {len(seen)} canary observations for {steps} steps (first missing: "
            f"step {missing[0]}); its gradient-canary hook does not observe every step."
        )
    final = np.asarray(host.canary_parameters(), dtype=np.float64).reshape(-1)
    if final.shape != (canaries,):
        raise RuntimeError(f"canary_parameters() returned shape {final.shape}, not ({canaries},).")
    return RunEvidence(layout=layout, claim=claim, observations=np.stack([seen[t] for t in range(steps)]), final=final)


# -- one run as a fleet job (the R runs of a many-run audit, trained at once on the model fleet) ------------------

#: Where a fleet job leaves its evidence: beside its run directory (the run directory itself holds only what the
#: trainer wrote, so that it verifies as a finished run).
EVIDENCE_SUFFIX = ".evidence.npz"


def evidence_path(out_dir: Path) -> Path:
    """The evidence file of the run trained in ``out_dir``."""
    out_dir = Path(out_dir)
    return out_dir.parent / (out_dir.name + EVIDENCE_SUFFIX)


def run_job(job: Any) -> None:
    """Train one audit run described by a :class:`dpaudit.fleet.fleet.FleetJob` (in a fleet worker) and save its
    evidence (:func:`evidence_path`).

    ``job.runner_args``: ``canaries``, ``partners`` and ``coins`` (the entropy of this run's own coin generator,
    drawn by the auditor; independent of everything the trainer does). The plug-in is the trainer's own
    (``load_trainer(job.trainer).Plugin(data_dir, out_dir, Config(**job.config), seed=job.seed)``).
    """
    from dpaudit.training.api import load_trainer, plugin_class

    trainer = load_trainer(job.trainer)
    config = trainer.Config(**job.config)
    args = dict(job.runner_args or {})
    rng = np.random.default_rng(np.random.SeedSequence(args["coins"]))
    evidence = run_with_canaries(
        lambda out: plugin_class(trainer)(Path(job.data_dir), out, config, seed=job.seed),
        Path(job.out_dir),
        canaries=int(args["canaries"]),
        partners=int(args["partners"]),
        rng=rng,
    )
    save_evidence(Path(job.out_dir), evidence)


def save_evidence(out_dir: Path, evidence: RunEvidence) -> Path:
    """Write the evidence of the run trained in ``out_dir`` beside it (:func:`evidence_path`), atomically: the file
    exists only once the run finished and every observation is in it, so a kept run is resumed by this file alone."""
    layout = evidence.layout
    target = evidence_path(out_dir)
    staged = target.with_name(target.name + ".tmp.npz")
    np.savez(
        staged,
        member=layout.member,
        unit=np.array(layout.unit),
        slots=np.array(layout.slots),
        partners=np.array(layout.partners),
        observations=evidence.observations,
        final=evidence.final,
    )
    staged.replace(target)
    return target


def load_evidence(out_dir: Path) -> RunEvidence:
    """The evidence :func:`run_job` saved for the run in ``out_dir`` (the claim re-read from its ``privacy.json``)."""
    with np.load(evidence_path(out_dir)) as saved:
        layout = CanaryLayout(
            member=saved["member"].astype(bool),
            unit=str(saved["unit"]),
            slots=int(saved["slots"]),
            partners=int(saved["partners"]),
        )
        observations, final = saved["observations"], saved["final"]
    claim = _audited_claim(read_privacy_record(Path(out_dir) / "privacy.json"))
    return RunEvidence(layout=layout, claim=claim, observations=observations, final=final)
