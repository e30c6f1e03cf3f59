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
from dpaudit.common.figures import format_up


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
        [A.Segment(steps=300, sampling_probability=0.01, noise_multiplier=2.0)]
    )
    text = run(["-N", "10000", "--batch-size", "100", "--steps", "300", "--sigma", "2.0"]).output
    assert "epsilon (PLD)" in text and f"{format_up(out['epsilon']['pld'], 5)}" in text


def test_calibrates_sigma_for_target():
    out = run_json(["-N", "2000", "--batch-size", "200", "--steps", "60", "--target-epsilon", "1.2"])
    sigma = out["solved"]["noise_multiplier"]
    event = A.dpsgd_event(noise_multiplier=sigma, sampling_probability=0.1, steps=60)
    assert (
        pld_direct(event, 1e-5)
        <= 1.2
        < pld_direct(A.dpsgd_event(noise_multiplier=sigma / 1.001, sampling_probability=0.1, steps=60), 1e-5)
    )
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
    (tmp_path / "s.toml").write_text(
        "[[segments]]\nsteps = 50\nbatch_size = 100\n\n[[segments]]\nsteps = 50\nsampling_probability = 0.04\n"
    )
    base = ["-N", "10000", "--sigma", "2.0"]
    a = run_json([*base, "--schedule", str(tmp_path / "s.json")])
    b = run_json([*base, "--schedule", str(tmp_path / "s.toml")])
    c = run_json([*base, "--batch-schedule", "50:100,50:400"])
    assert a["epsilon"] == b["epsilon"] == c["epsilon"]
    expected = A.schedule_event(
        A.batch_schedule_segments(dataset_size=10000, schedule=[(50, 100), (50, 400)], noise_multiplier=2.0)
    )
    assert a["epsilon"]["pld"] == pld_direct(expected, 1e-5)


def test_microbatch_size_changes_the_noise_std_not_the_epsilon_of_sigma():
    # sigma is std over one example's bound (2C with micro-batches): the same sigma, the same epsilon.
    base = ["-N", "10000", "--batch-size", "100", "--steps", "100"]
    micro = run_json([*base, "--sigma", "2", "--microbatch-size", "8"])
    per_example = run_json([*base, "--sigma", "2"])
    assert micro["epsilon"] == per_example["epsilon"]
    assert (
        micro["event"]
        == per_example["event"]
        == A.event_to_json(
            dp_accounting.ComposedDpEvent(
                [
                    dp_accounting.SelfComposedDpEvent(
                        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(2.0)), 100
                    )
                ]
            )
        )
    )
    assert micro["sensitivity_factor"] == 2.0 and "2C" in micro["notes"][0]
    assert micro["noise_std_over_clip"] == 4.0 and per_example["noise_std_over_clip"] == 2.0
    assert micro["segments"][0]["noise_multiplier"] == 2.0 == micro["noise_multiplier"]
    # The noise std over C has its own option: std 4C over a 2C bound is sigma 2.
    by_std = run_json([*base, "--noise-std-over-clip", "4", "--microbatch-size", "8"])
    assert by_std["epsilon"] == micro["epsilon"] and by_std["noise_multiplier"] == 2.0
    # Calibration solves for sigma, the same whatever the clipping unit.
    calibrated = [
        run_json([*base, "--target-epsilon", "1.5", *extra])["solved"]["noise_multiplier"]
        for extra in ([], ["--microbatch-size", "8"])
    ]
    assert calibrated[0] == calibrated[1]


def test_tan_and_simulation_are_labelled():
    out = run_json(
        ["-N", "100000", "--batch-size", "4000", "--steps", "50", "--sigma", "1.5", "--tan", "--simulate", "1000"]
    )
    assert out["tan"]["valid"] is False and "sigma > 2" in out["tan"]["warning"]
    assert out["simulation"]["private"] is False and out["simulation"]["simulated_noise_multiplier"] == 0.375
    text = run(
        ["-N", "100000", "--batch-size", "4000", "--steps", "50", "--sigma", "1.5", "--tan", "--simulate", "1000"]
    ).output
    assert "NON-PRIVATE" in text and "warning: eps_TAN is only valid for sigma > 2" in text


def test_fixed_size_is_rdp_and_labelled():
    out = run_json(["-N", "10000", "--batch-size", "100", "--steps", "100", "--sigma", "1.5", "--fixed-size"])
    assert list(out["epsilon"]) == ["rdp"] and out["adjacency"] == "replace one example"
    assert A.FIXED_SIZE_LABEL in out["notes"] and out["sensitivity_factor"] == 2.0


def _plain_fixed_size_rdp(n, b, steps, sigma_seen, delta):
    accountant = rdp.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    accountant.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(n, b, dp_accounting.GaussianDpEvent(sigma_seen)), steps
        )
    )
    return accountant.get_epsilon(delta)


