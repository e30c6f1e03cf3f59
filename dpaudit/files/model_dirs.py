"""A Hugging Face model directory, checked once, before anything loads it.

Every door through which dpaudit reads a model directory runs :func:`check_model_dir` first: ``dpaudit attack
--model`` (and ``--reference-model``, ``--shadow-dirs``; :func:`dpaudit.scoring.source.resolve_model`) and every
trainer's ``--init-from`` (also under ``dpaudit audit-trainer --set init_from=DIR``;
:func:`dpaudit.training.starting_point.resolve_start`). A directory that is not one model is refused in one line
naming the file, the tensor or the field and what to do, before torch builds a model, before any output is
written and before any step runs. Without this check each case reached the user as a library traceback or, worse,
as a wrong audit:

- ``config.json`` that is not a JSON object, or a field of the wrong type (``"n_layer": "two"``);
- weights that are not whole safetensors files (:func:`check_weights`: never a pickle, never a torn file);
- weights that do not fit ``config.json``: a tensor of another shape (a ``vocab_size`` that disagrees with the
  embedding table), a tensor the architecture needs that the file lacks, or one it has no place for.
  transformers fills a missing tensor with random values and carries on, so the audit would measure a
  partly random model (a GPT-2 ``config.json`` over BERT weights loaded as an all-random GPT-2); tied or
  derived tensors (a tied LM head, position-id buffers) may be absent, as transformers itself saves them;
- a tokenizer with more tokens than the embedding table has rows (a token id past the table is an
  ``IndexError`` in the middle of training or scoring);
- weights that hold NaN or infinite values (every score and every gradient would be NaN).

What an architecture's weights are is the loader's knowledge, so the check takes it as a *layout*
(:class:`ExpectedTensors`) from the framework that will load the directory: transformers' own module tree
built on the meta device for the attacks and the torch trainers
(:func:`dpaudit.scoring.architecture.transformers_layout`), the Flax parameter tree for jax-bert
(:func:`dpaudit.trainers.jax_bert.hf_io.expected_layout`). Everything else here is torch-free and reads only
``config.json``, the tokenizer file and the safetensors headers; the finiteness check reads the weight bytes
once through a memory map (no model is built, and the pages it reads are the ones the load then finds cached).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard

import numpy as np

from dpaudit.common.errors import UserInputError

__all__ = [
    "CAUSAL_LM",
    "CLASSIFIER",
    "ExpectedTensors",
    "Layout",
    "MASKED_LM",
    "ModelDirCheck",
    "ModelKind",
    "TensorHeader",
    "architecture_difference",
    "architecture_kind",
    "check_model_dir",
    "check_weights",
    "compare_tensors",
    "read_config",
    "tokenizer_size",
]

ModelKind = Literal["masked-lm", "classifier", "causal-lm"]
MASKED_LM: ModelKind = "masked-lm"
CLASSIFIER: ModelKind = "classifier"
#: A GPT-style causal LM (``*ForCausalLM``, GPT-2's ``GPT2LMHeadModel``): the Secret Sharer's own setting.
CAUSAL_LM: ModelKind = "causal-lm"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")
#: What to do when config.json and the weights are not of one model.
RESAVE = "save config and weights together with model.save_pretrained(dir)"


def architecture_kind(architecture: str) -> ModelKind | None:
    """The model kind a Hugging Face architecture name (``config.json``'s ``architectures``, a model's class name)
    says, or None: the one place the names are read (the scorer, the torch trainers, the ghost clipper)."""
    if architecture.endswith("ForMaskedLM"):
        return MASKED_LM
    if architecture.endswith("ForSequenceClassification"):
        return CLASSIFIER
    if architecture.endswith("ForCausalLM") or architecture.endswith("LMHeadModel"):
        return CAUSAL_LM
    return None


# -- config.json -------------------------------------------------------------------------------------

#: Shape fields of the common Hugging Face configs (BERT, GPT-2, Llama and their kin): positive integers.
_POSITIVE_INTS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "n_embd",
    "n_layer",
    "n_head",
    "n_positions",
    "n_ctx",
    "n_inner",
    "num_key_value_heads",
    "head_dim",
    "num_labels",
    "d_model",
)
#: Of those, the ones a config may leave null (the model then derives them).
_NULLABLE = frozenset({"n_inner", "num_key_value_heads", "head_dim"})
_NUMBERS = (
    "layer_norm_eps",
    "layer_norm_epsilon",
    "rms_norm_eps",
    "initializer_range",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "resid_pdrop",
    "embd_pdrop",
    "attn_pdrop",
)
_TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id")


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def read_config(model_dir: str | os.PathLike[str], *, where: str) -> dict[str, Any]:
    """``config.json`` as a dict, its common fields type-checked (torch-free).

    Raises:
        UserInputError: one line naming the file and the field: no file, not a JSON object, a shape field
            that is not a positive integer, a number that is not one, a token id that is not a
            non-negative integer, ``architectures`` that is not a list of names.
    """
    path = Path(model_dir) / CONFIG
    if not path.is_file():
        raise UserInputError(f"{where}: no {CONFIG}; pass a Hugging Face model directory (model.save_pretrained(dir)).")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise UserInputError(
            f"{path}: cannot read it ({getattr(err, 'strerror', None) or err}); re-save the model "
            "(model.save_pretrained(dir))."
        ) from None
    except json.JSONDecodeError as err:
        raise UserInputError(
            f"{path}: not valid JSON ({err.msg}, line {err.lineno}); re-save the model (model.save_pretrained(dir))."
        ) from None
    if not isinstance(config, dict):
        raise UserInputError(
            f"{path}: expected a JSON object, got a {type(config).__name__}; re-save the model "
            "(model.save_pretrained(dir))."
        )
    fix = "correct config.json, or re-save the model (model.save_pretrained(dir))"
    for key in _POSITIVE_INTS:
        if key in config and not (config[key] is None and key in _NULLABLE):
            value = config[key]
            if not (_int(value) and value > 0):
                raise UserInputError(f"{path}: {key} must be a positive integer, got {value!r}; {fix}.")
    for key in _NUMBERS:
        value = config.get(key)
        if key in config and not (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
        ):
            raise UserInputError(f"{path}: {key} must be a non-negative number, got {value!r}; {fix}.")
    for key in _TOKEN_IDS:
        value = config.get(key)
        values = value if isinstance(value, list) else [value]
        if value is not None and not all(_int(v) and v >= 0 for v in values):
            raise UserInputError(f"{path}: {key} must be a token id (an integer >= 0) or null, got {value!r}; {fix}.")
    if "tie_word_embeddings" in config and not isinstance(config["tie_word_embeddings"], bool):
        raise UserInputError(
            f"{path}: tie_word_embeddings must be true or false, got {config['tie_word_embeddings']!r}; {fix}."
        )
    architectures = config.get("architectures")
    if architectures is not None and not (
        isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)
    ):
        raise UserInputError(
            f'{path}: architectures must be a list of class names (e.g. ["BertForMaskedLM"]), got '
            f"{architectures!r}; {fix}."
        )
    if "model_type" in config and not isinstance(config["model_type"], str):
        raise UserInputError(f"{path}: model_type must be a string, got {config['model_type']!r}; {fix}.")
    return config


def architecture_difference(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """How two ``config.json`` dicts describe different architectures (model type, shape fields other than the label
    count), in words, or None when they describe the same one."""
    if a.get("model_type") != b.get("model_type"):
        return f"model_type {a.get('model_type')!r} vs {b.get('model_type')!r}"
    for key in _POSITIVE_INTS:
        if key != "num_labels" and a.get(key) != b.get(key):
            return f"{key} {a.get(key)!r} vs {b.get(key)!r}"
    return None


# -- the weights: whole safetensors files, their headers ---------------------------------------------

_SAFETENSORS_HEADER_MAX = 100 * 1024 * 1024  # the safetensors reader's own limit on its JSON header
#: safetensors dtype name -> bytes per element (the format's list).
_ITEMSIZE = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
}


@dataclass(frozen=True)
class TensorHeader:
    """One tensor of a safetensors file as its header describes it (nothing read but the header)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: Path
    begin: int  # absolute byte offset of the tensor's data in ``file``
    end: int


