"""Membership attacks against the target's base, with no training: two forward passes per text (the target's and its
base's), the base being the public model the target was fine-tuned from (:mod:`dpaudit.attacks.base_ref`).

Fine-tuning moves the target away from its base most on the texts it trained on. Each attack scores that move; higher
= member. They go through :func:`dpaudit.attacks.mia.audit_tasks` like every membership attack (threshold on a seeded
half, the blind baseline beside them), and texts are cut to :data:`~dpaudit.scoring.scorer.EXAMPLE_MAX_LENGTH` tokens
as the loss attack cuts them. Every token t of a text has its log-likelihood ratio d_t = log p_target(x_t | ...) -
log p_base(x_t | ...): the next-token probability given x_<t for a causal LM, the pseudo-log-likelihood (x_t masked,
every other token shown; Salazar et al. 2020) for a masked LM.

- ``base-ratio`` (masked LMs, classifiers, causal LMs): the likelihood ratio of target vs base, sum_t d_t (the
  log-likelihood ratio of the whole sequence; for a masked LM the pseudo-log-likelihood ratio), and for a classifier
  the loss ratio on LiRA's logit scale, phi_target - phi_base with phi = log(p_y / (1 - p_y)) of the true label
  (Mireshghallah et al. 2022's test with the base as the reference; Carlini et al. 2021's comparison with a reference
  model; the scale of Carlini et al. 2022). The plain loss ratio, loss_base - loss_target, ignores how much of the
  rest of the mass fine-tuning moved: on SNIPS (600 + 600 rows, ``benchmarks/bench_reference_mia.py --task
  classify``, two fine-tunings) it reached AUC 0.552 and 0.585, the logit-scaled one 0.607 and 0.681. It also writes the per-token ratios of every
  candidate to ``scores/tokens.jsonl`` and keeps, for the report, the tokens that leak most in the top-scoring members
  and how the canaries' secret tokens moved (:mod:`dpaudit.attacks.token_leaks`: which names and numbers leak,
  after InfoRMIA's token-level view, Tao & Shokri 2025).
- ``error-zone`` (causal LMs), after EZ-MIA (Ilic et al. 2026): memorization shows most at the *error positions*, the
  tokens the target does not predict (its top-1 next token is not x_t), where a member's probability is still pushed
  up relative to the base. With P the sum of the positive d_t and N the sum of |d_t| of the negative ones over the
  error positions, the paper's Error Zone score is the directional imbalance P / N. Here it is (P + c) / (P + N + 2c),
  c = :data:`EZ_PSEUDO_NATS`: the same order as P / N (P / (P + N) is monotone in it) but bounded, with a pseudo-count
  that breaks the ties of texts whose shifts all point up (P / N is infinite for all of them), and 1/2 for a text with
  no error position or no shift at them (no evidence either way). The paper's code scores a text with no negative
  shift, or fewer than two error positions, 0, the least member-like, though such a text is the most moved: on the
  causal LM of ``benchmarks/bench_reference_mia.py`` (596 + 596 SNIPS rows) 216 texts scored 0 that way, 196 of them
  members, and the paper's rule reached AUC 0.665 and 19.3% TPR at 1% FPR where this score reached 0.985 and 64.3%.
- ``min-k++-base`` (causal LMs): Min-K%++ (Zhang et al. 2024) calibrated against the base: each token's Min-K%++
  statistic z_t = (log p(x_t) - mu_t) / sigma_t (mu_t, sigma_t the mean and standard deviation of log p(z) under the
  model's own next-token distribution) under the target minus the same under the base, and the score the mean of the
  k fraction (``--min-k``) of lowest differences: a member has no token that fine-tuning left behind.

References:
  Ilic, Stanojevic & Cvejoski 2026, "Powerful Training-Free Membership Inference Against Autoregressive Language
    Models" (EZ-MIA, arXiv 2601.12104): the Error Zone score, the pretrained base as the reference.
  Mireshghallah, Goyal, Uniyal, Berg-Kirkpatrick & Shokri 2022, "Quantifying Privacy Risks of Masked Language Models
    Using Membership Inference Attacks" (likelihood ratio against a reference model).
  Carlini, Tramer, Wallace et al. 2021, "Extracting Training Data from Large Language Models" (comparing with a
    reference model).
  Salazar, Liang, Nguyen & Kirchhoff 2020, "Masked Language Model Scoring" (pseudo-log-likelihood).
  Zhang, Sun, Yeats et al. 2024, "Min-K%++: Improved Baseline for Detecting Pre-Training Data from Large Language
    Models".
  Tao & Shokri 2025, "(Token-Level) InfoRMIA: Stronger Membership Inference and Memorization Assessment for LLMs"
    (arXiv 2510.05582): token-level membership leakage.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.base_ref import BaseReferenceAttack, base_scorer
from dpaudit.attacks.causal_mia import MinKConfig, lowest_mean
from dpaudit.attacks.mia import MembershipTask, audit_tasks, membership_tasks
from dpaudit.attacks.options import MembershipOptions, ReferenceOptions
from dpaudit.attacks.results import TokenLeakMiaResult
from dpaudit.scoring.scorer import EXAMPLE_MAX_LENGTH
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM

#: The pseudo-count, in nats, of the Error Zone ratio (P + c) / (P + N + 2c).
EZ_PSEUDO_NATS = 1.0
THRESHOLD_WORDS = "chosen on a seeded half of the scores (audit split), evaluated on the other half"


# -- the scores, from per-token arrays (the brute-force tests check these) ---------------------------------------


def likelihood_ratio(target: Sequence[np.ndarray], base: Sequence[np.ndarray]) -> np.ndarray:
    """[n] sum_t (log p_target - log p_base) per text; NaN for a text with no scored token. Higher = member."""
    return np.asarray([float((t - b).sum()) if t.size else np.nan for t, b in zip(target, base, strict=True)])


def error_zone_scores(
    target: Sequence[np.ndarray], base: Sequence[np.ndarray], top1: Sequence[np.ndarray], *, c: float = EZ_PSEUDO_NATS
) -> np.ndarray:
    """[n] (P + c) / (P + N + 2c) over each text's error positions (``top1`` False: the target's most likely next token
    is not x_t), P the sum of the positive and N of the negative shifts' sizes, shift = log p_target - log p_base;
    1/2 when no error position moved. Higher = member."""
    out = []
    for t, b, hit in zip(target, base, top1, strict=True):
        shift = (t - b)[~np.asarray(hit, dtype=bool)]
        up, down = float(shift[shift > 0].sum()), float(-shift[shift < 0].sum())
        out.append((up + c) / (up + down + 2 * c) if up + down + 2 * c > 0 else 0.5)
    return np.asarray(out, dtype=np.float64)


def min_k_statistic(log_probs: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """Per token, Min-K%++'s (log p - mu) / sigma (0 where sigma = 0: a point mass)."""
    return np.divide(log_probs - mean, std, out=np.zeros_like(log_probs), where=std > 0)


