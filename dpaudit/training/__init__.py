"""The training run every trainer shares: one framework-free skeleton, plug-ins supply only the step.

- :mod:`.skeleton`: :class:`RunSkeleton`, the run (run directory, plan, secret sampling, ledger,
  loop, checkpoints, metrics, outputs);
- :mod:`.plugin`: :class:`TrainerPlugin`, what a trainer writes (model init, a clipped-sum step that
  carries its sensitivity, save/restore, export, its words for privacy.json);
- :mod:`.record`: the one ``privacy.json`` builder;
- :mod:`.sampling`: secret Poisson sampling.

Importing this package imports no framework (jax, torch).
"""

from dpaudit.training.plugin import ClippedStep, RunData, RunSettings, TrainerPlugin
from dpaudit.training.record import RecordParts, RunFacts, build_record
from dpaudit.training.skeleton import RunSkeleton

__all__ = ["ClippedStep", "RecordParts", "RunData", "RunFacts", "RunSettings", "RunSkeleton", "TrainerPlugin",
           "build_record"]
