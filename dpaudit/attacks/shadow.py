"""Shadow-model membership inference (Shokri et al. 2017, as used by Dupuy et al. 2021).

k shadow models (default 4) are trained like the target (same trainer and Config, from its
manifest) each on a random half of ``public.jsonl``; its other half are the shadow's non-members.
Features of every shadow's in and out rows (sorted class probabilities for a classifier; for a
masked LM the sorted top-k masked-token probabilities, the loss and the entropy: whatever
:meth:`dpaudit.scoring.Scorer.example_features` gives) train one scikit-learn classifier
(``--attack-model logreg``: standardized logistic regression; ``gbdt``: histogram gradient boosting),
which is then applied to the target's candidates; score = its member probability.

References:
  Shokri, Stronati, Song & Shmatikov 2017, "Membership Inference Attacks against Machine Learning Models".
  Dupuy, Arava, Gupta & Rumshisky 2021, "An Efficient DP-Federated LSTM/BERT..." / eDP-SGD (Table 1:
    MIA AUC of shadow-model attacks on SNIPS).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import audit_tasks, membership_tasks, precheck
from dpaudit.attacks.shadows import (
    ShadowPool,
    ShadowSpec,
    cache_root,
    load_scorers,
    train_shadows,
)
from dpaudit.errors import UserInputError
from dpaudit.scoring.source import CLASSIFIER, MASKED_LM

#: Top-k masked-token probabilities in MLM features.
TOP_K = 10


def public_pool(run: Any, label_set: Any = None) -> ShadowPool:
    """``public.jsonl``'s rows; with a classifier's ``label_set``, only those whose label the model has
    (a shadow trained like the target would refuse the others, and their loss is undefined)."""
    from dpaudit.inject_run import PUBLIC

    split = run.split(PUBLIC)
    if split.labels is None or label_set is None:
        return ShadowPool(texts=list(split.texts), labels=None if split.labels is None else list(split.labels))
    keep = [i for i, lab in enumerate(split.labels) if label_set.id_of(lab) is not None]
    return ShadowPool(texts=[split.texts[i] for i in keep], labels=[split.labels[i] for i in keep])


def pool_label_ids(label_set: Any, pool: ShadowPool) -> list[int] | None:
    """Class ids of the pool's labels in the model's label set (every pool row has one: :func:`public_pool`)."""
    if pool.labels is None or label_set is None:
        return None
    return [label_set.id_of(lab) for lab in pool.labels]


def public_half_specs(n_pool: int, k: int, seed: int) -> list[ShadowSpec]:
    """k shadows, each IN on an independent random half of the public pool (seeded)."""
    specs = []
    for i in range(k):
        rng = np.random.default_rng([seed, 0x5348, i])
        member = np.zeros(n_pool, bool)
        member[rng.permutation(n_pool)[: n_pool // 2]] = True
        specs.append(ShadowSpec(index=i, member=member, seed=seed * 1000 + i))
    return specs


def public_shadows(context: AttackContext, attack: str, *, what: str = "shadow") -> tuple[list[Any], list[Any], ShadowPool, list[str]]:
    """Train or reuse the k public-half shadows (shared by ``shadow`` and ``rmia``): (models, scorers, pool, notes)."""
    cached = getattr(context, "_public_shadows", None)
    if cached is not None:
        return cached
    options = context.options
    pool = public_pool(context.data, context.scorer.source.label_set())
    if len(pool.texts) < 4:
        raise UserInputError(f"--attacks {attack}: public.jsonl has {len(pool.texts)} rows; shadow models need at least 4 "
                             "(re-inject with a larger --public-size).")
    specs = public_half_specs(len(pool.texts), options.shadow_models, options.seed)
    models, notes = train_shadows(source=context.scorer.source, run=context.data, pool=pool, specs=specs, attack=attack,
                                  cache=cache_root(options.shadow_cache), max_minutes=options.max_shadow_minutes,
                                  overrides=options.shadow_overrides, what=what)
    if not models:
        raise UserInputError(f"--max-shadow-minutes {options.max_shadow_minutes:g}: no shadow model could be trained in "
                             "time; raise it.")
    scorers = load_scorers(context, models)
    context._public_shadows = (models, scorers, pool, notes)
    return context._public_shadows


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


class ShadowAttack:
    """Shokri et al.: an attack classifier trained on shadow models' in/out features."""

    name: ClassVar[str] = "shadow"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER})

    @classmethod
    def check(cls, options: Any, source: Any, run: Any) -> None:
        """Shadow models are trained like the target: its manifest must name the trainer and Config."""
        from dpaudit.attacks.shadows import target_recipe

        precheck(options, run)
        target_recipe(source, cls.name)

    def run(self, context: AttackContext) -> AttackOutcome:
        options = context.options
        tasks = membership_tasks(context)
        models, scorers, pool, notes = public_shadows(context, self.name)
        labels = pool_label_ids(context.scorer.source.label_set(), pool)
        xs, ys = [], []
        for model, scorer in zip(models, scorers):
            xs.append(features(scorer, pool.texts, labels, options.seed))
            ys.append(model.spec.member.astype(int))
        clf = attack_classifier(options.attack_model, options.seed).fit(np.concatenate(xs), np.concatenate(ys))
        scored = [(t, clf.predict_proba(features(context.scorer, t.texts, t.labels, options.seed))[:, 1]) for t in tasks]
        feature_names = ("sorted class probabilities, loss, entropy" if context.scorer.kind == CLASSIFIER else
                         f"top-{TOP_K} masked-token probabilities (sorted, averaged over masked positions), loss, entropy")
        params = {"score": "attack-model member probability; higher = member", "shadow_models": len(models),
                  "shadow_models_asked": options.shadow_models, "shadow_data": "random halves of public.jsonl",
                  "attack_model": options.attack_model, "features": feature_names,
                  "cached": sum(m.cached for m in models), "shadow_overrides": options.shadow_overrides or {}}
        return audit_tasks(context, self.name, scored, parameters=params, warnings=notes)
