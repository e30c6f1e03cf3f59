"""The answer at a glance: does it leak, does DP fix it, at what cost, is the claim consistent.

A comparison page (and ``dpaudit demo``'s closing summary) opens with these four answers and, per model, a verdict
badge and one sentence in plain words, all generated from the measured figures the rest of the page shows in full:

- **Families.** Models trained on the same data (the sha256 of the ``train.jsonl`` their attack read) from the same
  start (the ``--init-from`` weights their ``privacy.json`` records, or none) are one family; within a family a
  private model is compared with its non-private sibling (the same data and start, no DP): what DP changed is the
  difference between the two, never a figure from another data set.
- **Leak.** A model leaks measurably when its most-repeated canaries sit above the never-inserted controls (one-sided
  Mann-Whitney, p < 0.05), a one-run proof on coin-flip canaries is above 0, or its strongest membership attack is
  clearly better than guessing (the lower end of its AUC interval at least :data:`CLEAR_AUC`) and beats the blind
  baseline on the same task.
- **Cost.** A private model's held-out utility beside its public start's (the start's own last evaluation on the same
  held-out rows: the comparison that matters, since releasing the start costs no privacy) and its non-private
  sibling's.
- **Claim.** The badge is the stored headline's (:mod:`dpaudit.verdict.headline`): contradicted (a proof above the
  claim), mechanism refuted, investigate (a heuristic above it), could not be tested (its ceiling, the bound of a
  perfect attack at these audits' sizes, is at or below the claim), consistent; non-private models have no claim.

Every figure is rounded as everywhere (claims up, lower bounds down: :mod:`dpaudit.common.figures`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dpaudit.attacks.results import ExposureResult, ExposureRow, ReconstructionResult, ReconstructionRow
from dpaudit.claim import Claim
from dpaudit.common.figures import format_down, format_up
from dpaudit.report.load import ReportRun, Utility
from dpaudit.report.measurable import percents
from dpaudit.report.membership import MembershipAudit, strongest
from dpaudit.verdict.headline import PROOF, Headline

__all__ = [
    "ALPHA",
    "CLEAR_AUC",
    "SUMMARY_LINES",
    "Answer",
    "Answers",
    "Badge",
    "ModelAnswer",
    "answers",
    "badge",
    "families",
    "summary_lines",
    "terminal_summary",
]

#: p-value below which a canary group sits above the controls.
ALPHA = 0.05
#: The lower end of an AUC interval at least this far above 0.5 is "clearly better than guessing".
CLEAR_AUC = 0.55


@dataclass(frozen=True, kw_only=True)
class Badge:
    """A model's verdict in a word or three.

    Attributes:
        kind: the colour class: ``ok`` (consistent), ``alarm`` (contradicted, mechanism refuted), ``warn``
            (investigate, could not be tested), ``none`` (no claim to test).
        word: what the badge says ("consistent", "contradicted", "mechanism refuted", "could not be tested", ...).
        detail: the figures behind it, in one clause.
    """

    kind: str
    word: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class ModelAnswer:
    """One model: its badge and its sentence."""

    label: str
    claim: str
    private: bool | None
    badge: Badge
    sentence: str
    family: int


@dataclass(frozen=True, kw_only=True)
class Answer:
    """One of the four questions: a one-word answer and the figures that support it."""

    question: str
    word: str
    text: str


@dataclass(frozen=True, kw_only=True)
class Answers:
    """The four answers and a badge and sentence per model, in the page's order."""

    questions: tuple[Answer, ...]
    models: tuple[ModelAnswer, ...]


# -- what one model shows --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Facts:
    run: ReportRun
    head: Headline
    top: ExposureRow | None
    controls: ExposureRow | None
    once: ExposureRow | None
    space: float | None
    recon: ReconstructionRow | None
    extraction: bool
    mia: MembershipAudit | None
    blind_auc: float | None
    proof_n: int | None
    proof_auc: float | None

    @property
    def label(self) -> str:
        return self.run.label

    @property
    def claim(self) -> Claim:
        return self.head.claim

    @property
    def private(self) -> bool | None:
        return self.claim.private if self.claim.known else None

    @property
    def memorized(self) -> bool:
        p = _p(self.top)
        return p is not None and p < ALPHA

    @property
    def proof(self) -> float | None:
        """The best per-example proof (coin-flip canaries) when it is above 0."""
        best = self.head.best
        if best is None or best.kind != PROOF or not best.epsilon > 0:
            return None
        return best.epsilon

    @property
    def mia_clear(self) -> bool:
        if self.mia is None:
            return False
        low = self.mia.audit.auc.ci.low
        return low >= CLEAR_AUC and (self.blind_auc is None or low > self.blind_auc)

    @property
    def leaks(self) -> bool:
        return self.memorized or self.proof is not None or self.mia_clear


