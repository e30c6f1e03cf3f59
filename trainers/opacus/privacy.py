"""``privacy.json`` of an Opacus run: the library's own claim beside dpaudit's recomputation of what ran.

Opacus's accountant (PRV by default, RDP or GDP as configured) keeps a history of (noise multiplier, sample rate,
steps) that its optimizer hook appends to; its epsilon is what an Opacus user is told. dpaudit does not copy it: the
record's event and epsilon are accounted here (PLD, :mod:`dpaudit.accounting`) from the mechanism that ran, read off
the objects that ran (the data loader's sampler and its rate, the optimizer updates counted by a hook on the
wrapped optimizer's own step, the noise multiplier the optimizer used). The library's claim (its history, epsilon
and accountant) is stored beside it in ``details.library``; when the two mechanisms differ (another sampler, another
rate, steps counted per micro-step, another sigma) the record says so in ``details.library.agrees`` and a note, and
the trainer prints it. See ``docs/trainers.md`` ("opacus").
"""

from __future__ import annotations

import math
from typing import Any

from dpaudit.accounting.segment import Segment
from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.figures import format_up
from dpaudit.trainers.opacus.loop import OpacusRun

__all__ = ["build_record", "mismatches"]

_RTOL = 1e-9


def _merged(rows: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    out: list[tuple[float, float, int]] = []
    for sigma, q, steps in rows:
        if out and abs(out[-1][0] - sigma) <= _RTOL * sigma and abs(out[-1][1] - q) <= _RTOL * q:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + steps)
        else:
            out.append((sigma, q, steps))
    return out


def mismatches(run: OpacusRun) -> list[str]:
    """How the library's accounted mechanism differs from the one that ran (empty: they agree)."""
    found: list[str] = []
    if not math.isfinite(run.library_epsilon):
        found.append("the library's accountant states no finite epsilon for this run")
    if not run.poisson:
        found.append("the batches were not Poisson-sampled, which every Opacus accountant assumes")
    ran = _merged([(run.noise_multiplier, run.sample_rate, run.updates)])
    said = _merged(run.history)
    said_steps = sum(s for _, _, s in said)
    if said_steps != run.updates:
        found.append(f"the accountant counted {said_steps} steps, the optimizer took {run.updates} updates")
    if len(said) != len(ran) or any(
        abs(a[0] - b[0]) > _RTOL * b[0] or abs(a[1] - b[1]) > _RTOL * b[1] for a, b in zip(said, ran)
    ):
        found.append(
            "the accountant's (sigma, q) "
            + ", ".join(f"({s:g}, {q:g}) x {t}" for s, q, t in said)
            + f" differ from what ran: sigma {run.noise_multiplier:g}, q {run.sample_rate:g}"
        )
    return found


def build_record(
    run: OpacusRun,
    *,
    delta: float,
    accountant: str,
    grad_sample_mode: str,
    clipping: str,
    target_epsilon: float | None,
    noise_seed_explicit: bool,
    extra: dict[str, Any] | None = None,
) -> PrivacyRecord:
    """The record of a finished Opacus run (dpaudit's accounting of what ran, the library's claim beside it)."""
    from dpaudit import accounting

    segment = Segment(steps=run.updates, sampling_probability=run.sample_rate, noise_multiplier=run.noise_multiplier)
    event = accounting.schedule_event([segment])
    epsilon = float(accounting.epsilon(event, delta))
    found = mismatches(run)
    library = {
        "name": "opacus",
        "version": run.library_version,
        "accountant": accountant,
        "epsilon": run.library_epsilon if math.isfinite(run.library_epsilon) else None,
        "history": [list(row) for row in run.history],
        "grad_sample_mode": grad_sample_mode,
        "clipping": clipping,
        "agrees": not found,
        "mismatches": found,
    }
    notes = [f"mismatch: Opacus's accountant does not account what ran: {'; '.join(found)}."] if found else []
    return PrivacyRecord(
        trainer="opacus",
        private=True,
        mechanism=(
            f"Opacus {run.library_version} DP-SGD (PrivacyEngine.make_private, grad_sample_mode {grad_sample_mode}, "
            f"{clipping} clipping to C = {run.clip_norm:g}): "
            + ("Poisson" if run.poisson else "non-Poisson")
            + f" sampling at q = {run.sample_rate:g}, Gaussian noise of std sigma C on the clipped sum, divided by "
            f"the expected batch size {run.normalizer:g}."
        ),
        accountant="pld",
        event=accounting.event_to_json(event),
        epsilon=epsilon,
        delta=delta,
        target_epsilon=target_epsilon,
        clip_norm=run.clip_norm,
        sensitivity_factor=1.0,
        noise_multipliers=[run.noise_multiplier],
        noise_calibrated=target_epsilon is not None,
        steps=run.updates,
        planned_steps=run.updates,
        dataset_size=run.dataset_size,
        public_parameters=f"q = {run.sample_rate:g} from Opacus's DPDataLoader (1 / batches per epoch) over N = "
        f"{run.dataset_size}; N is treated as public.",
        segments=[dict(segment.to_json(), expected_batch_size=run.sample_rate * run.dataset_size)],
        randomness=(
            "sampling and noise from torch generators seeded by --noise-seed (explicit: reproducible, secret only as "
            "long as the seed is)"
            if noise_seed_explicit
            else "sampling and noise from torch generators seeded from OS entropy (secret, never written)"
        ),
        noise_seed_explicit=noise_seed_explicit,
        guarantee=(
            f"({format_up(epsilon)}, {format_up(delta, 2)})-DP for one example (add/remove), accounted by dpaudit (PLD) from "
            f"what ran: {run.updates} updates, Poisson q = {run.sample_rate:g}, sigma = {run.noise_multiplier:g}. "
            f"Opacus's own {accountant.upper()} accountant says epsilon {format_up(run.library_epsilon)}"
            + ("." if not found else " for a mechanism that did not run (see notes).")
        ),
        notes=notes
        + ["caveat: the noise is torch.normal's float sampler, not characterised: its tail is not counted in delta."],
        details={"library": library, **(extra or {})},
    )
