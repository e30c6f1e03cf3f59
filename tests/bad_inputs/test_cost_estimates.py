"""Long work says what it will cost before it starts, refuses what cannot fit the machine, and shows progress.

``dpaudit audit-trainer --canaries 1000000`` (edp-sgd) ran into the fleet workers' memory watchdog after its
training, or ran for minutes with no estimate; ``dpaudit inject --coin-flip --per-frequency 1000000 --design
new-tokens --force`` ran for minutes silently. No test runs a big case: the refusals are made to fire with a machine
made small (its free memory or disk replaced), and the work after them replaced by a tripwire, so each test shows
that the refusal comes before any work; a small case prints the estimate with its threshold lowered.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError

INJECT = ["inject", "--corpus", "builtin:assistant", "--coin-flip", "--design", "new-tokens", "--force"]


def _stderr(result) -> str:
    return getattr(result, "stderr", None) or result.output


def _one_line(result, *needles: str) -> str:
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def no_drawing(monkeypatch):
    """A tripwire: drawing any secret fails the test (the refusal must come first)."""
    import dpaudit.canaries.pipeline as pipeline

    def tripwire(*args, **kwargs):
        raise AssertionError("secrets were drawn before the refusal")

    monkeypatch.setattr(pipeline, "draw_secrets", tripwire)


# -- inject -----------------------------------------------------------------------------------------------------


def test_inject_too_big_for_memory_is_refused_before_any_draw(tmp_path, monkeypatch, no_drawing):
    from dpaudit.common import resources

    room = resources.resident_bytes() + 200_000_000  # a machine with 0.2 GB free beyond what this process holds
    monkeypatch.setattr(resources, "available_memory", lambda: room)
    out = tmp_path / "data"
    line = _one_line(
        CliRunner().invoke(cli, [*INJECT, "--per-frequency", "1000000", "--out", str(out)]),
        "--per-frequency: 1,000,000 canaries need about",
        "GB of memory and",
        "is available here",
        "use at most about",
    )
    fit = int(line.split("use at most about ")[1].split(" canaries")[0].replace(",", ""))
    assert 0 < fit < 1_000_000
    assert list(tmp_path.iterdir()) == []


def test_inject_too_big_for_the_disk_is_refused_before_any_draw(tmp_path, monkeypatch, no_drawing):
    from dpaudit.common import resources

    monkeypatch.setattr(resources, "free_disk", lambda out: 1_000_000)
    out = tmp_path / "data"
    _one_line(
        CliRunner().invoke(cli, [*INJECT, "--per-frequency", "200000", "--out", str(out)]),
        f"--out {out}: the inject writes about",
        "1 MB is free there",
    )
    assert list(tmp_path.iterdir()) == []


def test_inject_canary_share_is_refused_before_any_draw(tmp_path, no_drawing):
    """Without --force, a training set that is mostly canaries was refused only after every secret was drawn."""
    out = tmp_path / "data"
    args = [a for a in INJECT if a != "--force"]
    result = CliRunner().invoke(cli, [*args, "--per-frequency", "200000", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "--force" in result.output
    assert list(tmp_path.iterdir()) == []


def test_inject_states_time_memory_and_vocabulary_growth_first(tmp_path, monkeypatch):
    import dpaudit.canaries.cost as cost

    monkeypatch.setattr(cost, "SAY_NEW_TOKENS", 10)  # the threshold lowered: a small case says it too
    out = tmp_path / "data"
    result = CliRunner().invoke(cli, [*INJECT, "--per-frequency", "40", "--out", str(out)])
    assert result.exit_code == 0, result.output
    said = [line for line in _stderr(result).splitlines() if line.startswith("inject: 40 canaries")]
    assert len(said) == 1, _stderr(result)
    assert "of memory" in said[0] and "of files" in said[0] and "about" in said[0]
    assert "the vocabulary gains 40 declared new tokens" in said[0] and "embedding rows" in said[0]
    declared = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["new_tokens"]
    assert len(declared) == 40  # the estimate's count is the manifest's


def test_inject_is_quiet_when_the_work_is_small(tmp_path):
    result = CliRunner().invoke(cli, [*INJECT, "--per-frequency", "40", "--out", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    assert not any(line.startswith("inject: ") for line in _stderr(result).splitlines())


def test_inject_shows_progress_in_a_log(tmp_path, monkeypatch):
    """Off a terminal the bars print plain lines (every LOG_INTERVAL_S seconds; here at once): the draws and the
    rows written (tqdm alone printed nothing off a terminal)."""
    import dpaudit.common.progress

    monkeypatch.setattr(dpaudit.common.progress, "LOG_INTERVAL_S", 0.0)
    result = CliRunner().invoke(cli, [*INJECT, "--per-frequency", "3000", "--out", str(tmp_path / "data")])
    assert result.exit_code == 0, result.output
    err = _stderr(result)
    for desc in ("drawing secrets", "train.jsonl", "canaries.jsonl"):
        assert f"{desc}: 100%" in err, (desc, err[-2000:])


def test_inject_estimate_is_an_upper_bound_of_a_real_run(tmp_path):
    """The figures of a measured case: 1,000,000 new-token canaries took 105 s, 2.5 GB and wrote 0.82 GB here."""
    from dpaudit.canaries.cost import describe, estimate

    cost = estimate(
        canaries=1_000_000,
        canary_rows=500_000,
        text_chars=280,
        corpus_rows=20_000,
        corpus_chars=700_000,
        new_tokens=1_000_000,
        base_bytes=60_000_000,
    )
    assert cost.memory_bytes >= 2.5e9 and cost.disk_bytes >= 0.8e9 and cost.seconds >= 105
    assert cost.memory_bytes <= 4e9 and cost.seconds <= 600  # and not absurdly so
    assert "about 3 min" in describe(cost)


def test_draws_are_the_same_whatever_the_batch(monkeypatch):
    """Smaller candidate batches (the needed count + 1/8, not 2x) choose the same secrets: the first usable ones of
    the stream, in order."""
    import numpy as np

    from dpaudit.canaries.generate import draw_secrets
    from dpaudit.inject_dir.secret_spaces import digit_space

    space = digit_space(3)
    taken = {" ".join(f"{i:03d}") for i in range(0, 1000, 3)}  # a third of the secrets occur: many rejections
    corpus = [f"call {secret} now" for secret in sorted(taken)]
    chosen, rejected = draw_secrets(space, 300, rng=np.random.default_rng(5), corpus_texts=corpus)
    stream = space.draws(np.random.default_rng(5))
    expected, skipped = [], 0
    while len(expected) < 300:
        draw = next(stream)
        if draw.secret in taken:
            skipped += 1
            continue
        expected.append(draw.secret)
    assert rejected > 100  # several batches
    assert [d.secret for d in chosen] == expected and rejected == skipped


# -- audit-trainer ----------------------------------------------------------------------------------------------


@pytest.fixture
def no_runs(monkeypatch):
    """A tripwire: starting the audit's runs fails the command (the refusal must come first)."""
    import dpaudit.whitebox.audit as audit

    def tripwire(*args, **kwargs):
        raise UserInputError("tripwire: the runs started")

    monkeypatch.setattr(audit, "audit_trainer", tripwire)


