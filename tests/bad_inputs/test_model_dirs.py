"""One up-front check of every model directory (dpaudit/files/model_dirs.py), shared by ``dpaudit attack --model``,
``dpaudit train --init-from`` (every trainer) and ``dpaudit audit-trainer --set init_from=DIR``.

Each broken directory is built here from the tiny GPT-2 of tests/causal_fixtures.py (copied, never edited in
place) and refused in one line naming the file, tensor or field and what to do, exit code 2, nothing written and
the directory untouched. Before the check these were library tracebacks (IndexError, TypeError, transformers'
RuntimeError, the exposure ranker's ValueError) or, worse, an audit or a training run of a partly random model,
exit 0. The legitimate layouts (tied LM heads, a BERT pre-training checkpoint read as a masked LM, a bare base
model's names, and what dpaudit's own trainers export) still pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from tests.conftest import TORCH_ARGS

pytest.importorskip("torch")
pytest.importorskip("transformers")

#: The tiny edp-sgd causal run every --init-from case uses (it is refused before anything trains).
CLM_TRAIN = [
    "train",
    "--trainer",
    "edp-sgd",
    "--task",
    "clm",
    "--mode",
    "sgd",
    "--non-private",
    "--epochs",
    "1",
    "--batch-size",
    "16",
    "--max-length",
    "16",
    "--eval-examples",
    "8",
    "--seed",
    "3",
]


def _snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its content hash: a refusal leaves the user's directory as it was."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0], result.output[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _edit_config(path: Path, **fields) -> None:
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    config.update(fields)
    (path / "config.json").write_text(json.dumps(config), encoding="utf-8")


def _edit_weights(path: Path, edit) -> None:  # noqa: ANN001
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(path / "model.safetensors"))
    edit(weights)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})


def _small_table(src: Path, dst: Path) -> Path:
    """The tiny GPT-2's tokenizer (167 tokens) over a model whose embedding table has 100 rows."""
    from transformers import GPT2Config, GPT2LMHeadModel

    _copy(src, dst)
    config = json.loads((dst / "config.json").read_text(encoding="utf-8"))
    config.update(vocab_size=100)
    GPT2LMHeadModel(GPT2Config(**{k: v for k, v in config.items() if k != "architectures"})).save_pretrained(dst)
    return dst


def _gpt2_config_over_bert_weights(src: Path, dst: Path) -> Path:
    """A GPT-2 config.json and tokenizer over a BERT masked LM's weights (same vocabulary size)."""
    from transformers import BertConfig, BertForMaskedLM

    _copy(src, dst)
    vocab = json.loads((src / "config.json").read_text(encoding="utf-8"))["vocab_size"]
    bert = BertForMaskedLM(
        BertConfig(
            vocab_size=vocab,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=64,
        )
    )
    bert.save_pretrained(dst.parent / "bert-tmp")
    shutil.copyfile(dst.parent / "bert-tmp" / "model.safetensors", dst / "model.safetensors")
    return dst


def _nan(weights):  # noqa: ANN001, ANN202
    weights["transformer.h.0.mlp.c_fc.weight"][0, 0] = np.nan


def _inf(weights):  # noqa: ANN001, ANN202
    weights["transformer.wpe.weight"][3, 1] = -np.inf


