"""What stops a real pretrained Hugging Face encoder from being a start, handled: an encoder without a masked-LM head
(a fresh head from --seed, said in one line; refused under --peft lora, where it would stay untrained), a classifier
config without id2label (a fresh head), and a tokenizer of another family than BERT's WordPiece (one line naming
it). Built on tiny synthetic models, never on a downloaded one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models

from dpaudit.common.errors import UserInputError
from dpaudit.trainers.torch_common.model import load_model, special_ids
from dpaudit.training.tokenizer import train_wordpiece

_TEXTS = ["play some music by the beatles", "book a table for two tonight", "what is the weather in paris"] * 4


def _save(folder: Path, model, tokenizer: Tokenizer) -> Path:
    folder.mkdir(parents=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A 1-layer ``BertModel`` (encoder weights only, as MiniLM's) with a WordPiece tokenizer of its vocabulary."""
    from transformers import BertConfig, BertModel

    tokenizer = train_wordpiece(_TEXTS, vocab_size=200)
    config = BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    return _save(tmp_path_factory.mktemp("encoder") / "model", BertModel(config), tokenizer)


def test_an_encoder_without_mlm_head_gets_a_fresh_tied_one_and_no_load_report(encoder_dir, capfd):
    model, _, head = load_model(encoder_dir, "mlm", label_names=None, seed=3)
    assert head == "fresh" and type(model).__name__ == "BertForMaskedLM"
    assert model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    again, _, _ = load_model(encoder_dir, "mlm", label_names=None, seed=3)  # drawn from --seed: the same head
    assert torch.equal(again.cls.predictions.transform.dense.weight, model.cls.predictions.transform.dense.weight)
    assert "MISSING" not in "".join(capfd.readouterr())  # transformers' load report is silenced


def test_a_classifier_config_without_id2label_gets_a_fresh_head(encoder_dir, tmp_path):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(encoder_dir, num_labels=3)  # labels named LABEL_0.. by transformers
    torch.manual_seed(1)
    saved = BertForSequenceClassification(config)
    folder = _save(tmp_path / "clf", saved, Tokenizer.from_file(str(encoder_dir / "tokenizer.json")))
    model, _, head = load_model(folder, "classify", label_names=["music", "table", "weather"], seed=3)
    assert head == "fresh" and model.config.id2label == {0: "music", 1: "table", 2: "weather"}
    assert not torch.equal(model.classifier.weight, saved.classifier.weight)  # redrawn from --seed
    assert torch.equal(model.bert.embeddings.word_embeddings.weight, saved.bert.embeddings.word_embeddings.weight)


def test_a_tokenizer_of_another_family_is_one_line_naming_it():
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "hello": 5}
    roberta_like = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    with pytest.raises(UserInputError, match="another family than BERT's WordPiece") as err:
        special_ids(roberta_like, where="--init-from roberta")
    assert "\n" not in str(err.value) and "<s>, </s>" in str(err.value) and "--task clm" in str(err.value)


@pytest.mark.parametrize("peft", ["none", "lora"])
def test_mlm_from_an_encoder_trains_its_fresh_head_and_lora_is_refused_with_the_fix(
    encoder_dir, data_dir, tmp_path, edp_config, peft, capsys
):
    from dpaudit.trainers.edp_sgd.trainer import _Plugin

    config = edp_config(task="mlm", mode="sgd", init_from=str(encoder_dir), peft=peft, vocab_size=None)
    run = _Plugin(data_dir, tmp_path / "run", config, seed=0)
    if peft == "lora":
        with pytest.raises(UserInputError, match="has no masked-LM head, and LoRA would leave") as err:
            run._setup()
        assert "\n" not in str(err.value) and "--data-split public --non-private" in str(err.value)
        return
    run._setup()
    assert run.head == "fresh" and any(n.startswith("cls.predictions") for n in run.names)
    assert "has no masked-LM head (its weights hold the encoder only)" in capsys.readouterr().err
