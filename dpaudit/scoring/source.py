"""Where a model comes from: a train run directory or a bare Hugging Face directory, checked.

Everything here is torch-free, so bad input (no weights, a pickle-only checkpoint, no tokenizer, a
damaged run directory) is refused with a one-line :class:`~dpaudit.errors.UserInputError` before
torch or transformers is imported. A train run directory (``manifest.json`` with schema
``dpaudit.train/*``) is verified against its manifest; its ``privacy.json`` is read for the audit,
through :func:`read_privacy_record` (the one reader of that file outside the trainers).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dpaudit.errors import UserInputError
from dpaudit.rundir import MANIFEST_NAME, verify_run_dir
from dpaudit.training.privacy_record import read_privacy_record  # the one file reader, re-exported

if TYPE_CHECKING:
    from dpaudit.training.privacy_record import PrivacyRecord

ModelKind = Literal["masked-lm", "classifier", "causal-lm"]
MASKED_LM: ModelKind = "masked-lm"
CLASSIFIER: ModelKind = "classifier"
#: A GPT-style causal LM (``*ForCausalLM``, GPT-2's ``GPT2LMHeadModel``): the Secret Sharer's own setting.
CAUSAL_LM: ModelKind = "causal-lm"
TRAIN_SCHEMA_PREFIX = "dpaudit.train/"
WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")


@dataclass(frozen=True, kw_only=True)
class ModelSource:
    """A model directory that passed the checks, and what the audit needs to know about it.

    Attributes:
        path: what the user passed (run directory or model directory).
        model_dir: the Hugging Face directory holding config, weights and tokenizer.
        kind: ``"masked-lm"`` or ``"classifier"``, from ``config.json``'s ``architectures``.
        architecture: e.g. ``"BertForMaskedLM"``.
        privacy: the run's ``privacy.json``, typed (None for a bare model directory).
        manifest: the train run's verified manifest (None for a bare model directory).
        files: model file name (relative to ``path``) -> sha256, for the attack manifest.
        labels: a classifier's labels in class-id order (``config.json``'s ``id2label``), else None. Attacks
            encode the data's labels with these, never with the union of the data's splits.
        unknown_label: the ``--unknown-label`` the train run mapped labels outside ``labels`` to (from its
            manifest's config), else None.
    """

    path: Path
    model_dir: Path
    kind: ModelKind
    architecture: str
    privacy: PrivacyRecord | None
    manifest: dict[str, Any] | None
    files: dict[str, str]
    labels: tuple[str, ...] | None = None
    unknown_label: str | None = None

    def label_set(self) -> Any:
        """The model's :class:`dpaudit.inject_run.LabelSet` (its unknown-label mapping included), or None for a
        masked LM: what the attacks encode the data's labels with."""
        from dpaudit.inject_run import LabelSet

        if self.labels is None:
            return None
        unknown = self.unknown_label if self.unknown_label in self.labels else None
        return LabelSet(names=self.labels, source=f"{self.model_dir / 'config.json'} (id2label)", unknown=unknown)


def _id2label(config: dict[str, Any], config_path: Path) -> tuple[str, ...]:
    """A classifier's ``id2label`` as a tuple in class-id order (ids must be 0..n-1, names distinct)."""
    raw = config.get("id2label")
    try:
        pairs = sorted((int(k), str(v)) for k, v in raw.items())
    except (AttributeError, TypeError, ValueError):
        pairs = None
    if not pairs or [i for i, _ in pairs] != list(range(len(pairs))) or len({v for _, v in pairs}) != len(pairs):
        raise UserInputError(f"{config_path}: id2label must map the class ids 0..n-1 to distinct label names, got "
                             f"{raw!r}; re-save the model with its labels.")
    return tuple(v for _, v in pairs)


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


_SAFETENSORS_HEADER_MAX = 100 * 1024 * 1024  # the safetensors reader's own limit on its JSON header


def _safetensors_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole safetensors file (None: it is), from its header alone (no torch).

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
                return f"{size} bytes, shorter than a safetensors header"
            length = int.from_bytes(head, "little")
            if not 2 <= length <= min(size - 8, _SAFETENSORS_HEADER_MAX):
                return f"its header length {length} does not fit the file's {size} bytes"
            header = json.loads(handle.read(length).decode("utf-8"))
    except OSError as err:
        return f"unreadable: {err.strerror or err}"
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "its header is not safetensors JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            return f"tensor {name!r} has no valid data_offsets"
        end = max(end, offsets[1])
    if 8 + length + end != size:
        return f"its tensors need {8 + length + end} bytes, the file has {size} (truncated or padded)"
    return None


def check_weights(model_dir: str | os.PathLike[str], *, option: str = "--model") -> list[Path]:
    """The safetensors weight files of a Hugging Face directory, each checked whole (torch-free).

    Trainers (``--model``) and the attacks load weights only through this check, so a pickle
    checkpoint (unpickling runs arbitrary code), a truncated or random-bytes ``model.safetensors`` or a
    shard missing from ``model.safetensors.index.json`` is the one-line "not a safetensors model
    directory" error naming the file, never torch's or the safetensors reader's own message.

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
            raise UserInputError(f"{option} {model_dir} is not a safetensors model directory ({index_path.name} has no "
                                 f"weight_map); {fix}.") from None
        files = [model_dir / shard for shard in shards]
        missing = [f for f in files if not f.is_file() or f.parent != model_dir]
        if not shards or missing:
            raise UserInputError(f"{option} {model_dir} is not a safetensors model directory ({index_path.name} names "
                                 f"{missing[0].name if missing else 'no shard'}, which is not there); {fix}.")
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
            raise UserInputError(f"{option} {model_dir} is not a safetensors model directory: {path} is not a whole "
                                 f"safetensors file ({problem}); {fix}.")
    return files


def resolve_model(path: str | os.PathLike[str], *, option: str = "--model") -> ModelSource:
    """Check a model path and say what it is, without importing torch.

    Raises:
        UserInputError: naming the path and what is missing (weights, tokenizer, config), or a
            pickle-only checkpoint (never loaded: unpickling runs arbitrary code).
    """
    path = Path(path)
    if not path.is_dir():
        raise UserInputError(f"{option} {path} is not a directory; pass a train run directory or a Hugging Face model directory.")
    manifest = privacy = None
    model_dir = path
    files: dict[str, str] = {}
    if (path / MANIFEST_NAME).is_file():
        manifest = verify_run_dir(path, schema_prefix=TRAIN_SCHEMA_PREFIX)
        model_dir = path / "model"
        files = {name: digest for name, digest in manifest.get("outputs", {}).items()}
        privacy_path = path / "privacy.json"
        if privacy_path.is_file():
            privacy = read_privacy_record(privacy_path)
    if not model_dir.is_dir():
        raise UserInputError(f"{option} {path}: no model/ directory; the train run did not finish, rerun dpaudit train.")
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise UserInputError(f"{option} {model_dir} has no config.json; pass a Hugging Face model directory (save_pretrained).")
    check_weights(model_dir, option=option)
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        raise UserInputError(
            f"{option} {model_dir} has no tokenizer (tokenizer.json or vocab.txt); save the tokenizer into the model "
            "directory (tokenizer.save_pretrained(dir))."
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserInputError(f"{config_path}: not valid JSON ({err.msg}); re-save the model.") from None
    architectures = config.get("architectures") or []
    kinds = [(a, architecture_kind(a)) for a in architectures if architecture_kind(a) is not None]
    if not kinds:
        raise UserInputError(
            f"{config_path}: architectures {architectures!r} names no masked LM (*ForMaskedLM), sequence classifier "
            "(*ForSequenceClassification) or causal LM (*ForCausalLM, *LMHeadModel); dpaudit audits those model types."
        )
    architecture, kind = kinds[0]
    if manifest is None:
        from dpaudit.rundir import sha256_file

        files = {p.relative_to(path).as_posix(): sha256_file(p) for p in sorted(model_dir.rglob("*")) if p.is_file()}
    labels = _id2label(config, config_path) if kind == CLASSIFIER else None
    unknown = ((manifest or {}).get("config") or {}).get("unknown_label") if labels is not None else None
    return ModelSource(path=path, model_dir=model_dir, kind=kind, architecture=architecture, privacy=privacy,  # type: ignore[arg-type]
                       manifest=manifest, files=files, labels=labels,
                       unknown_label=unknown if isinstance(unknown, str) else None)
