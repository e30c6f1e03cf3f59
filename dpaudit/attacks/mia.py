"""What every membership-inference attack shares: the membership tasks and the audit call.

The result types (:class:`~dpaudit.attacks.results.MiaResult` and one subclass per attack) live with
every other result in :mod:`dpaudit.attacks.results`.

Membership tasks:

1. **examples**: members = the non-canary rows of ``train.jsonl``, non-members = ``heldout.jsonl``.
   Exact duplicates across the two are removed first (a text that is in both is neither a member nor a
   non-member) and counted; then equal numbers of each are sampled with a recorded seed.
2. **canaries**: inserted canaries (members) vs control canaries (never inserted). In coin-flip mode a
   fair coin decided each canary's membership, and the one-run bounds of Steinke et al. (2023) and
   Mahloujifar et al. (2024) are computed: only those are proofs about this one training run. Canaries
   inserted at several repetition counts are audited per frequency (``canaries-f1``, ``canaries-f4``, ...:
   the canaries inserted f times vs every control): a canary inserted f times is f rows, so only the
   once-inserted group is an audit of the per-example claim, and a mixed audit would be a group audit of
   the largest f that hides it.

Every attack turns a task into scores (higher = member) and hands them to
:func:`dpaudit.audit.audit_scores`; attacks compute no metric themselves. A Clopper-Pearson bound on
the examples of one model is a heuristic audit (the examples are not independent training runs), and
the result says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from dpaudit.attacks.base import AttackOutcome, BaseAttack
from dpaudit.attacks.options import MembershipOptions
from dpaudit.attacks.results import RESULT_CLASSES, MiaTaskResult
from dpaudit.common.errors import UserInputError

#: ROC points kept in the summary (the full ROC stays in ``audit``).
ROC_POINTS = 200
EXAMPLES, CANARIES = "examples", "canaries"
DEFAULT_FPRS = (0.001, 0.01)

HEURISTIC_NOTE = (
    "Clopper-Pearson bounds on the examples or canaries of ONE model are a heuristic audit: members and "
    "non-members of one training run are not independent trials. Only the one-run bounds on coin-flip "
    "canaries (Steinke et al. 2023; Mahloujifar et al. 2024) are proofs for a single training run."
)
PROOF_NOTE = (
    "Coin-flip canaries: the one-run bound of Steinke et al. (2023) is an (epsilon, delta) lower bound for this "
    "single training run at the stated confidence; the f-DP bound (Mahloujifar et al. 2024) refutes mu-GDP "
    "(Gaussian mechanisms only), not an (epsilon, delta) bound. Canaries inserted f > 1 times bound the "
    "epsilon of a group of f rows, not the per-example claim."
)


@dataclass(frozen=True)
class MembershipTask:
    """Candidates of one membership task: texts, labels (classifiers), and who is a member.

    Attributes:
        name: ``"examples"`` or ``"canaries"``.
        texts: members first, then non-members.
        labels: class ids aligned with ``texts`` (None for a masked LM).
        member: bool mask aligned with ``texts``.
        ids: a stable identifier per candidate (row index in its file, or canary id).
        coin_flip: membership decided by independent fair coins.
        info: what was done to build it (seed, duplicates removed, counts), for the result.
        warnings: what the result must say about how it was built (rows left out for labels the model never saw).
    """

    name: str
    texts: list[str]
    labels: list[int] | None
    member: np.ndarray
    ids: list[str]
    coin_flip: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    #: Canaries only: each candidate's insertion count (0 for a control), aligned with ``texts``.
    frequencies: np.ndarray | None = None

    @property
    def n_members(self) -> int:
        return int(self.member.sum())

    @property
    def n_nonmembers(self) -> int:
        return int((~self.member).sum())


def _label_ids(label_set: Any, labels: Sequence[Any] | None) -> list[int | None] | None:
    """Class ids of data labels in the MODEL's label set (its ``id2label``, with the train run's
    ``--unknown-label`` mapping); None for a label the model never saw. None without labels or a label set."""
    if labels is None or label_set is None:
        return None
    return [label_set.id_of(lab) for lab in labels]


def unseen_labels_note(what: str, count: int, label_set: Any) -> str:
    """The warning for ``count`` rows left out of a classifier attack: their labels are not the model's."""
    names = ", ".join(label_set.names[:6]) + (", ..." if len(label_set.names) > 6 else "")
    return (
        f"{count} {what} have a label the model never saw (its labels: {names}) and are left out of the "
        "classifier attacks: a loss of a class the head does not have is undefined. The results are about the "
        "remaining rows only."
    )


