"""Loss-threshold membership inference (Yeom et al. 2018; Sablayrolles et al. 2019).

score = -loss: a training example tends to have a lower loss than an unseen one. The loss is the
MLM loss under a fixed seeded masking (the same masks whichever model scores the text) or, for a
classifier, the cross-entropy of the true label. The threshold is never picked on the evaluation
scores: :func:`dpaudit.audit.audit_scores` chooses it on one half of the scores (a seeded split) and
bounds epsilon on the other half (and also reports a Bonferroni bound over every threshold).

References:
  Yeom, Giacomelli, Fredrikson & Jha 2018, "Privacy Risk in Machine Learning: Analyzing the
    Connection to Overfitting".
  Sablayrolles et al. 2019, "White-box vs Black-box: Bayes Optimal Strategies for Membership Inference".
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import MembershipAttack, audit_tasks, membership_tasks
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM


def task_losses(scorer, task, *, seed: int) -> np.ndarray:
    """[n] per-candidate loss of ``scorer`` on a task (MLM: seeded masking; classifier: true label).

    Kept on the scorer by (seed, texts, labels): loss, ref and base-ratio (classifiers) score the same target on the
    same task, and that pass runs once per run."""
    labels = None if task.labels is None else tuple(np.asarray(task.labels).tolist())
    key = (seed, tuple(task.texts), labels)
    cache: dict[Any, np.ndarray] = scorer.__dict__.setdefault("_task_losses", {})
    if key not in cache:
        cache[key] = np.asarray(scorer.example_losses(task.texts, task.labels, seed=seed), dtype=np.float64)
    return cache[key].copy()


class LossAttack(MembershipAttack):
    """score = -loss; threshold chosen on a held-apart half by the audit."""

    name: ClassVar[str] = "loss"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})
    order: ClassVar[int] = 40

    def run(self, context: AttackContext) -> AttackOutcome:
        tasks = membership_tasks(context)
        scored = [(t, -task_losses(context.scorer, t, seed=context.options.seed)) for t in tasks]
        what = {
            MASKED_LM: "mean MLM loss over a seeded 15% masking of each text",
            CAUSAL_LM: "mean next-token NLL of each text's tokens after the first",
        }.get(context.scorer.kind, "cross-entropy of the true label")
        return audit_tasks(
            context,
            self.name,
            scored,
            parameters={
                "score": f"-loss ({what}); higher = member",
                "threshold": "chosen on a seeded half of the scores (audit split), evaluated on the other half",
            },
        )
