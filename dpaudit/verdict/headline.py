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
  place of Steinke's. Below the claim, the figure is the epsilon of the least private mechanism of the claimed
  form (sampling rates and steps, any noise) that the guesses reject. Above it, the guesses reject the claimed
  curve itself: the trained model is not the mechanism ``privacy.json`` states ("MECHANISM REFUTED"), but the
  family figure is then no lower bound of the model's epsilon (a Gaussian that satisfies the (epsilon, delta)
  claim but is not subsampled can exceed it), so the figure printed is Steinke's bound on the same guesses,
  valid for any mechanism, and only it can say "CLAIM CONTRADICTED". Each audit's printed statements hold
  together at its own confidence (docs/auditing.md). Steinke's bound stays the one of non-private models, group
  bounds and claims without a mechanism (a stated epsilon, shuffled batches).
- **Ceilings.** Every bound carries its ceiling: the same bound, same sizes and confidence, for a perfect attack.
  When the best ceiling is at or below the claim the verdict says in the same sentence that the audit could not
  have refuted the claim, and what an audit of 1,000 (10,000, 100,000) coin-flip canaries would reach.
- **Stored.** The headline is computed once, when the attacks ran, and stored in ``results.json``
  (``headline``): the terminal, the page, the demo and a user's script read the same figure from there.
