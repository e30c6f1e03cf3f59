"""A model directory's architecture as transformers builds it: the tensors it reads, and a fresh copy.

:func:`transformers_layout` is the loader's side of the one model directory check
(:func:`dpaudit.files.model_dirs.check_model_dir`) for everything that loads a directory with transformers (the
attacks' scorer, the torch trainers' ``--init-from``): the class ``config.json`` names, built on the meta
device (no memory, no init), says which tensors ``from_pretrained`` would fill and with what shapes. Tensors
it ties to another one (a tied LM head, the decoder bias tied to the head's bias), buffers it recomputes
(position ids, rotary frequencies) and the names it drops on purpose (``_keys_to_ignore_on_load_unexpected``,
a BERT pre-training checkpoint's pooler and next-sentence head when it is loaded as a masked LM) may be
absent or present; every other difference is refused before the real load, which would leave a missing
tensor at a random init.

:func:`write_fresh_start` writes a directory with the same ``config.json`` and tokenizer and fresh weights (a
seeded random init): the start of shadow and reference models of a model trained elsewhere, which then have
its tokenizer and architecture without any of its trained weights (docs/architecture.md, "Shadow and
reference models").

torch and transformers are imported inside the functions only.
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpaudit.common.errors import UserInputError
from dpaudit.files.model_dirs import CONFIG, ExpectedTensors, architecture_kind

#: File tensors transformers drops on purpose beyond a class's own ignore list: the pooler and next-sentence head of
#: a BERT pre-training checkpoint (bert-base-uncased's own files) loaded as a masked LM; jax-bert drops the same.
PRETRAINING_LEFTOVERS = (r"(^|\.)pooler\.", r"(^|\.)cls\.seq_relationship\.")
#: Buffers that older transformers versions saved and newer ones recompute.
OLD_BUFFERS = (r"(^|\.)position_ids$", r"rotary_emb\.inv_freq$", r"(^|\.)attn\.masked_bias$")
#: Tokenizer files a fresh start copies from the model it imitates.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "merges.txt",
    "vocab.json",
    "added_tokens.json",
)


@contextmanager
def _quiet_transformers() -> Any:
    """transformers' own warnings off while a skeleton is built (its config warnings would repeat each load's)."""
    import transformers

    logging = transformers.utils.logging
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _model_class(config: dict[str, Any]) -> tuple[str, Any] | None:
    """(name, class) of the first ``architectures`` entry transformers has, or None."""
    import transformers

    for name in config.get("architectures") or ():
        cls = getattr(transformers, str(name), None)
        if isinstance(cls, type):
            return str(name), cls
    return None


def hf_config(model_dir: Path) -> Any:
    """transformers' config of ``model_dir``; its validation errors as one line naming ``config.json``."""
    import transformers

    try:
        with _quiet_transformers():
            return transformers.AutoConfig.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as err:  # noqa: BLE001 - transformers raises ValueError, TypeError, its own validation errors
        raise UserInputError(
            f"{model_dir / CONFIG}: transformers cannot read it ({_first_line(err)}); correct "
            "config.json, or re-save the model (model.save_pretrained(dir))."
        ) from None


def _skeleton(model_dir: Path, cls: Any, config: Any) -> Any:
    """The model of ``config`` on the meta device: every module and tensor shape, no memory, no init."""
    import torch

    try:
        with _quiet_transformers(), torch.device("meta"):
            return cls(config)
    except Exception as err:  # noqa: BLE001 - a config the class cannot build (heads that do not divide the width)
        raise UserInputError(
            f"{model_dir / CONFIG}: transformers cannot build {cls.__name__} from it "
            f"({_first_line(err)}); correct config.json, or re-save the model "
            "(model.save_pretrained(dir))."
        ) from None


def _tied_names(model: Any) -> set[str]:
    """Parameters that are another one (tied): transformers 5's map, 4's list, and shared objects."""
    tied = set(dict(getattr(model, "all_tied_weights_keys", None) or {}))
    if not tied and getattr(model.config, "tie_word_embeddings", True):
        listed = getattr(model, "_tied_weights_keys", None) or ()
        tied |= set(listed.keys() if isinstance(listed, dict) else listed)
    seen: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            tied.add(name)
        seen.setdefault(id(param), name)
    return tied