def _p(row: ExposureRow | None) -> float | None:
    return None if row is None or row.vs_controls is None else row.vs_controls.p_value


def _facts(run: ReportRun, head: Headline, audits: Sequence[MembershipAudit]) -> _Facts:
    exposure = next((r for r in run.results.attacks if isinstance(r, ExposureResult)), None)
    rows = {r.frequency: r for r in (exposure.rows if exposure else ())}
    inserted = sorted(f for f in rows if f > 0)
    top = rows[inserted[-1]] if inserted else None
    recon_result = next((r for r in run.results.attacks if isinstance(r, ReconstructionResult)), None)
    recon = None
    if recon_result is not None and recon_result.rows:
        positive = [r for r in recon_result.rows if r.frequency > 0]
        recon = max(positive, key=lambda r: r.frequency, default=None)
    mia = strongest(tuple(audits))
    blind = None
    if mia is not None:
        blind = next(
            (a.audit.auc.value for a in audits if a.baseline and a.task == mia.task.replace("-offline", "")), None
        )
    proof_n = proof_auc = None
    best = head.best
    if best is not None and best.kind == PROOF:
        audit = next((a.audit for a in audits if (a.attack, a.task) == (best.attack, best.task)), None)
        if audit is not None:
            proof_n, proof_auc = audit.n_members + audit.n_nonmembers, audit.auc.value
    return _Facts(
        run=run,
        head=head,
        top=top,
        controls=rows.get(0),
        once=rows.get(1) if top is not None and top.frequency != 1 else None,
        space=exposure.parameters.log2_space_size if exposure else None,
        recon=recon,
        extraction=recon_result is not None and recon_result.attack == "extraction",
        mia=mia,
        blind_auc=blind,
        proof_n=proof_n,
        proof_auc=proof_auc,
    )


def _eps(claim: Claim) -> str:
    """ "ε 8" for a claim of 8.00 (rounded up, trailing zeros dropped)."""
    if claim.epsilon is None:
        return "no proven ε"
    return "ε " + _claimed(claim.epsilon)


def _claimed(epsilon: float | None) -> str:
    """A claimed epsilon rounded up, trailing decimal zeros dropped ("8" for 8.00, "100" stays "100"; None: "inf")."""
    text = format_up(epsilon)
    return text.rstrip("0").rstrip(".") if "." in text else text


def _p_text(p: float) -> str:
    return f"p = {p:.2g}"


def _exact(f: _Facts) -> str:
    assert f.recon is not None
    verb = "extracted from their prefix" if f.extraction else "reconstructed exactly"
    return f"{f.recon.exact_matches}/{f.recon.n} {verb}"


def _canaries_clause(f: _Facts) -> str | None:
    """ "its 100× canaries score 10.8 of 13.3 bits against 1.0 for never-seen controls (p = 0.006), 2/5
    reconstructed exactly"."""
    if f.top is None or f.controls is None:
        return None
    of = f" of {f.space:.3g}" if f.space is not None else ""
    p = _p(f.top)
    text = (
        f"its {f.top.frequency}× canaries score {f.top.mean:.1f}{of} bits against {f.controls.mean:.1f} for "
        f"never-seen controls" + (f" ({_p_text(p)})" if p is not None else "")
    )
    if f.recon is not None and f.recon.frequency == f.top.frequency:
        text += f", {_exact(f)}"
    return text


def _proof_clause(f: _Facts) -> str | None:
    if f.proof is None:
        return None
    size = f" on {f.proof_n:,} coin-flip canaries" if f.proof_n else ""
    auc = f" (AUC {f.proof_auc:.2f})" if f.proof_auc is not None else ""
    return f"the one-run audit{size} proves ε ≥ {format_down(f.proof)}{auc}"


