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

The Gaussian-pair fit (coin-flip canaries; ``info["gauss_pair"]`` of the canaries task in ``results.json``, and
:func:`fit_lines` for the terminal): the member and non-member scores fitted as a pair of Gaussians and read as the
pair's mu-GDP epsilon at the claim's delta, with the estimation error of the means and spreads paid
(:func:`dpaudit.audit.gauss_pair.gauss_pair_bound`; Agrawal et al. 2026). It is evidence, a *fit*, not a bound for
any mechanism nor for the claimed one: in the white box the fitted values are projections of the noisy sum, which are
a Gaussian pair when the mechanism is the claimed Gaussian one; here they are a trained model's pseudo-log-likelihoods,
whose tails are not Gaussian (the fit extrapolates means and spreads to the tails that an epsilon at small delta is
about) and whose canaries interfere with one another (the intervals assume independent scores). So it never drives
the headline, which keeps the one-run proof (:mod:`dpaudit.verdict.headline`); it is computed per audit at the
attack's confidence, not corrected for the run's other audits. Beside it: its ceiling (a perfect attack's figure:
the separation cap), the canaries a perfect attack would need for the claim, and, at the scores' own separation, the
most the fit could read with unlimited canaries and the canaries it would need for the claim (docs/auditing.md,
"Gaussian pair").

References:
  Panda, Tang, Nasr, Choquette-Choo & Mittal 2025, "Privacy Auditing of Large Language Models".
  Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run".
  Salazar, Liang, Nguyen & Kirchhoff 2020, "Masked Language Model Scoring" (pseudo-log-likelihood).
  Carlini et al. 2019, "The Secret Sharer" (exposure).
  Agrawal et al. 2026, "Let's Ask Gauss: Improved One-Run Privacy Auditing", arXiv 2606.12733 (Gaussian pair).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome, BaseAttack
from dpaudit.attacks.exposure import ExposureConfig, causal_exposure_intervals
from dpaudit.attacks.mia import audit_tasks, canary_task, scores_file
from dpaudit.attacks.results import RESULT_CLASSES, MiaResult
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
        outcome = audit_tasks(
            context, self.name, [(task, np.asarray([scores[i] for i in task.ids]))], parameters=parameters
        )
        return with_gauss_pair_fit(outcome, self.name, confidence=context.options.level)


#: What the black-box Gaussian-pair figure holds for (module docstring).
FIT_HOLDS_FOR = (
    "evidence, not a bound: a Gaussian pair fitted to the canary scores (estimation error paid), which holds only if "
    "the scores were Gaussian and independent across canaries; a trained model's scores are neither"
)


def gauss_pair_fit(
    member: Sequence[float] | np.ndarray,
    nonmember: Sequence[float] | np.ndarray,
    *,
    delta: float,
    confidence: float,
    claimed: float | None,
) -> dict[str, Any]:
    """The Gaussian-pair fit of one audit's scores (higher = member), as ``info["gauss_pair"]`` stores it.

    ``epsilon`` (rounded down) and ``mu`` are :func:`dpaudit.audit.gauss_pair.gauss_pair_bound`'s; ``mu_point`` is the
    separation of the sample moments (difference of means over the larger standard deviation), ``asymptote`` the
    figure a pair of that separation reads with unlimited canaries; ``ceiling`` the most the fit reads (a perfect
    attack); ``canaries_needed`` the canaries a perfect attack needs to reach ``claimed``, and
    ``canaries_needed_at_mu_point`` those a pair of separation ``mu_point`` needs (None: more than 10^8, or no claim)."""
    from dpaudit.audit import gauss_pair

    m, n = np.asarray(member, dtype=np.float64), np.asarray(nonmember, dtype=np.float64)
    found = gauss_pair.gauss_pair_bound(m, n, delta=delta, confidence=confidence)
    std = math.sqrt(max(float(m.var(ddof=1)), float(n.var(ddof=1))))
    gap = float(m.mean() - n.mean())
    mu_point = 0.0 if gap <= 0 else gauss_pair.MAX_MU if std <= 0 else min(gap / std, gauss_pair.MAX_MU)
    needed = needed_here = None
    if claimed is not None:
        needed = gauss_pair.canaries_needed(claimed, delta=delta, confidence=confidence)
        if mu_point > 0:
            needed_here = gauss_pair.canaries_needed(claimed, delta=delta, confidence=confidence, mu=mu_point)
    return {
        "method": "gauss_pair",
        "epsilon": found.epsilon,
        "mu": found.mu,
        "mu_point": mu_point,
        "asymptote": gauss_pair.epsilon_of(mu_point, delta),
        "delta": delta,
        "confidence": confidence,
        "corrected": False,
        "n_members": found.n_members,
        "n_nonmembers": found.n_nonmembers,
        "claimed_epsilon": claimed,
        "ceiling": gauss_pair.ceiling(delta=delta),
        "canaries_needed": needed,
        "canaries_needed_at_mu_point": needed_here,
        "holds_for": FIT_HOLDS_FOR,
    }


