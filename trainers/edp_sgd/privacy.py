"""The privacy plan of a run: per-epoch sigma schedule x sensitivity factor -> segments, ledger, record.

Framework-free (no torch), written so that it can be lifted into the core unchanged: it knows a run
only as (N, expected batch, epochs, sensitivity factor, a per-epoch sigma schedule).

Conventions (DESIGN section 5, "Honest accounting rules"; jax_privacy's ``clipped_grad(...)
.sensitivity``):

- ``sigma_e`` is the noise multiplier *of the step's sensitivity*: the noise on the aggregated
  gradient has std ``sigma_e * sensitivity`` where ``sensitivity = sensitivity_factor * C``
  (factor 1 for per-example clipping, 2 for micro-batch clipping: adding or removing one example
  moves one clipped micro-batch gradient by up to 2C). The clipping function reports its
  sensitivity and the step multiplies; nobody else recomputes it.
- Each step is a Poisson-subsampled Gaussian, add/remove-one adjacency. A ledger
  :class:`~dpaudit.accounting.Segment` stores ``noise_multiplier = noise std / C = sigma_e * factor``
  with ``sensitivity_factor = factor``, so the accountant sees ``sigma_e`` (every factor multiplies on
  every path).
- Noise decay is fixed in advance and composed segment by segment (one ``SelfComposedDpEvent`` per
  epoch inside a ``ComposedDpEvent``): decay triggered by private metrics would not be accountable.
- The paper's own accounting (Dupuy et al. 2021, section 3) treats the noise std divided by C as the
  noise multiplier, i.e. sensitivity C. :func:`paper_claim` computes what that would have claimed for
  the noise that actually ran, so the user sees the difference.

References:
  Dupuy et al. 2021, "An Efficient DP-Federated Learning Mechanism" (eDP-SGD), Algorithm 1.
  McMahan et al. 2018 / TF Privacy ``used_microbatching``: micro-batch sensitivity 2C.
  Yu et al. 2019: per-epoch noise decay, composed per segment.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dpaudit import accounting
from dpaudit.errors import UserInputError
from dpaudit.privacy_ledger import PrivacyLedger

#: A per-epoch sigma schedule as a function of sigma_0 (monotone: more sigma_0, more noise every epoch).
SigmaSchedule = Callable[[float], Sequence[float]]


def decay_schedule(decay: str, *, epochs: int, rate: float = 0.0, sigma_min: float | None = None) -> SigmaSchedule:
    """sigma_0 -> [sigma_0, ..., sigma_{E-1}] for ``none``, ``linear`` (floored) or ``exp`` decay.

    Linear decay is floored at ``sigma_min`` (default sigma_0 / 10): zero noise is not DP.
    """
    if decay == "none":
        return lambda sigma0: [float(sigma0)] * epochs
    if decay == "linear":
        return lambda sigma0: accounting.linear_decay_sigmas(sigma0, rate, epochs,
                                                             sigma_min if sigma_min is not None else sigma0 / 10.0)
    if decay == "exp":
        return lambda sigma0: accounting.exponential_decay_sigmas(sigma0, rate, epochs)
    raise ValueError(f"noise decay must be none, linear or exp, got {decay!r}.")


@dataclass(frozen=True, kw_only=True)
class PrivacyPlan:
    """What the run will spend, fixed before the first step (and re-derived identically on resume).

    Attributes:
        dataset_size: N, rows of train.jsonl.
        batch_size: expected logical batch; q = batch_size / N.
        steps_per_epoch: ceil(N / batch_size).
        epochs: planned epochs.
        sensitivity_factor: how many C one example moves the aggregate (1 per-example, 2 micro-batch).
        sigmas: per-epoch sigma_e (multiplier of the sensitivity), or None when non-private.
        delta, target_epsilon: the guarantee's delta and the budget (None: no cap).
        affordable_steps: steps certified within the budget (== total unless the budget caps the run).
        planned_epsilon: epsilon of the affordable steps (None when non-private).
        noise_calibrated: sigma_0 was calibrated to --target-epsilon (not given).
    """

    dataset_size: int
    batch_size: int
    steps_per_epoch: int
    epochs: int
    sensitivity_factor: float
    sigmas: tuple[float, ...] | None
    delta: float | None
    target_epsilon: float | None
    affordable_steps: int
    planned_epsilon: float | None = None
    noise_calibrated: bool = False

    @property
    def private(self) -> bool:
        return self.sigmas is not None

    @property
    def sampling_probability(self) -> float:
        return self.batch_size / self.dataset_size

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    def epoch_of(self, step: int) -> int:
        """0-based epoch of 0-based step ``step``."""
        return step // self.steps_per_epoch

    def sigma_at(self, step: int) -> float:
        """sigma_e of step ``step``: noise std on the aggregate = sigma_e * sensitivity."""
        assert self.sigmas is not None
        return self.sigmas[self.epoch_of(step)]

    def segments(self, steps: int | None = None, *, sensitivity_factor: float | None = None) -> list[accounting.Segment]:
        """Accounting segments of the first ``steps`` steps, one per (partial) epoch."""
        assert self.sigmas is not None
        return _segments(self.sigmas, self.steps_per_epoch, self.sampling_probability,
                         self.total_steps if steps is None else steps,
                         self.sensitivity_factor if sensitivity_factor is None else sensitivity_factor,
                         noise_factor=self.sensitivity_factor)


def _segments(sigmas: Sequence[float], steps_per_epoch: int, q: float, steps: int, accounted_factor: float, *,
              noise_factor: float) -> list[accounting.Segment]:
    """Segments whose noise std / C is sigma_e * noise_factor, accounted with ``accounted_factor``."""
    out, left = [], steps
    for sigma in sigmas:
        if left <= 0:
            break
        n = min(steps_per_epoch, left)
        out.append(accounting.Segment(steps=n, sampling_probability=q, noise_multiplier=sigma * noise_factor,
                                      sensitivity_factor=accounted_factor))
        left -= n
    return out


def plan_privacy(*, dataset_size: int, batch_size: int, epochs: int, sensitivity_factor: float,
                 schedule: SigmaSchedule | None, noise_multiplier: float | None, target_epsilon: float | None,
                 delta: float | None) -> PrivacyPlan:
    """Fix sigma_0 (given or calibrated), delta and the affordable steps of the whole run up front.

    ``schedule`` None is a non-private run. ``target_epsilon`` alone: sigma_0 is calibrated so the
    whole decayed schedule spends exactly the target. ``noise_multiplier`` alone: no cap. Both: the
    target is a cap, and the run stops after the last step that fits (refused if not even one fits).

    Raises:
        UserInputError: a batch larger than the data, or a budget too small for one step.
    """
    if batch_size > dataset_size:
        raise UserInputError(f"--batch-size {batch_size} exceeds the {dataset_size} training examples; "
                             f"use a batch <= {dataset_size}.")
    steps_per_epoch = math.ceil(dataset_size / batch_size)
    total = steps_per_epoch * epochs
    base = dict(dataset_size=dataset_size, batch_size=batch_size, steps_per_epoch=steps_per_epoch, epochs=epochs,
                sensitivity_factor=float(sensitivity_factor))
    if schedule is None:
        return PrivacyPlan(**base, sigmas=None, delta=None, target_epsilon=None, affordable_steps=total)
    delta = float(delta) if delta is not None else 1.0 / dataset_size
    q = batch_size / dataset_size

    def event_for(sigma0: float, steps: int = total) -> Any:
        return accounting.schedule_event(_segments(schedule(sigma0), steps_per_epoch, q, steps, sensitivity_factor,
                                                   noise_factor=sensitivity_factor))

    calibrated = noise_multiplier is None
    sigma0 = float(accounting.calibrate_noise(event_for, target_epsilon, delta)) if calibrated else float(noise_multiplier)
    affordable = total
    if target_epsilon is not None and accounting.epsilon(event_for(sigma0), delta) > target_epsilon:
        lo, hi = 0, total  # epsilon(lo steps) <= target < epsilon(hi steps)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if accounting.epsilon(event_for(sigma0, mid), delta) <= target_epsilon:
                lo = mid
            else:
                hi = mid
        affordable = lo
        if affordable == 0:
            raise UserInputError(
                f"--noise-multiplier {sigma0:g} spends more than --target-epsilon {target_epsilon:g} on the first "
                f"step (delta {delta:.3g}); raise the noise, lower the batch size or raise the target.")
    plan = PrivacyPlan(**base, sigmas=tuple(float(s) for s in schedule(sigma0)), delta=delta,
                       target_epsilon=target_epsilon, affordable_steps=affordable, noise_calibrated=calibrated)
    planned = accounting.epsilon(accounting.schedule_event(plan.segments(affordable)), delta)
    return dataclasses.replace(plan, planned_epsilon=float(planned))


def new_ledger(plan: PrivacyPlan) -> PrivacyLedger:
    """A ledger that certifies the affordable part of the plan (recording it costs no accountant call)."""
    ledger = PrivacyLedger(delta=plan.delta, target_epsilon=plan.target_epsilon, privacy_unit="example",
                           sampling="poisson")
    ledger.plan(plan.segments(plan.affordable_steps))
    return ledger


def record_step(ledger: PrivacyLedger, plan: PrivacyPlan, step: int) -> None:
    """Record step ``step`` BEFORE it runs (raises BudgetExceededError and records nothing past the cap)."""
    ledger.record(sampling_probability=plan.sampling_probability,
                  noise_multiplier=plan.sigma_at(step) * plan.sensitivity_factor,
                  sensitivity_factor=plan.sensitivity_factor)


def paper_claim(plan: PrivacyPlan, steps: int) -> dict[str, Any]:
    """What Dupuy et al.'s accounting (sensitivity C, noise multiplier = std / C) claims for this run's noise."""
    segments = plan.segments(steps, sensitivity_factor=1.0)
    event = accounting.schedule_event(segments)
    eps = accounting.epsilon(event, plan.delta) if steps else 0.0
    return {
        "epsilon": eps,
        "delta": plan.delta,
        "event": accounting.event_to_json(event),
        "assumed_sensitivity_factor": 1.0,
        "note": ("what the paper's accounting would claim for the noise that ran: it takes noise std / C as the "
                 "noise multiplier (sensitivity C), which is NOT proven for micro-batch clipping, where one example "
                 "moves a clipped micro-batch gradient by up to 2C." if plan.sensitivity_factor > 1 else
                 "equal to the proven guarantee: each clipped unit holds one example (sensitivity C)."),
    }