def _near_duplicates(
    train: Any, held: Any, m_idx: list[int], h_idx: list[int], *, threshold: float, mode: str
) -> tuple[list[int], list[int], dict[str, Any], list[str]]:
    """The rows of each side that stay once duplicates are treated alike on both sides
    (:mod:`dpaudit.attacks.near_duplicates`): texts equal after normalization are one candidate within a side, and
    the member/non-member pairs at or above the 5-gram Jaccard ``threshold`` are left out at both ends
    (``mode="exclude"``) or kept and counted (``"keep"``); with what was done, and the warning that states it."""
    from dpaudit.attacks.near_duplicates import cross_pairs, first_of_each

    kept_m = [m_idx[k] for k in first_of_each([train.texts[i] for i in m_idx])]
    kept_h = [h_idx[k] for k in first_of_each([held.texts[i] for i in h_idx])]
    pairs = cross_pairs([train.texts[i] for i in kept_m], [held.texts[i] for i in kept_h], threshold=threshold)
    members, nonmembers = pairs.members, pairs.nonmembers
    info = {
        "threshold": threshold,
        "shingles": "character 5-grams of the normalized text (Jaccard similarity)",
        "mode": mode,
        "collapsed_within_train": len(m_idx) - len(kept_m),
        "collapsed_within_heldout": len(h_idx) - len(kept_h),
        "pairs": len(pairs.pairs),
        "members_in_pairs": len(members),
        "nonmembers_in_pairs": len(nonmembers),
        "members_excluded": len(members) if mode == "exclude" else 0,
        "nonmembers_excluded": len(nonmembers) if mode == "exclude" else 0,
    }
    notes = []
    if pairs.pairs:
        what = (
            f"{len(pairs.pairs)} member/non-member pairs are near duplicates (character 5-gram Jaccard >= {threshold:g} "
            f"after normalization; {len(members)} members, {len(nonmembers)} non-members)"
        )
        notes.append(
            f"examples: {what}: both ends left out of the task (--near-duplicates exclude)."
            if mode == "exclude"
            else f"examples: {what}: kept (--near-duplicates keep): a non-member whose twin was trained on is not an "
            "unseen text, so the task's numbers partly measure the split; --near-duplicates exclude leaves them out."
        )
    if mode == "exclude":
        kept_m = [i for k, i in enumerate(kept_m) if k not in members]
        kept_h = [i for k, i in enumerate(kept_h) if k not in nonmembers]
    return kept_m, kept_h, info, notes


