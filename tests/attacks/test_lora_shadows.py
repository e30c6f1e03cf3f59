"""Shadow models of a LoRA target are LoRA adapters of its layout over its one base, scored over one copy of it.

A tiny causal LM start (public rows) and a ``--peft lora`` target fine-tuned from it (in process, about a second
each); LiRA with two shadows end to end: every shadow records the target's rank, targets and base state sha256, its
merged weights equal the base's everywhere but the adapted modules (the base was not retrained), the adapter file
holds only rank-r A and B tensors, and the shadows were scored as adapters over one base (the same logits as their
merged models). A base changed since the target adapted it is refused before any shadow trains.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import numpy as np
import pytest

from dpaudit.common.errors import UserInputError

# Skipped where peft is not installed; checked without importing it (peft takes ~2 s to import, which every
# pytest-xdist worker would pay at collection whether or not it runs this module).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")


@pytest.fixture(scope="module")
def lora_target(data_dir, tmp_path_factory):
    """(public start, LoRA target over it): edp-sgd, tiny, in process."""
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    root = tmp_path_factory.mktemp("lora-shadows")
    common = dict(
        preset="tiny", mode="sgd", batch_size=16, max_length=16, vocab_size=128, eval_examples=8, noise_seed=1
    )
    start, target = root / "start", root / "target"
    EdpSgdTrainer().train(data_dir, start, EdpSgdConfig(task="clm", data_split="public", epochs=1, **common), seed=0)
    config = EdpSgdConfig(
        task="clm", init_from=str(start), epochs=2, learning_rate=3e-3, peft="lora", lora_rank=4, **common
    )
    EdpSgdTrainer().train(data_dir, target, config, seed=0)
    return start, target


def _tensors(path):
    from safetensors.numpy import load_file

    return load_file(str(path))


def _lira(target, data_dir, cache):
    """LiRA with two shadows (cached under ``cache``) against ``target``, no blind baseline."""
    import dpaudit

    return dpaudit.attack(
        target,
        data_dir,
        ["lira"],
        progress=False,
        shadow_models=2,
        shadow_cache=cache,
        mia_examples=16,
        blind_baseline=False,
    )


def test_a_lora_targets_shadows_are_adapters_over_its_base_scored_over_one_copy(lora_target, data_dir, tmp_path):
    from dpaudit.scoring import load, resolve_model
    from dpaudit.scoring.adapters import load_adapter_scorers, shared_base

    start, target = lora_target
    trained = json.loads((target / "privacy.json").read_text())["details"]["trained"]
    cache = tmp_path / "shadows"
    results = _lira(target, data_dir, cache)
    lira = results["lira"]
    info = lira.shadow_models
    assert info.target_lora["rank"] == 4 and info.target_lora["targets"] == trained["targets"]
    assert info.target_lora["base_state_sha256"] == trained["base"]["state_sha256"]
    assert len(info.models) == 2 and all(m.lora == info.target_lora for m in info.models)
    assert info.scored_as_adapters
    assert not any("not LoRA adapters" in w for w in lira.warnings)
    assert lira["examples"].n_members == 16  # it ran end to end

    base = _tensors(start / "model" / "model.safetensors")
    runs = []
    for m in info.models:
        run = cache / m.path.split("/")[-2] / "model"
        runs.append(run)
        shadow = _tensors(run / "model" / "model.safetensors")
        assert shadow.keys() == base.keys()
        adapted = [k for k in base if any(k.startswith(a + ".") for a in trained["adapted_modules"])]
        assert adapted and all(not np.array_equal(shadow[k], base[k]) for k in adapted if k.endswith("weight"))
        frozen = [k for k in base if k not in adapted]
        assert all(np.array_equal(shadow[k], base[k]) for k in frozen)  # the base was not retrained
        adapter = _tensors(run / "model" / "adapter" / "adapter_model.safetensors")
        assert adapter and all("lora_A" in k or "lora_B" in k for k in adapter)
        assert all(4 in v.shape for v in adapter.values())  # rank 4

    # one base in memory, each model's adapter by name: the same losses as the merged models
    found, why = shared_base(runs)
    assert found is not None and found.source.model_dir == start / "model", why
    sources = [resolve_model(r) for r in runs]
    adapters = load_adapter_scorers(found, sources, batch_size=8, device="cpu")
    assert adapters[0].model is adapters[1].model  # one model object, two adapters
    texts = ["set an alarm at 7 am", "play some jazz in the kitchen", "turn off the hallway lights"]
    merged = [load(s, batch_size=8, device="cpu", progress=False) for s in sources]
    first = adapters[0].example_losses(texts)
    for a, m in zip(adapters, merged):
        assert np.allclose(a.example_losses(texts), m.example_losses(texts), atol=1e-5)
    assert np.array_equal(adapters[0].example_losses(texts), first)  # switching back restores the first adapter
    assert not np.allclose(first, adapters[1].example_losses(texts), atol=1e-6)


def test_shadows_of_a_lora_target_with_embeddings_trained_in_full_keep_them(lora_target, data_dir, tmp_path):
    """--lora-modules-to-save wte,wpe: the shadows train the same modules in full (the layout says so), and scored as
    adapters over the one base they give their merged models' losses (the tied output layer included)."""
    from dpaudit.scoring import load, resolve_model
    from dpaudit.scoring.adapters import load_adapter_scorers, shared_base
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    start, _ = lora_target
    target = tmp_path / "target"
    config = EdpSgdConfig(
        task="clm", init_from=str(start), epochs=2, learning_rate=3e-3, peft="lora", lora_rank=4,
        lora_modules_to_save="wte,wpe", preset="tiny", mode="sgd", batch_size=16, max_length=16, vocab_size=128,
        eval_examples=8, noise_seed=1,
    )  # fmt: skip
    EdpSgdTrainer().train(data_dir, target, config, seed=0)
    lira = _lira(target, data_dir, tmp_path / "shadows")["lira"]
    info = lira.shadow_models
    assert info.target_lora["modules_trained_in_full"] == ["lm_head", "wpe", "wte"]
    assert all(m.lora == info.target_lora for m in info.models) and info.scored_as_adapters
    runs = [tmp_path / "shadows" / m.path.split("/")[-2] / "model" for m in info.models]
    found, why = shared_base(runs)
    assert found is not None, why
    sources = [resolve_model(r) for r in runs]
    texts = ["set an alarm at 7 am", "play some jazz in the kitchen", "turn off the hallway lights"]
    for a, source in zip(load_adapter_scorers(found, sources, batch_size=8, device="cpu"), sources):
        merged = load(source, batch_size=8, device="cpu", progress=False)
        assert np.allclose(a.example_losses(texts), merged.example_losses(texts), atol=1e-5)


