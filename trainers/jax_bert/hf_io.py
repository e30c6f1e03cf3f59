"""Export the Flax BERT masked-LM to the Hugging Face directory layout, and import it back.

A saved directory holds ``config.json`` (``model_type`` "bert", ``architectures`` ["BertForMaskedLM"]),
``model.safetensors`` with the ``BertForMaskedLM`` state-dict names, and ``tokenizer.json`` +
``tokenizer_config.json`` + ``special_tokens_map.json``, so that ``transformers.AutoModelForMaskedLM``
and ``transformers.AutoTokenizer`` load it offline, and so do dpaudit's scorers.

Name mapping (the Flax tree mirrors the HF module tree): ``a/b/kernel`` -> ``a.b.weight`` transposed
(Flax stores [in, out], torch [out, in]); ``embedding`` and LayerNorm ``scale`` -> ``weight``;
``bias`` -> ``bias``. The decoder is tied to the word embeddings: like transformers 5 itself, the
file holds neither ``cls.predictions.decoder.weight`` nor ``cls.predictions.decoder.bias``
(transformers re-ties them to ``bert.embeddings.word_embeddings.weight`` and ``cls.predictions.bias``).

Weights are safetensors only (never pickle). A directory is written under a temporary name and
renamed into place, so a reader never sees half a model.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tokenizers
from flax import traverse_util
from safetensors import SafetensorError
from safetensors.numpy import load_file, save_file

from dpaudit.common.errors import UserInputError
from dpaudit.files.model_dirs import MASKED_LM, ExpectedTensors, architecture_kind
from dpaudit.files.run_dirs import FILE_MODE, staged_directory
from dpaudit.trainers.jax_bert.model import BertConfig, FlaxBertForMaskedLM
from dpaudit.training.tokenizer import SPECIAL_TOKENS

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
TOKENIZER_NAME = "tokenizer.json"

_LEAF_TO_HF = {"kernel": "weight", "embedding": "weight", "scale": "weight", "bias": "bias"}
# Keys a BERT checkpoint may hold that this masked-LM does not use (pooler and NSP head of
# BertForPreTraining / BertModel, buffers of older transformers, the tied decoder).
_IGNORED_PREFIXES = ("bert.pooler.", "cls.seq_relationship.")
_IGNORED_KEYS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids", "cls.predictions.decoder.weight")
_TIED_BIAS = "cls.predictions.decoder.bias"


def hf_name(path: tuple[str, ...]) -> str:
    """The HF state-dict name of a Flax parameter path, e.g. ``("cls", "predictions", "bias")``."""
    return ".".join((*path[:-1], _LEAF_TO_HF[path[-1]]))


def to_hf_state_dict(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Flax params -> ``{hf_name: float32 numpy array}`` in torch layout (kernels transposed)."""
    state: dict[str, np.ndarray] = {}
    for path, value in traverse_util.flatten_dict(dict(params)).items():
        array = np.asarray(jax.device_get(value), dtype=np.float32)
        if path[-1] == "kernel":
            array = array.T
        state[hf_name(path)] = np.ascontiguousarray(array)
    return state


def _param_shapes(config: BertConfig) -> dict[tuple[str, ...], tuple[int, ...]]:
    """The parameter paths and shapes of ``config``'s model, traced without computing anything."""
    model = FlaxBertForMaskedLM(config)
    ids = jnp.zeros((1, 2), jnp.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids))["params"]
    return {path: tuple(leaf.shape) for path, leaf in traverse_util.flatten_dict(shapes).items()}


def expected_layout(model_dir: Path, config: dict[str, Any]) -> ExpectedTensors:
    """The tensors :func:`from_hf_state_dict` reads for ``config.json`` (:data:`dpaudit.files.model_dirs.Layout`): jax-bert's
    side of the one up-front model directory check of ``--init-from``, from the Flax parameter tree traced for the
    config (no transformers, no torch).

    Raises:
        UserInputError: a ``config.json`` this BERT masked LM cannot reproduce, naming the file.
    """
    architectures = [str(a) for a in config.get("architectures") or ()]
    other = [a for a in architectures if architecture_kind(a) not in (None, MASKED_LM)]
    if other and not any(architecture_kind(a) == MASKED_LM for a in architectures):
        raise UserInputError(
            f"{Path(model_dir) / CONFIG_NAME}: architectures names {other[0]}, but jax-bert trains a "
            "masked LM and starts from a BERT masked LM (BertForMaskedLM, BertForPreTraining); pass "
            "one, or train this model with a torch trainer (--trainer edp-sgd)."
        )
    try:
        bert = BertConfig.from_hf_dict(config)
    except (ValueError, TypeError) as err:
        raise UserInputError(f"{Path(model_dir) / CONFIG_NAME}: {err}") from None
    required = {
        hf_name(path): (shape[::-1] if path[-1] == "kernel" else shape) for path, shape in _param_shapes(bert).items()
    }
    vocab, hidden = bert.vocab_size, bert.hidden_size
    optional: dict[str, tuple[int, ...] | None] = {
        "cls.predictions.decoder.weight": (vocab, hidden),
        _TIED_BIAS: (vocab,),
    }
    optional.update({name: None for name in _IGNORED_KEYS if name not in optional})
    return ExpectedTensors(
        architecture="BertForMaskedLM (jax-bert)",
        required=required,
        optional=optional,
        ignored=tuple("^" + re.escape(p) for p in _IGNORED_PREFIXES),
        fallbacks={"cls.predictions.bias": _TIED_BIAS},
        embedding="bert.embeddings.word_embeddings.weight",
    )


