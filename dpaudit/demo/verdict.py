"""The demo's three-line verdict, read back from the attack directories (never from memory).

One line per comparison: the non-private masked LM, the epsilon-8 masked LM, the one-run audit of each
(coin-flip designed canaries inserted once, the canary attack) when it ran, the two causal LMs (``--causal``:
exposure, greedy extraction by repetition count, membership beside the blind baseline) when they ran, and the
intent classifiers (sgd vs edp-sgd mode) when they ran. Exposure is the secret's rank among all |R|
candidates in bits (Carlini et al. 2019), compared with never-inserted controls by a one-sided
Mann-Whitney test; the empirical epsilon lower bound is the headline of :mod:`dpaudit.verdict.headline` (the
report's and ``dpaudit attack``'s too): valid at 95% over every audit it is chosen from, only audits
of the claim's unit, its kind named (proof or heuristic), rounded down; claims rounded up.

Each masked LM's and classifier's line states its held-out utility beside the trivial baseline (always the
most frequent token, always the majority class: the best constant prediction on the same rows), read from
the train run's ``metrics.jsonl`` the attack recorded as an input (hash-checked), else its manifest summary;
a run written before the trainers logged baselines shows its figure alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dpaudit.attacks.results import (
    AttackResults,
    CanaryResult,
    ExposureResult,
    ExposureRow,
    MiaResult,
    ReconstructionResult,
)
from dpaudit.training.baselines import UTILITY_KINDS, eval_rows_text

#: Significance level of "memorized" (the top group's exposure above the controls').
ALPHA = 0.05


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def utility_text(row: Mapping[str, Any]) -> str | None:
    """``held-out MLM accuracy 48.8% on 512 of 880 held-out rows (trivial baseline 6.0%: always the most frequent
    token)`` of an evaluation row or summary (the rows when it records them); the figure alone without a baseline;
    None without a held-out figure."""
    for kind in UTILITY_KINDS:
        keys, baseline_key, name, rule = kind.keys, kind.baseline_key, kind.name, kind.rule
        value = next((_number(row.get(k)) for k in keys if _number(row.get(k)) is not None), None)
        if value is None:
            continue
        baseline = _number(row.get(baseline_key))
        rows = eval_rows_text(row)
        on = "" if rows is None else f" {rows}"  # the first --eval-examples rows only
        if baseline is None:
            return f"{name} {value:.1%}{on}"
        digits = 1
        while value != baseline and f"{value:.{digits}%}" == f"{baseline:.{digits}%}" and digits < 6:
            digits += 1
        worse = "" if value > baseline else ", no better"
        return f"{name} {value:.{digits}%}{on} (trivial baseline {baseline:.{digits}%}: {rule}{worse})"
    return None


def read_utility(attack_dir: Path) -> str | None:
    """The held-out utility of the model an attack directory audited (:func:`utility_text` of the train run's last
    evaluation in the ``metrics.jsonl`` its manifest lists, else the train manifest's summary); None when neither
    is there or the file changed since the attack."""
    from dpaudit.files.run_dirs import MANIFEST_NAME, load_manifest, read_jsonl, sha256_file

    inputs = load_manifest(attack_dir).get("inputs") or {}
    recorded = next((p for p in sorted(inputs) if Path(p).as_posix().endswith("metrics.jsonl")), None)
    if recorded is None:
        return None
    path = next((c for c in (Path(recorded), attack_dir.parent / recorded) if c.is_file()), None)
    if path is None or sha256_file(path) != inputs[recorded]:
        return None
    for row in reversed([r for r in read_jsonl(path) if isinstance(r, dict)]):
        text = utility_text(row)
        if text is not None:
            return text
    try:
        summary = json.loads((path.parent / MANIFEST_NAME).read_text(encoding="utf-8")).get("summary")
    except (OSError, ValueError, AttributeError):
        return None
    return utility_text(summary) if isinstance(summary, Mapping) else None


def _claim(results: AttackResults) -> str:
    claim = results.claimed
    return "non-private" if claim.known and not claim.private else claim.text()


def _bound_text(results: AttackResults) -> str:
    from dpaudit.verdict.headline import headline_of

    head = headline_of(results)
    if not head.bounds:
        return ""
    return "; " + head.text()


def mlm_line(label: str, results: AttackResults, utility: str | None = None) -> str:
    """Held-out utility (:func:`utility_text`, when given), exposure of each inserted group vs the controls, exact
    reconstructions of the top group, lower bound.

    The top group's outcome is named: MEMORIZED for a model without a guarantee, "above the controls" with what it
    is for a DP model (canaries repeated f times are a group of f rows, covered only by group privacy: none at 100x
    and epsilon 8), or indistinguishable from the controls; the lower groups are listed too.
    """
    head = f"{label} ({_claim(results)}): " + (f"{utility}; " if utility else "")
    exposure = next((r for r in results.attacks if isinstance(r, ExposureResult)), None)
    rows = {row.frequency: row for row in (exposure.rows if exposure else ())}
    inserted = sorted(f for f in rows if f > 0)
    if not inserted or 0 not in rows:
        return f"{head}no exposure result."
    top, controls = rows[inserted[-1]], rows[0]
    recon = next((r for r in results.attacks if isinstance(r, ReconstructionResult)), None)
    exact = next((r for r in (recon.rows if recon else ()) if r.frequency == top.frequency), None)

    found = _found(_p_value(top), top.frequency, results.claimed.private)
    text = (
        f"{head}{top.frequency}x canaries {top.mean:.1f} bits of exposure vs "
        f"{controls.mean:.1f} for controls (p = {_p_value(top):.2g})"
    )
    if exact is not None:
        text += f", {exact.exact_matches}/{exact.n} reconstructed exactly"
    text += f": {found}"
    lower = [rows[f] for f in inserted[:-1]]
    if lower:
        text += "; " + ", ".join(f"{r.frequency}x {r.mean:.1f} bits (p = {_p_value(r):.2g})" for r in lower)
    return text + _bound_text(results)


def _found(p: float, frequency: int, private: bool | None) -> str:
    """The top group's outcome: MEMORIZED (no guarantee), or for a DP model what its canaries are (a group of f rows
    the per-example claim covers only by group privacy; "memorized" would read as the claim failing)."""
    if not p < ALPHA:
        return "indistinguishable from the controls"
    if not private:
        return "MEMORIZED"
    if frequency == 1:
        return "above the controls (single rows: the per-example claim covers them; see the lower bound)"
    return (
        f"above the controls: each is a group of {frequency} rows, which the per-example claim covers only by "
        "group privacy"
    )


def causal_line(label: str, results: AttackResults, utility: str | None = None) -> str:
    """A causal LM: held-out next-token utility, exposure of the top group vs the controls, greedy extraction of the
    secret from its prefix by repetition count (controls included), the strongest membership attack on the examples
    beside the blind baseline, and the lower bound."""
    head = f"{label} ({_claim(results)}): " + (f"{utility}; " if utility else "")
    exposure = next((r for r in results.attacks if isinstance(r, ExposureResult)), None)
    rows = {row.frequency: row for row in (exposure.rows if exposure else ())}
    inserted = sorted(f for f in rows if f > 0)
    parts = []
    if inserted and 0 in rows:
        top, controls = rows[inserted[-1]], rows[0]
        p = _p_value(top)
        found = _found(p, top.frequency, results.claimed.private)
        lower = ", ".join(
            f"{rows[f].frequency}x {rows[f].mean:.1f} bits (p = {_p_value(rows[f]):.2g})" for f in inserted[:-1]
        )
        parts.append(
            f"{top.frequency}x canaries {top.mean:.1f} bits of exposure vs {controls.mean:.1f} for controls "
            f"(p = {p:.2g}): {found}" + (f"; {lower}" if lower else "")
        )
    recon = next((r for r in results.attacks if isinstance(r, ReconstructionResult)), None)
    if recon is not None and recon.rows:
        counts = ", ".join(
            f"{'controls' if r.frequency == 0 else f'{r.frequency}x'} {r.exact_matches}/{r.n}"
            for r in sorted(recon.rows, key=lambda r: -r.frequency)
        )
        parts.append(f"secrets extracted greedily from their prefix: {counts}")
    mia = [
        (t.auc, r.attack)
        for r in results.attacks
        if isinstance(r, MiaResult) and not r.baseline
        for t in r.tasks
        if t.task == "examples"
    ]
    blind = [
        t.auc
        for r in results.attacks
        if isinstance(r, MiaResult) and r.baseline
        for t in r.tasks
        if t.task == "examples"
    ]
    if mia:
        auc, attack = max(mia)
        parts.append(
            f"best membership AUC on members vs held-out rows {auc:.2f} ({attack})"
            + (f", blind baseline {blind[0]:.2f}" if blind else "")
        )
    return head + ("; ".join(parts) if parts else "no canary or membership result") + _bound_text(results)


def _p_value(row: ExposureRow) -> float:
    """The row's one-sided p-value against the never-inserted controls (NaN when it has none)."""
    return row.vs_controls.p_value if row.vs_controls is not None else float("nan")