def test_audit_run_above_the_worker_bound_is_refused_before_any_run(tmp_path, no_runs, monkeypatch):
    monkeypatch.delenv("DPAUDIT_WORKER_MEMORY_GB", raising=False)
    out = tmp_path / "audit"
    _one_line(
        CliRunner().invoke(
            cli, ["audit-trainer", "--trainer", "edp-sgd", "--out", str(out), "--canaries", "1000000", "--workers", "2"]
        ),
        "--canaries 1,000,000: each run needs about",
        "above the workers' memory bound of 2 GiB",
        "DPAUDIT_WORKER_MEMORY_GB=",
        "use at most about",
    )
    assert list(tmp_path.iterdir()) == []


def test_audit_too_big_for_this_machine_is_refused_before_any_run(tmp_path, no_runs, monkeypatch):
    import types

    import dpaudit.whitebox.cost as cost
    from dpaudit.common import resources

    # a 1 GB machine, as the audit's own check sees it (its built-in inject, checked by the same module, fits anyway)
    machine = types.SimpleNamespace(**{name: getattr(resources, name) for name in resources.__all__})
    machine.available_memory = lambda: 1e9
    monkeypatch.setattr(cost, "resources", machine)
    out = tmp_path / "audit"
    _one_line(
        CliRunner().invoke(
            cli,
            [
                "audit-trainer",
                "--trainer",
                "edp-sgd",
                "--set",
                "mode=dp-sgd",
                "--out",
                str(out),
                "--canaries",
                "1000000",
            ],
        ),
        "--canaries 1,000,000 x --runs 1: the audit needs about",
        "1.0 GB is available here",
        "use at most about",
    )
    assert list(tmp_path.iterdir()) == []


