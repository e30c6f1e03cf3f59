"""Canaries through JAX Privacy's real gradient path: the clipping the library itself does, its claim beside
dpaudit's recomputation, planted library faults flagged in one run, and correct JAX Privacy never flagged beyond the
verdict's stated 5%.

The audits train the tiny linear setup (:func:`faults.tiny_setup`) with 500 canaries, q = 0.5, 4 updates, sigma 1.43
(JAX Privacy's PLD epsilon 4.0 at delta 1e-5): the same claim everywhere, so its plan and curves are computed once,
and the same shapes, so JAX Privacy's clipped gradient compiles once. The verdicts stop the claim-family search at
the claim itself (``min_scale=1.0``), as the opacus tests do.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpaudit.whitebox.gradient_path import audit_gradient_path
from dpaudit.whitebox.layout import CANARY_GAIN
from tests.trainers.jax_privacy.faults import (
    CANARIES,
    DELTA,
    FAULTS,
    SIGMA,
    LightHost,
    one_run_audits,
    planted,
    tiny_setup,
)

POWER_SEEDS = 10
#: The validity count runs over at least 20 seeds per library (docs/auditing.md); each correct audit costs about a
#: second of claim accounting.
VALIDITY_SEEDS = 20


@pytest.mark.parametrize("sampling", ["poisson", "fixed"])
def test_the_library_clips_each_canary_to_c_along_its_row(sampling):
    """JAX Privacy's own clipped_grad brings each sampled member's gradient to exactly C on its row and nothing
    elsewhere; with minibatches (padded, accumulated) an update is still one per logical batch."""
    from dpaudit.trainers.jax_privacy.loop import Settings, run_jax_privacy

    member = np.random.default_rng(0).integers(0, 2, size=CANARIES).astype(bool)
    gains = np.where(member, CANARY_GAIN, 0.0)
    for physical in (None, 100):
        settings = Settings(
            noise_multiplier=1e-4,
            clip_norm=0.7,
            steps=3,
            delta=DELTA,
            accountant="rdp",
            sampling=sampling,
            noise_seed=1,
            physical_batch=physical,
        )
        run = run_jax_privacy(tiny_setup(), settings, gains=gains)
        assert run.observations is not None and run.final is not None
        y = run.observations
        assert y.shape == (3, CANARIES) and run.updates == 3
        assert np.all(np.abs(y[:, ~member]) < 1e-3)  # a non-member adds nothing anywhere
        sampled = np.abs(y[:, member] - 0.7) < 1e-3  # a sampled member adds exactly C (the library's own clipping)
        assert np.all(sampled | (np.abs(y[:, member]) < 1e-3)) and 0.3 < sampled.mean() < 0.7
        assert np.all(np.abs(run.final[~member]) < 1e-4) and run.final[member].mean() < -1e-4  # descent moves it
        if sampling == "fixed":  # at most the fixed batch of 282 rows, canaries among them
            assert run.batch_size == 282 and np.all(sampled.sum(axis=1) <= 282)


@pytest.mark.parametrize("sampling", ["poisson", "fixed"])
def test_the_librarys_claim_matches_dpauditss_recomputation_for_a_correct_run(sampling):
    from dpaudit import accounting
    from dpaudit.trainers.jax_privacy.loop import Settings, run_jax_privacy
    from dpaudit.trainers.jax_privacy.privacy import build_record

    # sigma as the audits' (Poisson), or twice it (fixed: JAX Privacy's reduction composes Poisson steps of SIGMA)
    sigma = SIGMA if sampling == "poisson" else 2 * SIGMA
    settings = Settings(noise_multiplier=sigma, clip_norm=1.0, steps=4, delta=DELTA, sampling=sampling, noise_seed=3)
    run = run_jax_privacy(tiny_setup(), settings, gains=np.zeros(CANARIES))
    record = build_record(run, delta=DELTA, accountant="pld", target_epsilon=None)
    library = record.details["library"]
    assert library["agrees"] and library["mismatches"] == [] and library["name"] == "jax_privacy"
    q = run.sample_rate
    if sampling == "poisson":  # the same mechanism: the library's PLD and dpaudit's agree at the same delta
        assert library["history"] == [[SIGMA, q, 4]] and record.accountant == "pld"
        ours = accounting.epsilon(
            accounting.dpsgd_event(noise_multiplier=SIGMA, sampling_probability=q, steps=4), DELTA
        )
        assert library["epsilon"] == pytest.approx(ours, rel=2e-3)
        assert record.epsilon >= ours  # dpaudit's is at delta minus the float sampler's tail figure
    else:  # the library's reduction (Poisson steps of sigma / 2) beside dpaudit's replace-one RDP of the fixed batches
        assert library["history"] == [[SIGMA, q, 4]] and record.accountant == "rdp"
        assert record.adjacency == "replace_one" and record.sampling == "without_replacement"
    assert record.noise_tail["sampler"] == "jax-float32" and 0 < record.noise_tail_delta < DELTA
    assert record.accountant_delta == pytest.approx(DELTA - record.noise_tail_delta)
    # a target the library's accountant met but dpaudit's accounting of what ran exceeds is said in a note
    targeted = build_record(run, delta=DELTA, accountant="pld", target_epsilon=library["epsilon"])
    assert targeted.epsilon > library["epsilon"] and any(
        n.startswith("target: sigma was calibrated by JAX Privacy's accountant") for n in targeted.notes
    )


@pytest.mark.parametrize("fault", ["micro_steps", "fixed_as_poisson"])
def test_privacy_json_flags_a_library_claim_for_a_mechanism_that_did_not_run(fault, tmp_path, monkeypatch):
    from dpaudit.claim import claim_of_record, read_privacy_record
    from dpaudit.whitebox.gradient_path import library_claim

    sampling = "fixed" if fault == "fixed_as_poisson" else "poisson"
    # JAX Privacy's RDP accountant (its PLD over 128 micro-steps takes seconds); the audits' canary count, so that the
    # run's shapes are the audits' (JAX Privacy's clipped gradient compiled once)
    with planted(fault, monkeypatch):
        LightHost(noise_seed=1, sampling=sampling, accountant="rdp").train_with_gradient_canaries(
            None, tmp_path / "run", None, gains=np.zeros(CANARIES), seed=0
        )
    raw = json.loads((tmp_path / "run" / "privacy.json").read_text())
    found = raw["details"]["library"]["mismatches"]
    assert raw["details"]["library"]["agrees"] is False and raw["notes"][0].startswith("mismatch: JAX Privacy's")
    if fault == "micro_steps":
        assert any("counted 128 steps, the optimizer took 4 updates" in m for m in found), found
        record = read_privacy_record(tmp_path / "run" / "privacy.json")
        ran, said = claim_of_record(record), library_claim(record)
        assert ran.steps == 4 and said.steps == 128 and said.epsilon < ran.epsilon / 2
    else:
        assert any(
            "fixed-size batches sampled without replacement; JAX Privacy's accountant assumed Poisson" in m
            for m in found
        ), found


#: The faults whose power runs in the suite (the accumulation fault's, whose privacy.json flag is tested above, runs in
#: benchmarks/bench_audit_libraries.py: each audit costs about a second of claim accounting).
SUITE_FAULTS = [f for f in FAULTS if f != "micro_steps"]


@pytest.mark.parametrize("fault", SUITE_FAULTS)
def test_a_planted_library_fault_is_flagged_in_one_run(fault, monkeypatch):
    flags = [analysis.alarm for analysis, _ in one_run_audits(fault, POWER_SEEDS, monkeypatch)]
    assert sum(flags) >= 9, (fault, flags)


def test_correct_jax_privacy_is_never_flagged_beyond_the_stated_five_percent(monkeypatch):
    flags = [analysis.alarm for analysis, _ in one_run_audits(None, VALIDITY_SEEDS, monkeypatch)]
    # At most 5% false alarms are allowed; over 20 seeds 4 or more alarms has probability 1.6% at exactly 5%.
    assert sum(flags) <= 3, flags


def test_the_audit_of_a_users_setup_names_the_path_the_library_and_both_claims(tmp_path):
    """``dpaudit audit-trainer --trainer jax-privacy --setup tiny_setup.py:build`` (here, not in test_cli.py: the same
    claim as the audits above, so that its plan, curves and ceilings are computed once in a test worker)."""
    from pathlib import Path

    from click.testing import CliRunner

    from dpaudit.cli import cli

    out, setup = tmp_path / "audit", Path(__file__).with_name("tiny_setup.py")
    args = ["audit-trainer", "--trainer", "jax-privacy", "--setup", f"{setup}:build", "--out", str(out)]
    extra = ["--canaries", str(CANARIES), "--seed", "1", "--set", f"noise_multiplier={SIGMA}"]
    result = CliRunner().invoke(cli, [*args, *extra, "--set", "target_epsilon=none"])
    assert result.exit_code == 0, result.output
    assert "jax_privacy 2.0.0: its PLD accountant claims epsilon 4.0" in result.output
    assert "through the real gradient path" in result.output and "verdict: consistent" in result.output
    body = json.loads((out / "whitebox.json").read_text())
    settings = body["settings"]
    assert settings["canary_path"] == "gradient-path" and settings["canary_paths"] == {"gradient-path": 500}
    assert settings["library"] == "jax_privacy" and settings["library_version"] == "2.0.0"
    assert settings["claims_agree"] and settings["library_claim"]["accountant"] == "pld"
    assert settings["dpaudit_claim"]["accountant"] == "pld" and settings["dpaudit_claim"]["steps"] == 4
    assert body["claim"]["epsilon"] == pytest.approx(settings["library_claim"]["epsilon"])  # the library's, tested
    assert (out / "index.html").is_file() and (out / "scores" / "whitebox.jsonl").is_file()


def test_a_fixed_size_run_is_audited_with_signed_canaries_through_the_library(monkeypatch):
    """Fixed-size batches claim replace-one, so the audit signs its canaries (every canary trains; the coin chooses +C
    or -C): JAX Privacy's own clipping brings a sampled canary to exactly +C or -C on its row; the library's claim
    (sigma 2.86 accounted as Poisson steps of sigma / 2 = 1.43 at q = 282 / 564: the claim of the audits above) is not
    flagged on a correct run, and is flagged when the noise is the one meant for the mean."""
    from dpaudit.trainers.jax_privacy.loop import Settings, run_jax_privacy
    from dpaudit.whitebox.gradient_path import signed_gains

    member = np.random.default_rng(0).integers(0, 2, size=CANARIES).astype(bool)
    settings = Settings(
        noise_multiplier=1e-4, clip_norm=0.7, steps=3, delta=DELTA, accountant="rdp", sampling="fixed", noise_seed=1
    )
    y = run_jax_privacy(tiny_setup(), settings, gains=signed_gains(member)).observations
    assert y is not None
    sign = np.where(member, 1.0, -1.0)
    sampled = np.abs(y - 0.7 * sign) < 1e-3
    assert np.all(sampled | (np.abs(y) < 1e-3)) and 0.3 < sampled.mean() < 0.7

    verdicts = {}
    for fault in (None, "noise_for_mean"):
        with planted(fault, monkeypatch):
            analysis, done = audit_gradient_path(
                LightHost(noise_seed=77, sampling="fixed", sigma=2 * SIGMA),
                None,
                None,
                canaries=CANARIES,
                seed=5,
                full=False,
                min_scale=1.0,
            )
        assert done[0].signed and done[0].record.adjacency == "replace_one"
        assert analysis.claim.epsilon == pytest.approx(4.0, abs=0.01)  # the library's claim, tested
        verdicts[fault] = analysis.alarm
    assert verdicts == {None: False, "noise_for_mean": True}, verdicts