def calibrated_min_k_scores(target: Any, base: Any, k: float) -> np.ndarray:
    """[n] the mean of the k fraction of lowest z_target - z_base per text (:func:`min_k_statistic` under each model;
    ``target`` and ``base`` are :class:`~dpaudit.scoring.causal.TokenTable` of the same texts). Higher = member."""
    return np.asarray(
        [
            lowest_mean(min_k_statistic(lt, mt, st) - min_k_statistic(lb, mb, sb), k)
            for lt, mt, st, lb, mb, sb in zip(
                target.log_probs, target.mean, target.std, base.log_probs, base.mean, base.std, strict=True
            )
        ],
        dtype=np.float64,
    )


# -- per-token tables, computed once per run and task -------------------------------------------------------------


@dataclass(frozen=True)
class TokenShifts:
    """A task's per-token view of target vs base: each text's token ids, the positions scored, and at each the
    target's and the base's log-likelihood (and, for a causal LM, the full :class:`~dpaudit.scoring.causal.TokenTable`
    of each)."""

    ids: list[list[int]]
    positions: list[list[int]]
    target: list[np.ndarray]
    base: list[np.ndarray]
    target_table: Any = None
    base_table: Any = None

    def ratios(self) -> list[np.ndarray]:
        """Per text, d_t = log p_target - log p_base at each scored position."""
        return [t - b for t, b in zip(self.target, self.base)]