def _read_header(path: Path) -> tuple[dict[str, Any] | None, int, str | None]:
    """(header, its length, problem): why ``path`` is not a whole safetensors file (None: it is), from its header
    alone (no torch).

    The format (https://github.com/huggingface/safetensors): an 8-byte little-endian length N, N bytes of
    JSON mapping each tensor to its dtype, shape and ``data_offsets`` [begin, end) into the data that
    follows; the data ends where the last tensor does. A truncated copy, random bytes or a pickle renamed
    ``.safetensors`` fails one of these checks.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                return None, 0, f"{size} bytes, shorter than a safetensors header"
            length = int.from_bytes(head, "little")
            if not 2 <= length <= min(size - 8, _SAFETENSORS_HEADER_MAX):
                return None, 0, f"its header length {length} does not fit the file's {size} bytes"
            header = json.loads(handle.read(length).decode("utf-8"))
    except OSError as err:
        return None, 0, f"unreadable: {err.strerror or err}"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, 0, "its header is not safetensors JSON"
    if not isinstance(header, dict):
        return None, 0, "its header is not a JSON object"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_int(o) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]
        ):
            return None, 0, f"tensor {name!r} has no valid data_offsets"
        shape = entry.get("shape")
        if not isinstance(shape, list) or not all(_int(d) and d >= 0 for d in shape):
            return None, 0, f"tensor {name!r} has no valid shape"
        itemsize = _ITEMSIZE.get(entry.get("dtype"))
        if itemsize is not None and offsets[1] - offsets[0] != itemsize * math.prod(shape):
            return (
                None,
                0,
                f"tensor {name!r} holds {offsets[1] - offsets[0]} bytes, its shape {shape} needs "
                f"{itemsize * math.prod(shape)}",
            )
        end = max(end, offsets[1])
    if 8 + length + end != size:
        return None, 0, f"its tensors need {8 + length + end} bytes, the file has {size} (truncated or padded)"
    return header, length, None


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (None: it is), from its header alone."""
    return _read_header(path)[2]


