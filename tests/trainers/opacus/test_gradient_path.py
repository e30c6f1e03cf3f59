"""Canaries through Opacus's real gradient path: the clipping the library itself does, planted library faults
flagged in one run, and correct Opacus never flagged beyond the verdict's stated 5%.

All runs train the tiny linear setup (:func:`faults.tiny_setup`) with 500 canaries, q = 0.5, 4 updates, sigma 1.43
(Opacus's PRV epsilon 4.0 at delta 1e-5): the same claim everywhere, so its plan and curves are computed once. The
power and validity verdicts stop the claim-family search at the claim itself (``min_scale=1.0``): the verdict is the
same (whether the claim's curve is rejected), without the figure of a far smaller scale.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.whitebox.gradient_path import lattice_hits
from dpaudit.whitebox.layout import CANARY_GAIN
from tests.trainers.opacus.faults import FAULTS, LightHost, planted, tiny_setup, verdicts

CANARIES = 500
POWER_SEEDS = 10
VALIDITY_SEEDS = 20


@pytest.mark.parametrize("mode", ["hooks", "functorch", "ghost"])
def test_the_library_clips_each_canary_to_c_along_its_row(mode):
    from dpaudit.trainers.opacus.loop import PrivacySettings, run_opacus

    member = np.random.default_rng(0).integers(0, 2, size=200).astype(bool)
    settings = PrivacySettings(
        noise_multiplier=1e-4, clip_norm=0.7, steps=3, delta=1e-5, accountant="rdp", grad_sample_mode=mode, noise_seed=1
    )
    run = run_opacus(tiny_setup(), settings, gains=np.where(member, CANARY_GAIN, 0.0))
    assert run.observations is not None and run.final is not None
    y = run.observations
    assert y.shape == (3, 200) and run.updates == 3 and run.history == [(1e-4, run.sample_rate, 3)]
    assert np.all(np.abs(y[:, ~member]) < 1e-3)  # a non-member adds nothing anywhere
    sampled = np.abs(y[:, member] - 0.7) < 1e-3  # a sampled member adds exactly C (the library's own clipping)
    assert np.all(sampled | (np.abs(y[:, member]) < 1e-3)) and 0.3 < sampled.mean() < 0.7
    assert np.all(np.abs(run.final[~member]) < 1e-4) and run.final[member].mean() < -1e-4  # descent moves a member


def test_the_lattice_test_never_fires_on_fresh_noise_and_fires_on_reused_noise():
    rng = np.random.default_rng(0)
    fresh = rng.standard_normal((4, 100_000)) * 1.43 + rng.integers(0, 2, (4, 100_000))
    assert not lattice_hits(fresh, 1.0).any()
    reused = rng.standard_normal(1000)[None, :] * 1.43 + np.array([[0], [1], [1], [0]])
    assert lattice_hits(reused, 1.0).all()


@pytest.mark.parametrize("fault", FAULTS)
def test_a_planted_library_fault_is_flagged_in_one_run(fault, monkeypatch):
    flags = verdicts(fault, POWER_SEEDS, monkeypatch, canaries=CANARIES)
    assert sum(flags) >= 9, (fault, flags)


def test_correct_opacus_is_never_flagged_beyond_the_stated_five_percent(monkeypatch):
    flags = verdicts(None, VALIDITY_SEEDS, monkeypatch, canaries=CANARIES)
    # At most 5% false alarms are allowed; over 20 seeds 4 or more alarms has probability 1.6% at exactly 5%.
    assert sum(flags) <= 3, flags


def test_privacy_json_flags_an_accountant_that_counts_micro_steps(tmp_path, monkeypatch):
    import json

    from dpaudit.claim import claim_of_record, read_privacy_record
    from dpaudit.whitebox.gradient_path import library_claim

    with planted("micro_steps", monkeypatch):
        LightHost(noise_seed=1).train_with_gradient_canaries(None, tmp_path / "run", None, gains=np.zeros(10), seed=0)
    raw = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert raw["details"]["library"]["agrees"] is False
    assert any("counted 128 steps, the optimizer took 4 updates" in m for m in raw["details"]["library"]["mismatches"])
    record = read_privacy_record(tmp_path / "run" / "privacy.json")
    ran, said = claim_of_record(record), library_claim(record)
    assert ran.steps == 4 and said.steps == 128 and said.epsilon < ran.epsilon / 2


def test_no_claim_is_written_for_batches_that_were_not_poisson_sampled():
    import dataclasses

    from dpaudit.trainers.opacus.loop import PrivacySettings, run_opacus
    from dpaudit.trainers.opacus.privacy import build_record, mismatches

    settings = PrivacySettings(noise_multiplier=1.43, clip_norm=1.0, steps=2, delta=1e-5, noise_seed=1)
    run = dataclasses.replace(run_opacus(tiny_setup(), settings), poisson=False)  # a sampler Opacus did not swap
    assert any("not Poisson-sampled" in m for m in mismatches(run))
    with pytest.raises(ValueError, match="no privacy claim is written"):  # never a Poisson claim in its place
        build_record(
            run,
            delta=1e-5,
            accountant="prv",
            grad_sample_mode="hooks",
            clipping="flat",
            target_epsilon=None,
            noise_seed_explicit=True,
        )


def test_gradient_accumulation_with_batch_memory_manager_is_one_update_per_logical_batch():
    """Opacus's BatchMemoryManager splits each Poisson batch into physical ones: the canary still adds exactly C once
    per update, the hook counts updates (not physical batches) and Opacus's accountant agrees."""
    from dpaudit.trainers.opacus.loop import PrivacySettings, run_opacus
    from dpaudit.trainers.opacus.privacy import mismatches

    member = np.random.default_rng(1).integers(0, 2, size=200).astype(bool)
    settings = PrivacySettings(
        noise_multiplier=1e-4, clip_norm=0.7, steps=3, delta=1e-5, accountant="rdp", noise_seed=2, physical_batch=16
    )
    run = run_opacus(tiny_setup(), settings, gains=np.where(member, CANARY_GAIN, 0.0))
    assert run.observations is not None and run.observations.shape == (3, 200) and run.updates == 3
    y = run.observations[:, member]
    assert np.all((np.abs(y - 0.7) < 1e-3) | (np.abs(y) < 1e-3)) and np.all(np.abs(run.observations[:, ~member]) < 1e-3)
    assert run.history == [(1e-4, run.sample_rate, 3)] and mismatches(run) == []


