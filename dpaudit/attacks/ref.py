"""Reference-model likelihood ratio for masked LMs (Mireshghallah et al. 2022).

score = loss_reference(x) - loss_target(x): the target's loss on x calibrated by a reference model's
loss on the same text under the same seeded masking, so that texts that are simply easy (low loss
for any model) stop looking like members. The reference is ``--reference-model DIR`` (it must use
the target's tokenizer: refused otherwise), the first ``--shadow-dirs`` model, or a model trained like
the target (same trainer and Config, as many rows and optimizer steps) on random rows of
``public.jsonl`` (all of them when it has fewer than the target's), cached like the shadow models.

References:
  Mireshghallah, Goyal, Uniyal, Berg-Kirkpatrick & Shokri 2022, "Quantifying Privacy Risks of Masked
    Language Models Using Membership Inference Attacks" (the likelihood ratio test, section 3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.loss import task_losses
from dpaudit.attacks.mia import audit_tasks, membership_tasks
from dpaudit.attacks.options import ReferenceOptions, ShadowOptions
from dpaudit.attacks.shadow_models import (
    ShadowSpec,
    ShadowTrainedAttack,
    cache_root,
    check_same_tokenizer,
    load_scorers,
    models_info,
    public_pool,
    target_recipe,
    train_shadows,
    user_shadows,
)
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM


def reference_scorer(context: AttackContext, attack: str) -> tuple[object, str, list[str], Any]:
    """The reference model's scorer, a description of it, warnings, and its
    :class:`~dpaudit.attacks.results.ShadowModelsInfo` (None for ``--reference-model``)."""
    from dpaudit.scoring import load, resolve_model

    options = context.options
    if options.reference_model:
        source = resolve_model(options.reference_model, option="--reference-model")
        if source.kind != context.scorer.kind:
            from dpaudit.common.errors import UserInputError

            raise UserInputError(
                f"--reference-model {options.reference_model} is a {source.kind}, the target a "
                f"{context.scorer.kind}; pass a reference of the same kind."
            )
        scorer = load(source, batch_size=context.scorer.batch_size, device=context.scorer.device, progress=False)
        check_same_tokenizer(context.scorer, scorer, option="--reference-model")
        return scorer, f"--reference-model {options.reference_model}", [], None
    pool = public_pool(context.data, context.scorer.source.label_set())
    if options.shadow_dirs:  # the first user-supplied model is the reference
        models = user_shadows(options, pool)[:1]
        info, notes = models_info(
            None, models, role="reference", notes=[], data=f"--shadow-dirs: the first directory ({models[0].path})"
        )
        return load_scorers(context, models)[0], f"--shadow-dirs {models[0].path}", notes, info
    recipe = target_recipe(context.scorer.source, attack, options=options, run=context.data)
    member = np.ones(len(pool.texts), bool)
    if recipe.rows and recipe.rows < len(pool.texts):  # as many rows as the target trained on
        member[:] = False
        member[np.random.default_rng([options.seed, 0x524546]).permutation(len(pool.texts))[: recipe.rows]] = True
    spec = ShadowSpec(index=0, member=member, seed=options.seed * 1000 + 999)
    models, notes = train_shadows(
        source=context.scorer.source,
        run=context.data,
        pool=pool,
        specs=[spec],
        attack=attack,
        cache=cache_root(options.shadow_cache),
        options=options,
        overrides=options.shadow_overrides,
        what="reference",
        recipe=recipe,
    )
    data = f"{int(member.sum())} random rows of public.jsonl ({len(pool.texts)} rows; --seed {options.seed})" + (
        ", as many as the target trained on" if recipe.rows and member.sum() == recipe.rows else ""
    )
    info, notes = models_info(recipe, models, role="reference", data=data, notes=notes)
    return load_scorers(context, models)[0], f"trained like the target on {data}", notes, info


@dataclass(frozen=True, kw_only=True)
class RefConfig(ShadowOptions, ReferenceOptions):
    """The ref attack's options: the shadow options (its reference trains like a shadow) and ``--reference-model``
    (shared with the base attacks: :class:`~dpaudit.attacks.options.ReferenceOptions`)."""


class RefAttack(ShadowTrainedAttack):
    """score = reference loss - target loss (higher = member)."""

    name: ClassVar[str] = "ref"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})
    Config: ClassVar[type] = RefConfig
    order: ClassVar[int] = 60

    @classmethod
    def uses_shadows(cls, options: Any) -> bool:
        """A ``--reference-model`` is the user's: no model is trained like the target, and none is checked."""
        return not options.reference_model

    def run(self, context: AttackContext) -> AttackOutcome:
        tasks = membership_tasks(context)
        reference, described, notes, info = reference_scorer(context, self.name)
        seed = context.options.seed
        scored = [(t, task_losses(reference, t, seed=seed) - task_losses(context.scorer, t, seed=seed)) for t in tasks]
        return audit_tasks(
            context,
            self.name,
            scored,
            warnings=notes,
            shadow_models=info,
            parameters={
                "score": "loss under the reference model - loss under the target (same seeded masking); higher = member",
                "reference_model": described,
                "shadow_overrides": context.options.shadow_overrides or {},
            },
        )
