"""What a demo stage or a shadow model costs in CPU seconds, from a table measured on one machine.

``dpaudit demo`` ran for minutes with no word of how long, and ``dpaudit attack`` trains its shadow models (one
training of the target's recipe each) before any score. Both say the cost first: each piece of work is
a :class:`Work` (a kind and its units), :data:`RATES` gives each kind's CPU seconds on the reference machine as
``fixed + per_unit x units``, :func:`estimate` multiplies by this machine's speed
(:func:`dpaudit.common.resources.speed_factor`: a fixed 0.5 s probe timed now against the reference machine's time)
and turns the sum into wall time at the current load (:func:`dpaudit.common.resources.wall_seconds`).

Units of work: a training's tokens seen, steps x batch x tokens per example for a trainer counted in steps
(jax-bert), epochs x rows x tokens per example for one counted in epochs (the torch trainers, whose steps are
``epochs x ceil(rows / batch)``); an attack's rows scored (the data's train and held-out rows, plus canaries x the
secret space for the exposure attack, which ranks every candidate); an inject's rows written; a report's models.

Where the table comes from: the ``stage-times.json`` (each stage's ``time.process_time()`` delta: CPU of every
thread of the process) or the stage lines (``done in ... (CPU ... s)``) of these runs on the project's 2-core machine
at load 2-8, every one with ``--seed 0``:

- the test suite's plan (``tests/demo/test_demo_e2e.py``: ``dpaudit demo --quick --no-classifiers --noise-seed 0``
  with the public model pretrained 100 steps): three runs, one of them with the audit recipe's batch at 128;
- ``dpaudit demo --quick --no-classifiers``: one run; ``dpaudit demo --quick`` (classifiers): one run, and two more
  (``nice -n 10``, OS-entropy noise) that checked the table: 225 and 231 CPU s measured, 240 and 252 estimated;
- ``nice -n 10 dpaudit demo --quick --causal`` (classifiers and causal LMs, resumed once): its causal LM stages
  (public pretraining 9.1 CPU s, non-private 11.1, DP 17.3; their attacks 2.3 and 5.3).

The public pretraining at 100 and 300 steps (22.7-25.1 and 33.9-36.1 CPU s) gives jax-bert's fixed cost (start-up,
compiling the step, evaluation: 18 s) and the other jax-bert kinds share it; every other kind's rate is its mean
over the runs, less its fixed cost, over its units at the quick size. The full demo (3x the corpus, 2x the steps, 4
shadows, LiRA and RMIA) was not timed for the table: its estimate (445 CPU s on the reference machine) is these rates
extrapolated by the units, against 573 and 604 CPU s measured by ``benchmarks/bench_demo.py`` at earlier versions of
the demo (README, "What it found"): 0.74-0.78x, an underestimate.
Measured spread of one stage across runs: 10-25% (DP training 50.4-54.6 s, the audit recipe's DP training
21.7-30.9 s).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit.common import resources

__all__ = [
    "RATES",
    "Estimate",
    "Rate",
    "Work",
    "estimate",
    "format_minutes",
    "measured_training",
    "shadow_lines",
    "training_work",
]


@dataclass(frozen=True)
class Rate:
    """CPU seconds of one kind of work on the reference machine: ``fixed + per_unit x units``.

    ``threads``: the cores it keeps busy on a free machine (jax's XLA runs about 1.5 on the 2-core machine: CPU
    seconds / wall seconds of the quick demo's jax-bert stages at load < 1; the torch stages about 1).
    """

    title: str
    fixed: float
    per_unit: float
    threads: float = 1.0


#: The measured table (module docstring): kind -> rate.
RATES: dict[str, Rate] = {
    "inject": Rate("inject", 0.05, 2e-5),
    "public-mlm": Rate("public pretraining (jax-bert MLM)", 18.0, 2.6e-5, 1.5),
    "mlm": Rate("non-private MLM training", 18.0, 1.6e-5, 1.5),
    "mlm-dp": Rate("DP MLM training", 18.0, 3.4e-5, 1.5),
    "audit": Rate("audit-recipe training", 18.0, 1.6e-5, 1.5),
    "classifier": Rate("classifier training", 0.5, 3.0e-5),
    "classifier-dp": Rate("DP classifier training", 0.5, 6.0e-5),
    "causal": Rate("causal LM training", 2.0, 2.3e-5),
    "causal-dp": Rate("DP causal LM training", 2.0, 4.1e-5),
    "attack": Rate("attacks without shadows", 2.3, 1.2e-5),
    "attack-shadows": Rate("attacks with shadows", 2.3, 1.2e-5),
    "shadow": Rate("one shadow model's start-up", 1.4, 0.0),
    "shadow-models": Rate("shadow models", 0.0, 0.0),
    "report": Rate("report", 1.0, 0.3),
    # dpaudit audit-trainer (dpaudit.whitebox.cost.cpu_works): the process and its first run, each further run, and
    # the canaries in units of the white-box wall model's per-canary seconds (module docstring there)
    "audit-torch": Rate("white-box audit (start-up and first run)", 13.8, 0.0),
    "audit-jax": Rate("white-box audit (start-up and first run)", 25.1, 0.0, 1.5),
    "audit-run-torch": Rate("further runs", 0.0, 1.8),
    "audit-run-jax": Rate("further runs", 0.0, 5.5, 1.5),
    "audit-canaries": Rate("canaries (sampling, clipping, scoring, bounds)", 0.0, 0.30),
}


@dataclass(frozen=True)
class Work:
    """One piece of work: its kind (a key of :data:`RATES`) and units; ``shadows`` models trained like
    ``trains`` (an attack's shadow models: each one training of the target's recipe, plus its start-up).

    ``measured``: CPU seconds of this very work measured on this machine before (a target's training in the same
    demo folder), used instead of the table (and not scaled by the probe).
    """

    kind: str
    units: float = 0.0
    shadows: int = 0
    trains: Work | None = None
    measured: float | None = None

    def cpu(self, speed: float) -> float:
        """CPU seconds on a machine ``speed`` times slower than the reference one."""
        if self.measured is not None:
            own = self.measured
        else:
            rate = RATES[self.kind]
            own = (rate.fixed + rate.per_unit * self.units) * speed
        if self.shadows and self.trains is not None:
            own += self.shadows * (self.trains.cpu(speed) + RATES["shadow"].fixed * speed)
        return own

    @property
    def threads(self) -> float:
        return RATES[self.kind if self.trains is None else self.trains.kind].threads


@dataclass(frozen=True)
class Estimate:
    """CPU seconds per kind (in the order first met) and in total, the wall seconds at ``load`` on ``cores``."""

    by_kind: dict[str, float]
    cpu: float
    wall: float
    speed: float
    load: float
    cores: int
    count: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """Three lines: CPU in all (with the probe's speed), per kind, then the wall time at this load."""
        kinds = ", ".join(
            f"{RATES[k].title}{f' x{self.count[k]}' if self.count.get(k, 1) > 1 else ''} {format_minutes(v)}"
            for k, v in self.by_kind.items()
            if v >= 0.5
        )
        speed = (
            f"this machine {1 / self.speed:.2g}x the reference machine's speed on a 0.5 s probe"
            if abs(self.speed - 1) >= 0.05
            else "this machine about as fast as the reference one on a 0.5 s probe"
        )
        return [
            f"estimated CPU time: {format_minutes(self.cpu)} in all ({speed}):",
            f"  {kinds}",
            f"estimated wall time at the current load ({self.load:.1f} on {self.cores} cores): about "
            f"{format_minutes(self.wall)} (the measured table scaled; on a loaded machine compare the CPU time)",
        ]


def format_minutes(seconds: float) -> str:
    """ "1.5 CPU-min" style figures: seconds below a minute, minutes with one decimal below 10, whole above (up)."""
    if seconds < 60:
        return f"{math.ceil(seconds)} s"
    minutes = seconds / 60
    return f"{math.ceil(minutes * 10) / 10:.1f} min" if minutes < 10 else f"{math.ceil(minutes)} min"


def estimate(
    works: Sequence[Work], *, speed: float | None = None, load: float | None = None, cores: int | None = None
) -> Estimate:
    """The CPU and wall cost of ``works`` run one after another; ``speed`` (:func:`resources.speed_factor`),
    ``load`` (``os.getloadavg()``'s last minute) and ``cores`` are measured now when None."""
    speed = resources.speed_factor() if speed is None else speed
    load = resources.current_load() if load is None else load
    cores = resources.available_cores() if cores is None else cores
    by_kind: dict[str, float] = {}
    count: dict[str, int] = {}
    wall = 0.0
    for work in works:
        cpu = work.cpu(speed)
        by_kind[work.kind] = by_kind.get(work.kind, 0.0) + cpu
        count[work.kind] = count.get(work.kind, 0) + 1
        wall += resources.wall_seconds(cpu, threads=work.threads, load=load, cores=cores)
    return Estimate(
        by_kind=by_kind, cpu=sum(by_kind.values()), wall=wall, speed=speed, load=load, cores=cores, count=count
    )


def training_work(trainer: str, config: Mapping[str, Any], steps: int | None, *, measured: float | None = None) -> Work:
    """One training of a recipe (a train run's manifest ``config`` and its ``steps``): jax-bert is priced as the
    demo's MLM training, a torch trainer by its ``task`` (``clm``: causal LM, else classifier); private unless the
    config says non-private (``non_private``, or edp-sgd's ``sgd`` mode). Units: steps x batch x tokens."""
    private = not config.get("non_private") and config.get("mode") != "sgd"
    if trainer == "jax-bert":
        kind = "mlm-dp" if private else "mlm"
    else:
        kind = ("causal" if config.get("task") == "clm" else "classifier") + ("-dp" if private else "")

    def number(key: str, default: int) -> int:
        value = config.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    steps = steps or number("steps", 0) or number("total_steps", 0)
    return Work(kind, units=steps * number("batch_size", 1) * number("max_length", 128), measured=measured)


#: The file ``dpaudit demo`` writes in its folder: each stage's wall and CPU seconds.
STAGE_TIMES = "stage-times.json"


def measured_training(model_dir: str | Path) -> float | None:
    """The CPU seconds the training of ``model_dir`` took, when a demo trained it (its folder's
    :data:`STAGE_TIMES` names the stage ``train-<label>`` of ``model-<label>``, not skipped); None otherwise."""
    path = Path(model_dir)
    label = path.name.removeprefix("model-")
    try:
        stages = json.loads((path.parent / STAGE_TIMES).read_text(encoding="utf-8"))["stages"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for row in stages if isinstance(stages, list) else []:
        if isinstance(row, dict) and row.get("name") == f"train-{label}" and not row.get("skipped"):
            cpu = row.get("cpu_s")
            return float(cpu) if isinstance(cpu, (int, float)) and cpu > 0 else None
    return None


def shadow_lines(
    trainer: str,
    config: Mapping[str, Any],
    steps: int | None,
    *,
    todo: int,
    model_dir: str | Path | None = None,
    workers: int = 1,
    start_wall: float = 0.0,
    speed: float | None = None,
    share: float | None = None,
) -> list[str]:
    """What training ``todo`` shadow models like the target will cost, before the first: each one training of the
    target's recipe (its demo stage's measured CPU when the target's folder records it, else the table) plus a
    model's start-up.

    ``workers``: models trained at once, each in a one-thread worker process of its own (:mod:`dpaudit.fleet.fleet`):
    the wall time is the CPU spread over ``min(workers, todo)`` threads that share the cores with the threads already
    running, counted by the load average (:func:`dpaudit.common.resources.wall_seconds`' weight), or fewer when
    ``share``, the share of a core a speed probe got, says so (on C cores shared fairly one more thread gets
    C / (others + 1)). ``start_wall``: wall seconds before the first model starts (a local Ray instance:
    :func:`dpaudit.fleet.fleet.start_wall_seconds`), added to the wall. ``speed``: this machine's speed factor when
    already measured (:func:`estimate`). Two workers, four tiny shadows, 2 cores (``benchmarks/bench_attack_cost.py
    --shadow-check --shadow-workers 2``): this rule 0.87-1.14x the call's wall at load 4.9-8.3; priced as one thread,
    1.41-1.79x at load 5.0-5.8; each worker given the probe's whole share, 0.69-0.83x at load 5.3-6.7. The other
    reading (the load average's count where the probe's was taken, the probe's where it was not) gives "up to", as
    for models trained in this process (:func:`dpaudit.attacks.shadow_cost.in_process_lines`): the call's wall was
    within [about / 1.3, up to x 1.3] in 8 of 8 calls beside another session's work (load 3.4-4.1) and in 3 of 3
    after a test suite ended, but not beside that suite running at ``nice -n 5`` in the same session (5 calls, load
    5.6-8.1: "up to" 0.39-0.67x the wall; each model took 33-44 s in its worker for about 3 CPU s, a smaller share
    than the probe got)."""
    measured = measured_training(model_dir) if model_dir is not None else None
    one = training_work(trainer, config, steps, measured=measured)
    est = estimate([Work("shadow-models", shadows=todo, trains=one)], speed=speed)
    parallel = min(max(1, workers), todo)
    upper = ""
    if parallel > 1:
        # The workers share the C cores with the threads already running: the load average's count of them
        # (weighted as in resources.wall_seconds), or fewer when a speed probe got more of a core than that count
        # leaves (on C cores shared fairly one more thread gets s = C / (others + 1), so others = C / s - 1). The
        # other count gives "up to": neither reading holds alone (dpaudit.attacks.shadow_cost's module docstring).
        load = most = est.load
        other = "the load average's"
        if share is not None and share > 0:
            probed = max(0.0, est.cores / share - 1.0) / resources.LOAD_WEIGHT
            load, most = min(load, probed), max(load, probed)
            other = "the load average's" if probed < est.load else "the speed probe's"
        wall = resources.wall_seconds(est.cpu, threads=float(parallel), load=load, cores=est.cores)
        longest = resources.wall_seconds(est.cpu, threads=float(parallel), load=most, cores=est.cores)
        if longest > 1.1 * wall:
            upper = f", up to {format_minutes(longest + max(0.0, start_wall))} if the workers get only {other} share"
        est = dataclasses.replace(est, wall=wall)
    est = dataclasses.replace(est, wall=est.wall + max(0.0, start_wall))
    source = (
        "the target's own training as its demo measured it, plus a start-up"
        if measured is not None
        else f"a {RATES[one.kind].title} from the measured table, x{est.speed:.2g} for this machine's speed on a "
        "0.5 s probe"
    )
    return [
        f"estimated CPU time of {todo} shadow model{'s' if todo > 1 else ''}: {format_minutes(est.cpu)} "
        f"({format_minutes(est.cpu / todo)} each: {source})",
        f"estimated wall time at the current load ({est.load:.1f} on {est.cores} cores"
        + (f", the speed probe got {share:.2f} of a core" if parallel > 1 and share is not None else "")
        + (f", {parallel} models at once" if parallel > 1 else "")
        + (f", {format_minutes(start_wall)} to start Ray" if start_wall > 0 else "")
        + f"): about {format_minutes(est.wall)}{upper}",
    ]