def _mia_clause(f: _Facts) -> str | None:
    if f.mia is None:
        return None
    auc = f.mia.audit.auc
    blind = f"; blind baseline {f.blind_auc:.2f}" if f.blind_auc is not None else ""
    return (
        f"its strongest membership attack ({f.mia.attack} on {f.mia.task}) reaches AUC {auc.value:.2f} "
        f"[{auc.ci.low:.2f}, {auc.ci.high:.2f}]" + (f" ({blind[2:]})" if blind else "")
    )


def _leak_clauses(f: _Facts) -> list[str]:
    """What the model shows, strongest evidence first (canaries, proof, then a membership attack that is clearly
    better than guessing, or the membership attack alone when nothing else was measured)."""
    out = [c for c in (_canaries_clause(f), _proof_clause(f)) if c]
    best = f.head.best
    if (
        f.proof is not None
        and f.mia is not None
        and best is not None
        and (f.mia.attack, f.mia.task)
        == (
            best.attack,
            best.task,
        )
    ):
        return out
    if f.mia_clear or not out:
        mia = _mia_clause(f)
        if mia:
            out.append(mia)
    return out


# -- badges ----------------------------------------------------------------------------------------------


def badge(head: Headline) -> Badge:
    """The model's verdict from its stored headline (never recomputed here)."""
    claim = head.claim
    if not claim.known:
        return Badge(kind="none", word="claim unknown", detail="no privacy.json: nothing to test")
    if not claim.private:
        return Badge(kind="none", word="non-private", detail="no privacy claim: nothing to test")
    if not claim.proven:
        return Badge(kind="none", word="no proven ε", detail=claim.text())
    best = head.best
    if best is None:
        return Badge(kind="warn", word="not tested", detail="no audit of single examples or of canaries inserted once")
    bound = f"ε ≥ {format_down(best.epsilon)} ({best.kind})"
    claimed = format_up(claim.epsilon)
    if head.contradicted:
        return Badge(kind="alarm", word="contradicted", detail=f"{bound} > claimed {claimed}")
    if head.mechanism_refuted:
        return Badge(
            kind="alarm",
            word="mechanism refuted",
            detail=f"the trained model is not the mechanism privacy.json states ({head.label}); {bound}, "
            f"within the claimed {claimed}",
        )
    if best.above:
        return Badge(kind="warn", word="investigate", detail=f"heuristic {bound} > claimed {claimed}")
    ceiling = "" if head.ceiling is None else format_down(head.ceiling)
    if head.powerless:
        return Badge(
            kind="warn",
            word="could not be tested",
            detail=f"{bound} ≤ claimed {claimed}, but even a perfect attack on these audits reaches only {ceiling}",
        )
    ratio = best.epsilon / claim.epsilon if claim.epsilon else math.nan
    return Badge(
        kind="ok",
        word="consistent",
        detail=f"{bound} ≤ claimed {claimed} (bound / claim = {math.floor(ratio * 100) / 100:.2f}"
        + (f"; a perfect attack would reach {ceiling}" if ceiling else "")
        + ")",
    )


# -- sentences -------------------------------------------------------------------------------------------


def _utility_figures(run: ReportRun) -> tuple[str, str | None, str | None] | None:
    """(model, public start, trivial baseline) as percentages with matching decimals; None without a figure."""
    u = run.utility
    if u is None:
        return None
    start = run.start.utility if run.start is not None else None
    start = start if start is not None and _same_kind(start, u) else None
    figures = [u.value] + ([start.value] if start is not None else [])
    digits = _digits(figures)
    start_text = f"{start.value:.{digits}%}" if start is not None else None
    base = percents(u.value, u.baseline)[1]
    return f"{u.value:.{digits}%}", start_text, base


def _same_kind(a: Utility | None, b: Utility | None) -> bool:
    return a is not None and b is not None and a.name == b.name


def _digits(values: Sequence[float]) -> int:
    """Decimals of a percentage at which distinct values read differently (1, more when rounding would merge them)."""
    digits = 1
    while digits < 4 and len({f"{v:.{digits}%}" for v in values}) < len(set(values)):
        digits += 1
    return digits


def _points(a: float, b: float) -> str:
    return f"{abs(a - b) * 100:.1f} point" + ("" if round(abs(a - b) * 100, 1) == 1.0 else "s")