def check_weights(model_dir: str | os.PathLike[str], *, option: str = "--model") -> list[Path]:
    """The safetensors weight files of a Hugging Face directory, each checked whole (torch-free).

    Trainers and the attacks load weights only after this check, so a pickle checkpoint (unpickling runs
    arbitrary code), a truncated or random-bytes ``model.safetensors`` or a shard missing from
    ``model.safetensors.index.json`` is the one-line "not a safetensors model directory" error naming the
    file, never torch's or the safetensors reader's own message.

    Raises:
        UserInputError: naming ``option``, the directory and the file at fault.
    """
    model_dir = Path(model_dir)
    fix = "pass a Hugging Face model directory saved with model.save_pretrained(dir, safe_serialization=True)"
    if (model_dir / WEIGHTS).is_file():
        files = [model_dir / WEIGHTS]
    elif (model_dir / WEIGHTS_INDEX).is_file():
        index_path = model_dir / WEIGHTS_INDEX
        try:
            index = json.loads(index_path.read_text(encoding="utf-8"))
            shards = sorted({str(v) for v in index["weight_map"].values()})
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise UserInputError(
                f"{option} {model_dir} is not a safetensors model directory ({index_path.name} has no "
                f"weight_map); {fix}."
            ) from None
        files = [model_dir / shard for shard in shards]
        missing = [f for f in files if not f.is_file() or f.parent != model_dir]
        if not shards or missing:
            raise UserInputError(
                f"{option} {model_dir} is not a safetensors model directory ({index_path.name} names "
                f"{missing[0].name if missing else 'no shard'}, which is not there); {fix}."
            )
    else:
        pickled = [name for name in PICKLE_WEIGHTS if (model_dir / name).is_file()]
        if pickled:
            raise UserInputError(
                f"{option} {model_dir} is not a safetensors model directory: it holds only {pickled[0]} (a pickle "
                f"checkpoint, which can run arbitrary code when loaded); re-save it as safetensors: "
                f"model.save_pretrained(dir, safe_serialization=True)."
            )
        raise UserInputError(f"{option} {model_dir} is not a safetensors model directory (no {WEIGHTS}); {fix}.")
    for path in files:
        problem = _safetensors_problem(path)
        if problem is not None:
            raise UserInputError(
                f"{option} {model_dir} is not a safetensors model directory: {path} is not a whole "
                f"safetensors file ({problem}); {fix}."
            )
    return files


