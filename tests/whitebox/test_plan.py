"""The one-run proof's guess counts planned from the claim (:mod:`dpaudit.whitebox.plan`), on simulated canaries.

Each canary's T observations are drawn here from the mechanism itself (a fair coin, then per step the clipped
sum, 0 or C with probability q, plus Gaussian noise): numpy only, so the validity count runs 200 audits.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.audit.tradeoff import one_run_margin
from dpaudit.claim import Claim
from dpaudit.whitebox.bounds import one_run_family
from dpaudit.whitebox.layout import CanaryLayout
from dpaudit.whitebox.plan import candidate_pairs, planned_guesses
from dpaudit.whitebox.scores import all_iterates_scores
from tests.claims import poisson_claim


def _claim(q: float, steps: int, sigma: float, epsilon: float) -> Claim:
    return poisson_claim(q, steps, sigma, epsilon=epsilon)


#: A Gaussian mechanism (q = 1, one step) at epsilon 2 (delta 1e-5): sigma 1.995 (dp_accounting's PLD).
GAUSSIAN = _claim(1.0, 1, 1.995, 2.0)
#: The benchmark's design at epsilon 2: q = 0.9, 4 steps, sigma 3.67.
AUDIT_DESIGN = _claim(0.9, 4, 3.67, 2.0)


def _scores(claim: Claim, m: int, rng: np.random.Generator, noise: float = 1.0):
    """Member and non-member scores of m coin-flip canaries; ``noise``: the true std over the claimed one."""
    q, std = claim.per_step()
    member = rng.integers(0, 2, m).astype(bool)
    sampled = rng.random((q.size, m)) < q[:, None]
    y = (member[None, :] & sampled) * claim.clip_norm + rng.standard_normal((q.size, m)) * (noise * std)[:, None]
    s = all_iterates_scores(y, CanaryLayout(member=member, unit="example"), q, std, claim.clip_norm)
    return s[member], s[~member]


def _rejects_claim(claim, pair, member, nonmember, alpha):
    """Whether the one-run recursion on ``pair`` rejects the claim's own curve (the bound exceeds its epsilon)."""
    m = member.size + nonmember.size
    scores = np.concatenate([member, nonmember])
    top = np.argsort(-scores, kind="stable")
    guess_in, guess_out = top[: pair[0]], top[m - pair[1] :] if pair[1] else top[:0]
    correct = int((guess_in < member.size).sum() + (guess_out >= member.size).sum())
    return one_run_margin(claim.curve(1.0).blow_up_inverse, m, pair[0] + pair[1], correct, alpha) > 0


def test_the_plan_is_a_function_of_the_claim_alone():
    pair = planned_guesses(GAUSSIAN, "example", 0, 2000, 0.05)
    assert pair in candidate_pairs(2000)
    planned_guesses.cache_clear()
    assert planned_guesses(GAUSSIAN, "example", 0, 2000, 0.05) == pair  # no state, no entropy: the same plan


def test_a_true_gaussian_claim_is_rejected_in_at_most_5_percent_of_200_runs_and_half_its_noise_in_95():
    """Validity of the planned one-run proof, counted: the mechanism is exactly the claim, so a rejection is a
    false one (at most 10 of 200 at alpha 0.05); with half the noise (the sigma / 2 bug) nearly every run
    rejects the claim."""
    m, alpha = 2000, 0.05
    pair = planned_guesses(GAUSSIAN, "example", 0, m, alpha)
    rng = np.random.default_rng(2027)
    false = sum(_rejects_claim(GAUSSIAN, pair, *_scores(GAUSSIAN, m, rng), alpha) for _ in range(200))
    caught = sum(_rejects_claim(GAUSSIAN, pair, *_scores(GAUSSIAN, m, rng, noise=0.5), alpha) for _ in range(200))
    assert false <= 10, false
    assert caught >= 190, caught


def test_the_planned_proof_reaches_half_the_claim_where_the_bonferroni_grid_does_not():
    """The benchmark's design (q = 0.9, 4 steps, epsilon 2) with 20,000 canaries: the planned pair at the full
    risk against the default grid's 14 pairs at 1/14 of it, on the same simulated runs."""
    rng = np.random.default_rng(11)
    planned, grid = [], []
    for _ in range(2):
        member, nonmember = _scores(AUDIT_DESIGN, 20_000, rng)
        pair = planned_guesses(AUDIT_DESIGN, "example", 0, member.size + nonmember.size, 0.025)
        planned.append(one_run_family(member, nonmember, AUDIT_DESIGN, confidence=0.975, planned=pair).epsilon)
        grid.append(one_run_family(member, nonmember, AUDIT_DESIGN, confidence=0.975).epsilon)
    assert all(p > g for p, g in zip(planned, grid)), (planned, grid)
    assert min(planned) >= 0.5 * AUDIT_DESIGN.epsilon and max(planned) < AUDIT_DESIGN.epsilon, (planned, grid)