def audit_line(label: str, results: AttackResults) -> str:
    """The one-run audit: the canary attack on coin-flip designed canaries (inserted once), its TPR at 1% FPR
    and the headline bound, a proof for this one training run (Steinke et al. 2023)."""
    canary = next((r for r in results.attacks if isinstance(r, CanaryResult)), None)
    task = next((t for t in (canary.tasks if canary else ()) if t.task == "canaries"), None)
    if task is None or canary is None:
        return f"{label} ({_claim(results)}): no one-run canary audit."
    from dpaudit.audit import min_nonmembers_for

    tpr = next((x["tpr"] for x in task.tpr_at if abs(x["fpr"] - 0.01) < 1e-12), float("nan"))
    need = min_nonmembers_for(0.01)  # with fewer non-members it would be TPR at zero false positives: not shown
    tpr_text = (
        f"TPR {tpr:.0%} at 1% FPR"
        if task.n_nonmembers >= need
        else f"TPR at 1% FPR n/a (needs >= {need} non-members, have {task.n_nonmembers})"
    )
    design = canary.parameters.get("design", "designed")
    return (
        f"{label} ({_claim(results)}): {task.n_members + task.n_nonmembers} coin-flip {design} canaries, "
        f"{task.n_members} inserted once: AUC {task.auc:.2f}, {tpr_text}{_bound_text(results)}"
    )


