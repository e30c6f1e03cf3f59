"""The door into a model: ``load(path) -> Scorer``.

Attacks reach a model only through a :class:`~dpaudit.scoring.scorer.Scorer`, which hides torch
and transformers behind numpy arrays. Importing this package is cheap: torch and transformers are
imported by :func:`load`, after the directory passed the torch-free checks of
:mod:`dpaudit.scoring.source`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from dpaudit.scoring.source import (
    CAUSAL_LM,
    CLASSIFIER,
    MASKED_LM,
    ModelKind,
    ModelSource,
    resolve_model,
)

if TYPE_CHECKING:
    from dpaudit.scoring.scorer import ExampleFeatures, Scorer, VocabFill

__all__ = [
    "CAUSAL_LM",
    "CLASSIFIER",
    "MASKED_LM",
    "ExampleFeatures",
    "ModelKind",
    "ModelSource",
    "Scorer",
    "VocabFill",
    "load",
    "resolve_model",
]


def load(
    path: str | os.PathLike[str] | ModelSource,
    *,
    batch_size: int = 32,
    device: str | None = None,
    progress: bool = True,
) -> Scorer:
    """Load a train run directory (its ``model/``) or a bare Hugging Face model directory.

    Args:
        path: the directory, or a :class:`ModelSource` already checked by :func:`resolve_model`.
        batch_size: examples per forward pass.
        device: ``"cuda"``/``"cpu"``; default: the GPU when present.
        progress: show a progress bar on stderr.

    Raises:
        UserInputError: a directory without weights or tokenizer, a pickle-only checkpoint, a
            damaged run directory, or a model transformers cannot load.
    """
    from dpaudit.scoring.scorer import Scorer, build_scorer

    source = path if isinstance(path, ModelSource) else resolve_model(path)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
    scorer_class = Scorer
    if source.kind == CAUSAL_LM:  # its own module: it builds on Scorer, which cannot import it back
        from dpaudit.scoring.causal import CausalScorer

        scorer_class = CausalScorer
    return build_scorer(source, batch_size=batch_size, device=device, progress=progress, scorer_class=scorer_class)


def __getattr__(name: str):
    if name in ("Scorer", "ExampleFeatures", "VocabFill"):
        from dpaudit.scoring import scorer

        return getattr(scorer, name)
    raise AttributeError(f"module 'dpaudit.scoring' has no attribute {name!r}")
