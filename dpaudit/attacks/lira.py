"""The likelihood-ratio attack, LiRA (Carlini et al. 2022), online and offline.

Shadow models are trained like the target on random halves of the audit universe (the candidates of
every membership task, i.e. train members, heldout non-members and canaries, plus ``public.jsonl``),
so that each candidate is IN exactly half of them (k/2 of k, seeded). For every candidate x and model
f the confidence is logit-scaled, phi = log(p / (1 - p)), where p is:

- classifier: the probability of the true label;
- masked LM: exp(-loss), the geometric mean of the probabilities of the masked tokens under a seeded
  15% masking (the same masks for every model); so phi = -loss - log(1 - exp(-loss)).

Per candidate, Gaussians are fitted to phi over the shadows that had it IN and those that had it OUT.
Online score: log N(phi_target; mu_in, s_in) - log N(phi_target; mu_out, s_out). Offline score (OUT
models only): log Phi((phi_target - mu_out) / s_out). With few shadows (or ``--lira-global-variance``,
automatic when a candidate has fewer than 2 IN or OUT models), one standard deviation of all IN and one of
all OUT confidences is used for every candidate (the paper's "fixed variance" variant). Higher = member, as every dpaudit score.

References:
  Carlini, Chien, Nasr, Song, Terzis & Tramer 2022, "Membership Inference Attacks From First
    Principles", section IV (online, offline, fixed variance).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import audit_tasks, membership_tasks, precheck
from dpaudit.attacks.shadow_models import (
    ShadowPool,
    ShadowSpec,
    cache_root,
    load_scorers,
    target_recipe,
    train_shadows,
)
from dpaudit.errors import UserInputError
from dpaudit.scoring.source import CLASSIFIER, MASKED_LM

_P_CLIP = 1e-12


def logit_confidence(loss: np.ndarray) -> np.ndarray:
    """phi = log(p / (1 - p)) with p = exp(-loss), computed stably."""
    loss = np.clip(np.asarray(loss, dtype=np.float64), _P_CLIP, None)
    return -loss - np.log(-np.expm1(-loss))


def balanced_membership(k: int, n: int, seed: int) -> np.ndarray:
    """[k, n] bool: each of n rows IN exactly floor(k/2) of the k models (Carlini et al.'s balanced split)."""
    rng = np.random.default_rng([seed, 0x4C49, k])
    return rng.uniform(size=(k, n)).argsort(axis=0) < k // 2


def fit_and_score(phi_shadow: np.ndarray, member: np.ndarray, phi_target: np.ndarray, *, global_variance: bool
                  ) -> tuple[np.ndarray, np.ndarray, bool]:
    """Online and offline LiRA scores from [k, n] shadow confidences and their [k, n] IN flags.

    Returns (online, offline, used_global_variance).
    """
    from scipy.stats import norm

    n_in, n_out = member.sum(0), (~member).sum(0)
    if (n_in < 1).any() or (n_out < 1).any():
        raise ValueError("every candidate needs at least one IN and one OUT shadow model.")
    mu_in = np.where(member, phi_shadow, 0).sum(0) / n_in
    mu_out = np.where(~member, phi_shadow, 0).sum(0) / n_out
    use_global = global_variance or (n_in < 2).any() or (n_out < 2).any()
    if use_global:  # Carlini et al.'s fixed variance: the spread of all IN (all OUT) confidences together
        s_in = np.full(phi_target.shape, np.std(phi_shadow[member]))
        s_out = np.full(phi_target.shape, np.std(phi_shadow[~member]))
    else:
        s_in = np.sqrt(np.where(member, (phi_shadow - mu_in) ** 2, 0).sum(0) / (n_in - 1))
        s_out = np.sqrt(np.where(~member, (phi_shadow - mu_out) ** 2, 0).sum(0) / (n_out - 1))
    s_in, s_out = np.maximum(s_in, 1e-6), np.maximum(s_out, 1e-6)
    online = norm.logpdf(phi_target, mu_in, s_in) - norm.logpdf(phi_target, mu_out, s_out)
    offline = norm.logcdf((phi_target - mu_out) / s_out)
    return online, offline, bool(use_global)


def audit_universe(context: AttackContext, tasks: list[Any]) -> tuple[ShadowPool, list[np.ndarray]]:
    """The distinct (text, label) rows of every task and of public.jsonl, and each task's row indices in it."""
    from dpaudit.inject_run import PUBLIC

    run = context.data
    label_set = context.scorer.source.label_set()  # the model's labels: task label ids index them
    names = None if label_set is None else label_set.names
    index: dict[tuple[str, Any], int] = {}
    texts: list[str] = []
    labels: list[Any] = []

    def add(text: str, label: Any) -> int:
        key = (text, label)
        if key not in index:
            index[key] = len(texts)
            texts.append(text)
            labels.append(label)
        return index[key]

    positions = []
    for task in tasks:
        labs = [None] * len(task.texts) if task.labels is None else [names[i] for i in task.labels]
        positions.append(np.asarray([add(t, lab) for t, lab in zip(task.texts, labs)], dtype=np.int64))
    public = run.split(PUBLIC)
    for i, t in enumerate(public.texts):
        if public.labels is None or names is None:
            add(t, None if public.labels is None else public.labels[i])
        elif (class_id := label_set.id_of(public.labels[i])) is not None:  # a row the model has no class for: left out
            add(t, names[class_id])
    return ShadowPool(texts=texts, labels=None if names is None else labels), positions


class LiraAttack:
    """Carlini et al. 2022: per-example Gaussian likelihood ratio over shadow models."""

    name: ClassVar[str] = "lira"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER})

    @classmethod
    def check(cls, options: Any, source: Any, run: Any) -> None:
        precheck(options, run)
        if options.shadow_models < 2:
            raise UserInputError(f"--attacks lira needs --shadow-models >= 2 (each example must be IN some shadows and OUT "
                                 f"of others), got {options.shadow_models}.")
        target_recipe(source, cls.name)

    def run(self, context: AttackContext) -> AttackOutcome:
        options = context.options
        tasks = membership_tasks(context)
        pool, positions = audit_universe(context, tasks)
        k = options.shadow_models
        keep = balanced_membership(k, len(pool.texts), options.seed)
        specs = [ShadowSpec(index=i, member=keep[i], seed=options.seed * 1000 + 500 + i) for i in range(k)]
        models, notes = train_shadows(source=context.scorer.source, run=context.data, pool=pool, specs=specs,
                                      attack=self.name, cache=cache_root(options.shadow_cache),
                                      max_minutes=options.max_shadow_minutes, overrides=options.shadow_overrides,
                                      what="lira shadow")
        if len(models) < 2:
            raise UserInputError(f"--attacks lira: only {len(models)} shadow model(s) were trained within "
                                 f"--max-shadow-minutes {options.max_shadow_minutes}; LiRA needs >= 2, raise the limit.")
        scorers = load_scorers(context, models)
        member = np.stack([m.spec.member for m in models])
        scored, global_used = [], False
        for task, pos in zip(tasks, positions):
            phi_t = logit_confidence(context.scorer.example_losses(task.texts, task.labels, seed=options.seed))
            phi_s = np.stack([logit_confidence(s.example_losses(task.texts, task.labels, seed=options.seed))
                              for s in scorers])
            in_task = member[:, pos]
            ok = in_task.any(0) & (~in_task).any(0)
            online, offline = np.full(len(pos), -np.inf), np.full(len(pos), -np.inf)
            if ok.any():
                on, off, g = fit_and_score(phi_s[:, ok], in_task[:, ok], phi_t[ok],
                                           global_variance=options.lira_global_variance)
                online[ok], offline[ok], global_used = on, off, global_used or g
            if not ok.all():
                notes.append(f"{task.name}: {int((~ok).sum())} candidates were IN (or OUT of) every trained shadow; "
                             "scored lowest.")
            scored.append((task, online))
            scored.append((dataclasses.replace(task, name=f"{task.name}-offline"), offline))
        what = ("p = probability of the true label" if context.scorer.kind == CLASSIFIER else
                "p = exp(-MLM loss) (geometric mean probability of the masked tokens, seeded 15% masking)")
        params = {"score": "online: log N(phi; in) - log N(phi; out); offline (tasks '*-offline'): log Phi((phi - mu_out) "
                           "/ s_out); higher = member",
                  "scaling": f"phi = log(p / (1 - p)), {what}", "shadow_models": len(models), "shadow_models_asked": k,
                  "shadow_data": "balanced random halves of the audit universe (task candidates + public.jsonl); each "
                                 f"candidate IN {k // 2} of {k}",
                  "global_variance": global_used, "universe": len(pool.texts), "cached": sum(m.cached for m in models),
                  "shadow_overrides": options.shadow_overrides or {}}
        return audit_tasks(context, self.name, scored, parameters=params, warnings=notes)
