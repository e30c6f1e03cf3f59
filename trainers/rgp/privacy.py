"""rgp's ``privacy.json``: the core record filled in for reparametrized gradient perturbation.

The plan, the ledger and the record are the core's (:mod:`dpaudit.privacy_plan`,
:mod:`dpaudit.privacy_record`); this module only says, in the record's fields, what RGP's mechanism
is. Each step is ONE Poisson-subsampled Gaussian mechanism: the per-example vector (carrier
gradients of every reparametrized matrix and the non-matrix parameters' gradients) is clipped to C,
summed, and N(0, (sigma_e C)^2) is added to every coordinate (Yu et al. 2021, Algorithm 1, lines
10-13): sensitivity C, the accountant's noise multiplier sigma_e. The carriers are functions of the
already released noisy updates (or of the public seed) and the reconstruction of Eq. 3 is applied
to the noised sums: post-processing, which costs nothing. Yu et al. account with the moments
accountant (Proposition 3.1) for the same mechanism, so there is no separate paper claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit import accounting
from dpaudit.figures import format_up
from dpaudit.privacy_plan import PrivacyPlan
from dpaudit.privacy_record import PrivacyRecord, group_privacy_rows
from dpaudit.secret_rng import NoiseSource

__all__ = ["TRAINER", "build_record"]

TRAINER = "rgp"


def build_record(*, plan: PrivacyPlan, steps: int, ledger: Any, clipper: Any, noise_source: NoiseSource,
                 stopped_at_budget: bool, rank: int, random_carriers: bool, frequencies: Sequence[int],
                 details: Mapping[str, Any] | None = None) -> PrivacyRecord:
    """The :class:`PrivacyRecord` of a finished (or budget-stopped) RGP run of ``steps`` steps."""
    epsilon = float(ledger.epsilon()) if ledger.steps else 0.0
    delta = float(ledger.delta)
    q = plan.batch_at(0) / plan.dataset_size
    origin = ("random orthonormal carriers drawn from the public --seed (RGP-random)" if random_carriers else
              "carriers from the released historical update by the power method (Algorithm 2)")
    schedule = "constant" if len(set(plan.sigmas or ())) <= 1 else "decayed per epoch, fixed in advance"
    mechanism = (f"Poisson-subsampled Gaussian (q = {q:.4g}), per-example clipping to C = {clipper.clip_norm:g} of the "
                 f"joint vector of carrier gradients (rank <= {rank}, {origin}) and non-matrix parameter gradients, "
                 f"sensitivity C = {clipper.sensitivity:g}; Gaussian noise of std sigma_e x C on every summed "
                 f"coordinate (sigma_e {schedule}); the weight update (Eq. 3) is post-processing; add/remove one example")
    guarantee = (f"({format_up(epsilon, 4)}, {format_up(delta, 3)})-DP for one training example "
                 f"(add/remove): {mechanism}, composed over {steps} steps ({ledger.accountant.upper()} accountant), for "
                 f"the released model/. Condition: {noise_source.note}")
    notes = [("carriers: computed from already released weights (or the public seed), never from this step's batch: "
              "post-processing, no privacy cost.")]
    warning = accounting.delta_warning(delta, plan.dataset_size)
    if warning:
        notes.insert(0, "warning: " + warning)
    return PrivacyRecord(
        trainer=TRAINER, private=True, mechanism=mechanism, accountant=ledger.accountant,
        event=accounting.event_to_json(ledger.event()), epsilon=epsilon, delta=delta,
        target_epsilon=ledger.target_epsilon, clip_norm=float(clipper.clip_norm),
        sensitivity_factor=float(clipper.sensitivity_factor), noise_multipliers=[float(s) for s in plan.sigmas],
        noise_calibrated=plan.noise_calibrated, steps=steps, planned_steps=plan.total_steps,
        dataset_size=plan.dataset_size, stopped_at_budget=stopped_at_budget,
        segments=[s.to_json() for s in ledger.segments], randomness=noise_source.note,
        noise_seed_explicit=noise_source.explicit, group_privacy=group_privacy_rows(epsilon, delta, frequencies),
        guarantee=guarantee, notes=notes, details=dict(details or {}))