def _cost_clause(f: _Facts, sibling: _Facts | None, *, brief: bool = False) -> str | None:
    """ "cost 2.0 points of held-out MLM accuracy against its public start (25.6% → 23.6%; non-private 44.7%, trivial
    5.7%)"; ``brief``: "25.6% → 23.6% (public start → DP; non-private 44.7%)"."""
    u = f.run.utility
    if u is None:
        return None
    start = f.run.start.utility if f.run.start is not None else None
    start = start if _same_kind(start, u) else None
    other = sibling.run.utility if sibling is not None and _same_kind(sibling.run.utility, u) else None
    values = [u.value] + [x.value for x in (start, other) if x is not None]
    digits = _digits(values)

    def pct(x: float) -> str:
        return f"{x:.{digits}%}"

    beside = [f"non-private {pct(other.value)}" if other is not None else None]
    beside.append(f"trivial {pct(u.baseline)}" if u.baseline is not None else None)
    tail = ", ".join(x for x in beside if x)
    if start is not None:
        if brief:
            return f"{pct(start.value)} → {pct(u.value)} against its public start" + (f" ({tail})" if tail else "")
        if round(u.value, digits + 2) == round(start.value, digits + 2):
            lead = f"kept the {u.name} of its public start"
        elif u.value < start.value:
            lead = f"cost {_points(u.value, start.value)} of {u.name} against its public start"
        else:
            lead = f"gained {_points(u.value, start.value)} of {u.name} over its public start"
        return f"{lead} ({pct(start.value)} → {pct(u.value)}" + (f"; {tail})" if tail else ")")
    if other is not None:
        base = f"; trivial {pct(u.baseline)}" if u.baseline is not None else ""
        if brief:
            return f"{pct(other.value)} → {pct(u.value)} against non-private" + (
                f" (trivial {pct(u.baseline)})" if u.baseline is not None else ""
            )
        verb = "cost" if u.value < other.value else "gained"
        return (
            f"{verb} {_points(u.value, other.value)} of {u.name} against non-private training "
            f"({pct(other.value)} → {pct(u.value)}{base})"
        )
    return f"{u.name} {pct(u.value)}" + (f" (trivial baseline {pct(u.baseline)})" if u.baseline is not None else "")


def _group_words(claim: Claim, frequency: int) -> str:
    """How the claim covers a canary repeated ``frequency`` times: "which ε 8 does not cover" or its group bound."""
    if claim.epsilon is None or claim.delta is None:
        return "which no proven epsilon covers"
    from dpaudit.accounting.guarantees import group_privacy

    eps_f, delta_f = group_privacy(claim.epsilon, claim.delta, frequency)
    if delta_f >= 1:
        return f"which {_eps(claim)} does not cover"
    return f"covered only as a group, ({format_up(eps_f)}, {format_up(delta_f, 2)})"


