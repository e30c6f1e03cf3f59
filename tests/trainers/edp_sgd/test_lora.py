"""``--peft lora``: LoRA adapters through peft in edp-sgd (docs/trainers.md, "LoRA adapters").

The ghost engine over the adapters against the vmap engines (its oracle) on BERT, GPT-2 and a Llama-style
causal LM; runs from tiny random starts saved to a temp dir (only the adapters and a classifier's head change;
privacy.json names them and the base's hashes; the merged model and the adapter read back by peft give the same
logits); the refusals (a start trained on this run's private data, peft missing, a target the model lacks);
the white-box audit hosting its canaries in a LoRA run of every task (classify, mlm, clm), within its claim;
the token embeddings trained in full beside the adapters (``--lora-modules-to-save``), kept tied to the output
layer through training, the merge and the adapter.
The sensitivity contract of LoRA runs (every task, dp-sgd and edp-sgd) is in tests/test_sensitivity_contract.py.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.training.api import load_trainer

# Skipped where peft is not installed; checked without importing it (peft takes ~2 s to import, which every
# pytest-xdist worker would pay at collection whether or not it runs this module).
pytestmark = pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="peft is not installed")

LABELS = ["a", "b", "c"]


def _texts(data_dir: Path) -> list[str]:
    return [json.loads(line)["text"] for line in (data_dir / "public.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def starts(data_dir, tmp_path_factory):
    """Tiny random starts in Hugging Face layout with a WordPiece tokenizer of public.jsonl: a BERT masked LM,
    a GPT-2 and a Llama-style causal LM (RMSNorm, rotary positions, SwiGLU)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.trainers.torch_common.model import build_causal_model, build_model
    from dpaudit.training.tokenizer import special_token_ids, train_wordpiece

    root = tmp_path_factory.mktemp("lora_starts")
    tok = train_wordpiece(_texts(data_dir), vocab_size=300)
    vocab, ids = tok.get_vocab_size(), special_token_ids(tok)
    save_hf(
        root / "bert", build_model("mlm", preset="tiny", vocab_size=vocab, max_length=16, label_names=None, seed=1), tok
    )
    specials = {"cls": ids["cls"], "sep": ids["sep"], "pad": ids["pad"]}
    gpt2 = build_causal_model(preset="tiny", vocab_size=vocab, max_length=16, specials=specials, seed=2)
    save_hf(root / "gpt2", gpt2, tok)
    torch.manual_seed(3)
    llama = LlamaForCausalLM(
        LlamaConfig(
            num_hidden_layers=2,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=vocab,
            max_position_embeddings=64,
            bos_token_id=ids["cls"],
            eos_token_id=ids["sep"],
            pad_token_id=ids["pad"],
        )
    ).eval()
    save_hf(root / "llama", llama, tok)
    return root


# -- the ghost engine over the adapters, the vmap engines as its oracle -----------------------------


def _lora_model(kind: str, task: str, saved: tuple[str, ...] = ()):
    from transformers import LlamaConfig, LlamaForCausalLM

    from dpaudit.trainers.torch_common.lora import apply_lora
    from dpaudit.trainers.torch_common.model import build_causal_model, build_model

    if kind == "bert":
        model = build_model(task, preset="tiny", vocab_size=100, max_length=16, label_names=LABELS, seed=0)
    elif kind == "gpt2":
        model = build_causal_model(preset="tiny", vocab_size=100, max_length=16, specials={}, seed=0)
    else:
        torch.manual_seed(0)
        config = LlamaConfig(
            num_hidden_layers=2,
            hidden_size=32,
            intermediate_size=64,
            num_attention_heads=2,
            num_key_value_heads=1,
            vocab_size=100,
            max_position_embeddings=32,
        )
        config._attn_implementation = "eager"
        model = LlamaForCausalLM(config).eval()
    targets = {"llama": ["q_proj", "v_proj", "down_proj"]}.get(kind)
    lora = apply_lora(model, task=task, rank=4, alpha=8, targets=targets, seed=0, modules_to_save=saved)
    with torch.no_grad():  # B starts at zero: give the adapters a non-trivial gradient path
        for name, p in lora.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2)
    return lora.model


