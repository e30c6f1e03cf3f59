"""Where a model comes from: a train run directory or a bare Hugging Face directory, checked.

Bad input (no weights, a pickle-only checkpoint, no tokenizer, a damaged run directory) is refused with a
one-line :class:`~dpaudit.common.errors.UserInputError` before torch or transformers is imported; then the one
check of a model directory (:mod:`dpaudit.files.model_dirs`, with transformers' tensors for its config.json as the
layout) refuses weights that do not fit it. A train run directory (``manifest.json`` with schema
``dpaudit.train/*``) is verified against its manifest; its ``privacy.json`` is read for the audit,
through :func:`read_privacy_record` (the one reader of that file outside the trainers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpaudit.claim.record import read_privacy_record  # the one file reader, re-exported
from dpaudit.common.errors import UserInputError
from dpaudit.files.model_dirs import (  # noqa: F401 - re-exported: the trainers and the scorer import them from here
    CAUSAL_LM,
    CLASSIFIER,
    MASKED_LM,
    PICKLE_WEIGHTS,
    TOKENIZER_FILES,
    WEIGHTS,
    WEIGHTS_INDEX,
    ModelKind,
    _safetensors_problem,
    architecture_kind,
    check_model_dir,
    check_weights,
    read_config,
)
from dpaudit.files.run_dirs import MANIFEST_NAME, verify_run_dir

if TYPE_CHECKING:
    from dpaudit.claim.record import PrivacyRecord

TRAIN_SCHEMA_PREFIX = "dpaudit.train/"


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
        """The model's :class:`dpaudit.inject_dir.reader.LabelSet` (its unknown-label mapping included), or None for a
        masked LM: what the attacks encode the data's labels with."""
        from dpaudit.inject_dir.reader import LabelSet

        if self.labels is None:
            return None
        unknown = self.unknown_label if self.unknown_label in self.labels else None
        return LabelSet(names=self.labels, source=f"{self.model_dir / 'config.json'} (id2label)", unknown=unknown)


def _id2label(config: dict[str, Any], config_path: Path) -> tuple[str, ...]:
    """A classifier's ``id2label`` as a tuple in class-id order (ids must be 0..n-1, names distinct)."""
    raw = config.get("id2label")
    try:
        pairs = sorted((int(k), str(v)) for k, v in raw.items()) if isinstance(raw, dict) else None  # JSON: a dict
    except (AttributeError, TypeError, ValueError):
        pairs = None
    if not pairs or [i for i, _ in pairs] != list(range(len(pairs))) or len({v for _, v in pairs}) != len(pairs):
        raise UserInputError(
            f"{config_path}: id2label must map the class ids 0..n-1 to distinct label names, got "
            f"{raw!r}; re-save the model with its labels."
        )
    return tuple(v for _, v in pairs)


def resolve_model(path: str | os.PathLike[str], *, option: str = "--model") -> ModelSource:
    """Check a model path and say what it is.

    The cheap checks (files, config.json, the architecture's kind) run before torch is imported; then the one model
    directory check (:func:`dpaudit.files.model_dirs.check_model_dir`) compares the weights with the tensors transformers
    builds for config.json on the meta device (no model is loaded), the tokenizer with the embedding table, and
    reads the weights once for NaN or infinite values.

    Raises:
        UserInputError: naming the path and what is missing (weights, tokenizer, config), or a
            pickle-only checkpoint (never loaded: unpickling runs arbitrary code), or weights that do not fit
            config.json, a tokenizer larger than the embedding table, non-finite weights.
    """
    path = Path(path)
    if not path.is_dir():
        raise UserInputError(
            f"{option} {path} is not a directory; pass a train run directory or a Hugging Face model directory."
        )
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
        raise UserInputError(
            f"{option} {path}: no model/ directory; the train run did not finish, rerun dpaudit train."
        )
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise UserInputError(
            f"{option} {model_dir} has no config.json; pass a Hugging Face model directory (save_pretrained)."
        )
    check_weights(model_dir, option=option)
    if not any((model_dir / name).is_file() for name in TOKENIZER_FILES):
        raise UserInputError(
            f"{option} {model_dir} has no tokenizer (tokenizer.json or vocab.txt); save the tokenizer into the model "
            "directory (tokenizer.save_pretrained(dir))."
        )
    config = read_config(model_dir, where=f"{option} {model_dir}")
    architectures = config.get("architectures") or []
    kinds = [(a, k) for a, k in ((a, architecture_kind(a)) for a in architectures) if k is not None]
    if not kinds:
        raise UserInputError(
            f"{config_path}: architectures {architectures!r} names no masked LM (*ForMaskedLM), sequence classifier "
            "(*ForSequenceClassification) or causal LM (*ForCausalLM, *LMHeadModel); dpaudit audits those model types."
        )
    architecture, kind = kinds[0]
    # The one up-front check of the directory (dpaudit.files.model_dirs): weights that fit config.json (transformers' own
    # tensors for it, built on the meta device), a tokenizer within the embedding table, finite values.
    from dpaudit.scoring.architecture import transformers_layout

    check_model_dir(model_dir, where=f"{option} {model_dir}", layout=transformers_layout, option=option)
    if manifest is None:
        from dpaudit.files.run_dirs import sha256_file

        files = {p.relative_to(path).as_posix(): sha256_file(p) for p in sorted(model_dir.rglob("*")) if p.is_file()}
    labels = _id2label(config, config_path) if kind == CLASSIFIER else None
    unknown = ((manifest or {}).get("config") or {}).get("unknown_label") if labels is not None else None
    return ModelSource(
        path=path,
        model_dir=model_dir,
        kind=kind,
        architecture=architecture,
        privacy=privacy,  # type: ignore[arg-type]
        manifest=manifest,
        files=files,
        labels=labels,
        unknown_label=unknown if isinstance(unknown, str) else None,
    )