def _dp_clauses(f: _Facts, sibling: _Facts | None, *, brief: bool = False) -> list[str]:
    """What DP changed against the non-private sibling (or, without one, what the private model shows); ``brief``: the
    change alone, in a few words (the page's answer for every pair after the first)."""
    out = []
    if f.top is not None and f.controls is not None:
        same = sibling is not None and sibling.top is not None and sibling.top.frequency == f.top.frequency
        if same:
            assert sibling is not None and sibling.top is not None
            verb = "cut" if f.top.mean < sibling.top.mean else "left"
            text = (
                f"{verb} the {f.top.frequency}× canaries from {sibling.top.mean:.1f} to {f.top.mean:.1f} bits "
                f"(controls {f.controls.mean:.1f})"
            )
            if f.recon is not None and sibling.recon is not None and f.recon.frequency == sibling.recon.frequency:
                what = "extractions" if f.extraction else "exact reconstructions"
                text += (
                    f" and {what} from {sibling.recon.exact_matches}/{sibling.recon.n} to "
                    f"{f.recon.exact_matches}/{f.recon.n}"
                )
        else:
            text = _canaries_clause(f) or ""
        out.append(text)
        if brief:
            return out
        once = f.once
        if once is not None and _p(once) is not None:
            p = _p(once)
            assert p is not None
            out.append(
                f"1× canaries sit with the controls ({_p_text(p)})"
                if p >= ALPHA
                else f"even 1× canaries stand out ({_p_text(p)})"
            )
        if f.memorized and f.top.frequency > 1:
            p = _p(f.top)
            assert p is not None
            out.append(
                f"the {f.top.frequency}× group ({f.top.frequency} rows, {_group_words(f.claim, f.top.frequency)}) "
                f"stays above them ({_p_text(p)})"
            )
    elif f.proof is not None or (sibling is not None and sibling.proof is not None):
        mine = format_down(f.proof) if f.proof is not None else "0"
        size = ""
        if not brief and f.proof_n:
            size = f" ({f.proof_n:,} coin-flip canaries" + (
                f", AUC {f.proof_auc:.2f})" if f.proof_auc is not None else ")"
            )
        if sibling is not None and sibling.proof is not None and not brief:
            out.append(
                f"lowered the one-run proof from ε ≥ {format_down(sibling.proof)} (non-private) to ε ≥ {mine}{size}"
            )
        elif sibling is not None and sibling.proof is not None:
            out.append(f"one-run proof ε ≥ {format_down(sibling.proof)} → {mine}")
        else:
            out.append(f"one-run proof ε ≥ {mine}{size}")
    elif f.mia is not None:
        if sibling is not None and sibling.mia is not None:
            out.append(f"best membership AUC {sibling.mia.audit.auc.value:.2f} → {f.mia.audit.auc.value:.2f}")
        else:
            out.append(f"best membership AUC {f.mia.audit.auc.value:.2f}")
        if not brief:
            out[-1] += f" ({f.mia.attack} on {f.mia.task})"
    return out


def _claim_clause(f: _Facts, b: Badge) -> str | None:
    claim, head = f.claim, f.head
    if not claim.proven or head.best is None:
        return None
    claimed = _claimed(claim.epsilon)
    bound = f"ε ≥ {format_down(head.best.epsilon)}"
    if b.word == "consistent":
        kind = "proves" if head.best.kind == PROOF else "shows (heuristic)"
        return f"the audit {kind} {bound}, consistent with the claim of {claimed}"
    if b.word == "could not be tested":
        return f"its audits could not test {_eps(claim)} (a perfect attack would show ε ≥ {format_down(head.ceiling)})"
    if b.word == "contradicted":
        return f"a proof shows {bound} > claimed {claimed}: the claim is contradicted"
    if b.word == "mechanism refuted":
        return f"the trained model is not the mechanism privacy.json states ({bound} for any mechanism)"
    if b.word == "investigate":
        return f"a heuristic bound {bound} is above the claim of {claimed}: investigate"
    return None


def _sentence(f: _Facts, sibling: _Facts | None, b: Badge) -> str:
    if f.private:
        eps = _eps(f.claim) if f.claim.proven else "no proven epsilon"
        parts = _dp_clauses(f, sibling)
        if parts and sibling is not None:
            verb = parts[0].startswith(("cut", "left", "lowered"))
            parts[0] = f"DP at {eps} {parts[0]}" if verb else f"DP at {eps}: {parts[0]}"
        elif parts:
            parts[0] = f"with DP at {eps}, {parts[0]}"
        cost = _cost_clause(f, sibling)
        if cost:
            parts.append(cost)
        claim = _claim_clause(f, b)
        if claim:
            parts.append(claim)
        return _capital("; ".join(parts) or "no attack result") + "."
    leaks = _leak_clauses(f)
    lead = "Leaks: " if f.leaks else "No measurable leak: " if leaks else "Nothing measured"
    parts = list(leaks)
    u = _utility_figures(f.run)
    if u is not None and f.run.utility is not None:
        value, start, base = u
        extra = ", ".join(
            x for x in (f"public start {start}" if start else None, f"trivial baseline {base}" if base else None) if x
        )
        parts.append(f"{f.run.utility.name} {value}" + (f" ({extra})" if extra else ""))
    return lead + "; ".join(parts) + "."


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


# -- the page's answers ----------------------------------------------------------------------------------


def families(runs: Sequence[ReportRun]) -> dict[str, int]:
    """Run label -> family number (1, 2, ... in order of first appearance): same data, same start."""
    keys: dict[tuple[str | None, str | None], int] = {}
    out = {}
    for run in runs:
        key = (run.data_key or f"run:{run.label}", run.start.key if run.start is not None else None)
        out[run.label] = keys.setdefault(key, len(keys) + 1)
    return out