def read_tensor_headers(files: list[Path]) -> dict[str, TensorHeader]:
    """Every tensor of the (already checked) weight files, by name, from their headers."""
    tensors: dict[str, TensorHeader] = {}
    for path in files:
        header, length, _ = _read_header(path)
        for name, entry in (header or {}).items():
            if name == "__metadata__":
                continue
            begin, end = entry["data_offsets"]
            tensors[name] = TensorHeader(
                name=name,
                dtype=str(entry.get("dtype")),
                shape=tuple(entry["shape"]),
                file=path,
                begin=8 + length + begin,
                end=8 + length + end,
            )
    return tensors


# -- the tokenizer -----------------------------------------------------------------------------------


def tokenizer_size(model_dir: str | os.PathLike[str], *, where: str) -> int | None:
    """The number of token ids the directory's tokenizer can emit (its largest id + 1): ``tokenizer.json``'s
    vocabulary and added tokens, else ``vocab.txt``'s lines; None when it has neither (torch-free).

    Raises:
        UserInputError: a ``tokenizer.json`` that is not a JSON object.
    """
    model_dir = Path(model_dir)
    path = model_dir / "tokenizer.json"
    if path.is_file():
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise UserInputError(
                f"{where}: {path.name} is not a tokenizers file ({type(err).__name__}); save the "
                "model's tokenizer there (tokenizer.save_pretrained(dir))."
            ) from None
        if not isinstance(obj, dict):
            raise UserInputError(
                f"{where}: {path.name} is not a tokenizers file (not a JSON object); save the "
                "model's tokenizer there (tokenizer.save_pretrained(dir))."
            )
        vocab = (obj.get("model") or {}).get("vocab") if isinstance(obj.get("model"), dict) else None
        ids: list[int] = []
        if isinstance(vocab, dict):  # WordPiece, BPE, WordLevel: token -> id
            ids.extend(v for v in vocab.values() if _int(v))
        elif isinstance(vocab, list):  # Unigram: [piece, score] in id order
            ids.append(len(vocab) - 1)
        ids.extend(t["id"] for t in obj.get("added_tokens") or () if isinstance(t, dict) and _int(t.get("id")))
        return max(ids) + 1 if ids else None
    vocab_txt = model_dir / "vocab.txt"
    if vocab_txt.is_file():
        with open(vocab_txt, encoding="utf-8", errors="replace") as handle:
            return sum(1 for _ in handle)
    return None


# -- what the architecture needs ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ExpectedTensors:
    """The tensors a loader reads for one ``config.json``: the architecture's side of the comparison.

    Attributes:
        architecture: the class that will hold them, for messages (``GPT2LMHeadModel``).
        required: every tensor the loader fills from the file, with its shape; one the file lacks would be
            left at a random init.
        optional: tensors the file may hold or not (a tied LM head, a bias tied to another, buffers the model
            recomputes): shape (checked when present) or None (any).
        ignored: regular expressions (``re.search``) of file tensors the loader drops on purpose (the pooler and
            next-sentence head of a BERT pre-training checkpoint loaded as a masked LM, old attention masks).
        prefix: the base model's attribute (``bert``, ``transformer``): file names may lack it or carry it (a
            checkpoint of the bare base model), as the loader maps either way.
        fallbacks: a required name -> a file name the loader reads in its place when it is absent.
        embedding: the input embedding's name (its rows are the vocabulary), or None.
        exhaustive: False when the loader renames the checkpoint's tensors in ways not modelled here (transformers'
            conversion mappings of some architectures): only shapes of matching names are then compared.
    """

    architecture: str
    required: Mapping[str, tuple[int, ...]]
    optional: Mapping[str, tuple[int, ...] | None] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    prefix: str = ""
    fallbacks: Mapping[str, str] = field(default_factory=dict)
    embedding: str | None = None
    exhaustive: bool = True


#: A loader's side: (model directory, its config.json) -> what it reads, or None when it cannot say.
Layout = Callable[[Path, dict[str, Any]], "ExpectedTensors | None"]

#: Old checkpoint names the loaders still read (transformers' and jax-bert's "legacy" renames).
_LEGACY = (("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias"))


