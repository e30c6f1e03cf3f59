"""Bad inputs and faults around files: each is a one-line error,
exit code 2, naming the culprit, and leaves nothing behind. Run-directory locks and stale staging folders
are tested with real second processes.

Cases that need a real process limit run ``python -m dpaudit`` in a subprocess that first limits itself:
a file-size limit (``RLIMIT_FSIZE`` with SIGXFSZ ignored, as ``ulimit -f`` in a shell) and a read-only
parent directory (as root, chmod does not stop writes, so the child drops the capabilities that override
directory permissions before it execs dpaudit).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.rundir import DIR_MODE, FILE_MODE, lock_path

REPO_ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--frequencies", "1,2", "--per-frequency", "2", "--holdout", "1"]
TINY = ["--preset", "tiny", "--max-length", "16", "--vocab-size", "128", "--physical-batch", "8", "--eval-examples", "16",
        "--log-every", "2", "--eval-every", "3", "--checkpoint-every", "3", "--steps", "6", "--batch-size", "16"]
# argv: FILE_SIZE_LIMIT DROP_ROOT_OVERRIDES DPAUDIT_ARGS...: applies the limits to this process, then execs
# `python -m dpaudit ARGS` (limits and ignored signals survive exec). Root ignores directory permissions, so
# it drops the capabilities that let it from the bounding set: the exec'd dpaudit never has them.
LAUNCHER = """
import ctypes, os, resource, signal, sys
limit, drop = int(sys.argv[1]), sys.argv[2] == "1"
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
if drop and os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
os.execv(sys.executable, [sys.executable, "-m", "dpaudit", *sys.argv[3:]])
"""
# Holds the run-directory lock of argv[1] as stage argv[2] until killed or its stdin closes.
HOLDER = """
import sys
from dpaudit.rundir import run_dir_lock
with run_dir_lock(sys.argv[1], stage=sys.argv[2]):
    print("locked", flush=True)
    sys.stdin.read()