@pytest.mark.parametrize("claim", [GAUSSIAN, AUDIT_DESIGN], ids=["gaussian", "audit-design"])
def test_the_claims_sigmas_give_their_stated_epsilon(claim):
    from dpaudit import accounting

    assert accounting.epsilon(claim.scaled_event(1.0), claim.delta) == pytest.approx(claim.epsilon, abs=0.02)


def test_the_gaussian_pair_plan_is_a_function_of_the_claim_and_picks_the_stronger_test():
    """The Gaussian pair's plan (projection and figure) is the same on every call; at the benchmark's design its
    planned figure stays below the claim, and the verdict keeps the order statistics or the pair when they plan higher
    (on a Gaussian claim, where the projections ARE a Gaussian pair, the fit plans most of the claim)."""
    from dpaudit.whitebox.plan import planned_gauss_pair, planned_one_run

    plan = planned_gauss_pair(GAUSSIAN, "example", 0, 2000, 0.05)
    planned_gauss_pair.cache_clear()
    assert planned_gauss_pair(GAUSSIAN, "example", 0, 2000, 0.05) == plan and plan.projection in ("ratio", "sum")
    assert 0.5 * GAUSSIAN.epsilon < plan.epsilon < GAUSSIAN.epsilon
    design = planned_gauss_pair(AUDIT_DESIGN, "example", 0, 100_000, 0.025)
    assert 0.8 * AUDIT_DESIGN.epsilon < design.epsilon < AUDIT_DESIGN.epsilon
    assert planned_gauss_pair(AUDIT_DESIGN, "example", 0, 100_000, 0.025, "last_iterate").projection == "final"
    assert planned_one_run(AUDIT_DESIGN, "example", 0, 100_000, 0.025) == "order_stats"  # planned 0.96 of the claim
    # the verdict rests on the Gaussian pair only where the claim is of its form: every step samples every canary
    from dpaudit.whitebox.plan import _gauss_pair_form

    assert _gauss_pair_form(GAUSSIAN) and not _gauss_pair_form(AUDIT_DESIGN)


@pytest.mark.parametrize("noise", [1.0, 0.5], ids=["the-claim", "half-the-noise"])
def test_a_gaussian_pair_verdict_carries_its_ceiling_and_a_refutation_prints_an_any_mechanism_figure(
    noise, monkeypatch
):
    """The verdict path of a planned Gaussian pair (rarely planned: the order statistics usually plan higher), forced:
    the one-run verdict bound is the Gaussian pair with its cap as ceiling; on the claimed Gaussian itself it stays
    within the claim, and with half the noise it rejects it, so the figure printed is a bound for any mechanism."""
    from dpaudit.audit import gauss_pair
    from dpaudit.whitebox import analysis as wa
    from dpaudit.whitebox.harness import RunEvidence

    monkeypatch.setattr(wa, "planned_one_run", lambda *args: "gauss_pair")
    rng = np.random.default_rng(5)
    m = 2000
    q, std = GAUSSIAN.per_step()
    member = rng.integers(0, 2, m).astype(bool)
    y = (member[None, :] & (rng.random((q.size, m)) < q[:, None])) * GAUSSIAN.clip_norm
    y = y + rng.standard_normal((q.size, m)) * (noise * std)[:, None]
    evidence = RunEvidence(CanaryLayout(member=member, unit="example"), GAUSSIAN, y, -y.sum(axis=0))
    for full in (False, True):
        a = wa.analyse([evidence], confidence=0.95, full=full)
        one = a.one_run["all_iterates"][0]["gauss_pair"]
        assert a.one_run_method == "gauss_pair" and a.ceilings["one-run"] == gauss_pair.ceiling(delta=GAUSSIAN.delta)
        if noise == 1.0:
            assert one.epsilon <= GAUSSIAN.epsilon and not a.alarm and a.figure.epsilon <= GAUSSIAN.epsilon
        else:
            assert one.epsilon > GAUSSIAN.epsilon and a.mechanism_refuted
            assert a.figure is a.any_mechanism and a.figure.method in ("steinke", "clopper_pearson")
