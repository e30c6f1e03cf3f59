"""rgp's ``privacy.json``: the core record filled in for reparametrized gradient perturbation.

The plan, the ledger and the record are the core's (:mod:`dpaudit.training.privacy_plan`,
:mod:`dpaudit.claim.record`); this module only says, in the record's fields, what RGP's mechanism
is. Each step is ONE Poisson-subsampled Gaussian mechanism: the per-example vector (carrier
gradients of every reparametrized matrix and the non-matrix parameters' gradients) is clipped to C,
summed, and N(0, (sigma_e C)^2) is added to every coordinate (Yu et al. 2021, Algorithm 1, lines
10-13): sensitivity C, the accountant's noise multiplier sigma_e. The carriers are functions of the
already released noisy updates (or of the public seed) and the reconstruction of Eq. 3 is applied
to the noised sums: post-processing, which costs nothing. Yu et al. account with the moments
accountant (Proposition 3.1) for the same mechanism, so there is no separate paper claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dpaudit.trainers.torch_common.privacy import private_parts, sampling_rate, schedule_text
from dpaudit.training.privacy_plan import PrivacyPlan
from dpaudit.training.record import RecordParts

__all__ = ["TRAINER", "record_parts"]

TRAINER = "rgp"


def record_parts(
    *, plan: PrivacyPlan, clipper: Any, rank: int, random_carriers: bool, details: Mapping[str, Any] | None = None
) -> RecordParts:
    """What rgp says in ``privacy.json`` (the core builds the record)."""
    origin = (
        "random orthonormal carriers drawn from the public --seed (RGP-random)"
        if random_carriers
        else "carriers from the released historical update by the power method (Algorithm 2)"
    )
    mechanism = (
        f"Poisson-subsampled Gaussian (q = {sampling_rate(plan):.4g}), per-example clipping to C = "
        f"{clipper.clip_norm:g} of the joint vector of carrier gradients (rank <= {rank}, {origin}) and "
        f"non-matrix parameter gradients, sensitivity C = {clipper.sensitivity:g}; Gaussian noise of std "
        f"sigma_e x C on every summed coordinate (sigma_e {schedule_text(plan)}); the weight update (Eq. 3) "
        "is post-processing; add/remove one example"
    )
    notes = [
        (
            "carriers: computed from already released weights (or the public seed), never from this step's batch: "
            "post-processing, no privacy cost."
        )
    ]
    return private_parts(mechanism=mechanism, clipper=clipper, notes=notes, details=details)
