"""--task clm: a GPT-2 trained on next-token NLL, exported for transformers, evaluated beside its
trivial baselines; the ghost engine hosts it; starts from causal LMs (a foreign BPE tokenizer's BOS
prepended) and the refusal of a start trained on this run's private rows."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer, _Plugin
from dpaudit.trainers.torch_common.model import build_model, causal_losses


@pytest.fixture(scope="module")
def clm_run(data_dir, tmp_path_factory, edp_config):
    """One dp-sgd clm run (ghost engine, one epoch of 6 steps) on the shared inject directory."""
    out = tmp_path_factory.mktemp("clm") / "run"
    EdpSgdTrainer().train(data_dir, out, edp_config(task="clm", mode="dp-sgd", epochs=1), seed=0)
    return out


def test_the_loss_is_transformers_own_shifted_nll():
    """One unpadded row: the mean NLL over the tokens after the first is GPT2LMHeadModel's labels loss; a
    padded row's loss is its unpadded loss (nothing reads the padding)."""
    model = build_model(
        "clm",
        preset="tiny",
        vocab_size=50,
        max_length=16,
        label_names=None,
        seed=0,
        specials={"pad": 0, "cls": 2, "sep": 3},
    )
    ids = torch.tensor([[2, 11, 17, 5, 40, 3]])
    with torch.no_grad():
        ours, correct = causal_losses(model, {"input_ids": ids, "next_weights": torch.ones(1, 6)})
        theirs = model(input_ids=ids, labels=ids).loss
        padded, _ = causal_losses(
            model,
            {
                "input_ids": torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1),
                "next_weights": torch.tensor([[1.0] * 6 + [0.0] * 4]),
            },
        )
    assert float(ours[0]) == pytest.approx(float(theirs), rel=1e-6)
    assert float(padded[0]) == pytest.approx(float(theirs), rel=1e-5)
    assert 0.0 <= float(correct[0]) <= 1.0


