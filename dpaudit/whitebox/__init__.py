"""White-box audit of a DP trainer implementation with gradient canaries (``dpaudit audit-trainer``).

After Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis (2023, "Tight auditing of
differentially private machine learning"): the auditor owns the trainer, so it inserts canaries whose
gradients it chooses (Dirac vectors on coordinates reserved for them), each included by a fair coin
and sampled like any other example, and observes the noisy updates in those coordinates (all
iterates) or only the final values (last iterate). The modules, one job each:

- :mod:`.layout`: where the canaries go (per-example: one Dirac row each; micro-batch: with partners
  so that one example's move reaches 2C) and what each role expects to observe;
- :mod:`.harness`: one training run through the trainer's own plug-in hosting the canaries;
- :class:`dpaudit.claim.Claim` and :mod:`dpaudit.audit.claim_curves`: the claim read from ``privacy.json`` and its family (every sigma
  scaled), shared with the black-box headline;
- :mod:`.scores`: likelihood-ratio scores (all iterates) and final values (last iterate);
- :mod:`.plan`: the one-run proof's guess counts, planned from the claim before any score is seen;
- :mod:`.bounds`: one-run and pooled bounds (Steinke; Gaussian f-DP; Clopper-Pearson; the claimed
  curve itself, :mod:`dpaudit.audit.tradeoff`);
- :mod:`.analysis`: scores and bounds of all runs, the primary bound and the verdict;
- :mod:`.audit`: the whole audit (R runs, analysis) and its output directory.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "audit_trainer": "audit",
    "write_audit": "audit",
    "analyse": "analysis",
    "Analysis": "analysis",
    "run_with_canaries": "harness",
    "RunEvidence": "harness",
    "CanaryLayout": "layout",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