- **The blind baseline.** An audit of the examples task (members and non-members as the user's split put them) whose
  AUC does not beat the blind baseline of the same task (the lower end of its AUC interval not above the blind AUC,
  the rule of :func:`dpaudit.attacks.blind.blind_comparison`) says so in its line (:attr:`HeadlineBound.below_blind`);
  when the blind baseline separates the sides (its own interval above 1/2: a distribution shift), the audit may
  measure that shift, not the model, and it is left out of the headline (:attr:`HeadlineBound.left_out`). Canary
  audits are exempt: inject draws every canary the same way, member or control, so their sides cannot differ in
  distribution, and a proof is never hidden (docs/threat-model.md).
- The Gaussian f-DP bound (Mahloujifar et al. 2024) refutes mu-GDP, not (epsilon, delta)-DP (it exceeded the
  true epsilon of randomized response in 99.5% of trials): it never drives the headline or alarm.
- **Claims.** A run with fixed-size shuffled batches proves no epsilon (``privacy.json`` epsilon
  null): it reads "no proven epsilon (as-if-Poisson: X)", nothing is compared with it, and nothing
  says that the claim stands. Claimed figures are rounded up, lower bounds down
  (:mod:`dpaudit.common.figures`).

The validity of the whole pipeline is tested by simulation (tests/verdict/test_headline_validity.py): on
mechanisms with a known epsilon the headline exceeds it in at most alpha of the trials.

References:
  Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run".
  Jagielski, Ullman & Oprea 2020; Nasr et al. 2021 (Clopper-Pearson lower bounds).
  Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run".
  Dwork & Roth 2014, "The Algorithmic Foundations of Differential Privacy", Theorem 2.2 (group privacy).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpaudit.audit import (
    AuditResult,
    BonferroniThresholds,
    EpsilonBound,
    epsilon_lower_bound_clopper_pearson,
    epsilon_lower_bound_one_run,
    order_stats,
)
from dpaudit.audit.claim_curves import CEILING_MIN_SCALE
from dpaudit.audit.claim_family import epsilon_lower_bound_one_run_claim
from dpaudit.audit.order_stats_claim import (
    METHOD_ORDER_CLAIM,
    epsilon_lower_bound_order_stats_claim,
    order_stats_any_mechanism,
    planned_last_iterate_test,
)
from dpaudit.claim import Claim
from dpaudit.common.figures import format_down, format_up

#: The methods of one-run proofs against the claimed curve (their figure holds for mechanisms of the claimed form).
CLAIM_METHODS = ("one_run_claim", METHOD_ORDER_CLAIM)

__all__ = [
    "AuditSource",
    "FDP_LABEL",
    "Headline",
    "HeadlineBound",
    "HEURISTIC_LABEL",
    "PROOF_LABEL",
    "audit_sources",
    "headline",
    "headline_of",
]

PROOF, HEURISTIC = "proof", "heuristic"
PROOF_LABEL = "proof (one run, coin-flip canaries; Steinke et al. 2023)"
CLAIM_PROOF_LABEL = (
    "proof (one run, coin-flip canaries) against the claimed mechanism's trade-off curve (f-DP, "
    "Mahloujifar et al. 2024); the figure holds for mechanisms of the claimed form"
)
REFUTED_CURVE_LABEL = (
    "proof (one run, coin-flip canaries; Steinke et al. 2023), valid for any mechanism; the same guesses "
    "refute the claimed mechanism's trade-off curve (Mahloujifar et al. 2024)"
)
HEURISTIC_LABEL = "heuristic (Clopper-Pearson on the examples of one model: not independent trials)"
FDP_LABEL = "refutes mu-GDP (Gaussian mechanisms only), not an (epsilon, delta) bound"
#: The schema of ``results.json``'s ``headline``.
HEADLINE_SCHEMA = "dpaudit.verdict.headline/1"
#: The membership task of single training examples (train.jsonl vs heldout.jsonl): one row each.
EXAMPLES_TASK = "examples"


# -- the audits of a run ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AuditSource:
    """One stored audit and its unit.

    Attributes:
        attack, task: where it comes from.
        audit: the stored :class:`dpaudit.audit.AuditResult` (its ROC is all that is reused).
        group_size: rows each member is (1: the claim's unit; f for canaries inserted up to f times;
            None: unknown, e.g. a task that does not record its canaries' frequencies).
        blind: the blind baseline's AUC and the lower end of its interval on the same task (None: no blind result).
    """

    attack: str
    task: str
    audit: AuditResult
    group_size: int | None
    blind: tuple[float, float] | None = None

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


def _walk(
    value: Any, task: str, info: Mapping[str, Any] | None
) -> Iterable[tuple[str, Mapping[str, Any] | None, AuditResult]]:
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
    blind = {  # the blind baseline's AUC (and its interval's lower end) per task: see below_blind
        t.task: (float(t.auc), float(t.auc_ci[0]))
        for r in results.attacks
        if getattr(r, "baseline", False)
        for t in getattr(r, "tasks", ())
    }
    found = []
    for result in results.attacks:
        if getattr(result, "baseline", False):  # the blind baseline never queried the model: its audits bound nothing
            continue
        for f in dataclasses.fields(result):
            for task, info, audit in _walk(getattr(result, f.name), "", None):
                found.append(
                    AuditSource(
                        attack=result.attack,
                        task=task,
                        audit=audit,
                        group_size=group_size_of(task, info),
                        blind=blind.get(task.replace("-offline", "", 1)),
                    )
                )
    return tuple(found)


def below_blind(source: AuditSource) -> tuple[str, bool]:
    """("", False) when ``source`` beats the blind baseline of its task, is a canary audit (members and controls drawn
    alike by inject) or has no blind result; otherwise the clause its headline line carries and whether it is left out of
    the headline: its AUC interval's lower end is not above the blind AUC, and when the blind baseline itself
    separates the sides (its interval above 1/2) its signal may be that distribution shift, not the model."""
    if source.blind is None or source.group_size != 1 or not source.task.startswith(EXAMPLES_TASK):
        return "", False
    blind_auc, blind_low = source.blind
    auc = source.audit.auc
    if source.audit.coin_flip or auc.ci.low > blind_auc:
        return "", False
    clause = (
        f"AUC {auc.value:.3f} [{auc.ci.low:.3f}, {auc.ci.high:.3f}] does not beat the blind baseline's "
        f"{blind_auc:.3f} (from the text alone)"
    )
    if blind_low > 0.5:
        return f"{clause}, which separates the sides: left out of the headline", True
    return f"{clause}; the blind baseline does not separate the sides (interval covers 1/2): counted", False


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
        above: the figure (:attr:`epsilon`) is above ``compared_with``.
        ceiling: the most this audit could show: the printed figure's bound (:attr:`figure_bound`), at the same sizes
            and confidence, for a perfect attack (every member scored above every non-member). An audit whose ceiling
            is below the claim could not have refuted it, whatever the model leaks.
        curve_refuted: a bound against the claimed mechanism's trade-off curve (``bound.method == "one_run_claim"``)
            that rejects the claim itself: the trained model is not the mechanism ``privacy.json`` states. Its figure
            is then :attr:`any_mechanism`, never the family figure (which holds only for mechanisms of the claimed form).
        any_mechanism: Steinke et al.'s bound on the same guesses, valid for any mechanism; set when ``curve_refuted``.
            Printing it only when the curve is refuted keeps each audit's printed statements valid together at the
            audit's own confidence (docs/auditing.md, "When the claimed curve is refuted").
        below_blind: "" or the clause saying that the audit does not beat the blind baseline (:func:`below_blind`);
            :meth:`text` carries it in the same sentence.
        left_out: it does not beat a blind baseline that separates the sides: left out of the headline.
    """

    attack: str
    task: str
    group_size: int | None
    kind: str
    bound: EpsilonBound
    compared_with: float | None
    above: bool
    ceiling: float | None = None
    curve_refuted: bool = False
    any_mechanism: EpsilonBound | None = None
    below_blind: str = ""
    left_out: bool = False

    @property
    def name(self) -> str:
        return f"{self.attack}/{self.task}" if self.task else self.attack

    @property
    def figure_bound(self) -> EpsilonBound:
        """The bound whose epsilon is printed: Steinke's when the claimed curve was refuted, else :attr:`bound`."""
        return self.any_mechanism if self.curve_refuted and self.any_mechanism is not None else self.bound

    @property
    def epsilon(self) -> float:
        return self.figure_bound.epsilon

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
    def holds_for(self) -> str:
        """What the figure is a lower bound of: any mechanism, or only mechanisms of the claimed form."""
        if self.kind == HEURISTIC:
            return "the examples of one model taken as independent trials (a heuristic)"
        if self.figure_bound.method in CLAIM_METHODS:
            return "mechanisms of the claimed form (the claimed sampling rates and steps, any noise)"
        return "any mechanism"

    @property
    def kind_label(self) -> str:
        if self.kind == HEURISTIC:
            return HEURISTIC_LABEL
        if self.curve_refuted:
            return REFUTED_CURVE_LABEL
        return CLAIM_PROOF_LABEL if self.bound.method in CLAIM_METHODS else PROOF_LABEL

    def ceiling_text(self) -> str:
        """ "ceiling 4.34": the most a perfect attack could have shown here, rounded down ("" when unknown)."""
        return "" if self.ceiling is None else f"ceiling {format_down(self.ceiling)}"

    def text(self) -> str:
        """ "epsilon >= 1.23 (loss/canaries; proof ...; ceiling 4.34)", rounded down."""
        group = "" if self.eligible else f"; {self.unit}"
        ceiling = f"; {self.ceiling_text()}" if self.ceiling is not None else ""
        blind = f"; {self.below_blind}" if self.below_blind else ""
        return f"epsilon >= {format_down(self.epsilon)} ({self.name}; {self.kind_label}{group}{ceiling}{blind})"

    def to_json(self) -> dict[str, Any]:
        return {
            "attack": self.attack,
            "task": self.task,
            "group_size": self.group_size,
            "kind": self.kind,
            "epsilon": self.epsilon,
            "holds_for": self.holds_for,
            "label": self.kind_label,
            "bound": self.bound.to_json(),
            "compared_with": self.compared_with,
            "above": self.above,
            "ceiling": self.ceiling,
            "curve_refuted": self.curve_refuted,
            "any_mechanism": None if self.any_mechanism is None else self.any_mechanism.to_json(),
            "below_blind": self.below_blind,
            "left_out": self.left_out,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> HeadlineBound:
        return cls(
            attack=obj["attack"],
            task=obj["task"],
            group_size=obj.get("group_size"),
            kind=obj["kind"],
            bound=EpsilonBound.from_json(dict(obj["bound"])),
            compared_with=obj.get("compared_with"),
            above=bool(obj["above"]),
            ceiling=obj.get("ceiling"),
            curve_refuted=bool(obj.get("curve_refuted")),
            any_mechanism=(
                None if obj.get("any_mechanism") is None else EpsilonBound.from_json(dict(obj["any_mechanism"]))
            ),
            below_blind=str(obj.get("below_blind") or ""),
            left_out=bool(obj.get("left_out")),
        )


@dataclass(frozen=True, kw_only=True)
class Headline:
    """What the report, ``dpaudit attack`` and the demo say about the empirical lower bound.

    Computed once, when the attacks ran, and stored in ``results.json`` (``headline``, :meth:`to_json`): every reader
    (terminal, page, demo, a user's script) gets the same number, label and kind from there (:func:`headline_of`).

    Attributes:
        claim: the claim compared with.
        confidence: the joint confidence (0.95).
        num_audits: m, the audits the correction is over.
        bounds: every audit's recomputed bound (eligible, group and unknown-unit ones).
        best: the headline bound: the best eligible proof, else the best eligible heuristic, leaving out audits that
            do not beat a blind baseline that separates the sides (None: no such audit).
        contradicted: an eligible PROOF valid for any mechanism is above the proven epsilon: the (epsilon, delta)
            claim is false.
        mechanism_refuted: an eligible proof rejects the claimed mechanism's own trade-off curve: the trained model is
            not the mechanism ``privacy.json`` states (whether or not its (epsilon, delta) envelope holds).
        investigate: heuristic bounds above the claim and group bounds above the group guarantee.
        ceiling: the most the audits the headline is chosen from could have shown (their best perfect-attack bound;
            None without an eligible audit).
        suggestion: when the ceiling is below the claim, the ceiling an audit of coin-flip canaries inserted once would
            have at this confidence, as (canaries, ceiling).
    """

    claim: Claim
    confidence: float
    num_audits: int
    bounds: tuple[HeadlineBound, ...]
    best: HeadlineBound | None
    contradicted: bool
    investigate: tuple[str, ...]
    mechanism_refuted: bool = False
    ceiling: float | None = None
    suggestion: tuple[int, float] | None = None

    @property
    def label(self) -> str:
        """ "95%, corrected for 10 audits"."""
        pct = f"{self.confidence * 100:.10g}%"
        return pct if self.num_audits <= 1 else f"{pct}, corrected for {self.num_audits} audits"

    @property
    def group_bounds(self) -> tuple[HeadlineBound, ...]:
        return tuple(b for b in self.bounds if not b.eligible)

    @property
    def powerless(self) -> bool:
        """The claim is proven but even a perfect attack on these audits could not have refuted it."""
        return (
            self.claim.proven
            and self.ceiling is not None
            and self.claim.epsilon is not None
            and self.ceiling <= self.claim.epsilon
        )

    def ceiling_sentence(self) -> str:
        """ "this audit could not have refuted 8.00: its ceiling is 2.10 (...); with 1,000 coin-flip canaries it would
        be 4.34" when the ceiling is at or below the claim; "" otherwise."""
        if not self.powerless:
            return ""
        assert self.best is not None and self.ceiling is not None and self.claim.epsilon is not None
        text = (
            f"this audit could not have refuted {format_up(self.claim.epsilon)}: its ceiling is "
            f"{format_down(self.ceiling)} (the bound a perfect attack would reach with these audits' sizes at "
            f"{self.label})"
        )
        if self.suggestion is not None:
            n, value = self.suggestion
            text += f"; with {n:,} coin-flip canaries inserted once it would be {format_down(value)}"
        return text

    def verdict(self) -> str:
        """How the headline stands against the claim, in a few words (with the ceiling when it could not refute)."""
        if self.best is None:
            return "no eligible audit"
        if self.contradicted:
            return "CLAIM CONTRADICTED"
        if self.mechanism_refuted:
            return (
                f"MECHANISM REFUTED: the trained model is not the mechanism privacy.json states (its trade-off curve "
                f"is refuted at {self.label}); for any mechanism the bound is epsilon >= "
                f"{format_down(self.best.epsilon)}, within the claimed {format_up(self.claim.epsilon)}"
            )
        if not self.claim.proven:
            if self.claim.known and not self.claim.private:
                if self.best.kind == PROOF and self.best.epsilon > 0:  # what the audit proved about this model
                    return (
                        f"non-private training: proven leakage, no epsilon below {format_down(self.best.epsilon)} "
                        "describes this model"
                    )
                return "no claim to compare with (non-private training)"
            return f"no claim to compare with ({self.claim.text()})"
        if self.best.above:
            return "heuristic bound above the claim: investigate"
        verdict = f"<= claimed {format_up(self.claim.epsilon)}"
        ceiling = self.ceiling_sentence()
        return f"{verdict}, but {ceiling}" if ceiling else verdict

    def text(self) -> str:
        """One line: the headline bound, its kind and confidence, and the verdict."""
        if self.best is None:
            extra = f" ({len(self.group_bounds)} group or unknown-unit audit(s) shown apart)" if self.bounds else ""
            blind = sum(1 for b in self.bounds if b.eligible and b.left_out)
            if blind:
                extra += f" ({blind} audit(s) left out: they do not beat the blind baseline)"
            return f"empirical lower bound: none for the per-example claim{extra}"
        return f"empirical lower bound ({self.label}): {self.best.text()}: {self.verdict()}"

    def to_json(self) -> dict[str, Any]:
        """``results.json``'s ``headline``: the figure, what it holds for, its confidence and the audits it was chosen
        from, the verdict and its ceiling, and every audit's corrected bound (:meth:`from_json` reads it back)."""
        best = self.best
        return {
            "schema": HEADLINE_SCHEMA,
            "text": self.text(),
            "verdict": self.verdict(),
            "epsilon_lower_bound": None if best is None else best.epsilon,
            "method": None if best is None else best.figure_bound.method,
            "kind": None if best is None else best.kind,
            "label": None if best is None else best.kind_label,
            "holds_for": None if best is None else best.holds_for,
            "source": None if best is None else best.name,
            "confidence": self.confidence,
            "correction": self.label,
            "num_audits": self.num_audits,
            "chosen_from": [b.name for b in self.bounds if b.eligible and not b.left_out],
            "contradicted": self.contradicted,
            "mechanism_refuted": self.mechanism_refuted,
            "ceiling": self.ceiling,
            "suggestion": None
            if self.suggestion is None
            else {"canaries": self.suggestion[0], "ceiling": self.suggestion[1]},
            "claim": {
                "text": self.claim.text(),
                "epsilon": self.claim.epsilon,
                "delta": self.claim.delta,
                "proven": self.claim.proven,
            },
            "investigate": list(self.investigate),
            "bounds": [b.to_json() for b in self.bounds],
            "best": None if best is None else self.bounds.index(best),
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], claim: Claim) -> Headline:
        """The stored headline, with ``claim`` (the results' own claim)."""
        if obj.get("schema") != HEADLINE_SCHEMA:
            raise ValueError(f"headline schema is {obj.get('schema')!r}, this dpaudit reads {HEADLINE_SCHEMA!r}.")
        bounds = tuple(HeadlineBound.from_json(b) for b in obj["bounds"])
        suggestion = obj.get("suggestion")
        return cls(
            claim=claim,
            confidence=float(obj["confidence"]),
            num_audits=int(obj["num_audits"]),
            bounds=bounds,
            best=None if obj.get("best") is None else bounds[int(obj["best"])],
            contradicted=bool(obj["contradicted"]),
            mechanism_refuted=bool(obj.get("mechanism_refuted")),
            investigate=tuple(obj.get("investigate", ())),
            ceiling=obj.get("ceiling"),
            suggestion=None if suggestion is None else (int(suggestion["canaries"]), float(suggestion["ceiling"])),
        )


def _bound_of(
    kind: str,
    member: np.ndarray,
    nonmember: np.ndarray,
    *,
    delta: float,
    confidence: float,
    mechanism: Claim | None,
    min_scale: float | None = None,
) -> EpsilonBound:
    """The bound of ``kind`` on these scores: against ``mechanism``'s curve (a proof with a stated mechanism),
    Steinke's (a proof without one), or Clopper-Pearson over every threshold (a heuristic)."""
    if kind == PROOF and mechanism is not None:
        m = member.size + nonmember.size
        if planned_last_iterate_test(mechanism, m, round(1 - confidence, 12)) == "order_stats":
            return epsilon_lower_bound_order_stats_claim(  # a curve rejected at half its noise: capped there (cheap)
                member, nonmember, mechanism, confidence=confidence, min_scale=min_scale or CEILING_MIN_SCALE
            )
        return epsilon_lower_bound_one_run_claim(
            member, nonmember, mechanism, confidence=confidence, min_scale=min_scale
        )
    if kind == PROOF:
        return epsilon_lower_bound_one_run(member, nonmember, delta=delta, confidence=confidence)
    return epsilon_lower_bound_clopper_pearson(
        member, nonmember, delta=delta, confidence=confidence, selection=BonferroniThresholds()
    )


def _perfect(n_members: int, n_nonmembers: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a perfect attack: every member above every non-member (distinct, symmetric about 0: a guess around
    the pooled median misplaces at most the least confident canary)."""
    return np.linspace(1.0, 2.0, n_members), np.linspace(-2.0, -1.0, n_nonmembers)


@functools.lru_cache(maxsize=4096)
def _ceiling(
    kind: str, n_members: int, n_nonmembers: int, *, delta: float, confidence: float, mechanism: Claim | None
) -> float | None:
    """The bound a perfect attack reaches with these sizes (None when the sizes allow no bound at all); a function of
    the sizes, the confidence and the claim only, so it is cached (audits of one run share their sizes)."""
    if n_members < 1 or n_nonmembers < 1:
        return None
    return _bound_of(
        kind,
        *_perfect(n_members, n_nonmembers),
        delta=delta,
        confidence=confidence,
        mechanism=mechanism,
        min_scale=CEILING_MIN_SCALE,
    ).epsilon


#: Coin-flip canary counts a powerless verdict suggests: the smallest whose ceiling exceeds the claim, else the largest.
SUGGESTED_CANARIES = (1_000, 10_000, 100_000)


def _suggestion(claim: Claim, confidence: float) -> tuple[int, float] | None:
    """(canaries, ceiling) of an audit of coin-flip canaries inserted once (half members) at ``confidence``."""
    if claim.epsilon is None or claim.delta is None:
        return None
    found = None
    for n in SUGGESTED_CANARIES:
        ceiling = _ceiling(
            PROOF, n // 2, n - n // 2, delta=claim.delta, confidence=confidence, mechanism=_mechanism(claim)
        )
        if ceiling is None:
            continue
        found = (n, ceiling)
        if ceiling > claim.epsilon:
            break
    return found


def _recompute(
    source: AuditSource, *, delta: float, confidence: float, mechanism: Claim | None = None
) -> tuple[str, EpsilonBound, float | None]:
    """The audit's (kind, bound, ceiling) at ``confidence``: against ``mechanism``'s curve (coin-flip canaries of the
    claim's unit and a stated mechanism), Steinke's (other coin-flip canaries), or Clopper-Pearson over every
    threshold; the ceiling is the same bound for a perfect attack."""
    member, nonmember = source.audit.roc.rank_scores()
    kind = PROOF if source.audit.coin_flip else HEURISTIC
    mechanism = mechanism if kind == PROOF else None
    bound = _bound_of(kind, member, nonmember, delta=delta, confidence=confidence, mechanism=mechanism)
    ceiling = _ceiling(kind, member.size, nonmember.size, delta=delta, confidence=confidence, mechanism=mechanism)
    return kind, bound, ceiling


def _mechanism(claim: Claim) -> Claim | None:
    """The claim as the mechanism a one-run proof tests (its trade-off curve), when it states one."""
    return claim if claim.states_mechanism else None


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

    A bound against the claimed curve that rejects the claim itself (``curve_refuted``) is replaced, as the figure, by
    Steinke's bound on the same scores at the same confidence: rejecting the curve shows that the model is not the
    stated mechanism, and the family figure is then no lower bound of its epsilon (docs/auditing.md).

    Args:
        sources: every audit of the run (all of them count in m, eligible or not).
        claim: the claim to compare with (:class:`dpaudit.claim.Claim`).
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
        blind_clause, left_out = below_blind(source)
        kind, bound, ceiling = _recompute(
            source, delta=delta, confidence=each, mechanism=_mechanism(claim) if f == 1 else None
        )
        refuted = (
            bound.method in CLAIM_METHODS
            and target is not None
            and (bound.scale is not None and bound.scale <= 1.0 or bound.epsilon > target)
        )
        any_mechanism = None
        if refuted:  # the figure is then the any-mechanism bound: its ceiling is that bound's for a perfect attack
            member, nonmember = source.audit.roc.rank_scores()
            if bound.method == METHOD_ORDER_CLAIM:
                r = int(bound.guesses or 1)
                any_mechanism = order_stats_any_mechanism(member, nonmember, r=r, delta=delta, confidence=each)
                ceiling = order_stats.ceiling(
                    member.size + nonmember.size, r, family=order_stats.FAMILY_DP, delta=delta, confidence=each
                )
            else:
                any_mechanism = epsilon_lower_bound_one_run(member, nonmember, delta=delta, confidence=each)
                ceiling = _ceiling(PROOF, member.size, nonmember.size, delta=delta, confidence=each, mechanism=None)
        hb = HeadlineBound(
            attack=source.attack,
            task=source.task,
            group_size=f,
            kind=kind,
            bound=bound,
            compared_with=target,
            above=False,
            ceiling=ceiling,
            curve_refuted=refuted,
            any_mechanism=any_mechanism,
            below_blind=blind_clause,
            left_out=left_out,
        )
        hb = dataclasses.replace(hb, above=target is not None and hb.epsilon > target)
        bounds.append(hb)
        if hb.above and f == 1 and kind == HEURISTIC:
            notes.append(f"heuristic bound above the claim: investigate ({hb.text()} > claimed {format_up(target)})")
        elif hb.above and f is not None and f > 1:
            notes.append(
                f"group bound above the group guarantee: investigate ({hb.text()} > {f} x epsilon = "
                f"{format_up(target)} at delta {format_up(delta, 2)})"
            )
    eligible = [b for b in bounds if b.eligible and not b.left_out]  # may measure the split's shift, not the model
    proofs = [b for b in eligible if b.kind == PROOF]
    pool = proofs or eligible
    best = max(pool, key=lambda b: b.epsilon) if pool else None
    contradicted = any(b.above for b in proofs)
    refuted = any(b.curve_refuted for b in proofs) and not contradicted
    if refuted:  # the verdict names the refuted curve: lead with one that refuted it
        best = max((b for b in proofs if b.curve_refuted), key=lambda b: b.epsilon)
    ceilings = [b.ceiling for b in pool if b.ceiling is not None]
    ceiling = max(ceilings) if ceilings else None
    suggestion = None
    if claim.proven and ceiling is not None and claim.epsilon is not None and ceiling <= claim.epsilon:
        suggestion = _suggestion(claim, each)
    return Headline(
        claim=claim,
        confidence=confidence,
        num_audits=m,
        bounds=tuple(bounds),
        best=best,
        contradicted=contradicted,
        investigate=tuple(notes),
        mechanism_refuted=refuted,
        ceiling=ceiling,
        suggestion=suggestion,
    )


def headline_of(results: Any, *, sampling: str | None = None, confidence: float = 0.95) -> Headline:
    """The headline of an :class:`dpaudit.attacks.results.AttackResults`: the one stored in its ``results.json``
    (computed when the attacks ran) when it holds one at ``confidence``; otherwise :func:`headline` of every membership
    audit in it (results written before the headline was stored)."""
    stored = getattr(results, "headline", None)
    if isinstance(stored, Headline) and stored.confidence == confidence:
        return stored
    claim = results.claimed.unproven() if sampling == "shuffle" else results.claimed
    return headline(audit_sources(results), claim, confidence=confidence)