def example_task(
    run: Any,
    *,
    seed: int,
    max_per_side: int | None = None,
    label_set: Any = None,
    sample_seed: int | None = None,
    near_duplicates: str = "exclude",
    near_duplicate_threshold: float = 0.8,
) -> MembershipTask:
    """Task 1: non-canary train rows vs heldout rows, de-duplicated, equal counts, seeded sample.

    Exact duplicates across the sides are removed from both (counted in ``duplicates_removed``); then duplicates are
    treated alike on both sides (:func:`_near_duplicates`: within a side, texts equal after normalization are one
    candidate; near-duplicate member/non-member pairs are left out at both ends, or kept with
    ``near_duplicates="keep"``), counted in ``near_duplicates`` and stated in ``warnings``. The equal numbers of
    members and non-members are a random draw seeded by ``sample_seed`` (``--mia-sample-seed``; default ``seed``).
    ``label_set`` (a classifier's, :meth:`dpaudit.scoring.ModelSource.label_set`) encodes the rows' labels;
    rows whose label the model never saw are left out before sampling, counted, and said in ``warnings``.
    """
    from dpaudit.inject_dir.reader import HELDOUT, TRAIN

    canary_texts = {c.text for c in run.canaries}
    train, held = run.split(TRAIN), run.split(HELDOUT)
    m_idx = [i for i, t in enumerate(train.texts) if t not in canary_texts]
    m_set = {train.texts[i] for i in m_idx}
    h_set = set(held.texts)
    both = m_set & h_set
    m_idx = [i for i in m_idx if train.texts[i] not in both]
    h_idx = [i for i, t in enumerate(held.texts) if t not in both]
    dropped_m = sum(train.texts[i] in both for i in range(len(train.texts)) if train.texts[i] not in canary_texts)
    m_idx, h_idx, near, warnings = _near_duplicates(
        train, held, m_idx, h_idx, threshold=near_duplicate_threshold, mode=near_duplicates
    )
    m_ids, h_ids = _label_ids(label_set, train.labels), _label_ids(label_set, held.labels)
    unseen = {"train_rows": 0, "heldout_rows": 0}
    if m_ids is not None and h_ids is not None:
        kept_m, kept_h = [i for i in m_idx if m_ids[i] is not None], [i for i in h_idx if h_ids[i] is not None]
        unseen = {"train_rows": len(m_idx) - len(kept_m), "heldout_rows": len(h_idx) - len(kept_h)}
        m_idx, h_idx = kept_m, kept_h
        if unseen["train_rows"] or unseen["heldout_rows"]:
            warnings.append(
                unseen_labels_note(
                    f"examples-task rows ({unseen['train_rows']} of train.jsonl, "
                    f"{unseen['heldout_rows']} of heldout.jsonl)",
                    unseen["train_rows"] + unseen["heldout_rows"],
                    label_set,
                )
            )
            if not m_idx or not h_idx:
                raise UserInputError(
                    f"--data {run.path}: no {'train.jsonl' if not m_idx else 'heldout.jsonl'} row has a "
                    f"label of the model ({', '.join(label_set.names[:6])}...); attack a classifier "
                    "trained on this data's labels."
                )
    n = min(len(m_idx), len(h_idx))
    if max_per_side is not None:
        n = min(n, max_per_side)
    if n < 2:
        raise UserInputError(
            f"--data {run.path}: only {n} usable member/non-member example pairs (train.jsonl non-canary "
            "rows vs heldout.jsonl after removing duplicates); re-inject with a larger --heldout-size."
        )
    draw = seed if sample_seed is None else sample_seed
    rng = np.random.default_rng([draw, 0x4D4941])  # "MIA"
    pick_m = np.sort(rng.choice(len(m_idx), size=n, replace=False))
    pick_h = np.sort(rng.choice(len(h_idx), size=n, replace=False))
    m_rows = [m_idx[i] for i in pick_m]
    h_rows = [h_idx[i] for i in pick_h]
    texts = [train.texts[i] for i in m_rows] + [held.texts[i] for i in h_rows]
    labels = None
    if m_ids is not None and h_ids is not None:
        labels = [m_ids[i] for i in m_rows] + [h_ids[i] for i in h_rows]
    member = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    ids = [f"train:{i}" for i in m_rows] + [f"heldout:{i}" for i in h_rows]
    info = {
        "sample_seed": int(draw),
        "members_available": len(m_idx),
        "nonmembers_available": len(h_idx),
        "duplicates_removed": {
            "texts": len(both),
            "train_rows": int(dropped_m),
            "heldout_rows": int(sum(t in both for t in held.texts)),
        },
        "near_duplicates": near,
        "per_side": n,
    }
    if labels is not None:
        info["unseen_labels_left_out"] = unseen
    return MembershipTask(EXAMPLES, texts, labels, member, ids, info=info, warnings=tuple(warnings))