def _batch(task: str) -> dict[str, torch.Tensor]:
    from dpaudit.trainers.torch_common.data import additive_mask

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (6, 12), generator=gen)
    mask = torch.ones(6, 12, dtype=torch.long)
    mask[0, 7:] = 0
    mask[3, 9:] = 0
    batch = {"input_ids": ids * mask, "mask4": additive_mask(mask)}
    if task == "classify":
        batch["labels"] = torch.tensor([0, 1, 2, 0, 1, 2])
    elif task == "clm":
        batch["next_weights"] = mask.float()
    else:  # mlm: two predicted positions per row
        batch.update(
            positions=torch.tensor([[1, 2]] * 6),
            targets=torch.randint(5, 100, (6, 2), generator=gen),
            weights=torch.ones(6, 2),
        )
    return batch


@pytest.mark.parametrize(
    ("kind", "task", "saved"),
    [
        ("bert", "classify", ()),
        ("bert", "mlm", ()),
        ("gpt2", "clm", ()),
        ("llama", "clm", ()),
        # token embeddings trained in full: one tensor used twice (input and tied output embeddings)
        ("bert", "mlm", ("word_embeddings",)),
        ("gpt2", "clm", ("wte", "wpe", "ln_f")),
        ("llama", "clm", ("embed_tokens", "norm")),
    ],
)
def test_ghost_clipping_over_the_adapters_equals_the_vmap_engines(kind, task, saved):
    from dpaudit.trainers.torch_common.clipping.ghost import GhostClipper
    from dpaudit.trainers.torch_common.clipping.microbatch import MicrobatchClipper
    from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper, trainable
    from dpaudit.trainers.torch_common.model import layer_groups, per_example_losses

    model = _lora_model(kind, task, saved)
    names, params = trainable(model)
    assert names and all("lora_" in n or "modules_to_save" in n for n in names), names
    assert len([n for n in names if "modules_to_save" in n]) >= len(saved), names
    batch = _batch(task)
    # Per example (dp-sgd), C small enough that every example is clipped.
    ghost = GhostClipper(model, per_example_losses, bounds=[0.01], param_groups=[0] * len(params))
    oracle = PerExampleClipper(model, per_example_losses, clip_norm=0.01, physical_batch=4)
    want = oracle.clipped_sum(batch)
    for chunk in (None, 2):  # one pass, and passes of whole units (the frozen base's rows run with each)
        got = ghost.clipped_sum(batch, np.arange(6), 6, chunk=chunk)
        assert int(got.clipped) == int(want.clipped) == 6
        for g, w, n in zip(got.grads, want.grads, names):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7, msg=n)
    # Micro-batches with per-layer clip norms (edp-sgd).
    _, groups = layer_groups(names)
    bounds = [0.01 * (1 + g) for g in range(max(groups) + 1)]
    ghost = GhostClipper(model, per_example_losses, bounds=bounds, param_groups=groups)
    oracle = MicrobatchClipper(model, per_example_losses, layer_clip_norms=bounds, param_groups=groups)
    owner = np.array([0, 0, 1, 1, 1, 2])
    want = oracle.clipped_sum(batch, [np.flatnonzero(owner == u) for u in range(3)], chunk_examples=4)
    for chunk in (None, 2):  # with 2, the micro-batch of 3 runs alone
        got = ghost.clipped_sum(batch, owner, 3, chunk=chunk)
        for g, w, n in zip(got.grads, want.grads, names):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7, msg=n)


# -- runs from a start: what is trained, privacy.json, the two exports --------------------------------


def _train(data_dir: Path, out: Path, **settings):
    trainer = load_trainer("edp-sgd")
    seed = {"noise_seed": 7} if settings.get("mode") != "sgd" else {"noise_multiplier": None}
    config = trainer.tiny_config(peft="lora", lora_rank=4, **seed, **settings)
    return trainer.train(data_dir, out, config, seed=0)


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


