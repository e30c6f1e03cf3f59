"""The white-box audit's lower bounds: one run (coin-flip canaries) and many runs (pooled canaries).

Every bound comes with what it proves:

- ``steinke``: Steinke, Nasr & Jagielski (2023), one run: refutes (epsilon, delta)-DP for any mechanism;
- ``fdp_gaussian``: Mahloujifar, Melis & Chaudhuri (2024), one run: refutes mu-GDP, read at delta;
- ``clopper_pearson``: many runs, Clopper-Pearson on TPR and FPR over every threshold (Bonferroni):
  refutes (epsilon, delta)-DP;
- ``claim_family`` (one run: the f-DP recursion, on guess counts planned from the claim before the
  scores are seen (:mod:`dpaudit.whitebox.plan`) or a Bonferroni grid of them; many runs: a threshold's
  Clopper-Pearson point below the curve, every threshold at once): tests the CLAIMED mechanism's own trade-off curve
  (:mod:`dpaudit.audit.tradeoff`) and, within the family of the claim with every sigma scaled, reports
  the epsilon of the least private member it rejects. It exceeds the claimed epsilon exactly when the
  claim itself is rejected, which is a proof whatever the mechanism; the number itself is a lower bound
  for mechanisms of the claimed form (Poisson-subsampled Gaussian steps with the claimed q and steps).

- ``order_stats`` / ``order_stats_dp`` (one run): the order-statistics test of Xiang et al. (2025,
  :mod:`dpaudit.audit.order_stats`) on a planned number of released guesses (:func:`dpaudit.whitebox.plan.planned_order_stats`),
  against the claim's scaled curve (``order_stats``: the claimed form) and the (epsilon, delta) channel
  (``order_stats_dp``: any mechanism). Each carries its ceiling (the same test with no mistake) and the canaries a
  perfect attack would need to reject the claim.
- ``gauss_pair`` (one run): the canaries' projections fitted as a Gaussian pair, its hockey-stick divergence read with
  the fitted parameters' estimation error paid (:mod:`dpaudit.audit.gauss_pair`; Agrawal et al. 2026): a bound for
  mechanisms whose canary projections are Gaussian pairs (DP-SGD's, by the fit's validity tests, at the claim's own
  form); its ceiling is the search's cap (a parametric bound extrapolates).

Every bound carries its ceiling, the same test's bound for a perfect attack at the audit's sizes and confidence (for
the guess and threshold tests: every member scored 1 and every non-member 0, so each cut falls on a tie and every
guess is right), and ``canaries_needed``, the fewest canaries (half members, on the grid 2^(k/4)) whose perfect attack would
reject the claim with the same test (docs/auditing.md, "The white-box verdict"), so that "0.9 of the claim" and "0.9
of what this audit can prove" are told apart.

The pooled many-run bounds treat the R x m canaries as independent trials: true across runs, and
within a run for Dirac canaries on disjoint coordinates under per-example Poisson sampling and
coordinate-wise noise, which is what a correct DP-SGD trainer does; R runs of one canary each make it
the classic audit without that reading.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpaudit.audit import gauss_pair, order_stats
from dpaudit.audit.bounds import (
    _cp_upper,
    clopper_pearson_canaries_needed,
    clopper_pearson_ceiling,
    epsilon_lower_bound_clopper_pearson,
)
from dpaudit.audit.claim_curves import CEILING_MIN_SCALE, FamilyBound
from dpaudit.audit.claim_family import claim_family_test
from dpaudit.audit.one_run import (
    epsilon_lower_bound_one_run,
    epsilon_lower_bound_one_run_fdp,
    fdp_canaries_needed,
    fdp_ceiling,
    steinke_canaries_needed,
    steinke_ceiling,
)
from dpaudit.audit.thresholds import BonferroniThresholds, GuessGrid
from dpaudit.audit.tradeoff import TradeOff, one_run_margin
from dpaudit.claim import Claim
from dpaudit.common.figures import format_down

__all__ = [
    "Bound",
    "gauss_pair_bound",
    "multi_run_bounds",
    "one_run_bounds",
    "guess_form",
    "one_run_family_canaries_needed",
    "one_run_family_ceiling",
    "order_stats_bounds",
    "points_canaries_needed",
    "points_ceiling",
    "points_test",
]

PROOF_DP = "(epsilon, delta)-DP, any mechanism"
PROOF_GDP = "mu-GDP (Gaussian mechanisms), read at delta"
PROOF_FAMILY = "the claimed mechanism's trade-off curve; the number: mechanisms of the claimed form"
PROOF_ORDER_DP = "(epsilon, delta)-DP, any mechanism (order statistics)"
PROOF_GAUSS_PAIR = gauss_pair.GUARANTEE_GAUSS_PAIR + ", read at delta"


@dataclass(frozen=True)
class Bound:
    """One lower bound: ``method``, what it ``proves``, ``epsilon`` at the claim's delta and ``confidence``
    (``whitebox.json`` stores it as :meth:`to_json`; the report reads it back into this record)."""

    method: str
    proves: str
    epsilon: float
    confidence: float
    guesses: int | None = None
    correct: int | None = None
    scale: float | None = None
    capped: bool = False
    selection: str | None = None
    #: The same test's bound for a perfect attack at these sizes (None: not computed for this bound).
    ceiling: float | None = None
    #: The fewest canaries whose perfect attack would reject the claim with this test (None: not computed, or none up
    #: to :data:`~dpaudit.audit.order_stats.MOST_CANARIES`, 10^8, when ``ceiling`` is given: every bound that carries
    #: a ceiling carries this too).
    canaries_needed: int | None = None

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _family(found: FamilyBound, confidence: float, **extra) -> Bound:
    return Bound(
        method="claim_family",
        proves=PROOF_FAMILY,
        epsilon=float(found.epsilon),
        confidence=confidence,
        scale=found.scale,
        capped=found.capped,
        **extra,
    )


def one_run_family(
    member: np.ndarray,
    nonmember: np.ndarray,
    claim: Claim,
    *,
    confidence: float,
    grid: GuessGrid = GuessGrid(),
    planned: tuple[int, int] | None = None,
    min_scale: float | None = None,
) -> Bound:
    """The claim-family bound of one run: the f-DP recursion, the scaled claim's curve as f, on the guess
    counts ``planned`` from the claim before the scores were seen (:func:`dpaudit.whitebox.plan.planned_guesses`:
    one test at the full risk), or else on every pair of ``grid`` (Bonferroni)."""
    member, nonmember = np.asarray(member, float), np.asarray(nonmember, float)
    pairs = (planned,) if planned is not None else grid.resolve(member.size + nonmember.size)
    found, counts = claim_family_test(member, nonmember, claim, pairs, 1 - confidence, min_scale=min_scale)
    best = max(((r, v) for r, v, _, _ in counts), key=lambda rv: (rv[1] / rv[0] if rv[0] else 0.0, rv[0]))
    return _family(
        found,
        confidence,
        guesses=int(best[0]),
        correct=int(best[1]),
        selection="planned" if planned is not None else f"bonferroni over {len(pairs)}",
    )


def multi_run_family(
    member: np.ndarray, nonmember: np.ndarray, claim: Claim, *, confidence: float, min_scale: float | None = None
) -> Bound:
    """The claim-family bound of pooled trials: at every threshold, Clopper-Pearson upper bounds on FPR
    and FNR (each count at (1 - confidence) / 2 / n: uniform over all thresholds, see
    :class:`~dpaudit.audit.thresholds.BonferroniThresholds`); a curve is rejected when some point is below it."""
    member, nonmember = np.sort(np.asarray(member, float)), np.sort(np.asarray(nonmember, float))
    n_m, n_n = member.size, nonmember.size
    thresholds = np.unique(np.concatenate([member, nonmember]))
    fn = np.searchsorted(member, thresholds, side="left")  # members scoring < t
    fp = n_n - np.searchsorted(nonmember, thresholds, side="left")  # non-members scoring >= t
    rejects = points_test(fp, n_n, fn, n_m, 1 - confidence)
    return _family(claim.lower_bound(rejects, min_scale=min_scale), confidence)


def points_test(fp: np.ndarray, n_n: int, fn: np.ndarray, n_m: int, alpha: float) -> Callable[[TradeOff], bool]:
    """The pooled Clopper-Pearson points' test: at each threshold, upper bounds on the FPR (``fp`` of ``n_n``
    non-members) and the FNR (``fn`` of ``n_m`` members), each count at ``alpha`` / 2 / n (uniform over all
    thresholds, see :class:`~dpaudit.audit.thresholds.BonferroniThresholds`); a curve is rejected when some point lies
    below it. The one test of :func:`multi_run_family`, its plan and its canaries needed."""
    fpr_up = _cp_upper(fp, n_n, alpha / 2 / n_n)
    fnr_up = _cp_upper(fn, n_m, alpha / 2 / n_m)
    keep = (fpr_up < 1) & (fnr_up < 1)
    fpr_up, fnr_up = _lower_left(fpr_up[keep], fnr_up[keep])
    return lambda curve: bool(fpr_up.size and np.any(fnr_up < curve(fpr_up)))


def _lower_left(fpr: np.ndarray, fnr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points no other point is below and to the left of (fpr and fnr both at most its own), which decide the
    test alone: a trade-off curve evaluated in floating point is non-increasing (each of its lines is), so a point
    (x, y) below it, y < f(x), makes every point (x', y') with x' <= x and y' <= y below it too. A run of thresholds
    that moves one count only (members or non-members) is one point here, so each curve of a search is evaluated on
    a fraction of the thresholds; the verdict is the same boolean."""
    if fpr.size < 2 or np.isnan(fpr).any() or np.isnan(fnr).any():
        return fpr, fnr
    order = np.lexsort((fnr, fpr))  # by fpr, then fnr
    fpr, fnr = fpr[order], fnr[order]
    least = np.minimum.accumulate(fnr)
    kept = np.concatenate(([True], fnr[1:] < least[:-1]))  # strictly below every point to its left
    return fpr[kept], fnr[kept]