def coin_flip_mode(run: Any) -> bool:
    """Whether the inject run decided canary membership by fair coins (``dpaudit inject --coin-flip``)."""
    manifest = run.manifest
    return bool((manifest.get("config") or {}).get("coin_flip")) or manifest.get("mode") in ("coin-flip", "coin_flip")


def canary_task(run: Any, *, label_set: Any = None, notes: list[str] | None = None) -> MembershipTask | None:
    """Task 2: inserted canaries vs controls; None when either side is empty.

    With a classifier's ``label_set``, canaries whose label the model never saw are left out (counted in
    ``info`` and ``warnings``; appended to ``notes`` too when that leaves no task).
    """
    canaries = list(run.canaries)
    label_ids = (
        _label_ids(label_set, [c.label for c in canaries]) if all(c.label is not None for c in canaries) else None
    )
    warnings: list[str] = []
    unseen = 0
    labels: list[int] | None = None
    if label_ids is not None:
        keep = [i for i, lab in enumerate(label_ids) if lab is not None]
        unseen = len(canaries) - len(keep)
        canaries, labels = [canaries[i] for i in keep], [lab for lab in label_ids if lab is not None]
        if unseen:
            warnings.append(unseen_labels_note(f"canaries ({unseen} of {unseen + len(canaries)})", unseen, label_set))
    member = np.asarray([c.member for c in canaries], dtype=bool)
    if not member.any() or member.all():
        if notes is not None:
            notes.extend(warnings)
        return None
    info = {
        "inserted": int(member.sum()),
        "controls": int((~member).sum()),
        "frequencies": sorted({int(c.frequency) for c in canaries if c.member}),
    }
    if labels is not None:
        info["unseen_labels_left_out"] = unseen
    return MembershipTask(
        CANARIES,
        [c.text for c in canaries],
        labels,
        member,
        [c.id for c in canaries],
        coin_flip=coin_flip_mode(run),
        info=info,
        warnings=tuple(warnings),
        frequencies=np.asarray([int(c.frequency) if c.member else 0 for c in canaries], dtype=np.int64),
    )


def per_frequency(task: MembershipTask, scores: np.ndarray) -> list[tuple[MembershipTask, np.ndarray]]:
    """A canaries task whose members were inserted at several frequencies, as one audit per frequency: the canaries
    inserted f times vs every control, named ``<task>-f<f>`` (``canaries-offline`` -> ``canaries-offline-f1``). Any
    other task (the examples, coin-flip canaries: one frequency) is returned as it is."""
    freqs = task.frequencies
    if freqs is None:
        return [(task, scores)]
    inserted = sorted({int(f) for f in freqs[task.member]})
    if len(inserted) <= 1:
        return [(task, scores)]
    out = []
    for f in inserted:
        keep = ~task.member | (freqs == f)
        idx = np.flatnonzero(keep)
        info = {**task.info, "frequencies": [f], "inserted": int((task.member & keep).sum()), "split_from": task.name}
        sub = dataclasses.replace(
            task,
            name=f"{task.name}-f{f}",
            texts=[task.texts[i] for i in idx],
            labels=None if task.labels is None else [task.labels[i] for i in idx],
            member=task.member[idx],
            ids=[task.ids[i] for i in idx],
            info=info,
            frequencies=freqs[idx],
        )
        out.append((sub, np.asarray(scores)[idx]))
    return out