"""


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def small_corpus(d: Path, lines: int = 300) -> str:
    path = d / "corpus.txt"
    path.write_text("".join(f"line {i} of the small test corpus\n" for i in range(lines)), encoding="utf-8")
    return str(path)


def _child_env() -> dict[str, str]:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", XLA_FLAGS="--xla_force_host_platform_device_count=1",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.pop("JAX_COORDINATOR_ADDRESS", None)
    return env


@dataclass(frozen=True)
class Limits:
    """What the child process runs under: a file-size limit in bytes, and/or no root permission overrides."""

    file_size: int = 0
    drop_root_overrides: bool = False


def _file_size_limit(limit: int) -> Limits:
    return Limits(file_size=limit)



_READ_ONLY = Limits(drop_root_overrides=True)


@dataclass
class Outcome:
    exit_code: int
    text: str  # what the user saw (stdout + stderr)


def run_cli(args: list[str], *, subprocess_with: Limits | None = None, cwd: Path | None = None) -> Outcome:
    """``dpaudit ARGS`` in this process (CliRunner), or in a child process under ``subprocess_with``.

    The child applies the limits to itself and then execs ``python -m dpaudit`` (like ``ulimit -f N; dpaudit``):
    no ``preexec_fn``, which would fork this multithreaded (JAX) process.
    """
    if subprocess_with is None:
        result = CliRunner().invoke(cli, args)
        return Outcome(result.exit_code, result.output)
    launcher = [sys.executable, "-c", LAUNCHER, str(subprocess_with.file_size), str(int(subprocess_with.drop_root_overrides))]
    proc = subprocess.run([*launcher, *args], cwd=cwd or REPO_ROOT, env=_child_env(), capture_output=True, text=True,
                          timeout=300)
    return Outcome(proc.returncode, proc.stdout + proc.stderr)


def assert_one_line_error(outcome: Outcome, *needles: str) -> str:
    assert outcome.exit_code == 2, outcome.text[-3000:]
    assert "Traceback" not in outcome.text, outcome.text[-3000:]
    # Progress bars go to stderr with carriage returns; the error is the one line starting "Error: ".
    lines = [line.strip() for chunk in outcome.text.splitlines() for line in chunk.split("\r") if line.strip()]
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0] == lines[-1], outcome.text[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


# ------------------------------------------------------------------------------------------------
# Shared inputs: a scratch folder, the tiny inject directory of conftest, and one finished tiny DP train
# run to damage.


@pytest.fixture(scope="module")
def scratch():
    base = Path(tempfile.mkdtemp(prefix="dpaudit-bad-inputs-"))
    base.chmod(0o755)
    yield base
    for path in base.rglob("*"):  # undo read-only folders before removing
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def trained_run(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "model"
    result = CliRunner().invoke(cli, ["train", "--trainer", "jax-bert", "--data", str(data_dir), "--out", str(out),
                                      "--seed", "3", "--noise-multiplier", "1.0", "--keep-checkpoints", *TINY],
                                catch_exceptions=False)  # kept: the damaged-checkpoint cases edit them
    assert result.exit_code == 0, result.output
    return out


@dataclass
class Ctx:
    base: Path  # this case's folder: the tree under it must not change
    scratch: Path
    data_dir: Path
    trained_run: Path | None


def _copy_data(ctx: Ctx) -> Path:
    copy = ctx.base / "data"
    shutil.copytree(ctx.data_dir, copy)
    return copy


def _edit_manifest(data: Path, edit: Callable[[dict], None]) -> None:
    manifest = json.loads((data / "manifest.json").read_text(encoding="utf-8"))
    edit(manifest)
    (data / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def _train_args(data: Path, out: Path) -> list[str]:
    return ["train", "--trainer", "jax-bert", "--data", str(data), "--out", str(out), "--seed", "3",
            "--noise-multiplier", "1.0", *TINY]


def _damaged_checkpoint(ctx: Ctx, damage: Callable[[Path], None]) -> tuple[list[str], Path]:
    run = ctx.base / "model"
    shutil.copytree(ctx.trained_run, run)
    latest = sorted((run / "checkpoints").glob("step_*"))[-1]
    damage(latest)
    return _train_args(ctx.data_dir, run), latest


def _truncate_arrays_and_patch_hash(step_dir: Path) -> None:
    arrays = step_dir / "arrays.safetensors"
    arrays.write_bytes(arrays.read_bytes()[: arrays.stat().st_size // 2])
    state = json.loads((step_dir / "state.json").read_text(encoding="utf-8"))
    state["arrays_sha256"] = hashlib.sha256(arrays.read_bytes()).hexdigest()
    (step_dir / "state.json").write_text(json.dumps(state), encoding="utf-8")


def _damage_ledger(step_dir: Path) -> None:
    state = json.loads((step_dir / "state.json").read_text(encoding="utf-8"))
    state["ledger"] = "garbage"
    (step_dir / "state.json").write_text(json.dumps(state), encoding="utf-8")


# Each case: ctx -> (dpaudit args, needles, how to run: None in-process, else the limits of a child process).
Case = Callable[[Ctx], tuple[list[str], list[str], Limits | None]]


def _inject_swamped(ctx: Ctx):
    return (["inject", "--corpus", small_corpus(ctx.base), "--out", str(ctx.base / "out" / "run"),
             "--frequencies", "1000000", "--per-frequency", "20"],
            ["--frequencies", "99.999% of train.jsonl", "20,000,000 insertions among 210 corpus rows", "50% limit", "--force"], None)


def _inject_cwd_overwrite(ctx: Ctx):
    return (["inject", "--corpus", small_corpus(ctx.base), "--out", ".", "--overwrite", *SMALL],
            ["--out . is the current directory"], None)


def _inject_read_only_parent(ctx: Ctx):
    corpus = small_corpus(ctx.base)
    (ctx.base / "ro").mkdir()
    (ctx.base / "ro").chmod(0o555)
    return (["inject", "--corpus", corpus, "--out", str(ctx.base / "ro" / "run"), *SMALL],
            [f"--out {ctx.base / 'ro' / 'run'}: cannot write in {ctx.base / 'ro'}", "Permission denied"], _READ_ONLY)


def _inject_file_size_limit(ctx: Ctx):
    return (["inject", "--corpus", "builtin:assistant", "--corpus-size", "3000", "--out", str(ctx.base / "run"), *SMALL],
            [f"--out {ctx.base / 'run'}: writing train.jsonl failed", "File too large", "ulimit -f"],
            _file_size_limit(16 * 1024))


def _train_manifest_outputs_is_a_list(ctx: Ctx):
    data = _copy_data(ctx)
    _edit_manifest(data, lambda m: m.update(outputs=sorted(m["outputs"])))
    return _train_args(data, ctx.base / "model"), [f"{data / 'manifest.json'}: 'outputs' must map", "got list"], None


def _train_manifest_omits_train_jsonl(ctx: Ctx):
    data = _copy_data(ctx)
    _edit_manifest(data, lambda m: m["outputs"].pop("train.jsonl"))
    with open(data / "train.jsonl", "a", encoding="utf-8") as handle:  # an edit the hash check would not see
        handle.write('{"text": "sneaked in"}\n')
    return _train_args(data, ctx.base / "model"), [f"{data / 'manifest.json'} does not list train.jsonl"], None


def _classify_args(data: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--trainer", "edp-sgd", "--mode", "sgd", "--task", "classify", "--data", str(data), "--out", str(out),
            "--preset", "tiny", "--vocab-size", "300", "--max-length", "16", "--epochs", "1", *extra]


def _train_row_with_an_undeclared_label(ctx: Ctx):
    """A private row whose label is outside the public label set
    is refused (it would have widened the released head); the error is seen by the data owner only."""
    pytest.importorskip("torch")
    data = _copy_data(ctx)
    with open(data / "train.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"text": "order a pizza", "label": "order_pizza"}) + "\n")
    digest = hashlib.sha256((data / "train.jsonl").read_bytes()).hexdigest()
    _edit_manifest(data, lambda m: m["outputs"].update({"train.jsonl": digest}))
    return _classify_args(data, ctx.base / "model"), [
        f"{data / 'train.jsonl'}:97: label 'order_pizza' is not in the public label set (from public.jsonl); declare it "
        "with --labels or map unknown labels with --unknown-label NAME."], None


def _train_unknown_label_outside_public_labels(ctx: Ctx):
    pytest.importorskip("torch")
    return _classify_args(ctx.data_dir, ctx.base / "model", "--unknown-label", "other"), [
        "--unknown-label 'other' is not a label of", "public.jsonl", "pick one of them or declare the set with --labels"], None


def _train_labels_file_missing(ctx: Ctx):
    pytest.importorskip("torch")
    return _classify_args(ctx.data_dir, ctx.base / "model", "--labels", f"@{ctx.base / 'labels.txt'}"), [
        "--labels @", "labels.txt: cannot read", "one label per line"], None


def _train_read_only_parent(ctx: Ctx):
    data = _copy_data(ctx)
    (ctx.base / "ro").mkdir()
    (ctx.base / "ro").chmod(0o555)
    return (_train_args(data, ctx.base / "ro" / "model"),
            [f"--out {ctx.base / 'ro' / 'model'}: cannot write in {ctx.base / 'ro'}", "Permission denied"], _READ_ONLY)


def _train_truncated_checkpoint(ctx: Ctx):
    args, latest = _damaged_checkpoint(ctx, _truncate_arrays_and_patch_hash)
    return args, [f"{latest / 'arrays.safetensors'}: unreadable checkpoint arrays", f"delete {latest}"], None


def _train_damaged_ledger(ctx: Ctx):
    args, latest = _damaged_checkpoint(ctx, _damage_ledger)
    return args, [f"{latest / 'state.json'}: damaged privacy ledger", f"delete {latest}"], None


def _account_schedule_not_utf8(ctx: Ctx):
    path = ctx.base / "s.json"
    path.write_bytes(b'[{"steps": 10, "batch_size": 10}]\n# caf\xe9\n')
    return ["account", "-N", "1000", "--sigma", "1", "--schedule", str(path)], [f"--schedule {path}: not UTF-8", "0xe9"], None


def _account_schedule_batch_size_is_text(ctx: Ctx):
    path = ctx.base / "s.toml"
    path.write_text('[[segments]]\nsteps = 10\nbatch_size = "ten"\n', encoding="utf-8")
    return (["account", "-N", "1000", "--sigma", "1", "--schedule", str(path)],
            [f"--schedule {path}: segment 1: batch_size must be an integer, got 'ten'"], None)


def _account_batch_schedule_with_b_and_s(ctx: Ctx):
    return (["account", "-N", "1000", "--sigma", "1", "--batch-schedule", "10:10,10:20", "-B", "10", "-S", "5"],
            ["--batch-schedule sets every segment's steps and batch", "--batch-size/-B", "--steps/-S"], None)


CASES: dict[str, Case] = {
    "inject: canaries swamp the corpus": _inject_swamped,
    "inject: --out . --overwrite": _inject_cwd_overwrite,
    "inject: read-only parent": _inject_read_only_parent,
    "inject: file-size limit": _inject_file_size_limit,
    "train: manifest outputs is a list": _train_manifest_outputs_is_a_list,
    "train: manifest omits train.jsonl": _train_manifest_omits_train_jsonl,
    "train: read-only parent": _train_read_only_parent,
    "train: train.jsonl row with an undeclared label": _train_row_with_an_undeclared_label,
    "train: --unknown-label outside public.jsonl's labels": _train_unknown_label_outside_public_labels,
    "train: --labels @missing file": _train_labels_file_missing,
    "train: truncated checkpoint, hash patched": _train_truncated_checkpoint,
    "train: damaged ledger in state.json": _train_damaged_ledger,
    "account: --schedule not UTF-8": _account_schedule_not_utf8,
    "account: schedule batch_size = 'ten'": _account_schedule_batch_size_is_text,
    "account: --batch-schedule with -B and -S": _account_batch_schedule_with_b_and_s,
}
NEEDS_TRAINED_RUN = {"train: truncated checkpoint, hash patched", "train: damaged ledger in state.json"}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(name, scratch, data_dir, request, monkeypatch):
    base = scratch / name.replace(" ", "_").replace(":", "").replace("'", "").replace("/", "_")
    base.mkdir()
    trained = request.getfixturevalue("trained_run") if name in NEEDS_TRAINED_RUN else None
    ctx = Ctx(base=base, scratch=scratch, data_dir=data_dir, trained_run=trained)
    args, needles, limits = CASES[name](ctx)
    monkeypatch.chdir(base)
    before = tree(scratch)
    outcome = run_cli(args, subprocess_with=limits, cwd=base)
    assert_one_line_error(outcome, *needles)
    assert tree(scratch) == before  # no output, no staging folder, no lock file


@pytest.mark.slow
def test_train_under_a_file_size_limit_is_one_line_and_leaves_no_finished_or_staged_output(data_dir, scratch):
    """Disk full while writing a checkpoint (safetensors raises its own error type). The run directory
    keeps only what a rerun resumes or restarts from: no model, no manifest, no half-written checkpoint."""
    base = scratch / "train_fsize"
    base.mkdir()
    out = base / "model"
    args = ["train", "--trainer", "jax-bert", "--data", str(data_dir), "--out", str(out), "--non-private",
            "--preset", "tiny", "--max-length", "16", "--vocab-size", "128", "--physical-batch", "8", "--eval-examples", "0",
            "--steps", "2", "--batch-size", "16"]
    outcome = run_cli(args, subprocess_with=_file_size_limit(4096), cwd=base)
    assert_one_line_error(outcome, f"{out / 'checkpoints'}", "arrays.safetensors: could not write the checkpoint",
                          "File too large", "rerun the same command to resume")
    left = tree(base)
    assert not [p for p in left if Path(p).name.startswith(".")]  # no staging folder, no lock file
    assert not (out / "manifest.json").exists() and not (out / "model").exists()
    assert not list((out / "checkpoints").glob("step_*"))


# ------------------------------------------------------------------------------------------------
# Item 3: run-directory locks, with real second processes.


def _start_holder(out: Path, stage: str) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out), stage], cwd=REPO_ROOT, env=_child_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_inject_is_refused_while_another_process_holds_the_lock_and_runs_once_it_died(tmp_path):
    out = tmp_path / "run"
    corpus = small_corpus(tmp_path)
    holder = _start_holder(out, "inject")
    try:
        live = tmp_path / f".{out.name}.staging-live"  # the holder's own staging folder: not stale, must survive
        live.mkdir()
        (live / "train.jsonl").write_text("{}\n")
        before = tree(tmp_path)
        outcome = run_cli(["inject", "--corpus", corpus, "--out", str(out), *SMALL])
        assert_one_line_error(outcome, f"--out {out} is in use by another process (pid {holder.pid}", "dpaudit inject")
        assert tree(tmp_path) == before
    finally:
        holder.kill()  # SIGKILL: no cleanup runs, the kernel drops the lock
        holder.wait()
    assert lock_path(out).exists()  # the dead holder's file is left, but it locks nothing
    result = CliRunner().invoke(cli, ["inject", "--corpus", corpus, "--out", str(out), *SMALL], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "run"]  # stale staging and lock file gone


def test_train_is_refused_while_another_process_holds_the_lock(data_dir, tmp_path):
    out = tmp_path / "model"
    holder = _start_holder(out, "train --trainer jax-bert")
    try:
        before = tree(tmp_path)
        outcome = run_cli(_train_args(data_dir, out))
        assert_one_line_error(outcome, f"--out {out} is in use by another process (pid {holder.pid}",
                              "dpaudit train --trainer jax-bert")
        assert tree(tmp_path) == before
    finally:
        holder.stdin.close()  # a clean exit releases and removes the lock file
        holder.wait()
    assert holder.returncode == 0 and not lock_path(out).exists()


def test_two_concurrent_injects_into_one_directory_write_it_once(tmp_path):
    out = tmp_path / "run"
    procs = [subprocess.Popen([sys.executable, "-m", "dpaudit", "inject", "--corpus", "builtin:assistant",
                               "--corpus-size", "3000", "--out", str(out), "--seed", str(seed), *SMALL],
                              cwd=REPO_ROOT, env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for seed in (1, 2)]
    outputs = [p.communicate(timeout=120) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], outputs
    winner, loser = (0, 1) if codes[0] == 0 else (1, 0)
    message = outputs[loser][1].strip().splitlines()[-1]
    assert (f"is in use by another process (pid {procs[winner].pid}" in message
            or f"--out {out} exists and is not empty" in message), message  # it may also start after the winner ended
    assert "Wrote" not in outputs[loser][0]
    assert json.loads((out / "manifest.json").read_text())["seed"] == winner + 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_the_jax_bert_lock_is_taken_by_process_0_only(monkeypatch):
    from dpaudit.trainers.jax_bert.parallel import env_process_index
    from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer

    multi = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1234", "JAX_NUM_PROCESSES": "2"}
    assert env_process_index({}) == 0 and env_process_index({**multi, "JAX_PROCESS_ID": "1"}) == 1
    assert env_process_index({"JAX_COORDINATOR_ADDRESS": "x:1", "JAX_NUM_PROCESSES": "1", "JAX_PROCESS_ID": "7"}) == 0
    for key, value in {**multi, "JAX_PROCESS_ID": "1"}.items():
        monkeypatch.setenv(key, value)
    assert JaxBertTrainer().writes_run_dir() is False
    monkeypatch.setenv("JAX_PROCESS_ID", "0")
    assert JaxBertTrainer().writes_run_dir() is True


# ------------------------------------------------------------------------------------------------
# Item 4: a killed inject's staging folder is removed by the next run of the same target.


def test_killed_inject_leaves_staging_that_the_next_run_removes(tmp_path):
    corpus = tmp_path / "big.txt"
    corpus.write_text("".join(f"utterance number {i} of a long corpus for the staging test\n" for i in range(200_000)),
                      encoding="utf-8")
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "dpaudit", "inject", "--corpus", str(corpus), "--out", str(out),
                             "--heldout-size", "10", "--public-size", "10"],
                            cwd=REPO_ROOT, env=_child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    staging: list[Path] = []
    while not staging and proc.poll() is None and time.monotonic() < deadline:
        staging = list(tmp_path.glob(".run.staging-*"))
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert staging and staging[0].is_dir() and not out.exists(), "the inject finished before it could be killed"
    result = CliRunner().invoke(cli, ["inject", "--corpus", small_corpus(tmp_path), "--out", str(out), *SMALL],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.txt", "corpus.txt", "run"]


# ------------------------------------------------------------------------------------------------
# Items 6 and 8: the canary share, file modes, and decreasing batch schedules.


def test_canary_share_is_printed_and_force_accepts_it(tmp_path):
    corpus = small_corpus(tmp_path)  # 300 rows: 210 members
    args = ["inject", "--corpus", corpus, "--frequencies", "100", "--per-frequency", "3", "--holdout", "1"]
    refused = run_cli([*args, "--out", str(tmp_path / "a")])
    assert_one_line_error(refused, f"{300 / 510:.2%} of train.jsonl", "300 insertions among 210 corpus rows")
    result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "b"), "--force"], catch_exceptions=False)
    assert result.exit_code == 0 and f"{300 / 510:.2%} canary rows" in result.output
    normal = CliRunner().invoke(cli, ["inject", "--corpus", corpus, "--out", str(tmp_path / "c"), "--frequencies", "1,2",
                                      "--per-frequency", "2", "--holdout", "0"], catch_exceptions=False)
    assert f"{6 / 216:.2%} canary rows" in normal.output


def test_model_and_checkpoint_files_get_the_modes_of_every_other_output(trained_run):
    files = [trained_run / "model" / "model.safetensors", trained_run / "privacy.json", trained_run / "manifest.json",
             *(trained_run / "checkpoints").glob("step_*/*")]
    assert len(files) > 5
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == FILE_MODE, path
    for path in [trained_run / "model", *(trained_run / "checkpoints").glob("step_*")]:
        assert stat.S_IMODE(path.stat().st_mode) == DIR_MODE, path


def test_a_decreasing_batch_schedule_is_accepted_documented_and_accounted_in_order():
    """Decision: any order is accepted (the accountant composes the segments as run); both helps say so."""
    import dp_accounting
    from dp_accounting import pld

    result = CliRunner().invoke(cli, ["account", "-N", "1000", "--sigma", "1.5", "--batch-schedule", "20:100,30:10",
                                      "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [(s["steps"], s["sampling_probability"]) for s in out["segments"]] == [(20, 0.1), (30, 0.01)]
    gaussian = dp_accounting.GaussianDpEvent(1.5)
    event = dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.1, gaussian), 20),
        dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(0.01, gaussian), 30),
    ])
    accountant = pld.PLDAccountant()
    accountant.compose(event)
    assert out["delta"] == pytest.approx(1e-5)  # the default: min(1e-5, 1/(10 N))
    assert out["epsilon"]["pld"] == pytest.approx(accountant.get_epsilon(1e-5), rel=1e-9)
    for args in (["account", "--help"], ["train", "--trainer", "jax-bert", "--help"]):
        assert "any order" in " ".join(CliRunner().invoke(cli, args).output.split()), args
