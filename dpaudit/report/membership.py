"""Find the membership-inference audits inside typed attack results.

Membership attacks (loss, shadow, LiRA, RMIA, reference) each store one
:class:`dpaudit.audit.AuditResult` per membership task (examples, canaries, coin-flip canaries).
The report does not depend on how an attack's result class nests them: it walks the result's
dataclass fields and collects every :class:`AuditResult` instance it holds, naming the task by the
enclosing record's ``task`` field, else by the dict key or field name. A result class may instead
(or also) define ``membership_audits() -> Mapping[str, AuditResult]`` (task -> audit), which wins.
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

    @property
    def name(self) -> str:
        return f"{self.attack} ({self.task})" if self.task else self.attack

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
        found.extend(MembershipAudit(attack=result.attack, task=task, audit=audit) for task, audit in pairs)
    return tuple(found)


def strongest(audits: tuple[MembershipAudit, ...]) -> MembershipAudit | None:
    """The audit with the highest AUC (ties: the higher TPR at the lowest FPR), or None."""
    if not audits:
        return None
    return max(audits, key=lambda a: (a.audit.auc.value, a.audit.tpr_at_fpr[0].tpr if a.audit.tpr_at_fpr else 0.0))