def membership_tasks(context: Any) -> list[MembershipTask]:
    """The tasks of this run (built once per run and cached on the context)."""
    cached = getattr(context, "_mia_tasks", None)
    if cached is not None:
        return cached
    options = context.options
    label_set = context.scorer.source.label_set()  # the model's own labels (None: a masked LM)
    tasks = [example_task(context.data, label_set=label_set, **example_options(options))]
    dropped: list[str] = []
    canaries = canary_task(context.data, label_set=label_set, notes=dropped)
    if canaries is not None:
        tasks.append(canaries)
    elif dropped:  # the canaries task is gone: its note travels with the examples task
        tasks[0] = dataclasses.replace(tasks[0], warnings=tasks[0].warnings + tuple(dropped))
    context._mia_tasks = tasks
    return tasks


def precheck(options: Any, run: Any) -> None:
    """Checks that need only the data, run before any model is loaded: an explicit ``--fpr`` must be measurable."""
    if options.fprs is not None:
        check_fprs(options, [example_task(run, **example_options(options))])


def example_options(options: Any) -> dict[str, Any]:
    """:func:`example_task`'s keywords from a run's options (:class:`~dpaudit.attacks.options.MembershipOptions`)."""
    return {
        "seed": options.seed,
        "max_per_side": options.mia_examples,
        "sample_seed": options.mia_sample_seed,
        "near_duplicates": options.near_duplicates,
        "near_duplicate_threshold": options.near_duplicate_threshold,
    }


class MembershipAttack(BaseAttack):
    """A membership attack: it scores the membership tasks (:func:`membership_tasks`) from the model and audits them
    (:func:`audit_tasks`), and the blind baseline runs beside it. Its options are
    :class:`~dpaudit.attacks.options.MembershipOptions`, or a Config that adds its own to them."""

    Config: ClassVar[type] = MembershipOptions
    membership: ClassVar[bool] = True

    @classmethod
    def check(cls, options: Any, source: Any, run: Any) -> None:
        """An explicit ``--fpr`` must be measurable on the examples task (:func:`precheck`)."""
        del source
        precheck(options, run)


# -- the claim ------------------------------------------------------------------------------------


def claim_of(context: Any) -> tuple[float | None, float]:
    """(claimed epsilon recomputed from privacy.json or None, delta to audit at)."""
    cached = getattr(context, "_mia_claim", None)
    if cached is not None:
        return cached
    from dpaudit.attacks.claim import options_claim

    options = context.options
    claim = options_claim(context.scorer.source, options)
    delta = claim.delta
    if delta is None:  # non-private or unknown: the delta a DP run on these N rows would claim by default
        from dpaudit.accounting import default_delta

        n = len(context.data.train_texts) if context.data is not None else 0
        delta = default_delta(max(n, 2))
    context._mia_claim = (claim.epsilon if claim.private else None, float(delta))
    return context._mia_claim


def check_fprs(options: Any, tasks: Sequence[MembershipTask]) -> tuple[float, ...]:
    """FPRs to report. Defaults warn (in the audit) when too few non-members; explicit ``--fpr`` refuses.

    Decision: TPR at an FPR below 1/n_nonmembers silently becomes TPR at zero false positives. The
    default FPRs (0.1%, 1%) are always reported, with ``enough_nonmembers`` and a warning; an FPR the
    user asked for explicitly must be measurable on the examples task, or the run is refused.
    """
    from dpaudit.audit import min_nonmembers_for

    if options.fprs is None:
        return DEFAULT_FPRS
    for task in tasks:
        if task.name != EXAMPLES:
            continue
        for fpr in options.fprs:
            need = min_nonmembers_for(fpr)
            if task.n_nonmembers < need:
                raise UserInputError(
                    f"--fpr {fpr:g} needs >= {need} non-members but the examples task has "
                    f"{task.n_nonmembers} (heldout.jsonl after de-duplication); ask for --fpr "
                    f">= {1 / task.n_nonmembers:.2g} or re-inject with a larger --heldout-size."
                )
    return tuple(options.fprs)


# -- results --------------------------------------------------------------------------------------


