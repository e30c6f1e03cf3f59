"""The demo's three-line verdict, read back from the attack directories (never from memory).

One line per comparison: the non-private masked LM, the epsilon-8 masked LM, the one-run audit of each
(coin-flip designed canaries inserted once, the canary attack) when it ran, and the two intent
classifiers (sgd vs edp-sgd mode) when they ran. Exposure is the secret's rank among all |R|
candidates in bits (Carlini et al. 2019), compared with never-inserted controls by a one-sided
Mann-Whitney test; the empirical epsilon lower bound is the headline of :mod:`dpaudit.headline` (the
report's and ``dpaudit attack``'s too): valid at 95% over every audit it is chosen from, only audits
of the claim's unit, its kind named (proof or heuristic), rounded down; claims rounded up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dpaudit.attacks.results import AttackResults, CanaryResult, ExposureResult, MiaResult, ReconstructionResult

#: Significance level of "memorized" (the top group's exposure above the controls').
ALPHA = 0.05


def _claim(results: AttackResults) -> str:
    from dpaudit.headline import Claim

    claim = Claim.from_claimed(results.claimed)
    return "non-private" if claim.known and not claim.private else claim.text()


def _bound_text(results: AttackResults) -> str:
    from dpaudit.headline import headline_of

    head = headline_of(results)
    if not head.bounds:
        return ""
    return "; " + head.text()


def mlm_line(label: str, results: AttackResults) -> str:
    """Exposure of each inserted group vs the controls, exact reconstructions of the top group, lower bound.

    The top group's outcome is named (MEMORIZED, or indistinguishable from the controls); a DP model's
    canaries repeated f times are a group of f rows, covered only by group privacy (none at 100x and
    epsilon 8), so the lower groups are listed too.
    """
    exposure = next((r for r in results.attacks if isinstance(r, ExposureResult)), None)
    rows = {row.frequency: row for row in (exposure.rows if exposure else ())}
    inserted = sorted(f for f in rows if f > 0)
    if not inserted or 0 not in rows:
        return f"{label} ({_claim(results)}): no exposure result."
    top, controls = rows[inserted[-1]], rows[0]
    recon = next((r for r in results.attacks if isinstance(r, ReconstructionResult)), None)
    exact = next((r for r in (recon.rows if recon else ()) if r.frequency == top.frequency), None)

    def p(row) -> float:
        return row.vs_controls.p_value if row.vs_controls else float("nan")

    found = "MEMORIZED" if p(top) < ALPHA else "indistinguishable from the controls"
    text = (f"{label} ({_claim(results)}): {top.frequency}x canaries {top.mean:.1f} bits of exposure vs "
            f"{controls.mean:.1f} for controls (p = {p(top):.2g})")
    if exact is not None:
        text += f", {exact.exact_matches}/{exact.n} reconstructed exactly"
    text += f": {found}"
    if found == "MEMORIZED" and results.claimed.private:
        text += f" (a group of {top.frequency} rows, beyond what the per-example claim covers)"
    lower = [rows[f] for f in inserted[:-1]]
    if lower:
        text += "; " + ", ".join(f"{r.frequency}x {r.mean:.1f} bits (p = {p(r):.2g})" for r in lower)
    return text + _bound_text(results)


def audit_line(label: str, results: AttackResults) -> str:
    """The one-run audit: the canary attack on coin-flip designed canaries (inserted once), its TPR at 1% FPR
    and the headline bound, a proof for this one training run (Steinke et al. 2023)."""
    canary = next((r for r in results.attacks if isinstance(r, CanaryResult)), None)
    task = next((t for t in (canary.tasks if canary else ()) if t.task == "canaries"), None)
    if task is None:
        return f"{label} ({_claim(results)}): no one-run canary audit."
    tpr = next((x["tpr"] for x in task.tpr_at if abs(x["fpr"] - 0.01) < 1e-12), float("nan"))
    design = canary.parameters.get("design", "designed")
    return (f"{label} ({_claim(results)}): {task.n_members + task.n_nonmembers} coin-flip {design} canaries, "
            f"{task.n_members} inserted once: AUC {task.auc:.2f}, TPR {tpr:.0%} at 1% FPR{_bound_text(results)}")


def classifier_line(pairs: Sequence[tuple[str, AttackResults]]) -> str:
    """One line for the classifiers: each one's strongest membership attack (AUC) and lower bound."""
    parts = []
    for label, results in pairs:
        tasks = [(t.auc, r.attack, t.task) for r in results.attacks if isinstance(r, MiaResult) for t in r.tasks]
        auc, attack, task = max(tasks, default=(float("nan"), "-", "-"))
        from dpaudit.headline import headline_of

        head = headline_of(results)
        claim = _claim(results)
        bound = head.text() if head.best is not None else "no eligible lower bound"
        parts.append(f"{label} ({claim}) best membership AUC {auc:.2f} ({attack}/{task}), {bound}")
    return "intent classifiers: " + "; ".join(parts)


def verdict_lines(mlm: Sequence[tuple[str, Path]], classifiers: Sequence[tuple[str, Path]],
                  missing_classifiers: str | None, audits: Sequence[tuple[str, Path]] = ()) -> list[str]:
    """The lines: each masked LM, each one-run audit, then the classifiers (or why they did not run)."""
    from dpaudit.attacks.run import read_attack_dir

    lines = [mlm_line(label, read_attack_dir(path)) for label, path in mlm]
    lines += [audit_line(label, read_attack_dir(path)) for label, path in audits]
    if classifiers:
        lines.append(classifier_line([(label, read_attack_dir(path)) for label, path in classifiers]))
    else:
        lines.append(f"intent classifiers: not run ({missing_classifiers})")
    return lines
