"""What ``dpaudit attack`` prints under its summary table, from the same rules as the report page.

- a TPR cell reads "n/a" when the non-members cannot resolve its FPR (:func:`tpr_cell`), and one footnote
  says what it needs ("n/a: TPR at 0.1% FPR needs >= 1000 non-members, have 10");
- the warnings stored inside the membership audits (group bounds, the f-DP bound above a claim, ...), which
  the run does not print as it goes, one line per distinct warning naming every audit it came from;
- the hint that a non-private model showing nothing may be undertrained, with its held-out figure.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dpaudit.report.measurable import tpr_rate_from_json

__all__ = ["attack_notes", "tpr_cell"]


def tpr_cell(t: Mapping[str, Any] | None, n_members: int, n_nonmembers: int, spec: str = ".3f") -> str:
    """One ``tpr_at`` entry of a membership task as a table cell: the TPR, "n/a" when unmeasurable, "-" when absent."""
    if t is None:
        return "-"
    rate = tpr_rate_from_json(t, n_members, n_nonmembers)
    return "n/a" if not rate.measurable else format(rate.value, spec)


def _task_warnings(results: Any) -> list[str]:
    from dpaudit.report.membership import membership_audits
    from dpaudit.report.sections import _restated, _tpr_warning, grouped_warnings

    pairs = [
        (f"{a.attack}/{a.task}", w)
        for a in membership_audits(results)
        for w in a.audit.warnings
        if not _restated(w) and not _tpr_warning(w)
    ]
    return list(grouped_warnings(pairs))


def _unmeasurable(results: Any) -> list[str]:
    from dpaudit.report.membership import membership_audits

    needs = {
        (t.fpr, t.min_nonmembers, t.n_nonmembers): None
        for a in membership_audits(results)
        for t in a.audit.tpr_at_fpr
        if not t.enough_nonmembers
    }
    return [
        f"n/a: TPR at {fpr:.3g} FPR needs >= {need} non-members, have {have} (it would be TPR at zero false positives)"
        for fpr, need, have in needs
    ]


def attack_notes(results: Any, out: str | os.PathLike[str] | None = None) -> list[str]:
    """The lines ``dpaudit attack`` prints after its summary (empty when there is nothing to add).

    ``out``: the attack directory just written; its upstream train run gives the held-out figure of the
    undertrained hint (read and hash-checked as the report reads it; left out when unreadable).
    """
    from dpaudit.report.measurable import zero_bound_reason
    from dpaudit.verdict.headline import headline_of

    lines = _unmeasurable(results) + [f"note: {w}" for w in _task_warnings(results)]
    why = zero_bound_reason(headline_of(results).best)
    if why:
        lines.append(f"epsilon >= 0 is {why}.")
    hint = _undertrained(results, out)
    if hint:
        lines.append(f"hint: {hint}")
    return lines


def _undertrained(results: Any, out: str | os.PathLike[str] | None) -> str | None:
    from dpaudit.attacks.results import ExposureResult
    from dpaudit.common.errors import UserInputError
    from dpaudit.report.membership import membership_audits, strongest
    from dpaudit.report.sections import undertrained_hint, utility_view

    exposure = next((r for r in results.attacks if isinstance(r, ExposureResult)), None)
    top = max(
        (r for r in (exposure.rows if exposure else ()) if r.frequency > 0), key=lambda r: r.frequency, default=None
    )
    mia = strongest(membership_audits(results))
    utility = None
    if out is not None and results.claimed.private is False:
        from dpaudit.report.load import load_run

        try:
            utility = load_run(out).utility
        except (UserInputError, OSError, ValueError):
            utility = None
    return undertrained_hint(results.claimed.private, top, mia, utility_view("", utility))
