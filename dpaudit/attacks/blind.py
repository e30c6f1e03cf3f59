"""The blind baseline (Das et al. 2024): tell members from non-members without looking at the model.

A membership task is only evidence about the model if its members and non-members come from the same
distribution. When they do not (members = an older crawl, longer texts, the labels that are common in
train), a classifier that never queries the model separates them too, and a model-based attack that
does no better measures the distribution shift, not memorization. Das, Zhang & Tramer (2024) found such
blind attacks beat the published membership attacks on most foundation-model benchmarks; on intent data
"longer text = member" scored AUC 0.567 and "the label's count in train" 0.590.

Features of a candidate, none from the model:

- word unigrams and bigrams and character 2-4-grams of its text, hashed (scikit-learn's
  ``HashingVectorizer``: stateless, so no vocabulary is fitted on the scored rows), l2-normalized;
  of the 2^18 columns only those some candidate of the task has are kept (below);
- its length: log(1 + characters), log(1 + words), standardized on the fitting folds;
- for a classifier, its label one-hot (what "the label's count in train" needs).

A logistic regression is cross-fitted: stratified k-fold (:data:`FOLDS`, fewer when a side is smaller),
shuffled by the public ``--seed``; each candidate is scored by the model fitted on the other folds, so
the pooled scores' AUC is an out-of-sample estimate, and they go through :func:`dpaudit.audit.audit_scores`
like every attack's. A hashed column no candidate of the task has is left out of the fit: its weight is exactly 0
at every step of liblinear's solver (starting at 0, its gradient and every Newton direction are its own L2 term, 0),
and it adds 0 to every score, so the fit is the one over all 2^18 columns, at the cost of the few thousand columns
the texts use: liblinear's vector operations run over every column, and a task of 200 short texts took 1-5 s of CPU
(its 5 fits) instead of 0.07 s. The scores agree with the full fit's to ~1e-13, not bit for bit (the BLAS dot
products sum the shorter vectors in another grouping); their order and AUC were the same in all 48 cross-fits
compared (the demo's and the test fixtures' tasks, 3 seeds, with and without labels), and
``tests/attacks/test_blind.py`` checks one against the full fit. A feature with no signal lands slightly BELOW 0.5 when cross-fitted (the held-out fold
leans against what the other folds learned: SNIPS labels alone, train vs test rows, 0.467; see
``benchmarks/bench_blind_baseline.py``), so the baseline errs toward warning less, never more. Its bounds are not about the model: the result is a baseline
(:attr:`dpaudit.attacks.results.BlindResult.baseline`), left out of the headline and compared with the
claim nowhere, and coin-flip canaries get no one-run bound from it (a cross-fitted score of one canary
depends on the other canaries' coins, which the one-run analysis does not allow).

:func:`blind_separation` says, one sentence per task, when the baseline itself separates the sides (its AUC
interval above 1/2: a distribution shift); :func:`blind_comparison` says, one sentence per task, when a model-based
attack does not beat it (the lower end of the attack's AUC confidence interval not above the blind AUC).

References:
  Das, Zhang & Tramer 2024, "Blind Baselines Beat Membership Inference Attacks for Foundation Models".
  Duan et al. 2024, "Do Membership Inference Attacks Work on Large Language Models?" (distribution shift
    between members and non-members).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome
from dpaudit.attacks.mia import MembershipAttack, audit_tasks, membership_tasks
from dpaudit.scoring.source import CAUSAL_LM, CLASSIFIER, MASKED_LM

#: Cross-fitting folds (fewer when the smaller side of a task has fewer candidates).
FOLDS = 5
#: Hashed feature dimensions of the word and character n-grams.
WORD_FEATURES, CHAR_FEATURES = 2**17, 2**17
#: Inverse L2 penalty of the logistic regression.
C = 1.0
#: Feature groups of :func:`blind_scores` (all by default; fewer for ablations).
FEATURES = ("text", "length", "label")
BLIND = "blind"


def _text_features(texts: Sequence[str]) -> Any:
    """[n, WORD_FEATURES + CHAR_FEATURES] sparse hashed n-gram counts (stateless: nothing is fitted)."""
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import HashingVectorizer

    words = HashingVectorizer(n_features=WORD_FEATURES, ngram_range=(1, 2), alternate_sign=False, norm="l2")
    chars = HashingVectorizer(
        n_features=CHAR_FEATURES, analyzer="char_wb", ngram_range=(2, 4), alternate_sign=False, norm="l2"
    )
    return hstack([words.transform(texts), chars.transform(texts)]).tocsr()


def _length_features(texts: Sequence[str]) -> np.ndarray:
    """[n, 2]: log(1 + characters), log(1 + words)."""
    return np.log1p(np.asarray([[len(t), len(t.split())] for t in texts], dtype=np.float64))


def _label_features(labels: Sequence[int] | None, n: int) -> Any:
    """[n, classes] one-hot of the labels present (an empty [n, 0] without labels)."""
    from scipy.sparse import csr_matrix

    if labels is None:
        return csr_matrix((n, 0))
    _, codes = np.unique(np.asarray(labels), return_inverse=True)
    return csr_matrix((np.ones(n), (np.arange(n), codes)), shape=(n, int(codes.max()) + 1))


def folds_for(member: np.ndarray, folds: int = FOLDS) -> int:
    """Stratified folds a task allows: at most ``folds``, at most the smaller side's count (0: not scorable)."""
    smaller = int(min(member.sum(), (~member).sum()))
    return min(folds, smaller) if smaller >= 2 else 0


