"""Everything at once: :func:`audit_scores` turns one set of scores into one typed :class:`AuditResult`.

``exceeds_claim`` is set (with a loud warning) only when a proof of the claim's unit (the one-run
bound on coin-flip canaries inserted once) is above the accountant's epsilon; the headline of a
whole attack run (several audits, corrected for how many) is :mod:`dpaudit.verdict.headline`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from numpy.typing import ArrayLike

from dpaudit.audit.bootstrap import Statistic, _bootstrap
from dpaudit.audit.bounds import GUARANTEE_DP, GUARANTEE_GDP, EpsilonBound, epsilon_lower_bound_clopper_pearson
from dpaudit.audit.checks import (
    _check_unit,
    _float_or_none,
    _json_array,
    _json_int,
    _json_number,
    _json_object,
    _scores,
)
from dpaudit.audit.one_run import epsilon_lower_bound_one_run, epsilon_lower_bound_one_run_fdp
from dpaudit.audit.roc import (
    Estimate,
    Roc,
    TprAtFpr,
    _advantage_stat,
    _auc_stat,
    _tpr_at_fpr_point,
    _tpr_at_stat,
    roc_curve,
)
from dpaudit.audit.thresholds import BonferroniThresholds, SplitThreshold

if TYPE_CHECKING:
    from dpaudit.accounting.serialization import Json

SCHEMA = "dpaudit.audit/1"


@dataclass(frozen=True, kw_only=True, eq=False)
class AuditResult:
    """The audit of one attack on one membership task.

    Attributes:
        n_members, n_nonmembers: score counts.
        roc: the empirical ROC.
        auc: AUC with bootstrap CI.
        tpr_at_fpr: one entry per requested FPR (0.1% and 1% by default).
        advantage: max(TPR - FPR) with bootstrap CI.
        bounds: every epsilon lower bound computed; each at confidence 1 - (1 - confidence) / len(bounds)
            so that all hold together at ``confidence``.
        epsilon_lower_bound: the largest (epsilon, delta)-DP bound in ``bounds`` (valid at
            ``confidence`` for this one audit; the maximum over several audits is not: see
            :mod:`dpaudit.verdict.headline`). It includes the heuristic Clopper-Pearson bounds.
        delta, confidence, seed: the audit's parameters (seed: bootstrap and split).
        claimed_epsilon: the accountant's epsilon at ``delta`` (None: not given or nothing proven).
        exceeds_claim: True when a PROOF of the claim's unit (the one-run bound of Steinke et al. on
            coin-flip canaries inserted once) is above ``claimed_epsilon``; heuristic, f-DP and group
            bounds above it only warn. For this audit alone (not corrected over audits).
        warnings: human-readable alarms (the exceeded claim first, in capitals), heuristic bounds
            above the claim, group bounds, too few non-members for an FPR, the f-DP bound.
        coin_flip: whether the one-run bounds were computed (membership decided by fair coins).
    """

    n_members: int
    n_nonmembers: int
    roc: Roc
    auc: Estimate
    tpr_at_fpr: tuple[TprAtFpr, ...]
    advantage: Estimate
    bounds: tuple[EpsilonBound, ...]
    epsilon_lower_bound: float
    delta: float
    confidence: float
    seed: int
    claimed_epsilon: float | None
    exceeds_claim: bool
    warnings: tuple[str, ...] = field(default=())
    coin_flip: bool = False

    def to_json(self) -> Json:
        return {
            "schema": SCHEMA,
            "n_members": self.n_members,
            "n_nonmembers": self.n_nonmembers,
            "roc": self.roc.to_json(),
            "auc": self.auc.to_json(),
            "tpr_at_fpr": [t.to_json() for t in self.tpr_at_fpr],
            "advantage": self.advantage.to_json(),
            "bounds": [b.to_json() for b in self.bounds],
            "epsilon_lower_bound": self.epsilon_lower_bound,
            "delta": self.delta,
            "confidence": self.confidence,
            "seed": self.seed,
            "claimed_epsilon": self.claimed_epsilon,
            "exceeds_claim": self.exceeds_claim,
            "warnings": list(self.warnings),
            "coin_flip": self.coin_flip,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, object]) -> AuditResult:
        if obj.get("schema") != SCHEMA:
            raise ValueError(f"not an audit result of schema {SCHEMA}: got schema {obj.get('schema')!r}.")
        return cls(
            n_members=_json_int(obj["n_members"]),
            n_nonmembers=_json_int(obj["n_nonmembers"]),
            roc=Roc.from_json(_json_object(obj["roc"])),
            auc=Estimate.from_json(_json_object(obj["auc"])),
            tpr_at_fpr=tuple(TprAtFpr.from_json(_json_object(t)) for t in _json_array(obj["tpr_at_fpr"])),
            advantage=Estimate.from_json(_json_object(obj["advantage"])),
            bounds=tuple(EpsilonBound.from_json(_json_object(b)) for b in _json_array(obj["bounds"])),
            epsilon_lower_bound=_json_number(obj["epsilon_lower_bound"]),
            delta=_json_number(obj["delta"]),
            confidence=_json_number(obj["confidence"]),
            seed=_json_int(obj["seed"]),
            claimed_epsilon=_float_or_none(obj["claimed_epsilon"]),
            exceeds_claim=bool(obj["exceeds_claim"]),
            warnings=tuple(str(w) for w in _json_array(obj.get("warnings", ()))),
            coin_flip=bool(obj.get("coin_flip", False)),
        )


def audit_scores(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    claimed_epsilon: float | None = None,
    seed: int,
    confidence: float = 0.95,
    coin_flip: bool = False,
    group_size: int = 1,
    fprs: Sequence[float] = (0.001, 0.01),
    num_bootstrap: int = 1000,
) -> AuditResult:
    """ROC, AUC, TPR at low FPR, advantage and every epsilon lower bound for ONE set of scores.

    Bounds computed: Clopper-Pearson at a split threshold (split seed = ``seed``; skipped with fewer
    than 2 members or non-members) and with the all-threshold Bonferroni correction; with
    ``coin_flip=True`` (canaries included by independent fair coins) also the one-run bounds of
    Steinke et al. (2023) and Mahloujifar et al. (2024) over the default guess grid. All bounds of
    this one audit share the error budget 1 - confidence (Bonferroni), so ``epsilon_lower_bound``
    (their maximum) is valid at ``confidence`` for THIS audit alone. The maximum over several audits
    (attacks x tasks) is not: the headline over a whole attack run is :mod:`dpaudit.verdict.headline`, which
    recomputes every bound corrected for the number of audits.

    What may say "the claim is wrong" (``exceeds_claim``): only a proof, i.e. the Steinke et al.
    one-run bound on coin-flip canaries (``coin_flip=True``), of the claim's unit
    (``group_size == 1``). A Clopper-Pearson bound on the examples of one model is a heuristic
    (members and non-members of one run are not independent trials): above the claim it is a
    warning to investigate, never the alarm. The f-DP bound refutes mu-GDP, not an (epsilon, delta)
    claim: a warning too. A canary inserted f > 1 times bounds group epsilon: with ``group_size=f``
    nothing is compared with the per-example claim.

    Args:
        member_scores, nonmember_scores: scores, higher means member.
        delta: delta of the privacy claim (the run's ``privacy.json`` delta).
        claimed_epsilon: the accountant's epsilon at ``delta``; None when nothing is claimed.
        seed: seeds the bootstrap and the split.
        confidence: joint confidence of the bounds; also the level of the bootstrap CIs.
        coin_flip: True only when membership was decided by independent fair coins.
        group_size: rows each member contributed (a canary inserted f times: f); > 1 makes the
            bounds group bounds, never compared with ``claimed_epsilon``.
        fprs: FPRs at which TPR is reported.
        num_bootstrap: bootstrap resamples per CI.

    Returns:
        :class:`AuditResult`; ``exceeds_claim`` and ``warnings[0]`` flag a proof above the claim.
    """
    from dpaudit.common.figures import format_down, format_up

    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    delta = _check_unit(delta, "delta")
    confidence = _check_unit(confidence, "confidence")
    if claimed_epsilon is not None and not (claimed_epsilon >= 0):
        raise ValueError(f"claimed_epsilon must be >= 0 or None, got {claimed_epsilon}.")
    cp = functools.partial(epsilon_lower_bound_clopper_pearson, member, nonmember, delta=delta)
    makers = [functools.partial(cp, selection=BonferroniThresholds())]
    split = SplitThreshold(seed=seed)
    if int(member.size * split.fraction) >= 1 and int(nonmember.size * split.fraction) >= 1:
        makers.insert(0, functools.partial(cp, selection=split))  # a split needs >= 2 of each
    if coin_flip:
        makers.append(functools.partial(epsilon_lower_bound_one_run, member, nonmember, delta=delta))
        makers.append(functools.partial(epsilon_lower_bound_one_run_fdp, member, nonmember, delta=delta))
    each = 1 - (1 - confidence) / len(makers)
    bounds = [make(confidence=each) for make in makers]
    lower = max(b.epsilon for b in bounds if b.guarantee == GUARANTEE_DP)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"group_size must be an integer >= 1, got {group_size!r}.")
    compared = claimed_epsilon if group_size == 1 else None  # the claim the bounds are compared with
    proofs = [b for b in bounds if b.method == "one_run"] if coin_flip else []
    proof = max((b.epsilon for b in proofs), default=0.0)
    exceeds = compared is not None and proof > compared
    fprs = tuple(_check_unit(f, "fpr", high_open=False) for f in fprs)
    stats: dict[str, Statistic] = {"auc": _auc_stat, "advantage": _advantage_stat}
    stats.update({f"tpr@{f!r}": _tpr_at_stat(f) for f in fprs})
    cis = _bootstrap(member, nonmember, stats, seed=seed, num_samples=num_bootstrap, level=confidence)
    roc = roc_curve(member, nonmember)
    tprs = tuple(_tpr_at_fpr_point(roc, f, cis[f"tpr@{f!r}"]) for f in fprs)
    warnings: list[str] = []
    claim = None if claimed_epsilon is None else format_up(claimed_epsilon)
    if exceeds:
        worst = max(proofs, key=lambda b: b.epsilon)
        warnings.append(
            f"EMPIRICAL EPSILON LOWER BOUND {format_down(proof)} EXCEEDS THE CLAIMED EPSILON {claim} "
            f"(delta={format_up(delta, 2)}, {confidence:.0%} confidence for this audit alone, proof: "
            f"{worst.method}/{worst.selection} on coin-flip canaries, Steinke et al. 2023): the trainer "
            "or the accountant has a bug, or the scores are not from the model the claim is about."
        )
    heuristic = [b for b in bounds if b.method == "clopper_pearson"]
    best_h = max(heuristic, key=lambda b: b.epsilon)
    if compared is not None and best_h.epsilon > compared:
        warnings.append(
            f"heuristic bound above the claim: investigate. Clopper-Pearson {format_down(best_h.epsilon)} > claimed "
            f"epsilon {claim} ({best_h.selection}), on the examples of one model, which are not independent trials: "
            "not a proof that the claim is wrong."
        )
    if group_size > 1:
        warnings.append(
            f"group bound: members were inserted up to {group_size} times, so these bounds are on the "
            f"epsilon of a group of {group_size} rows (at most {group_size} x the per-example epsilon), "
            "not on the per-example claim."
        )
    for t in tprs:
        if not t.enough_nonmembers:
            warnings.append(
                f"TPR at FPR {t.fpr:g} needs >= {t.min_nonmembers} non-members, have "
                f"{t.n_nonmembers}: it is TPR at zero false positives."
            )
    gdp = [b for b in bounds if b.guarantee == GUARANTEE_GDP]
    if compared is not None and gdp and gdp[0].epsilon > compared:
        warnings.append(
            f"The f-DP one-run bound {format_down(gdp[0].epsilon)} (refutes mu-GDP, Gaussian mechanisms only; not an "
            f"(epsilon, delta) bound) is above the claimed epsilon {claim}: the mechanism is not the mu-GDP a "
            "Gaussian mechanism with this claim would be; not a proof that the (epsilon, delta) claim is wrong."
        )
    return AuditResult(
        n_members=member.size,
        n_nonmembers=nonmember.size,
        roc=roc,
        auc=Estimate(value=roc.auc(), ci=cis["auc"]),
        tpr_at_fpr=tprs,
        advantage=Estimate(value=roc.advantage(), ci=cis["advantage"]),
        bounds=tuple(bounds),
        epsilon_lower_bound=float(lower),
        delta=delta,
        confidence=confidence,
        seed=int(seed),
        claimed_epsilon=None if claimed_epsilon is None else float(claimed_epsilon),
        exceeds_claim=bool(exceeds),
        warnings=tuple(warnings),
        coin_flip=coin_flip,
    )