def _downsample_roc(fpr: np.ndarray, tpr: np.ndarray, points: int = ROC_POINTS) -> tuple[list[float], list[float]]:
    """At most ``points`` ROC vertices, always including both ends; spaced evenly in log-FPR and index so
    the low-FPR region a log-axis plot shows keeps its detail."""
    n = fpr.size
    if n <= points:
        return fpr.tolist(), tpr.tolist()
    half = points // 2
    by_index = np.linspace(0, n - 1, half).round().astype(int)
    positive = np.flatnonzero(fpr > 0)
    by_log = np.array([], dtype=int)
    if positive.size:
        targets = np.geomspace(fpr[positive[0]], 1.0, points - half)
        by_log = np.clip(np.searchsorted(fpr, targets, side="right") - 1, 0, n - 1)
    keep = np.unique(np.r_[0, by_index, by_log, n - 1])
    while keep.size > points:  # rare: drop interior points evenly
        keep = np.unique(np.r_[keep[0], keep[1:-1][::2], keep[-1]])
    return fpr[keep].tolist(), tpr[keep].tolist()


def task_result(
    task: MembershipTask, audit: Any, *, scores_file: str, extra_warnings: Sequence[str] = ()
) -> MiaTaskResult:
    """The :class:`~dpaudit.attacks.results.MiaTaskResult` of one task's :class:`dpaudit.audit.AuditResult`."""
    fpr, tpr = _downsample_roc(audit.roc.fpr, audit.roc.tpr)
    tprs = tuple(
        {
            "fpr": t.fpr,
            "tpr": t.tpr,
            "ci": [t.ci.low, t.ci.high],
            "achieved_fpr": t.achieved_fpr,
            "n_nonmembers": t.n_nonmembers,
            "min_nonmembers": t.min_nonmembers,
            "enough_nonmembers": t.enough_nonmembers,
        }
        for t in audit.tpr_at_fpr
    )
    return MiaTaskResult(
        task=task.name,
        n_members=audit.n_members,
        n_nonmembers=audit.n_nonmembers,
        auc=audit.auc.value,
        auc_ci=(audit.auc.ci.low, audit.auc.ci.high),
        tpr_at=tprs,
        advantage=audit.advantage.value,
        roc={"fpr": fpr, "tpr": tpr, "points": len(fpr), "full_points": int(audit.roc.fpr.size)},
        epsilon_lower_bound=audit.epsilon_lower_bound,
        bound_methods=tuple(_bound_label(b) for b in audit.bounds),
        bound_is_proof=bool(task.coin_flip),
        bound_note=PROOF_NOTE if task.coin_flip else HEURISTIC_NOTE,
        claimed_epsilon=audit.claimed_epsilon,
        delta=audit.delta,
        exceeds_claim=audit.exceeds_claim,
        coin_flip=audit.coin_flip,
        scores_file=scores_file,
        info=dict(task.info),
        warnings=tuple(audit.warnings) + tuple(extra_warnings),
        audit=audit.to_json(),
    )


def _bound_label(bound: Any) -> str:
    """One bound in words, rounded down, saying what it refutes (the f-DP one only mu-GDP)."""
    from dpaudit.audit import GUARANTEE_GDP
    from dpaudit.common.figures import format_down
    from dpaudit.verdict.headline import FDP_LABEL

    what = FDP_LABEL if bound.guarantee == GUARANTEE_GDP else bound.guarantee
    return f"{bound.method}/{bound.selection}: {format_down(bound.epsilon, 4)} ({what})"


def _group_size(task: MembershipTask) -> int | None:
    """Rows each member is: 1 for the examples task; the most a canary was inserted for the canaries task;
    None when the task does not record it (such an audit is never compared with the per-example claim)."""
    from dpaudit.verdict.headline import group_size_of

    return group_size_of(task.name, task.info)


def scores_file(attack: str) -> str:
    return f"scores/mia_{attack}.jsonl"


