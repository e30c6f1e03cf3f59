"""The trainer kit: what every trainer shares, framework-free (no jax or torch at import).

The run:

- :mod:`.skeleton`: :class:`RunSkeleton`, the one training run (run directory, plan, secret sampling,
  ledger, loop, checkpoints, metrics, outputs);
- :mod:`.plugin`: :class:`TrainerPlugin`, what a trainer writes (model init, a clipped-sum step that
  carries its sensitivity, on :class:`ClippedSumStep`, save/restore, export, its words for privacy.json);
- :mod:`.record`: the one ``privacy.json`` builder; :mod:`.sampling`: secret Poisson sampling.

What the run is made of:

- :mod:`.api`: the trainer protocol and the entry-point registry (``dpaudit.trainers``);
- :mod:`.privacy_plan` (what a run will spend, fixed before the first step) and
  :mod:`dpaudit.claim` (``privacy.json``, its one typed reader and writer, and the one Claim type);
- :mod:`.noise_source`: the secret randomness the guarantee rests on (the noise source: sampling and noise);
- :mod:`.train_dir`: the train run directory (finished-run return, resume identity, checkpoints, metrics);
- :mod:`.config_types`: the frozen Config dataclasses' types, option names, the one seed range;
- :mod:`.dp_options`: :class:`~dpaudit.training.dp_options.DpOptions`, the DP options every trainer's Config
  inherits (each declared once), with their one validator;
- :mod:`.presets`, :mod:`.tokenizer` (WordPiece trained on public.jsonl), :mod:`.host_allocator`.

Many runs are trained by :mod:`dpaudit.fleet` (its own package: Ray, a process pool, or in this process).

The names below are imported on first use (PEP 562), so that reading a ``privacy.json`` record does not
import the run loop and its dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ClippedStep": "plugin",
    "ClippedSumStep": "plugin",
    "RunData": "plugin",
    "RunSettings": "plugin",
    "TrainerPlugin": "plugin",
    "RecordParts": "record",
    "RunFacts": "record",
    "build_record": "record",
    "RunSkeleton": "skeleton",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
