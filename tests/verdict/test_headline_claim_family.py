"""The headline's one-run proof against the claimed mechanism's curve (:mod:`dpaudit.audit.claim_family`).

Simulated DP-SGD canaries whose true mechanism is known: T Poisson-subsampled Gaussian steps (q, sigma), a
canary adding 1 (its sensitivity) to its own coordinate at each step that samples it, N(0, sigma^2) noise on
every step. The attack sees either every iterate (the likelihood-ratio score: the strongest attack there is)
or only their sum (a released last iterate). Checked:

- validity: with the true mechanism = the claim, the headline exceeds the claimed epsilon in at most alpha
  of the trials (up to 3 binomial standard errors), even with the strongest attack;
- bite: it is well above Steinke's bound on the same scores;
- power: a trainer that ran a third of the claimed noise is caught from its last iterate (headline above the
  claim) in >= 9 of 10 runs;
- the claim's unit only: a non-private model, a group of rows and a claim without a mechanism keep Steinke's.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dpaudit.accounting.events import Segment
from dpaudit.audit import audit_scores
from dpaudit.audit.claim_family import planned_last_iterate_pair
from dpaudit.audit.one_run import epsilon_lower_bound_one_run
from dpaudit.claim import Claim
from dpaudit.verdict.headline import CLAIM_METHODS, CLAIM_PROOF_LABEL, PROOF_LABEL, AuditSource, headline

Q, STEPS, SIGMA = 0.5, 10, 3.435364344268516  # epsilon 2 at delta 1e-5 (PLD; checked below)
EPSILON, DELTA, ALPHA = 2.0, 1e-5, 0.05
M = 1000  # coin-flip canaries per run


def _claimed(sigma: float = SIGMA) -> Claim:
    seg = Segment(steps=STEPS, sampling_probability=Q, noise_multiplier=sigma)
    return Claim(
        known=True,
        private=True,
        epsilon=EPSILON,
        recorded_epsilon=EPSILON,
        delta=DELTA,
        accountant="pld",
        sampling="poisson",
        segments=(seg,),
    )


def _run(rng: np.random.Generator, *, sigma: float, view: str) -> tuple[np.ndarray, np.ndarray]:
    """(member scores, non-member scores) of one run of M coin-flip canaries."""
    coins = rng.random(M) < 0.5
    sampled = (rng.random((M, STEPS)) < Q) & coins[:, None]
    y = sampled + rng.standard_normal((M, STEPS)) * sigma
    if view == "last":
        s = y.sum(axis=1)
    else:  # log likelihood ratio of "member" over "non-member" under the CLAIM (q, SIGMA), every iterate
        s = np.log1p(Q * np.expm1((2 * y - 1) / (2 * SIGMA**2))).sum(axis=1)
    return s[coins], s[~coins]


def _headline(member: np.ndarray, nonmember: np.ndarray, claimed: Claim, *, group_size: int = 1):
    audit = dataclasses.replace(audit_scores(member, nonmember, delta=DELTA, num_bootstrap=2, seed=0), coin_flip=True)
    source = AuditSource(attack="canary", task="canaries", audit=audit, group_size=group_size)
    return headline([source], claimed)


def test_the_claim_is_the_simulated_mechanism() -> None:
    from dpaudit import accounting

    event = accounting.schedule_event([Segment(steps=STEPS, sampling_probability=Q, noise_multiplier=SIGMA)])
    assert accounting.epsilon(event, DELTA) == pytest.approx(EPSILON, abs=0.01)


def test_valid_at_its_confidence_with_the_strongest_attack_and_well_above_steinke() -> None:
    rng = np.random.default_rng(11)
    claimed, trials = _claimed(), 100
    family, printed, steinke = [], [], []
    for _ in range(trials):
        member, nonmember = _run(rng, sigma=SIGMA, view="all")
        head = _headline(member, nonmember, claimed)
        assert head.best.bound.method in CLAIM_METHODS
        assert head.best.kind_label == CLAIM_PROOF_LABEL or head.best.curve_refuted
        family.append(head.best.bound.epsilon)
        printed.append(head.best.epsilon)
        steinke.append(epsilon_lower_bound_one_run(member, nonmember, delta=DELTA).epsilon)
    family, steinke = np.array(family), np.array(steinke)
    limit = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / trials)
    print(
        f"claim family: mean {family.mean():.2f}, max {family.max():.2f}, above the claim "
        f"{(family > EPSILON).mean():.2f} (limit {limit:.2f}); Steinke mean {steinke.mean():.2f}"
    )
    assert (family > EPSILON).mean() <= limit  # the claimed curve is rejected at most alpha of the time
    assert (np.array(printed) > EPSILON).mean() <= limit
    assert family.mean() >= 0.35 * EPSILON and family.mean() > 1.3 * steinke.mean()


def test_a_third_of_the_claimed_noise_is_caught_from_the_last_iterate() -> None:
    """A third of the claimed noise: the stated mechanism is refuted (the curve rejected) in at least 9 of 10 runs;
    the figure printed then is Steinke's, valid for any mechanism."""
    rng = np.random.default_rng(12)
    claimed = _claimed()
    heads = [_headline(*_run(rng, sigma=SIGMA / 3, view="last"), claimed) for _ in range(10)]
    assert sum(h.contradicted or h.mechanism_refuted for h in heads) >= 9
    for h in heads:
        if h.mechanism_refuted:
            assert h.best.curve_refuted and h.best.figure_bound.method in ("one_run", "order_stats_dp")
            assert "MECHANISM REFUTED" in h.verdict() and "not the mechanism privacy.json states" in h.verdict()


def test_the_plan_is_a_function_of_the_claim_alone() -> None:
    claim = _claimed()
    pair = planned_last_iterate_pair(claim, M, ALPHA)
    assert pair == planned_last_iterate_pair(dataclasses.replace(claim), M, ALPHA)
    assert 0 < sum(pair) <= M


def test_steinke_where_no_claimed_curve_applies() -> None:
    rng = np.random.default_rng(13)
    member, nonmember = _run(rng, sigma=SIGMA, view="last")
    non_private = Claim(known=True, private=False)
    stated = dataclasses.replace(_claimed(), segments=())  # --claimed-epsilon: no mechanism stated
    for claimed, group in ((non_private, 1), (stated, 1), (_claimed(), 10)):
        best = _headline(member, nonmember, claimed, group_size=group).bounds[0]
        assert best.bound.method == "one_run" and best.kind_label == PROOF_LABEL
