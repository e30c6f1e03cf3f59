"""What a white-box audit will cost, said before its first run, and refused when the machine cannot hold it.

``dpaudit audit-trainer --canaries 1000000`` (the option's maximum) trained for minutes with no word of how long,
and in fleet workers (``--workers``, ``--ray-address``) a micro-batch run passed the workers' memory bound and was
stopped by the watchdog after its training. The cost grows with the canaries: each is an audit row (with
``partners`` more under micro-batch clipping) sampled and clipped every step, a coordinate of the audit block, T
observations, and a score in every bound and in the scores file. :func:`estimate` states it from the layout alone;
:func:`check_fits` refuses, before any run, a run that cannot fit its worker's memory bound or an audit that cannot
fit this machine, with the number it would need; :func:`describe` is the line printed first when it is long.

The coefficients are measured with ``dpaudit audit-trainer --trainer edp-sgd`` at 1,000, 400,000 and 1,000,000
canaries (dp-sgd mode: per-example canaries; edp-sgd mode: one micro-batch per canary, 16 partners), 6 steps, one
run, on the project's 2-core machine at load 4-7 (upper estimates: a free machine is faster): a run peaks at 0.7 GB
plus 0.7 kB per per-example canary and 1.9 kB per micro-batch canary (a million: 2.52 GB measured, so a 2 GiB fleet
worker cannot hold it); 45 s plus 0.35 ms per canary and 5 us per canary and step (17 us with 16 partners; a million
micro-batch canaries: 226 s measured at load 4, 213 s for 400,000 at load 7). Pooling R runs holds about 0.8 kB
more per canary of every run (20 runs of 100,000: 2.2 GB).

Those seconds are an upper estimate of wall time on a loaded machine. The CPU estimate printed beside them
(:func:`cpu_works`, through :mod:`dpaudit.common.cost_model`: scaled by this machine's speed on a 0.5 s probe, then
turned into wall time at the current load) is fitted on process CPU time (``/usr/bin/time``, user + sys) of
``dpaudit audit-trainer`` on the same 2-core machine at load 1.5-2: edp-sgd (edp-sgd mode, 16 partners) 13.9 s at
1,000 canaries and 25.4 s at 100,000; edp-sgd ``--set mode=dp-sgd`` 24.4 s at 100,000; rgp 13.3 s at 1,000;
jax-bert 25.2 s at 1,000 (all with the default 4 steps); ``--runs 3`` at 1,000: edp-sgd 17.5 s, jax-bert 36.2 s (a further run: 1.8 and 5.5 s).
The canaries cost 0.28-0.29 CPU seconds per second of :func:`estimate`'s per-canary part (0.30 taken).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from dpaudit.common import cost_model, resources
from dpaudit.common.errors import UserInputError
from dpaudit.common.resources import format_bytes, format_duration

__all__ = ["AuditCost", "check_fits", "cpu_works", "describe", "estimate", "worth_saying"]

#: Seconds of an audit before and after its canaries (imports, the dataset, the model, the page).
BASE_SECONDS = 45.0
#: Seconds per canary of each run: its scores, every bound, its scores-file rows ...
SECONDS_PER_CANARY = 3.5e-4
#: ... of which the analysis (the bounds, after the last run) takes this much.
ANALYSIS_SECONDS_PER_CANARY = 2.8e-4
#: Seconds per canary per step (sampling and clipping its row) with per-example clipping ...
SECONDS_PER_CANARY_STEP = 5e-6
#: ... and the share each micro-batch partner row adds to it (16 partners: 3.4x).
PARTNER_STEP_SHARE = 0.15
#: A run's memory before its canaries (framework, model, dataset).
BASE_BYTES = 0.7e9
#: Memory per canary of one run: its rows, block coordinates, observations and analysis (per-example clipping) ...
BYTES_PER_CANARY = 700
#: ... and per partner row of a micro-batch canary.
BYTES_PER_PARTNER = 75
#: Memory per canary of every run when R > 1 runs are pooled.
BYTES_PER_POOLED_CANARY = 800
#: Said before the first run when the audit lasts at least this long or holds this much memory.
SAY_SECONDS = 60.0
SAY_BYTES = 1.5e9

_GB = 1e9


@dataclass(frozen=True)
class AuditCost:
    """The estimated cost of one white-box audit.

    Attributes:
        canaries, runs, steps: the layout (canaries per run, runs, steps per run).
        partners: partner rows per canary (0 with per-example clipping).
        seconds: wall time of the whole audit, all runs one after another (upper estimate).
        run_bytes: peak memory of one run (what a fleet worker holds).
        peak_bytes: peak memory of the audit's own process (its runs in it, or the pooled analysis of R runs).
    """

    canaries: int
    runs: int
    steps: int
    partners: int
    seconds: float
    run_bytes: float
    peak_bytes: float

    @property
    def bytes_per_canary(self) -> float:
        return BYTES_PER_CANARY + BYTES_PER_PARTNER * self.partners

    @property
    def analysis_seconds(self) -> float:
        """The analysis after the last run (every canary of every run scored in every bound)."""
        return ANALYSIS_SECONDS_PER_CANARY * self.runs * self.canaries


def estimate(*, canaries: int, runs: int, steps: int, partners: int) -> AuditCost:
    """The cost of ``runs`` runs of ``steps`` steps with ``canaries`` canaries each, ``partners`` partner rows per
    canary (0: per-example clipping)."""
    per_step = SECONDS_PER_CANARY_STEP * (1 + PARTNER_STEP_SHARE * partners)
    seconds = BASE_SECONDS + runs * canaries * (SECONDS_PER_CANARY + steps * per_step)
    run_bytes = BASE_BYTES + canaries * (BYTES_PER_CANARY + BYTES_PER_PARTNER * partners)
    pooled = BYTES_PER_POOLED_CANARY * runs * canaries if runs > 1 else 0
    return AuditCost(
        canaries=canaries,
        runs=runs,
        steps=steps,
        partners=partners,
        seconds=seconds,
        run_bytes=run_bytes,
        peak_bytes=run_bytes + pooled,
    )


def cpu_works(cost: AuditCost, *, jax: bool) -> list[cost_model.Work]:
    """The audit as pieces of work of the measured CPU table (:mod:`dpaudit.common.cost_model`): start-up and the
    first run, the further runs, the canaries (``jax``: a jax-bert audit, whose start-up compiles its step)."""
    family = "jax" if jax else "torch"
    variable = cost.seconds - BASE_SECONDS  # the wall model's per-canary part, the canaries' unit
    return [
        cost_model.Work(f"audit-{family}"),
        cost_model.Work(f"audit-run-{family}", units=cost.runs - 1),
        cost_model.Work("audit-canaries", units=variable),
    ]


def worth_saying(cost: AuditCost) -> bool:
    """Whether the cost is large enough to be said before the first run."""
    return cost.seconds >= SAY_SECONDS or cost.peak_bytes >= SAY_BYTES


def describe(cost: AuditCost, *, workers: int = 1) -> str:
    """One line: the audit's time and memory, before its first run."""
    layout = (
        f"{cost.canaries:,} canaries"
        + (f" (+{cost.partners} partner rows each)" if cost.partners else "")
        + f" x {cost.runs:,} run{'s' if cost.runs > 1 else ''} of {cost.steps} steps"
    )
    at_once = min(workers, cost.runs)
    wall = f"about {format_duration(cost.seconds)}" + (
        f" one run after another ({at_once} at once: less)" if at_once > 1 else ""
    )
    memory = f"{format_bytes(cost.run_bytes)} per run" + (
        f", {format_bytes(cost.peak_bytes)} for the pooled analysis" if cost.runs > 1 else ""
    )
    return f"audit-trainer: {layout}: {wall}, {memory} (upper estimates; fewer --canaries is faster and looser)."


