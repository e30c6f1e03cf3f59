"""``dpaudit audit-trainer`` end to end on a real trainer, a real trainer broken on purpose, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import verify_run_dir

pytest.importorskip("torch")


def _run(*args: str):
    return CliRunner().invoke(cli, ["audit-trainer", *args], catch_exceptions=False)


def test_audit_trainer_audits_edp_sgd_dp_sgd_and_writes_the_audit_directory(tmp_path):
    out = tmp_path / "audit"
    result = _run(
        "--trainer",
        "edp-sgd",
        "--set",
        "mode=dp-sgd",
        "--target-epsilon",
        "4",
        "--canaries",
        "2000",
        "--seed",
        "3",
        "--noise-seed",
        "987654321",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    manifest = verify_run_dir(out, schema_prefix="dpaudit.whitebox/")
    assert {"whitebox.json", "scores/whitebox.jsonl", "index.html"} <= set(manifest["outputs"])
    body = json.loads((out / "whitebox.json").read_text())
    assert body["claim"]["epsilon"] == pytest.approx(4.0, abs=0.01) and body["unit"] == "example"
    assert 0.0 < body["primary"]["epsilon"] <= body["claim"]["epsilon"] and not body["refuted"]
    # the canary path is named for every kind of canary, and the page says which path the canaries took
    assert body["settings"]["canary_path"] == "cooperative"
    assert body["settings"]["canary_paths"] == {"cooperative": 2000}
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "Canary path" in page and "2000 canaries: cooperative: the trainer&#39;s audit block" in page
    # every run's Gaussian-pair bound is shown beside the others, below the claim (a correct trainer)
    assert all(0.0 <= r["gauss_pair"]["epsilon"] <= body["claim"]["epsilon"] for r in body["one_run"]["last_iterate"])
    rows = [json.loads(line) for line in (out / "scores" / "whitebox.jsonl").read_text().splitlines()]
    assert len(rows) == 2000 and 800 < sum(r["member"] for r in rows) < 1200  # fair coins
    assert "consistent with the claim" in result.output
    for path in out.rglob("*"):  # the secret noise seed is never recorded
        assert path.is_dir() or "987654321" not in path.read_text(encoding="utf-8"), path


def test_a_real_trainer_adding_half_the_noise_is_refuted_in_one_run(data_dir, tmp_path):
    from dpaudit.training.api import load_trainer
    from dpaudit.whitebox.audit import audit_trainer

    trainer = load_trainer("edp-sgd")

    class HalfNoise(trainer.Plugin):  # the bug: the step adds noise of std sigma / 2 x C; privacy.json says sigma
        def _sigma(self, step, sigma):
            return 0.5 * super()._sigma(step, sigma)

    config = trainer.tiny_config(
        mode="dp-sgd",
        task="classify",
        target_epsilon=2.0,
        noise_multiplier=None,
        epochs=5,
        batch_size=1024,
        noise_seed=5,
    )
    analysis, _ = audit_trainer(
        lambda out: HalfNoise(data_dir, out, config, seed=0), canaries=4000, seed=0, workdir=tmp_path
    )
    assert analysis.claim.epsilon == pytest.approx(2.0, abs=0.01)
    assert analysis.alarm, (analysis.primary, analysis.claim.epsilon)  # the stated mechanism (or its epsilon) refuted


@pytest.mark.parametrize(
    "args, words",
    [
        (["--trainer", "no-such"], "--trainer 'no-such' is not a registered trainer"),
        (["--trainer", "edp-sgd", "--set", "colour=blue"], "--set 'colour=blue'"),
        (["--trainer", "edp-sgd", "--set", "epochs=many"], "--set 'epochs=many'"),
        (["--trainer", "edp-sgd", "--runs", "3", "--noise-seed", "7"], "--noise-seed with --runs 3"),  # not independent
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, words, tmp_path):
    out = tmp_path / "audit"
    result = CliRunner().invoke(cli, ["audit-trainer", *args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert words in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_the_runs_as_fleet_jobs_are_the_same_runs_with_their_own_coins(data_dir, tmp_path):
    """A many-run audit through the model fleet (the R runs trained at once): each run is the trainer's
    own plug-in hosting the canaries, with its own coin generator; with the noise fixed, a run trained as a fleet
    job gives exactly the evidence of the same run trained here with the same coins."""
    import dataclasses

    from dpaudit.training.api import load_trainer
    from dpaudit.whitebox.audit import RUNNER, RegisteredRuns, audit_trainer, run_config
    from dpaudit.whitebox.harness import run_with_canaries

    trainer = load_trainer("edp-sgd")
    config = trainer.tiny_config(
        mode="dp-sgd",
        task="classify",
        target_epsilon=2.0,
        noise_multiplier=None,
        epochs=2,
        batch_size=256,
        noise_seed=5,
    )
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    spec = RegisteredRuns(trainer="edp-sgd", config=fields, data_dir=data_dir, engine="inline")
    analysis, evidence = audit_trainer(spec, canaries=300, runs=2, seed=7, workdir=tmp_path / "fleet")
    assert RUNNER == "dpaudit.whitebox.harness:run_job" and len(evidence) == 2
    assert not np.array_equal(evidence[0].layout.member, evidence[1].layout.member)  # each run its own coins
    seeds = [run_config(fields, r)["noise_seed"] for r in range(2)]
    assert seeds[0] != seeds[1] and 5 not in seeds  # a fixed noise seed becomes one per run: independent runs
    coins = [int(x) for x in np.random.SeedSequence(7).spawn(2)[0].generate_state(4)]
    first = dataclasses.replace(config, noise_seed=seeds[0])
    here = run_with_canaries(
        lambda out: trainer.Plugin(data_dir, out, first, seed=0),
        tmp_path / "here",
        canaries=300,
        partners=16,
        rng=np.random.default_rng(np.random.SeedSequence(coins)),
    )
    assert np.array_equal(here.layout.member, evidence[0].layout.member)
    np.testing.assert_array_equal(here.observations, evidence[0].observations)
    np.testing.assert_array_equal(here.final, evidence[0].final)
    assert here.claim == evidence[0].claim
