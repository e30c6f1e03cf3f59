"""Bad-input probe (hardening): each case runs the real command and asserts
exit code 2, a one-line message naming the culprit (file and key, or option), and nothing written.

Items 3, 4, 6, 7 and 8 live in ``tests/test_bad_inputs_files.py``.
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

#: A tiny jax-bert run (preset tiny is the default; no --preset or --steps here, since the command line
#: would override the file's bad value). Every case below fails before any training.
TRAIN = ["--batch-size", "16", "--max-length", "16", "--vocab-size", "128", "--physical-batch", "8"]

# (case id, TOML text or bytes for --config (None: no file), extra options, substrings, substrings that must not appear)
TRAIN_CASES = [
    # The reported repro (trained with shuffled batches under a Poisson label, exit 0).
    ("sampling-bogus", 'sampling = "bogus"\nnoise_multiplier = 1.0\n', [],
     ["--config", "b.toml", "key 'sampling'", "must be one of poisson, shuffle, got 'bogus'."], []),
    # A TOML string is not a boolean: "false" is truthy and trained without privacy.
    ("non-private-string", 'non_private = "false"\n', [],
     ["b.toml", "key 'non_private'", "true or false", "got 'false'"], []),
    ("preset-huge", 'preset = "huge"\nnoise_multiplier = 1.0\n', [],
     ["b.toml", "key 'preset'", "one of tiny, mini, small, base, large", "'huge'"], []),
    ("batch-schedule-int", "batch_schedule = 5\nnoise_multiplier = 1.0\n", [],
     ["b.toml", "key 'batch_schedule'", "must be a string", "5 (int)"], []),
    ("learning-rate-string", 'learning_rate = "fast"\nnoise_multiplier = 1.0\n', [],
     ["b.toml", "key 'learning_rate'", "must be a number", "'fast'"], []),
    ("steps-float", "steps = 2.5\nnoise_multiplier = 1.0\n", [],
     ["b.toml", "key 'steps'", "must be an integer", "2.5 (float)"], []),
    ("sigma-bool", "noise_multiplier = true\n", [],
     ["b.toml", "key 'noise_multiplier'", "must be a number", "True (bool)"], []),
    # Range checks of values from the file name the key as the user wrote it (dashes kept).
    ("clip-norm-range", "clip-norm = -1\nnoise_multiplier = 1.0\n", [],
     ["b.toml", "key 'clip-norm'", "--clip-norm must be a finite number > 0, got -1.0."], []),
    ("target-epsilon-inf-toml", "target_epsilon = inf\n", [],
     ["b.toml", "key 'target_epsilon'", "--target-epsilon must be > 0, got inf."], []),
    # The command line overrides the file: the error is then about the option, not the file.
    ("command-line-wins", "clip_norm = -1\nnoise_multiplier = 1.0\n", ["--clip-norm", "-2"],
     ["--clip-norm must be a finite number > 0, got -2.0."], ["b.toml"]),
    ("config-not-utf8", b'sampling = "caf\xe9"\nnoise_multiplier = 1.0\n', [],
     ["--config", "b.toml", "not UTF-8", "0xe9"], []),
    # Item 2 (train side of the calibration).
    ("target-epsilon-inf", None, ["--steps", "3", "--target-epsilon", "inf"], ["--target-epsilon must be > 0, got inf."], []),
    ("target-epsilon-nan", None, ["--steps", "3", "--target-epsilon", "nan"], ["--target-epsilon must be > 0, got nan."], []),
    ("target-epsilon-huge", None, ["--steps", "3", "--target-epsilon", "1000"],
     ["target epsilon 1000", "noise multipliers below", "lower the target"], []),
    # Item 5 (train side): PLD refuses a delta where its round-off exceeds delta, instead of "inf".
    ("delta-1e-17", None, ["--steps", "3", "--noise-multiplier", "1", "--delta", "1e-17"], ["delta 1e-17 is below 1e-10"], []),
]


@pytest.mark.parametrize(("config", "args", "expected", "absent"), [case[1:] for case in TRAIN_CASES],
                         ids=[case[0] for case in TRAIN_CASES])
def test_train_bad_input_is_one_line_exit_2_and_writes_nothing(data_dir, tmp_path, config, args, expected, absent):
    options = []
    if config is not None:
        path = tmp_path / "b.toml"
        path.write_bytes(config if isinstance(config, bytes) else config.encode())
        options = ["--config", str(path)]
    out = tmp_path / "model"
    result = CliRunner().invoke(cli, ["train", "--trainer", "jax-bert", "--data", str(data_dir), "--out", str(out),
                                      *TRAIN, *options, *args])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for text in expected:
        assert text in result.output, (text, result.output)
    for text in absent:
        assert text not in result.output, (text, result.output)
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == (["b.toml"] if config else [])


ACCOUNT = ["-N", "1000", "--batch-size", "10", "--steps", "100"]

ACCOUNT_CASES = [
    ("target-inf", ["--target-epsilon", "inf"], ["--target-epsilon must be a finite number, got inf."]),
    ("target-nan", ["--target-epsilon", "nan"], ["--target-epsilon must be a finite number, got nan."]),
    ("sigma-nan", ["--noise-multiplier", "nan"], ["--noise-multiplier must be a finite number, got nan."]),
    ("delta-nan", ["--noise-multiplier", "1", "--delta", "nan"], ["--delta must be a finite number, got nan."]),
    # Item 2's repro (climbed past 3 GB and died): refused, saying which sigma already meets the target.
    ("target-1000", ["--target-epsilon", "1000"],
     ["target epsilon 1000 at delta 1e-05", "noise multipliers below", "grid points", "lower the target"]),
    ("target-1e6", ["--target-epsilon", "1e6"], ["target epsilon 1e+06", "lower the target"]),
    # RDP needs no grid, but a root below the search's lower end has no proven minimality either.
    ("target-1e6-rdp", ["--target-epsilon", "1e6", "--accountant", "rdp"],
     ["target epsilon 1e+06", "RDP gives epsilon", "the lower end of the search (0.01)"]),
    ("sigma-tiny", ["--noise-multiplier", "0.003"], ["grid points", "noise multiplier 0.003", "RDP accountant"]),
    # Item 5: PLD asked for explicitly below its reliable range.
    ("tiny-delta-pld", ["--noise-multiplier", "1", "--delta", "1e-17", "--accountant", "pld"],
     ["--delta 1e-17 is below 1e-10", "--accountant rdp"]),
    ("tiny-delta-both", ["--noise-multiplier", "1", "--delta", "1e-17", "--accountant", "both"],
     ["--delta 1e-17 is below 1e-10"]),
]


@pytest.mark.parametrize(("args", "expected"), [case[1:] for case in ACCOUNT_CASES],
                         ids=[case[0] for case in ACCOUNT_CASES])
def test_account_bad_input_is_one_line_exit_2(args, expected):
    result = CliRunner().invoke(cli, ["account", *ACCOUNT, *args])
    assert result.exit_code == 2, result.output
    assert result.stdout == "", result.stdout
    message = [line for line in result.stderr.splitlines() if not line.startswith("calibrating")]
    assert len(message) == 1, result.stderr
    for text in expected:
        assert text in message[0], (text, message[0])


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
    accountant.compose(dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps))
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("args", [
    [*ACCOUNT, "--noise-multiplier", "1", "--delta", "1e-17"],
    # N = 1e12 (the largest -N accepted): the default delta (<= 1/(10 N)) is below PLD's range; at N = 1e16
    # it printed "inf (no noise ...)" at sigma 1.
    ["-N", str(10**12), "-q", "0.01", "--steps", "100", "--noise-multiplier", "1"],
], ids=["delta-1e-17", "default-delta-N-1e12"])
def test_tiny_delta_is_accounted_by_rdp_and_never_reads_as_no_noise(args):
    result = CliRunner().invoke(cli, ["account", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["delta"] <= 1e-13  # below PLD_MIN_DELTA (1e-10): only RDP can state it
    assert set(out["epsilon"]) == {"rdp"}
    expected = rdp_epsilon(0.01, 1.0, 100, out["delta"])
    assert math.isfinite(expected) and out["epsilon"]["rdp"] == pytest.approx(expected, rel=1e-12)
    assert 3.0 < expected < 5.0  # 4.65 at delta 1e-17, 3.52 at 1e-13 (the reported figure at delta 1e-16 is 4.37)
    text = CliRunner().invoke(cli, ["account", *args], catch_exceptions=False).output
    assert "no noise" not in text and "epsilon (RDP)" in text and "delta below 1e-10" in text
