"""The model fleet (dpaudit.fleet.fleet): real edp-sgd models trained on a local Ray instance with 2
workers and in the process pool; the cache (a finished model is never trained twice, an interrupted one
resumes from its checkpoint, one out_dir trains once); a failing job's error; max_minutes.

One Ray instance for the module (starting one takes seconds); each job is the contract suite's tiny
edp-sgd classifier (6 steps) on the session's tiny inject directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from dpaudit.common.errors import UserInputError
from dpaudit.fleet.fleet import FleetJob, finished_run_dir, run_fleet


class Killed(BaseException):
    """Stands in for SIGKILL: not an Exception, so nothing catches it on the way out."""


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance with 2 CPUs, shared by the module; run_fleet uses it (and leaves it running)."""
    ray = pytest.importorskip("ray")  # the `fleet` extra (in `all`, so CI has it)
    from dpaudit.fleet.fleet import local_ray_options

    ray.init(**local_ray_options(2), logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


def test_the_local_ray_workers_run_at_the_callers_priority(local_ray):
    """Ray's default puts its workers 15 nice levels below the driver: on a shared machine anything else then
    outranks the models. The fleet's local instance keeps them at this process's priority."""

    @local_ray.remote
    def niceness() -> int:
        return os.nice(0)

    assert local_ray.get(niceness.remote()) == os.nice(0)


def _job(data_dir: Path, out: Path, seed: int, label: str, **overrides) -> FleetJob:
    from dpaudit.training.api import load_trainer

    config = dataclasses.asdict(load_trainer("edp-sgd").tiny_config(**overrides))
    return FleetJob(trainer="edp-sgd", config=config, data_dir=data_dir, out_dir=out, seed=seed, label=label)


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def _interrupted(job: FleetJob, monkeypatch) -> None:
    """Train ``job`` here until its checkpoint at step 2 is on disk, then "kill" it (nothing after it runs)."""
    from dpaudit.trainers.torch_common import checkpoint as ckpt
    from dpaudit.training.api import load_trainer

    real_save = ckpt.save_checkpoint

    def save_then_die(directory, *, step, **kwargs):
        path = real_save(directory, step=step, **kwargs)
        if step == 2:
            raise Killed()
        return path

    trainer = load_trainer(job.trainer)
    with monkeypatch.context() as patch:
        patch.setattr(ckpt, "save_checkpoint", save_then_die)
        with pytest.raises(Killed):
            trainer.train(job.data_dir, job.out_dir, trainer.Config(**job.config), seed=job.seed)
    assert (job.out_dir / "checkpoints").is_dir() and not finished_run_dir(job.out_dir)


@pytest.fixture(scope="module")
def ray_fleet(local_ray, data_dir, tmp_path_factory):
    """One fleet on Ray (2 workers): a new model, an interrupted one, and the new one again (same out_dir)."""
    root = tmp_path_factory.mktemp("fleet")
    fresh = _job(data_dir, root / "a", 1, "shadow 1/3")
    resumed = _job(data_dir, root / "b", 2, "shadow 2/3", checkpoint_every=2)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _interrupted(resumed, monkeypatch)
    again = dataclasses.replace(fresh, label="shadow 3/3")
    outcomes = run_fleet([fresh, resumed, again], workers=2, engine="ray", progress=False)
    return root, [fresh, resumed, again], outcomes


def test_ray_fleet_trains_resumes_and_trains_one_out_dir_once(ray_fleet):
    root, jobs, outcomes = ray_fleet
    assert [o.job for o in outcomes] == jobs
    assert [o.cached for o in outcomes] == [False, False, True]  # the third shares the first's out_dir
    assert outcomes[0].seconds > 0 and outcomes[2].seconds == 0
    assert all(o.peak_rss_mb > 50 for o in outcomes[:2])  # measured in the worker process
    for job in jobs:
        assert finished_run_dir(job.out_dir)
    summary = json.loads((root / "b" / "manifest.json").read_text())["summary"]
    assert summary["resumed_from_step"] == 2  # not retrained from scratch
    assert json.loads((root / "a" / "manifest.json").read_text())["summary"]["resumed_from_step"] is None
    assert sorted(p.name for p in root.iterdir()) == ["a", "b"]  # no staging or lock files left beside them


def test_a_second_call_trains_nothing(ray_fleet, capfd):
    root, jobs, _ = ray_fleet
    before = _files(root)
    capfd.readouterr()
    outcomes = run_fleet(jobs, workers=2, engine="ray", desc="shadow models")
    assert [o.cached for o in outcomes] == [True, True, True] and all(o.seconds == 0 for o in outcomes)
    assert _files(root) == before
    err = capfd.readouterr().err.splitlines()  # not a terminal: one plain line per model, no carriage returns
    assert err == [f"shadow models {n}/3: cached ({job.label}: {job.out_dir})" for n, job in enumerate(jobs, start=1)]


def test_the_process_pool_trains_the_same_model_config(ray_fleet, tmp_path):
    """The same job as Ray's (and a second one, which the one worker trains after it in the same process)."""
    root, jobs, _ = ray_fleet
    same = dataclasses.replace(jobs[0], out_dir=tmp_path / "a", label="process 1/2")
    other = dataclasses.replace(jobs[0], out_dir=tmp_path / "c", seed=4, label="process 2/2")
    outcomes = run_fleet([same, other], workers=1, engine="process", progress=False)
    assert [o.job for o in outcomes] == [same, other] and not any(o.cached for o in outcomes)
    assert finished_run_dir(same.out_dir) and finished_run_dir(other.out_dir)
    ours, ray_s = (json.loads((d / "manifest.json").read_text()) for d in (same.out_dir, root / "a"))
    assert ours["config"] == ray_s["config"] and ours["seed"] == ray_s["seed"] == 1


def test_a_failing_job_names_its_label_and_cancels_the_rest(local_ray, data_dir, tmp_path):
    slow = _job(data_dir, tmp_path / "slow", 3, "shadow 1/2", epochs=50)
    bad = dataclasses.replace(slow, trainer="no-such-trainer", out_dir=tmp_path / "bad", label="shadow 2/2")
    with pytest.raises(UserInputError, match=r"^shadow 2/2: --trainer 'no-such-trainer' is not a registered trainer"):
        run_fleet([bad, slow], workers=2, engine="ray", progress=False)  # the bad one first: it fails at once
    assert not finished_run_dir(slow.out_dir) and not finished_run_dir(bad.out_dir)
    leftovers = {p.name for p in tmp_path.iterdir()} - {"slow"}  # an interrupted model may keep its checkpoints
    assert leftovers == set(), leftovers


def test_max_minutes_starts_nothing_new_once_a_model_exists(ray_fleet, data_dir, tmp_path):
    _, jobs, _ = ray_fleet
    new = [_job(data_dir, tmp_path / f"n{i}", 10 + i, f"new {i}") for i in range(2)]
    outcomes = run_fleet([jobs[0], *new], workers=2, engine="process", progress=False, max_minutes=0)
    assert [o.job for o in outcomes] == [jobs[0]] and outcomes[0].cached
    assert not any(p.exists() for p in (tmp_path / "n0", tmp_path / "n1"))


def test_bad_options_are_one_line_errors(tmp_path):
    with pytest.raises(UserInputError, match="engine 'spark'"):
        run_fleet([], engine="spark")
    with pytest.raises(UserInputError, match="--workers must be >= 1"):
        run_fleet([], workers=0)


def test_a_worker_past_its_memory_bound_stops_with_its_label(local_ray, data_dir, tmp_path):
    """The watchdog stops a job whose worker's resident memory passes the bound (here 50 MiB: any Python with
    torch is past it within its first half second). The watchdog is the worker's own code, whatever the engine; the
    process pool runs it here (in one full-suite run under load a Ray worker finished this tiny job before the
    interrupt landed)."""
    job = _job(data_dir, tmp_path / "m", 5, "shadow 1/1")
    with pytest.raises(UserInputError, match=r"^shadow 1/1: its worker passed its memory bound \(.* > 0\.05 GiB\)"):
        run_fleet([job], workers=1, engine="process", progress=False, worker_memory_gb=0.05)
    assert not finished_run_dir(job.out_dir)


def abort_when_interrupted(job) -> None:
    """A fleet runner that holds memory and, when the watchdog's interrupt lands, aborts the process the way an
    interrupt inside native code can (SIGABRT, no result sent back)."""
    try:
        held = b"\x01" * (1536 << 20)  # every page touched: past the 1 GiB bound (torch alone is well below it)
        for _ in range(300):  # short sleeps: an interrupt_main lands between bytecodes, not inside one sleep
            time.sleep(0.1)
        del held
    except KeyboardInterrupt:
        os.abort()


def test_a_worker_that_aborts_past_its_memory_bound_is_still_named_as_past_it(data_dir, tmp_path):
    """The watchdog records what it saw before interrupting: a worker that dies of the interrupt (exit code -6) is
    reported as past its memory bound, not as an unexplained death."""
    job = dataclasses.replace(
        _job(data_dir, tmp_path / "m", 5, "shadow 1/1"), runner="tests.fleet.test_fleet:abort_when_interrupted"
    )
    with pytest.raises(
        UserInputError,
        match=r"^shadow 1/1: its worker passed its memory bound \(.* > 1 GiB\).*"
        r"exit code -6\)$",
    ):
        run_fleet([job], workers=1, engine="process", progress=False, worker_memory_gb=1.0)


def test_the_fleet_says_what_starting_it_costs_before_the_first_model():
    """A shadow estimate adds the local Ray instance's start to the models' wall time; inline and a cluster add 0."""
    pytest.importorskip("ray")
    from dpaudit.fleet.fleet import LOCAL_RAY_START_WALL_S, start_wall_seconds

    assert start_wall_seconds(2, 4, None) == LOCAL_RAY_START_WALL_S > 0
    assert start_wall_seconds(1, 4, None) == 0.0 and start_wall_seconds(2, 1, None) == 0.0  # inline
    assert start_wall_seconds(2, 4, "127.0.0.1:6379") == 0.0
