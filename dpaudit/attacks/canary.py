"""The canary attack: membership of the canaries with the score that fits their design.

Inserted canaries are members, never-inserted ones non-members; on coin-flip canaries
(``dpaudit inject --coin-flip``) the audit adds the one-run bounds of Steinke, Nasr & Jagielski (2023),
a proof about this one training run. ``dpaudit attack`` adds this attack to its default attacks when the
canaries are coin-flip ones. The score (higher = member) is the one that fits how the secrets were made
(:data:`SCORES`, by the secret space's kind in the inject manifest):

- ``new-tokens`` (after Panda et al. 2025): the masked pseudo-log-likelihood of the secret with each token
  normalized over the declared new tokens. Only a member's tokens were ever trained (as inputs and as
  targets), so the model predicts a member's token among the other canaries' tokens far better than a
  non-member's; normalizing over the candidates removes how likely "some new token" is in that place,
  which is the same for members and non-members.
- ``rare-tokens`` and ``phrases``: the masked pseudo-log-likelihood of the secret over the vocabulary.
- ``digits:N``, ``words:N``: exposure, the secret's exact rank among all |R| candidates (Carlini et al. 2019).

A causal LM (:data:`CAUSAL_SCORES`) masks nothing: it scores a canary by the log-likelihood of its secret given
its prefix, the Secret Sharer's own score (Carlini et al. 2019), for the designed canaries (``new-tokens``,
``rare-tokens``, ``phrases``), over the vocabulary; and by the same exposure as the exposure attack's
(:func:`dpaudit.attacks.exposure.causal_exposure_intervals`) for ``digits:N`` and ``words:N``. A never-inserted
new token was never a training target, so nothing raised its likelihood after the prefix, while a member's
was trained up. The one-run bounds are valid for any score fixed before the coins are seen (Steinke et al.
2023); the score only sets their power.

The score is fixed by the design before any model is seen: nothing is chosen on the scores audited.

References:
  Panda, Tang, Nasr, Choquette-Choo & Mittal 2025, "Privacy Auditing of Large Language Models".
  Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run".
  Salazar, Liang, Nguyen & Kirchhoff 2020, "Masked Language Model Scoring" (pseudo-log-likelihood).
  Carlini et al. 2019, "The Secret Sharer" (exposure).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome, BaseAttack
from dpaudit.attacks.exposure import ExposureConfig, causal_exposure_intervals
from dpaudit.attacks.mia import audit_tasks, canary_task
from dpaudit.attacks.results import RESULT_CLASSES
from dpaudit.common.errors import UserInputError
from dpaudit.scoring.source import CAUSAL_LM, MASKED_LM


def _declared_new_token_ids(context: AttackContext) -> list[int]:
    """The token ids of the inject manifest's declared new tokens; a one-line error when the model lacks any."""
    tokenizer, declared = context.scorer.tokenizer, list(context.data.new_tokens)
    if not declared:
        raise UserInputError(
            f"--data {context.data.path}: new-token canaries but the manifest declares no new_tokens; "
            "rerun dpaudit inject."
        )
    ids = tokenizer.convert_tokens_to_ids(declared)
    unknown = [t for t, i in zip(declared, ids) if i is None or i == tokenizer.unk_token_id]
    if unknown:
        raise UserInputError(
            f"--model {context.scorer.source.path}: its tokenizer lacks {len(unknown)} of the "
            f"{len(declared)} new tokens of --data (e.g. {unknown[0]!r}); it was not trained on this "
            "inject directory (trainers add the manifest's new_tokens to the vocabulary)."
        )
    return ids


def _new_token_pll(context: AttackContext) -> np.ndarray:
    """Pseudo-log-likelihood of each secret, each token normalized over the declared new tokens."""
    return context.scorer.pseudo_log_likelihoods(context.canaries, within=_declared_new_token_ids(context))


def _causal_new_token_ll(context: AttackContext) -> np.ndarray:
    """A causal LM's log-likelihood of each new-token secret given its prefix (the tokens checked first)."""
    _declared_new_token_ids(context)
    return _causal_ll(context)


def _causal_ll(context: AttackContext) -> np.ndarray:
    """A causal LM's log-likelihood of each secret given its prefix, over the vocabulary."""
    return context.scorer.secret_log_likelihoods(context.canaries)


