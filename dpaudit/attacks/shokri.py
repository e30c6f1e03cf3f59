"""The ``shadow`` attack: shadow-model membership inference (Shokri et al. 2017, as used by Dupuy et al. 2021).

k shadow models (default 4) are trained like the target (same trainer and Config, from its
manifest, on as many rows and for as many optimizer steps) each on random rows of the reference part
of ``public.jsonl`` (:func:`dpaudit.attacks.shadow_models.split_public`); the other rows are the
shadow's non-members.
Features of every shadow's in and out rows (sorted class probabilities for a classifier; for a
masked LM the sorted top-k masked-token probabilities, the loss and the entropy: whatever
:meth:`dpaudit.scoring.Scorer.example_features` gives) train one scikit-learn classifier
(``--attack-model logreg``: standardized logistic regression; ``gbdt``: histogram gradient boosting),
which is then applied to the target's candidates; score = its member probability. The shadow models
themselves (training, cache, the public pool) are :mod:`dpaudit.attacks.shadow_models`.

References:
  Shokri, Stronati, Song & Shmatikov 2017, "Membership Inference Attacks against Machine Learning Models".
  Dupuy, Arava, Gupta & Rumshisky 2021, "An Efficient DP-Federated LSTM/BERT..." / eDP-SGD (Table 1:
    MIA AUC of shadow-model attacks on SNIPS).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import audit_tasks, membership_tasks
from dpaudit.attacks.options import ShadowOptions, option
from dpaudit.attacks.shadow_models import ShadowTrainedAttack, models_info, pool_label_ids, public_shadows
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM

#: Top-k masked-token probabilities in MLM features.
TOP_K = 10


def features(scorer: Any, texts: list[str], labels: list[int] | None, seed: int) -> np.ndarray:
    f = scorer.example_features(texts, labels, seed=seed, top_k=TOP_K)
    x = f.matrix()
    return np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)


def attack_classifier(kind: str, seed: int) -> Any:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if kind == "gbdt":
        return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05, random_state=seed)
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))


@dataclass(frozen=True, kw_only=True)
class ShokriConfig(ShadowOptions):
    """The shadow attack's options.

    Attributes:
        attack_model: its classifier: ``logreg`` or ``gbdt``.
    """

    attack_model: Literal["logreg", "gbdt"] = field(
        default="logreg", metadata=option("The shadow attack's classifier: logistic regression or gradient boosting.")
    )


class ShadowAttack(ShadowTrainedAttack):
    """Shokri et al.: an attack classifier trained on shadow models' in/out features."""

    name: ClassVar[str] = "shadow"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})
    Config: ClassVar[type] = ShokriConfig
    order: ClassVar[int] = 50

    def run(self, context: AttackContext) -> AttackOutcome:
        options = context.options
        tasks = membership_tasks(context)
        shadows = public_shadows(context, self.name)
        models, scorers, pool = shadows.models, shadows.scorers, shadows.pool
        info, notes = models_info(shadows.recipe, models, role="shadow", data=shadows.data, notes=shadows.notes)
        labels = pool_label_ids(context.scorer.source.label_set(), pool)
        xs, ys = [], []
        for model, scorer in zip(models, scorers):
            xs.append(features(scorer, pool.texts, labels, options.seed))
            ys.append(model.spec.member.astype(int))
        clf = attack_classifier(options.attack_model, options.seed).fit(np.concatenate(xs), np.concatenate(ys))
        scored = [
            (t, clf.predict_proba(features(context.scorer, t.texts, t.labels, options.seed))[:, 1]) for t in tasks
        ]
        feature_names = (
            "sorted class probabilities, loss, entropy"
            if context.scorer.kind == CLASSIFIER
            else f"top-{TOP_K} next-token probabilities (sorted, averaged over the text's positions), loss, entropy"
            if context.scorer.kind == CAUSAL_LM
            else f"top-{TOP_K} masked-token probabilities (sorted, averaged over masked positions), loss, entropy"
        )
        params = {
            "score": "attack-model member probability; higher = member",
            "shadow_models": len(models),
            "shadow_models_asked": options.shadow_models,
            "shadow_data": shadows.data,
            "attack_model": options.attack_model,
            "features": feature_names,
            "cached": sum(m.cached for m in models),
            "shadow_overrides": options.shadow_overrides or {},
        }
        return audit_tasks(context, self.name, scored, parameters=params, warnings=notes, shadow_models=info)