def token_shifts(context: AttackContext, task: MembershipTask) -> TokenShifts:
    """The task's :class:`TokenShifts` (two passes over its texts: the target's and the base's), cached on the context.

    Raises:
        UserInputError: no comparable base (:func:`dpaudit.attacks.base_ref.base_scorer`).
    """
    cache: dict[str, TokenShifts] = context.__dict__.setdefault("_token_shifts", {})
    if task.name in cache:
        return cache[task.name]
    base, _ = base_scorer(context)
    target = context.scorer
    if target.kind == CAUSAL_LM:
        t, b = (s.token_table(task.texts, max_length=EXAMPLE_MAX_LENGTH) for s in (target, base))
        shifts = TokenShifts(
            ids=t.ids,
            positions=[list(range(1, len(ids))) for ids in t.ids],
            target=t.log_probs,
            base=b.log_probs,
            target_table=t,
            base_table=b,
        )
    else:
        t, b = (s.text_pseudo_log_likelihoods(task.texts, max_length=EXAMPLE_MAX_LENGTH) for s in (target, base))
        shifts = TokenShifts(ids=t.ids, positions=t.positions, target=t.log_probs, base=b.log_probs)
    cache[task.name] = shifts
    return shifts


# -- the attacks ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BaseConfig(MembershipOptions, ReferenceOptions):
    """The options of the attacks against the target's base: the membership options and ``--reference-model``."""


@dataclass(frozen=True, kw_only=True)
class MinKBaseConfig(MinKConfig, ReferenceOptions):
    """min-k++-base's options: ``--min-k`` (shared with min-k and min-k++) and ``--reference-model``."""


class _BaseAttack(BaseReferenceAttack):
    """The shared run: score each membership task against the base, audit it like the loss attack."""

    Config: ClassVar[type] = BaseConfig
    score_words: ClassVar[str] = ""

    def scores(self, context: AttackContext, task: MembershipTask) -> np.ndarray:
        raise NotImplementedError

    def parameters(self, context: AttackContext) -> dict[str, Any]:
        return {}

    def score_text(self, context: AttackContext) -> str:
        """The score in words, for the result's parameters."""
        del context
        return self.score_words

    def outcome(self, context: AttackContext, scored: list[tuple[MembershipTask, np.ndarray]]) -> AttackOutcome:
        _, described = base_scorer(context)
        return audit_tasks(
            context,
            self.name,
            scored,
            parameters={
                "score": f"{self.score_text(context)}; higher = member",
                "base": described,
                "training": "none: two forward passes per text (the target's and its base's)",
                "max_tokens": EXAMPLE_MAX_LENGTH,
                **self.parameters(context),
                "threshold": THRESHOLD_WORDS,
            },
        )

    def run(self, context: AttackContext) -> AttackOutcome:
        return self.outcome(context, [(t, self.scores(context, t)) for t in membership_tasks(context)])


