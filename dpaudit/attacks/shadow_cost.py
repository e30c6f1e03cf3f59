"""What the shadow models will cost, measured before they train: a probe of the first model's recipe, timed here.

The measured table of :mod:`dpaudit.common.cost_model` prices a training by its kind and tokens, fitted on the demo's
trainings on one machine. On shadow models it was 4.5-7.2x the CPU they took for 24-step DP shadows of tiny models and
0.65-1.38x for 18-step ones of ``mini`` models (``benchmarks/bench_lora_shadows.py``; the probe's estimate there:
0.86-1.03x the CPU, 0.82-1.04x the wall at load 9-11): a model's fixed cost (loading its start, LoRA's base hash, the
accountant's calibration, evaluations, export) and its cost per step depend on the preset, the task, the privacy mode
and ``--peft``, none of which the table's two numbers per kind can hold, and the wall time on a shared machine depends
on the load of the minutes that follow, not on a load average.

So the estimate of costly models is measured (:func:`worth_probing`: the table prices their steps at a minute of CPU
or more, or the target is larger than the models the table was fitted on): the first model to train is run once as a
probe, with its own config, start, held-out rows and batch size, on :data:`PROBE_STEPS` batches of its rows, one
metrics row per step (``log_every`` 1), by the same trainer, in this process, under the current load. From the
probe:

- ``step``: the seconds of one optimizer step, the mean of the probe's per-step windows (each metrics row's batch over
  its examples per second) without the first (the step's warm-up) and the last (it holds the final evaluation);
- ``evaluation``: the last window less one step (one held-out evaluation);
- ``fixed``: the probe's wall time less its steps, that evaluation and its privacy plan (start-up, loading, export),
  the first step counted as a steady one (its excess, compiling the step, is shared by every model of those shapes);
- the models' privacy plan (calibrating sigma to the target's epsilon: PLD accounting, tens of seconds on this
  machine for some (q, steps), and the same for every model) is made now with their own q and steps, timed, and said
  apart: the accountant keeps its results in this process, so the models reuse it.

A model of ``steps`` steps and ``e`` evaluations is then ``fixed + steps x step + e x evaluation``; ``k`` models are k
of them, one after the other. CPU is the same figure times the probe's CPU / wall. The probe's folder is removed; its
cost is said beside the estimate.

Models whose steps the table prices under a CPU-minute (the tiny shadows above, a few seconds each; a probe would cost
about as much as they do) are priced by :data:`IN_PROCESS`, a table of shadow models trained as the attack trains them,
one after the other in this process: the measured table's kinds were fitted on ``dpaudit`` subprocesses (a demo stage),
whose fixed cost (importing torch and transformers, building the tokenizer, the start-up of a process: 0.5-2 CPU s of
the table's, plus 1.4 s a shadow model) a model trained in a process that has all of that loaded does not pay. Its
``fixed`` (building the model from its start, writing its data folder, exporting: 0.14-0.20 CPU s) and ``per_unit`` (CPU
seconds per token seen) are fitted on ``benchmarks/bench_lora_shadows.py``'s tiny DP shadows at 24 and 72 steps (2 and 6
epochs of 363 rows, batch 32, 32 tokens), each model's CPU measured apart from the probe's (:func:`in_process_lines`).
It holds for small models only: on ``mini`` shadows (4 x 256, 18 steps) it read 0.19-0.22x their CPU (its price of a
token does not grow with the model), and those are probed (larger than :data:`PROBE_ABOVE_WEIGHT_BYTES`). On tiny
shadows it was not fitted on (75 steps of 450 rows) it read 0.94-1.08x their CPU. Its ``evaluation`` prices each model's
held-out evaluations (:func:`in_process_evaluations`) apart, by the rows that model evaluates: LiRA's shadows of a
causal or masked LM on labelled data then evaluated up to 512 rows of the audit universe, three times (a third of a
tiny causal shadow's CPU), where RMIA's evaluated the target's held-out rows (40 at the benchmark's size); without it
the estimate read 0.59-0.72x the CPU of LiRA's causal shadows, with it 0.91-1.04x (0.78-1.14x over every attack and target:
``benchmarks/bench_attack_cost.py --shadow-check``). Their wall time is that CPU over the share of a core this process
gets, which neither reading available before the models train predicts alone: the share it got on the speed probe
(:func:`timed_speed`) and the load average's (:func:`load_share`). Measured on the 2-core machine (the call's CPU over
its wall; the bench also prints its threads' waiting for a core, ``/proc/self/task/*/schedstat``): beside
another session's work the probe read 0.95-1.0 of a core and the load average 0.5 where the models got 0.71-0.99 (the
scheduler shares the cores between sessions before threads, which the load average's count does not see); beside a test
suite at ``nice -n 5`` in the attack's own session (the attack at 10) the probe read 0.05-0.23 and the load average
0.29-0.39 where the models got 0.08-0.17 (the load average does not see priorities); on a quiet machine both read about
a whole core, and once a probe preempted for a moment read 0.64. So the estimate says both: "about" the CPU over the
larger share, "up to" the CPU over the smaller, when they differ by more than 10%. The measured wall fell within [about
/ 1.3, up to x 1.3] in 21 of 24 calls at load 3.8-8.5 (the three outside, under the test suite: "up to" 0.39, 0.71 and
0.72x the wall); "about" alone read 0.17-0.35x under the test suite and 0.67-0.88x beside other sessions (where the CPU
estimate read 0.66-0.89x), and 0.96-1.25x at load 1.0-1.2, 0.93-1.21x at load 2.6-2.8 (16 and 8 calls of the former
rule, the larger share, which "about" keeps), and 0.65-1.00x on a later day at load 0.8-1.0 (8 calls, the CPU estimate
0.64-0.99x). When a model that should be probed cannot be (a recipe started from a fresh copy of a model trained
elsewhere, a trainer error), and for parallel ``--workers`` (a process per model), the measured table's estimate is
printed, start-up included, its wall time spread over the workers and a local Ray instance's start added
(:func:`dpaudit.common.cost_model.shadow_lines`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit.common import resources
from dpaudit.common.cost_model import RATES, format_minutes, training_work

__all__ = [
    "IN_PROCESS",
    "PROBE_STEPS",
    "ProbeCost",
    "model_seconds",
    "probe_config",
    "probe_cost",
    "in_process_cpu",
    "in_process_evaluations",
    "in_process_lines",
    "load_share",
    "probe_lines",
    "timed_speed",
    "worth_probing",
]

#: Optimizer steps of the probe: a warm-up step, steady steps, and the last one with the final evaluation.
PROBE_STEPS = 6
#: The probe runs when the measured table prices the models' steps at this many CPU seconds or more on the reference
#: machine (below, a probe of a second or more is a large share of what it measures, and the table's error is
#: seconds; the steps only: the table's fixed cost of a jax-bert model, compiling its step, is paid once per process
#: by models of the same shapes) ...
PROBE_ABOVE_CPU_S = 60.0
#: ... or when the target's weights are larger than this: the table was fitted on the demo's tiny models (under 2 MB of
#: weights), and its price of a token does not grow with the model.
PROBE_ABOVE_WEIGHT_BYTES = 10 * 2**20


@dataclass(frozen=True)
class InProcessRate:
    """CPU seconds on the reference machine of one model trained in this process: ``fixed + per_unit x tokens +
    evaluation x held-out tokens`` (``tokens``: :func:`dpaudit.common.cost_model.training_work`'s units; held-out
    tokens: :func:`in_process_evaluations`' evaluations x rows x ``max_length``), its steps x ``lora`` for a ``--peft
    lora`` model (its frozen weights get no gradient; its evaluations are priced as a full model's: 1.03-1.14x measured,
    the forward pass crosses the base either way)."""

    fixed: float
    per_unit: float
    lora: float
    evaluation: float


#: The measured table's kinds (:func:`dpaudit.common.cost_model.training_work`; edp-sgd's masked LMs fall under
#: ``classifier``) -> the in-process rate (module docstring). The DP kinds are fitted; a non-private kind is its DP
#: kind's fit x the measured table's non-private / DP per-token ratio (not measured on shadows), and its evaluations
#: cost the same (no clipping in a forward pass). ``evaluation``: the CPU of one held-out evaluation of tiny edp-sgd
#: models at ``max_length`` 32, 64 and 512 rows, over its rows x 32 (classify 3.0-3.5e-6, masked LM 4.0-4.5e-6, causal
#: LM 8.8-9.6e-6, full and LoRA, at load 8). The fits of ``fixed`` and ``per_unit`` held the evaluations of their
#: models (3 and 7 of 40 rows): priced apart now, they are taken out (the causal fit's 0.17 and 3.9e-5 less 0.012 s
#: and 9.4e-7 a token; the classifier's change is under the figures' last digit).
IN_PROCESS: dict[str, InProcessRate] = {
    "classifier-dp": InProcessRate(fixed=0.17, per_unit=2.5e-5, lora=0.66, evaluation=3.6e-6),
    "causal-dp": InProcessRate(fixed=0.16, per_unit=3.8e-5, lora=0.77, evaluation=9.0e-6),
}
IN_PROCESS["classifier"] = dataclasses.replace(
    IN_PROCESS["classifier-dp"],
    per_unit=IN_PROCESS["classifier-dp"].per_unit * RATES["classifier"].per_unit / RATES["classifier-dp"].per_unit,
)
IN_PROCESS["causal"] = dataclasses.replace(
    IN_PROCESS["causal-dp"],
    per_unit=IN_PROCESS["causal-dp"].per_unit * RATES["causal"].per_unit / RATES["causal-dp"].per_unit,
)


def _positive(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def in_process_evaluations(config: dict[str, Any], heldout_rows: int) -> tuple[int, int]:
    """(evaluations, rows each) of one model of a torch trainer (a Config counted in ``epochs``) whose held-out split
    has ``heldout_rows`` rows: one evaluation at each epoch's end (the loop's ``eval_every`` is an epoch's steps; the
    last is the final one), one more before the first step when a private run starts from ``init_from`` (the start's
    held-out utility on the same rows), each of the first ``eval_examples`` rows. The held-out split is each model's
    own: the target's held-out rows it did not train on (a language model's: their texts), the rows of its pool it
    did not train on when none is left (:func:`dpaudit.attacks.shadow_models.train_shadows`). ``eval_examples`` 0:
    none."""
    epochs = _positive(config, "epochs") or 1
    private = training_work("edp-sgd", config, None).kind.endswith("-dp")
    start = 1 if private and config.get("init_from") else 0
    cap = config.get("eval_examples")
    rows = max(0, heldout_rows)
    if isinstance(cap, int) and not isinstance(cap, bool):
        rows = min(rows, max(0, cap))
    return (epochs + start, rows) if rows else (0, 0)


def in_process_cpu(
    trainer: str, config: dict[str, Any], steps: int | None, *, heldout_rows: int = 0
) -> tuple[float, str] | None:
    """CPU seconds on the reference machine of one model trained in this process (:data:`IN_PROCESS`) and its kind's
    title; None for a kind the table does not hold (jax-bert's: compiling its step is a per-process cost it prices
    already). ``heldout_rows``: the model's held-out rows (:func:`in_process_evaluations`; 0 prices no evaluation)."""
    one = training_work(trainer, config, steps)
    rate = IN_PROCESS.get(one.kind)
    if rate is None:
        return None
    per_unit = rate.per_unit * (rate.lora if config.get("peft") == "lora" else 1.0)
    evaluations, rows = in_process_evaluations(config, heldout_rows)
    evaluated = evaluations * rows * (_positive(config, "max_length") or 128)
    return rate.fixed + per_unit * one.units + rate.evaluation * evaluated, RATES[one.kind].title