def _canonical(name: str, expected: ExpectedTensors) -> str:
    """The architecture's name of a file tensor: legacy LayerNorm names renamed, the base model prefix added or
    dropped as the loader would."""
    for old, new in _LEGACY:
        name = name.replace(old, new)
    known = expected.required.keys() | expected.optional.keys()
    if name in known or not expected.prefix:
        return name
    if f"{expected.prefix}.{name}" in known:
        return f"{expected.prefix}.{name}"
    if name.startswith(expected.prefix + ".") and name[len(expected.prefix) + 1 :] in known:
        return name[len(expected.prefix) + 1 :]
    return name


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _names(names: list[str], limit: int = 3) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def compare_tensors(found: Mapping[str, tuple[int, ...]], expected: ExpectedTensors, *, where: str) -> None:
    """Refuse weights that do not fit the architecture: a tensor of another shape, a required one the file lacks
    (the loader would leave it random), one the architecture has no place for (the file is another model's).

    ``found`` maps the file's tensor names to their shapes. The one rule of every loader's check (the model
    directory check of the attacks and trainers, and jax-bert's reader).

    Raises:
        UserInputError: one line naming ``where``, the tensors and what to do.
    """
    by_name = {_canonical(name, expected): tuple(shape) for name, shape in found.items()}
    for name, shape in by_name.items():
        want = expected.required.get(name, expected.optional.get(name))
        if want is not None and tuple(want) != shape:
            raise UserInputError(
                f"{where}: tensor {name} has shape {list(shape)} in the weights, but config.json's "
                f"{expected.architecture} needs {list(want)}: config.json and the weights are not of "
                f"one model; {RESAVE}."
            )
    if not expected.exhaustive:
        return
    missing = sorted(n for n in expected.required if n not in by_name and expected.fallbacks.get(n) not in by_name)
    ignored = re.compile("|".join(f"(?:{p})" for p in expected.ignored)) if expected.ignored else None
    known = expected.required.keys() | expected.optional.keys() | set(expected.fallbacks.values())
    unexpected = sorted(n for n in by_name if n not in known and not (ignored and ignored.search(n)))
    if not missing and not unexpected:
        return
    parts = []
    if missing:
        parts.append(
            f"{len(missing)} of the {len(expected.required)} tensors it needs "
            f"{'is' if len(missing) == 1 else 'are'} missing ({_names(missing)}) and would start at random values"
        )
    if unexpected:
        parts.append(
            f"{_count(len(unexpected), 'tensor')} of the weights {'has' if len(unexpected) == 1 else 'have'} "
            f"no place in it ({_names(unexpected)})"
        )
    raise UserInputError(
        f"{where}: the weights do not fit config.json's {expected.architecture}: {'; '.join(parts)}. "
        f"config.json and the weights are not of one model; {RESAVE}."
    )


# -- finite values -----------------------------------------------------------------------------------

_FLOATS = {"F64": np.float64, "F32": np.float32, "F16": np.float16}
_CHUNK = 1 << 24  # elements per read: bounds the temporary arrays on a large model


def _nonfinite(tensor: TensorHeader) -> tuple[int, int]:
    """(NaN count, infinity count) of one floating-point tensor, read through a memory map in chunks."""
    size = tensor.end - tensor.begin
    if size == 0 or (tensor.dtype not in _FLOATS and tensor.dtype != "BF16"):
        return 0, 0
    raw = np.memmap(tensor.file, dtype=np.uint8, mode="r", offset=tensor.begin, shape=(size,))
    nan = inf = 0
    try:
        if tensor.dtype == "BF16":  # no numpy dtype: the exponent bits all set is inf (mantissa 0) or NaN
            bits = raw.view(np.uint16)
            for start in range(0, bits.size, _CHUNK):
                chunk = bits[start : start + _CHUNK]
                special = (chunk & 0x7F80) == 0x7F80
                mantissa = (chunk & 0x007F) != 0
                nan += int(np.count_nonzero(special & mantissa))
                inf += int(np.count_nonzero(special & ~mantissa))
        else:
            values = raw.view(_FLOATS[tensor.dtype])
            for start in range(0, values.size, _CHUNK):
                chunk = values[start : start + _CHUNK]
                nan += int(np.count_nonzero(np.isnan(chunk)))
                inf += int(np.count_nonzero(np.isinf(chunk)))
    finally:
        del raw
    return nan, inf


def _check_finite(tensors: Mapping[str, TensorHeader], *, where: str) -> None:
    bad = []
    for name in sorted(tensors):
        nan, inf = _nonfinite(tensors[name])
        if nan or inf:
            bad.append((name, nan, inf))
    if bad:
        name, nan, inf = bad[0]
        what = " and ".join(x for x in (f"{nan} NaN" if nan else "", f"{inf} infinite" if inf else "") if x)
        others = f" ({_count(len(bad) - 1, 'more tensor')} likewise)" if len(bad) > 1 else ""
        raise UserInputError(
            f"{where}: tensor {name} holds {what} value{'' if nan + inf == 1 else 's'}{others}: every score and gradient of this "
            "model would be NaN (a diverged or damaged training run); pass a model whose weights are "
            "finite (an earlier checkpoint, or retrain with a lower learning rate)."
        )


