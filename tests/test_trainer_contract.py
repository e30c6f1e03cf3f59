"""The contract every registered trainer keeps (the run-directory contract), checked for each of them.

Parametrized over :func:`dpaudit.training.api.available_trainers`, so a new trainer (or a third-party
plug-in installed beside dpaudit) is held to the same promises as soon as it is registered: the run
directory's files, a ``privacy.json`` that round-trips and whose epsilon recomputes from its stored
event (and matches an independent dp_accounting computation of the planned mechanism), a model that
``transformers`` reloads offline, no secret noise seed in any released file, no checkpoints (secret
noise state) left behind, and a refused bad input that writes nothing.
"""

from __future__ import annotations

import json

import pytest

from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import verify_run_dir
from dpaudit.training import ClippedSumStep
from dpaudit.training.api import available_trainers, load_trainer

TRAINERS = sorted(available_trainers())
NOISE_SEED = 987654321
#: The trainers that train a causal LM (``--task clm``): their clm runs keep the same contract.
CLM_TRAINERS = [name for name in ("edp-sgd", "rgp") if name in TRAINERS]
RUNS = [(name, {}) for name in TRAINERS] + [(name, {"task": "clm"}) for name in CLM_TRAINERS]


@pytest.fixture(scope="module", params=RUNS, ids=[name + "-clm" * bool(extra) for name, extra in RUNS])
def contract_run(request, data_dir, tmp_path_factory):
    name, extra = request.param
    trainer = load_trainer(name)
    config = trainer.tiny_config(noise_seed=NOISE_SEED, **extra)
    out = tmp_path_factory.mktemp(f"contract-{name}") / "run"
    result = trainer.train(data_dir, out, config, seed=5)
    return trainer, config, out, result


def test_at_least_the_shipped_trainers_are_registered():
    assert "jax-bert" in TRAINERS


def test_run_directory_layout(contract_run):
    _, _, out, result = contract_run
    assert result.out_dir == out
    for name in (
        "model/config.json",
        "model/model.safetensors",
        "model/tokenizer.json",
        "privacy.json",
        "metrics.jsonl",
        "manifest.json",
    ):
        assert (out / name).is_file(), name
    assert not (out / "checkpoints").exists(), "checkpoints hold the secret noise state: deleted at the end"
    manifest = verify_run_dir(out, schema_prefix="dpaudit.train/")
    assert {"model/model.safetensors", "privacy.json", "metrics.jsonl"} <= set(manifest["outputs"])


def test_privacy_record_round_trips_and_recomputes(contract_run):
    trainer, config, out, result = contract_run
    raw = json.loads((out / "privacy.json").read_text())
    record = PrivacyRecord.from_json(raw)
    assert record.to_json() == raw
    assert record.trainer == trainer.name and record.private
    assert record.epsilon is not None and record.epsilon == pytest.approx(record.recompute_epsilon(), rel=1e-12)
    assert result.epsilon == pytest.approx(record.epsilon, rel=1e-12)
    assert record.noise_seed_explicit and "secret" in record.randomness


def test_noise_seed_is_in_no_released_file(contract_run):
    _, _, out, _ = contract_run
    for path in out.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl"):
            assert str(NOISE_SEED) not in path.read_text(encoding="utf-8"), path


