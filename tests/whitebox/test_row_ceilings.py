"""Every white-box bound row carries its ceiling and the canaries a perfect attack needs (:mod:`dpaudit.whitebox.bounds`).

Synthetic scores, no training. The rows of :func:`one_run_bounds` (Steinke, the f-DP mu-GDP reading, the f-DP recursion
against the claimed curve) and :func:`multi_run_bounds` (Clopper-Pearson (epsilon, delta), the Clopper-Pearson points)
carry as ceiling the row's own bound on a perfect outcome (every member scored 1, every non-member 0: every guess
right) at the row's sizes. The claimed-curve recursion's canaries needed, m*, is the first grid point (2^(k/4), walked
up) whose perfect attack rejects the claimed curve itself: it does at m* and not at the grid point below; m* grows with
the claimed epsilon. The page's words for a row whose ceiling is at or below the claim say that it could not refute it.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from dpaudit.audit.bounds import clopper_pearson_canaries_needed, epsilon_lower_bound_clopper_pearson
from dpaudit.audit.claim_curves import CEILING_MIN_SCALE
from dpaudit.audit.claim_family import candidate_pairs
from dpaudit.audit.one_run import (
    epsilon_lower_bound_one_run,
    epsilon_lower_bound_one_run_fdp,
    fdp_canaries_needed,
    steinke_canaries_needed,
)
from dpaudit.audit.thresholds import BonferroniThresholds
from dpaudit.report.whitebox import _ceiling_words
from dpaudit.whitebox.bounds import (
    Bound,
    guess_form,
    multi_run_bounds,
    multi_run_family,
    one_run_bounds,
    one_run_family,
    one_run_family_canaries_needed,
    points_canaries_needed,
)
from tests.claims import poisson_claim

LEVEL = 0.975
#: The benchmark's design at epsilon 2 (q = 0.9, 4 steps, sigma 3.67), and the same with more and less noise.
CLAIMS = [poisson_claim(0.9, 4, 3.67 * s, epsilon=e) for s, e in ((0.6, 4.0), (1.0, 2.0), (1.6, 1.1))]
AUDITED = CLAIMS[1]


def _perfect(members: int, nonmembers: int) -> tuple[np.ndarray, np.ndarray]:
    return np.ones(members), np.zeros(nonmembers)


def test_each_one_run_and_pooled_row_carries_its_own_bound_on_a_perfect_outcome():
    rng = np.random.default_rng(0)
    members, nonmembers = 213, 187  # a coin's split of 400 canaries
    member, nonmember = rng.normal(0.8, 1.0, members), rng.normal(0.0, 1.0, nonmembers)
    perfect, delta = _perfect(members, nonmembers), AUDITED.delta
    pair = candidate_pairs(400)[-1]
    for planned in (pair, None):
        rows = one_run_bounds(member, nonmember, AUDITED, confidence=LEVEL, planned=planned)
        steinke, fdp, family = rows["steinke"], rows["fdp_gaussian"], rows["claim_family"]
        assert steinke.ceiling == epsilon_lower_bound_one_run(*perfect, delta=delta, confidence=LEVEL).epsilon
        assert fdp.ceiling == epsilon_lower_bound_one_run_fdp(*perfect, delta=delta, confidence=LEVEL).epsilon
        on_perfect = one_run_family(*perfect, AUDITED, confidence=LEVEL, planned=planned, min_scale=CEILING_MIN_SCALE)
        assert on_perfect.guesses == on_perfect.correct == 400 and family.ceiling == on_perfect.epsilon  # both ways
        assert family.ceiling >= family.epsilon and steinke.ceiling >= steinke.epsilon and fdp.ceiling >= fdp.epsilon
        assert steinke.canaries_needed == steinke_canaries_needed(2.0, delta=delta, confidence=LEVEL)
        assert fdp.canaries_needed == fdp_canaries_needed(2.0, delta=delta, confidence=LEVEL)
        assert family.canaries_needed == one_run_family_canaries_needed(
            AUDITED, confidence=LEVEL, form="grid" if planned is None else "both"
        )
    rows = multi_run_bounds(member, nonmember, AUDITED, confidence=LEVEL)
    pooled, points = rows["clopper_pearson"], rows["claim_family"]
    kw = dict(delta=delta, confidence=LEVEL, selection=BonferroniThresholds(), one_sided=False)
    assert pooled.ceiling == epsilon_lower_bound_clopper_pearson(*perfect, **kw).epsilon >= pooled.epsilon
    assert pooled.canaries_needed == clopper_pearson_canaries_needed(
        2.0, delta=delta, confidence=LEVEL, one_sided=False
    )
    on_perfect = multi_run_family(*perfect, AUDITED, confidence=LEVEL, min_scale=CEILING_MIN_SCALE)
    assert points.ceiling == on_perfect.epsilon >= points.epsilon  # the gradient path's rows are these too
    assert points.canaries_needed == points_canaries_needed(AUDITED, confidence=LEVEL)


def test_the_claimed_curve_recursion_needs_the_fewest_grid_canaries_and_more_for_a_larger_claim():
    """Per guess form: a planned pair guessing both ways, one guessing "member" only (a perfect attack then guesses
    every member), the Bonferroni grid; m* rejects the claimed curve with the row's own function, the point below not;
    m* grows with the claimed epsilon (three claims of the design's q and steps, sigma scaled)."""
    found = {}
    for form in ("both", "member", "grid"):
        for claim in CLAIMS:
            needed = one_run_family_canaries_needed(claim, confidence=LEVEL, form=form)
            assert needed is not None
            found[form, claim.epsilon] = needed
            if claim is not AUDITED:  # the row's own function at m* and below: on the design (curves cost ~0.5 s each)
                continue
            fewer = int(round(needed / 2 ** (1 / 4)))  # the grid's point below
            for n, rejected in ((needed, True), (fewer, False)):
                pairs = [p for p in candidate_pairs(n) if guess_form(p) == form] if form != "grid" else [None]
                for pair in {pairs[0], pairs[-1]}:
                    perfect = _perfect(n - n // 2, n // 2)
                    bound = one_run_family(*perfect, claim, confidence=LEVEL, planned=pair, min_scale=1.0)
                    assert (bound.scale is not None and bound.scale <= 1.0) == rejected, (form, claim, n, pair)
        counts = [found[form, c.epsilon] for c in sorted(CLAIMS, key=lambda c: c.epsilon)]
        assert counts == sorted(counts), (form, counts)
    assert all(found["both", c.epsilon] <= min(found["member", c.epsilon], found["grid", c.epsilon]) for c in CLAIMS)


def test_a_row_whose_ceiling_is_at_or_below_the_claim_says_it_could_not_have_refuted_it():
    run = SimpleNamespace(claimed_epsilon=8.0)
    low = Bound(method="steinke", proves="", epsilon=1.9, confidence=LEVEL, ceiling=4.86, canaries_needed=None)
    words = _ceiling_words(run, "one-run", low)  # type: ignore[arg-type]
    assert words == (
        "this row's test could not have refuted 8.00: its ceiling (a perfect attack at these sizes) is 4.86; "
        "no perfect attack on up to 100,000,000 canaries rejects the claim"
    )
    high = Bound(
        method="clopper_pearson", proves="", epsilon=1.9, confidence=LEVEL, ceiling=9.51, canaries_needed=92682
    )
    words = _ceiling_words(run, "pooled", high)  # type: ignore[arg-type]
    assert (
        words
        == "ceiling 9.51 (a perfect attack); a perfect attack needs 92,682 canaries over all runs to reject the claim"
    )