def _join(items: Sequence[str], limit: int = 3) -> str:
    items = list(items)
    if len(items) > limit:
        items = [*items[:limit], f"{len(items) - limit} more below"]
    return "; ".join(items)


def answers(
    runs: Sequence[ReportRun], heads: Mapping[str, Headline], audits: Mapping[str, Sequence[MembershipAudit]]
) -> Answers:
    """The four answers and a badge and sentence per model (``runs`` labelled: :func:`dpaudit.report.models.label_runs`)."""
    facts = [_facts(run, heads[run.label], audits[run.label]) for run in runs]
    family = families(runs)
    siblings: dict[str, _Facts | None] = {}
    for f in facts:
        siblings[f.label] = (
            next((g for g in facts if g.private is False and family[g.label] == family[f.label]), None)
            if f.private
            else None
        )
    badges = {f.label: badge(f.head) for f in facts}
    models = tuple(
        ModelAnswer(
            label=f.label,
            claim=f.claim.short(),
            private=f.private,
            badge=badges[f.label],
            sentence=_sentence(f, siblings[f.label], badges[f.label]),
            family=family[f.label],
        )
        for f in facts
    )
    return Answers(
        questions=(
            _leak_answer(facts),
            _fix_answer(facts, siblings),
            _cost_answer(facts, siblings),
            _claim_answer(facts, badges),
        ),
        models=models,
    )


def _short_leak(f: _Facts) -> str:
    """The strongest evidence in a few words: "100× canaries 10.8 of 13.3 bits vs 1.0 (p = 0.006), 2/5
    reconstructed"."""
    if f.memorized and f.top is not None and f.controls is not None:
        of = f" of {f.space:.3g}" if f.space is not None else ""
        p = _p(f.top)
        vs = f" ({_p_text(p)})" if p is not None else ""
        text = f"{f.top.frequency}× canaries {f.top.mean:.1f}{of} bits vs {f.controls.mean:.1f} for controls{vs}"
        if f.recon is not None and f.recon.frequency == f.top.frequency and f.recon.exact_matches:
            text += f", {f.recon.exact_matches}/{f.recon.n} {'extracted' if f.extraction else 'reconstructed'}"
        return text
    if f.proof is not None:
        return f"proven ε ≥ {format_down(f.proof)}" + (f" ({f.proof_n:,} coin-flip canaries)" if f.proof_n else "")
    if f.mia_clear and f.mia is not None:
        auc = f.mia.audit.auc
        return f"membership AUC {auc.value:.2f} [{auc.ci.low:.2f}, {auc.ci.high:.2f}] ({f.mia.attack} on {f.mia.task})"
    return "nothing measurable"


def _leak_answer(facts: Sequence[_Facts]) -> Answer:
    question = "Does it leak?"
    pool = [f for f in facts if f.private is False] or list(facts)
    if not pool:
        return Answer(question=question, word="Not measured", text="no model on this page.")
    leaking = [f for f in pool if f.leaks]
    quiet = [f.label for f in pool if not f.leaks]
    scope = "" if any(f.private is False for f in facts) else " (no non-private model here: the models as trained)"
    if not leaking:
        return Answer(
            question=question,
            word="Not measurably",
            text=f"no canary group above the controls, no proof above 0, no membership attack clearly better than "
            f"guessing ({', '.join(quiet)}){scope}.",
        )
    text = _join([f"{f.label}: {_short_leak(f)}" for f in leaking])
    if quiet:
        text += f"; nothing measurable in {', '.join(quiet)}"
    return Answer(question=question, word="Yes", text=text + scope + ".")


def _fix_answer(facts: Sequence[_Facts], siblings: Mapping[str, _Facts | None]) -> Answer:
    question = "Does DP fix it?"
    private = [f for f in facts if f.private]
    if not private:
        return Answer(question=question, word="Not measured", text="no private model on this page.")
    pairs = [(f, siblings[f.label]) for f in private if siblings[f.label] is not None]
    if not pairs:
        return Answer(
            question=question,
            word="Not measured",
            text="no private model has a non-private sibling here (the same data and start) to compare with.",
        )
    clauses, reduced, remaining = [], [], []
    for i, (f, s) in enumerate(pairs):
        assert s is not None
        eps = _eps(f.claim) if f.claim.proven else "no proven ε"
        clauses.append(f"{f.label} ({eps}): " + "; ".join(_dp_clauses(f, s, brief=i > 0)))
        reduced.append(_reduced(f, s))
        remaining.append(f.leaks)
    if all(reduced) and not any(remaining):
        word = "Yes"
    elif any(reduced):
        word = "Partly"
    else:
        word = "No"
    return Answer(question=question, word=word, text=_join(clauses, 4) + ".")


