"""The contract every registered trainer keeps (the run-directory contract), checked for each of them.

Parametrized over :func:`dpaudit.trainer_api.available_trainers`, so a new trainer (or a third-party
plug-in installed beside dpaudit) is held to the same promises as soon as it is registered: the run
directory's files, a ``privacy.json`` that round-trips and whose epsilon recomputes from its stored
event (and matches an independent dp_accounting computation of the planned mechanism), a model that
``transformers`` reloads offline, no secret noise seed in any released file, no checkpoints (secret
noise state) left behind, and a refused bad input that writes nothing.
"""

from __future__ import annotations

import json

import pytest

from dpaudit.errors import UserInputError
from dpaudit.privacy_record import PrivacyRecord
from dpaudit.rundir import verify_run_dir
from dpaudit.trainer_api import available_trainers, load_trainer

TRAINERS = sorted(available_trainers())
NOISE_SEED = 987654321


@pytest.fixture(scope="module", params=TRAINERS)
def contract_run(request, data_dir, tmp_path_factory):
    trainer = load_trainer(request.param)
    config = trainer.tiny_config(noise_seed=NOISE_SEED)
    out = tmp_path_factory.mktemp(f"contract-{request.param}") / "run"
    result = trainer.train(data_dir, out, config, seed=5)
    return trainer, config, out, result


def test_at_least_the_shipped_trainers_are_registered():
    assert "jax-bert" in TRAINERS


def test_run_directory_layout(contract_run):
    _, _, out, result = contract_run
    assert result.out_dir == out
    for name in ("model/config.json", "model/model.safetensors", "model/tokenizer.json", "privacy.json",
                 "metrics.jsonl", "manifest.json"):
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