#: name -> (builder of the broken directory from the tiny GPT-2, what the one error line names).
CASES = {
    "tokenizer-beyond-embeddings": (
        _small_table,
        (
            "its tokenizer has 167 tokens",
            "the embedding table (transformer.wte.weight) has 100 rows",
            "resize_token_embeddings",
        ),
    ),
    "config-field-type": (
        lambda s, d: (_copy(s, d), _edit_config(d, n_layer="two"))[0],
        ("config.json: n_layer must be a positive integer, got 'two'",),
    ),
    "config-vocab-vs-weights": (
        lambda s, d: (_copy(s, d), _edit_config(d, vocab_size=300))[0],
        (
            "config.json: vocab_size 300 disagrees with the weights' embedding table",
            "transformer.wte.weight has 167 rows",
        ),
    ),
    "nan-weights": (
        lambda s, d: (_copy(s, d), _edit_weights(d, _nan))[0],
        ("tensor transformer.h.0.mlp.c_fc.weight holds 1 NaN value",),
    ),
    "inf-weights": (
        lambda s, d: (_copy(s, d), _edit_weights(d, _inf))[0],
        ("tensor transformer.wpe.weight holds 1 infinite value",),
    ),
    "one-missing-tensor": (
        lambda s, d: (_copy(s, d), _edit_weights(d, lambda w: w.pop("transformer.h.1.ln_2.bias")))[0],
        ("1 of the 28 tensors it needs is missing (transformer.h.1.ln_2.bias)", "would start at random values"),
    ),
    "gpt2-config-over-bert-weights": (
        _gpt2_config_over_bert_weights,
        (
            "weights do not fit config.json's GPT2LMHeadModel",
            "28 of the 28 tensors it needs are missing",
            "have no place in it (bert.embeddings",
        ),
    ),
}


@pytest.fixture(scope="module")
def broken(tiny_causal_dir, tmp_path_factory):
    """Each broken directory of :data:`CASES`, built once (tests never edit them)."""
    root = tmp_path_factory.mktemp("broken")
    return {name: build(Path(tiny_causal_dir), root / name) for name, (build, _) in CASES.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_attack_refuses_a_broken_model_dir_up_front(case, broken, data_dir, tmp_path):
    model = broken[case]
    before = _snapshot(model)
    out = tmp_path / "attack"
    result = CliRunner().invoke(
        cli, ["attack", "--model", str(model), "--data", str(data_dir), "--out", str(out), "--attacks", "loss"]
    )
    line = _one_line_error(result, *CASES[case][1])
    assert str(model) in line  # the directory (or its config.json) is named
    assert not out.exists() and _snapshot(model) == before


@pytest.mark.parametrize("case", list(CASES))
def test_train_init_from_refuses_a_broken_model_dir_before_writing(case, broken, data_dir, tmp_path):
    model = broken[case]
    before = _snapshot(model)
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli, [*CLM_TRAIN, "--init-from", str(model), "--data", str(data_dir), "--out", str(out)]
    )
    _one_line_error(result, *CASES[case][1])
    assert not out.exists() and _snapshot(model) == before


def test_classify_from_a_causal_lm_is_refused_with_what_to_do(tiny_causal_dir, data_dir, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "edp-sgd",
            "--task",
            "classify",
            "--mode",
            "sgd",
            "--non-private",
            "--epochs",
            "1",
            "--batch-size",
            "16",
            "--max-length",
            "16",
            "--init-from",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(out),
        ],
    )
    _one_line_error(
        result, "config.json names a causal LM (GPT2LMHeadModel)", "--task classify starts from a BERT", "--task clm"
    )
    assert not out.exists()


def test_audit_trainer_start_passes_the_same_check(broken, tmp_path):
    out = tmp_path / "audit"
    model = broken["gpt2-config-over-bert-weights"]
    result = CliRunner().invoke(
        cli,
        [
            "audit-trainer",
            "--trainer",
            "edp-sgd",
            "--out",
            str(out),
            "--canaries",
            "16",
            "--steps",
            "2",
            "--set",
            "task=clm",
            "--set",
            f"init_from={model}",
        ],
    )
    _one_line_error(result, f"--init-from {model}: the weights do not fit config.json's GPT2LMHeadModel")
    assert not out.exists()


@pytest.fixture(scope="module")
def jax_export(tmp_path_factory):
    """A directory exactly as jax-bert's export writes it (read-only)."""
    return _jax_bert_export(tmp_path_factory.mktemp("jax-export") / "model")


