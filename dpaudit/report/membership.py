"""Find the membership-inference audits inside typed attack results.

Membership attacks (loss, shadow, LiRA, RMIA, reference) each store one
:class:`dpaudit.audit.AuditResult` per membership task (examples, canaries, coin-flip canaries).
The report does not depend on how an attack's result class nests them: it walks the result's
dataclass fields and collects every :class:`AuditResult` instance it holds, naming the task by the
enclosing record's ``task`` field, else by the dict key or field name. A result class may instead
(or also) define ``membership_audits() -> Mapping[str, AuditResult]`` (task -> audit), which wins.

The blind baseline (:mod:`dpaudit.attacks.blind`, Das et al. 2024) is rendered beside the attacks (its
ROC and row, marked as a baseline) but is never "the strongest attack": it never queried the model.
:func:`distribution_shift_notes` says, one sentence per task, when a model-based attack does not beat it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit.attacks.results import AttackResults
from dpaudit.audit import AuditResult


@dataclass(frozen=True, kw_only=True)
class MembershipAudit:
    """One attack's audit of one membership task."""

    attack: str
    task: str
    audit: AuditResult
    baseline: bool = False

    @property
    def name(self) -> str:
        attack = f"{self.attack} baseline" if self.baseline else self.attack
        return f"{attack} ({self.task})" if self.task else attack

    def tpr(self, fpr: float) -> Any:
        """The :class:`dpaudit.audit.TprAtFpr` reported at ``fpr`` (None when not computed)."""
        for t in self.audit.tpr_at_fpr:
            if abs(t.fpr - fpr) <= 1e-12:
                return t
        return None


def _walk(value: Any, label: str) -> Iterator[tuple[str, AuditResult]]:
    if isinstance(value, AuditResult):
        yield label, value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        task = getattr(value, "task", None)
        inner_label = task if isinstance(task, str) and task else label
        for f in dataclasses.fields(value):
            yield from _walk(getattr(value, f.name), inner_label or f.name)
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            yield from _walk(value[key], str(key))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item, label)


def membership_audits(results: AttackResults) -> tuple[MembershipAudit, ...]:
    """Every (attack, task, AuditResult) in ``results``, in the order the attacks ran."""
    found: list[MembershipAudit] = []
    for result in results.attacks:
        own = getattr(result, "membership_audits", None)
        if callable(own):
            pairs = list(own().items())
        else:
            pairs = [pair for f in dataclasses.fields(result) for pair in _walk(getattr(result, f.name), "")]
        baseline = bool(getattr(result, "baseline", False))
        found.extend(
            MembershipAudit(attack=result.attack, task=task, audit=audit, baseline=baseline) for task, audit in pairs
        )
    return tuple(found)


def distribution_shift_notes(results: AttackResults) -> tuple[str, ...]:
    """One sentence per membership task on which some model-based attack does not beat the blind baseline (the
    lower end of its AUC interval not above the blind AUC): the signal may be distribution shift, not memorization.
    Computed from the typed results, so attack directories written before the warning was stored get it too.

    Only where there is a signal to explain: the blind baseline's or some attack's AUC interval above 1/2 on that
    task. When neither tells members from non-members there is no signal, shifted or not, and the sentence would
    suggest one."""
    from dpaudit.attacks.blind import blind_comparison
    from dpaudit.attacks.results import MiaResult

    signal = {
        t.task.replace("-offline", "", 1)
        for r in results.attacks
        if isinstance(r, MiaResult)
        for t in r.tasks
        if t.auc_ci[0] > 0.5
    }
    return tuple(s for s in blind_comparison(results.attacks) if s.split(":", 1)[0] in signal)


def strongest(audits: tuple[MembershipAudit, ...]) -> MembershipAudit | None:
    """The model-based audit with the highest AUC (ties: the higher TPR at the lowest FPR), or None; baselines
    (the blind one) are never the strongest attack."""
    audits = tuple(a for a in audits if not a.baseline)
    if not audits:
        return None
    return max(audits, key=lambda a: (a.audit.auc.value, a.audit.tpr_at_fpr[0].tpr if a.audit.tpr_at_fpr else 0.0))