@functools.lru_cache(maxsize=256)
def points_ceiling(claim: Claim, members: int, nonmembers: int, *, confidence: float) -> float:
    """The pooled Clopper-Pearson points' bound of a perfect attack at these sizes: :func:`multi_run_family` on every
    member scored 1 and every non-member 0, the scales searched down to
    :data:`~dpaudit.audit.claim_curves.CEILING_MIN_SCALE`. Memoized (both views pool the same sizes)."""
    perfect = np.ones(members), np.zeros(nonmembers)
    return multi_run_family(*perfect, claim, confidence=confidence, min_scale=CEILING_MIN_SCALE).epsilon


def points_canaries_needed(claim: Claim, *, confidence: float, most: int = order_stats.MOST_CANARIES) -> int | None:
    """The fewest pooled canaries (half members) whose perfect attack (no false positive, no false negative) puts a
    Clopper-Pearson point of :func:`multi_run_family` below the claimed curve, on the grid 2^(k/4); None when even
    ``most`` do not."""
    curve = claim.curve(1.0)

    def proves(n: int) -> bool:
        n_m, n_n = n - n // 2, n // 2
        return n_n >= 1 and points_test(np.zeros(1), n_n, np.zeros(1), n_m, 1 - confidence)(curve)

    return order_stats.fewest_on_grid(proves, smallest=2, most=most)


