"""Trivial baselines beside every held-out utility figure: the best constant prediction.

A DP model's held-out accuracy says little alone: a model that learned nothing still scores what
always predicting the most frequent token (masked LM) or the majority class (classifier) scores. Each
trainer computes that figure on exactly the positions and rows it evaluates, scored the way it scores
its model, and reports it beside the model's (``metrics.jsonl`` evaluation rows, the manifest summary,
``dpaudit train``'s output) under :data:`MLM_BASELINE_KEY` / :data:`CLASSIFY_BASELINE_KEY`.

A trainer evaluates the first ``--eval-examples`` rows of ``heldout.jsonl`` (512 by default), not all of them:
the evaluation rows and the summary also carry how many rows it evaluated and how many there were
(:data:`EVAL_ROWS_KEY`, :data:`HELDOUT_ROWS_KEY`), and every place that prints a held-out figure says so with
:func:`eval_rows_text` ("on 512 of 880 held-out rows").

The constant is the one most frequent among the evaluated ``heldout.jsonl`` targets themselves (not
among ``public.jsonl``'s tokens): the best any constant prediction can score there, so a model that
does not beat it has learned nothing usable. Framework-free (numpy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CLASSIFY_BASELINE_KEY",
    "CLASSIFY_BASELINE_RULE",
    "CLM_BASELINE_KEY",
    "CLM_BASELINE_RULE",
    "CLM_LOSS_BASELINE_KEY",
    "EVAL_ROWS_KEY",
    "HELDOUT_ROWS_KEY",
    "MLM_BASELINE_KEY",
    "MLM_BASELINE_RULE",
    "UTILITY_KINDS",
    "UtilityKind",
    "constant_prediction_accuracy",
    "eval_rows",
    "eval_rows_text",
    "majority_class_accuracy",
    "unigram_loss",
]

#: The key of the masked-LM baseline beside ``mlm_accuracy``.
MLM_BASELINE_KEY = "heldout_mlm_accuracy_baseline"
#: The key of the classifier baseline beside ``eval_accuracy``.
CLASSIFY_BASELINE_KEY = "heldout_accuracy_baseline"
MLM_BASELINE_RULE = (
    "always predicting the most frequent token among the masked heldout.jsonl positions that are "
    "evaluated (the best constant prediction there), scored like the model"
)
#: The causal-LM baselines beside ``next_token_accuracy`` and ``eval_loss`` (``--task clm``).
CLM_BASELINE_KEY = "heldout_next_token_accuracy_baseline"
CLM_LOSS_BASELINE_KEY = "heldout_next_token_loss_baseline"
CLM_BASELINE_RULE = (
    "always predicting the most frequent next token among the evaluated heldout.jsonl positions; the "
    "loss beside it is the unigram distribution of those tokens', scored like the model"
)
CLASSIFY_BASELINE_RULE = (
    "always predicting the majority class of the evaluated heldout.jsonl rows (the best constant prediction there)"
)


@dataclass(frozen=True, kw_only=True)
class UtilityKind:
    """A held-out utility figure as the trainers log it: its keys (newest first), its baseline's key, its words."""

    keys: tuple[str, ...]
    baseline_key: str
    name: str
    rule: str


#: The held-out figures and their trivial baselines, keyed as ``metrics.jsonl`` evaluation rows and the
#: train manifest's summary key them (the report and the demo's verdict read them through this table).
UTILITY_KINDS = (
    UtilityKind(
        keys=("heldout_mlm_accuracy", "mlm_accuracy"),
        baseline_key=MLM_BASELINE_KEY,
        name="held-out MLM accuracy",
        rule="always the most frequent token",
    ),
    UtilityKind(
        keys=("heldout_next_token_accuracy", "next_token_accuracy"),
        baseline_key=CLM_BASELINE_KEY,
        name="held-out next-token accuracy",
        rule="always the most frequent next token",
    ),
    UtilityKind(
        keys=("heldout_accuracy", "eval_accuracy"),
        baseline_key=CLASSIFY_BASELINE_KEY,
        name="held-out accuracy",
        rule="always the majority class",
    ),
)