#: The least share of a core :func:`timed_speed` reports (a probe descheduled for nearly all of its wall time is an
#: outlier, not a rate to divide by).
MIN_SHARE = 0.05


def timed_speed() -> tuple[float, float]:
    """This machine's speed factor and the share of one core this process gets now, from one speed probe
    (:func:`dpaudit.common.resources.probe_seconds`): its CPU seconds against the reference machine's
    (:func:`dpaudit.common.resources.speed_factor`), and its CPU / wall seconds (at most 1, at least :data:`MIN_SHARE`).

    Why measured: on the shared 2-core machine the load average (6-10, counting threads that do not compete all the
    time) gave models run under ``nice -n 10`` 0.25-0.35 of a core by :func:`dpaudit.common.resources.wall_seconds`,
    which took 0.55-0.8 (their wall 1.2-1.8x their CPU in 18 of 24 calls of ``benchmarks/bench_attack_cost.py
    --shadow-check``). The probe, timed in this process at its own priority, followed such work: 8 probes at load 5-5.5,
    each followed by 3 CPU s of single-thread matrix products, saw 0.89-1.00 of a core where the products got
    0.79-1.00 (and 0.34 where they got 0.63); the load's share was 0.43-0.46."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    probe = resources.probe_seconds()
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    share = cpu / wall if wall > 0 else 1.0
    return resources.speed_factor(probe), min(1.0, max(MIN_SHARE, share))


def load_share(load: float, cores: int) -> float:
    """The share of one core a single-threaded process gets at ``load`` on ``cores``, by the load average
    (:func:`dpaudit.common.resources.wall_seconds`)."""
    return 1.0 / resources.wall_seconds(1.0, threads=1.0, load=load, cores=cores)


def in_process_lines(
    trainer: str,
    config: dict[str, Any],
    steps: int | None,
    *,
    todo: int,
    heldout_rows: int = 0,
    speed: float | None = None,
    share: float | None = None,
    load: float | None = None,
    cores: int | None = None,
) -> list[str] | None:
    """The estimate's two lines for ``todo`` models trained one after the other in this process (:data:`IN_PROCESS`
    x this machine's speed), each evaluating its ``heldout_rows`` held-out rows (:func:`in_process_evaluations`); None
    when :func:`in_process_cpu` has no rate for them.

    The wall time is the CPU over ``share``, the share of a core this process gets; with ``speed``, ``share`` and
    ``load`` all None both are measured now on one speed probe (:func:`timed_speed`), and the wall is said as a range:
    "about" by the larger of the probe's share and the load average's (:func:`load_share`), "up to" by the smaller
    (the module docstring says why neither alone). Given a ``load`` and no ``share``, the wall time is the CPU at that
    load (:func:`dpaudit.common.resources.wall_seconds`)."""
    priced = in_process_cpu(trainer, config, steps, heldout_rows=heldout_rows)
    if priced is None:
        return None
    one, title = priced
    evaluations, rows = in_process_evaluations(config, heldout_rows)
    evaluated = f" and {evaluations} held-out evaluations of {rows} rows" if evaluations else ""
    measure_share = share is None and load is None
    if speed is None:
        speed, measured = timed_speed()
        share = measured if measure_share else share
    load = resources.current_load() if load is None else load
    cores = resources.available_cores() if cores is None else cores
    cpu = todo * one * speed
    upper = ""
    if share is None:
        wall = resources.wall_seconds(cpu, threads=1.0, load=load, cores=cores)
        where = f"{load:.1f} on {cores} cores"
    else:
        where = f"{load:.1f} on {cores} cores; this process gets {share:.2f} of a core: given"
        if measure_share:
            # The two readings bracket what the models got in every measured case but a few (module docstring):
            # the probe read low beside work of a higher priority where the load average read high, and high beside
            # other sessions' work where the load average read low. The larger gives "about", the smaller "up to".
            probe, counted = share, load_share(load, cores)
            share, least = max(probe, counted), min(probe, counted)
            where = (
                f"{load:.1f} on {cores} cores; this process got {probe:.2f} of a core on the speed probe, the load "
                f"average leaves it {counted:.2f}"
            )
            if share > 1.1 * least:
                which = "load average" if counted < probe else "probe"
                upper = f", up to {_seconds(cpu / least)} if it gets only the {which}'s share"
        wall = cpu / min(1.0, max(MIN_SHARE, share))
    plural = "s" if todo > 1 else ""
    return [
        f"estimated CPU time of {todo} shadow model{plural}: {_seconds(cpu)} ({_seconds(cpu / todo)} each: a "
        f"{title}{evaluated} in this process, from the table of shadow models, x{speed:.2g} for this machine's "
        "speed on a 0.5 s probe)",
        f"estimated wall time at the current load ({where}): about {_seconds(wall)}{upper}",
    ]


def worth_probing(table_cpu: float, model_dir: Path | None) -> bool:
    """Whether to measure a probe (:data:`PROBE_ABOVE_CPU_S`, :data:`PROBE_ABOVE_WEIGHT_BYTES`) rather than print the
    measured table's estimate, whose steps cost ``table_cpu`` CPU seconds on the reference machine."""
    if table_cpu >= PROBE_ABOVE_CPU_S:
        return True
    if model_dir is None or not Path(model_dir).is_dir():
        return False
    weights = sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors") if p.is_file())
    return weights > PROBE_ABOVE_WEIGHT_BYTES