def test_fixed_size_issue_repro_uses_sensitivity_2c_and_the_microbatch_factor():
    n, args = 60_000, ["-N", "60000", "--batch-size", "256", "--steps", "1000", "--sigma", "1.1", "--fixed-size"]
    result = CliRunner().invoke(cli, ["account", *args, "--delta", repr(1 / n)])
    assert result.exit_code == 0, result.output
    assert "epsilon (RDP)        7.6014" in result.stdout  # 7.60137 rounded UP; the old event printed 1.2322
    assert "delta 1.67e-05 >= 1/N" in result.stderr  # delta = 1/N is warned about
    # Noise std 1.1C with micro-batch clipping: replace-one (2x) times the micro-batch bound (2C), so the
    # accountant sees std / 4C; sigma, the std over the 2C bound, is 0.55 and the event carries sigma / 2.
    std_args = [a if a != "--sigma" else "--noise-std-over-clip" for a in args]
    micro = run_json([*std_args, "--delta", "1e-6", "--microbatch-size", "32"])
    assert micro["sensitivity_factor"] == 4.0 and micro["noise_multiplier"] == 0.55
    assert micro["epsilon"]["rdp"] == _plain_fixed_size_rdp(n, 256, 1000, 1.1 / 4, 1e-6)
    by_sigma = run_json([*args[:-2], "0.55", "--fixed-size", "--delta", "1e-6", "--microbatch-size", "32"])
    assert by_sigma["epsilon"] == micro["epsilon"]


@pytest.mark.parametrize(
    "args,message",
    [
        (["-N", "100", "--batch-size", "200", "--steps", "3", "--sigma", "1"], "--batch-size 200 is larger"),
        (["-N", "100", "--batch-size", "20", "--steps", "3"], "missing --noise-multiplier"),
        (["-N", "100", "--batch-size", "20"], "missing --steps and --noise-multiplier"),
        (["--sampling-probability", "0.1", "--steps", "3", "--sigma", "1"], "--delta is required"),
        (["-N", "100", "--batch-schedule", "10:x", "--sigma", "1"], "--batch-schedule item 1"),
        (
            ["-N", "100", "--batch-size", "10", "--steps", "5", "--sigma", "1", "--fixed-size", "--accountant", "pld"],
            "RDP only",
        ),
        (
            ["-N", "100", "--batch-size", "10", "--epochs", "2", "--sigma", "1", "--noise-decay", "cosine:1"],
            "--noise-decay 'cosine:1'",
        ),
        (
            ["-N", "100", "--batch-size", "10", "--steps", "5", "--sigma", "1", "--noise-std-over-clip", "2"],
            "--noise-multiplier and --noise-std-over-clip both given",
        ),
    ],
)
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


def test_account_reproduces_an_edp_sgd_privacy_json_from_its_stored_numbers(data_dir, tmp_path):
    """One meaning of "noise multiplier": an edp-sgd run (micro-batch clipping, sensitivity 2C)
    stores sigma in noise_multipliers and in its segments alike, and `dpaudit account` given exactly the stored
    numbers reproduces the stored epsilon, which is plain dp_accounting's for PoissonSampled Gaussian(sigma)."""
    sigma, out = 0.7, tmp_path / "run"
    trained = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "edp-sgd",
            "--mode",
            "edp-sgd",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--seed",
            "0",
            "--preset",
            "tiny",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--max-length",
            "16",
            "--vocab-size",
            "128",
            "--eval-examples",
            "8",
            "--noise-seed",
            "7",
            "--noise-multiplier",
            str(sigma),
        ],
        catch_exceptions=False,
    )
    assert trained.exit_code == 0, trained.output
    stored = json.loads((out / "privacy.json").read_text())
    assert stored["sensitivity_factor"] == 2.0  # micro-batch clipping: one example moves the sum by up to 2C
    assert stored["noise_multipliers"] == [sigma] and stored["segments"][0]["noise_multiplier"] == sigma
    assert stored["segments"][0]["sensitivity_factor"] == 2.0  # std / C = sigma x 2 stays derivable
    n, steps, delta = stored["dataset_size"], stored["steps"], stored["delta"]
    batch = round(stored["segments"][0]["sampling_probability"] * n)
    args = [
        "-N",
        str(n),
        "--batch-size",
        str(batch),
        "--steps",
        str(steps),
        "--delta",
        repr(delta),
        "--noise-multiplier",
        repr(stored["noise_multipliers"][0]),
    ]
    micro = run_json([*args, "--microbatch-size", "2"])
    assert micro["epsilon"]["pld"] == pytest.approx(stored["epsilon"], rel=1e-6)
    assert run_json(args)["epsilon"] == micro["epsilon"]  # the clipping unit is already in sigma
    golden = pld.PLDAccountant()
    golden.compose(dp_accounting.PoissonSampledDpEvent(batch / n, dp_accounting.GaussianDpEvent(sigma)), steps)
    assert stored["epsilon"] == pytest.approx(golden.get_epsilon(delta), rel=1e-6)
