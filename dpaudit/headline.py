"""The headline empirical epsilon lower bound of an attack run: valid at its stated confidence.

One attack run audits several attacks (loss, shadow, LiRA, RMIA, ref) on several membership tasks
(examples, canaries): m audits. Each :class:`dpaudit.audit.AuditResult` is a 95% bound for ITSELF;
the largest of m of them is not a 95% bound (on randomized response with epsilon 2, one audit
exceeded the truth in 0.9% of simulated trials, the best of ten in 8.2%). This module is the one
place that turns the audits of a run into the headline that the report, ``dpaudit attack`` and the
demo verdict print:

- **Correction for what was tried (Bonferroni).** Every audit's bound is recomputed at confidence
  1 - alpha / m, m = the number of audits in the run (all of them, whichever are eligible), from the
  ROC stored in the audit (:meth:`dpaudit.audit.Roc.rank_scores`: the bounds depend on the scores
  only through their order). By the union bound all m bounds hold together with probability
  >= 1 - alpha, so their maximum, or the maximum over any subset, is a valid 1 - alpha bound. The
  label says "95%, corrected for m audits".
- **Unit.** The claim is per example (add/remove one row). Eligible for the headline and the alarm
  are only audits of that unit: membership of single examples (train vs heldout) and canaries all
  inserted exactly once. A canary inserted f > 1 times is f rows: its audit bounds the epsilon of a
  group of f rows, is shown apart as a group bound, compared with the group guarantee (f epsilon at
  delta_f = f e^((f-1) epsilon) delta), and never raises the per-example alarm.
- **Kind.** One bound per audit: on coin-flip canaries the one-run bound of Steinke, Nasr &
  Jagielski (2023), a proof for this single training run; otherwise Clopper-Pearson over every
  threshold (the all-threshold Bonferroni of :class:`dpaudit.audit.BonferroniThresholds`), a
  heuristic, since the examples of one model are not independent trials. The headline leads with
  the best eligible proof; without one it shows the best eligible heuristic, labelled so. Only a
  proof above the proven epsilon says "CLAIM CONTRADICTED"; a heuristic above it says
  "heuristic bound above the claim: investigate".
- **The claimed curve.** When the claim states its mechanism (``privacy.json``'s segments: Poisson-subsampled
  Gaussian steps), a coin-flip audit of the claim's unit is bounded against that mechanism's own trade-off curve
  (:mod:`dpaudit.audit.claim_family`: the f-DP recursion of Mahloujifar, Melis & Chaudhuri 2024 with the claim's
  curve, one pair of guess counts planned from the claim before any score is seen), one bound per audit in
  place of Steinke's: above the claim it rejects the claim itself (a proof whatever the mechanism); below it,
  the figure is the epsilon of the least private mechanism of the claimed form (sampling rates and steps, any
  noise) that the guesses reject. Steinke's bound stays the one of non-private models, group bounds and claims
  without a mechanism (a stated epsilon, shuffled batches).
- The Gaussian f-DP bound (Mahloujifar et al. 2024) refutes mu-GDP, not (epsilon, delta)-DP (it exceeded the
  true epsilon of randomized response in 99.5% of trials): it never drives the headline or alarm.
- **Claims.** A run with fixed-size shuffled batches proves no epsilon (``privacy.json`` epsilon
  null): it reads "no proven epsilon (as-if-Poisson: X)", nothing is compared with it, and nothing
  says that the claim stands. Claimed figures are rounded up, lower bounds down
  (:mod:`dpaudit.figures`).

The validity of the whole pipeline is tested by simulation (tests/test_headline_validity.py): on
mechanisms with a known epsilon the headline exceeds it in at most alpha of the trials.

References:
  Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run".
  Jagielski, Ullman & Oprea 2020; Nasr et al. 2021 (Clopper-Pearson lower bounds).
  Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run".
  Dwork & Roth 2014, "The Algorithmic Foundations of Differential Privacy", Theorem 2.2 (group privacy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpaudit.audit import (
    AuditResult,
    BonferroniThresholds,
    EpsilonBound,
    epsilon_lower_bound_clopper_pearson,
    epsilon_lower_bound_one_run,
)
from dpaudit.audit.claim_family import epsilon_lower_bound_one_run_claim
from dpaudit.audit.claimed_mechanism import ClaimedMechanism
from dpaudit.figures import format_down, format_up

__all__ = ["AuditSource", "Claim", "FDP_LABEL", "Headline", "HeadlineBound", "HEURISTIC_LABEL", "PROOF_LABEL",
           "audit_sources", "headline", "headline_of"]

PROOF, HEURISTIC = "proof", "heuristic"
PROOF_LABEL = "proof (one run, coin-flip canaries; Steinke et al. 2023)"
CLAIM_PROOF_LABEL = ("proof (one run, coin-flip canaries) against the claimed mechanism's trade-off curve (f-DP, "
                     "Mahloujifar et al. 2024); the figure holds for mechanisms of the claimed form")
HEURISTIC_LABEL = "heuristic (Clopper-Pearson on the examples of one model: not independent trials)"
FDP_LABEL = "refutes mu-GDP (Gaussian mechanisms only), not an (epsilon, delta) bound"
#: The membership task of single training examples (train.jsonl vs heldout.jsonl): one row each.
EXAMPLES_TASK = "examples"


# -- the claim -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Claim:
    """The claim a bound is compared with.

    Attributes:
        known: False for a bare model (no ``privacy.json``).
        private: whether DP training ran (None: unknown).
        epsilon: the PROVEN epsilon at ``delta``; None when nothing is proven (non-private, shuffle).
        delta: the claim's delta.
        epsilon_if_poisson: shuffled fixed-size batches: the epsilon a Poisson-sampled run would have
            (not a guarantee).
        epsilon_replace_one: set when the run treated its dataset size N as public: the replace-one
            epsilon, stated beside the add/remove one (which says nothing about an adversary who knows N).
        mechanism: a proven claim's mechanism (its accounting segments), whose trade-off curve the one-run
            proof tests (None: no mechanism stated).
    """

    known: bool
    private: bool | None = None
    epsilon: float | None = None
    delta: float | None = None
    epsilon_if_poisson: float | None = None
    epsilon_replace_one: float | None = None
    mechanism: ClaimedMechanism | None = None

    @classmethod
    def from_claimed(cls, claimed: Any, *, sampling: str | None = None) -> Claim:
        """From :class:`dpaudit.attacks.results.ClaimedPrivacy`; ``sampling`` from ``privacy.json`` (when
        read) overrides it, so results written before shuffle runs were marked still read as unproven."""
        sampling = sampling or getattr(claimed, "sampling", None)
        if_poisson = getattr(claimed, "epsilon_if_poisson", None)
        epsilon = claimed.epsilon if claimed.private else None
        unproven = sampling == "shuffle" or (claimed.private and getattr(claimed, "recorded_epsilon", 0.0) is None)
        if claimed.private and unproven:
            if_poisson = if_poisson if if_poisson is not None else epsilon
            epsilon = None
        replace_one = getattr(claimed, "epsilon_replace_one", None) if epsilon is not None else None
        segments = getattr(claimed, "segments", None)
        mechanism = (ClaimedMechanism.from_segments(segments, delta=claimed.delta, epsilon=epsilon)
                     if epsilon is not None and claimed.delta is not None and segments else None)
        return cls(known=bool(claimed.known), private=claimed.private, epsilon=epsilon, delta=claimed.delta,
                   epsilon_if_poisson=if_poisson if claimed.private else None, epsilon_replace_one=replace_one,
                   mechanism=mechanism)

    @property
    def proven(self) -> bool:
        return self.epsilon is not None

    def text(self) -> str:
        """The claim in words, rounded up: "epsilon = 3.89 at delta = 1.0e-5", "no proven epsilon (as-if-Poisson: 0.149)";
        with N treated as public, the replace-one epsilon follows the add/remove one."""
        if not self.known:
            return "unknown (a bare model directory: no privacy.json)"
        if not self.private:
            return "none: non-private training (epsilon = infinity)"
        delta = "" if self.delta is None else f" at delta = {format_up(self.delta, 2)}"
        if self.epsilon is None:
            poisson = "" if self.epsilon_if_poisson is None else f" (as-if-Poisson: {format_up(self.epsilon_if_poisson)})"
            return f"no proven epsilon{poisson}"
        if self.epsilon_replace_one is not None:
            return (f"epsilon = {format_up(self.epsilon)}{delta} (add/remove; N treated as public: "
                    f"replace-one epsilon = {format_up(self.epsilon_replace_one)})")
        return f"epsilon = {format_up(self.epsilon)}{delta}"

    def short(self) -> str:
        """For a table cell: the proven epsilon rounded up, "none" or "inf"."""
        if not self.known:
            return "?"
        if not self.private:
            return "inf"
        return "none" if self.epsilon is None else format_up(self.epsilon)


# -- the audits of a run ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AuditSource:
    """One stored audit and its unit.

    Attributes:
        attack, task: where it comes from.
        audit: the stored :class:`dpaudit.audit.AuditResult` (its ROC is all that is reused).
        group_size: rows each member is (1: the claim's unit; f for canaries inserted up to f times;
            None: unknown, e.g. a task that does not record its canaries' frequencies).
    """

    attack: str
    task: str
    audit: AuditResult
    group_size: int | None

    @property
    def name(self) -> str:
        return f"{self.attack}/{self.task}" if self.task else self.attack


def group_size_of(task: str, info: Mapping[str, Any] | None) -> int | None:
    """1 for the examples task (and its variants, e.g. LiRA's ``examples-offline``: the same single rows, scored
    another way); max of the recorded canary frequencies otherwise (None: not recorded)."""
    if task == EXAMPLES_TASK or task.startswith(EXAMPLES_TASK + "-"):
        return 1
    freqs = (info or {}).get("frequencies")
    if isinstance(freqs, (list, tuple)) and freqs and all(isinstance(f, int) and f >= 1 for f in freqs):
        return int(max(freqs))
    return None


def _walk(value: Any, task: str, info: Mapping[str, Any] | None) -> Iterable[tuple[str, Mapping[str, Any] | None, AuditResult]]:
    if isinstance(value, AuditResult):
        yield task, info, value
    elif isinstance(value, Mapping) and value.get("schema") == "dpaudit.audit/1":
        yield task, info, AuditResult.from_json(dict(value))
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        own_task = getattr(value, "task", None)
        own_info = getattr(value, "info", None)
        task = own_task if isinstance(own_task, str) and own_task else task
        info = own_info if isinstance(own_info, Mapping) else info
        for f in dataclasses.fields(value):
            if f.name not in ("info",):
                yield from _walk(getattr(value, f.name), task, info)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item, task, info)


def audit_sources(results: Any) -> tuple[AuditSource, ...]:
    """Every membership audit of an :class:`dpaudit.attacks.results.AttackResults`, with its unit.

    Walks each attack result's fields for :class:`AuditResult` values (a membership result's
    ``tasks[i].audit``), naming the task by the enclosing record's ``task`` and reading the canary
    frequencies from its ``info``.
    """
    found = []
    for result in results.attacks:
        if getattr(result, "baseline", False):  # the blind baseline never queried the model: its audits bound nothing
            continue
        for f in dataclasses.fields(result):
            for task, info, audit in _walk(getattr(result, f.name), "", None):
                found.append(AuditSource(attack=result.attack, task=task, audit=audit,
                                         group_size=group_size_of(task, info)))
    return tuple(found)


# -- the headline ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class HeadlineBound:
    """One audit's bound, recomputed at the corrected confidence.

    Attributes:
        attack, task, group_size: as :class:`AuditSource`.
        kind: ``"proof"`` (one-run bound on coin-flip canaries) or ``"heuristic"`` (Clopper-Pearson).
        bound: the recomputed :class:`dpaudit.audit.EpsilonBound` (its confidence is 1 - alpha / m).
        compared_with: the epsilon it is compared with (the proven epsilon for the claim's unit,
            group_size x epsilon for a group; None: nothing proven to compare with).
        above: ``bound.epsilon > compared_with``.
    """

    attack: str
    task: str
    group_size: int | None
    kind: str
    bound: EpsilonBound
    compared_with: float | None
    above: bool

    @property
    def name(self) -> str:
        return f"{self.attack}/{self.task}" if self.task else self.attack

    @property
    def epsilon(self) -> float:
        return self.bound.epsilon

    @property
    def eligible(self) -> bool:
        """Same unit as the per-example claim (a single example, or canaries inserted once)."""
        return self.group_size == 1

    @property
    def unit(self) -> str:
        if self.group_size is None:
            return "unit unknown (canary frequencies not recorded)"
        return "one example" if self.group_size == 1 else f"group of up to {self.group_size} rows"

    @property
    def kind_label(self) -> str:
        if self.kind == HEURISTIC:
            return HEURISTIC_LABEL
        return CLAIM_PROOF_LABEL if self.bound.method == "one_run_claim" else PROOF_LABEL

    def text(self) -> str:
        """"epsilon >= 1.23 (loss/canaries; proof ...)", rounded down."""
        group = "" if self.eligible else f"; {self.unit}"
        return f"epsilon >= {format_down(self.epsilon)} ({self.name}; {self.kind_label}{group})"


@dataclass(frozen=True, kw_only=True)
class Headline:
    """What the report, ``dpaudit attack`` and the demo say about the empirical lower bound.

    Attributes:
        claim: the claim compared with.
        confidence: the joint confidence (0.95).
        num_audits: m, the audits the correction is over.
        bounds: every audit's recomputed bound (eligible, group and unknown-unit ones).
        best: the headline bound: the best eligible proof, else the best eligible heuristic (None: no
            eligible audit).
        contradicted: an eligible PROOF is above the proven epsilon: the claim is wrong.
        investigate: heuristic bounds above the claim and group bounds above the group guarantee.
    """

    claim: Claim
    confidence: float
    num_audits: int
    bounds: tuple[HeadlineBound, ...]
    best: HeadlineBound | None
    contradicted: bool
    investigate: tuple[str, ...]

    @property
    def label(self) -> str:
        """"95%, corrected for 10 audits"."""
        pct = f"{self.confidence * 100:.10g}%"
        return pct if self.num_audits <= 1 else f"{pct}, corrected for {self.num_audits} audits"

    @property
    def group_bounds(self) -> tuple[HeadlineBound, ...]:
        return tuple(b for b in self.bounds if not b.eligible)

    def verdict(self) -> str:
        """How the headline stands against the claim, in a few words."""
        if self.best is None:
            return "no eligible audit"
        if self.contradicted:
            return "CLAIM CONTRADICTED"
        if not self.claim.proven:
            if self.claim.known and not self.claim.private:
                if self.best.kind == PROOF and self.best.epsilon > 0:  # what the audit proved about this model
                    return (f"non-private training: proven leakage, no epsilon below {format_down(self.best.epsilon)} "
                            "describes this model")
                return "no claim to compare with (non-private training)"
            return f"no claim to compare with ({self.claim.text()})"
        if self.best.above:
            return "heuristic bound above the claim: investigate"
        return f"<= claimed {format_up(self.claim.epsilon)}"

    def text(self) -> str:
        """One line: the headline bound, its kind and confidence, and the verdict."""
        if self.best is None:
            extra = f" ({len(self.group_bounds)} group or unknown-unit audit(s) shown apart)" if self.bounds else ""
            return f"empirical lower bound: none for the per-example claim{extra}"
        return f"empirical lower bound ({self.label}): {self.best.text()}: {self.verdict()}"


def _recompute(source: AuditSource, *, delta: float, confidence: float,
               mechanism: ClaimedMechanism | None = None) -> tuple[str, EpsilonBound]:
    """The audit's bound at ``confidence``: against ``mechanism``'s curve (coin-flip canaries of the claim's unit and
    a stated mechanism), Steinke's (other coin-flip canaries), or Clopper-Pearson over every threshold."""
    member, nonmember = source.audit.roc.rank_scores()
    if source.audit.coin_flip and mechanism is not None:
        return PROOF, epsilon_lower_bound_one_run_claim(member, nonmember, mechanism, confidence=confidence)
    if source.audit.coin_flip:
        return PROOF, epsilon_lower_bound_one_run(member, nonmember, delta=delta, confidence=confidence)
    return HEURISTIC, epsilon_lower_bound_clopper_pearson(member, nonmember, delta=delta, confidence=confidence,
                                                          selection=BonferroniThresholds())