def with_gauss_pair_fit(outcome: AttackOutcome, attack: str, *, confidence: float) -> AttackOutcome:
    """``outcome`` with :func:`gauss_pair_fit` in the ``info`` of each coin-flip task of at least 2 members and 2
    non-members, fitted to the scores exactly as audited (``scores/mia_<attack>.jsonl``'s rows: non-finite scores
    already set to the lowest)."""
    result = outcome.result
    if not isinstance(result, MiaResult):
        return outcome
    rows = outcome.score_files.get(scores_file(attack), ())
    tasks = []
    for t in result.tasks:
        if t.coin_flip and t.n_members >= 2 and t.n_nonmembers >= 2:
            mine = [r for r in rows if r["task"] == t.task]
            member = [float(r["score"]) for r in mine if r["member"]]
            nonmember = [float(r["score"]) for r in mine if not r["member"]]
            fit = gauss_pair_fit(member, nonmember, delta=t.delta, confidence=confidence, claimed=t.claimed_epsilon)
            t = dataclasses.replace(t, info={**t.info, "gauss_pair": fit})
        tasks.append(t)
    return dataclasses.replace(outcome, result=dataclasses.replace(result, tasks=tuple(tasks)))


def _fit_text(fit: dict[str, Any]) -> str:
    """One fit in words (figures rounded down, the claim up)."""
    from dpaudit.common.figures import format_down, format_up

    claim, needed, here = fit["claimed_epsilon"], fit["canaries_needed"], fit["canaries_needed_at_mu_point"]
    ratio = f" ({format_down(fit['epsilon'] / claim)} of the claimed {format_up(claim)})" if claim else ""
    perfect = f", {needed:,} canaries for the claim" if needed else ""
    reach = "" if not claim else f", the claim with {here:,} canaries" if here else ", never the claim"
    return (
        f"epsilon {format_down(fit['epsilon'])}{ratio} at {fit['confidence']:.0%} for this audit alone (mu "
        f"{format_down(fit['mu'])}); ceiling {format_down(fit['ceiling'])} (a perfect attack{perfect}); at these "
        f"scores' separation (mu {format_down(fit['mu_point'])}) at most {format_down(fit['asymptote'])} with unlimited "
        f"canaries{reach}: {fit['holds_for']}"
    )


def fit_lines(attacks: Iterable[Any]) -> list[str]:
    """One terminal line per audit that carries a Gaussian-pair fit (``dpaudit attack``'s summary), its ceiling and
    what it holds for beside it; [] when none does."""
    lines = []
    for result in attacks:
        for t in getattr(result, "tasks", ()):
            fit = (getattr(t, "info", None) or {}).get("gauss_pair")
            if fit:
                lines.append(f"  Gaussian-pair fit, {result.attack}/{t.task}: {_fit_text(fit)}.")
    return lines