@functools.lru_cache(maxsize=1024)
def one_run_family_ceiling(
    claim: Claim, members: int, nonmembers: int, *, confidence: float, planned: tuple[int, int] | None
) -> float:
    """The one-run claim-family bound of a perfect attack at these sizes: :func:`one_run_family` on every member
    scored 1 and every non-member 0 (each cut falls on a tie: every member is guessed, every non-member too by a pair
    that guesses both ways, each guess right), the scales searched down to :data:`~dpaudit.audit.claim_curves.CEILING_MIN_SCALE`. Memoized."""
    perfect = np.ones(members), np.zeros(nonmembers)
    return one_run_family(*perfect, claim, confidence=confidence, planned=planned, min_scale=CEILING_MIN_SCALE).epsilon


#: The guess designs of a one-run claim-family bound, as a perfect attack meets them: a Bonferroni grid (with pairs
#: that guess both ways), or one planned pair guessing "member" only or both ways.
GUESS_FORMS = ("grid", "member", "both")


def guess_form(planned: tuple[int, int] | None) -> str:
    """The :data:`GUESS_FORMS` entry of a one-run claim-family bound's guesses (``planned``: its pair, None: the grid)."""
    return "grid" if planned is None else ("both" if planned[1] > 0 else "member")


@functools.lru_cache(maxsize=256)
def one_run_family_canaries_needed(
    claim: Claim, *, confidence: float, form: str, most: int = order_stats.MOST_CANARIES
) -> int | None:
    """The fewest canaries n (half members; on the grid of :func:`~dpaudit.audit.order_stats.fewest_on_grid`, walked
    up: no smaller grid point does) whose perfect attack rejects the claimed curve itself with the f-DP recursion.

    A perfect attack (:func:`one_run_family_ceiling`'s outcome) on guesses of ``form`` (:data:`GUESS_FORMS`): "both",
    one planned pair guessing both ways, guesses all n canaries, all right, at the full risk; "member", one planned
    pair guessing "member" only, guesses the n - n // 2 members, all right; "grid", the default Bonferroni guess grid,
    guesses all n at the grid's share of the risk. A plan's pair changes with n, its form is what a perfect attack
    reads. None when no grid point up to ``most`` rejects the claim. Memoized."""
    if form not in GUESS_FORMS:
        raise ValueError(f"form must be one of {GUESS_FORMS}, got {form!r}.")
    curve, alpha = claim.curve(1.0), 1 - confidence

    def proves(n: int) -> bool:
        each = alpha / len(GuessGrid().resolve(n)) if form == "grid" else alpha
        right = n - n // 2 if form == "member" else n
        return one_run_margin(curve.blow_up_inverse, n, right, right, each) > 0

    return order_stats.fewest_on_grid(proves, smallest=2, most=most, monotone=False)


