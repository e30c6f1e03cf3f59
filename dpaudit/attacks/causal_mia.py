"""Membership attacks made for causal LMs: the zlib ratio, Min-K% Prob and Min-K%++.

Each scores a text from the target's next-token log-probabilities alone (no shadow or reference model)
and goes through :func:`dpaudit.attacks.mia.audit_tasks` exactly like the loss attack: the threshold is
chosen on a seeded half of the scores and the bounds computed on the other half, the blind baseline runs
beside them. Texts are cut to the loss attack's :data:`~dpaudit.scoring.scorer.EXAMPLE_MAX_LENGTH` tokens,
so the four attacks score the same tokens.

- ``zlib`` (Carlini et al. 2021, section 5.1): score = -log-perplexity / zlib entropy, the mean NLL of the
  text's tokens over the length in bytes of its zlib compression: a text that is easy for any model
  because it is repetitive (low zlib entropy) is discounted.
- ``min-k`` (Shi et al. 2024): score = the mean of the k% lowest token log-probabilities (k = 20% by
  default, ``--min-k``): a member has few surprising tokens. At least one token is used on short texts.
- ``min-k++`` (Zhang et al. 2024): each token's log p is standardized by the mean mu_t and standard
  deviation sigma_t of log p(z) under the model's own next-token distribution at that position,
  (log p(x_t) - mu_t) / sigma_t (training pulls x_t towards a local maximum of the distribution); score =
  the mean of the k% lowest. A position whose distribution is a point mass (sigma_t = 0) counts as 0.

References:
  Carlini, Tramer, Wallace et al. 2021, "Extracting Training Data from Large Language Models" (USENIX
    Security), section 5.1 (the zlib ratio).
  Shi, Ajith, Xia et al. 2024, "Detecting Pretraining Data from Large Language Models" (ICLR 2024), Min-K% Prob.
  Zhang, Sun, Yeats et al. 2024, "Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large
    Language Models", equation (2).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import MembershipAttack, audit_tasks, membership_tasks
from dpaudit.attacks.options import MembershipOptions, option
from dpaudit.scoring.scorer import EXAMPLE_MAX_LENGTH
from dpaudit.scoring.source import CAUSAL_LM


def zlib_entropy(text: str) -> int:
    """Bytes of the text's UTF-8 encoding compressed by zlib (default level), as Carlini et al. 2021 measure it."""
    return len(zlib.compress(text.encode("utf-8")))


def zlib_scores(token_log_probs: Sequence[np.ndarray], texts: Sequence[str]) -> np.ndarray:
    """[n] -(mean NLL) / zlib entropy; NaN for a text with no scored token. Higher = member."""
    return np.asarray(
        [
            float(lp.mean()) / zlib_entropy(t) if lp.size else np.nan
            for lp, t in zip(token_log_probs, texts, strict=True)
        ],
        dtype=np.float64,
    )


def lowest_mean(values: np.ndarray, k: float) -> float:
    """Mean of the int(len * k) lowest values (as Shi et al.'s code counts them), at least one; NaN for no value."""
    if values.size == 0:
        return float("nan")
    count = max(1, int(values.size * k))
    return float(np.sort(values)[:count].mean())


def min_k_scores(token_log_probs: Sequence[np.ndarray], k: float) -> np.ndarray:
    """[n] Min-K% Prob: the mean of each text's k fraction of lowest token log-probabilities. Higher = member."""
    return np.asarray([lowest_mean(lp, k) for lp in token_log_probs], dtype=np.float64)


def min_k_plus_plus_scores(
    log_probs: Sequence[np.ndarray], mean: Sequence[np.ndarray], std: Sequence[np.ndarray], k: float
) -> np.ndarray:
    """[n] Min-K%++: the mean of the k fraction of lowest (log p - mu) / sigma per text. Higher = member."""
    out = []
    for lp, mu, sigma in zip(log_probs, mean, std, strict=True):
        z = np.divide(lp - mu, sigma, out=np.zeros_like(lp), where=sigma > 0)
        out.append(lowest_mean(z, k))
    return np.asarray(out, dtype=np.float64)


@dataclass(frozen=True, kw_only=True)
class MinKConfig(MembershipOptions):
    """Min-k% options.

    Attributes:
        min_k: the fraction k of each text's lowest-scoring tokens they average.
    """

    min_k: float = field(
        default=0.2,
        metadata=option(
            "min-k and min-k++ (causal LMs): average each text's fraction K of lowest-scoring tokens.",
            metavar="K",
            min=0,
            max=1,
            min_open=True,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.min_k <= 1:
            raise ValueError(f"--min-k must be a fraction in (0, 1], got {self.min_k}.")


class _CausalMia(MembershipAttack):
    """The shared run: score each membership task, audit it like the loss attack."""

    name: ClassVar[str] = ""
    model_kinds: ClassVar[frozenset[str]] = frozenset({CAUSAL_LM})
    score_words: ClassVar[str] = ""

    def scores(self, context: AttackContext, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def parameters(self, context: AttackContext) -> dict[str, Any]:
        return {}

    def run(self, context: AttackContext) -> AttackOutcome:
        scored = [(t, self.scores(context, t.texts)) for t in membership_tasks(context)]
        return audit_tasks(
            context,
            self.name,
            scored,
            parameters={
                "score": f"{self.score_words}; higher = member",
                "max_tokens": EXAMPLE_MAX_LENGTH,
                **self.parameters(context),
                "threshold": "chosen on a seeded half of the scores (audit split), evaluated on the other half",
            },
        )


class ZlibAttack(_CausalMia):
    """Carlini et al. 2021: -log-perplexity / zlib entropy."""

    name: ClassVar[str] = "zlib"
    order: ClassVar[int] = 110
    score_words: ClassVar[str] = "-(mean token NLL) / (bytes of the zlib-compressed text)"

    def scores(self, context: AttackContext, texts: list[str]) -> np.ndarray:
        return zlib_scores(context.scorer.token_log_probs(texts, max_length=EXAMPLE_MAX_LENGTH), texts)


class MinKAttack(_CausalMia):
    """Shi et al. 2024, Min-K% Prob."""

    name: ClassVar[str] = "min-k"
    Config: ClassVar[type] = MinKConfig
    order: ClassVar[int] = 120
    score_words: ClassVar[str] = "mean of the k% lowest token log-probabilities"

    def scores(self, context: AttackContext, texts: list[str]) -> np.ndarray:
        return min_k_scores(context.scorer.token_log_probs(texts, max_length=EXAMPLE_MAX_LENGTH), context.options.min_k)

    def parameters(self, context: AttackContext) -> dict[str, Any]:
        return {"k": context.options.min_k}


class MinKPlusPlusAttack(_CausalMia):
    """Zhang et al. 2024, Min-K%++."""

    name: ClassVar[str] = "min-k++"
    Config: ClassVar[type] = MinKConfig
    order: ClassVar[int] = 130
    score_words: ClassVar[str] = (
        "mean of the k% lowest (log p(x_t) - mu_t) / sigma_t, mu_t and sigma_t the mean and "
        "std of log p(z) for z drawn from the model's next-token distribution"
    )

    def scores(self, context: AttackContext, texts: list[str]) -> np.ndarray:
        stats = context.scorer.token_statistics(texts, max_length=EXAMPLE_MAX_LENGTH)
        return min_k_plus_plus_scores(stats.log_probs, stats.mean, stats.std, context.options.min_k)

    def parameters(self, context: AttackContext) -> dict[str, Any]:
        return {"k": context.options.min_k}