def from_hf_state_dict(
    state: Mapping[str, np.ndarray], config: BertConfig, *, source: str = "state dict"
) -> dict[str, Any]:
    """``{hf_name: array}`` (a ``BertForMaskedLM`` / ``BertForPreTraining`` checkpoint) -> Flax params.

    Also accepts the very old ``LayerNorm.gamma`` / ``LayerNorm.beta`` names and a bias stored only
    as ``cls.predictions.decoder.bias``.

    Raises:
        UserInputError: naming ``source`` and the missing or misshapen tensor.
    """
    renamed: dict[str, np.ndarray] = {}
    for name, value in state.items():
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        renamed[name] = value
    if "cls.predictions.bias" not in renamed and _TIED_BIAS in renamed:
        renamed["cls.predictions.bias"] = renamed[_TIED_BIAS]
    flat: dict[tuple[str, ...], jnp.ndarray] = {}
    used: set[str] = set()
    for path, shape in _param_shapes(config).items():
        name = hf_name(path)
        if name not in renamed:
            raise UserInputError(
                f"{source}: tensor {name} is missing; this is not a BertForMaskedLM checkpoint of this config."
            )
        array = np.asarray(renamed[name])
        if not np.issubdtype(array.dtype, np.floating):
            raise UserInputError(f"{source}: tensor {name} has dtype {array.dtype}, expected floating point.")
        if path[-1] == "kernel":
            array = array.T
        if tuple(array.shape) != shape:
            expected = shape[::-1] if path[-1] == "kernel" else shape
            raise UserInputError(
                f"{source}: tensor {name} has shape {tuple(np.shape(renamed[name]))}, expected {expected} from config.json."
            )
        flat[path] = jnp.asarray(array, dtype=jnp.float32)
        used.add(name)
    unexpected = sorted(
        name
        for name in renamed
        if name not in used
        and name not in _IGNORED_KEYS
        and name != _TIED_BIAS
        and not name.startswith(_IGNORED_PREFIXES)
    )
    if unexpected:
        raise UserInputError(
            f"{source}: unexpected tensors {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''};"
            " this is not a plain BERT masked-LM checkpoint."
        )
    return traverse_util.unflatten_dict(flat)


def _tokenizer_config(config: BertConfig) -> dict[str, Any]:
    # "PreTrainedTokenizerFast" loads tokenizer.json exactly as written. Naming "BertTokenizer" instead
    # makes transformers 5 rebuild a stock BERT pipeline from the vocabulary and drop the digit splitter.
    names = dict(zip(("pad_token", "unk_token", "cls_token", "sep_token", "mask_token"), SPECIAL_TOKENS, strict=True))
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": config.max_position_embeddings,
        "do_lower_case": True,
        "clean_up_tokenization_spaces": False,
        **names,
    }