def _patterns(value: Any) -> tuple[str, ...]:
    return tuple(str(p) for p in (value or ()))


def _exhaustive(model: Any) -> bool:
    """False when transformers renames this architecture's checkpoint tensors itself (a conversion mapping of its
    class or model type): the names on file then differ from the module tree by design."""
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping
    except ImportError:  # transformers 4: no conversion mappings
        return True
    names = {type(model).__name__, getattr(model.config, "model_type", None)}
    return not any(name and get_checkpoint_conversion_mapping(name) is not None for name in names)


def transformers_layout(model_dir: Path, config: dict[str, Any]) -> ExpectedTensors | None:
    """The tensors ``from_pretrained`` fills for ``config.json`` (:data:`dpaudit.files.model_dirs.Layout`), from the class it
    names built on the meta device; None when transformers is not installed or has no such class (the torch-free
    checks still run).

    Raises:
        UserInputError: a ``config.json`` that transformers refuses (a field of the wrong type) or cannot build.
    """
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return None
    found = _model_class(config)
    if found is None:
        return None
    name, cls = found
    model = _skeleton(model_dir, cls, hf_config(model_dir))
    tied = _tied_names(model)
    state = {key: tuple(tensor.shape) for key, tensor in model.state_dict().items()}
    optional_patterns = _patterns(getattr(model, "_keys_to_ignore_on_load_missing", None))
    may_miss = re.compile("|".join(f"(?:{p})" for p in optional_patterns)) if optional_patterns else None
    required = {k: s for k, s in state.items() if k not in tied and not (may_miss and may_miss.search(k))}
    optional: dict[str, tuple[int, ...] | None] = {k: s for k, s in state.items() if k not in required}
    optional.update({k: None for k, _ in model.named_buffers() if k not in state})
    embedding = None
    try:
        table = model.get_input_embeddings().weight
        embedding = next((k for k, p in model.named_parameters() if p is table), None)
    except (AttributeError, NotImplementedError):
        pass
    ignored = (
        *_patterns(getattr(model, "_keys_to_ignore_on_load_unexpected", None)),
        *OLD_BUFFERS,
        *(PRETRAINING_LEFTOVERS if architecture_kind(name) == "masked-lm" else ()),
    )
    return ExpectedTensors(
        architecture=name,
        required=required,
        optional=optional,
        ignored=ignored,
        prefix=str(getattr(model, "base_model_prefix", "") or ""),
        embedding=embedding,
        exhaustive=_exhaustive(model),
    )


def write_fresh_start(model_dir: Path, out_dir: Path, *, seed: int) -> Path:
    """A directory with ``model_dir``'s ``config.json`` and tokenizer files and fresh weights (the class's own random
    init, seeded by ``seed``), written under a temporary name and renamed into place; returns ``out_dir``.

    The start of a model trained like ``model_dir`` when only its architecture and tokenizer are known (a model
    trained elsewhere): none of its trained weights enter, so a shadow trained from it learns only its own rows.
    """
    import torch

    from dpaudit.files.run_dirs import staged_directory

    model_dir, out_dir = Path(model_dir), Path(out_dir)
    config = hf_config(model_dir)
    found = _model_class({"architectures": list(getattr(config, "architectures", None) or [])})
    if found is None:
        raise UserInputError(
            f"{model_dir / CONFIG}: architectures names no class transformers has; shadows of this "
            "model cannot be built with its architecture."
        )
    _, cls = found
    torch.manual_seed(seed)
    with _quiet_transformers():
        model = cls(config).eval()
    with staged_directory(out_dir, overwrite=True, option="fresh start", only_own=False) as staging:
        model.save_pretrained(str(staging), safe_serialization=True)
        for name in TOKENIZER_FILES:
            if (model_dir / name).is_file():
                shutil.copyfile(model_dir / name, staging / name)
        for path in staging.iterdir():  # save_pretrained may create private (0600) files
            os.chmod(path, 0o644)
    return out_dir