#: The keys of an evaluation row (and summary) that say on how many held-out rows its figures stand: the rows
#: evaluated (the first ``--eval-examples``) and the rows ``heldout.jsonl`` had for it (with a label in the set,
#: for a classifier).
EVAL_ROWS_KEY = "heldout_rows_evaluated"
HELDOUT_ROWS_KEY = "heldout_rows"


def eval_rows(evaluated: int, available: int) -> dict[str, int]:
    """The evaluation row's record of its rows: ``evaluated`` of the ``available`` held-out rows."""
    return {EVAL_ROWS_KEY: int(evaluated), HELDOUT_ROWS_KEY: int(available)}


def eval_rows_text(row: Mapping[str, Any]) -> str | None:
    """``on 512 of 880 held-out rows`` for an evaluation row or summary; None when it does not record them (a
    run written before trainers logged them)."""
    evaluated, available = row.get(EVAL_ROWS_KEY), row.get(HELDOUT_ROWS_KEY)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (evaluated, available)):
        return None
    return f"on {evaluated:,} of {available:,} held-out rows"


def constant_prediction_accuracy(targets: Any, weights: Any, *, per_example: bool) -> float | None:
    """The accuracy of always predicting the most frequent target, scored as the model is.

    Args:
        targets: ``[rows, positions]`` integer target ids (any value where the weight is 0).
        weights: ``[rows, positions]`` weight of each position (1 a real prediction, 0 padding; a padding
            row is all 0).
        per_example: False: correct predictions over all predictions (jax-bert's ``mlm_accuracy``). True:
            each row's accuracy (over ``max(its predictions, 1)``) averaged over the rows (the torch
            trainers': every row counts, a row with no prediction as 0).

    Returns:
        The accuracy in [0, 1], or None when nothing is evaluated.
    """
    targets = np.asarray(targets, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    if targets.shape != weights.shape or targets.ndim != 2:
        raise ValueError(
            f"targets and weights must be [rows, positions] of one shape, got {targets.shape} and {weights.shape}."
        )
    if per_example:
        rows = targets.shape[0]
        if rows == 0:
            return None
        weights = weights / np.maximum(weights.sum(axis=1, keepdims=True), 1.0)
        total = float(rows)
    else:
        total = float(weights.sum())
        if total <= 0:
            return None
    used = weights > 0
    if not used.any():
        return 0.0
    counts = np.bincount(targets[used], weights=weights[used])
    return float(counts.max() / total)


def majority_class_accuracy(labels: Sequence[int] | np.ndarray) -> float | None:
    """The accuracy of always predicting the most frequent of ``labels`` (class ids >= 0); None when empty."""
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size == 0:
        return None
    return float(np.bincount(labels).max() / labels.size)


def unigram_loss(targets: Any, weights: Any) -> float | None:
    """The mean negative log-likelihood (nats) of the unigram distribution of the weighted targets, each
    row's mean over its positions averaged over the rows (as the torch trainers score a causal LM): the
    loss of the best context-free prediction there, beside the model's held-out loss. None when nothing
    is evaluated.
    """
    targets = np.asarray(targets, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.float64)
    if targets.shape != weights.shape or targets.ndim != 2:
        raise ValueError(
            f"targets and weights must be [rows, positions] of one shape, got {targets.shape} and {weights.shape}."
        )
    used = weights > 0
    if targets.shape[0] == 0 or not used.any():
        return None
    counts = np.bincount(targets[used], weights=weights[used])
    nll = np.zeros(targets.shape, dtype=np.float64)
    nll[used] = -np.log(counts[targets[used]] / counts.sum())
    per_row = (nll * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
    return float(per_row.mean())
