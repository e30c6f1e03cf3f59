"""The cost said before the demo (and before shadow models train): the table prices every stage, the probe's speed
scales it the right way, the load lengthens the wall time, and a demo's measured training replaces the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpaudit.common import cost_model, resources
from dpaudit.common.cost_model import Work, estimate, shadow_lines, training_work
from dpaudit.demo import plan as demo_plan
from dpaudit.demo.cost import plan_work


@pytest.mark.parametrize("sizes", [demo_plan.QUICK, demo_plan.FULL], ids=["quick", "full"])
def test_every_stage_of_every_plan_is_priced(sizes, tmp_path):
    plan = demo_plan.build_plan(
        tmp_path / "d", sizes, seed=0, report=tmp_path / "r.html", classifiers=True, causal=True
    )
    works = plan_work(plan.stages, sizes)
    assert [w.kind for w in works].count("attack-shadows") == 3 and all(w.cpu(1.0) > 0 for w in works)
    lines = estimate(works, speed=1.0, load=0.0, cores=2).lines()
    assert lines[0].startswith("estimated CPU time: ") and "public pretraining" in lines[1]
    assert "DP MLM training" in lines[1] and "causal LM training" in lines[1] and "attacks with shadows" in lines[1]


def test_a_slower_probe_raises_the_estimate(monkeypatch):
    works = [Work("mlm-dp", units=1e6), Work("attack-shadows", units=1e3, shadows=2, trains=Work("classifier", 4e4))]
    monkeypatch.setattr(resources, "probe_seconds", lambda chunks=4: resources.REFERENCE_PROBE_SECONDS)
    same = estimate(works, load=0.0, cores=2)
    monkeypatch.setattr(resources, "probe_seconds", lambda chunks=4: 2 * resources.REFERENCE_PROBE_SECONDS)
    slower = estimate(works, load=0.0, cores=2)
    assert same.speed == pytest.approx(1.0) and slower.speed == pytest.approx(2.0)
    assert slower.cpu == pytest.approx(2 * same.cpu) and slower.wall == pytest.approx(2 * same.wall)
    assert "0.5x the reference machine's speed" in slower.lines()[0]


def test_the_probe_measures_this_machine():
    probe = resources.probe_seconds(chunks=1)
    assert 0 < probe < 60 and resources.speed_factor(probe) == pytest.approx(probe / resources.REFERENCE_PROBE_SECONDS)


def test_wall_time_grows_with_the_load():
    assert resources.wall_seconds(60.0, threads=1.5, load=0.0, cores=2) == pytest.approx(40.0)  # 1.5 cores free
    assert resources.wall_seconds(60.0, threads=1.0, load=0.0, cores=1) == pytest.approx(60.0)
    loaded = resources.wall_seconds(60.0, threads=1.5, load=4.5, cores=2)
    assert loaded == pytest.approx(60.0 / (2 * 1.5 / (resources.LOAD_WEIGHT * 4.5 + 1.5)))
    assert (
        estimate([Work("mlm", 1e6)], speed=1.0, load=6.0, cores=2).wall
        > estimate([Work("mlm", 1e6)], speed=1.0, load=1.0, cores=2).wall
    )


def test_shadow_models_cost_the_targets_measured_training(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(resources, "probe_seconds", lambda chunks=4: resources.REFERENCE_PROBE_SECONDS)
    config = {"trainer": "edp-sgd", "task": "classify", "mode": "dp-sgd", "batch_size": 32, "max_length": 32}
    table = training_work("edp-sgd", config, 38)
    assert table.kind == "classifier-dp" and table.units == 38 * 32 * 32
    assert training_work("jax-bert", {"non_private": True, "batch_size": 64, "max_length": 32}, 500).kind == "mlm"
    model = tmp_path / "model-clf-dp-sgd"
    model.mkdir()
    stages = [{"name": "train-clf-dp-sgd", "cpu_s": 30.0, "wall_s": 40.0, "skipped": False, "title": ""}]
    (tmp_path / cost_model.STAGE_TIMES).write_text(json.dumps({"quick": True, "stages": stages}))
    assert cost_model.measured_training(model) == 30.0
    lines = shadow_lines("edp-sgd", config, 38, todo=4, model_dir=model)
    assert lines[0].startswith("estimated CPU time of 4 shadow models: 2.") and "as its demo measured it" in lines[0]
    assert "estimated wall time at the current load" in lines[1]
    assert "from the measured table" in shadow_lines("edp-sgd", config, 38, todo=1)[0]


def test_attack_says_what_its_shadow_models_cost_before_training_them(
    mia_model, mia_data, tmp_path, monkeypatch, capfd
):
    """``dpaudit attack`` with a shadow attack prints the estimate before the first shadow trains (stopped right
    after it here: no model is trained)."""
    import dpaudit
    from dpaudit.attacks import shadow_models

    class Stop(Exception):
        pass

    def stop(path: Path) -> None:
        raise Stop

    monkeypatch.setattr(shadow_models, "private_dir", stop)  # called right after the estimate, before any training
    monkeypatch.setattr(resources, "probe_seconds", lambda chunks=4: resources.REFERENCE_PROBE_SECONDS)
    with pytest.raises(Stop):
        dpaudit.attack(
            mia_model,
            mia_data,
            ["shadow"],
            out=tmp_path / "a",
            shadow_models=2,
            shadow_cache=str(tmp_path / "c"),
            progress=False,
        )
    err = capfd.readouterr().err
    assert "shadow: estimated CPU time of 2 shadow models: " in err and "non-private MLM training" in err
    assert "shadow: estimated wall time at the current load" in err
    # --workers 2 prices two models at once and Ray's start through the fleet; without the fleet the models train one
    # after the other in this process, and are priced so
    pytest.importorskip("ray")
    for fleet, at_once in ((shadow_models._fleet(), True), (None, False)):
        monkeypatch.setattr(shadow_models, "_fleet", lambda fleet=fleet: fleet)
        with pytest.raises(Stop):
            dpaudit.attack(
                mia_model, mia_data, ["shadow"], out=tmp_path / f"w{at_once}", shadow_models=2,
                shadow_cache=str(tmp_path / "c"), progress=False, workers=2,
            )  # fmt: skip
        wall = next(line for line in capfd.readouterr().err.splitlines() if "estimated wall time" in line)
        assert ("2 models at once" in wall and "to start Ray" in wall) == at_once, wall
        assert at_once or "at once" not in wall


def test_parallel_workers_spread_the_shadow_models_wall_time(monkeypatch):
    """``--workers N``: N one-thread model processes at once; the wall is the CPU over min(N, models, free cores)."""
    monkeypatch.setattr(resources, "probe_seconds", lambda chunks=4: resources.REFERENCE_PROBE_SECONDS)
    monkeypatch.setattr(resources, "current_load", lambda: 0.0)
    monkeypatch.setattr(resources, "available_cores", lambda: 2)
    config = {"trainer": "edp-sgd", "task": "clm", "mode": "dp-sgd", "batch_size": 32, "max_length": 32, "epochs": 2}

    def minutes(line: str) -> float:
        number, unit = line.rsplit("about ", 1)[1].split(", up to ")[0].split()
        return float(number) * (1 if unit.startswith("min") else 1 / 60)

    def up_to(line: str) -> float:
        number, unit = line.split(", up to ")[1].split()[:2]
        return float(number) * (1 if unit.startswith("min") else 1 / 60)

    one = shadow_lines("edp-sgd", config, 24, todo=4)
    two = shadow_lines("edp-sgd", config, 24, todo=4, workers=2)
    assert one[0] == two[0] and "2 models at once" in two[1] and "at once" not in one[1]
    assert minutes(two[1]) == pytest.approx(minutes(one[1]) / 2, rel=0.1)
    assert shadow_lines("edp-sgd", config, 24, todo=1, workers=4)[1] == shadow_lines("edp-sgd", config, 24, todo=1)[1]
    # at load 20 the load average counts many competing threads; a speed probe that got a whole core of 2 says at
    # most one competes: the two workers then share 2 cores with 1 other, 4/3 of a core in all
    monkeypatch.setattr(resources, "current_load", lambda: 20.0)
    busy = shadow_lines("edp-sgd", config, 24, todo=4, workers=2)
    probed = shadow_lines("edp-sgd", config, 24, todo=4, workers=2, share=1.0)
    assert minutes(probed[1]) == pytest.approx(minutes(two[1]) * 2 / (4 / 3), rel=0.15)
    assert minutes(busy[1]) > 3 * minutes(two[1])
    # the other reading, the load average's, is the "up to"; one reading alone has none
    assert "up to" not in busy[1] and up_to(probed[1]) == pytest.approx(minutes(busy[1]), rel=0.1)
    assert probed[1].endswith("if the workers get only the load average's share")
    # a probe that got a fifth of a core on an idle-looking machine (work of a higher priority): "about" the load
    # average's, "up to" the probe's (on 2 cores, 9 others beside the 2 workers: 2 x 2 / 11 of a core in all)
    monkeypatch.setattr(resources, "current_load", lambda: 0.0)
    starved = shadow_lines("edp-sgd", config, 24, todo=4, workers=2, share=0.2)
    assert minutes(starved[1]) == pytest.approx(minutes(two[1]), rel=0.1)
    assert up_to(starved[1]) == pytest.approx(minutes(two[1]) * 2 / (4 / 11), rel=0.15)
    assert starved[1].endswith("if the workers get only the speed probe's share")
    assert "the speed probe got 0.20 of a core, 2 models at once" in starved[1] and "probe got" not in two[1]
    monkeypatch.setattr(resources, "current_load", lambda: 0.0)
    ray = shadow_lines("edp-sgd", config, 24, todo=4, workers=2, start_wall=8.0)
    assert "8 s to start Ray" in ray[1] and minutes(ray[1]) == pytest.approx(minutes(two[1]) + 8 / 60, rel=0.1)