def classifier_line(pairs: Sequence[tuple[str, AttackResults]], utilities: Sequence[str | None] = ()) -> str:
    """One line for the classifiers: each one's held-out utility (``utilities``, in order, when given), strongest
    membership attack (AUC) and lower bound."""
    parts = []
    for i, (label, results) in enumerate(pairs):
        tasks = [
            (t.auc, r.attack, t.task)
            for r in results.attacks
            if isinstance(r, MiaResult) and not r.baseline
            for t in r.tasks
        ]
        auc, attack, task = max(tasks, default=(float("nan"), "-", "-"))
        from dpaudit.verdict.headline import headline_of

        head = headline_of(results)
        claim = _claim(results)
        bound = head.text() if head.best is not None else "no eligible lower bound"
        utility = utilities[i] if i < len(utilities) else None
        parts.append(
            f"{label} ({claim}) {f'{utility}, ' if utility else ''}best membership AUC {auc:.2f} ({attack}/{task}), "
            f"{bound}"
        )
    return "intent classifiers: " + "; ".join(parts)


def verdict_lines(
    mlm: Sequence[tuple[str, Path]],
    classifiers: Sequence[tuple[str, Path]],
    missing_classifiers: str | None,
    audits: Sequence[tuple[str, Path]] = (),
    causal: Sequence[tuple[str, Path]] = (),
) -> list[str]:
    """The lines: each masked LM, each one-run audit, each causal LM, then the classifiers (or why they did not run)."""
    from dpaudit.attacks.run import read_attack_dir

    lines = [mlm_line(label, read_attack_dir(path), read_utility(Path(path))) for label, path in mlm]
    lines += [audit_line(label, read_attack_dir(path)) for label, path in audits]
    lines += [causal_line(label, read_attack_dir(path), read_utility(Path(path))) for label, path in causal]
    if classifiers:
        lines.append(
            classifier_line(
                [(label, read_attack_dir(path)) for label, path in classifiers],
                [read_utility(Path(path)) for _, path in classifiers],
            )
        )
    else:
        lines.append(f"intent classifiers: not run ({missing_classifiers})")
    return lines
