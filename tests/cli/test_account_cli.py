"""`dpaudit account` through the real command group: outputs, solved quantities, one-line errors."""

from __future__ import annotations

import json

import dp_accounting
import pytest
from click.testing import CliRunner
from dp_accounting import pld, rdp
from dp_accounting.privacy_accountant import NeighboringRelation

from dpaudit import accounting as A
from dpaudit.cli import cli
from dpaudit.figures import format_up


def run(args, expect=0):
    result = CliRunner().invoke(cli, ["account", *args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


def run_json(args):
    return json.loads(run([*args, "--json"]).stdout)


def pld_direct(event, delta):
    accountant = pld.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(delta)


def test_help_has_worked_examples_and_ends_with_example_line():
    text = run(["--help"]).output
    assert "--batch-schedule 1875:262144,1875:458752,1875:655360,1875:851968,12500:1048576" in text
    assert "--delta 2.89e-9 --target-epsilon 5.36" in text
    assert "--microbatch-size 32" in text
    assert "min(1e-5, 1/(10 N))" in " ".join(text.split())  # the default-delta rule is stated
    assert text.strip().splitlines()[-1].strip().startswith("Example: dpaudit account ")


def test_epsilon_for_given_run_matches_dp_accounting_both_accountants():
    out = run_json(["-N", "10000", "--batch-size", "100", "--steps", "300", "--sigma", "2.0", "--accountant", "both"])
    event = A.dpsgd_event(noise_multiplier=2.0, sampling_probability=0.01, steps=300)
    assert out["delta"] == 1e-5  # default min(1e-5, 1/(10 N))
    assert out["epsilon"]["pld"] == pld_direct(event, 1e-5)
    accountant = rdp.RdpAccountant()
    accountant.compose(event)
    assert out["epsilon"]["rdp"] == accountant.get_epsilon(1e-5)
    assert A.event_from_json(out["event"]) == A.schedule_event(
        [A.Segment(steps=300, sampling_probability=0.01, noise_multiplier=2.0)])
    text = run(["-N", "10000", "--batch-size", "100", "--steps", "300", "--sigma", "2.0"]).output
    assert "epsilon (PLD)" in text and f"{format_up(out['epsilon']['pld'], 5)}" in text


def test_calibrates_sigma_for_target():
    out = run_json(["-N", "2000", "--batch-size", "200", "--steps", "60", "--target-epsilon", "1.2"])
    sigma = out["solved"]["noise_multiplier"]
    event = A.dpsgd_event(noise_multiplier=sigma, sampling_probability=0.1, steps=60)
    assert pld_direct(event, 1e-5) <= 1.2 < pld_direct(
        A.dpsgd_event(noise_multiplier=sigma / 1.001, sampling_probability=0.1, steps=60), 1e-5)
    assert out["within_target"] is True


def test_solves_steps_and_batch():
    steps = run_json(["-N", "10000", "--batch-size", "500", "--sigma", "2", "--target-epsilon", "1.5"])
    n = steps["solved"]["steps"]
    assert pld_direct(A.dpsgd_event(noise_multiplier=2.0, sampling_probability=0.05, steps=n), 1e-5) <= 1.5
    assert pld_direct(A.dpsgd_event(noise_multiplier=2.0, sampling_probability=0.05, steps=n + 1), 1e-5) > 1.5
    batch = run_json(["-N", "10000", "--steps", "100", "--sigma", "2", "--target-epsilon", "1.5"])
    assert 1 < batch["solved"]["batch_size"] < 10000 and batch["within_target"] is True


def test_schedule_file_json_and_toml_and_inline_schedule_agree(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps([{"steps": 50, "batch_size": 100}, {"steps": 50, "batch_size": 400}]))
    (tmp_path / "s.toml").write_text("[[segments]]\nsteps = 50\nbatch_size = 100\n\n"
                                     "[[segments]]\nsteps = 50\nsampling_probability = 0.04\n")
    base = ["-N", "10000", "--sigma", "2.0"]
    a = run_json([*base, "--schedule", str(tmp_path / "s.json")])
    b = run_json([*base, "--schedule", str(tmp_path / "s.toml")])
    c = run_json([*base, "--batch-schedule", "50:100,50:400"])
    assert a["epsilon"] == b["epsilon"] == c["epsilon"]
    expected = A.schedule_event(A.batch_schedule_segments(dataset_size=10000, schedule=[(50, 100), (50, 400)],
                                                          noise_multiplier=2.0))
    assert a["epsilon"]["pld"] == pld_direct(expected, 1e-5)


def test_microbatch_halves_the_effective_sigma():
    micro = run_json(["-N", "10000", "--batch-size", "100", "--steps", "100", "--sigma", "4", "--microbatch-size", "8"])
    per_example = run_json(["-N", "10000", "--batch-size", "100", "--steps", "100", "--sigma", "2"])
    assert micro["epsilon"] == per_example["epsilon"]
    assert micro["sensitivity_factor"] == 2.0 and "2C" in micro["notes"][0]


def test_tan_and_simulation_are_labelled():
    out = run_json(["-N", "100000", "--batch-size", "4000", "--steps", "50", "--sigma", "1.5", "--tan",
                    "--simulate", "1000"])
    assert out["tan"]["valid"] is False and "sigma > 2" in out["tan"]["warning"]
    assert out["simulation"]["private"] is False and out["simulation"]["simulated_noise_multiplier"] == 0.375
    text = run(["-N", "100000", "--batch-size", "4000", "--steps", "50", "--sigma", "1.5", "--tan",
                "--simulate", "1000"]).output
    assert "NON-PRIVATE" in text and "warning: eps_TAN is only valid for sigma > 2" in text


def test_fixed_size_is_rdp_and_labelled():
    out = run_json(["-N", "10000", "--batch-size", "100", "--steps", "100", "--sigma", "1.5", "--fixed-size"])
    assert list(out["epsilon"]) == ["rdp"] and out["adjacency"] == "replace one example"
    assert A.FIXED_SIZE_LABEL in out["notes"] and out["sensitivity_factor"] == 2.0


def _plain_fixed_size_rdp(n, b, steps, sigma_seen, delta):
    accountant = rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(n, b, dp_accounting.GaussianDpEvent(sigma_seen)), steps))
    return accountant.get_epsilon(delta)