def one_run_bounds(
    member: np.ndarray,
    nonmember: np.ndarray,
    claim: Claim,
    *,
    confidence: float,
    planned: tuple[int, int] | None = None,
) -> dict[str, Bound]:
    """Steinke, the Gaussian f-DP reading and the claim family (on the ``planned`` guesses when given), on one
    run's coin-flip canaries, each with its ceiling (a perfect attack's bound at these sizes) and the canaries a
    perfect attack would need to reject the claim."""
    assert claim.delta is not None and claim.epsilon is not None  # an audited claim states its mechanism
    delta, sizes = claim.delta, (int(np.size(member)), int(np.size(nonmember)))
    steinke = epsilon_lower_bound_one_run(member, nonmember, delta=delta, confidence=confidence)
    gdp = epsilon_lower_bound_one_run_fdp(member, nonmember, delta=delta, confidence=confidence)
    family = one_run_family(member, nonmember, claim, confidence=confidence, planned=planned)
    return {
        "steinke": Bound(
            method="steinke",
            proves=PROOF_DP,
            epsilon=steinke.epsilon,
            confidence=confidence,
            guesses=steinke.guesses,
            correct=steinke.correct,
            ceiling=steinke_ceiling(*sizes, delta=delta, confidence=confidence),
            canaries_needed=steinke_canaries_needed(claim.epsilon, delta=delta, confidence=confidence),
        ),
        "fdp_gaussian": Bound(
            method="fdp_gaussian",
            proves=PROOF_GDP,
            epsilon=gdp.epsilon,
            confidence=confidence,
            guesses=gdp.guesses,
            correct=gdp.correct,
            ceiling=fdp_ceiling(*sizes, delta=delta, confidence=confidence),
            canaries_needed=fdp_canaries_needed(claim.epsilon, delta=delta, confidence=confidence),
        ),
        "claim_family": dataclasses.replace(
            family,
            ceiling=one_run_family_ceiling(claim, *sizes, confidence=confidence, planned=planned),
            canaries_needed=one_run_family_canaries_needed(claim, confidence=confidence, form=guess_form(planned)),
        ),
    }


