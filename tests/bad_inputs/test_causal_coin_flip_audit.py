"""Coin-flip new-token canaries on a causal LM get the one-run audit (hardening): ``dpaudit attack``'s
defaults on a causal LM were exposure and extraction only, the canary attack refused a causal LM, and
nothing said that the canaries injected for a one-run audit were never audited in one run. The canary attack
now scores each secret by its log-likelihood given its prefix and reports the one-run bounds in the terminal,
results.json and the report."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """A tiny model fits fastest on one thread (two spinning OpenMP threads on a shared 2-core machine made it
    8x slower); as tests/trainers/conftest.py's fixture of the same purpose."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def coin_flip_causal(tmp_path_factory):
    """An inject directory of 16 coin-flip new-token canaries and a tiny GPT-2 fitted on its train.jsonl (plain
    full-batch Adam), its tokenizer learned from public.jsonl plus the declared new tokens, as the trainers do."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.training.tokenizer import special_token_ids, train_wordpiece

    root = tmp_path_factory.mktemp("coinflip")
    data = root / "data"
    result = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "210",
            "--heldout-size",
            "24",
            "--public-size",
            "96",
            "--coin-flip",
            "--design",
            "new-tokens:4",
            "--per-frequency",
            "16",
            "--frequencies",
            "1",
            "--out",
            str(data),
            "--seed",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    run = load_inject_run(data)
    tokenizer = train_wordpiece(run.public_texts, vocab_size=300, min_frequency=1, new_tokens=run.new_tokens)
    ids = special_token_ids(tokenizer)
    config = GPT2Config(
        vocab_size=tokenizer.get_vocab_size(),
        bos_token_id=ids["cls"],
        eos_token_id=ids["sep"],
        pad_token_id=ids["pad"],
        tie_word_embeddings=True,
        n_layer=1,
        n_embd=32,
        n_head=2,
        n_positions=64,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    rows = [e.ids[:32] for e in tokenizer.encode_batch(run.train_texts)]
    width = max(map(len, rows))
    input_ids = torch.tensor([r + [ids["pad"]] * (width - len(r)) for r in rows])
    mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(40):
        optimizer.zero_grad()
        model(input_ids=input_ids, attention_mask=mask, labels=input_ids.masked_fill(mask == 0, -100)).loss.backward()
        optimizer.step()
    save_hf(root / "model", model.eval(), tokenizer)
    return data, root / "model"


def test_default_attacks_audit_coin_flip_canaries_of_a_causal_lm_in_one_run(coin_flip_causal, tmp_path):
    data, model = coin_flip_causal
    out = tmp_path / "attack"
    result = CliRunner().invoke(cli, ["attack", "--model", str(model), "--data", str(data), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "canary          canaries" in result.output  # its row in the terminal's membership table
    body = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [a["attack"] for a in body["attacks"]] == ["exposure", "extraction", "canary"]
    canary = body["attacks"][2]
    assert "log-likelihood of the secret given its prefix" in canary["parameters"]["score"]
    (task,) = canary["tasks"]
    assert task["task"] == "canaries" and task["auc"] > 0.9  # a fitted model: members' tokens were trained up
    assert any(b["method"] == "one_run" for b in task["audit"]["bounds"])
    assert "the canary attack's log-likelihood" in body["attacks"][0]["warnings"][0]  # not "reconstruction"
    assert "canary" in (out / "index.html").read_text(encoding="utf-8")