def blind_scores(
    texts: Sequence[str],
    labels: Sequence[int] | None,
    member: np.ndarray,
    *,
    seed: int,
    folds: int = FOLDS,
    features: Sequence[str] = FEATURES,
) -> np.ndarray:
    """[n] cross-fitted member scores from the text (and label) alone; higher = member.

    ``features``: the groups of :data:`FEATURES` to use (the attack uses all; fewer say which one carries a signal).

    Raises:
        ValueError: fewer than 2 members or 2 non-members (no stratified split), or an unknown feature group.
    """
    if not features or set(features) - set(FEATURES):
        raise ValueError(f"features must be a non-empty subset of {', '.join(FEATURES)}, got {list(features)}.")
    from scipy.sparse import csr_matrix, hstack
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold

    member = np.asarray(member, dtype=bool)
    k = folds_for(member, folds)
    if k < 2:
        raise ValueError(
            f"the blind baseline needs >= 2 members and >= 2 non-members, got {int(member.sum())} and "
            f"{int((~member).sum())}."
        )
    n = len(texts)
    text_x = _text_features(texts) if "text" in features else csr_matrix((n, 0))
    text_x = text_x[:, np.unique(text_x.indices)]  # the columns some candidate has (module docstring)
    label_x = _label_features(labels if "label" in features else None, n)
    length = _length_features(texts) if "length" in features else np.zeros((n, 0))
    if text_x.shape[1] + label_x.shape[1] + length.shape[1] == 0:
        raise ValueError(f"features {list(features)} give no column (the label group needs labels).")
    scores = np.empty(n)
    splits = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed).split(np.zeros(n), member)
    for fit_rows, score_rows in splits:
        mean, std = length[fit_rows].mean(0), length[fit_rows].std(0)
        scaled = csr_matrix((length - mean) / np.where(std > 0, std, 1.0))
        x = hstack([text_x, label_x, scaled]).tocsr()
        model = LogisticRegression(C=C, solver="liblinear", max_iter=1000).fit(x[fit_rows], member[fit_rows])
        scores[score_rows] = model.decision_function(x[score_rows])
    return scores


