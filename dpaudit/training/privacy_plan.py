"""The privacy plan of a training run: what it will spend, fixed before the first step.

Every trainer calls :func:`plan_privacy` before it writes anything, with what its mechanism is —
the stages of the run (steps, expected batch), how the noise multiplier of each stage follows from
one base sigma (constant, or eDP-SGD's per-epoch decay), and the mechanism's *sensitivity factor*
(how many clip norms one example can move the noised sum: 1 for per-example clipping, 2 for
micro-batch clipping, see :func:`dpaudit.accounting.microbatch_sensitivity_factor`). The plan then

- calibrates the base sigma for ``--target-epsilon`` over the whole schedule, or takes the user's;
- with both a target and a sigma, finds the last step that fits the budget (and refuses a plan that
  cannot take one step);
- gives the ledger (:func:`new_ledger`) the accounting segments of the affordable part, so that
  recording each realized step costs no accountant call.

**The noise sampler's tail is part of delta.** A trainer names the float sampler that will draw its
noise (``noise_sampler``, a :data:`dpaudit.accounting.NOISE_SAMPLERS` key); the plan reserves that
sampler's tail figure for the whole planned run (:mod:`dpaudit.accounting.noise_tail`: the probability
that a neighbour alone on a coordinate carries the noise past the sampler's reach) and hands the
accountant ``delta - tail``: the stated claim is (epsilon, delta) with the tail inside it. A target
epsilon is calibrated with the tail (``epsilon(sigma, delta - tail(sigma)) <= target``). A run whose tail
alone reaches delta is refused, naming the option, unless ``accept_noise_tail`` (``--accept-noise-tail``):
its stated delta is then ``delta + tail``, what holds. A trainer that names no sampler states no tail
(its record says the sampler is not characterised).

**Public parameters only.** q, the step count T, sigma and delta are released (``privacy.json``, and
the model itself depends on them), so they must not be computed from the private number of rows N
unless N is declared public. A user who declares ``--dataset-size N_pub`` fixes q = B / N_pub (and,
for the torch trainers, the steps per epoch ceil(N_pub / B)) and the default delta from N_pub: Poisson
sampling at that public q over the real rows is a valid mechanism whatever the real N is (only the
realized batch sizes differ from B, and they are never released). Without it, N is taken from the
data and *treated as public*: the add/remove epsilon then holds only against an adversary who does not
learn N from the release, so the plan's record also states the replace-one epsilon, the guarantee that
holds when N is public (:func:`dpaudit.accounting.epsilon_replace_one`).

A trainer never builds accounting segments itself, and takes its noise std from here
(:meth:`PrivacyPlan.noise_std`: the factor multiplies here, on every path), so a micro-batch trainer
cannot forget it.

Convention: one meaning of "noise multiplier" everywhere, ``dp_accounting``'s (and jax_privacy's
``clipped_grad(...).sensitivity``): a stage's sigma is the noise std on the summed clipped gradient
over the bound on one privacy unit's contribution, the step's *sensitivity* ``sensitivity_factor *
C`` (the clipping function reports it; nobody recomputes it). The step adds noise of std ``sigma *
sensitivity``; the accountant sees ``sigma`` itself whatever the clipping unit, so the same
``--noise-multiplier`` gives the same epsilon in every mode. The plan, the ledger's segments,
``privacy.json`` (``noise_multipliers`` and ``segments[*].noise_multiplier``, equal) and ``dpaudit
account --noise-multiplier`` all mean this sigma. The noise std over C alone, ``sigma * factor``, is
called ``noise_std_over_clip`` (:meth:`PrivacyPlan.noise_std_over_clip`,
:attr:`dpaudit.accounting.Segment.noise_std_over_clip`); it is never called a noise multiplier.

References:
  Dupuy et al. 2021, "An Efficient DP-Federated Learning Mechanism" (eDP-SGD), Algorithm 1: per-epoch
  noise decay fixed in advance, composed one segment per epoch.
  McMahan et al. 2018 / TF Privacy ``used_microbatching``: micro-batch sensitivity 2C.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpaudit import accounting
from dpaudit.accounting.ledger import PrivacyLedger
from dpaudit.common.errors import UserInputError

if TYPE_CHECKING:  # dpaudit.accounting does not export the class: dp_accounting's own (imported lazily)
    from dp_accounting.dp_event import DpEvent

__all__ = [
    "PrivacyPlan",
    "Stage",
    "constant_noise",
    "decay_schedule",
    "declared_size_warning",
    "new_ledger",
    "observed_plans",
    "plan_privacy",
    "truncate_stages",
]

#: (steps, expected batch size) of one stage of the run.
Stage = tuple[int, int]
#: Base sigma -> the noise multiplier of every stage (one entry per stage).
NoiseSchedule = Callable[[float], Sequence[float]]


def constant_noise(n_stages: int) -> NoiseSchedule:
    """The same sigma in every stage (DP-SGD with or without a batch-size schedule)."""
    return lambda sigma: [sigma] * n_stages


def decay_schedule(decay: str, *, epochs: int, rate: float = 0.0, sigma_min: float | None = None) -> NoiseSchedule:
    """sigma_0 -> one sigma per epoch for ``none``, ``linear`` (floored) or ``exp`` decay (Dupuy et al. 2021).

    Linear decay is floored at ``sigma_min`` (default sigma_0 / 10): zero noise is not DP. Decay is
    fixed in advance: decay triggered by metrics on private data would not be accountable.
    """
    if decay == "none":
        return lambda sigma0: [float(sigma0)] * epochs
    if decay == "linear":
        return lambda sigma0: accounting.linear_decay_sigmas(
            sigma0, rate, epochs, sigma_min if sigma_min is not None else sigma0 / 10.0
        )
    if decay == "exp":
        return lambda sigma0: accounting.exponential_decay_sigmas(sigma0, rate, epochs)
    raise ValueError(f"noise decay must be none, linear or exp, got {decay!r}.")


def declared_size_warning(declared: int, actual: int, batch: int) -> str:
    """The data owner's warning (stderr only, never a released file: it states the private N) when a declared
    ``--dataset-size`` differs from the real number of rows."""
    return (
        f"warning (for the data owner only; not written to privacy.json): --dataset-size {declared} declared, "
        f"train.jsonl has {actual} rows. Poisson sampling at the public rate q = {batch} / {declared} is still the "
        f"accounted mechanism, but the expected batch is q x {actual} = {batch * actual / declared:.4g} rows, "
        f"not {batch}; the gradient is still divided by {batch}."
    )


def truncate_stages(stages: Sequence[Stage], steps: int) -> list[Stage]:
    """The first ``steps`` steps of a (steps, batch) schedule."""
    out, left = [], steps
    for stage_steps, batch in stages:
        if left <= 0:
            break
        out.append((min(stage_steps, left), batch))
        left -= stage_steps
    return out


@dataclass(frozen=True, kw_only=True)
class PrivacyPlan:
    """What a run will spend, derived identically on every (re)start from the config and N.

    Attributes:
        dataset_size: N, the number of training rows the sampler draws from (the privacy unit is one row).
            Private when ``declared_size`` is given: never written to a released file then.
        declared_size: the public dataset size the user declared (``--dataset-size``), used for q and the
            default delta in place of N; None when N itself is treated as public.
        stages: ``(steps, expected_batch)`` per stage; Poisson rate q = batch / :attr:`accounting_size`.
        sigmas: noise multiplier per stage, ``dp_accounting``'s sigma (noise std on the clipped sum
            = sigma * sensitivity_factor * C), or None for a non-private run.
        sensitivity_factor: clip norms one example can move the sum by (1 per-example, 2 micro-batch).
        delta: the delta the claim states (None when non-private): ``accountant_delta + noise_tail``.
        accountant_delta: the delta the accountant computes epsilon at: ``delta`` minus the reserved tail
            (the requested delta itself when the tail was accepted); ``delta`` when not given.
        noise_sampler: the :data:`dpaudit.accounting.NOISE_SAMPLERS` key of the sampler the noise is drawn
            with (None: not characterised, no tail counted).
        noise_tail: that sampler's tail figure for the whole planned run, reserved inside ``delta``.
        noise_tail_accepted: the tail alone reached the requested delta and ``--accept-noise-tail`` stated
            ``delta`` = requested + tail.
        target_epsilon: the budget the ledger enforces (None: no cap).
        planned_epsilon: epsilon of the affordable steps (None when non-private).
        affordable_steps: steps that fit the budget (all of them unless the target caps the run).
        noise_calibrated: True when sigma was calibrated for the target, False when given.
    """

    dataset_size: int
    stages: tuple[Stage, ...]
    declared_size: int | None = None
    sigmas: tuple[float, ...] | None
    sensitivity_factor: float = 1.0
    delta: float | None = None
    target_epsilon: float | None = None
    planned_epsilon: float | None = None
    affordable_steps: int = 0
    noise_calibrated: bool = False
    accountant_delta: float | None = None
    noise_sampler: str | None = None
    noise_tail: float = 0.0
    noise_tail_accepted: bool = False

    def __post_init__(self) -> None:
        if self.accountant_delta is None and self.delta is not None:
            object.__setattr__(self, "accountant_delta", self.delta - self.noise_tail)

    @property
    def private(self) -> bool:
        return self.sigmas is not None

    @property
    def n_public(self) -> bool:
        """True when the real N sets q (and is released through it): no public size was declared."""
        return self.declared_size is None

    @property
    def accounting_size(self) -> int:
        """The N of q = batch / N: the declared public size, else the real one (then treated as public)."""
        return self.dataset_size if self.declared_size is None else self.declared_size

    def sampling_probability(self, step: int) -> float:
        """Poisson rate q of step ``step``: expected batch / :attr:`accounting_size` (public values only
        when a size was declared)."""
        return self.batch_at(step) / self.accounting_size

    @property
    def total_steps(self) -> int:
        return sum(steps for steps, _ in self.stages)

    @property
    def noise_multiplier(self) -> float | None:
        """The base (first-stage) sigma; the whole schedule is :attr:`sigmas`."""
        return None if self.sigmas is None else self.sigmas[0]

    def stage_at(self, step: int) -> tuple[int, int]:
        """(stage index, steps into that stage) of 0-based optimizer step ``step``."""
        start = 0
        for index, (steps, _) in enumerate(self.stages):
            if step < start + steps:
                return index, step - start
            start += steps
        raise IndexError(f"step {step} is past the {self.total_steps}-step plan")

    def batch_at(self, step: int) -> int:
        """Expected batch size of step ``step``."""
        return self.stages[self.stage_at(step)[0]][1]

    def sigma_at(self, step: int) -> float:
        """Noise multiplier of step ``step`` (the step adds std sigma * its own sensitivity)."""
        if self.sigmas is None:
            raise ValueError("a non-private plan has no noise multiplier")
        return self.sigmas[self.stage_at(step)[0]]

    def segments(self, steps: int | None = None, *, accounted_factor: float | None = None) -> list[accounting.Segment]:
        """Accounting segments of the first ``steps`` steps (default: the whole plan).

        ``accounted_factor`` overrides the sensitivity factor the accountant is told (the noise that
        ran, std / C = sigma x factor, is unchanged; the segments' sigma becomes that std / C over the
        overriding factor): 1.0 gives what an accounting that ignores micro-batch clipping would claim.
        """
        if self.sigmas is None:
            raise ValueError("a non-private plan has no accounting segments")
        kept = truncate_stages(self.stages, self.total_steps if steps is None else steps)
        if accounted_factor is None:
            return [
                accounting.Segment(
                    steps=s,
                    sampling_probability=b / self.accounting_size,
                    noise_multiplier=sigma,
                    sensitivity_factor=self.sensitivity_factor,
                )
                for (s, b), sigma in zip(kept, self.sigmas)
            ]
        return [
            accounting.Segment(
                steps=s,
                sampling_probability=b / self.accounting_size,
                noise_multiplier=sigma * self.sensitivity_factor / accounted_factor,
                sensitivity_factor=accounted_factor,
            )
            for (s, b), sigma in zip(kept, self.sigmas)
        ]

    def record_step(self, ledger: PrivacyLedger, step: int) -> None:
        """Record step ``step`` in ``ledger`` BEFORE it runs (raises BudgetExceededError, recording nothing,
        if it would overspend)."""
        ledger.record(
            sampling_probability=self.sampling_probability(step),
            noise_multiplier=self.sigma_at(step),
            sensitivity_factor=self.sensitivity_factor,
        )

    def noise_std_over_clip(self, step: int) -> float:
        """The noise std of step ``step`` over the clip norm C: sigma * factor (not a noise multiplier)."""
        return self.sigma_at(step) * self.sensitivity_factor

    def noise_std(self, step: int, clip_norm: float) -> float:
        """The std of the noise step ``step`` adds to the clipped sum: sigma * factor * C."""
        return self.sigma_at(step) * self.sensitivity_factor * clip_norm

    def event(self, steps: int | None = None, *, accounted_factor: float | None = None) -> DpEvent:
        """The DpEvent of the first ``steps`` steps."""
        return accounting.schedule_event(self.segments(steps, accounted_factor=accounted_factor))

    def public_fields(
        self, *, steps_from_n: bool, event: DpEvent | None = None, delta: float | None = None
    ) -> dict[str, Any]:
        """The :class:`~dpaudit.claim.record.PrivacyRecord` fields that say what N is to the claim.

        ``steps_from_n``: the step count was derived from N too (epochs x ceil(N / batch)). ``event``
        and ``delta``: the proven event of what ran, whose replace-one epsilon is stated when N is
        treated as public (None: nothing proven, no replace-one figure).
        """
        from dpaudit.claim.record import N_DECLARED_TEXT, N_PUBLIC_TEXT

        steps = " and the steps per epoch ceil(N / batch)" if steps_from_n else ""
        if not self.n_public:
            text = N_DECLARED_TEXT.format(n=self.declared_size, steps=steps.replace("N /", f"{self.declared_size} /"))
            return {
                "dataset_size": None,
                "n_public": False,
                "declared_dataset_size": self.declared_size,
                "public_parameters": text,
            }
        replace_one = None
        if event is not None and delta is not None:
            replace_one = float(accounting.epsilon_replace_one(event, delta))
        return {
            "dataset_size": self.dataset_size,
            "n_public": True,
            "declared_dataset_size": None,
            "public_parameters": N_PUBLIC_TEXT.format(
                n=self.dataset_size, steps=steps, and_steps=" and the steps" if steps_from_n else ""
            ),
            "epsilon_replace_one": replace_one,
        }


#: The lists :func:`observed_plans` opened in this context: each :func:`plan_privacy` call appends (request, seconds).
_OBSERVERS: contextvars.ContextVar[tuple[list[tuple[dict[str, Any], float]], ...]] = contextvars.ContextVar(
    "dpaudit_plan_observers", default=()
)


@contextlib.contextmanager
def observed_plans() -> Iterator[list[tuple[dict[str, Any], float]]]:
    """The privacy plans made inside the block, each as (its keyword arguments, its seconds): how a cost probe tells
    the accountant's calibration apart from the training it times, whichever trainer calls :func:`plan_privacy`."""
    seen: list[tuple[dict[str, Any], float]] = []
    token = _OBSERVERS.set((*_OBSERVERS.get(), seen))
    try:
        yield seen
    finally:
        _OBSERVERS.reset(token)


