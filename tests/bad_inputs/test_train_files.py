"""``dpaudit train`` and the files around it (hardening, items 3, 7 and 8; moved from tests/test_bad_inputs_files.py):
an inject manifest edited by hand, a read-only parent, labels outside the public label set, a damaged checkpoint or
privacy ledger, a file-size limit while a checkpoint is written: each is a one-line error, exit code 2, naming the
culprit, and leaves nothing behind (a run directory keeps only what a rerun resumes from). The run-directory lock
is tested with a real second process; model and checkpoint files get the modes of every other output.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import DIR_MODE, FILE_MODE, lock_path
from tests.bad_inputs.file_faults import (
    _READ_ONLY,
    TINY,
    Case,
    Ctx,
    _copy_data,
    _edit_manifest,
    _file_size_limit,
    _start_holder,
    _train_args,
    assert_one_line_error,
    run_cli,
    tree,
)


@pytest.fixture(scope="module")
def trained_run(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("trained") / "model"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--seed",
            "3",
            "--noise-multiplier",
            "1.0",
            "--keep-checkpoints",
            *TINY,
        ],
        catch_exceptions=False,
    )  # kept: the damaged-checkpoint cases edit them
    assert result.exit_code == 0, result.output
    return out


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
    return [
        "train",
        "--trainer",
        "edp-sgd",
        "--mode",
        "sgd",
        "--task",
        "classify",
        "--data",
        str(data),
        "--out",
        str(out),
        "--preset",
        "tiny",
        "--vocab-size",
        "300",
        "--max-length",
        "16",
        "--epochs",
        "1",
        *extra,
    ]


def _train_row_with_an_undeclared_label(ctx: Ctx):
    """A private row whose label is outside the public label set
    is refused (it would have widened the released head); the error is seen by the data owner only."""
    pytest.importorskip("torch")
    data = _copy_data(ctx)
    with open(data / "train.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"text": "order a pizza", "label": "order_pizza"}) + "\n")
    digest = hashlib.sha256((data / "train.jsonl").read_bytes()).hexdigest()
    _edit_manifest(data, lambda m: m["outputs"].update({"train.jsonl": digest}))
    return (
        _classify_args(data, ctx.base / "model"),
        [
            f"{data / 'train.jsonl'}:97: label 'order_pizza' is not in the public label set (from public.jsonl); declare it "
            "with --labels or map unknown labels with --unknown-label NAME."
        ],
        None,
    )


def _train_unknown_label_outside_public_labels(ctx: Ctx):
    pytest.importorskip("torch")
    return (
        _classify_args(ctx.data_dir, ctx.base / "model", "--unknown-label", "other"),
        [
            "--unknown-label 'other' is not a label of",
            "public.jsonl",
            "pick one of them or declare the set with --labels",
        ],
        None,
    )


def _train_labels_file_missing(ctx: Ctx):
    pytest.importorskip("torch")
    return (
        _classify_args(ctx.data_dir, ctx.base / "model", "--labels", f"@{ctx.base / 'labels.txt'}"),
        ["--labels @", "labels.txt: cannot read", "one label per line"],
        None,
    )


def _train_read_only_parent(ctx: Ctx):
    data = _copy_data(ctx)
    (ctx.base / "ro").mkdir()
    (ctx.base / "ro").chmod(0o555)
    return (
        _train_args(data, ctx.base / "ro" / "model"),
        [f"--out {ctx.base / 'ro' / 'model'}: cannot write in {ctx.base / 'ro'}", "Permission denied"],
        _READ_ONLY,
    )


def _train_truncated_checkpoint(ctx: Ctx):
    args, latest = _damaged_checkpoint(ctx, _truncate_arrays_and_patch_hash)
    return args, [f"{latest / 'arrays.safetensors'}: unreadable checkpoint arrays", f"delete {latest}"], None


def _train_damaged_ledger(ctx: Ctx):
    args, latest = _damaged_checkpoint(ctx, _damage_ledger)
    return args, [f"{latest / 'state.json'}: damaged privacy ledger", f"delete {latest}"], None


CASES: dict[str, Case] = {
    "train: manifest outputs is a list": _train_manifest_outputs_is_a_list,
    "train: manifest omits train.jsonl": _train_manifest_omits_train_jsonl,
    "train: read-only parent": _train_read_only_parent,
    "train: train.jsonl row with an undeclared label": _train_row_with_an_undeclared_label,
    "train: --unknown-label outside public.jsonl's labels": _train_unknown_label_outside_public_labels,
    "train: --labels @missing file": _train_labels_file_missing,
    "train: truncated checkpoint, hash patched": _train_truncated_checkpoint,
    "train: damaged ledger in state.json": _train_damaged_ledger,
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
def test_train_under_a_file_size_limit_is_one_line_and_leaves_no_finished_or_staged_output(
    data_dir, scratch, trained_run
):
    """Disk full while writing a checkpoint (safetensors raises its own error type). The run directory
    keeps only what a rerun resumes or restarts from: no model, no manifest, no half-written checkpoint.
    The child runs ``trained_run``'s command on as many devices (its first checkpoint at step 3): the programs it
    needs are already in the session's XLA cache, so it loads them instead of compiling."""
    del trained_run  # built (and compiled) first
    base = scratch / "train_fsize"
    base.mkdir()
    out = base / "model"
    args = _train_args(data_dir, out)
    outcome = run_cli(args, subprocess_with=_file_size_limit(4096), cwd=base, devices=2)
    assert_one_line_error(
        outcome,
        f"{out / 'checkpoints'}",
        "arrays.safetensors: could not write the checkpoint",
        "File too large",
        "rerun the same command to resume",
    )
    left = tree(base)
    assert not [p for p in left if Path(p).name.startswith(".")]  # no staging folder, no lock file
    assert not (out / "manifest.json").exists() and not (out / "model").exists()
    assert not list((out / "checkpoints").glob("step_*"))


# ------------------------------------------------------------------------------------------------
# Item 3: the run-directory lock, with a real second process.


def test_train_is_refused_while_another_process_holds_the_lock(data_dir, tmp_path):
    out = tmp_path / "model"
    holder = _start_holder(out, "train --trainer jax-bert")
    try:
        before = tree(tmp_path)
        outcome = run_cli(_train_args(data_dir, out))
        assert_one_line_error(
            outcome, f"--out {out} is in use by another process (pid {holder.pid}", "dpaudit train --trainer jax-bert"
        )
        assert tree(tmp_path) == before
    finally:
        holder.stdin.close()  # a clean exit releases and removes the lock file
        holder.wait()
    assert holder.returncode == 0 and not lock_path(out).exists()


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
# Item 8: file modes.


def test_model_and_checkpoint_files_get_the_modes_of_every_other_output(trained_run):
    files = [
        trained_run / "model" / "model.safetensors",
        trained_run / "privacy.json",
        trained_run / "manifest.json",
        *(trained_run / "checkpoints").glob("step_*/*"),
    ]
    assert len(files) > 5
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == FILE_MODE, path
    for path in [trained_run / "model", *(trained_run / "checkpoints").glob("step_*")]:
        assert stat.S_IMODE(path.stat().st_mode) == DIR_MODE, path