class BlindAttack(MembershipAttack):
    """Das et al. 2024: a cross-fitted text (and label) classifier that never queries the model."""

    name: ClassVar[str] = BLIND
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CLASSIFIER, CAUSAL_LM})
    #: it scores the membership tasks but never queries the model: the baseline run beside the membership attacks.
    membership: ClassVar[bool] = False
    baseline: ClassVar[bool] = True
    order: ClassVar[int] = 100

    def run(self, context: AttackContext) -> AttackOutcome:
        seed = context.options.seed
        scored, notes = [], []
        for task in membership_tasks(context):
            if folds_for(task.member) < 2:
                notes.append(
                    f"{task.name}: {task.n_members} members and {task.n_nonmembers} non-members are too few "
                    "for a cross-fitted blind baseline (>= 2 each); not scored."
                )
                continue
            plain = dataclasses.replace(task, coin_flip=False)  # no one-run bound from cross-fitted scores
            scored.append((plain, blind_scores(task.texts, task.labels, task.member, seed=seed)))
        labels = context.scorer.kind == CLASSIFIER
        params = {
            "score": "logistic regression on hashed word 1-2-grams and char 2-4-grams of the text, log length"
            + (", label one-hot" if labels else "")
            + "; higher = member; never queries the model",
            "cross_fitting": f"stratified {FOLDS}-fold (fewer for a smaller side), shuffled by --seed; each "
            "candidate scored by the model fitted on the other folds",
            "features": {
                "word_ngrams": [1, 2],
                "char_ngrams": [2, 4],
                "hashed_dims": WORD_FEATURES + CHAR_FEATURES,
                "length": ["log1p chars", "log1p words"],
                "label_one_hot": labels,
            },
            "C": C,
            "baseline": "not about the model: no bound of it enters the headline or meets the claim",
        }
        return audit_tasks(context, self.name, scored, parameters=params, warnings=notes, compare_with_claim=False)


def _base_task(task: str) -> str:
    """LiRA's ``examples-offline`` is the ``examples`` task scored another way (``canaries-offline-f1``: ``canaries-f1``)."""
    return task.replace("-offline", "", 1)


def blind_separation(results: Sequence[Any]) -> list[str]:
    """One sentence per task whose sides the blind baseline itself separates: the lower end of its AUC confidence
    interval above 1/2, so members and non-members differ in distribution and every attack's numbers on that task
    measure the shift as well as memorization (nothing without a blind result)."""
    from dpaudit.attacks.results import MiaResult

    blind = next((r for r in results if isinstance(r, MiaResult) and r.attack == BLIND), None)
    return [
        f"{t.task}: the blind baseline tells members from non-members from the text alone (AUC {t.auc:.3f} "
        f"[{t.auc_ci[0]:.3f}, {t.auc_ci[1]:.3f}], above chance): the two sides differ in distribution, so the "
        "attacks measure that shift as well as memorization; draw members and non-members at random from one pool "
        "where you can (dpaudit inject --resplit: train + held-out re-split at random, then retrain)"
        + (
            "; the headline leaves out this task's audits that do not beat it."
            if t.task.startswith("examples")
            else "."
        )
        for t in (blind.tasks if blind is not None else ())
        if t.auc_ci[0] > 0.5
    ]


def blind_comparison(results: Sequence[Any]) -> list[str]:
    """One sentence per task on which some model-based attack does not beat the blind baseline.

    An attack beats it when the lower end of its AUC confidence interval is above the blind AUC. ``results``
    are attack results (:class:`dpaudit.attacks.results.MiaResult` among them); nothing without a blind result.
    """
    from dpaudit.attacks.results import MiaResult

    blind = next((r for r in results if isinstance(r, MiaResult) and r.attack == BLIND), None)
    if blind is None:
        return []
    base = {t.task: t for t in blind.tasks}
    weak: dict[str, list[str]] = {}
    for r in results:
        if not isinstance(r, MiaResult) or r.baseline:
            continue
        for t in r.tasks:
            ref = base.get(_base_task(t.task))
            if ref is not None and not t.auc_ci[0] > ref.auc:
                name = r.attack + (" (offline)" if "-offline" in t.task else "")
                weak.setdefault(_base_task(t.task), []).append(
                    f"{name} {t.auc:.3f} [{t.auc_ci[0]:.3f}, {t.auc_ci[1]:.3f}]"
                )
    return [
        f"{task}: {', '.join(names)} {'does' if len(names) == 1 else 'do'} not beat the blind baseline (AUC "
        f"{base[task].auc:.3f} [{base[task].auc_ci[0]:.3f}, {base[task].auc_ci[1]:.3f}] from the text alone): the "
        "membership signal may be distribution shift between members and non-members, not memorization."
        for task, names in weak.items()
    ]