@dataclass(frozen=True)
class ProbeCost:
    """The probe's measurement: seconds per step, per evaluation and fixed per model; its own wall and CPU."""

    step: float
    evaluation: float
    fixed: float
    wall: float
    cpu: float
    steps: int
    planning: float | None = None


def _fields(config: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(config)}


def probe_config(config: Any, rows: int) -> tuple[Any, int]:
    """The probe's Config (``config`` run for :data:`PROBE_STEPS` steps, one metrics row per step) and the train rows
    it needs: a trainer counted in epochs gets one epoch of ``PROBE_STEPS`` batches, one counted in steps (jax-bert)
    that many steps on ``rows``."""
    fields = _fields(config)
    change: dict[str, Any] = {}
    if "log_every" in fields:
        change["log_every"] = 1
    batch = getattr(config, "batch_size", None)
    if "epochs" in fields and isinstance(batch, int) and batch > 0:
        change["epochs"] = 1
        need = batch * PROBE_STEPS
        if "dataset_size" in fields:
            change["dataset_size"] = None
    else:
        change["steps"] = PROBE_STEPS
        if "warmup_steps" in fields and getattr(config, "warmup_steps", 0) >= PROBE_STEPS:
            change["warmup_steps"] = 0
        if "batch_schedule" in fields:
            change["batch_schedule"] = None
        need = rows
    return dataclasses.replace(config, **change), need