def test_lora_runs_are_scored_merged_where_peft_is_not_installed(lora_target, monkeypatch):
    """Adapters over one base need peft; the merged models (model/) do not: without peft, no shared base."""
    from dpaudit.scoring import adapters

    _, target = lora_target
    assert adapters.shared_base([target])[0] is not None
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else find_spec(name, *a))
    found, why = adapters.shared_base([target])
    assert found is None and "peft is not installed" in why


def test_a_lora_targets_changed_base_is_refused_before_any_shadow_trains(lora_target):
    from dpaudit.attacks.shadow_models import check_lora_base, target_recipe
    from dpaudit.scoring import resolve_model

    _, target = lora_target
    recipe = target_recipe(resolve_model(target), "lira")
    assert recipe.lora is not None and recipe.lora["rank"] == 4
    check_lora_base("lira", recipe)  # the base as the target adapted it: accepted
    base = dict(recipe.lora["base"], weights_sha256={"model.safetensors": "0" * 64})
    changed = dataclasses.replace(recipe, lora=dict(recipe.lora, base=base))
    with pytest.raises(UserInputError) as err:
        check_lora_base("lira", changed)
    message = str(err.value)
    assert "\n" not in message and "changed since the target adapted it" in message
    assert "LoRA adapters (rank 4" in message and "--shadow-dirs" in message


@pytest.mark.parametrize("task", ["classify", "mlm"])
def test_adapters_over_one_base_score_as_the_merged_model(data_dir, tmp_path, task):
    """A classifier (its head and pooler trained in full, saved with the adapter) and a masked LM: the adapter over
    the base gives the merged model's losses."""
    from dpaudit.scoring import load, resolve_model
    from dpaudit.scoring.adapters import load_adapter_scorers, shared_base
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    common = dict(
        preset="tiny", mode="sgd", batch_size=16, max_length=16, vocab_size=128, eval_examples=8, noise_seed=1
    )
    start, target = tmp_path / "start", tmp_path / "target"
    EdpSgdTrainer().train(data_dir, start, EdpSgdConfig(task=task, data_split="public", epochs=1, **common), seed=0)
    config = EdpSgdConfig(
        task=task, init_from=str(start), epochs=1, learning_rate=1e-2, peft="lora", lora_rank=2, **common
    )
    EdpSgdTrainer().train(data_dir, target, config, seed=0)
    found, why = shared_base([target])
    assert found is not None, why
    source = resolve_model(target)
    (adapter,) = load_adapter_scorers(found, [source], batch_size=8, device="cpu")
    merged = load(source, batch_size=8, device="cpu", progress=False)
    texts = ["set an alarm at 7 am", "play some jazz in the kitchen", "turn off the hallway lights"]
    labels = None if task == "mlm" else [i % len(source.labels) for i in range(len(texts))]
    a, m = (s.example_losses(texts, labels, seed=0) for s in (adapter, merged))
    assert np.allclose(a, m, atol=1e-5)


def test_the_probe_trains_in_a_private_folder_of_the_cache_and_is_removed(lora_target, data_dir, tmp_path, capfd):
    """The estimate's probe (forced here: the tiny models are priced by the table) writes its rows under the shadow
    cache only, in a folder readable by this user alone, and removes it; the estimate says it was measured."""
    import stat

    from dpaudit.attacks import shadow_cost

    _, target = lora_target
    cache, seen = tmp_path / "shadows", []
    real = shadow_cost.probe_cost

    def probe_cost(trainer, config, data, out, **kwargs):
        home = data.parent
        seen.append((home.parent, stat.S_IMODE(home.stat().st_mode), (data / "train.jsonl").is_file()))
        return real(trainer, config, data, out, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(shadow_cost, "worth_probing", lambda *a: True)
        patch.setattr(shadow_cost, "probe_cost", probe_cost)
        _lira(target, data_dir, cache)
    assert seen == [(cache, 0o700, True)]
    assert not list(cache.glob(".probe-*"))  # removed
    assert "-step probe of the first one's recipe" in capfd.readouterr().err