def _fit(cost: AuditCost, room: float, *, pooled: bool) -> int:
    """The most canaries whose memory fits ``room`` bytes (per run, or with the pooled analysis), rounded down to two
    significant digits."""
    per = cost.bytes_per_canary + (BYTES_PER_POOLED_CANARY * cost.runs if pooled and cost.runs > 1 else 0)
    fit = max(0, int((room - BASE_BYTES) / per))
    unit = 10 ** max(0, len(str(fit)) - 2)
    return fit // unit * unit


def check_fits(
    cost: AuditCost, *, fleet: bool, worker_memory_gb: float | None = None, available: float | None = None
) -> None:
    """Refuse, before any run, what cannot fit: with ``fleet`` (``--workers`` > 1 or ``--ray-address``) a run above
    the workers' memory bound (``worker_memory_gb``, default ``$DPAUDIT_WORKER_MEMORY_GB`` or the fleet's
    :data:`~dpaudit.fleet.fleet.WORKER_MEMORY_GB`: its watchdog would stop it after its training), and any
    audit whose own process needs more than ``available`` bytes (default ``MemAvailable``).

    Raises:
        UserInputError: naming the memory it needs, what there is, and the canaries that would fit.
    """
    available = resources.available_memory() if available is None else available
    if fleet:
        if worker_memory_gb is None:
            from dpaudit.fleet.fleet import WORKER_MEMORY_GB

            try:
                worker_memory_gb = float(os.environ.get("DPAUDIT_WORKER_MEMORY_GB") or WORKER_MEMORY_GB)
            except ValueError:
                worker_memory_gb = WORKER_MEMORY_GB  # the fleet itself refuses the bad value, naming it
        bound = worker_memory_gb * (1 << 30)
        if cost.run_bytes > bound:
            need = math.ceil(cost.run_bytes / (1 << 30) * 10) / 10
            raise UserInputError(
                f"--canaries {cost.canaries:,}: each run needs about {need:g} GiB in its worker, above "
                f"the workers' memory bound of {worker_memory_gb:g} GiB (its watchdog would stop the "
                f"run after training); set DPAUDIT_WORKER_MEMORY_GB={need:g} or use at most about "
                f"{_fit(cost, bound, pooled=False):,} canaries."
            )
    if available is None:
        return
    own = cost.peak_bytes - (cost.run_bytes - BASE_BYTES if fleet else 0)  # the runs train elsewhere in a fleet
    if own > available:
        raise UserInputError(
            f"--canaries {cost.canaries:,} x --runs {cost.runs:,}: the audit needs about {format_bytes(own)} "
            f"of memory and {format_bytes(available)} is available here; use at most about "
            f"{_fit(cost, available, pooled=True):,} canaries (or fewer --runs), or a machine with more "
            "memory."
        )