def test_clm_run_exports_a_gpt2_that_transformers_reloads_with_its_tokenizer(clm_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(clm_run / "model", local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(clm_run / "model", local_files_only=True)
    config = model.config
    assert type(model).__name__ == "GPT2LMHeadModel" and config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()
    vocab = tokenizer.get_vocab()
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (
        vocab["[CLS]"],
        vocab["[SEP]"],
        vocab["[PAD]"],
    )
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("[CLS]", "[SEP]")
    enc = tokenizer(["set an alarm for 7 15"])
    assert "token_type_ids" not in enc  # GPT-2 would add an embedding of them
    ids = enc["input_ids"][0]
    assert ids[0] == config.bos_token_id and ids[-1] == config.eos_token_id
    assert [tokenizer.decode([i]) for i in ids[-4:-1]] == ["7", "1", "5"]  # one token per digit


def test_clm_metrics_carry_next_token_accuracy_beside_its_baselines(clm_run):
    rows = [json.loads(line) for line in (clm_run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "next_token_accuracy" in r]
    assert evals, rows[-1]
    last = evals[-1]
    assert 0.0 <= last["next_token_accuracy"] <= 1.0 and last["eval_loss"] > 0
    assert 0.0 < last["heldout_next_token_accuracy_baseline"] < 1.0
    assert 0.0 < last["heldout_next_token_loss_baseline"] < last["eval_loss"]  # a 6-step DP model is no better
    privacy = json.loads((clm_run / "privacy.json").read_text())
    assert privacy["details"]["task"] == "clm" and privacy["details"]["mode"] == "dp-sgd"
    assert all(r["clip_fraction"] is not None for r in rows if "loss" in r)


@pytest.mark.parametrize("mode", ["dp-sgd", "edp-sgd"])
def test_the_ghost_engine_hosts_gpt2(data_dir, tmp_path, edp_config, mode):
    run = _Plugin(data_dir, tmp_path / "out", edp_config(task="clm", mode=mode), seed=0)
    run._setup()
    assert run.ghost is not None and run.ghost_refused is None
    if mode == "edp-sgd":  # one clip norm per GPT-2 block, and the embeddings and final LayerNorm
        assert run.group_names == [
            "transformer.wte",
            "transformer.wpe",
            "transformer.h.0",
            "transformer.h.1",
            "transformer.ln_f",
        ]


def test_a_start_trained_on_this_runs_train_jsonl_is_refused(clm_run, data_dir, tmp_path, edp_config):
    out = tmp_path / "second"
    with pytest.raises(UserInputError, match="--init-from"):
        EdpSgdTrainer().train(data_dir, out, edp_config(task="clm", mode="dp-sgd", init_from=str(clm_run)), seed=0)
    assert not out.exists()


def test_clm_takes_only_a_causal_preset(edp_config):
    with pytest.raises(ValueError, match="--preset small"):
        edp_config(task="clm", preset="small")


@pytest.fixture(scope="module")
def bpe_causal_dir(tmp_path_factory, data_dir):
    """A tiny GPT-2 with a byte-level BPE tokenizer (no [CLS]/[SEP]/[MASK]; BOS = EOS = <|endoftext|>, which
    its post-processor does not add), trained on public.jsonl's texts, saved as a Hugging Face directory."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel

    texts = [json.loads(line)["text"] for line in (data_dir / "public.jsonl").read_text().splitlines()]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    eot = tokenizer.token_to_id("<|endoftext|>")
    config = GPT2Config(
        vocab_size=tokenizer.get_vocab_size(),
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=64,
        bos_token_id=eot,
        eos_token_id=eot,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("bpe") / "gpt2"
    GPT2LMHeadModel(config).save_pretrained(path, safe_serialization=True)
    tokenizer.save(str(path / "tokenizer.json"))
    tok_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "model_max_length": 64,
    }
    (path / "tokenizer_config.json").write_text(json.dumps(tok_config), encoding="utf-8")
    return path, eot


def test_a_foreign_causal_start_keeps_its_tokenizer_and_gets_its_bos_first(
    bpe_causal_dir, data_dir, tmp_path, edp_config
):
    start, eot = bpe_causal_dir
    run = _Plugin(data_dir, tmp_path / "out", edp_config(task="clm", mode="dp-sgd", init_from=str(start)), seed=0)
    run._setup()
    encoded = run.encoded["train"]
    assert bool((encoded.input_ids[:, 0] == eot).all())  # BOS prepended to every row (convention 2)
    assert int(encoded.lengths.max()) <= 16 and bool((encoded.lengths >= 2).all())
    assert run.ghost is not None  # a GPT-2 whatever its tokenizer
    run.step(0, np.arange(8))  # one clipped, noised step on the foreign start
    run.export(tmp_path / "model")
    assert (tmp_path / "model" / "tokenizer_config.json").read_text(encoding="utf-8") == (
        start / "tokenizer_config.json"
    ).read_text(encoding="utf-8")  # its own token names, as it came
    assert not (tmp_path / "model" / "special_tokens_map.json").exists()  # no BERT names for a BPE tokenizer


def test_unigram_loss_baseline_worked_out():
    import math

    from dpaudit.training.baselines import unigram_loss

    # one row: p(1) = 3/4, p(2) = 1/4 over its 4 targets; the padded slot (weight 0) is not a target
    assert unigram_loss([[1, 1, 1, 2, 7]], [[1, 1, 1, 1, 0]]) == pytest.approx(
        (3 * -math.log(0.75) - math.log(0.25)) / 4, rel=1e-12
    )
    # two rows: each row's mean, averaged over rows (as the model is scored); p(1) = p(2) = 1/2
    assert unigram_loss([[1, 1, 2], [2, 0, 0]], [[1, 1, 1], [1, 0, 0]]) == pytest.approx(math.log(2), rel=1e-12)
    assert unigram_loss(np.zeros((0, 3)), np.zeros((0, 3))) is None


def test_a_masked_lm_start_is_refused_for_clm(tmp_path, data_dir, edp_config):
    """--init-from a BERT masked LM with --task clm: one line naming the option, nothing written."""
    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.training.tokenizer import train_wordpiece

    texts = [json.loads(line)["text"] for line in (data_dir / "public.jsonl").read_text().splitlines()]
    bert = build_model("mlm", preset="tiny", vocab_size=300, max_length=16, label_names=None, seed=0)
    save_hf(tmp_path / "bert", bert, train_wordpiece(texts, vocab_size=300))
    out = tmp_path / "out"
    with pytest.raises(UserInputError, match="--init-from .*no causal LM"):
        EdpSgdTrainer().train(
            data_dir, out, edp_config(task="clm", mode="sgd", init_from=str(tmp_path / "bert")), seed=0
        )
    assert not out.exists()


@pytest.mark.parametrize("task", ["mlm", "clm"])
def test_declared_new_token_rows_start_at_zero_and_nothing_else_moves(task):
    """As jax-bert: the word-embedding rows of declared new tokens (tied to the output layer) start at zero."""
    kw = dict(
        preset="tiny",
        vocab_size=60,
        max_length=16,
        label_names=None,
        seed=0,
        specials={"cls": 1, "sep": 2, "pad": 0} if task == "clm" else None,
    )
    plain, zeroed = build_model(task, **kw), build_model(task, **kw, zero_rows=[7, 59])
    before, after = plain.get_input_embeddings().weight.detach(), zeroed.get_input_embeddings().weight.detach()
    assert torch.all(after[[7, 59]] == 0) and before[[7, 59]].abs().sum() > 0
    keep = [i for i in range(60) if i not in (7, 59)]
    assert torch.equal(after[keep], before[keep])  # the same draw: only the declared rows differ
    assert torch.all(zeroed.get_output_embeddings().weight.detach()[[7, 59]] == 0)  # tied: the output rows too
