"""jax-bert trainer: config validation, checkpoints, the budget guard, sampling labels, data parallelism."""

from __future__ import annotations

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from safetensors.numpy import load_file

from dpaudit import accounting
from dpaudit.common.errors import UserInputError
from dpaudit.common.figures import format_up
from dpaudit.files.run_dirs import read_jsonl
from dpaudit.trainers.jax_bert import checkpoint as ckpt
from dpaudit.trainers.jax_bert.config import JaxBertConfig, parse_batch_schedule
from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer, plan_run_privacy
from dpaudit.training.api import Trainer, load_trainer
from dpaudit.training.train_dir import list_checkpoints

# -- plug-in and config --------------------------------------------------------------------------


def test_registered_plugin_follows_the_protocol():
    trainer = load_trainer("jax-bert")
    assert isinstance(trainer, Trainer) and trainer.name == "jax-bert" and trainer.Config is JaxBertConfig


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "a private run needs --target-epsilon (calibrate the noise) or --noise-multiplier"),
        ({"non_private": True, "noise_multiplier": 1.0}, "--non-private takes no --noise-multiplier"),
        ({"non_private": True, "delta": 1e-5}, "--non-private takes no --delta"),
        ({"target_epsilon": 0.0}, "--target-epsilon must be > 0, got 0.0."),
        ({"target_epsilon": 1.0, "delta": 1.0}, "--delta must be in (0, 1), got 1.0."),
        ({"noise_multiplier": -1.0}, "--noise-multiplier must be between 1e-10 and 1e10, got -1.0"),
        ({"non_private": True, "clip_norm": float("inf")}, "--clip-norm must be a finite number > 0, got inf."),
        ({"non_private": True, "steps": 0}, "--steps must be an integer > 0, got 0."),
        ({"non_private": True, "warmup_steps": 100}, "--warmup-steps must be < the 100 training steps, got 100."),
        ({"non_private": True, "mask_prob": 1.5}, "--mask-prob must be in (0, 1), got 1.5."),
        ({"non_private": True, "batch_schedule": "5:8,x"}, "--batch-schedule item 2"),
        ({"non_private": True, "batch_schedule": "5:0"}, "steps and batch sizes must be > 0"),
    ],
)
def test_config_errors_are_one_line_and_name_the_option(kwargs, message):
    with pytest.raises(ValueError) as err:
        JaxBertConfig(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_batch_schedule_overrides_steps_and_batch_size():
    config = JaxBertConfig(non_private=True, steps=7, batch_size=3, batch_schedule="10:64, 20:128")
    assert parse_batch_schedule("10:64, 20:128") == [(10, 64), (20, 128)]
    assert config.schedule == [(10, 64), (20, 128)] and config.total_steps == 30


def test_schedule_plan_accounts_each_segment():
    config = JaxBertConfig(noise_multiplier=1.1, batch_schedule="30:16,20:32")
    plan = plan_run_privacy(config, 320)
    event = accounting.schedule_event(
        [
            accounting.Segment(steps=30, sampling_probability=16 / 320, noise_multiplier=1.1),
            accounting.Segment(steps=20, sampling_probability=32 / 320, noise_multiplier=1.1),
        ]
    )
    assert plan.affordable_steps == 50 and plan.delta == 1e-5  # default min(1e-5, 1/(10 N))
    assert plan.planned_epsilon == pytest.approx(accounting.epsilon(event, 1e-5), rel=1e-9)
    assert plan_run_privacy(config, 10**6).delta == pytest.approx(1e-7)


def test_batch_schedule_run_records_one_segment_per_stage(data_dir, tmp_path, tiny_config):
    """The second stage's batch (24) packs into more micro-steps per chunk than the first's (6 of 8 slots, not 5):
    the run changes its chunk shape mid-way, to the shape test_sequential_runs.py's batch-24 run compiles."""
    result = JaxBertTrainer().train(data_dir, tmp_path / "run", tiny_config(batch_schedule="3:16,3:24"), seed=0)
    privacy = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert [(s["steps"], s["expected_batch_size"]) for s in privacy["segments"]] == [(3, 16), (3, 24)]
    expected = accounting.schedule_event(
        accounting.batch_schedule_segments(dataset_size=96, schedule=[(3, 16), (3, 24)], noise_multiplier=1.0)
    )
    assert accounting.epsilon(expected, 1e-5) == pytest.approx(result.epsilon, rel=1e-9)
    rows = list(read_jsonl(tmp_path / "run" / "metrics.jsonl"))
    assert [r["expected_batch_size"] for r in rows] == [16, 16, 16, 24, 24, 24]


# -- checkpoints ---------------------------------------------------------------------------------


def test_checkpoint_round_trip_is_exact_and_keeps_the_newest(tmp_path):
    params = {"dense": {"kernel": jnp.arange(6.0).reshape(2, 3), "bias": jnp.ones(3)}, "scale": jnp.float32(2.5)}
    opt = optax.adamw(1e-3)
    opt_state = opt.init(params)
    _, opt_state = opt.update(jax.tree.map(jnp.ones_like, params), opt_state, params)
    state = {"numpy_rng": np.random.default_rng(1).bit_generator.state, "ledger": {"x": 1}}
    for step in (1, 2, 3):
        ckpt.save_checkpoint(tmp_path, step=step, params=params, opt_state=opt_state, state=state)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [2, 3]
    zeros = jax.tree.map(jnp.zeros_like, params)
    restored = ckpt.restore_checkpoint(
        tmp_path / "step_00000003", params_template=zeros, opt_state_template=opt.init(zeros)
    )
    assert restored.step == 3 and restored.state["ledger"] == {"x": 1}
    for a, b in zip(jax.tree.leaves((params, opt_state)), jax.tree.leaves((restored.params, restored.opt_state))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert jax.tree.structure(restored.opt_state) == jax.tree.structure(opt_state)
    with pytest.raises(UserInputError, match="does not match this model"):
        ckpt.restore_checkpoint(
            tmp_path / "step_00000003", params_template={"other": jnp.zeros(3)}, opt_state_template=opt.init(zeros)
        )
    (tmp_path / "step_00000003" / "arrays.safetensors").write_bytes(b"garbage")
    with pytest.raises(UserInputError, match="does not match its state.json hash"):
        ckpt.restore_checkpoint(tmp_path / "step_00000003", params_template=zeros, opt_state_template=opt.init(zeros))


# -- the budget guard ----------------------------------------------------------------------------


def test_run_stops_at_the_budget_and_never_steps_past_it(data_dir, tmp_path, tiny_config):
    sigma, q, delta = 1.0, 16 / 96, 1e-5
    eps_of = [
        accounting.epsilon(accounting.dpsgd_event(noise_multiplier=sigma, sampling_probability=q, steps=k), delta)
        for k in range(1, 7)
    ]
    target = (eps_of[2] + eps_of[3]) / 2  # affords 3 of the 6 planned steps
    config = tiny_config(noise_multiplier=sigma, target_epsilon=target)
    result = JaxBertTrainer().train(data_dir, tmp_path / "run", config, seed=0)
    assert result.steps == 3 and result.summary["stopped_at_budget"] is True
    privacy = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert privacy["steps"] == 3 and privacy["planned_steps"] == 6 and privacy["stopped_at_budget"] is True
    assert privacy["epsilon"] <= target < eps_of[3]  # one more step would have overspent
    assert privacy["epsilon"] == pytest.approx(eps_of[2], rel=1e-6)
    rows = list(read_jsonl(tmp_path / "run" / "metrics.jsonl"))
    assert rows[-1]["step"] == 3 and all(r.get("epsilon", 0) <= target for r in rows)
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
    # Rerunning the same command does not spend more: the ledger still refuses the 4th step.
    again = JaxBertTrainer().train(data_dir, tmp_path / "run", config, seed=0)
    assert again.steps == 3 and again.epsilon == result.epsilon


def test_a_budget_too_small_for_one_step_is_refused_up_front(data_dir, tmp_path, tiny_config):
    with pytest.raises(UserInputError, match="on the first step"):
        JaxBertTrainer().train(
            data_dir, tmp_path / "run", tiny_config(noise_multiplier=0.5, target_epsilon=0.05), seed=0
        )
    assert not (tmp_path / "run").exists()


# -- sampling labels and data parallelism --------------------------------------------------------


def test_shuffle_sampling_has_no_proven_epsilon(data_dir, tmp_path, tiny_config):
    """Fixed batches of 40 fill 5 micro-steps of 8, the chunk shape of the tiny Poisson runs (expected batch 16,
    capacity 5): the run compiles no program of its own."""
    result = JaxBertTrainer().train(data_dir, tmp_path / "run", tiny_config(sampling="shuffle", batch_size=40), seed=0)
    privacy = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert privacy["sampling"] == "shuffle" and "did NOT use" in privacy["notes"][0]
    assert privacy["epsilon"] is None and result.epsilon is None  # no proven figure
    poisson = accounting.epsilon(
        accounting.dpsgd_event(noise_multiplier=1.0, sampling_probability=40 / 96, steps=6), privacy["delta"]
    )
    assert privacy["epsilon_if_poisson"] == pytest.approx(poisson, rel=1e-9)
    assert result.summary["epsilon_if_poisson"] == privacy["epsilon_if_poisson"]
    assert privacy["guarantee"].startswith("no proven epsilon") and privacy["notes"][0].startswith("caveat:")
    assert privacy["group_privacy"] and all(row["epsilon"] is None for row in privacy["group_privacy"])
    rows = list(read_jsonl(tmp_path / "run" / "metrics.jsonl"))
    assert all(r["batch_size"] == 40 for r in rows)  # fixed-size batches


def test_privacy_json_labels_files_group_privacy_and_delta(data_dir, tmp_path, tiny_config):
    result = JaxBertTrainer().train(data_dir, tmp_path / "run", tiny_config(), seed=0)
    privacy = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert set(privacy["released_files"]) == {"model/", "privacy.json"}
    assert set(privacy["private_files"]) == {"manifest.json", "metrics.jsonl", "checkpoints/"}
    assert "sha256 of the training data" in privacy["covers"]
    assert privacy["delta"] == 1e-5 and not any(n.startswith("warning:") for n in privacy["notes"])
    assert any(n.startswith("delta: ") and "1/(10 N)" in n for n in privacy["notes"])
    # The inject fixture inserts canaries 1, 2 and 3 times: one group bound each, chained from (eps, delta).
    groups = privacy["group_privacy"]
    assert [g["frequency"] for g in groups] == [1, 2, 3] and all("Dwork & Roth" in g["bound"] for g in groups)
    eps = result.epsilon
    for g in groups:
        f = g["frequency"]
        assert g["epsilon"] == pytest.approx(f * eps)
        assert g["delta"] == pytest.approx(1e-5 * sum(math.exp(i * eps) for i in range(f)), rel=1e-9)
    assert privacy["epsilon"] == eps and "(" + format_up(eps) + ", " in privacy["guarantee"]
    assert float(format_up(eps)) >= eps  # rounded up
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert (
        manifest["summary"]["telemetry"]["examples_per_s"] > 0
        and "telemetry" in manifest["summary"]["telemetry"]["note"]
    )
    # delta >= 1/N is warned about in privacy.json (the CLI prints the warning on stderr).
    JaxBertTrainer().train(data_dir, tmp_path / "big-delta", tiny_config(delta=1 / 96), seed=0)
    warned = json.loads((tmp_path / "big-delta" / "privacy.json").read_text())
    assert warned["notes"][0].startswith("warning:") and "1/N" in warned["notes"][0]


def test_data_parallel_run_matches_single_device_run(data_dir, tmp_path, tiny_config):
    assert jax.device_count() == 2  # tests/conftest.py forces two CPU devices
    two = JaxBertTrainer().train(data_dir, tmp_path / "two", tiny_config(), seed=5)
    one = JaxBertTrainer().train(data_dir, tmp_path / "one", tiny_config(data_parallel=False), seed=5)
    assert two.summary["devices"] == 2 and one.summary["devices"] == 1
    a = load_file(str(tmp_path / "two" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "one" / "model" / "model.safetensors"))
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)