def test_audit_states_its_cost_before_the_first_run(tmp_path, no_runs, monkeypatch):
    import dpaudit.whitebox.cost as cost

    monkeypatch.setattr(cost, "SAY_SECONDS", 0.0)  # the threshold lowered: a small case says it too
    result = CliRunner().invoke(
        cli,
        [
            "audit-trainer",
            "--trainer",
            "edp-sgd",
            "--set",
            "mode=dp-sgd",
            "--out",
            str(tmp_path / "audit"),
            "--canaries",
            "100",
            "--runs",
            "3",
        ],
    )
    _one_line(result, "tripwire: the runs started")
    said = [line for line in _stderr(result).splitlines() if line.startswith("audit-trainer: 100 canaries")]
    assert len(said) == 1, _stderr(result)
    assert " x 3 runs of " in said[0] and "per run" in said[0] and "pooled analysis" in said[0]
    # then the CPU time from the measured table, scaled by this machine's probe, and the wall time at this load
    lines = _stderr(result).splitlines()
    cpu = next(i for i, line in enumerate(lines) if line.startswith("estimated CPU time: "))
    assert "0.5 s probe" in lines[cpu] and "further runs" in lines[cpu + 1]
    assert lines[cpu + 2].startswith("estimated wall time at the current load (")


def test_audit_cost_model_matches_the_measured_runs():
    """The measured cases (one run, 6 steps): a million micro-batch canaries peaked at 2.52 GB (above a 2 GiB worker:
    refused there), 400,000 per-example ones at 0.94 GB; a million per-example canaries fit a 2 GiB worker."""
    from dpaudit.whitebox.cost import check_fits, estimate

    big = estimate(canaries=1_000_000, runs=1, steps=6, partners=16)
    assert 2.52e9 <= big.run_bytes <= 3.2e9 and big.seconds >= 226
    with pytest.raises(UserInputError, match="DPAUDIT_WORKER_MEMORY_GB=2.5"):
        check_fits(big, fleet=True, worker_memory_gb=2.0, available=64e9)
    check_fits(big, fleet=True, worker_memory_gb=3.0, available=64e9)
    per_example = estimate(canaries=400_000, runs=1, steps=6, partners=0)
    assert 0.94e9 <= per_example.run_bytes <= 1.3e9 and per_example.seconds >= 188
    check_fits(
        estimate(canaries=1_000_000, runs=1, steps=6, partners=0), fleet=True, worker_memory_gb=2.0, available=64e9
    )
    pooled = estimate(canaries=100_000, runs=20, steps=6, partners=0)
    assert pooled.peak_bytes >= 2.2e9  # 20 runs of 100,000 pooled: 2.2 GB measured


@pytest.mark.parametrize(
    ("jax", "canaries", "runs", "partners", "measured"),
    [  # process CPU (user + sys) of dpaudit audit-trainer, 4 steps, on the project's 2-core machine
        (False, 1_000, 1, 16, 13.9),  # edp-sgd
        (False, 100_000, 1, 16, 25.4),  # edp-sgd
        (False, 100_000, 1, 0, 24.4),  # edp-sgd --set mode=dp-sgd
        (False, 1_000, 3, 16, 17.5),  # edp-sgd --runs 3
        (True, 1_000, 1, 0, 25.2),  # jax-bert
        (True, 1_000, 3, 0, 36.2),  # jax-bert --runs 3
    ],
)
def test_audit_cpu_estimate_reproduces_the_measured_runs(jax, canaries, runs, partners, measured):
    """The CPU table of :func:`dpaudit.whitebox.cost.cpu_works` against the runs it was fitted on (within 15%, on
    the reference machine's speed); a machine twice as slow on the probe doubles it."""
    from dpaudit.common import cost_model
    from dpaudit.whitebox.cost import cpu_works, estimate

    works = cpu_works(estimate(canaries=canaries, runs=runs, steps=4, partners=partners), jax=jax)
    here = cost_model.estimate(works, speed=1.0, load=0.0, cores=2)
    assert measured / 1.15 <= here.cpu <= measured * 1.15, (here.cpu, measured)
    slower = cost_model.estimate(works, speed=2.0, load=0.0, cores=2)
    assert slower.cpu == pytest.approx(2 * here.cpu) and slower.wall > here.wall
