"""jax-bert resume: a run killed after a checkpoint and rerun equals the same run done straight.

The kill is injected right after the checkpoint at step N is on disk (the exception propagates out
of ``train`` like a SIGKILL would end the process: no cleanup code writes anything). A fresh trainer
then resumes from that checkpoint to step 2N; its parameters, ledger and metrics must equal those of
an uninterrupted 2N-step run bit for bit (same sampling Generator state, same PRNG streams).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.jax_bert import checkpoint as ckpt
from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer
from dpaudit.training.train_dir import list_checkpoints


class _Killed(BaseException):
    """Stands in for SIGKILL: not an Exception, so nothing catches it on the way out."""


def _params(out):
    return load_file(str(out / "model" / "model.safetensors"))


def _rows(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("examples_per_s", None)  # wall-clock
    return rows


def test_interrupted_then_resumed_equals_straight(data_dir, tmp_path, monkeypatch, tiny_config):
    config = tiny_config()
    straight = JaxBertTrainer().train(data_dir, tmp_path / "straight", config, seed=7)
    assert straight.steps == 6

    real_save = ckpt.save_checkpoint

    def save_then_die(directory, *, step, **kwargs):
        path = real_save(directory, step=step, **kwargs)
        if step == 3:
            raise _Killed()
        return path

    monkeypatch.setattr(ckpt, "save_checkpoint", save_then_die)
    resumed_out = tmp_path / "resumed"
    with pytest.raises(_Killed):
        JaxBertTrainer().train(data_dir, resumed_out, config, seed=7)
    monkeypatch.undo()
    # Killed: only the checkpoint (and its partial metrics) exist, no final outputs.
    assert sorted(p.name for p in resumed_out.iterdir()) == ["checkpoints"]
    assert [step for step, _ in list_checkpoints(resumed_out / "checkpoints")] == [3]

    resumed = JaxBertTrainer().train(data_dir, resumed_out, config, seed=7)
    assert resumed.steps == 6 and resumed.summary["resumed_from_step"] == 3
    a, b = _params(tmp_path / "straight"), _params(resumed_out)
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert resumed.epsilon == straight.epsilon
    p1 = json.loads((tmp_path / "straight" / "privacy.json").read_text())
    p2 = json.loads((resumed_out / "privacy.json").read_text())
    assert p1["event"] == p2["event"] and p1["segments"] == p2["segments"]
    assert _rows(tmp_path / "straight") == _rows(resumed_out)


def test_resume_with_different_settings_is_a_one_line_error(data_dir, tmp_path, tiny_config):
    out = tmp_path / "run"
    JaxBertTrainer().train(data_dir, out, tiny_config(), seed=1)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    with pytest.raises(UserInputError, match=r"--noise-multiplier 1\.0 -> 2\.0") as err:
        JaxBertTrainer().train(data_dir, out, tiny_config(noise_multiplier=2.0), seed=1)
    assert "\n" not in str(err.value)
    with pytest.raises(UserInputError, match="--seed 1"):
        JaxBertTrainer().train(data_dir, out, tiny_config(), seed=2)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # nothing touched


def test_rerun_of_a_finished_run_trains_nothing_more(data_dir, tmp_path, tiny_config):
    out = tmp_path / "run"
    first = JaxBertTrainer().train(data_dir, out, tiny_config(), seed=1)
    weights = _params(out)
    again = JaxBertTrainer().train(data_dir, out, tiny_config(), seed=1)
    assert again.steps == first.steps == 6 and again.epsilon == first.epsilon
    for name, value in _params(out).items():
        np.testing.assert_array_equal(value, weights[name])


def test_out_dir_with_foreign_files_is_refused(data_dir, tmp_path, tiny_config):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(UserInputError, match="holds no jax-bert checkpoint"):
        JaxBertTrainer().train(data_dir, out, tiny_config(), seed=1)
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