def test_model_reloads_in_transformers(contract_run):
    import torch
    import transformers

    _, _, out, _ = contract_run
    hf_config = transformers.AutoConfig.from_pretrained(out / "model", local_files_only=True)
    architecture = getattr(transformers, hf_config.architectures[0])
    model = architecture.from_pretrained(out / "model", local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "model", local_files_only=True)
    enc = tokenizer(["set an alarm for seven"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits
    assert torch.isfinite(logits).all()


@pytest.mark.parametrize("name", TRAINERS)
def test_refused_input_writes_nothing(name, data_dir, tmp_path):
    trainer = load_trainer(name)
    out = tmp_path / "refused"
    with pytest.raises(UserInputError, match="batch"):
        trainer.train(data_dir, out, trainer.tiny_config(batch_size=10**6), seed=0)
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# The plug-in surface (dpaudit.training): every registered trainer runs on the one skeleton, and a
# third-party trainer needs only the plug-in's pieces.


@pytest.mark.parametrize("name", TRAINERS)
def test_every_registered_trainer_is_a_skeleton_plugin(name):
    from dpaudit.training import TrainerPlugin
    from dpaudit.training.gradient_path import gradient_path_host

    trainer = load_trainer(name)
    if gradient_path_host(trainer) is not None:  # a DP library owns its step (opacus): it writes its own run
        assert not hasattr(trainer, "Plugin") and callable(trainer.train_with_gradient_canaries)
        return
    plugin = trainer.Plugin
    assert issubclass(plugin, TrainerPlugin) and not plugin.__abstractmethods__, plugin


def test_privacy_record_states_the_steps_own_sensitivity(contract_run):
    _, config, out, _ = contract_run
    record = PrivacyRecord.from_json(json.loads((out / "privacy.json").read_text()))
    assert record.sensitivity_factor >= 1.0 and record.clip_norm > 0
    assert all(
        seg["expected_batch_size"] == pytest.approx(seg["sampling_probability"] * record.dataset_size)
        for seg in record.segments
    )  # the one builder: every trainer's segments say their batch


class _Killed(Exception):
    pass


class _LinearStep(ClippedSumStep):
    """Least squares, each example's gradient clipped to C, summed, Gaussian noise of std sigma * C
    from the secret source (keyed by the step), divided by the expected batch, one SGD step."""

    def __init__(self, plugin, clip_norm: float) -> None:
        super().__init__(clip_norm=clip_norm, sensitivity_factor=1.0)  # per-example clipping: sensitivity C
        self.plugin = plugin

    def __call__(self, step, indices, sigma, expected_batch):
        import numpy as np

        p = self.plugin
        if step == p.die_at:
            raise _Killed()
        x, y = p.x[indices], p.y[indices]
        grads = (x @ p.w - y)[:, None] * x
        norms = np.maximum(np.linalg.norm(grads, axis=1) / self.clip_norm, 1.0)
        noise = p.source.numpy_generator(2, step).normal(0.0, sigma * self.sensitivity, size=p.w.shape)
        p.w = p.w - 0.5 * ((grads / norms[:, None]).sum(0) + noise) / expected_batch
        return float(((x @ p.w - y) ** 2).sum()), len(indices)


def _linear_plugin(data_dir, noise_seed: int, die_at: int = -1):
    """A third-party trainer in ~40 lines: a numpy linear regression on text features, written
    against dpaudit.training's plug-in surface only."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from dpaudit.inject_dir.reader import canary_frequencies, load_inject_run
    from dpaudit.training import RecordParts, RunData, RunSettings, TrainerPlugin
    from dpaudit.training.train_dir import write_checkpoint

    class LinearPlugin(TrainerPlugin):
        name, seed = "numpy-linear", 0

        def __init__(self):
            self.die_at, self.w, self.source = die_at, np.zeros(3), None
            self.x = self.y = None

        def settings(self):
            return RunSettings(
                config={"noise_seed": "<secret>"},
                noise_seed=noise_seed,
                checkpoint_every=2,
                plan={
                    "stages": [(6, 16)],
                    "noise_multiplier": 1.5,
                    "non_private": False,
                    "target_epsilon": None,
                    "delta": None,
                },
            )

        def load_data(self):
            data = load_inject_run(data_dir)
            texts = data.train_texts
            self.x = np.array([[len(t) / 50, t.count(" ") / 10, 1.0] for t in texts])
            self.y = np.array([t.count("e") / 10 for t in texts])
            return RunData(
                size=len(texts),
                inputs=data.inputs,
                identity=data.identity,
                frequencies=canary_frequencies(data.manifest),
            )

        def share_source(self, source):
            self.source = source
            return source

        def init_model(self, resume_state):
            self.w = np.zeros(3)

        def make_step(self, dataset_size, resume_state):
            return _LinearStep(self, clip_norm=0.5)

        def save(self, directory, step, state):
            write_checkpoint(directory, step=step, write_arrays=lambda p: save_file({"w": self.w}, str(p)), state=state)

        def read_state(self, path):
            return json.loads((path / "state.json").read_text())

        def restore(self, path):
            self.w = load_file(str(path / "arrays.safetensors"))["w"]
            return self.read_state(path)["step"]

        def export(self, model_dir):
            model_dir.mkdir(parents=True, exist_ok=True)
            save_file({"w": self.w}, str(model_dir / "weights.safetensors"))

        def fetch(self, pending):
            return [{"step": s + 1, "loss": loss / max(n, 1), "batch_size": n} for s, (loss, n) in pending]

        def record_parts(self, plan, steps):
            return RecordParts(
                mechanism="DP-SGD linear regression, per-example clipping to C = 0.5",
                details={"model": "linear, 3 features"},
            )

    return LinearPlugin()


def test_a_third_party_plugin_runs_on_the_skeleton_with_a_correct_privacy_record(data_dir, tmp_path):
    import dp_accounting
    from safetensors.numpy import load_file

    from dpaudit.training import RunSkeleton

    straight = RunSkeleton(_linear_plugin(data_dir, noise_seed=11), tmp_path / "straight").execute()
    verify_run_dir(tmp_path / "straight", schema_prefix="dpaudit.train/")
    assert not (tmp_path / "straight" / "checkpoints").exists()
    raw = json.loads((tmp_path / "straight" / "privacy.json").read_text())
    record = PrivacyRecord.from_json(raw)
    assert record.trainer == "numpy-linear" and record.private and record.steps == 6
    assert (record.clip_norm, record.sensitivity_factor, record.noise_multipliers) == (0.5, 1.0, [1.5])
    assert record.details == {"model": "linear, 3 features"}
    # An independent dp_accounting computation of the planned mechanism: 6 steps of the Poisson-
    # subsampled Gaussian, q = 16 / N, noise multiplier 1.5 (std over the sensitivity).
    q = 16 / record.dataset_size
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.5)), 6
    )
    pld = dp_accounting.pld.PLDAccountant()
    pld.compose(event)
    assert record.epsilon == pytest.approx(pld.get_epsilon(record.delta), rel=1e-3)
    assert record.epsilon == pytest.approx(record.recompute_epsilon(), rel=1e-12) == straight.epsilon

    # Killed after the step-4 checkpoint (step index 4 raises), rerun: resumes at 4 and equals the straight run.
    with pytest.raises(_Killed):
        RunSkeleton(_linear_plugin(data_dir, noise_seed=11, die_at=4), tmp_path / "resumed").execute()
    resumed = RunSkeleton(_linear_plugin(data_dir, noise_seed=11), tmp_path / "resumed").execute()
    assert resumed.summary["resumed_from_step"] == 4 and resumed.steps == 6
    weights = [load_file(str(tmp_path / d / "model" / "weights.safetensors"))["w"] for d in ("straight", "resumed")]
    assert weights[0].tolist() == weights[1].tolist() and any(weights[0])
    # A rerun of the finished run returns it without training.
    again = RunSkeleton(_linear_plugin(data_dir, noise_seed=11, die_at=0), tmp_path / "straight").execute()
    assert again.steps == 6 and again.epsilon == straight.epsilon


def test_a_damaged_checkpoint_is_refused_before_the_model_is_built(data_dir, tmp_path):
    """Truncated arrays whose recorded hash was rewritten to match, or a garbled privacy ledger: a one-line error
    naming the file, raised before ``init_model`` (a real trainer would initialize and compile first)."""
    import hashlib
    from pathlib import Path

    from dpaudit.training import RunSkeleton

    def killed_run(name: str) -> Path:
        with pytest.raises(_Killed):  # checkpoints at steps 2 and 4
            RunSkeleton(_linear_plugin(data_dir, noise_seed=11, die_at=4), tmp_path / name).execute()
        return sorted((tmp_path / name / "checkpoints").glob("step_*"))[-1]

    def resume(name: str) -> None:
        plugin = _linear_plugin(data_dir, noise_seed=11)

        def built(resume_state):
            raise AssertionError("the model was built before the damaged checkpoint was refused")

        plugin.init_model = built
        RunSkeleton(plugin, tmp_path / name).execute()

    latest = killed_run("truncated")
    arrays, state_path = latest / "arrays.safetensors", latest / "state.json"
    arrays.write_bytes(arrays.read_bytes()[: arrays.stat().st_size // 2])
    state = json.loads(state_path.read_text())
    state_path.write_text(json.dumps({**state, "arrays_sha256": hashlib.sha256(arrays.read_bytes()).hexdigest()}))
    with pytest.raises(UserInputError, match="unreadable checkpoint arrays") as refused:
        resume("truncated")
    assert str(refused.value).startswith(f"{arrays}: ") and f"delete {latest}" in str(refused.value)

    latest = killed_run("ledger")
    state_path = latest / "state.json"
    state_path.write_text(json.dumps({**json.loads(state_path.read_text()), "ledger": "garbage"}))
    with pytest.raises(UserInputError, match="damaged privacy ledger") as refused:
        resume("ledger")
    assert str(refused.value).startswith(f"{state_path}: ") and f"delete {latest}" in str(refused.value)


def test_a_sequential_sampler_never_restarts_its_stream_on_resume():
    """A resumed run without the generator's saved state would redraw the batches of the steps already
    taken (correlated, not independent Poisson samples): refused, not silently restarted."""
    from dpaudit.training.noise_source import NoiseSource
    from dpaudit.training.sampling import SequentialPoisson

    first = SequentialPoisson(NoiseSource(seed=5, explicit=True), 0)
    first.sample(0, 50, 0.3)
    resumed = SequentialPoisson(NoiseSource(seed=5, explicit=True), 0)
    resumed.restore(json.loads(json.dumps(first.state())))  # through a checkpoint's JSON
    assert resumed.sample(1, 50, 0.3).tolist() == first.sample(1, 50, 0.3).tolist()
    with pytest.raises(ValueError, match="no state"):
        SequentialPoisson(NoiseSource(seed=5, explicit=True), 0).restore(None)
