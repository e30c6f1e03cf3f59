"""edp-sgd's ``privacy.json``: the core record filled in for sgd / dp-sgd / eDP-SGD, and the paper's claim.

The plan, the ledger and the record are the core's (:mod:`dpaudit.training.privacy_plan`,
:mod:`dpaudit.claim.record`); this module only says, in the record's fields, what this trainer's
mechanism is, and adds what is specific to eDP-SGD:

- :func:`paper_claim`: Dupuy et al. 2021 (section 3) account the noise std divided by C (what dpaudit
  calls ``noise_std_over_clip``, sigma x 2 here) as the noise multiplier, i.e. sensitivity C. With
  micro-batch clipping one example moves a clipped micro-batch gradient by up to 2C (McMahan et al.
  2018; TF Privacy ``used_microbatching``), so that figure is NOT proven; it is stated next to the
  proven one so the user sees the difference.
- group privacy (:func:`dpaudit.claim.record.group_privacy_rows`): a canary inserted f times is f rows; the per-row guarantee covers it only
  through the group bound (Dwork & Roth 2014, Thm 2.2), stated for each frequency of the inject
  manifest.

References:
  Dupuy et al. 2021, "An Efficient DP-Federated Learning Mechanism" (eDP-SGD), Algorithm 1.
  McMahan et al. 2018, "A General Approach to Adding Differential Privacy to Iterative Training Procedures".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dpaudit import accounting
from dpaudit.trainers.torch_common.privacy import private_parts, sampling_rate, schedule_text
from dpaudit.training.privacy_plan import PrivacyPlan
from dpaudit.training.record import RecordParts

__all__ = ["paper_claim", "record_parts"]

TRAINER = "edp-sgd"
PAPER_ASSUMPTION = (
    "what the paper's accounting would claim for the noise that ran: it takes noise std / C (sigma x 2) as the noise "
    "multiplier (sensitivity C), which is NOT proven for micro-batch clipping, where one example moves a "
    "clipped micro-batch gradient by up to 2C."
)
PAPER_EQUAL = "equal to the proven guarantee: each clipped unit holds one example (sensitivity C)."


def paper_claim(plan: PrivacyPlan, steps: int) -> dict[str, Any]:
    """What Dupuy et al.'s accounting (sensitivity C, noise multiplier = std / C, not sigma) claims for this run's noise."""
    event = plan.event(steps, accounted_factor=1.0)
    return {
        "epsilon": float(accounting.epsilon(event, plan.delta)) if steps else 0.0,
        "delta": plan.delta,
        "assumed_sensitivity_factor": 1.0,
        "assumption": PAPER_ASSUMPTION if plan.sensitivity_factor > 1 else PAPER_EQUAL,
        "event": accounting.event_to_json(event),
    }


def record_parts(
    *,
    plan: PrivacyPlan,
    steps: int,
    mode: str,
    clipper: Any,
    micro_batches: int,
    unaccounted_releases: Sequence[str] = (),
    details: Mapping[str, Any] | None = None,
) -> RecordParts:
    """What edp-sgd says in ``privacy.json`` for a run of ``steps`` steps (the core builds the record)."""
    details = dict(details or {})
    if not plan.private:
        return RecordParts(
            mechanism="",
            nonprivate_mechanism="non-private training (--mode sgd): no clipping, no noise.",
            details=details,
            steps_from_n=True,
        )
    q = sampling_rate(plan)
    if mode == "dp-sgd":
        clipping = (
            f"per-example clipping to C = {clipper.clip_norm:g} (torch.func per-example gradients), "
            f"sensitivity C = {clipper.sensitivity:g}"
        )
    else:
        clipping = (
            f"micro-batch clipping (k = {micro_batches} micro-batches per step, each example in micro-batch "
            f"sha256(--seed, text, label) mod k, independent of the other examples) with per-layer clip norms "
            f"C_l, C = sqrt(sum C_l^2) = {clipper.clip_norm:.6g}; sensitivity {clipper.sensitivity_factor:g}C = "
            f"{clipper.sensitivity:.6g}"
        )
    mechanism = (
        f"Poisson-subsampled Gaussian (q = {q:.4g}), {clipping}; Gaussian noise of std sigma_e x sensitivity "
        f"on the summed gradient (sigma_e {schedule_text(plan)}), add/remove one example"
    )
    return private_parts(
        mechanism=mechanism,
        clipper=clipper,
        details=details,
        paper_claim=paper_claim(plan, steps),
        unaccounted_releases=list(unaccounted_releases),
    )
