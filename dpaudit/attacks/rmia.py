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
score ranked exactly as the loss attack (Spearman 0.999998 over 4,000 examples). With
p_in = c p_out the marginal is (1 + c) / 2 p_out, and the constant factor cancels in LR(x) / LR(z): that
is the paper's formula at a = 1 (:data:`MASKED_LM_A`), the end of the grid over which the paper's
reference implementation tunes a (ml_privacy_meter's ``tune_offline_a``, [0, 1]). The score then ranks by
p_target(x) / mean_r p_ref(x), and the references' view of how easy x is intrinsically reaches it. On the
tiny test fixture's masked LM (median p 0.012, 4 references, 64 + 64 examples) a = 0.3 gave Spearman 0.981
with the loss score and AUC 0.668 (loss 0.671); a = 1 gives Spearman 0.394 and AUC 0.683.

A causal LM's probability is the same kind of number, exp(-mean next-token NLL), the geometric mean of its
tokens' probabilities given the tokens before them, but which line fits depends on how far training
went: a causal LM that memorizes whole texts pulls p_in toward 1, one trained a few epochs multiplies a small
p_out. Measured on tiny GPT-2s (``--task clm``, 64 + 64 examples, 4 references trained like the target on
public.jsonl, 64 population rows), with the least-squares a of p_in = a p_out + (1 - a) over the references'
rows that are IN one reference and OUT of another:

- 30 epochs: p_in 0.74 vs p_out 0.016 (medians), fitted a 0.29; AUC 0.984 at a = 0.3 and at the fitted a,
  0.917 at a = 1 (loss 0.986);
- 6 epochs: p_in 0.067 vs p_out 0.029, fitted a 0.96; AUC 0.710 at a = 0.3 (Spearman 0.996 with the loss
  score) and at a = 1 (Spearman 0.21), 0.781 at the fitted a (Spearman 0.79), loss 0.705 (one model and
  seed: the AUCs' standard error is ~0.04).

So for a causal LM a is fitted that way from the reference models alone (:func:`fitted_offline_a`: public rows
and the references' own memberships, never the target or its data), clipped to [0, 1]; with no row IN one
reference and OUT of another (a single reference) it is 1, the few-epochs regime of a fine-tuned LM.

References:
  Zarifzadeh, Liu, Shokri et al. 2024, "Low-Cost High-Power Membership Inference Attacks" (ICML 2024),
    equations (3)-(5) and the offline approximation.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import audit_tasks, membership_tasks
from dpaudit.attacks.shadow_models import ShadowPool, ShadowTrainedAttack, models_info, pool_label_ids, public_shadows
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


def fitted_offline_a(p_refs: np.ndarray, member: np.ndarray) -> float | None:
    """The least-squares ``a`` of p_in = a p_out + (1 - a) (the paper's offline line), from reference models only.

    Args:
        p_refs: [refs, rows] each reference's probability of each row.
        member: [refs, rows] bool, whether the reference trained on the row.

    Returns:
        ``a`` in [0, 1] over the rows IN at least one reference and OUT of another (p_in, p_out: the means over
        those references), or None when there is no such row (or every p_out is 1).
    """
    member = np.asarray(member, dtype=bool)
    rows = member.any(0) & (~member).any(0)
    if not rows.any():
        return None
    p = np.asarray(p_refs, dtype=np.float64)[:, rows]
    inside = member[:, rows]
    p_in = (p * inside).sum(0) / inside.sum(0)
    p_out = (p * ~inside).sum(0) / (~inside).sum(0)
    denominator = float(((1 - p_out) ** 2).sum())
    if denominator == 0:
        return None
    return float(np.clip(((1 - p_in) * (1 - p_out)).sum() / denominator, 0.0, 1.0))


def rmia_scores(
    p_target_x: np.ndarray,
    p_refs_x: np.ndarray,
    p_target_z: np.ndarray,
    p_refs_z: np.ndarray,
    *,
    a: float = OFFLINE_A,
    gamma: float = GAMMA,
) -> np.ndarray:
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


class RmiaAttack(ShadowTrainedAttack):
    """Zarifzadeh et al. 2024, offline, with the public-half shadows as reference models."""

    name: ClassVar[str] = "rmia"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})
    order: ClassVar[int] = 80

    def run(self, context: AttackContext) -> AttackOutcome:
        seed = context.options.seed
        tasks = membership_tasks(context)
        shadows = public_shadows(context, self.name, what="rmia reference")
        models, refs = shadows.models, shadows.scorers
        pool = ShadowPool(
            texts=[shadows.pool.texts[i] for i in shadows.population],  # z: rows no reference trained on
            labels=None if shadows.pool.labels is None else [shadows.pool.labels[i] for i in shadows.population],
        )
        info, notes = models_info(shadows.recipe, models, role="reference", data=shadows.data, notes=shadows.notes)
        z_labels = pool_label_ids(context.scorer.source.label_set(), pool)

        def prob(scorer, texts, labels):
            return np.exp(-np.nan_to_num(scorer.example_losses(texts, labels, seed=seed), nan=np.inf))

        p_tz = prob(context.scorer, pool.texts, z_labels)
        p_rz = np.stack([prob(r, pool.texts, z_labels) for r in refs])
        a, a_reason = offline_a(context.scorer.kind), None
        if context.scorer.kind == CAUSAL_LM:  # fitted from the references alone (module docstring)
            member = np.stack([m.spec.member for m in models])
            rows = np.flatnonzero(member.any(0) & (~member).any(0))
            texts = [shadows.pool.texts[i] for i in rows]
            fitted = (
                fitted_offline_a(np.stack([prob(r, texts, None) for r in refs]), member[:, rows]) if texts else None
            )
            a = MASKED_LM_A if fitted is None else fitted
            a_reason = (
                f"least-squares fit of p_in = a p_out + (1 - a) on the {rows.size} public rows IN some reference "
                "and OUT of another (the references alone)"
                if fitted is not None
                else "no public row is IN one reference and OUT of another to fit a on: a = 1, the few-epochs regime "
                "of a language model (p_in ~ c p_out, small)"
            )
        scored = [
            (
                t,
                rmia_scores(
                    prob(context.scorer, t.texts, t.labels),
                    np.stack([prob(r, t.texts, t.labels) for r in refs]),
                    p_tz,
                    p_rz,
                    a=a,
                ),
            )
            for t in tasks
        ]
        what = {
            CLASSIFIER: "probability of the true label",
            CAUSAL_LM: "exp(-mean next-token NLL): geometric-mean probability of the text's tokens",
        }.get(context.scorer.kind, "exp(-MLM loss): geometric-mean masked-token probability (seeded masking)")
        params = {
            "score": "fraction of population samples z with LR(x)/LR(z) > gamma; higher = member",
            "probability": what,
            "reference_models": len(models),
            "offline_a": a,
            "offline_a_reason": a_reason
            or (
                "a language model's geometric-mean token probabilities are ~1e-3: an IN model "
                "multiplies them, the constant (1 - a) / 2 would swamp the references; a = 1 "
                "ranks by p_target / mean p_ref"
                if a == MASKED_LM_A
                else "the paper's offline a for a classifier's true-label probability"
            ),
            "gamma": GAMMA,
            "population": f"the population part of public.jsonl ({len(pool.texts)} rows), disjoint from every "
            "reference model's training rows",
            "reference_data": shadows.data,
            "shadow_overrides": context.options.shadow_overrides or {},
        }
        return audit_tasks(context, self.name, scored, parameters=params, warnings=notes, shadow_models=info)