def _reduced(f: _Facts, s: _Facts) -> bool:
    """The private model shows less than its non-private sibling on the figure both measured."""
    if f.top is not None and s.top is not None:
        return f.top.mean < s.top.mean
    if s.proof is not None:
        return f.proof is None or f.proof < s.proof
    if f.mia is not None and s.mia is not None:
        return f.mia.audit.auc.value < s.mia.audit.auc.value
    return False


def _drop(f: _Facts, sibling: _Facts | None) -> tuple[float, str] | None:
    """The private model's held-out figure minus its public start's (else its non-private sibling's), in points."""
    u = f.run.utility
    if u is None:
        return None
    start = f.run.start.utility if f.run.start is not None else None
    if start is not None and _same_kind(start, u):
        return (u.value - start.value) * 100, "public start"
    other = sibling.run.utility if sibling is not None else None
    if other is not None and _same_kind(other, u):
        return (u.value - other.value) * 100, "non-private"
    return None


def _cost_answer(facts: Sequence[_Facts], siblings: Mapping[str, _Facts | None]) -> Answer:
    question = "At what cost?"
    private = [f for f in facts if f.private and f.run.utility is not None]
    rows: list[tuple[_Facts, str]] = []
    for f in private:
        clause = _cost_clause(f, siblings[f.label], brief=bool(rows))
        if clause:
            rows.append((f, clause))
    if not rows:
        return Answer(question=question, word="Not measured", text="no private model logged a held-out figure.")
    by_reference: dict[str, list[float]] = {}
    for f, _ in rows:
        drop = _drop(f, siblings[f.label])
        if drop is not None:
            by_reference.setdefault(drop[1], []).append(drop[0])
    spans = []
    for reference, values in by_reference.items():
        low, high = f"{min(values):+.1f}", f"{max(values):+.1f}"
        spans.append(f"{low if low == high else f'{low} to {high}'} points vs {reference}")
    word = "; ".join(spans) or "Not compared"
    return Answer(
        question=question,
        word=word,
        text=_join([f"{f.label}: {c}" for f, c in rows], 4) + ".",
    )


def _claim_answer(facts: Sequence[_Facts], badges: Mapping[str, Badge]) -> Answer:
    question = "Is the claim consistent?"
    private = [f for f in facts if f.private and f.claim.proven]
    if not private:
        return Answer(question=question, word="No claim", text="no model here states a proven epsilon.")
    by_word: dict[str, list[_Facts]] = {}
    for f in private:
        by_word.setdefault(badges[f.label].word, []).append(f)
    parts = []
    for word in ("contradicted", "mechanism refuted", "investigate"):
        parts += [f"{f.label}: {word} ({badges[f.label].detail})" for f in by_word.get(word, [])]
    for f in by_word.get("consistent", []):
        best = f.head.best
        assert best is not None
        kind = "proof" if best.kind == PROOF else "heuristic"
        ceiling = f" (a perfect attack would reach {format_down(f.head.ceiling)})" if f.head.ceiling is not None else ""
        parts.append(
            f"{f.label}: {kind} ε ≥ {format_down(best.epsilon)} ≤ claimed {format_up(f.claim.epsilon)}{ceiling}"
        )
    untested = by_word.get("could not be tested", []) + by_word.get("not tested", [])
    for f in untested:
        top = f.head.ceiling
        parts.append(
            f"{f.label} could not be tested: "
            + (
                f"even a perfect attack on its audits would show only ε ≥ {format_down(top)}, not above the "
                f"claimed {format_up(f.claim.epsilon)}"
                if top is not None
                else "no audit of single examples or of canaries inserted once"
            )
        )
    if any(w in by_word for w in ("contradicted", "mechanism refuted")):
        word = "No"
    elif "investigate" in by_word:
        word = "Investigate"
    elif "consistent" in by_word:
        word = "Yes" if not untested else "Yes, where testable"
    else:
        word = "Not tested"
    return Answer(question=question, word=word, text=_join(parts, 4) + ".")