@pytest.mark.parametrize(
    ("start", "task", "mode"),
    [("bert", "classify", "dp-sgd"), ("bert", "mlm", "sgd"), ("gpt2", "clm", "edp-sgd"), ("llama", "clm", "dp-sgd")],
)
def test_a_lora_run_trains_only_the_adapters_and_exports_the_merged_model_and_the_adapter(
    start, task, mode, starts, data_dir, tmp_path
):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSequenceClassification

    base_dir = starts / start
    out = tmp_path / "run"
    private = {} if mode == "sgd" else {"noise_multiplier": 1.0}
    result = _train(data_dir, out, task=task, mode=mode, init_from=str(base_dir), epochs=1, **private)
    assert (result.epsilon is None) == (mode == "sgd")
    record = json.loads((out / "privacy.json").read_text())
    trained = record["details"]["trained"]
    assert trained["peft"] == "lora" and trained["rank"] == 4 and trained["alpha"] == 16.0
    assert trained["targets"] == {"bert": ["query", "value"], "gpt2": ["c_attn"], "llama": ["q_proj", "v_proj"]}[start]
    assert trained["base"]["init_from"] == str(base_dir)
    assert trained["base"]["weights_sha256"] == record["init_from"]["weights_sha256"]
    assert len(trained["base"]["state_sha256"]) == 64
    assert 0 < trained["trained_parameters"] < trained["frozen_parameters"] / 10
    assert trained["modules_trained_in_full"] == (["classifier", "pooler"] if task == "classify" else [])

    # model/: the merged model in the base's class; weights outside the adapted modules (and head) unchanged.
    merged_state, base_state = load_file(out / "model" / "model.safetensors"), load_file(base_dir / "model.safetensors")
    adapted = tuple(f"{m}.weight" for m in trained["adapted_modules"])
    moved = [k for k in base_state if k in merged_state and not torch.equal(base_state[k], merged_state[k])]
    assert moved and all(k.endswith(adapted) for k in moved), moved

    # model/adapter/: peft's layout, read back over the base: the same logits as the merged model.
    adapter = out / "model" / "adapter"
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= {p.name for p in adapter.iterdir()}
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    assert Path(adapter_config["base_model_name_or_path"]).resolve() == base_dir.resolve()
    assert (adapter_config["r"], sorted(adapter_config["target_modules"])) == (4, trained["targets"])
    if task == "classify":
        labels = json.loads((out / "model" / "config.json").read_text())["id2label"]
        load = lambda d: AutoModelForSequenceClassification.from_pretrained(d, num_labels=len(labels))  # noqa: E731
    else:
        load = AutoModelForCausalLM.from_pretrained if task == "clm" else AutoModelForMaskedLM.from_pretrained
    merged = load(str(out / "model")).eval()
    reread = PeftModel.from_pretrained(load(str(base_dir)), str(adapter)).eval()
    ids = torch.randint(5, 200, (3, 10), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_logits(reread, ids), _logits(merged, ids), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(_logits(load(str(base_dir)).eval(), ids), _logits(merged, ids))


@pytest.mark.parametrize(
    ("start", "task", "saved", "in_full"),
    [
        ("gpt2", "clm", "wte,wpe", ["lm_head", "wpe", "wte"]),
        ("bert", "mlm", "word_embeddings", ["cls.predictions.decoder", "word_embeddings"]),
    ],
)
def test_embeddings_trained_in_full_stay_tied_to_the_output_layer_in_training_merge_and_adapter(
    start, task, saved, in_full, starts, data_dir, tmp_path
):
    """--lora-modules-to-save with the token embeddings: peft wraps them and their tied output layer in copies of
    their own; the run trains them as one tensor (as the base ties them), and both exports load as that model."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    base_dir, out = starts / start, tmp_path / "run"
    _train(data_dir, out, task=task, mode="dp-sgd", init_from=str(base_dir), epochs=1, noise_multiplier=1.0,
           lora_modules_to_save=saved)  # fmt: skip
    trained = json.loads((out / "privacy.json").read_text())["details"]["trained"]
    assert trained["modules_trained_in_full"] == in_full
    assert trained["parameters"] == f"LoRA adapters (peft) and modules trained in full ({', '.join(in_full)})"
    load = AutoModelForCausalLM.from_pretrained if task == "clm" else AutoModelForMaskedLM.from_pretrained
    base, merged = load(str(base_dir)).eval(), load(str(out / "model")).eval()
    embeddings = merged.get_input_embeddings().weight
    assert merged.get_output_embeddings().weight is embeddings  # tied, as the base
    assert not torch.equal(embeddings, base.get_input_embeddings().weight)  # trained
    if task == "mlm":  # the decoder's bias is tied to the prediction head's, not trained in full: unchanged
        torch.testing.assert_close(merged.cls.predictions.bias, base.cls.predictions.bias, rtol=0, atol=0)
    reread = PeftModel.from_pretrained(load(str(base_dir)), str(out / "model" / "adapter")).eval()
    ids = torch.randint(5, 200, (3, 10), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_logits(reread, ids), _logits(merged, ids), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("saved", [None, "word_embeddings"])
def test_a_killed_lora_run_resumes_to_the_same_model(
    saved, data_dir, tmp_path, killed_after_checkpoint, assert_same_model
):
    """Checkpoints hold the adapters (the trained tensors, the embeddings trained in full and tied to the decoder
    among them) and Adam's state; the frozen base is rebuilt from the public --seed, the adapters' A from the same
    seed, then restored."""
    settings = dict(task="mlm", mode="edp-sgd", epochs=1, checkpoint_every=2, noise_multiplier=1.0)
    settings.update({"lora_modules_to_save": saved} if saved else {})
    straight = _train(data_dir, tmp_path / "straight", **settings)
    killed_after_checkpoint(lambda: _train(data_dir, tmp_path / "resumed", **settings), step=4)
    resumed = _train(data_dir, tmp_path / "resumed", **settings)
    assert resumed.summary["resumed_from_step"] == 4 and resumed.steps == straight.steps
    assert_same_model(tmp_path / "straight", tmp_path / "resumed", atol=0, rtol=0)


def test_a_checkpoint_from_before_peft_resumes_as_a_full_run(edp_config):
    config = edp_config(mode="dp-sgd")
    older = {k: v for k, v in config.to_dict().items() if k != "peft" and not k.startswith("lora_")}
    assert config.mismatches(older) == []
    assert edp_config(mode="dp-sgd", peft="lora").mismatches(older) == ["lora_alpha", "lora_rank", "peft"]


# -- refusals: one line, exit 2 ------------------------------------------------------------------------


def _cli(*args) -> tuple[int, list[str]]:
    result = CliRunner().invoke(cli, ["train", "--trainer", "edp-sgd", *map(str, args)])
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def test_a_lora_run_from_a_start_trained_on_this_runs_private_data_is_refused(data_dir, tmp_path):
    common = ["--data", data_dir, "--max-length", "16", "--vocab-size", "300", "--epochs", "1"]
    code, lines = _cli(*common, "--mode", "sgd", "--batch-size", "48", "--out", tmp_path / "start")
    assert code == 0, lines
    code, lines = _cli(
        *common, "--peft", "lora", "--mode", "dp-sgd", "--noise-multiplier", "1", "--init-from", tmp_path / "start",
        "--out", tmp_path / "out",
    )  # fmt: skip
    assert code == 2 and len(lines) == 1 and lines[0].startswith("Error: --init-from "), lines
    assert "this start was trained on" in lines[0] and not (tmp_path / "out").exists()


def test_without_peft_one_line_names_the_extra(data_dir, tmp_path, monkeypatch):
    monkeypatch.setattr("dpaudit.trainers.edp_sgd.config.peft_installed", lambda: False)
    code, lines = _cli("--data", data_dir, "--peft", "lora", "--noise-multiplier", "1", "--out", tmp_path / "out")
    assert code == 2 and len(lines) == 1 and "pip install 'dpaudit[peft]'" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_lora_options_without_peft_lora_and_an_unknown_target_are_refused(starts, data_dir, tmp_path):
    code, lines = _cli("--data", data_dir, "--lora-rank", "4", "--noise-multiplier", "1", "--out", tmp_path / "a")
    assert code == 2 and len(lines) == 1 and "--lora-rank applies to --peft lora only" in lines[0], lines
    code, lines = _cli(
        "--data", data_dir, "--peft", "lora", "--lora-targets", "query,qkv", "--init-from", starts / "bert",
        "--max-length", "16", "--noise-multiplier", "1", "--out", tmp_path / "b",
    )  # fmt: skip
    errors = [line for line in lines if line.startswith("Error:")]  # (transformers' loading bar precedes it)
    assert code == 2 and len(errors) == 1 and "named qkv; choose among" in errors[0], lines
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())
    for saved, says in (("wte,nosuch", "named nosuch; choose among"), ("c_attn", "c_attn is also in --lora-targets")):
        out = tmp_path / f"c-{saved}"
        code, lines = _cli(
            "--data", data_dir, "--task", "clm", "--peft", "lora", "--lora-modules-to-save", saved,
            "--init-from", starts / "gpt2", "--max-length", "16", "--noise-multiplier", "1", "--out", out,
        )  # fmt: skip
        errors = [line for line in lines if line.startswith("Error:")]
        assert code == 2 and len(errors) == 1 and "--lora-modules-to-save" in errors[0] and says in errors[0], lines
        assert not out.exists() or not any(out.iterdir())
    code, lines = _cli("--data", data_dir, "--lora-modules-to-save", "wte", "--noise-multiplier", "1", "--out", out)
    assert code == 2 and len(lines) == 1 and "--lora-modules-to-save applies to --peft lora only" in lines[0], lines


# -- the white-box audit hosts its canaries in a LoRA run ------------------------------------------------


@pytest.mark.parametrize(("task", "saved"), [("clm", None), ("classify", None), ("mlm", None), ("clm", "wte,wpe")])
def test_audit_trainer_hosts_its_canaries_in_a_lora_run_of_every_task(task, saved, tmp_path):
    """The white-box audit of a LoRA run, each task, in micro-batch mode (the harder unit: canaries clipped with
    their partners; dp-sgd takes the same path, the audit block being the last trained tensor after the adapters):
    the canaries reach the noisy update (a bound above 0) and the bound stays within the claim. The three runs
    share one claim (same rows, q, steps), so its analysis plan is computed once (cached)."""
    out = tmp_path / "audit"
    result = CliRunner().invoke(
        cli,
        ["audit-trainer", "--trainer", "edp-sgd", "--set", "peft=lora", "--set", "mode=edp-sgd", "--set",
         f"task={task}", "--set", "micro_batches=200", "--target-epsilon", "4", "--canaries", "200", "--steps", "2",
         "--seed", "3", "--noise-seed", "11", "--out", str(out),
         *(["--set", f"lora_modules_to_save={saved}"] if saved else [])],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output[-2000:]
    body = json.loads((out / "whitebox.json").read_text())
    assert body["config"]["peft"] == "lora" and body["config"]["task"] == task
    assert body["config"]["lora_modules_to_save"] == (saved.split(",")[::-1] if saved else None)
    assert body["settings"]["canary_paths"] == {"cooperative": 200}
    assert body["unit"] == "micro-batch"
    assert body["claim"]["epsilon"] == pytest.approx(4.0, abs=0.01)
    assert 0.0 < body["primary"]["epsilon"] <= body["claim"]["epsilon"] and not body["refuted"]


def test_a_lora_run_exports_its_averaged_adapters_in_both_layouts(starts, data_dir, tmp_path):
    """--peft lora with --ema-decay (tests/trainers/edp_sgd/test_parameter_average.py has the rest): model/ (merged)
    and model/adapter/ (peft's) both hold the average, and agree with each other."""
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForMaskedLM

    trainer, base_dir = load_trainer("edp-sgd"), starts / "bert"
    adapters = {}
    for name, extra in (("last", {}), ("ema", {"ema_decay": 0.8})):
        config = trainer.tiny_config(
            peft="lora", lora_rank=4, task="mlm", mode="dp-sgd", init_from=str(base_dir), epochs=1,
            noise_multiplier=1.0, noise_seed=7, **extra,
        )  # fmt: skip
        trainer.train(data_dir, tmp_path / name, config, seed=0)
        adapters[name] = load_file(str(tmp_path / name / "model" / "adapter" / "adapter_model.safetensors"))
    assert adapters["last"].keys() == adapters["ema"].keys()
    assert any(not torch.equal(adapters["last"][k], adapters["ema"][k]) for k in adapters["last"])
    out = tmp_path / "ema" / "model"
    ids = torch.randint(5, 200, (3, 10), generator=torch.Generator().manual_seed(0))
    merged = AutoModelForMaskedLM.from_pretrained(str(out)).eval()
    reread = PeftModel.from_pretrained(AutoModelForMaskedLM.from_pretrained(str(base_dir)), str(out / "adapter")).eval()
    with torch.no_grad():
        logits = [m(input_ids=ids, attention_mask=torch.ones_like(ids)).logits for m in (reread, merged)]
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-4, atol=1e-5)
