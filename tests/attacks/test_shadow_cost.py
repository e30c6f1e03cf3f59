"""The shadow models' estimate measured on a probe (dpaudit.attacks.shadow_cost): its structure, on a fake trainer.

No wall-clock assert: the fake trainer writes known per-step windows (batch / examples per second) and returns at
once; the estimate is then linear in the models' steps and count, the evaluations ``eval_every`` adds are priced, the
probe's config runs one epoch of PROBE_STEPS batches (or that many steps), and the decision to probe follows the
table's price and the target's size. How close the estimate comes on real trainings is benchmarks/
bench_lora_shadows.py's to say.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from dpaudit.attacks import shadow_cost
from dpaudit.attacks.shadow_cost import PROBE_STEPS, ProbeCost, model_seconds, probe_config, probe_cost, probe_lines


@dataclass(frozen=True)
class EpochConfig:
    epochs: int = 3
    batch_size: int = 32
    log_every: int = 10
    dataset_size: int | None = 5000
    eval_every: int | None = None


@dataclass(frozen=True)
class StepConfig:
    steps: int = 500
    batch_size: int = 64
    log_every: int = 10
    warmup_steps: int = 50
    batch_schedule: str | None = "64:100,128:400"
    eval_every: int = 100


class FakeTrainer:
    """Writes a metrics row per step: batch 10 at 100 examples/s (0.1 s), the first at 10/s (1 s: a compile), the
    last at 10/6 per s (6 s: a step and a 5 s evaluation)."""

    def train(self, data_dir: Path, out_dir: Path, config, *, seed: int) -> None:
        out_dir.mkdir(parents=True)
        rates = [10.0] + [100.0] * (PROBE_STEPS - 2) + [10 / 6]
        rows = [{"step": i + 1, "batch_size": 10, "examples_per_s": r} for i, r in enumerate(rates)]
        (out_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_probe_measures_a_step_an_evaluation_and_the_rest(tmp_path):
    probe = probe_cost(FakeTrainer(), EpochConfig(), tmp_path / "data", tmp_path / "model", seed=0)
    assert probe is not None and probe.steps == PROBE_STEPS
    assert probe.step == pytest.approx(0.1) and probe.evaluation == pytest.approx(5.9)
    assert probe.fixed == 0.0  # the fake returned at once: never negative


def test_the_estimate_is_linear_in_steps_and_models_and_prices_evaluations():
    probe = ProbeCost(step=0.5, evaluation=3.0, fixed=10.0, wall=20.0, cpu=30.0, steps=PROBE_STEPS)
    config = EpochConfig()
    one, two = model_seconds(probe, config, 100), model_seconds(probe, config, 200)
    # a Config counted in epochs evaluates at each epoch's end (the torch loop's eval_every is an epoch's steps)
    assert one == pytest.approx(10.0 + 50.0 + 3 * 3.0) and two - one == pytest.approx(100 * 0.5)
    no_eval_every = dataclasses.make_dataclass("TorchConfig", [("epochs", int), ("batch_size", int)])(2, 32)
    assert model_seconds(probe, no_eval_every, 100) == pytest.approx(10.0 + 50.0 + 2 * 3.0)
    assert model_seconds(probe, StepConfig(), 500) == pytest.approx(10.0 + 250.0 + 5 * 3.0)  # 4 more evaluations

    def seconds(line: str) -> float:
        figure = line.split(": ")[1].split(" (")[0] if "CPU" in line else line.rsplit("about ", 1)[1]
        number, unit = figure.split()
        return float(number) * (60 if unit.startswith("min") else 1)

    small = ProbeCost(step=0.1, evaluation=1.0, fixed=2.0, wall=4.0, cpu=6.0, steps=PROBE_STEPS)  # 15 s a model
    lines1, lines4 = (probe_lines(small, config, 100, todo=k) for k in (1, 4))
    assert seconds(lines1[1]) == 15 and seconds(lines4[1]) == 60  # wall: k models, one after the other
    assert seconds(lines1[0]) == 23  # CPU: the wall times the probe's CPU / wall (22.5, rounded up)
    tenth = probe_lines(
        ProbeCost(step=0.01, evaluation=0.1, fixed=1.0, wall=2.0, cpu=2.0, steps=6), config, 100, todo=1
    )
    assert seconds(tenth[1]) == pytest.approx(2.3)  # below 10 s: to a tenth, rounded up
    assert "6-step probe" in lines1[0] and "100 ms a step" in lines1[0]


def test_the_probe_config_runs_probe_steps_batches_one_row_each():
    config, rows = probe_config(EpochConfig(), 10_000)
    assert (config.epochs, config.log_every, config.dataset_size, config.batch_size) == (1, 1, None, 32)
    assert rows == 32 * PROBE_STEPS
    config, rows = probe_config(StepConfig(), 700)
    assert (config.steps, config.warmup_steps, config.batch_schedule, config.log_every) == (PROBE_STEPS, 0, None, 1)
    assert rows == 700


def test_a_probe_runs_for_costly_or_large_models_only(tmp_path):
    assert shadow_cost.worth_probing(shadow_cost.PROBE_ABOVE_CPU_S, None)
    assert not shadow_cost.worth_probing(5.0, None)
    small = tmp_path / "small"
    small.mkdir()
    (small / "model.safetensors").write_bytes(b"0" * 1000)
    assert not shadow_cost.worth_probing(5.0, small)
    large = tmp_path / "large"
    large.mkdir()
    with open(large / "model.safetensors", "wb") as f:
        f.truncate(shadow_cost.PROBE_ABOVE_WEIGHT_BYTES + 1)  # sparse: no bytes written
    assert shadow_cost.worth_probing(5.0, large)


def test_models_trained_in_this_process_pay_no_process_start_up():
    """The in-process table: fixed + per token (x LoRA's factor), x speed, k models one after the other; none of the
    measured table's per-process start-up (a few CPU seconds a model, more than a tiny shadow's whole training)."""
    from dpaudit.common.cost_model import RATES, training_work

    config = {"task": "clm", "mode": "dp-sgd", "batch_size": 32, "max_length": 32}
    one = training_work("edp-sgd", config, 24)
    rate = shadow_cost.IN_PROCESS["causal-dp"]
    cpu, _ = shadow_cost.in_process_cpu("edp-sgd", config, 24)
    assert cpu == pytest.approx(rate.fixed + rate.per_unit * one.units)
    lora, _ = shadow_cost.in_process_cpu("edp-sgd", {**config, "peft": "lora"}, 24)
    assert lora - rate.fixed == pytest.approx(rate.lora * (cpu - rate.fixed)) and lora < cpu
    private, _ = shadow_cost.in_process_cpu("edp-sgd", {**config, "mode": "sgd"}, 24)
    assert private < cpu  # sgd: no per-example clipping
    assert cpu < RATES["causal-dp"].fixed + RATES["shadow"].fixed  # under the table's start-up alone
    assert shadow_cost.in_process_cpu("jax-bert", {"batch_size": 32, "max_length": 32}, 24) is None

    def seconds(line: str) -> float:
        figure = line.split(": ")[1].split(" (")[0] if "CPU" in line else line.rsplit("about ", 1)[1]
        number, unit = figure.split()
        return float(number) * (60 if unit.startswith("min") else 1)

    each = cpu  # about a second: the lines say it to a tenth (rounded up)
    one_line = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=1, speed=2.0, load=0.0, cores=2)
    four = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=4, speed=2.0, load=0.0, cores=2)
    assert one_line is not None and four is not None
    assert seconds(one_line[0]) == pytest.approx(2 * each, abs=0.1) and seconds(four[0]) == pytest.approx(
        8 * each, rel=0.02
    )
    assert seconds(four[1]) == pytest.approx(seconds(four[0]), abs=0.1)  # a free machine: one core, wall = CPU
    loaded = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=4, speed=2.0, load=10.0, cores=2)
    assert loaded is not None and seconds(loaded[1]) > 2 * seconds(four[1])  # shared cores: longer
    assert "training in this process" in four[0] and "(10.0 on 2 cores)" in loaded[1]


def test_in_process_models_are_priced_their_held_out_evaluations():
    """One evaluation per epoch, one more before a private run from a start; each of up to ``eval_examples`` rows;
    priced per held-out token by the kind's rate (tests/attacks/test_shadow_evaluations.py counts them on real runs)."""
    config = {"task": "clm", "mode": "dp-sgd", "batch_size": 32, "max_length": 32, "epochs": 2, "eval_examples": 512}
    assert shadow_cost.in_process_evaluations(config, 918) == (2, 512)
    assert shadow_cost.in_process_evaluations({**config, "init_from": "start"}, 40) == (3, 40)
    assert shadow_cost.in_process_evaluations({**config, "init_from": "start", "mode": "sgd"}, 40) == (2, 40)
    assert shadow_cost.in_process_evaluations({**config, "eval_examples": 0}, 40) == (0, 0)
    assert shadow_cost.in_process_evaluations(config, 0) == (0, 0)
    cpu, _ = shadow_cost.in_process_cpu("edp-sgd", config, 24)
    with_rows, _ = shadow_cost.in_process_cpu("edp-sgd", config, 24, heldout_rows=918)
    assert with_rows - cpu == pytest.approx(shadow_cost.IN_PROCESS["causal-dp"].evaluation * 2 * 512 * 32)
    lines = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=4, heldout_rows=918, speed=1.0, load=0.0, cores=2)
    assert lines is not None and "2 held-out evaluations of 512 rows" in lines[0]