# -- the terminal's summary ------------------------------------------------------------------------------

#: Lines of :func:`terminal_summary` at most (``dpaudit demo`` ends with it): the four answers and a row per model.
SUMMARY_LINES = 25


def _cells(f: _Facts, badge_word: str) -> tuple[str, ...]:
    """A model's row of the side-by-side table: label, claim, verdict, held-out utility (its public start), the top
    canaries' bits (controls), the secrets reconstructed, the headline lower bound."""
    u = f.run.utility
    start = f.run.start.utility if f.run.start is not None else None
    utility = "–" if u is None else f"{u.value:.1%}"
    if u is not None and start is not None and _same_kind(start, u):
        utility += f" ({start.value:.1%})"
    top = "–"
    if f.top is not None and f.controls is not None:
        top = f"{f.top.mean:.1f} at {f.top.frequency}× ({f.controls.mean:.1f})"
    recon = "–" if f.recon is None else f"{f.recon.exact_matches}/{f.recon.n}"
    best = f.head.best
    bound = "–"
    if best is not None:
        bound = f"ε ≥ {format_down(best.epsilon)} {'proof' if best.kind == PROOF else 'heuristic'}"
    return (f.label, f.claim.short(), badge_word, utility, top, recon, bound)


def summary_lines(
    runs: Sequence[ReportRun],
    heads: Mapping[str, Headline],
    audits: Mapping[str, Sequence[MembershipAudit]],
    *,
    width: int = 118,
) -> list[str]:
    """The four answers and a side-by-side row per model, in at most :data:`SUMMARY_LINES` lines of at most
    ``width`` characters (an answer longer than its lines ends in "…": the page has it whole)."""
    import textwrap

    found = answers(runs, heads, audits)
    facts = [_facts(run, heads[run.label], audits[run.label]) for run in runs]
    badges = {m.label: m.badge.word for m in found.models}
    rows: list[tuple[str, ...]] = [
        ("model", "claimed ε", "verdict", "held-out (start)", "top canaries, bits (controls)", "recon.", "bound")
    ]
    rows += [_cells(f, badges[f.label]) for f in facts]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    budget = SUMMARY_LINES - 3 - len(table)  # the heading line, the table after the answers, up to 2 notes
    per_answer = max(1, min(4, budget // len(found.questions)))
    head = max(len(q.question) for q in found.questions)
    lines = ["At a glance (the report opens with the same answers):"]
    for q in found.questions:
        wrapped = textwrap.wrap(
            f"{q.word}: {q.text}", width=width - head - 4, break_on_hyphens=False, break_long_words=False
        )
        if len(wrapped) > per_answer:
            wrapped = wrapped[:per_answer]
            wrapped[-1] = wrapped[-1][: width - head - 5].rstrip() + "…"
        for i, text in enumerate(wrapped):
            lines.append(f"  {(q.question if i == 0 else ''):<{head}}  {text}")
    from dpaudit.report.membership import distribution_shift_notes

    shift = [f"  note: {run.label}: {note}" for run in runs for note in distribution_shift_notes(run.results)]
    shift = [n if len(n) <= width else n[: width - 1] + "…" for n in shift]
    return (lines + table + shift)[:SUMMARY_LINES]


def terminal_summary(paths: Sequence[Path], labels: Mapping[str, str] | None = None, *, width: int = 118) -> list[str]:
    """:func:`summary_lines` of attack directories (verified as the report reads them; ``labels``: directory ->
    name), merged by model and labelled as the comparison page does."""
    from dpaudit.report.load import load_run
    from dpaudit.report.membership import membership_audits
    from dpaudit.report.models import label_runs, merge_models
    from dpaudit.verdict.headline import headline_of

    runs = label_runs(merge_models([load_run(p) for p in paths]), labels)
    # the stored headline, as the page reads it (its sampling: a shuffle run's claim is unproven)
    heads = {
        run.label: headline_of(run.results, sampling=run.privacy.sampling if run.privacy else None) for run in runs
    }
    audits = {run.label: membership_audits(run.results) for run in runs}
    return summary_lines(runs, heads, audits, width=width)