def test_lora_adapters_through_opacus_train_and_the_canary_still_adds_c(tmp_path):
    """peft's LoRA adapters (query, value) and the head under Opacus's hooks: the adapters do move (LoRA's B starts
    at 0), the canary adds exactly C per update, and the exported model is the merged one."""
    import torch

    from dpaudit.trainers.opacus.loop import LibrarySetup, PrivacySettings, run_opacus
    from dpaudit.trainers.opacus.trainer import _save_model, with_lora
    from dpaudit.trainers.torch_common.model import build_model

    model = build_model("classify", preset="tiny", vocab_size=60, max_length=8, label_names=["a", "b"], seed=0)
    model = with_lora(model, 2)
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n or "classifier" in n for n in trained)
    g = torch.Generator().manual_seed(0)
    rows = torch.utils.data.TensorDataset(
        torch.randint(5, 60, (32, 8), generator=g), torch.ones(32, 8, dtype=torch.long), torch.randint(0, 2, (32,))
    )
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    member = np.random.default_rng(0).integers(0, 2, size=50).astype(bool)
    settings = PrivacySettings(
        noise_multiplier=1e-4, clip_norm=0.7, steps=2, delta=1e-5, accountant="rdp", noise_seed=3
    )
    setup = LibrarySetup(model, optimizer, torch.utils.data.DataLoader(rows, batch_size=16))
    run = run_opacus(setup, settings, gains=np.where(member, CANARY_GAIN, 0.0))
    assert run.observations is not None and run.updates == 2
    y = run.observations[:, member]
    assert np.all((np.abs(y - 0.7) < 1e-3) | (np.abs(y) < 1e-3))
    moved = {n for n, p in model.named_parameters() if n in trained and not torch.equal(p.detach(), trained[n])}
    assert any("lora_B" in n for n in moved) and any("lora_A" in n for n in moved), moved
    _save_model(tmp_path / "model", model, None)
    from safetensors.torch import load_file

    assert not any("lora" in k for k in load_file(tmp_path / "model" / "model.safetensors"))