class BaseRatioAttack(_BaseAttack):
    """The likelihood ratio of target vs base (classifiers: the logit-scaled loss ratio), and the per-token ratios."""

    name: ClassVar[str] = "base-ratio"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})
    order: ClassVar[int] = 45

    def score_text(self, context: AttackContext) -> str:
        return {
            CAUSAL_LM: "sum over the text's tokens of log p_target(x_t | x_<t) - log p_base(x_t | x_<t) (the "
            "sequence's log-likelihood ratio)",
            MASKED_LM: "sum over the text's tokens of log p_target(x_t | the rest) - log p_base(x_t | the rest), each "
            "token masked alone (the pseudo-log-likelihood ratio)",
        }.get(
            context.scorer.kind,
            "phi_target - phi_base, phi = log(p / (1 - p)) of the true label's probability p (the loss ratio on "
            "LiRA's logit scale)",
        )

    def scores(self, context: AttackContext, task: MembershipTask) -> np.ndarray:
        if context.scorer.kind == CLASSIFIER:
            from dpaudit.attacks.lira import logit_confidence
            from dpaudit.attacks.loss import task_losses

            base, _ = base_scorer(context)
            seed = context.options.seed
            target_phi = logit_confidence(task_losses(context.scorer, task, seed=seed))
            return target_phi - logit_confidence(task_losses(base, task, seed=seed))
        shifts = token_shifts(context, task)
        return likelihood_ratio(shifts.target, shifts.base)

    def run(self, context: AttackContext) -> AttackOutcome:
        from dpaudit.attacks.token_leaks import TOKENS_FILE, token_leaks, token_rows

        kind = context.scorer.kind
        tasks = membership_tasks(context)
        scored = [(t, self.scores(context, t)) for t in tasks]
        outcome = self.outcome(context, scored)
        if kind == CLASSIFIER:  # a label has no tokens: nothing to localize
            return outcome
        shifts = {t.name: token_shifts(context, t) for t in tasks}
        rows = token_rows(context, tasks, shifts)
        leaks = token_leaks(context, tasks, [s for _, s in scored], shifts)
        assert isinstance(outcome.result, TokenLeakMiaResult)  # base-ratio's registered result class
        result = dataclasses.replace(outcome.result, token_leaks=leaks)
        return AttackOutcome(
            result, canary_fields=outcome.canary_fields, score_files={**outcome.score_files, TOKENS_FILE: rows}
        )


class ErrorZoneAttack(_BaseAttack):
    """After EZ-MIA (Ilic et al. 2026): the directional imbalance of the shifts at the target's error positions."""

    name: ClassVar[str] = "error-zone"
    model_kinds: ClassVar[frozenset[str]] = frozenset({CAUSAL_LM})
    order: ClassVar[int] = 46
    score_words: ClassVar[str] = (
        "(P + c) / (P + N + 2c) over the positions where the target's top-1 next token is wrong, P and N the sums of "
        "the positive and negative shifts log p_target(x_t) - log p_base(x_t) in size, c = 1 nat (1/2: no error "
        "position moved)"
    )

    def scores(self, context: AttackContext, task: MembershipTask) -> np.ndarray:
        shifts = token_shifts(context, task)
        return error_zone_scores(shifts.target, shifts.base, shifts.target_table.top1)

    def parameters(self, context: AttackContext) -> dict[str, Any]:
        return {"pseudo_nats": EZ_PSEUDO_NATS}


class MinKPlusPlusBaseAttack(_BaseAttack):
    """Min-K%++ (Zhang et al. 2024) calibrated against the base."""

    name: ClassVar[str] = "min-k++-base"
    model_kinds: ClassVar[frozenset[str]] = frozenset({CAUSAL_LM})
    Config: ClassVar[type] = MinKBaseConfig
    order: ClassVar[int] = 47
    score_words: ClassVar[str] = (
        "mean of the k% lowest z_target(x_t) - z_base(x_t), z = (log p(x_t) - mu_t) / sigma_t under each model's own "
        "next-token distribution (Min-K%++)"
    )

    def scores(self, context: AttackContext, task: MembershipTask) -> np.ndarray:
        shifts = token_shifts(context, task)
        return calibrated_min_k_scores(shifts.target_table, shifts.base_table, context.options.min_k)

    def parameters(self, context: AttackContext) -> dict[str, Any]:
        return {"k": context.options.min_k}
