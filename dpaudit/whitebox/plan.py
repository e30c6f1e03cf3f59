"""The one-run proof's guess counts, planned from the claim before any score is seen.

The one-run f-DP recursion (Mahloujifar, Melis & Chaudhuri 2024; :func:`dpaudit.audit.tradeoff.one_run_margin`)
tests ONE choice of guesses: "member" on the k+ highest scores, "non-member" on the k- lowest. Trying a grid
of (k+, k-) on the scores costs a Bonferroni correction (14 pairs: each tested at alpha / 14), and that
correction, not the attack, is what held the proof near half the claim. In a white-box audit the auditor
knows, before training, exactly what a correct trainer's canaries look like: the claimed mechanism
(:class:`dpaudit.claim.Claim`: q_t, the noise std, C) and the layout's mixtures.
:func:`planned_guesses` picks the pair from that alone, so the proof tests it at the full alpha:

1. simulate the claimed mechanism's per-canary scores (a fixed seed; the same Neyman-Pearson score
   :func:`~dpaudit.whitebox.scores.all_iterates_scores` gives the real canaries);
2. (:func:`dpaudit.audit.claim_family.planned_pair`, shared with the black-box proof) for each candidate pair,
   the expected number of correct guesses v among r = k+ + k- on m fair-coin
   canaries (the precision of the population's top k+ / m and bottom k- / m), less one standard
   deviation (a pair whose count varies less is preferred: the audit has one run);
3. the pair whose planned (r, v) gives the largest claim-family bound at the full alpha.

Validity needs only that the pair is a function of public inputs (the claim, the layout's clipping unit and
partners, m) and not of the coins or the noise: the claim never depends on the coins (see
:meth:`~dpaudit.whitebox.layout.CanaryLayout.canaries`), so the recursion's guarantee holds for the pair as
for any pair fixed in advance. A wrong claim (a broken trainer) only makes the plan less than optimal.
"""

from __future__ import annotations

import functools

import numpy as np

from dpaudit.audit.claim_family import candidate_pairs, planned_pair
from dpaudit.claim import Claim
from dpaudit.whitebox.layout import CanaryLayout
from dpaudit.whitebox.scores import all_iterates_scores

__all__ = ["candidate_pairs", "planned_guesses"]

#: Simulated observations per class (members, non-members; canaries x steps) the plan estimates the score
#: distributions from: the planned count moves by about one standard deviation per 1% of precision, so the
#: tail's precision must be estimated to a fraction of that (250,000 canaries at 4 steps, 50,000 at 20).
PLAN_OBSERVATIONS = 1_000_000
#: ... and at most this many canaries per class (a one-step claim).
PLAN_CANARIES = 250_000
#: The plan's own seed: the plan is a fixed function of the claim (reproducible, and never the auditor's coins).
PLAN_SEED = 20240527


def _simulated_scores(claim: Claim, unit: str, partners: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores of n simulated member and n non-member canaries of the claimed mechanism (sorted)."""
    q, std = claim.per_step()
    layout = CanaryLayout(member=np.zeros(n, dtype=bool), unit=unit, partners=partners)
    shifts, inside, outside = layout.mixtures(q, claim.clip_norm)
    rng = np.random.default_rng(PLAN_SEED)
    out = []
    for weights in (inside, outside):
        cumulative = np.cumsum(weights, axis=1)  # (T, K)
        u = rng.random((q.size, n))
        component = (u[:, :, None] >= cumulative[:, None, :]).sum(axis=2).clip(0, shifts.size - 1)
        y = shifts[component] + rng.standard_normal((q.size, n)) * std[:, None]
        out.append(np.sort(all_iterates_scores(y, layout, q, std, claim.clip_norm)))
    return out[0], out[1]


@functools.lru_cache(maxsize=64)
def planned_guesses(claim: Claim, unit: str, partners: int, m: int, alpha: float) -> tuple[int, int]:
    """The (k+, k-) the one-run proof of m canaries under ``claim`` tests at significance ``alpha``.

    A function of public inputs only (see the module docstring); cached, so that the R runs of an audit (and
    the seeds of a test) plan once.
    """
    n = max(1_000, min(PLAN_CANARIES, PLAN_OBSERVATIONS // claim.steps))
    member, nonmember = _simulated_scores(claim, unit, partners, n)
    return planned_pair(claim, member, nonmember, m, alpha)