def evaluations(config: Any, steps: int) -> int:
    """Held-out evaluations a run of ``steps`` steps makes besides the last one (the skeleton's ``_after_step``):
    every ``eval_every`` steps (jax-bert), or at each epoch's end for a Config counted in ``epochs`` with no
    ``eval_every`` (the torch trainers: their loop evaluates every epoch's steps)."""
    every = getattr(config, "eval_every", None)
    if isinstance(every, int) and every > 0:
        return max(0, (steps - 1) // every)
    epochs = getattr(config, "epochs", None)
    return epochs - 1 if isinstance(epochs, int) and not isinstance(epochs, bool) and epochs > 1 else 0


def _read_windows(model_dir: Path) -> list[float]:
    """Seconds of each metrics row's window (its batch over its examples per second), in step order."""
    windows = []
    try:
        lines = (model_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        rate, batch = row.get("examples_per_s"), row.get("batch_size")
        if isinstance(rate, (int, float)) and rate > 0 and isinstance(batch, (int, float)):
            windows.append(float(batch) / float(rate))
    return windows


def probe_cost(
    trainer: Any,
    config: Any,
    data_dir: Path,
    out_dir: Path,
    *,
    seed: int,
    real: Any = None,
    real_rows: int | None = None,
) -> ProbeCost | None:
    """Train the probe (``config`` from :func:`probe_config`, data written by the caller) and measure it; None when
    its metrics hold too few per-step windows. With ``real`` (the models' Config) and ``real_rows``, the models' own
    privacy plan is made now and timed (:func:`_plan_now`)."""
    from dpaudit.training.privacy_plan import observed_plans, plan_privacy

    if getattr(config, "peft", None) == "lora" and importlib.util.find_spec("peft") is not None:
        import peft  # noqa: F401 - imported once per process: a cost the probe must not count as every model's

    wall0, cpu0 = time.perf_counter(), time.process_time()
    # the probe's plan (its own q and steps) is timed apart: not the models' cost
    with observed_plans() as calls:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):  # as the fleet's
            trainer.train(data_dir, out_dir, config, seed=seed)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    windows = _read_windows(out_dir)
    if len(windows) < 3:
        return None
    steady = windows[1:-1]
    step = sum(steady) / len(steady)
    evaluation = max(0.0, windows[-1] - step)
    # the first step's excess over a steady one (compiling the step: shared by every model of the same shapes in this
    # process, as jax-bert's) is the probe's alone, and so is its privacy plan
    fixed = max(0.0, wall - windows[0] - step * (len(windows) - 1) - evaluation - sum(t for _, t in calls))
    planning = (
        _plan_now(plan_privacy, calls[0][0], real, real_rows) if calls and real is not None and real_rows else None
    )
    return ProbeCost(
        step=step, evaluation=evaluation, fixed=fixed, wall=wall, cpu=cpu, steps=len(windows), planning=planning
    )


def _plan_now(plan_privacy: Any, probe_request: dict[str, Any], real: Any, rows: int) -> float | None:
    """Seconds of the models' own privacy plan, made now: the probe's request with the models' rows and epochs (a
    trainer counted in epochs, one stage of ceil(N / batch) steps per epoch, its noise decay over its epochs). The accountant keeps
    its results in this process, so the models reuse it instead of paying it each. None when the request is of
    another shape (the models then pay their plan, as the probe's own was not counted)."""
    from dpaudit.training.privacy_plan import decay_schedule

    epochs, batch = getattr(real, "epochs", None), getattr(real, "batch_size", None)
    if not (isinstance(epochs, int) and isinstance(batch, int) and batch > 0):
        return None
    if len(probe_request.get("stages") or ()) != 1:
        return None
    schedule = None
    if probe_request.get("noise_schedule") is not None:  # one sigma per epoch: the models' epochs
        decay = getattr(real, "noise_decay", None)
        if not isinstance(decay, str):
            return None
        rate, floor = getattr(real, "decay_rate", 0.0), getattr(real, "sigma_min", None)
        schedule = decay_schedule(decay, epochs=epochs, rate=rate, sigma_min=floor)
    size = getattr(real, "dataset_size", None) or rows
    request = dict(
        probe_request,
        dataset_size=rows,
        declared_size=getattr(real, "dataset_size", None),
        stages=[(math.ceil(size / batch), batch)] * epochs,
        noise_schedule=schedule,
    )
    start = time.perf_counter()
    try:
        plan_privacy(**request)
    except Exception:  # noqa: BLE001 - a plan the models would refuse themselves: they say so when they run
        return None
    return time.perf_counter() - start


def model_seconds(probe: ProbeCost, config: Any, steps: int) -> float:
    """Wall seconds of one model of ``steps`` steps under ``config`` (module docstring)."""
    return probe.fixed + steps * probe.step + (1 + evaluations(config, steps)) * probe.evaluation


def _seconds(value: float) -> str:
    """Seconds rounded up, to a tenth below 10 s (whole seconds would add up to a quarter to a few-second model)."""
    return f"{math.ceil(value * 10) / 10:.1f} s" if value < 10 else format_minutes(value)


def probe_lines(probe: ProbeCost, config: Any, steps: int, *, todo: int) -> list[str]:
    """The estimate's two lines: CPU and wall of ``todo`` models of ``steps`` steps, and how they were measured."""
    one = model_seconds(probe, config, steps)
    wall = todo * one
    cpu = wall * (probe.cpu / probe.wall if probe.wall > 0 else 1.0)
    plural = "s" if todo > 1 else ""
    plan = (
        f"; their privacy plan, made now in {math.ceil(probe.planning * 10) / 10:g} s, is reused by each"
        if probe.planning is not None
        else ""
    )
    return [
        f"estimated CPU time of {todo} shadow model{plural}: {_seconds(cpu)} ({_seconds(cpu / todo)} "
        f"each: measured on a {probe.steps}-step probe of the first one's recipe, which took "
        f"{_seconds(probe.wall)}: {probe.step * 1000:.0f} ms a step, {_seconds(probe.fixed)} start-up and "
        f"export{plan})",
        f"estimated wall time at the current load (measured now, one model after the other): about {_seconds(wall)}",
    ]


def remove_probe(path: Path) -> None:
    """The probe's folder, gone (it trained on rows of the target's data)."""
    shutil.rmtree(path, ignore_errors=True)