def test_jax_bert_init_from_passes_the_same_check(jax_export, tmp_path, data_dir):
    """jax-bert's layout is its own Flax tree (no torch): a BERT export with one tensor dropped is refused the same way."""
    bert = _copy(jax_export, tmp_path / "jax")
    _edit_weights(bert, lambda w: w.pop("bert.encoder.layer.1.output.dense.bias"))
    out = tmp_path / "run"
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "--trainer",
            "jax-bert",
            "--preset",
            "tiny",
            "--max-length",
            "16",
            "--steps",
            "2",
            "--batch-size",
            "16",
            "--non-private",
            "--init-from",
            str(bert),
            "--data",
            str(data_dir),
            "--out",
            str(out),
        ],
    )
    _one_line_error(result, "1 of the 42 tensors it needs is missing (bert.encoder.layer.1.output.dense.bias)")
    assert not out.exists()


# -- what must still pass ------------------------------------------------------------------------------------


def _jax_bert_export(path: Path) -> Path:
    """A directory exactly as jax-bert's export writes it (hf_io.save_pretrained of a tiny init)."""
    import jax

    from dpaudit.trainers.jax_bert import hf_io
    from dpaudit.trainers.jax_bert.model import init_params, preset_config
    from dpaudit.training.tokenizer import train_wordpiece
    from tests.conftest import TINY_CAUSAL_TEXTS

    tokenizer = train_wordpiece(TINY_CAUSAL_TEXTS * 4, vocab_size=128, min_frequency=1)
    config = preset_config("tiny", vocab_size=tokenizer.get_vocab_size(), max_position_embeddings=32)
    hf_io.save_pretrained(path, init_params(config, jax.random.PRNGKey(0), seq_len=16), config, tokenizer)
    return path


def _torch_export(path: Path, task: str) -> Path:
    """A directory exactly as the torch trainers (edp-sgd, rgp) export it (save_hf of build_model)."""
    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.trainers.torch_common.model import build_model
    from dpaudit.training.tokenizer import train_wordpiece
    from tests.conftest import TINY_CAUSAL_TEXTS

    tokenizer = train_wordpiece(TINY_CAUSAL_TEXTS * 4, vocab_size=128, min_frequency=1)
    model = build_model(
        task,
        preset="tiny",
        vocab_size=tokenizer.get_vocab_size(),
        max_length=16,
        label_names=["a", "b"] if task == "classify" else None,
        seed=0,
    )
    save_hf(path, model, tokenizer)
    return path