def _causal_exposure(context: AttackContext) -> np.ndarray:
    """A causal LM's exposure of each secret (lower end), as the exposure attack computes it."""
    intervals, _skew, _note = causal_exposure_intervals(context)
    return np.asarray([i.exposure_low for i in intervals], dtype=np.float64)


def _vocab_pll(context: AttackContext) -> np.ndarray:
    """Pseudo-log-likelihood of each secret over the whole vocabulary."""
    return context.scorer.pseudo_log_likelihoods(context.canaries)


def _exposure(context: AttackContext) -> np.ndarray:
    """The lower end of each canary's exact exposure (ties counted against the canary)."""
    return np.asarray([i.exposure_low for i in context.exposure_intervals], dtype=np.float64)


#: Secret-space kind (the manifest's ``secret_space.kind``) -> (the score in words, how it is computed).
SCORES: dict[str, tuple[str, Callable[[AttackContext], np.ndarray]]] = {
    "new-tokens": (
        "masked pseudo-log-likelihood of the secret, each token normalized over the declared new tokens",
        _new_token_pll,
    ),
    "rare-tokens": ("masked pseudo-log-likelihood of the secret over the vocabulary", _vocab_pll),
    "phrases": ("masked pseudo-log-likelihood of the secret over the vocabulary", _vocab_pll),
    "digits": ("exposure (lower end): the secret's exact rank among all |R| candidates", _exposure),
    "words": ("exposure (lower end): the secret's exact rank among all |R| candidates", _exposure),
}

_CAUSAL_LL = "log-likelihood of the secret given its prefix (causal LM), over the vocabulary"
_CAUSAL_EXPOSURE = "exposure (lower end): the secret's rank among all |R| candidates given its prefix (causal LM)"
#: The same for a causal LM: nothing is masked, every secret is scored from its prefix.
CAUSAL_SCORES: dict[str, tuple[str, Callable[[AttackContext], np.ndarray]]] = {
    "new-tokens": (_CAUSAL_LL, _causal_new_token_ll),
    "rare-tokens": (_CAUSAL_LL, _causal_ll),
    "phrases": (_CAUSAL_LL, _causal_ll),
    "digits": (_CAUSAL_EXPOSURE, _causal_exposure),
    "words": (_CAUSAL_EXPOSURE, _causal_exposure),
}


def secret_kind(run: Any) -> str:
    """The kind of the inject run's secret space (``digits``, ``words``, ``phrases``, ``new-tokens``, ...)."""
    entry = run.manifest.get("secret_space")
    kind = entry.get("kind") if isinstance(entry, dict) else None
    if kind not in SCORES:
        raise UserInputError(
            f"--data {run.path}: the canary attack knows no score for secret space {kind!r}; rerun dpaudit inject."
        )
    return kind


class CanaryAttack(BaseAttack):
    """Canary membership with the score that fits the design; one-run bounds on coin-flip canaries."""

    name: ClassVar[str] = "canary"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CAUSAL_LM})
    #: digits and words canaries are scored by exposure, with the exposure attack's options.
    Config: ClassVar[type] = ExposureConfig
    scores_canaries: ClassVar[bool] = True
    designs: ClassVar[frozenset[str] | None] = frozenset(SCORES)
    one_run_default: ClassVar[bool] = True
    order: ClassVar[int] = 90

    def run(self, context: AttackContext) -> AttackOutcome:
        kind = secret_kind(context.data)
        words, score_fn = (CAUSAL_SCORES if context.is_causal else SCORES)[kind]
        parameters = {"score": f"{words}; higher = member", "design": kind}
        task = canary_task(context.data)
        if task is None:
            result = RESULT_CLASSES[self.name](
                parameters=parameters,
                tasks=(),
                claimed_epsilon=None,
                exceeds_claim=False,
                warnings=("no canary task: every canary was inserted, or none was.",),
            )
            return AttackOutcome(result)
        scores = dict(zip((c.id for c in context.canaries), score_fn(context).tolist()))
        return audit_tasks(
            context, self.name, [(task, np.asarray([scores[i] for i in task.ids]))], parameters=parameters
        )