def save_pretrained(
    out_dir: str | os.PathLike[str], params: Mapping[str, Any], config: BertConfig, tokenizer: tokenizers.Tokenizer
) -> None:
    """Write a Hugging Face model directory (weights, config and tokenizer), replacing ``out_dir`` atomically.

    Args:
        out_dir: the model directory to create or replace (e.g. ``RUN/model``).
        params: the Flax parameters of :class:`~trainers.jax_bert.model.FlaxBertForMaskedLM`.
        config: their :class:`~trainers.jax_bert.model.BertConfig`.
        tokenizer: the tokenizer the model was trained with (its vocabulary must fit ``config.vocab_size``).
    """
    if tokenizer.get_vocab_size() > config.vocab_size:
        raise ValueError(
            f"tokenizer vocabulary must fit config.vocab_size={config.vocab_size}, got {tokenizer.get_vocab_size()} tokens."
        )
    state = to_hf_state_dict(params)
    expected = {hf_name(path) for path in _param_shapes(config)}
    if set(state) != expected:
        raise ValueError(
            f"params must match config's parameter tree, got differences in {sorted(set(state) ^ expected)[:3]}."
        )
    special_map = {key: value for key, value in _tokenizer_config(config).items() if key.endswith("_token")}
    # only_own=False: model/ is this trainer's own, inside the train directory it holds locked.
    with staged_directory(out_dir, overwrite=True, option="model directory", only_own=False) as staging:
        try:
            save_file(state, str(staging / WEIGHTS_NAME), metadata={"format": "pt"})
        except SafetensorError as err:  # the Rust writer's disk-full / file-size-limit error
            raise UserInputError(
                f"{Path(out_dir) / WEIGHTS_NAME}: could not write the model ({err}); free disk space or raise the "
                "file-size limit (ulimit -f), then rerun the same command."
            ) from None
        os.chmod(staging / WEIGHTS_NAME, FILE_MODE)  # safetensors creates it 0600; every output gets the same rule
        _write_json(staging / CONFIG_NAME, config.to_hf_dict())
        (staging / TOKENIZER_NAME).write_text(tokenizer.to_str(pretty=True), encoding="utf-8")
        _write_json(staging / "tokenizer_config.json", _tokenizer_config(config))
        _write_json(staging / "special_tokens_map.json", special_map)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _read_weights(model_dir: Path) -> dict[str, np.ndarray]:
    single, index = model_dir / WEIGHTS_NAME, model_dir / WEIGHTS_INDEX_NAME
    if single.is_file():
        return load_file(str(single))
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise UserInputError(f"{index}: not a safetensors index ({err}); re-save the model.") from None
        state: dict[str, np.ndarray] = {}
        for shard in sorted(set(weight_map.values())):
            state.update(load_file(str(model_dir / shard)))
        return state
    if any((model_dir / name).exists() for name in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")):
        raise UserInputError(
            f"{model_dir} has no {WEIGHTS_NAME}; only safetensors weights are read (never pickle)."
            " Re-save it with transformers' save_pretrained(..., safe_serialization=True)."
        )
    raise UserInputError(f"{model_dir} has no {WEIGHTS_NAME}; pass a Hugging Face model directory.")


def _read_tokenizer(model_dir: Path) -> tokenizers.Tokenizer | None:
    path = model_dir / TOKENIZER_NAME
    if path.is_file():
        try:
            return tokenizers.Tokenizer.from_file(str(path))
        except Exception as err:  # the Rust loader raises a bare Exception
            raise UserInputError(f"{path}: not a tokenizers file ({err}); re-save the tokenizer.") from None
    vocab = model_dir / "vocab.txt"
    if vocab.is_file():
        lowercase = True
        tok_config = model_dir / "tokenizer_config.json"
        if tok_config.is_file():
            lowercase = bool(json.loads(tok_config.read_text(encoding="utf-8")).get("do_lower_case", True))
        return tokenizers.BertWordPieceTokenizer(str(vocab), lowercase=lowercase)._tokenizer
    return None


def load_pretrained(
    model_dir: str | os.PathLike[str],
) -> tuple[dict[str, Any], BertConfig, tokenizers.Tokenizer | None]:
    """Read a Hugging Face BERT masked-LM directory into Flax params.

    Reads directories written by :func:`save_pretrained` and by transformers' own
    ``BertForMaskedLM.save_pretrained`` (also ``BertForPreTraining``: its pooler and NSP head are
    dropped). The tokenizer comes from ``tokenizer.json``, else from a BERT ``vocab.txt``; it is
    ``None`` when the directory has neither (transformers saves no tokenizer with a bare model).

    Raises:
        UserInputError: the directory, config or weights are missing or are not a BERT masked-LM.
    """
    model_dir = Path(model_dir)
    config_path = model_dir / CONFIG_NAME
    if not config_path.is_file():
        raise UserInputError(f"{config_path} is missing; pass a Hugging Face model directory.")
    try:
        config_dict = json.loads(config_path.read_text(encoding="utf-8"))
        config = BertConfig.from_hf_dict(config_dict)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError, TypeError) as err:
        raise UserInputError(f"{config_path}: {err}") from None
    params = from_hf_state_dict(_read_weights(model_dir), config, source=str(model_dir / WEIGHTS_NAME))
    tokenizer = _read_tokenizer(model_dir)
    if tokenizer is not None and tokenizer.get_vocab_size() > config.vocab_size:
        raise UserInputError(
            f"{model_dir}: the tokenizer has {tokenizer.get_vocab_size()} tokens but config.json vocab_size is"
            f" {config.vocab_size}; they do not belong together."
        )
    return params, config, tokenizer
