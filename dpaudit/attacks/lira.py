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
models only): the paper's one-sided log Phi((phi_target - mu_out) / s_out) by default, or the reference
code's two-sided -log N(phi_target; mu_out, s_out) (``lira_offline``). Below 64 shadow models (or with
``lira_variance="global"``, and whenever a candidate has fewer than 2 IN or OUT models) one standard
deviation, shared by IN and OUT and by every candidate, is used (the paper's "fixed variance", the
reference code's ``fix_variance``); from 64 up each candidate gets its own IN and OUT variances. Why, as
measured: :data:`PER_EXAMPLE_VARIANCE_FROM`, :data:`DEFAULT_OFFLINE`. Higher = member, as every dpaudit score.

References:
  Carlini, Chien, Nasr, Song, Terzis & Tramer 2022, "Membership Inference Attacks From First
    Principles", section IV (online, offline, fixed variance), section VI-A (variance vs shadow count); the
    reference code (tensorflow/privacy ``research/mi_lira_2021``) for the two-sided offline density.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import audit_tasks, membership_tasks
from dpaudit.attacks.options import ShadowOptions, option
from dpaudit.attacks.shadow_models import (
    ShadowPool,
    ShadowSpec,
    ShadowTrainedAttack,
    cache_root,
    load_scorers,
    models_info,
    target_recipe,
    train_shadows,
    user_shadows,
)
from dpaudit.common.errors import UserInputError
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM

_P_CLIP = 1e-12

#: ``variance`` choices of :func:`fit_and_score`: ``auto`` is ``global`` below :data:`PER_EXAMPLE_VARIANCE_FROM`
#: shadow models and ``per-example`` from it up.
VARIANCE_AUTO: Final = "auto"
VARIANCE_GLOBAL: Final = "global"
VARIANCE_PER_EXAMPLE: Final = "per-example"
VARIANCES = (VARIANCE_AUTO, VARIANCE_GLOBAL, VARIANCE_PER_EXAMPLE)
#: Shadow models from which ``auto`` fits each candidate its own IN and OUT variances. Carlini et al. (2022,
#: section VI-A) find the per-example variance helps only with many shadows (they fix it below 64). Measured
#: on a Gaussian toy where the truth is known (``benchmarks/bench_lira_scoring.py``: 2000 candidates, 5 seeds):
#: with equal per-candidate spreads the per-example fit loses up to 32 shadows (online AUC 0.864 vs 0.900 at 8,
#: TPR at 1% FPR 0.40 vs 0.46 at 32) and matches or beats the shared one from 64 (0.926 vs 0.923); with spreads
#: that vary 5x between candidates it wins from 16 (0.901 vs 0.887). 64 is the smallest count at which it is
#: never worse in AUC across the toy's settings, and the paper's. On real confidences with 8 shadows: 0.58 vs
#: 0.755 shared on the demo canaries, 0.595 vs 0.698 on the tiny test fixture's 64 + 64 examples.
PER_EXAMPLE_VARIANCE_FROM = 64
#: ``offline`` choices: the paper's one-sided test, log Phi((phi - mu_out) / s_out) (a member's confidence
#: is higher than the OUT models'), or the reference code's two-sided density, -log N(phi; mu_out, s_out)
#: (far from the OUT models on either side).
OFFLINE_ONE_SIDED: Final = "one-sided"
OFFLINE_TWO_SIDED: Final = "two-sided"
OFFLINE_TESTS = (OFFLINE_ONE_SIDED, OFFLINE_TWO_SIDED)
#: One-sided by measurement: training on x raises its confidence, so a confidence far BELOW the OUT models'
#: is no evidence of membership; the two-sided density counts it as some. AUC one-sided vs two-sided: 0.87 vs
#: 0.725 on the demo canaries, 0.744 vs 0.682 on the tiny test fixture's examples (8 shadows); on
#: the toy, better in every setting and shadow count (e.g. 0.855 vs 0.788 with 8 shadows and equal spreads).
DEFAULT_OFFLINE: Final = OFFLINE_ONE_SIDED
_S_FLOOR = 1e-6

#: The LiRA choices as ``dpaudit attack --help`` states them (the CLI shows this text).
LIRA_HELP = (
    f"LiRA variance: auto (default) fits one variance shared by IN and OUT and by every candidate below "
    f"{PER_EXAMPLE_VARIANCE_FROM} shadow models, each candidate its own IN and OUT variances from "
    f"{PER_EXAMPLE_VARIANCE_FROM} up, as Carlini et al. 2022 advise; per-example variances from a few shadows "
    "are noisy and made the score fall as confidence rose (demo canaries, 8 shadows: AUC 0.58 vs 0.755 "
    "shared). Offline LiRA: one-sided (default, the paper's log Phi: only a confidence above the OUT models' "
    "counts; demo canaries 0.87 vs 0.725) or two-sided (the reference code's density)."
)


def logit_confidence(loss: np.ndarray) -> np.ndarray:
    """phi = log(p / (1 - p)) with p = exp(-loss), computed stably."""
    loss = np.clip(np.asarray(loss, dtype=np.float64), _P_CLIP, None)
    return -loss - np.log(-np.expm1(-loss))


def balanced_membership(k: int, n: int, seed: int) -> np.ndarray:
    """[k, n] bool: each of n rows IN exactly floor(k/2) of the k models (Carlini et al.'s balanced split)."""
    rng = np.random.default_rng([seed, 0x4C49, k])
    return rng.uniform(size=(k, n)).argsort(axis=0) < k // 2


@dataclass(frozen=True)
class LiraScores:
    """:func:`fit_and_score`'s output: [n] online and offline scores (higher = member) and the fit used.

    Attributes:
        online: log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out).
        offline: the ``offline`` test's score from the OUT models only.
        variance: ``"global"`` or ``"per-example"``, the fit that was used (``auto`` resolved).
        offline_test: ``"one-sided"`` or ``"two-sided"``.
    """

    online: np.ndarray
    offline: np.ndarray
    variance: str
    offline_test: str


def resolve_variance(variance: str, k: int, n_in: np.ndarray, n_out: np.ndarray) -> str:
    """``auto`` -> ``per-example`` from :data:`PER_EXAMPLE_VARIANCE_FROM` shadows up, else ``global``; ``global``
    also whenever a candidate has fewer than 2 IN or 2 OUT models (no variance of its own to fit)."""
    if variance not in VARIANCES:
        raise ValueError(f"variance must be one of {', '.join(VARIANCES)}, got {variance!r}.")
    if (n_in < 2).any() or (n_out < 2).any():
        return VARIANCE_GLOBAL
    if variance == VARIANCE_AUTO:
        return VARIANCE_PER_EXAMPLE if k >= PER_EXAMPLE_VARIANCE_FROM else VARIANCE_GLOBAL
    return variance


def fit_and_score(
    phi_shadow: np.ndarray,
    member: np.ndarray,
    phi_target: np.ndarray,
    *,
    variance: str = VARIANCE_AUTO,
    offline: str = DEFAULT_OFFLINE,
) -> LiraScores:
    """Online and offline LiRA scores from [k, n] shadow confidences and their [k, n] IN flags.

    Per candidate, the means of its IN and OUT confidences. The variance (see :data:`LIRA_HELP`):

    - ``global``: ONE standard deviation for IN and OUT and every candidate, the pooled spread of each
      shadow confidence around its own candidate's IN or OUT mean (the reference code's ``fix_variance``
      shares one too). With one s the online score is (mu_in - mu_out)(2 phi - mu_in - mu_out) / 2 s^2:
      it rises with the confidence whenever mu_in > mu_out, and s only scales it (ranking unchanged).
      When no candidate has two models on a side, s is the spread of all shadow confidences.
    - ``per-example``: each candidate's own IN and OUT sample standard deviations (the paper's online
      attack); needs >= 2 IN and >= 2 OUT models per candidate.

    Raises:
        ValueError: a candidate without an IN or an OUT model, or an unknown choice.
    """
    from scipy.stats import norm

    if offline not in OFFLINE_TESTS:
        raise ValueError(f"offline must be one of {', '.join(OFFLINE_TESTS)}, got {offline!r}.")
    phi_shadow = np.asarray(phi_shadow, dtype=np.float64)
    phi_target = np.asarray(phi_target, dtype=np.float64)
    member = np.asarray(member, dtype=bool)
    n_in, n_out = member.sum(0), (~member).sum(0)
    if (n_in < 1).any() or (n_out < 1).any():
        raise ValueError("every candidate needs at least one IN and one OUT shadow model.")
    mu_in = np.where(member, phi_shadow, 0).sum(0) / n_in
    mu_out = np.where(~member, phi_shadow, 0).sum(0) / n_out
    sq_in = np.where(member, (phi_shadow - mu_in) ** 2, 0).sum(0)
    sq_out = np.where(~member, (phi_shadow - mu_out) ** 2, 0).sum(0)
    used = resolve_variance(variance, phi_shadow.shape[0], n_in, n_out)
    if used == VARIANCE_GLOBAL:
        dof = member.size - 2 * member.shape[1]
        pooled = np.sqrt((sq_in.sum() + sq_out.sum()) / dof) if dof > 0 else 0.0
        shared = pooled if pooled > _S_FLOOR else float(np.std(phi_shadow))
        s_in = s_out = np.full(phi_target.shape, max(shared, _S_FLOOR))
    else:
        s_in = np.maximum(np.sqrt(sq_in / (n_in - 1)), _S_FLOOR)
        s_out = np.maximum(np.sqrt(sq_out / (n_out - 1)), _S_FLOOR)
    online = norm.logpdf(phi_target, mu_in, s_in) - norm.logpdf(phi_target, mu_out, s_out)
    if offline == OFFLINE_ONE_SIDED:
        off = norm.logcdf((phi_target - mu_out) / s_out)
    else:
        off = -norm.logpdf(phi_target, mu_out, s_out)
    return LiraScores(online=online, offline=off, variance=used, offline_test=offline)


def audit_universe(context: AttackContext, tasks: list[Any]) -> tuple[ShadowPool, list[np.ndarray]]:
    """The distinct (text, label) rows of every task and of public.jsonl, and each task's row indices in it."""
    from dpaudit.inject_dir.reader import PUBLIC

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
        labs: list[Any]
        if task.labels is None:
            labs = [None] * len(task.texts)
        else:
            assert names is not None  # a task's label ids index the model's labels
            labs = [names[i] for i in task.labels]
        positions.append(np.asarray([add(t, lab) for t, lab in zip(task.texts, labs)], dtype=np.int64))
    public = run.split(PUBLIC)
    for i, t in enumerate(public.texts):
        if public.labels is None or names is None:
            add(t, None if public.labels is None else public.labels[i])
        elif (class_id := label_set.id_of(public.labels[i])) is not None:  # a row the model has no class for: left out
            add(t, names[class_id])
    return ShadowPool(texts=texts, labels=None if names is None else labels), positions


def lira_specs(pool_size: int, candidates: np.ndarray, k: int, seed: int, train_rows: int | None) -> list[ShadowSpec]:
    """k shadows under the online protocol: each candidate IN for exactly k/2 of them (balanced, Carlini et al.),
    each shadow filled up to the target's ``train_rows`` with pool rows that are no candidate (seeded draws from
    the same public distribution), so it trains on as many rows as the target; without ``train_rows``, each
    filler row is IN for a random half of the shadows."""
    candidates = np.unique(candidates)
    fillers = np.setdiff1d(np.arange(pool_size), candidates)
    keep = balanced_membership(k, candidates.size, seed)
    specs = []
    for i in range(k):
        member = np.zeros(pool_size, bool)
        member[candidates[keep[i]]] = True
        need = (train_rows - int(member.sum())) if train_rows else fillers.size // 2
        if need > 0 and fillers.size:
            rng = np.random.default_rng([seed, 0x4C46, k, i])
            member[rng.choice(fillers, size=min(need, fillers.size), replace=False)] = True
        specs.append(ShadowSpec(index=i, member=member, seed=seed * 1000 + 500 + i))
    return specs


def lira_shadows(
    context: AttackContext, pool: ShadowPool, positions: list[np.ndarray]
) -> tuple[list[Any], list[Any], list[str], Any]:
    """The k shadow models (trained like the target, or ``--shadow-dirs``), their scorers, notes and
    :class:`~dpaudit.attacks.results.ShadowModelsInfo`."""
    options = context.options
    k = options.shadow_models
    candidates = np.concatenate(positions) if positions else np.zeros(0, np.int64)
    notes: list[str]
    if options.shadow_dirs:
        models = user_shadows(options, pool)
        recipe, notes = None, []
        data = f"--shadow-dirs ({len(models)} models; membership from their members.json)"
    else:
        recipe = target_recipe(context.scorer.source, LiraAttack.name, options=options, run=context.data)
        specs = lira_specs(len(pool.texts), candidates, k, options.seed, recipe.rows)
        models, notes = train_shadows(
            source=context.scorer.source,
            run=context.data,
            pool=pool,
            specs=specs,
            attack=LiraAttack.name,
            cache=cache_root(options.shadow_cache),
            options=options,
            max_minutes=options.max_shadow_minutes,
            overrides=options.shadow_overrides,
            what="lira shadow",
            recipe=recipe,
        )
        rows = sorted({m.train_rows for m in models})
        data = (
            f"online protocol over the audit universe ({len(pool.texts)} rows: task candidates + public.jsonl): "
            f"each candidate IN for {k // 2} of {k} shadows (balanced), each shadow filled with random public.jsonl "
            f"rows that are no candidate to {'/'.join(map(str, rows))} rows"
            + (f" (the target trained on {recipe.rows})" if recipe.rows else "")
        )
    if len(models) < 2:
        raise UserInputError(
            f"--attacks lira: only {len(models)} shadow model(s) were trained within "
            f"--max-shadow-minutes {options.max_shadow_minutes}; LiRA needs >= 2, raise the limit."
        )
    info, warnings = models_info(recipe, models, role="shadow", data=data, notes=notes)
    return models, load_scorers(context, models), warnings, info


@dataclass(frozen=True, kw_only=True)
class LiraConfig(ShadowOptions):
    """LiRA's options.

    Its variance fit and its offline test (:data:`LIRA_HELP` says why the defaults).

    Attributes:
        lira_variance: ``auto`` (shared below :data:`PER_EXAMPLE_VARIANCE_FROM` shadows, per-example from it),
            ``global`` or ``per-example``.
        lira_offline: the offline test, ``one-sided`` (the paper's log Phi) or ``two-sided`` (the reference code).
        lira_global_variance: one variance over all examples whatever the shadow count (= ``lira_variance="global"``;
            kept for old commands).
    """

    lira_variance: Literal["auto", "global", "per-example"] = field(default=VARIANCE_AUTO, metadata=option(LIRA_HELP))
    lira_offline: Literal["one-sided", "two-sided"] = field(
        default=DEFAULT_OFFLINE,
        metadata=option(
            "Offline LiRA's test: the paper's one-sided log Phi, or the reference code's two-sided density (see "
            "--lira-variance)."
        ),
    )
    lira_global_variance: bool = field(
        default=False, metadata=option("Same as --lira-variance global (kept for old commands).", hidden=True)
    )


class LiraAttack(ShadowTrainedAttack):
    """Carlini et al. 2022: per-example Gaussian likelihood ratio over shadow models."""

    name: ClassVar[str] = "lira"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})
    Config: ClassVar[type] = LiraConfig
    min_shadows: ClassVar[int] = 2
    min_shadows_why: ClassVar[str] = "each example must be IN some shadows and OUT of others"
    order: ClassVar[int] = 70

    def run(self, context: AttackContext) -> AttackOutcome:
        options = context.options
        tasks = membership_tasks(context)
        pool, positions = audit_universe(context, tasks)
        k = options.shadow_models
        models, scorers, notes, shadow_info = lira_shadows(context, pool, positions)
        member = np.stack([m.spec.member for m in models])
        variance = VARIANCE_GLOBAL if options.lira_global_variance else options.lira_variance
        scored, fits = [], {}
        for task, pos in zip(tasks, positions):
            phi_t = logit_confidence(context.scorer.example_losses(task.texts, task.labels, seed=options.seed))
            phi_s = np.stack(
                [logit_confidence(s.example_losses(task.texts, task.labels, seed=options.seed)) for s in scorers]
            )
            in_task = member[:, pos]
            ok = in_task.any(0) & (~in_task).any(0)
            online, offline = np.full(len(pos), -np.inf), np.full(len(pos), -np.inf)
            if ok.any():
                fit = fit_and_score(
                    phi_s[:, ok], in_task[:, ok], phi_t[ok], variance=variance, offline=options.lira_offline
                )
                online[ok], offline[ok], fits[task.name] = fit.online, fit.offline, fit.variance
            if not ok.all():
                notes.append(
                    f"{task.name}: {int((~ok).sum())} candidates were IN (or OUT of) every trained shadow; "
                    "scored lowest."
                )
            scored.append((task, online))
            scored.append((dataclasses.replace(task, name=f"{task.name}-offline"), offline))
        what = {
            CLASSIFIER: "p = probability of the true label",
            CAUSAL_LM: "p = exp(-mean next-token NLL) (geometric mean probability of the text's tokens)",
        }.get(
            context.scorer.kind,
            "p = exp(-MLM loss) (geometric mean probability of the masked tokens, seeded 15% masking)",
        )
        offline_score = (
            "log Phi((phi - mu_out) / s_out), one-sided"
            if options.lira_offline == OFFLINE_ONE_SIDED
            else "-log N(phi; mu_out, s_out), two-sided"
        )
        params = {
            "score": f"online: log N(phi; in) - log N(phi; out); offline (tasks '*-offline'): {offline_score}; "
            "higher = member",
            "scaling": f"phi = log(p / (1 - p)), {what}",
            "shadow_models": len(models),
            "shadow_models_asked": k,
            "shadow_data": shadow_info.data,
            "variance": variance,
            "variance_used": fits,
            "offline_test": options.lira_offline,
            "per_example_variance_from": PER_EXAMPLE_VARIANCE_FROM,
            "universe": len(pool.texts),
            "cached": sum(m.cached for m in models),
            "shadow_overrides": options.shadow_overrides or {},
        }
        return audit_tasks(context, self.name, scored, parameters=params, warnings=notes, shadow_models=shadow_info)
