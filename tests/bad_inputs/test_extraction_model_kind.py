"""``dpaudit attack --attacks extraction`` on a masked LM (hardening): extraction decodes a secret from its
prefix, which needs a causal LM; the refusal said "pass a masked LM" to a user who had passed one. It now says
so and names the masked LM's counterpart (reconstruction); any other attack a model cannot take names the kind
it needs and the attacks that fit."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from dpaudit.attacks.registry import resolve_attacks
from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError


@pytest.fixture(scope="module")
def tiny_masked_lm(tmp_path_factory):
    """A 1-layer BERT masked LM with random weights and the project's WordPiece tokenizer."""
    from transformers import BertConfig, BertForMaskedLM

    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.training.tokenizer import train_wordpiece

    tokenizer = train_wordpiece(["my pin code is 4 8 1 5", "call me back tomorrow"], vocab_size=100, min_frequency=1)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    path = tmp_path_factory.mktemp("mlm") / "model"
    save_hf(path, BertForMaskedLM(config).eval(), tokenizer)
    return path


def test_extraction_on_a_masked_lm_says_it_needs_a_causal_lm(tiny_masked_lm, data_dir, tmp_path):
    out = tmp_path / "attack"
    result = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_masked_lm),
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--attacks",
            "extraction",
        ],
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert "--attacks extraction" in result.output and "needs a causal LM" in result.output
    assert "is a masked LM; use --attacks reconstruction" in result.output
    assert "pass a masked LM" not in result.output
    assert not out.exists()


def test_an_attack_for_another_kind_names_the_kind_it_needs_and_the_fitting_attacks():
    with pytest.raises(UserInputError) as err:
        resolve_attacks(["reconstruction"], "classifier", model="clf")
    message = str(err.value)
    assert message.startswith(
        "--attacks reconstruction needs a masked LM, but clf is a classifier; pass a masked LM, "
        "or choose an attack for it: "
    )
    fitting = message.split("choose an attack for it: ")[1].rstrip(".").split(", ")
    assert "loss" in fitting and "reconstruction" not in fitting and "extraction" not in fitting
    with pytest.raises(
        UserInputError, match="^--attacks zlib needs a causal LM, but m is a masked LM; pass a causal LM"
    ):
        resolve_attacks(["zlib"], "masked-lm", model="m")