def test_fixed_size_issue_repro_uses_sensitivity_2c_and_the_microbatch_factor():
    n, args = 60_000, ["-N", "60000", "--batch-size", "256", "--steps", "1000", "--sigma", "1.1", "--fixed-size"]
    result = CliRunner().invoke(cli, ["account", *args, "--delta", repr(1 / n)])
    assert result.exit_code == 0, result.output
    assert "epsilon (RDP)        7.6014" in result.stdout  # 7.60137 rounded UP; the old event printed 1.2322
    assert "delta 1.67e-05 >= 1/N" in result.stderr  # delta = 1/N is warned about
    # replace-one (2C) times micro-batch clipping (2C): the accountant sees sigma / 4.
    micro = run_json([*args, "--delta", "1e-6", "--microbatch-size", "32"])
    assert micro["sensitivity_factor"] == 4.0
    assert micro["epsilon"]["rdp"] == _plain_fixed_size_rdp(n, 256, 1000, 1.1 / 4, 1e-6)


@pytest.mark.parametrize("args,message", [
    (["-N", "100", "--batch-size", "200", "--steps", "3", "--sigma", "1"], "--batch-size 200 is larger"),
    (["-N", "100", "--batch-size", "20", "--steps", "3"], "missing --noise-multiplier"),
    (["-N", "100", "--batch-size", "20"], "missing --steps and --noise-multiplier"),
    (["--sampling-probability", "0.1", "--steps", "3", "--sigma", "1"], "--delta is required"),
    (["-N", "100", "--batch-schedule", "10:x", "--sigma", "1"], "--batch-schedule item 1"),
    (["-N", "100", "--batch-size", "10", "--steps", "5", "--sigma", "1", "--fixed-size", "--accountant", "pld"],
     "RDP only"),
    (["-N", "100", "--batch-size", "10", "--epochs", "2", "--sigma", "1", "--noise-decay", "cosine:1"],
     "--noise-decay 'cosine:1'"),
])
def test_errors_are_one_line_exit_2(args, message):
    result = CliRunner().invoke(cli, ["account", *args])
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert result.stdout.strip().startswith("Error:") or result.stderr.strip().startswith("Error:")


def test_bad_schedule_file_names_file_and_segment(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"steps": 5, "batch_size": 10}, {"steps": 5}]))
    result = CliRunner().invoke(cli, ["account", "-N", "100", "--sigma", "1", "--schedule", str(path)])
    assert result.exit_code == 2
    assert f"--schedule {path}: segment 2: needs steps and exactly one of" in result.output
    path.write_text(json.dumps([{"steps": 5, "sampling_probability": 3.0}]))
    result = CliRunner().invoke(cli, ["account", "-N", "100", "--sigma", "1", "--schedule", str(path)])
    assert result.exit_code == 2 and "sampling_probability must be in (0, 1]" in result.output