def _group_claim(claim: Claim, f: int) -> tuple[float | None, float | None]:
    """(f epsilon, delta_f) of a group of f rows (Dwork & Roth, Theorem 2.2); (None, None) when no epsilon is
    proven, (f epsilon, None) when delta_f >= 1 (the group guarantee promises nothing)."""
    if claim.epsilon is None or claim.delta is None:
        return None, None
    from dpaudit.accounting.guarantees import group_privacy

    eps_f, delta_f = group_privacy(claim.epsilon, claim.delta, f)
    return eps_f, (delta_f if delta_f < 1.0 else None)


def headline(sources: Sequence[AuditSource], claim: Claim, *, confidence: float = 0.95) -> Headline:
    """The headline over ``sources``: each bound at confidence 1 - (1 - confidence) / m, m = len(sources).

    Args:
        sources: every audit of the run (all of them count in m, eligible or not).
        claim: the claim to compare with (:meth:`Claim.from_claimed`).
        confidence: the joint confidence of all the bounds (and so of the headline).
    """
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}.")
    m = len(sources)
    each = 1 - (1 - confidence) / max(m, 1)
    bounds, notes = [], []
    for source in sources:
        f = source.group_size
        target: float | None
        if f == 1:
            target, delta = claim.epsilon, claim.delta if claim.delta is not None else source.audit.delta
        elif f is not None:
            target, delta_f = _group_claim(claim, f)
            delta = delta_f if delta_f is not None else (claim.delta if claim.delta is not None else source.audit.delta)
            if delta_f is None:
                target = None
        else:
            target, delta = None, claim.delta if claim.delta is not None else source.audit.delta
        kind, bound = _recompute(source, delta=delta, confidence=each, mechanism=claim.mechanism if f == 1 else None)
        above = target is not None and bound.epsilon > target
        hb = HeadlineBound(attack=source.attack, task=source.task, group_size=f, kind=kind, bound=bound,
                           compared_with=target, above=above)
        bounds.append(hb)
        if above and f == 1 and kind == HEURISTIC:
            notes.append(f"heuristic bound above the claim: investigate ({hb.text()} > claimed {format_up(target)})")
        elif above and f is not None and f > 1:
            notes.append(f"group bound above the group guarantee: investigate ({hb.text()} > {f} x epsilon = "
                         f"{format_up(target)} at delta {format_up(delta, 2)})")
    eligible = [b for b in bounds if b.eligible]
    proofs = [b for b in eligible if b.kind == PROOF]
    pool = proofs or eligible
    best = max(pool, key=lambda b: b.epsilon) if pool else None
    contradicted = any(b.above for b in proofs)
    return Headline(claim=claim, confidence=confidence, num_audits=m, bounds=tuple(bounds), best=best,
                    contradicted=contradicted, investigate=tuple(notes))


def headline_of(results: Any, *, sampling: str | None = None, confidence: float = 0.95) -> Headline:
    """:func:`headline` of every membership audit in an :class:`dpaudit.attacks.results.AttackResults`."""
    return headline(audit_sources(results), Claim.from_claimed(results.claimed, sampling=sampling),
                    confidence=confidence)