def test_the_in_process_wall_time_is_the_cpu_over_the_share_of_a_core_between_the_probes_and_the_loads(monkeypatch):
    """Given a share, the wall time is the CPU over it (the load average then only said); with nothing given, the
    speed comes from one timed speed probe (:func:`shadow_cost.timed_speed`), "about" from the larger of its share
    and the load average's and "up to" from the smaller, when they differ by more than 10%."""
    config = {"task": "clm", "mode": "dp-sgd", "batch_size": 32, "max_length": 32, "epochs": 2}

    def figure(text: str) -> float:
        number, unit = text.split()
        return float(number) * (60 if unit.startswith("min") else 1)

    def wall(lines: list[str]) -> float:
        return figure(lines[1].rsplit("about ", 1)[1])

    def cpu(lines: list[str]) -> float:
        return figure(lines[0].split(": ")[1].split(" (")[0])

    half = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=8, speed=1.0, share=0.5, load=9.0, cores=2)
    assert half is not None and wall(half) == pytest.approx(2 * cpu(half), rel=0.05)
    assert "0.50 of a core" in half[1] and "(9.0 on 2 cores" in half[1]
    from dpaudit.common import resources

    monkeypatch.setattr(resources, "probe_seconds", lambda: 2 * resources.REFERENCE_PROBE_SECONDS)  # no work: instant
    speed, share = shadow_cost.timed_speed()
    assert speed == pytest.approx(2.0) and shadow_cost.MIN_SHARE <= share <= 1.0
    monkeypatch.setattr(shadow_cost, "timed_speed", lambda: (2.0, 0.25))
    # the load average's share is lower: "about" is the probe's
    monkeypatch.setattr(resources, "current_load", lambda: 20.0)
    measured = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=8, cores=2)
    assert measured is not None and "x2 for this machine's speed" in measured[0]
    assert "got 0.25 of a core on the speed probe, the load average leaves it 0.1" in measured[1]
    about, up_to = measured[1].rsplit("about ", 1)[1].split(", up to ")
    assert figure(about) == pytest.approx(4 * cpu(measured), rel=0.05)
    # the smaller share (the load average's: 2 cores among 0.67 x 20 threads and this one) gives the "up to"
    assert up_to.endswith("if it gets only the load average's share")
    share = shadow_cost.load_share(20.0, 2)
    assert figure(" ".join(up_to.split()[:2])) == pytest.approx(cpu(measured) / share, rel=0.05)
    # a quiet machine (load 0.3) where the probe was preempted: the load average's share, a whole core, is "about",
    # and the probe's the "up to"
    monkeypatch.setattr(resources, "current_load", lambda: 0.3)
    quiet = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=8, cores=2)
    assert quiet is not None and "the load average leaves it 1.00" in quiet[1]
    about, up_to = quiet[1].rsplit("about ", 1)[1].split(", up to ")
    assert figure(about) == pytest.approx(cpu(quiet), rel=0.05) and up_to.endswith("only the probe's share")
    # two readings within 10% of each other: one figure
    monkeypatch.setattr(shadow_cost, "timed_speed", lambda: (2.0, 0.97))
    agreed = shadow_cost.in_process_lines("edp-sgd", config, 24, todo=8, cores=2)
    assert agreed is not None and "up to" not in agreed[1] and wall(agreed) == pytest.approx(cpu(agreed), rel=0.05)
