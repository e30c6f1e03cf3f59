"""RMIA (Zarifzadeh et al. 2024, "Low-Cost High-Power Membership Inference Attacks"), offline.

A likelihood ratio of the candidate x against population samples z, with reference models:

    LR(x) = Pr(x | target) / Pr(x),   Pr(x) = 1/2 [(1 + a) mean_r Pr(x | ref_r) + (1 - a)]
    score(x) = fraction of population samples z with LR(x) / LR(z) > gamma

Pr(x | model) is the probability of the true label (classifier) or exp(-MLM loss), the geometric mean
probability of the masked tokens under a seeded masking (masked LM). Reference models are the
shadow attack's: trained like the target (as many rows and optimizer steps) on random rows of the
reference part of ``public.jsonl`` (shared and cached), so the attack works with 1 to 4 of them, the
budget of a CPU user. The population z is the other, disjoint part of ``public.jsonl``: the paper's
population samples trained no reference model (:func:`dpaudit.attacks.shadow_models.split_public`).
gamma = 1. Higher = member.

``a`` approximates the IN models missing in the offline setting (section 4 of the paper): an IN model's
probability is taken to be a p_out + (1 - a), a line from p_out toward 1. That fits a classifier's
true-label probability (a = 0.3, :data:`CLASSIFIER_A`). It does not fit low-probability outputs: a masked
LM's geometric-mean token probability is ~1e-3, training on x multiplies it (p_in ~ c p_out) rather than
pulling it toward 1, and with a = 0.3 the constant (1 - a) / 2 = 0.35 swamps the reference term, so the
score ranked exactly as the loss attack (Spearman 0.999998 over 4,000 examples, issue 29). With
p_in = c p_out the marginal is (1 + c) / 2 p_out, and the constant factor cancels in LR(x) / LR(z): that
is the paper's formula at a = 1 (:data:`MASKED_LM_A`), the end of the grid over which the paper's
reference implementation tunes a (ml_privacy_meter's ``tune_offline_a``, [0, 1]). The score then ranks by
p_target(x) / mean_r p_ref(x), and the references' view of how easy x is intrinsically reaches it. On the
tiny test fixture's masked LM (median p 0.012, 4 references, 64 + 64 examples) a = 0.3 gave Spearman 0.981
with the loss score and AUC 0.668 (loss 0.671); a = 1 gives Spearman 0.394 and AUC 0.683.

A causal LM's probability is the same kind of number: exp(-mean next-token NLL), the geometric mean of its
tokens' probabilities given the tokens before them (issue 30), as small and multiplied (not pulled toward 1)
by training, so it takes a = 1 too.

References:
  Zarifzadeh, Liu, Shokri et al. 2024, "Low-Cost High-Power Membership Inference Attacks" (ICML 2024),
    equations (3)-(5) and the offline approximation.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import audit_tasks, membership_tasks
from dpaudit.attacks.shadow_models import ShadowPool, check_trained_like_target, models_info, pool_label_ids, public_shadows
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM

#: Offline scaling of the reference average (Zarifzadeh et al. section 4) for a classifier's true-label probability.
CLASSIFIER_A = 0.3
#: For a masked LM's low-probability outputs (module docstring): the reference average alone.
MASKED_LM_A = 1.0
#: The default of :func:`rmia_scores` (a classifier's).
OFFLINE_A = CLASSIFIER_A
GAMMA = 1.0


def offline_a(kind: str) -> float:
    """The ``a`` of a model kind: :data:`MASKED_LM_A` for a masked or causal LM (both score a geometric-mean token
    probability, module docstring), :data:`CLASSIFIER_A` for a classifier."""
    return MASKED_LM_A if kind in (MASKED_LM, CAUSAL_LM) else CLASSIFIER_A


def rmia_scores(p_target_x: np.ndarray, p_refs_x: np.ndarray, p_target_z: np.ndarray, p_refs_z: np.ndarray, *,
                a: float = OFFLINE_A, gamma: float = GAMMA) -> np.ndarray:
    """score(x) = Pr_z[LR(x) / LR(z) > gamma] from target and [refs, n] reference probabilities.

    LR(x) = p_target(x) / (1/2 [(1 + a) mean_r p_ref(x) + (1 - a)]); ``a`` in [0, 1] (module docstring).
    """
    if not 0 <= a <= 1:
        raise ValueError(f"a must be in [0, 1], got {a}.")
    def lr(p_t: np.ndarray, p_r: np.ndarray) -> np.ndarray:
        marginal = 0.5 * ((1 + a) * p_r.mean(0) + (1 - a))
        return p_t / marginal

    lr_x, lr_z = lr(p_target_x, p_refs_x), np.sort(gamma * lr(p_target_z, p_refs_z))
    return np.searchsorted(lr_z, lr_x, side="left") / lr_z.size


class RmiaAttack:
    """Zarifzadeh et al. 2024, offline, with the public-half shadows as reference models."""

    name: ClassVar[str] = "rmia"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})

    @classmethod
    def check(cls, options: Any, source: Any, run: Any) -> None:
        """Shadow models are trained like the target: its manifest must name the trainer and Config."""
        check_trained_like_target(cls.name, options, source, run)

    def run(self, context: AttackContext) -> AttackOutcome:
        seed = context.options.seed
        tasks = membership_tasks(context)
        shadows = public_shadows(context, self.name, what="rmia reference")
        models, refs = shadows.models, shadows.scorers
        pool = ShadowPool(texts=[shadows.pool.texts[i] for i in shadows.population],  # z: rows no reference trained on
                          labels=None if shadows.pool.labels is None else [shadows.pool.labels[i] for i in shadows.population])
        info, notes = models_info(shadows.recipe, models, role="reference", data=shadows.data, notes=shadows.notes)
        z_labels = pool_label_ids(context.scorer.source.label_set(), pool)

        def prob(scorer, texts, labels):
            return np.exp(-np.nan_to_num(scorer.example_losses(texts, labels, seed=seed), nan=np.inf))

        p_tz = prob(context.scorer, pool.texts, z_labels)
        p_rz = np.stack([prob(r, pool.texts, z_labels) for r in refs])
        a = offline_a(context.scorer.kind)
        scored = [(t, rmia_scores(prob(context.scorer, t.texts, t.labels),
                                  np.stack([prob(r, t.texts, t.labels) for r in refs]), p_tz, p_rz, a=a)) for t in tasks]
        what = {CLASSIFIER: "probability of the true label",
                CAUSAL_LM: "exp(-mean next-token NLL): geometric-mean probability of the text's tokens"}.get(
            context.scorer.kind, "exp(-MLM loss): geometric-mean masked-token probability (seeded masking)")
        params = {"score": "fraction of population samples z with LR(x)/LR(z) > gamma; higher = member",
                  "probability": what, "reference_models": len(models), "offline_a": a,
                  "offline_a_reason": ("a language model's geometric-mean token probabilities are ~1e-3: an IN model "
                                       "multiplies them, the constant (1 - a) / 2 would swamp the references; a = 1 "
                                       "ranks by p_target / mean p_ref" if a == MASKED_LM_A else
                                       "the paper's offline a for a classifier's true-label probability"),
                  "gamma": GAMMA,
                  "population": f"the population part of public.jsonl ({len(pool.texts)} rows), disjoint from every "
                                "reference model's training rows",
                  "reference_data": shadows.data,
                  "shadow_overrides": context.options.shadow_overrides or {}}
        return audit_tasks(context, self.name, scored, parameters=params, warnings=notes, shadow_models=info)
