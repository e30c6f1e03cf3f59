"""``dpaudit account``'s options and schedule files (hardening; moved from tests/test_bad_inputs.py and
tests/test_bad_inputs_files.py): a target epsilon or noise multiplier it cannot take, a delta below PLD's
range, a schedule file that is not UTF-8 or holds text for a number, ``--batch-schedule`` beside ``-B``/``-S``: each
is a one-line error, exit code 2, naming the option or file. The calibration repro stays bounded in
memory and time; a tiny delta is accounted by RDP and never reads as no noise; a decreasing batch schedule is
accepted and accounted in order.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from dp_accounting import dp_event, rdp

from dpaudit.cli import cli
from tests.bad_inputs.file_faults import Case, Ctx, assert_one_line_error, run_cli, tree

ACCOUNT = ["-N", "1000", "--batch-size", "10", "--steps", "100"]

ACCOUNT_CASES = [
    ("target-inf", ["--target-epsilon", "inf"], ["--target-epsilon must be a finite number, got inf."]),
    ("target-nan", ["--target-epsilon", "nan"], ["--target-epsilon must be a finite number, got nan."]),
    ("sigma-nan", ["--noise-multiplier", "nan"], ["--noise-multiplier must be a finite number, got nan."]),
    ("delta-nan", ["--noise-multiplier", "1", "--delta", "nan"], ["--delta must be a finite number, got nan."]),
    # Item 2's repro (climbed past 3 GB and died): refused, saying which sigma already meets the target.
    (
        "target-1000",
        ["--target-epsilon", "1000"],
        ["target epsilon 1000 at delta 1e-05", "noise multipliers below", "grid points", "lower the target"],
    ),
    ("target-1e6", ["--target-epsilon", "1e6"], ["target epsilon 1e+06", "lower the target"]),
    # Item 5: PLD asked for explicitly below its reliable range.
    (
        "tiny-delta-pld",
        ["--noise-multiplier", "1", "--delta", "1e-17", "--accountant", "pld"],
        ["--delta 1e-17 is below 1e-10", "--accountant rdp"],
    ),
    (
        "tiny-delta-both",
        ["--noise-multiplier", "1", "--delta", "1e-17", "--accountant", "both"],
        ["--delta 1e-17 is below 1e-10"],
    ),
]


@pytest.mark.parametrize(
    ("args", "expected"), [case[1:] for case in ACCOUNT_CASES], ids=[case[0] for case in ACCOUNT_CASES]
)
def test_account_bad_input_is_one_line_exit_2(args, expected):
    result = CliRunner().invoke(cli, ["account", *ACCOUNT, *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == "", result.stdout
    message = [line for line in result.stderr.splitlines() if not line.startswith("calibrating")]
    assert len(message) == 1, result.stderr
    for text in expected:
        assert text in message[0], (text, message[0])


def test_the_noise_tail_bounds_what_tiny_noise_can_claim():
    """Noise far too small: the float sampler's tail alone reaches delta, so no epsilon holds at that delta, which
    `account` says as an answer, not an error (it used to refuse on PLD's grid). A huge target calibrates to the tail's
    floor, the least noise under which any epsilon holds, its epsilon within the target (RDP needs no grid: it used to
    refuse below its search's fixed lower end); a train run that must also state a replace-one epsilon it cannot
    account there is refused before any step (tests/bad_inputs/test_train_options.py)."""
    tiny = CliRunner().invoke(cli, ["account", *ACCOUNT, "--noise-multiplier", "0.003"])
    assert tiny.exit_code == 0, tiny.output
    assert "inf (the noise sampler's tail alone reaches delta)" in tiny.stdout and "<= 0: none holds" in tiny.stdout
    huge = CliRunner().invoke(cli, ["account", *ACCOUNT, "--target-epsilon", "1e6", "--accountant", "rdp", "--json"])
    assert huge.exit_code == 0, huge.output
    out = json.loads(huge.stdout)
    sigma, tail = out["noise_multiplier"], out["noise_tail"]["figure"]
    assert (
        0.1 < sigma < 0.2 and 0 < tail < out["delta"] and out["accountant_delta"] == pytest.approx(out["delta"] - tail)
    )
    assert out["epsilon"]["rdp"] <= 1e6 and out["within_target"] is True


def test_calibration_repro_is_bounded_in_memory_and_time():
    """The calibration repro under a 2 GiB address-space limit (it needed > 3 GB and died with
    MemoryError): it must end with the one-line refusal, well inside the limit and the timeout."""
    limit = 2 * 1024**3
    script = textwrap.dedent(f"""
        import atexit, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
        # VmHWM is this image's own peak: ru_maxrss would also carry the forking pytest's (kept across exec).
        atexit.register(lambda: print("peak-rss-kib", next(int(line.split()[1]) for line in open("/proc/self/status")
                                                            if line.startswith("VmHWM:"))))
        from dpaudit.cli import main
        sys.argv = ["dpaudit", "account", *{ACCOUNT!r}, "--target-epsilon", "1000"]
        main()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "lower the target" in done.stderr and "Traceback" not in done.stderr
    peak_kib = int(done.stdout.split("peak-rss-kib")[1].split()[0])
    assert peak_kib < 1024**2, peak_kib  # under 1 GiB resident (the repro's refusal needs ~0.2 GB)


def rdp_epsilon(q, sigma, steps, delta):
    """RDP epsilon from dp_accounting directly, with the event built here."""
    accountant = rdp.RdpAccountant()
    accountant.compose(
        dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)
    )
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize(
    "args",
    [
        [*ACCOUNT, "--noise-multiplier", "1", "--delta", "1e-17"],
        # N = 1e12 (the largest -N accepted): the default delta (<= 1/(10 N)) is below PLD's range; at N = 1e16
        # it printed "inf (no noise ...)" at sigma 1.
        ["-N", str(10**12), "-q", "0.01", "--steps", "100", "--noise-multiplier", "1"],
    ],
    ids=["delta-1e-17", "default-delta-N-1e12"],
)
def test_tiny_delta_is_accounted_by_rdp_and_never_reads_as_no_noise(args):
    result = CliRunner().invoke(cli, ["account", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["delta"] <= 1e-13  # below PLD_MIN_DELTA (1e-10): only RDP can state it
    assert set(out["epsilon"]) == {"rdp"}
    expected = rdp_epsilon(0.01, 1.0, 100, out["accountant_delta"])  # delta less the noise tail counted inside it
    assert math.isfinite(expected) and out["epsilon"]["rdp"] == pytest.approx(expected, rel=1e-12)
    assert 3.0 < expected < 5.0  # 4.65 at delta 1e-17, 3.52 at 1e-13 (the reported figure at delta 1e-16 is 4.37)
    text = CliRunner().invoke(cli, ["account", *args], catch_exceptions=False).output
    assert "no noise" not in text and "epsilon (RDP)" in text and "delta below 1e-10" in text


# ------------------------------------------------------------------------------------------------
# Schedule files and --batch-schedule (from the file cases of tests/test_bad_inputs_files.py).


def _account_schedule_not_utf8(ctx: Ctx):
    path = ctx.base / "s.json"
    path.write_bytes(b'[{"steps": 10, "batch_size": 10}]\n# caf\xe9\n')
    return (
        ["account", "-N", "1000", "--sigma", "1", "--schedule", str(path)],
        [f"--schedule {path}: not UTF-8", "0xe9"],
        None,
    )


def _account_schedule_batch_size_is_text(ctx: Ctx):
    path = ctx.base / "s.toml"
    path.write_text('[[segments]]\nsteps = 10\nbatch_size = "ten"\n', encoding="utf-8")
    return (
        ["account", "-N", "1000", "--sigma", "1", "--schedule", str(path)],
        [f"--schedule {path}: segment 1: batch_size must be an integer, got 'ten'"],
        None,
    )


def _account_batch_schedule_with_b_and_s(ctx: Ctx):
    return (
        ["account", "-N", "1000", "--sigma", "1", "--batch-schedule", "10:10,10:20", "-B", "10", "-S", "5"],
        ["--batch-schedule sets every segment's steps and batch", "--batch-size/-B", "--steps/-S"],
        None,
    )


CASES: dict[str, Case] = {
    "account: --schedule not UTF-8": _account_schedule_not_utf8,
    "account: schedule batch_size = 'ten'": _account_schedule_batch_size_is_text,
    "account: --batch-schedule with -B and -S": _account_batch_schedule_with_b_and_s,
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(name, scratch, data_dir, monkeypatch):
    base = scratch / name.replace(" ", "_").replace(":", "").replace("'", "").replace("/", "_")
    base.mkdir()
    ctx = Ctx(base=base, scratch=scratch, data_dir=data_dir, trained_run=None)
    args, needles, limits = CASES[name](ctx)
    monkeypatch.chdir(base)
    before = tree(scratch)
    outcome = run_cli(args, subprocess_with=limits, cwd=base)
    assert_one_line_error(outcome, *needles)
    assert tree(scratch) == before  # no output, no staging folder, no lock file


def test_a_decreasing_batch_schedule_is_accepted_documented_and_accounted_in_order():
    """Decision: any order is accepted (the accountant composes the segments as run); both helps say so."""
    import dp_accounting
    from dp_accounting import pld

    result = CliRunner().invoke(
        cli,
        ["account", "-N", "1000", "--sigma", "1.5", "--batch-schedule", "20:100,30:10", "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [(s["steps"], s["sampling_probability"]) for s in out["segments"]] == [(20, 0.1), (30, 0.01)]
    gaussian = dp_accounting.GaussianDpEvent(1.5)
    event = dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.1, gaussian), 20),
            dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.01, gaussian), 30),
        ]
    )
    accountant = pld.PLDAccountant()
    accountant.compose(event)
    assert out["delta"] == pytest.approx(1e-5)  # the default: min(1e-5, 1/(10 N))
    assert out["epsilon"]["pld"] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    for args in (["account", "--help"], ["train", "--trainer", "jax-bert", "--help"]):
        assert "any order" in " ".join(CliRunner().invoke(cli, args).output.split()), args