# -- the check ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelDirCheck:
    """What the check read of a directory that passed it.

    Attributes:
        model_dir: the directory.
        config: ``config.json``.
        tensors: each weight tensor's header, by name.
        tokenizer_size: token ids the tokenizer can emit (largest id + 1), None without a tokenizer file.
        embedding: (name, rows) of the input embedding table, None when it could not be told.
        layout: the architecture's tensors the weights were compared with (None: no layout was given or it could
            not say).
    """

    model_dir: Path
    config: dict[str, Any]
    tensors: Mapping[str, TensorHeader]
    tokenizer_size: int | None
    embedding: tuple[str, int] | None
    layout: ExpectedTensors | None


#: Input-embedding names of the common architectures, for a check without a layout (torch-free).
_EMBEDDING_SUFFIXES = (
    "word_embeddings.weight",
    "wte.weight",
    "embed_tokens.weight",
    "embed_in.weight",
    "tok_embeddings.weight",
    "shared.weight",
)


def _embedding(tensors: Mapping[str, TensorHeader], layout: ExpectedTensors | None) -> tuple[str, int] | None:
    if layout is not None and layout.embedding is not None:
        for name, header in tensors.items():
            if _canonical(name, layout) == layout.embedding and len(header.shape) == 2:
                return name, header.shape[0]
        return None
    for suffix in _EMBEDDING_SUFFIXES:
        for name in sorted(tensors):
            if name.endswith(suffix) and len(tensors[name].shape) == 2:
                return name, tensors[name].shape[0]
    return None


def check_model_dir(
    model_dir: str | os.PathLike[str], *, where: str, layout: Layout | None = None, option: str | None = None
) -> ModelDirCheck:
    """Check a Hugging Face model directory once, up front (see the module docstring for every case).

    Args:
        model_dir: the directory holding ``config.json``, safetensors weights and the tokenizer.
        where: how errors name it (``"--init-from runs/public"``, ``"--model my-model"``).
        layout: the loader's expectation of the weights for a config (:data:`Layout`); None: the torch-free
            checks only (the vocabulary against the embedding table, finiteness).
        option: the option alone, for the "not a safetensors model directory" errors (default: ``where``'s first
            word).

    Returns:
        What was read (:class:`ModelDirCheck`).

    Raises:
        UserInputError: one line naming the file, tensor or field, and what to do.
    """
    model_dir = Path(model_dir)
    config = read_config(model_dir, where=where)
    files = check_weights(model_dir, option=option or where.split(" ", 1)[0])
    tensors = read_tensor_headers(files)
    size = tokenizer_size(model_dir, where=where)
    expected = layout(model_dir, config) if layout is not None else None
    embedding = _embedding(tensors, expected)
    vocab = config.get("vocab_size")
    if embedding is not None and _int(vocab) and vocab != embedding[1]:
        raise UserInputError(
            f"{model_dir / CONFIG}: vocab_size {vocab} disagrees with the weights' embedding table "
            f"({embedding[0]} has {embedding[1]} rows): config.json and the weights are not of one "
            f"model; {RESAVE}."
        )
    if expected is not None:
        compare_tensors({name: t.shape for name, t in tensors.items()}, expected, where=where)
    rows = embedding[1] if embedding is not None else (vocab if _int(vocab) else None)
    if size is not None and rows is not None and size > rows:
        table = (
            f"the embedding table ({embedding[0]}) has {rows} rows"
            if embedding
            else f"config.json's vocab_size is {rows}"
        )
        raise UserInputError(
            f"{where}: its tokenizer has {size} tokens but {table}: token ids {rows}..{size - 1} would "
            "index past it. Use the tokenizer the model was trained with, or resize the embeddings "
            "(model.resize_token_embeddings(len(tokenizer))) and save both again."
        )
    _check_finite(tensors, where=where)
    return ModelDirCheck(
        model_dir=model_dir, config=config, tensors=tensors, tokenizer_size=size, embedding=embedding, layout=expected
    )
