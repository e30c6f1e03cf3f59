"""Write the trained model in Hugging Face layout, atomically (``AutoModelFor...`` reloads it).

``model/`` holds ``config.json`` and ``model.safetensors`` (``save_pretrained``), and the tokenizer as
``tokenizer.json`` + ``tokenizer_config.json`` + ``special_tokens_map.json``. The directory is built
under a temporary name and renamed into place (:func:`dpaudit.files.run_dirs.staged_directory`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from dpaudit.files.run_dirs import staged_directory
from dpaudit.scoring.source import CAUSAL_LM, architecture_kind
from dpaudit.training.tokenizer import SPECIAL_TOKENS

_SPECIAL_KEYS = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
_TOKEN_FILES = ("tokenizer_config.json", "special_tokens_map.json")


def save_hf(
    out_dir: Path, model: Any, tokenizer: Tokenizer, *, start_dir: Path | None = None, adapter: Any = None
) -> None:
    """Replace ``out_dir`` with the model, its config and its tokenizer.

    A causal LM (``--task clm``: a ``*ForCausalLM`` or ``*LMHeadModel``): the tokenizer config also names
    ``bos_token`` [CLS] and ``eos_token`` [SEP] (docs/scoring.md, convention 1) and the model's inputs (ids and
    mask only); a causal model started from ``start_dir`` whose tokenizer is not a dpaudit WordPiece (GPT-2's
    BPE, Llama's) keeps that start's ``tokenizer_config.json`` and ``special_tokens_map.json`` as they came
    (their token names are its own).

    ``adapter`` (a ``peft.PeftModel``; ``model`` is then its merged copy): the adapter alone goes to ``adapter/``
    in peft's ``save_pretrained`` layout (``adapter_config.json``, ``adapter_model.safetensors``) with the same
    tokenizer files, so ``PeftModel.from_pretrained(base, out_dir / "adapter")`` reads it back.
    """
    names = dict(zip(_SPECIAL_KEYS, SPECIAL_TOKENS, strict=True))
    causal = architecture_kind(type(model).__name__) == CAUSAL_LM
    if causal:
        names.update(bos_token=SPECIAL_TOKENS[2], eos_token=SPECIAL_TOKENS[3])
    foreign = causal and start_dir is not None and any(tokenizer.token_to_id(t) is None for t in SPECIAL_TOKENS)
    kept = {
        name: (start_dir / name).read_text(encoding="utf-8")
        for name in _TOKEN_FILES
        if foreign and (start_dir / name).is_file()
    }
    tok_config = {
        # PreTrainedTokenizerFast loads tokenizer.json exactly as written (BertTokenizer would rebuild
        # a stock pipeline from the vocabulary and drop the one-token-per-digit splitter).
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": int(getattr(model.config, "max_position_embeddings", 512)),
        "do_lower_case": True,
        "clean_up_tokenization_spaces": False,
        **names,
        # A causal LM reads input ids only: GPT-2 would add the word embedding of the [PAD] id at every position
        # if it were handed the WordPiece post-processor's token_type_ids.
        **({"model_input_names": ["input_ids", "attention_mask"]} if causal else {}),
    }
    # only_own=False: model/ is this trainer's own, inside the train directory it holds locked.
    with staged_directory(out_dir, overwrite=True, option="model directory", only_own=False) as staging:
        model.save_pretrained(str(staging), safe_serialization=True)
        (staging / "tokenizer.json").write_text(tokenizer.to_str(pretty=True), encoding="utf-8")
        for name, obj in (("tokenizer_config.json", tok_config), ("special_tokens_map.json", names)):
            if foreign and name not in kept:
                continue  # the start had none: no BERT token names for another tokenizer
            text = kept.get(name, json.dumps(obj, indent=2, sort_keys=True) + "\n")
            (staging / name).write_text(text, encoding="utf-8")
        if adapter is not None:
            adapter_dir = staging / "adapter"
            adapter.save_pretrained(str(adapter_dir), safe_serialization=True)
            (adapter_dir / "README.md").unlink(missing_ok=True)  # peft's empty model-card template
            for path in list(staging.iterdir()):  # the tokenizer beside the adapter
                if path.is_file() and path.name.startswith(("tokenizer", "special_tokens")):
                    (adapter_dir / path.name).write_bytes(path.read_bytes())
        mode = 0o666 & ~_umask()
        for path in staging.rglob("*"):  # save_pretrained may create private (0600) files
            if path.is_file():
                os.chmod(path, mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