def audit_tasks(
    context: Any,
    attack: str,
    scored: Sequence[tuple[MembershipTask, np.ndarray]],
    *,
    parameters: dict[str, Any],
    warnings: Sequence[str] = (),
    shadow_models: Any = None,
    compare_with_claim: bool = True,
    result_class: type | None = None,
) -> Any:
    """Audit each task's scores and build the attack's outcome (result + ``scores/mia_<attack>.jsonl`` rows).

    ``result_class``: the attack's :class:`~dpaudit.attacks.results.MiaResult` subclass (registered with
    :func:`~dpaudit.attacks.results.register_result`; a plug-in's own); by default the built-in one of ``attack``.

    ``shadow_models`` (:class:`~dpaudit.attacks.results.ShadowModelsInfo`) records the attack's shadow or
    reference models beside the target. ``compare_with_claim=False`` (a baseline that never queries the model,
    :mod:`dpaudit.attacks.blind`): no task's bounds are compared with the claim."""
    from dpaudit.audit import audit_scores

    claimed, delta = claim_of(context)
    if not compare_with_claim:
        claimed = None
    scored = [part for task, scores in scored for part in per_frequency(task, scores)]
    fprs = check_fprs(context.options, [t for t, _ in scored])
    rows: list[dict[str, Any]] = []
    results = []
    for task, scores in scored:
        scores = np.asarray(scores, dtype=np.float64)
        bad = ~np.isfinite(scores)
        extra = []
        if bad.any():  # an example the scorer could not mask (no token left): least member-like, said so
            extra.append(
                f"{int(bad.sum())} {task.name} scores were not finite (e.g. no maskable token) and were "
                "set to the lowest score."
            )
            scores = np.where(bad, np.nanmin(np.where(bad, np.nan, scores)) if (~bad).any() else 0.0, scores)
        group = _group_size(task)
        audit = audit_scores(
            scores[task.member],
            scores[~task.member],
            delta=delta,
            claimed_epsilon=claimed if group is not None else None,
            seed=context.options.seed,
            coin_flip=task.coin_flip,
            fprs=fprs,
            confidence=context.options.level,
            group_size=group or 1,
        )
        results.append(task_result(task, audit, scores_file=scores_file(attack), extra_warnings=extra))
        rows.extend(
            {"task": task.name, "id": i, "member": bool(m), "score": float(s)}
            for i, m, s in zip(task.ids, task.member.tolist(), scores.tolist())
        )
    exceeds = any(r.exceeds_claim for r in results)
    notes = list(warnings) + [w for task, _ in scored for w in task.warnings]
    if exceeds:
        from dpaudit.common.figures import format_down, format_up

        def proof_of(r: Any) -> float:
            return max(b.epsilon for b in r.audit_result().bounds if b.method == "one_run")

        worst = max((r for r in results if r.exceeds_claim), key=proof_of)
        # Per audit, uncorrected: not the alarm. The headline (dpaudit.verdict.headline), corrected for every audit of
        # the run, is what says whether the claim is contradicted.
        notes.insert(
            0,
            f"one-run proof bound {format_down(proof_of(worst))} on {worst.task} is above the claimed epsilon "
            f"{format_up(claimed)} at {context.options.level:.0%} for this audit alone (not corrected for "
            "the other audits of the run): see the headline bound for the verdict.",
        )
    params = {
        **parameters,
        "fprs": list(fprs),
        "delta": delta,
        "bootstrap_seed": context.options.seed,
        "score": parameters.get("score", "higher = member"),
    }
    result = (result_class or RESULT_CLASSES[attack])(
        parameters=params,
        tasks=tuple(results),
        claimed_epsilon=claimed,
        exceeds_claim=exceeds,
        warnings=tuple(notes),
        shadow_models=shadow_models,
    )
    return AttackOutcome(result, score_files={scores_file(attack): rows})