def multi_run_bounds(member: np.ndarray, nonmember: np.ndarray, claim: Claim, *, confidence: float) -> dict[str, Bound]:
    """Clopper-Pearson (epsilon, delta) and the claim family (the Clopper-Pearson points) on pooled trials, each with
    its ceiling and the canaries a perfect attack would need to reject the claim."""
    assert claim.delta is not None and claim.epsilon is not None  # an audited claim states its mechanism
    sizes = int(np.size(member)), int(np.size(nonmember))
    cp = epsilon_lower_bound_clopper_pearson(
        member, nonmember, delta=claim.delta, confidence=confidence, selection=BonferroniThresholds(), one_sided=False
    )
    return {
        "clopper_pearson": Bound(
            method="clopper_pearson",
            proves=PROOF_DP,
            epsilon=cp.epsilon,
            confidence=confidence,
            ceiling=clopper_pearson_ceiling(*sizes, delta=claim.delta, confidence=confidence, one_sided=False),
            canaries_needed=clopper_pearson_canaries_needed(
                claim.epsilon, delta=claim.delta, confidence=confidence, one_sided=False
            ),
        ),
        "claim_family": dataclasses.replace(
            multi_run_family(member, nonmember, claim, confidence=confidence),
            ceiling=points_ceiling(claim, *sizes, confidence=confidence),
            canaries_needed=points_canaries_needed(claim, confidence=confidence),
        ),
    }


def order_stats_bounds(
    member: np.ndarray, nonmember: np.ndarray, claim: Claim, *, confidence: float, r: int, center: float | None
) -> dict[str, Bound]:
    """The order-statistics test of one run (r most confident guesses released, "member" above ``center``; None: the
    pooled scores' median) against the claim's scaled curve and the (epsilon, delta) channel, each with its ceiling
    and the canaries a perfect attack would need to reject the claim (releasing the same share)."""
    assert claim.delta is not None and claim.epsilon is not None  # an audited claim states its mechanism
    member, nonmember = np.asarray(member, float), np.asarray(nonmember, float)
    n = member.size + nonmember.size
    c = float(np.median(np.concatenate([member, nonmember]))) if center is None else center
    selection = f"planned: {r} most confident of {n} released"
    out = {}
    for key, family, proves in (
        ("order_stats", order_stats.FAMILY_CLAIM, PROOF_FAMILY),
        ("order_stats_dp", order_stats.FAMILY_DP, PROOF_ORDER_DP),
    ):
        found = order_stats.order_stats_bound(  # a claim rejected down to half its noise is capped there (cheap)
            member,
            nonmember,
            r=r,
            center=c,
            family=family,
            delta=claim.delta,
            confidence=confidence,
            claim=claim,
            min_scale=CEILING_MIN_SCALE,
        )
        ceiling = order_stats.ceiling(
            n, r, family=family, delta=claim.delta, confidence=confidence, claim=claim, min_scale=CEILING_MIN_SCALE
        )
        null = (
            order_stats.curve_profile(claim.curve(1.0))
            if family == order_stats.FAMILY_CLAIM
            else order_stats.dp_profile(claim.epsilon, claim.delta)
        )
        out[key] = Bound(
            method=key,
            proves=proves,
            epsilon=found.epsilon,
            confidence=confidence,
            guesses=r,
            correct=r - found.mistakes,
            scale=found.theta if family == order_stats.FAMILY_CLAIM else None,
            capped=found.capped,
            selection=selection,
            ceiling=ceiling,
            canaries_needed=order_stats.canaries_needed(null, confidence=confidence, fraction=r / n),
        )
    return out


def gauss_pair_bound(
    member: np.ndarray, nonmember: np.ndarray, claim: Claim, *, confidence: float, projection: str
) -> Bound:
    """The Gaussian-pair bound of one run's canary projections (``projection`` names them: "ratio", "sum" or "final"),
    with its ceiling (the search's cap) and the canaries a perfect attack would need to reach the claim."""
    assert claim.delta is not None and claim.epsilon is not None  # an audited claim states its mechanism
    found = gauss_pair.gauss_pair_bound(member, nonmember, delta=claim.delta, confidence=confidence)
    return Bound(
        method="gauss_pair",
        proves=PROOF_GAUSS_PAIR,
        epsilon=found.epsilon,
        confidence=confidence,
        capped=found.capped,
        selection=f"planned: {projection} projection, mu >= {format_down(found.mu, 4)}",  # a lower bound: down
        ceiling=gauss_pair.ceiling(delta=claim.delta),
        canaries_needed=gauss_pair.canaries_needed(claim.epsilon, delta=claim.delta, confidence=confidence),
    )