def _observed(plan: Callable[..., PrivacyPlan]) -> Callable[..., PrivacyPlan]:
    @functools.wraps(plan)
    def call(**request: Any) -> PrivacyPlan:
        observers = _OBSERVERS.get()
        if not observers:
            return plan(**request)
        start = time.perf_counter()
        try:
            return plan(**request)
        finally:
            for seen in observers:
                seen.append((request, time.perf_counter() - start))

    return call


@_observed
def plan_privacy(
    *,
    dataset_size: int,
    stages: Sequence[Stage],
    non_private: bool,
    noise_multiplier: float | None,
    target_epsilon: float | None,
    delta: float | None,
    sensitivity_factor: float = 1.0,
    noise_schedule: NoiseSchedule | None = None,
    batch_option: str = "--batch-size",
    declared_size: int | None = None,
    noise_sampler: str | None = None,
    accept_noise_tail: bool = False,
) -> PrivacyPlan:
    """Fix sigma, delta and the affordable steps of a whole run before it starts.

    ``delta`` None: :func:`dpaudit.accounting.default_delta` of N (well below 1/N), the declared N when
    ``declared_size`` is given (delta is released too: it must not come from the private N).
    ``target_epsilon`` alone: the base sigma is calibrated so the whole schedule spends exactly the
    target (PLD). ``noise_multiplier`` alone: no cap; the epsilon is reported. Both: the target is a
    cap, and the run stops after the last step that fits (refused up front if not even one fits).

    Args:
        noise_schedule: base sigma -> per-stage sigmas (default: constant). It must be increasing in
            the base sigma, so calibration can search it.
        batch_option: the option named when a batch exceeds the data.
        declared_size: ``--dataset-size``, a public N fixing q (and delta) in advance; None: the real
            ``dataset_size`` is used and treated as public.
        noise_sampler: the :data:`dpaudit.accounting.NOISE_SAMPLERS` key of the sampler that will draw the
            noise: its tail figure over the planned run is counted inside delta (None: no tail counted).
        accept_noise_tail: a tail that alone reaches delta is stated (delta + tail) instead of refused.

    Raises:
        UserInputError: a batch larger than the data, a budget too small for one step, or a noise sampler
            tail that alone reaches delta (unless ``accept_noise_tail``).
    """
    stages = tuple((int(s), int(b)) for s, b in stages)
    size = dataset_size if declared_size is None else int(declared_size)
    for _, batch in stages:
        if batch > size and declared_size is None:
            raise UserInputError(
                f"{batch_option}: expected batch {batch} exceeds the {dataset_size} training examples; "
                f"use a batch <= {dataset_size}."
            )
        if batch > size:  # the message names the public size only
            raise UserInputError(
                f"{batch_option}: expected batch {batch} exceeds --dataset-size {size} (q = batch / "
                f"dataset size must be <= 1); use a batch <= {size} or declare a larger size."
            )
    total = sum(s for s, _ in stages)
    if non_private:
        return PrivacyPlan(
            dataset_size=dataset_size, stages=stages, sigmas=None, affordable_steps=total, declared_size=declared_size
        )
    schedule = noise_schedule or constant_noise(len(stages))
    delta_option = "the default delta" if delta is None else "--delta"
    delta = accounting.default_delta(size) if delta is None else float(delta)
    if noise_sampler in accounting.RETIRED_SAMPLERS:
        raise ValueError(f"noise sampler {noise_sampler!r} is retired (its reach is short): no run draws with it.")
    reach = None if noise_sampler is None else accounting.sampler_reach(noise_sampler)

    def sigmas_for(sigma: float) -> tuple[float, ...]:
        values = tuple(float(x) for x in schedule(sigma))
        if len(values) != len(stages):
            raise ValueError(f"the noise schedule gave {len(values)} sigmas for {len(stages)} stages")
        return values

    def plan_for(sigma: float) -> PrivacyPlan:
        return PrivacyPlan(
            dataset_size=dataset_size,
            declared_size=declared_size,
            stages=stages,
            sigmas=sigmas_for(sigma),
            sensitivity_factor=sensitivity_factor,
            delta=delta,
            target_epsilon=target_epsilon,
            noise_calibrated=noise_multiplier is None,
        )

    if noise_multiplier is None:
        if target_epsilon is None:
            raise ValueError("a private plan needs a noise multiplier or a target epsilon")
        sigma = float(
            accounting.calibrate_noise(lambda s: plan_for(s).event(), target_epsilon, delta, noise_reach=reach)
        )
    else:
        sigma = float(noise_multiplier)
    plan = plan_for(sigma)
    # The tail of every planned step is reserved: whatever prefix runs, its tail is no larger.
    tail = 0.0 if reach is None else accounting.tail_figure(plan.segments(), reach)
    split = accounting.split_delta(
        delta,
        tail,
        accept=accept_noise_tail,
        delta_option=delta_option,
        option=(
            f"--noise-multiplier {sigma:g}" if noise_multiplier is not None else f"--target-epsilon {target_epsilon:g}"
        ),
    )
    accountant_delta = split.accountant
    affordable = total
    if target_epsilon is not None and accounting.epsilon(plan.event(), accountant_delta) > target_epsilon:
        # The budget caps the run: the last prefix that fits (bisection; epsilon grows with steps).
        lo, hi = 0, total
        if accounting.epsilon(plan.event(1), accountant_delta) > target_epsilon:
            hi = 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if accounting.epsilon(plan.event(mid), accountant_delta) <= target_epsilon:
                lo = mid
            else:
                hi = mid
        affordable = lo
        if affordable == 0:
            raise UserInputError(
                f"--noise-multiplier {sigma:g} spends more than --target-epsilon {target_epsilon:g} on the first step "
                f"(delta {split.delta:.3g}); raise the noise, lower the batch size or raise the target."
            )
    planned = accounting.epsilon(plan.event(affordable), accountant_delta)
    if plan.n_public:  # the record states the replace-one epsilon too: it must be accountable before a step runs
        try:
            accounting.epsilon_replace_one(plan.event(affordable), accountant_delta)
        except accounting.PldGridTooLargeError as err:
            if noise_multiplier is None:
                raise UserInputError(
                    f"target epsilon {target_epsilon:g} at delta {delta:g} is met only by noise multipliers below "
                    f"{sigma:.4g}, too small for the replace-one epsilon the record states with N treated as public "
                    f"({err.points:,} PLD grid points); a guarantee this weak protects no one: lower the target, or "
                    "set the noise multiplier yourself."
                ) from None
            raise UserInputError(
                f"--noise-multiplier {sigma:g} is too small to account the replace-one epsilon the record states with N "
                f"treated as public ({err.points:,} PLD grid points); add noise, or declare --dataset-size (then no "
                "replace-one figure is stated)."
            ) from None
    return dataclasses.replace(
        plan,
        affordable_steps=affordable,
        planned_epsilon=float(planned),
        delta=split.delta,
        accountant_delta=accountant_delta,
        noise_sampler=noise_sampler,
        noise_tail=split.tail,
        noise_tail_accepted=split.accepted,
    )


def new_ledger(plan: PrivacyPlan, *, sampling: str = "poisson", privacy_unit: str = "example") -> PrivacyLedger:
    """A ledger that certifies the affordable part of ``plan`` (so recording it costs no accountant call), at the
    plan's accountant delta, with the plan's reserved noise tail."""
    if not plan.private or plan.delta is None or plan.accountant_delta is None:
        raise ValueError("a non-private plan has no ledger")
    ledger = PrivacyLedger(
        delta=plan.accountant_delta,
        target_epsilon=plan.target_epsilon,
        privacy_unit=privacy_unit,
        sampling=sampling,
        noise_tail=plan.noise_tail,
    )
    ledger.plan(plan.segments(plan.affordable_steps))
    return ledger