def test_canary_only_physical_batches_cut_to_the_first_position_change_no_update():
    """A physical batch of canary rows only feeds the model their first position (the cost of a large audit): their
    model loss is multiplied by 0, so Opacus's ghost clipping releases the same noisy canary updates and the model
    trains to the same weights as with the rows at full length."""
    import torch

    from dpaudit.trainers.opacus.loop import LibrarySetup, PrivacySettings, run_opacus
    from dpaudit.trainers.opacus.trainer import _first_position
    from dpaudit.trainers.torch_common.model import build_model

    cut = []

    def first_position(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cut.append(len(ids))
        return _first_position(ids, mask)

    g = torch.Generator().manual_seed(0)
    rows = torch.utils.data.TensorDataset(
        torch.randint(5, 60, (16, 8), generator=g), torch.ones(16, 8, dtype=torch.long), torch.randint(0, 2, (16,))
    )
    gains = np.where(np.random.default_rng(0).integers(0, 2, size=64) == 1, CANARY_GAIN, 0.0)
    settings = PrivacySettings(
        noise_multiplier=0.5,
        clip_norm=0.7,
        steps=2,
        delta=1e-5,
        accountant="rdp",
        noise_seed=4,
        grad_sample_mode="ghost",
        physical_batch=16,
    )
    runs = []
    for shorten in (None, first_position):
        model = build_model("classify", preset="tiny", vocab_size=60, max_length=8, label_names=["a", "b"], seed=0)
        for p in model.bert.embeddings.parameters():  # as the opacus trainer trains BERT (Opacus's tutorial)
            p.requires_grad_(False)
        for module in model.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
        loader = torch.utils.data.DataLoader(rows, batch_size=8)
        runs.append(run_opacus(LibrarySetup(model, optimizer, loader, canary_inputs=shorten), settings, gains=gains))
    full, short = runs
    assert cut and all(n <= 16 for n in cut)  # canary-only physical batches took the short path
    assert full.observations is not None and short.observations is not None
    np.testing.assert_allclose(short.observations, full.observations, rtol=1e-5, atol=1e-5)
    assert full.model is not None and short.model is not None
    for (name, a), b in zip(full.model.named_parameters(), short.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("mode", ["hooks", "ghost"])
def test_an_empty_poisson_batch_is_a_noise_only_update(mode, monkeypatch):
    """Poisson sampling draws no row with probability (1 - q)^N; a Hugging Face BERT cannot run a forward pass over
    zero rows (it crashed the run), so the loop runs none and Opacus's step adds the noise alone: every update runs."""
    import torch

    from dpaudit.trainers.opacus import loop
    from dpaudit.trainers.torch_common.model import build_model

    empty = []
    original = loop._empty_batch_gradients
    monkeypatch.setattr(
        loop, "_empty_batch_gradients", lambda opt, ghost: (empty.append(1), original(opt, ghost=ghost))
    )
    g = torch.Generator().manual_seed(0)
    rows = torch.utils.data.TensorDataset(
        torch.randint(5, 60, (40, 8), generator=g), torch.ones(40, 8, dtype=torch.long), torch.randint(0, 2, (40,))
    )
    model = build_model("classify", preset="tiny", vocab_size=60, max_length=8, label_names=["a", "b"], seed=0)
    for p in model.bert.embeddings.parameters():  # as the opacus trainer trains BERT (Opacus's tutorial)
        p.requires_grad_(False)
    head = model.classifier.weight.detach().clone()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    settings = loop.PrivacySettings(
        noise_multiplier=1.0, clip_norm=1.0, steps=8, delta=1e-5, accountant="rdp", noise_seed=3, grad_sample_mode=mode
    )
    run = loop.run_opacus(
        loop.LibrarySetup(model, optimizer, torch.utils.data.DataLoader(rows, batch_size=1)), settings
    )
    assert run.updates == 8 and len(run.history) == 1 and run.history[0][2] == 8
    assert empty, "no empty batch was drawn: choose another noise seed"
    assert not torch.equal(model.classifier.weight.detach(), head)  # the noise moved the weights