def _transformers_dirs(root: Path) -> dict[str, Path]:
    """Layouts transformers itself writes or reads: a tied Llama, a BERT pre-training checkpoint named a masked LM
    (bert-base-uncased's files: pooler and next-sentence head dropped on load), GPT-2's base-model names under
    GPT2LMHeadModel (the gpt2 checkpoint's: no ``transformer.`` prefix, the tied head absent)."""
    from transformers import BertConfig, BertForPreTraining, GPT2Config, GPT2Model, LlamaConfig, LlamaForCausalLM

    out = {}
    LlamaForCausalLM(
        LlamaConfig(
            vocab_size=100,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=True,
        )
    ).save_pretrained(out.setdefault("llama-tied", root / "llama"))
    BertForPreTraining(
        BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(out.setdefault("bert-pretraining", root / "bert"))
    _edit_config(out["bert-pretraining"], architectures=["BertForMaskedLM"])
    GPT2Model(
        GPT2Config(vocab_size=100, n_layer=2, n_embd=32, n_head=2, n_positions=64, bos_token_id=0, eos_token_id=0)
    ).save_pretrained(out.setdefault("gpt2-base-names", root / "gpt2"))
    _edit_config(out["gpt2-base-names"], architectures=["GPT2LMHeadModel"])
    return out


def test_legitimate_layouts_pass_the_check(tiny_causal_dir, jax_export, tmp_path):
    from dpaudit.files.model_dirs import check_model_dir
    from dpaudit.scoring.architecture import transformers_layout
    from dpaudit.trainers.jax_bert.hf_io import expected_layout

    jax_dir = jax_export
    dirs = {
        "tiny-causal (tied head)": Path(tiny_causal_dir),
        "jax-bert export (tied decoder)": jax_dir,
        "edp-sgd classify export": _torch_export(tmp_path / "edp-classify", "classify"),
        "edp-sgd mlm export": _torch_export(tmp_path / "edp-mlm", "mlm"),
        "edp-sgd clm export": _torch_export(tmp_path / "edp-clm", "clm"),
        **_transformers_dirs(tmp_path),
    }
    for name, path in dirs.items():
        checked = check_model_dir(path, where=name, layout=transformers_layout)
        assert checked.layout is not None and checked.layout.exhaustive, name
        assert checked.embedding is not None and checked.embedding[1] == checked.config["vocab_size"], name
    # jax-bert reads its own export and a BERT pre-training checkpoint by its own (torch-free) layout
    for path in (jax_dir, dirs["bert-pretraining"]):
        assert check_model_dir(path, where="jax", layout=expected_layout).layout.architecture.startswith(
            "BertForMaskedLM"
        )


def test_the_check_is_one_rule_for_every_loader(tiny_causal_dir, tmp_path):
    """The same broken directory gives the same refusal through the attack's door and the trainers' (one check)."""
    from dpaudit.scoring.architecture import transformers_layout
    from dpaudit.scoring.source import resolve_model
    from dpaudit.training.starting_point import resolve_start

    model = _copy(Path(tiny_causal_dir), tmp_path / "m")
    _edit_weights(model, lambda w: w.pop("transformer.ln_f.weight"))
    with pytest.raises(UserInputError) as attack:
        resolve_model(model)
    with pytest.raises(UserInputError) as start:
        resolve_start(model, layout=transformers_layout)
    assert str(attack.value).split(": ", 1)[1] == str(start.value).split(": ", 1)[1]
    assert "transformer.ln_f.weight" in str(attack.value)


# ------------------------------------------------------------------------------------------------
# Model files that are not safetensors: pickle, truncated and random-bytes checkpoints (moved from
# tests/test_bad_inputs_runs.py).


def tree(root: Path) -> dict[str, int]:
    """Every entry under ``root`` with its mtime: a rerun that trains or rewrites anything changes it."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def invoke(args: list[str]):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0], result.output[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def _damaged_model(kind: str, source: Path, path: Path) -> Path:
    shutil.copytree(source / "model", path)
    weights = path / "model.safetensors"
    if kind == "pickle":
        import torch
        from safetensors.torch import load_file

        torch.save(load_file(weights), path / "pytorch_model.bin")
        weights.unlink()
    elif kind == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:
        weights.write_bytes(os.urandom(4096))
    return path


@pytest.mark.parametrize("kind", ["pickle", "truncated", "random"])
@pytest.mark.parametrize("command", ["train", "attack"])
def test_a_model_that_is_not_safetensors_is_one_line(kind, command, torch_runs, data_dir, tmp_path):
    model = _damaged_model(kind, torch_runs["edp-sgd"], tmp_path / "hf")
    out = tmp_path / "out"
    option = "--init-from" if command == "train" else "--model"
    if command == "train":
        args = [
            "train",
            "--trainer",
            "edp-sgd",
            "--init-from",
            model,
            "--data",
            data_dir,
            "--out",
            out,
            *TORCH_ARGS["edp-sgd"],
        ]
    else:
        args = ["attack", "--model", model, "--data", data_dir, "--out", out, "--attacks", "loss"]
    before = tree(tmp_path)
    message = assert_one_line_error(invoke(args), f"{option} {model} is not a safetensors model directory")
    assert ("pytorch_model.bin" if kind == "pickle" else str(model / "model.safetensors")) in message
    assert "Unpickl" not in message and "SafetensorError" not in message
    assert tree(tmp_path) == before
