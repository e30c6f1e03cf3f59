"""One-run audits on coin-flip canaries: Steinke, Nasr & Jagielski (2023) and its f-DP analysis.

- :func:`epsilon_lower_bound_one_run`: guess "member" for the k+ top scores and "non-member" for the
  k- bottom scores, abstain on the rest, and test the number of correct guesses: a proof for ONE
  training run, provided an independent fair coin decided every canary's membership.
- :func:`epsilon_lower_bound_one_run_fdp`: the f-DP analysis of the same guessing game by
  Mahloujifar, Melis & Chaudhuri (2024), tighter, reported against the Gaussian-DP family: it refutes
  mu-GDP (Gaussian mechanisms only), not an (epsilon, delta) claim.

Each has its ceiling (:func:`steinke_ceiling`, :func:`fdp_ceiling`: the bound of a perfect attack at the audit's
sizes) and the canaries a perfect attack needs to reject a claim (:func:`steinke_canaries_needed`,
:func:`fdp_canaries_needed`; docs/auditing.md, "The white-box verdict").
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

import numpy as np
import scipy.optimize
import scipy.special
from numpy.typing import ArrayLike, NDArray

from dpaudit.audit.bounds import GUARANTEE_DP, GUARANTEE_GDP, EpsilonBound
from dpaudit.audit.checks import _check_unit, _scores
from dpaudit.audit.gdp import gdp_epsilon, gdp_mu
from dpaudit.audit.order_stats import MOST_CANARIES, fewest_on_grid
from dpaudit.audit.thresholds import FixedGuesses, GuessGrid, SplitGuesses, _partition
from dpaudit.audit.tradeoff import one_run_margin

_STANDARD_NORMAL = statistics.NormalDist()


def _one_run_guesses(
    member: NDArray[np.float64], nonmember: NDArray[np.float64], t_plus: float, t_minus: float
) -> tuple[int, int]:
    """(guesses, correct) for "member iff score >= t_plus", "non-member iff score <= t_minus" (and not
    already guessed member), abstain otherwise."""
    guess_in_m, guess_in_n = member >= t_plus, nonmember >= t_plus
    guess_out_m = (member <= t_minus) & ~guess_in_m
    guess_out_n = (nonmember <= t_minus) & ~guess_in_n
    guesses = int(guess_in_m.sum() + guess_in_n.sum() + guess_out_m.sum() + guess_out_n.sum())
    correct = int(guess_in_m.sum() + guess_out_n.sum())
    return guesses, correct


def _thresholds_for(pooled_desc: NDArray[np.float64], k_plus: int, k_minus: int) -> tuple[float, float]:
    t_plus = float(pooled_desc[k_plus - 1]) if k_plus > 0 else float("inf")
    t_minus = float(pooled_desc[-k_minus]) if k_minus > 0 else float("-inf")
    return t_plus, t_minus


def _steinke_pvalue(eps: float, m: int, r: int, v: int, delta: float) -> float:
    """P-value of v correct out of r guesses on m coin-flip canaries under (eps, delta)-DP.

    Steinke, Nasr & Jagielski (2023): with f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v],
    P[W >= v] <= f(v) + 2 m delta max_{1<=i<=v} (f(v - i) - f(v)) / i. Continuous and increasing in
    eps, so the largest rejected epsilon is a root.
    """
    if v == 0:
        return 1.0
    q = float(scipy.special.expit(eps))
    beta = float(scipy.special.bdtrc(v - 1, r, q))  # = binom.sf(v - 1, r, q), without scipy.stats' overhead
    if delta == 0.0:
        return min(beta, 1.0)
    return min(beta + 2 * m * delta * _steinke_tail(r, v, q, beta), 1.0)


def _steinke_tail(r: int, v: int, q: float, beta: float) -> float:
    """max(0, max over i = 1..v of (f(v - i) - beta) / i), f(k) = P[Binomial(r, q) >= k] and beta = f(v): the delta
    term's maximum, exact (the same floats as over all v terms at once) in O(sqrt(r)) terms instead of O(v), so that
    a perfect attack on 10^8 canaries reads its p-value in milliseconds.

    The terms are read on a window around the bulk of the misses (f(v - i) = P[at most r - v + i misses]), then the
    window is shown to hold the maximum: a term beyond it is at most (1 - beta) / i (f <= 1), so the window grows up
    until its best term reaches (1 - beta) / (its end + 1); a term before it is at most f(v - (start - 1)) - beta
    (f grows with i, and i >= 1), read once; when that is not below half the best term (a margin against rounding),
    every term before the window is read too."""
    misses, spread = r * (1.0 - q), math.sqrt(r * q * (1.0 - q))
    centre = misses - (r - v)  # the i at which r - v + i misses is the mean
    lo = int(min(v, max(1.0, math.floor(centre - 12.0 * spread - 16.0))))
    hi = int(min(v, max(lo + 1023.0, math.ceil(centre + 12.0 * spread + 16.0))))

    def largest(a: int, b: int) -> float:
        i = np.arange(a, b + 1)
        return float(np.max((scipy.special.bdtrc(v - i - 1, r, q) - beta) / i))  # bdtrc(k < 0) = 1 = sf

    best = max(0.0, largest(lo, hi))
    while hi < v and best < (1.0 - beta) / (hi + 1):
        end = min(v, 2 * hi)
        best, hi = max(best, largest(hi + 1, end)), end
    if lo > 1 and float(scipy.special.bdtrc(v - lo, r, q)) - beta > 0.5 * best:
        best = max(best, largest(1, lo - 1))
    return best


def _steinke_epsilons(m: int, counts: NDArray[np.int64], delta: float, alpha: float) -> NDArray[np.float64]:
    """:func:`_steinke_epsilon` of each (guesses, correct) row, where only the best row needs to be exact.

    The delta = 0 bound (a plain binomial test, cheap) is never below the delta > 0 one, so a row
    whose delta = 0 bound is strictly below an exact bound already found cannot be the largest; it
    is returned as -inf and the argmax (first largest) is the one of the exact bounds of every row.
    """
    upper = np.array([_steinke_epsilon(m, int(r), int(v), 0.0, alpha) for r, v in counts], dtype=np.float64)
    if delta == 0.0:
        return upper
    out = np.full(upper.shape, -np.inf)
    best = -np.inf
    for j in np.argsort(-upper, kind="stable"):
        if upper[j] < best:
            break
        out[j] = _steinke_epsilon(m, int(counts[j, 0]), int(counts[j, 1]), delta, alpha)
        best = max(best, out[j])
    return out


@functools.lru_cache(maxsize=65_536)
def _steinke_epsilon(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """The largest epsilon whose (epsilon, delta) claim the guesses reject at significance alpha (0 if
    none). Memoized: a pure function of five numbers, which the guess grids of audits (and of the trials of a
    simulation) of one size repeat."""

    def margin(eps: float) -> float:
        return alpha - _steinke_pvalue(eps, m, r, v, delta)

    if v == 0 or margin(0.0) <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while margin(hi) > 0:
        lo, hi = hi, 2 * hi
    return float(scipy.optimize.brentq(margin, lo, hi, xtol=1e-12, rtol=1e-13))


@functools.lru_cache(maxsize=4096)
def steinke_ceiling(members: int, nonmembers: int, *, delta: float, confidence: float) -> float:
    """Steinke et al.'s bound of a perfect attack on ``members`` + ``nonmembers`` coin-flip canaries: the most
    :func:`epsilon_lower_bound_one_run` (its default :class:`GuessGrid`) proves at these sizes. The perfect outcome
    is every member scored 1 and every non-member 0: each cut then falls on a tie, so the grid's pairs that guess both
    ways guess every canary, each right (the strongest outcome of the test; distinct scores in the same order guess
    no more). Memoized: a pure function of four numbers."""
    return epsilon_lower_bound_one_run(
        np.ones(members), np.zeros(nonmembers), delta=delta, confidence=confidence
    ).epsilon


@functools.lru_cache(maxsize=4096)
def fdp_ceiling(members: int, nonmembers: int, *, delta: float, confidence: float) -> float:
    """The f-DP (mu-GDP) reading's bound of the same perfect attack (:func:`steinke_ceiling`): the most
    :func:`epsilon_lower_bound_one_run_fdp` proves at these sizes. Memoized."""
    return epsilon_lower_bound_one_run_fdp(
        np.ones(members), np.zeros(nonmembers), delta=delta, confidence=confidence
    ).epsilon


@functools.lru_cache(maxsize=256)
def steinke_canaries_needed(
    epsilon: float, *, delta: float, confidence: float, most: int = MOST_CANARIES
) -> int | None:
    """The fewest canaries (half members, on the grid 2^(k/4)) whose perfect attack (:func:`steinke_ceiling`: all n
    guessed, all right, at the default grid's Bonferroni share of the risk) rejects (``epsilon``, ``delta``)-DP at
    ``confidence``; None when no grid point up to ``most`` does. Not monotone in n: the delta term 2 n delta grows
    with the canaries, so a perfect attack's bound peaks (4.87 at delta 1e-5 and 97.5%, near 1,500 canaries)
    and falls beyond; the grid is walked up, so no smaller grid point rejects the claim. Memoized."""
    alpha = 1 - confidence

    def proves(n: int) -> bool:
        return _steinke_pvalue(epsilon, n, n, n, delta) < alpha / len(GuessGrid().resolve(n))

    return fewest_on_grid(proves, smallest=2, most=most, monotone=False)


@functools.lru_cache(maxsize=256)
def fdp_canaries_needed(epsilon: float, *, delta: float, confidence: float, most: int = MOST_CANARIES) -> int | None:
    """The fewest canaries (as :func:`steinke_canaries_needed`) whose perfect attack's f-DP reading rejects the
    mu-GDP whose epsilon at ``delta`` is ``epsilon``; None when no grid point up to ``most`` does. Memoized."""
    alpha, mu = 1 - confidence, gdp_mu(epsilon, delta)

    def proves(n: int) -> bool:
        return _fdp_margin(mu, n, n, n, alpha / len(GuessGrid().resolve(n))) > 0

    return fewest_on_grid(proves, smallest=2, most=most, monotone=False)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _phi_inv(p: float) -> float:
    if p <= 0.0:
        return -math.inf
    if p >= 1.0:
        return math.inf
    return _STANDARD_NORMAL.inv_cdf(p)


def _fdp_margin(mu: float, m: int, r: int, v: int, alpha: float) -> float:
    """Positive when v correct of r guesses on m canaries reject mu-GDP at significance alpha
    (:func:`dpaudit.audit.tradeoff.one_run_margin` with the mu-GDP blow-up inverse
    x -> Phi(Phi^{-1}(x) - mu)). Continuous and decreasing in mu, so the largest rejected mu is a root."""
    return one_run_margin(lambda x: _phi(_phi_inv(x) - mu), m, r, v, alpha)


@functools.lru_cache(maxsize=65_536)
def _fdp_mu(m: int, r: int, v: int, delta: float, alpha: float) -> float:
    """The largest mu whose mu-GDP claim the guesses reject; gdp_mu(0, delta) (epsilon 0) if none. Memoized, as
    :func:`_steinke_epsilon`."""
    lo = gdp_mu(0.0, delta)
    if v == 0 or _fdp_margin(lo, m, r, v, alpha) <= 0:
        return lo
    hi = max(1.0, 2 * lo)
    while _fdp_margin(hi, m, r, v, alpha) > 0:
        lo, hi = hi, 2 * hi
    return float(scipy.optimize.brentq(_fdp_margin, lo, hi, args=(m, r, v, alpha), xtol=1e-12, rtol=1e-13))


def _one_run(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    confidence: float,
    guesses: GuessGrid | FixedGuesses | SplitGuesses,
    fdp: bool,
) -> EpsilonBound:
    member = _scores(member_scores, "member_scores")
    nonmember = _scores(nonmember_scores, "nonmember_scores")
    delta = _check_unit(delta, "delta")
    confidence = _check_unit(confidence, "confidence")
    alpha = 1 - confidence

    def evaluate(
        m_s: NDArray[np.float64], n_s: NDArray[np.float64], cands: Sequence[tuple[float, float]], a: float
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.int64]]:
        """(epsilon, mu, guesses, correct) per candidate (t_plus, t_minus) at significance a."""
        counts = np.array([_one_run_guesses(m_s, n_s, tp, tm) for tp, tm in cands], dtype=np.int64)
        total = m_s.size + n_s.size
        ms = np.full(len(cands), total)
        if fdp:
            mus = np.array(
                [_fdp_mu(int(m_), int(r_), int(v_), delta, a) for m_, r_, v_ in zip(ms, counts[:, 0], counts[:, 1])]
            )
            eps = np.array([gdp_epsilon(mu, delta) for mu in mus])
        else:
            mus = np.full(len(cands), np.nan)
            eps = _steinke_epsilons(int(total), counts, delta, a)
        return eps, mus, counts

    def candidates(
        m_s: NDArray[np.float64], n_s: NDArray[np.float64], pairs: Sequence[tuple[int, int]]
    ) -> list[tuple[float, float]]:
        desc = np.sort(np.concatenate([m_s, n_s]))[::-1]
        return [_thresholds_for(desc, kp, km) for kp, km in pairs]

    def record(
        m_s: NDArray[np.float64],
        n_s: NDArray[np.float64],
        cand: tuple[float, float],
        eps: float,
        mu: float,
        count: NDArray[np.int64],
        *,
        selection: str,
        num_hypotheses: int,
        split_seed: int | None = None,
        split_fraction: float | None = None,
    ) -> EpsilonBound:
        g, c = int(count[0]), int(count[1])
        return EpsilonBound(
            method="one_run_fdp" if fdp else "one_run",
            guarantee=GUARANTEE_GDP if fdp else GUARANTEE_DP,
            epsilon=float(max(0.0, eps)),
            delta=delta,
            confidence=confidence,
            threshold=cand[0],
            threshold_minus=cand[1],
            n_members=m_s.size,
            n_nonmembers=n_s.size,
            true_positives=int(np.sum(m_s >= cand[0])),
            false_positives=int(np.sum(n_s >= cand[0])),
            guesses=g,
            correct=c,
            mu=None if not fdp else float(mu),
            selection=selection,
            num_hypotheses=num_hypotheses,
            split_seed=split_seed,
            split_fraction=split_fraction,
        )

    if isinstance(guesses, (FixedGuesses, GuessGrid)):
        m_total = member.size + nonmember.size
        pairs = ((guesses.k_plus, guesses.k_minus),) if isinstance(guesses, FixedGuesses) else guesses.resolve(m_total)
        if isinstance(guesses, FixedGuesses) and guesses.k_plus + guesses.k_minus > m_total:
            raise ValueError(f"k_plus + k_minus = {guesses.k_plus + guesses.k_minus} exceeds the {m_total} canaries.")
        cands = candidates(member, nonmember, pairs)
        a = alpha / len(cands)
        eps, mus, counts = evaluate(member, nonmember, cands, a)
        j = int(np.argmax(eps))
        return record(
            member,
            nonmember,
            cands[j],
            eps[j],
            mus[j],
            counts[j],
            selection="fixed" if isinstance(guesses, FixedGuesses) else "bonferroni",
            num_hypotheses=len(cands),
        )
    if isinstance(guesses, SplitGuesses):
        (m1, n1), (m2, n2) = _partition(guesses.fraction, guesses.seed, member, nonmember)
        pairs = guesses.grid.resolve(m1.size + n1.size)
        cands = candidates(m1, n1, pairs)
        eps1, _, _ = evaluate(m1, n1, cands, alpha)
        cand = cands[int(np.argmax(eps1))]
        eps, mus, counts = evaluate(m2, n2, [cand], alpha)
        return record(
            m2,
            n2,
            cand,
            eps[0],
            mus[0],
            counts[0],
            selection="split",
            num_hypotheses=1,
            split_seed=guesses.seed,
            split_fraction=guesses.fraction,
        )
    raise TypeError(f"guesses must be GuessGrid, FixedGuesses or SplitGuesses, got {type(guesses).__name__}.")


def epsilon_lower_bound_one_run(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    confidence: float = 0.95,
    guesses: GuessGrid | FixedGuesses | SplitGuesses = GuessGrid(),
) -> EpsilonBound:
    """One-run (epsilon, delta) lower bound of Steinke, Nasr & Jagielski (2023) on coin-flip canaries.

    Valid for ONE training run when each of the m = n_members + n_nonmembers canaries was included by
    an independent fair coin: the auditor guesses "member" on the top scores and "non-member" on the
    bottom scores (abstaining on the rest); under (epsilon, delta)-DP the number of correct guesses
    is dominated by Binomial(guesses, e^eps / (1 + e^eps)) up to a delta term, and the bound is the
    largest epsilon rejected at ``confidence``.

    Args:
        member_scores: scores of the canaries the coin put in training.
        nonmember_scores: scores of the canaries it left out.
        delta: the delta of the claims to refute.
        confidence: e.g. 0.95.
        guesses: :class:`GuessGrid` (default; Bonferroni over the grid), :class:`FixedGuesses`, or
            :class:`SplitGuesses` (guess counts chosen on a split, applied as thresholds).
    """
    return _one_run(member_scores, nonmember_scores, delta=delta, confidence=confidence, guesses=guesses, fdp=False)


def epsilon_lower_bound_one_run_fdp(
    member_scores: ArrayLike,
    nonmember_scores: ArrayLike,
    *,
    delta: float,
    confidence: float = 0.95,
    guesses: GuessGrid | FixedGuesses | SplitGuesses = GuessGrid(),
) -> EpsilonBound:
    """One-run lower bound of Mahloujifar, Melis & Chaudhuri (2024): f-DP analysis of the same game.

    Finds the largest mu such that "the mechanism is mu-GDP" is rejected at ``confidence`` by the
    guesses, and reports the epsilon of mu-GDP at ``delta`` (the Gaussian-family reading that paper and
    jax-privacy use). Tighter than :func:`epsilon_lower_bound_one_run`; a proof of an (epsilon, delta)
    violation only for mechanisms with a Gaussian privacy profile (``guarantee = "mu-GDP"``).
    Arguments as :func:`epsilon_lower_bound_one_run`.
    """
    return _one_run(member_scores, nonmember_scores, delta=delta, confidence=confidence, guesses=guesses, fdp=True)
