"""dpaudit.audit: the statistics that turn membership scores into AUC, TPR at low FPR and epsilon
lower bounds.

Three kinds of checks: (1) every number against ``jax_privacy.auditing.CanaryScoreAuditor`` (a
test-only dependency) on the same scores, and the AUC against scikit-learn; (2) closed forms for
two Gaussians (AUC = Phi(mu / sqrt 2), every bound below the mu-GDP epsilon, the GDP curve worked out
here); (3) validity: over 200 seeded trials of mechanisms with a known true epsilon, the 95% lower
bounds exceed it in at most 5% (+ slack) of the trials, with a power check so that the test could fail.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.optimize
import scipy.stats
from sklearn.metrics import roc_auc_score

from dpaudit import audit as A

DELTA = 1e-5
SIG = 0.05  # jax-privacy's "significance" = 1 - confidence


# ------------------------------------------------------------------------------------------------
# Score sets shared by the cross-checks


def _gauss(seed, n_in, n_out, mu=2.0, decimals=None):
    rng = np.random.default_rng(seed)
    member, nonmember = rng.normal(mu, 1, n_in), rng.normal(0, 1, n_out)
    if decimals is not None:  # heavy ties, within and across the two sets
        member, nonmember = np.round(member, decimals), np.round(nonmember, decimals)
    return member, nonmember


SCORE_SETS = {
    "gauss": _gauss(0, 500, 500),
    "ties": _gauss(1, 400, 400, mu=1.5, decimals=1),
    "unbalanced": _gauss(2, 300, 700, mu=1.0),
}


@pytest.fixture(scope="module")
def jax_auditing():
    # A test-only dependency (the `test` extra); skip only where it is genuinely not installed.
    return pytest.importorskip("jax_privacy.auditing")


@pytest.fixture(scope="module", params=sorted(SCORE_SETS))
def scores(request, jax_auditing):
    member, nonmember = SCORE_SETS[request.param]
    return member, nonmember, jax_auditing.CanaryScoreAuditor(member, nonmember)


# ------------------------------------------------------------------------------------------------
# (1) Cross-checks against jax-privacy and scikit-learn


def test_auc_and_tpr_match_sklearn_and_jax_privacy(scores):
    member, nonmember, aud = scores
    roc = A.roc_curve(member, nonmember)
    labels = np.r_[np.ones(member.size), np.zeros(nonmember.size)]
    # Our AUC is the empirical (Mann-Whitney) AUC; jax-privacy's attack_auroc is the convex hull's.
    assert roc.auc() == pytest.approx(roc_auc_score(labels, np.r_[member, nonmember]), abs=1e-12)
    assert roc.convex_hull().auc() == pytest.approx(float(aud.attack_auroc()), abs=1e-12)
    assert roc.auc() <= float(aud.attack_auroc()) + 1e-12
    for fpr in (0.0, 0.001, 0.01, 0.05, 0.1, 0.5, 1.0):
        jax_tpr = float(aud.tpr_at_given_fpr(fpr))
        assert roc.tpr_at_randomized(fpr) == pytest.approx(jax_tpr, abs=1e-12), fpr
        # Deterministic thresholds can only do worse than randomizing between two of them.
        assert roc.tpr_at(fpr) <= jax_tpr + 1e-12


def test_bootstrap_cis_agree_with_jax_privacy(jax_auditing):
    member, nonmember = SCORE_SETS["gauss"]
    aud = jax_auditing.CanaryScoreAuditor(member, nonmember)
    params = jax_auditing.BootstrapParams.confidence_interval(num_samples=1000, confidence=0.95, seed=1)
    ours = A.auc(member, nonmember, seed=1)
    jax_low, jax_high = aud.attack_auroc(bootstrap_params=params)
    # Different generators and jax-privacy's bias correction: agreement to Monte Carlo error, on an
    # interval ~0.03 wide (different estimands too: hull vs empirical AUC, which differ by ~0.005).
    assert ours.ci.low == pytest.approx(jax_low, abs=0.01)
    assert ours.ci.high == pytest.approx(jax_high, abs=0.01)
    assert ours.ci.low < ours.value < ours.ci.high
    # Seeded: the same seed gives the same interval, another seed another one.
    assert A.auc(member, nonmember, seed=1).ci == ours.ci
    assert A.auc(member, nonmember, seed=2).ci != ours.ci


@pytest.mark.parametrize("one_sided", [True, False])
def test_clopper_pearson_matches_jax_privacy(scores, jax_auditing, one_sided):
    member, nonmember, aud = scores
    J = jax_auditing

    def ours(selection):
        return A.epsilon_lower_bound_clopper_pearson(
            member, nonmember, delta=DELTA, confidence=1 - SIG, selection=selection, one_sided=one_sided
        )

    for t in (0.5, 1.0, 2.0, 3.0):  # explicit thresholds
        want = aud.epsilon_clopper_pearson(SIG, DELTA, one_sided, threshold_strategy=J.Explicit(t))
        assert ours(A.FixedThreshold(threshold=t)).epsilon == pytest.approx(want, rel=1e-12, abs=1e-12)
    # Bonferroni: jax-privacy corrects over its thresholds (the ROC hull); the same fixed set here
    # gives the same bound.
    hull = tuple(float(t) for t in aud._thresholds)
    want = aud.epsilon_clopper_pearson(SIG, DELTA, one_sided)
    got = ours(A.BonferroniThresholds(thresholds=hull))
    assert got.epsilon == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert got.num_hypotheses == len(hull)
    for seed in range(4):  # split thresholds: the same partition, the same threshold, the same bound
        for fraction in (0.5, 0.3):
            want = aud.epsilon_clopper_pearson(SIG, DELTA, one_sided, threshold_strategy=J.Split(fraction, seed))
            got = ours(A.SplitThreshold(fraction=fraction, seed=seed))
            assert got.epsilon == pytest.approx(want, rel=1e-12, abs=1e-12), (seed, fraction)
            assert (got.split_seed, got.split_fraction) == (seed, fraction)


@pytest.mark.parametrize("fdp", [False, True], ids=["steinke", "fdp"])
def test_one_run_bounds_match_jax_privacy(scores, jax_auditing, fdp):
    member, nonmember, aud = scores
    J = jax_auditing
    ours_fn = A.epsilon_lower_bound_one_run_fdp if fdp else A.epsilon_lower_bound_one_run
    jax_fn = aud.epsilon_one_run_fdp if fdp else aud.epsilon_one_run
    # jax-privacy stops brentq at xtol=1e-6 in epsilon; ours solves to ~1e-12.
    tol = 1e-5
    pooled = np.r_[member, nonmember]
    for t in (1.0, 2.0, 3.0):  # explicit threshold = fixed k+ (k- = 0: jax-privacy is one-sided)
        k = int(np.sum(pooled >= t))
        got = ours_fn(member, nonmember, delta=DELTA, confidence=1 - SIG, guesses=A.FixedGuesses(k_plus=k))
        assert got.epsilon == pytest.approx(jax_fn(SIG, DELTA, threshold_strategy=J.Explicit(t)), abs=tol)
        assert got.guesses == k and got.correct == int(np.sum(member >= t))
    # Bonferroni over jax-privacy's hull thresholds, as fixed guess counts (the (0, 0) pair of its
    # +inf threshold counts in the correction too).
    counts = tuple((int(np.sum(pooled >= t)), 0) for t in aud._thresholds)
    got = ours_fn(member, nonmember, delta=DELTA, confidence=1 - SIG, guesses=A.GuessGrid(pairs=counts))
    assert got.num_hypotheses == len(counts)
    assert got.epsilon == pytest.approx(jax_fn(SIG, DELTA), abs=tol)
    # Split: the same partition; guesses chosen over every one-sided count on the choosing part.
    seed, fraction = 3, 0.2
    split = A.SplitThreshold(fraction=fraction, seed=seed)
    (m1, n1), (m2, n2) = split.partition(member, nonmember)
    grid = A.GuessGrid(pairs=tuple((k, 0) for k in range(1, m1.size + n1.size + 1)))
    got = ours_fn(
        member,
        nonmember,
        delta=DELTA,
        confidence=1 - SIG,
        guesses=A.SplitGuesses(fraction=fraction, seed=seed, grid=grid),
    )
    want = jax_fn(SIG, DELTA, threshold_strategy=J.Split(fraction, seed))
    assert (got.n_members, got.n_nonmembers) == (m2.size, n2.size)
    # jax-privacy's choice (2.0.0, private helper): it skips thresholds whose precision is below
    # logistic(best epsilon so far), exact for Steinke et al. but a heuristic for the f-DP bound,
    # where it can miss the best threshold of the choosing part. Ours takes the true maximum.
    _, jax_t = J.CanaryScoreAuditor(m1, n1)._epsilon_one_run_all_thresholds(SIG, DELTA, True, None, use_fdp=fdp)

    def on(m_s, n_s, t):
        k = int(np.sum(np.r_[m_s, n_s] >= t))
        return ours_fn(m_s, n_s, delta=DELTA, confidence=1 - SIG, guesses=A.FixedGuesses(k_plus=k)).epsilon

    assert on(m2, n2, jax_t) == pytest.approx(want, abs=tol)  # the same evaluation at its threshold
    if got.threshold == jax_t:
        assert got.epsilon == pytest.approx(want, abs=tol)
    else:
        assert fdp, "Steinke et al.'s selection must agree exactly"
        assert on(m1, n1, got.threshold) > on(m1, n1, jax_t) + tol


def test_gdp_conversions_match_closed_form_and_dp_accounting():
    import dp_accounting

    for mu in (0.5, 1.0, 2.0, 4.0):
        eps = A.gdp_epsilon(mu, DELTA)
        # delta(eps) of mu-GDP written out here (Dong, Roth & Su, Corollary 2.13).
        d = scipy.stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * scipy.stats.norm.cdf(-eps / mu - mu / 2)
        assert d == pytest.approx(DELTA, rel=1e-6)
        # The Gaussian mechanism with sigma = 1/mu is exactly (eps, delta)-DP (Balle & Wang 2018).
        assert 1 / dp_accounting.get_sigma_gaussian(eps, DELTA) == pytest.approx(mu, rel=1e-8)
        assert A.gdp_mu(eps, DELTA) == pytest.approx(mu, rel=1e-9)


# ------------------------------------------------------------------------------------------------
# (2) Closed forms: two Gaussians N(mu, 1) vs N(0, 1)


def _gdp_epsilon_closed_form(mu, delta):
    """Solve Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) = delta for eps (Dong, Roth & Su)."""
    f = lambda e: scipy.stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * scipy.stats.norm.cdf(-e / mu - mu / 2) - delta
    return scipy.optimize.brentq(f, 0.0, 100.0, xtol=1e-12)


def test_two_gaussians_auc_and_every_bound_below_the_gdp_epsilon():
    mu = 1.5
    member, nonmember = _gauss(7, 2000, 2000, mu=mu)
    eps_gdp = _gdp_epsilon_closed_form(mu, DELTA)
    result = A.audit_scores(member, nonmember, delta=DELTA, seed=0, coin_flip=True, claimed_epsilon=eps_gdp)
    true_auc = scipy.stats.norm.cdf(mu / math.sqrt(2))
    assert result.auc.ci.low <= true_auc <= result.auc.ci.high
    assert abs(result.auc.value - true_auc) < 0.02
    # The advantage max(TPR - FPR) of two unit Gaussians is 2 Phi(mu/2) - 1 at the midpoint.
    true_adv = 2 * scipy.stats.norm.cdf(mu / 2) - 1
    assert result.advantage.ci.low <= true_adv <= result.advantage.ci.high
    # TPR at FPR f: 1 - Phi(Phi^{-1}(1 - f) - mu).
    for t in result.tpr_at_fpr:
        true_tpr = scipy.stats.norm.sf(scipy.stats.norm.isf(t.fpr) - mu)
        assert t.ci.low <= true_tpr <= t.ci.high, t
    assert len(result.bounds) == 4
    for b in result.bounds:
        assert 0 < b.epsilon < eps_gdp, b
        assert b.confidence == pytest.approx(1 - 0.05 / 4)
    for selection in (A.SplitThreshold(seed=1), A.BonferroniThresholds(), A.FixedThreshold(threshold=2.0)):
        b = A.epsilon_lower_bound_clopper_pearson(member, nonmember, delta=DELTA, selection=selection)
        assert 0 < b.epsilon < eps_gdp, b
    for fn in (A.epsilon_lower_bound_one_run, A.epsilon_lower_bound_one_run_fdp):
        for guesses in (A.GuessGrid(), A.FixedGuesses(k_plus=200, k_minus=200), A.SplitGuesses(seed=1)):
            b = fn(member, nonmember, delta=DELTA, guesses=guesses)
            assert 0 < b.epsilon < eps_gdp, b
    assert result.epsilon_lower_bound < eps_gdp and not result.exceeds_claim
    # The f-DP bound rejects a mu below the true one.
    fdp = next(b for b in result.bounds if b.method == "one_run_fdp")
    assert fdp.guarantee == A.GUARANTEE_GDP and fdp.mu < mu


# ------------------------------------------------------------------------------------------------
# (3) Validity over 200 seeded trials

TRIALS = 200
#: 5% of 200 trials plus slack: P[Binomial(200, 0.05) > 20] ~ 0.2%.
MAX_EXCEEDANCES = 20


def _rr_true_epsilon(p, delta):
    # Randomized response with P[report truth] = p: its hockey-stick divergence is
    # delta(eps) = p - e^eps (1 - p) below eps0 = log(p / (1 - p)), so eps(delta) = log((p - delta)/(1 - p)).
    return math.log((p - delta) / (1 - p))


def test_validity_clopper_pearson_randomized_response():
    """CP bounds on a tight mechanism (randomized response, eps0 = 2): scores are one report each,
    independent trials; the true epsilon is attained by the threshold 1."""
    p = math.exp(2.0) / (1 + math.exp(2.0))
    eps_true = _rr_true_epsilon(p, DELTA)
    rng = np.random.default_rng(2024)
    n = 300
    members = (rng.random((TRIALS, n)) < p).astype(float)
    nonmembers = (rng.random((TRIALS, n)) < 1 - p).astype(float)
    selections = {
        "fixed": lambda s: A.FixedThreshold(threshold=1.0),
        "split": lambda s: A.SplitThreshold(seed=s),
        "bonferroni": lambda s: A.BonferroniThresholds(),
    }
    for name, make in selections.items():
        eps = np.array(
            [
                A.epsilon_lower_bound_clopper_pearson(members[s], nonmembers[s], delta=DELTA, selection=make(s)).epsilon
                for s in range(TRIALS)
            ]
        )
        exceed = int(np.sum(eps > eps_true))
        print(f"CP {name}: exceedances {exceed}/{TRIALS}, median bound {np.median(eps):.3f} (true {eps_true:.3f})")
        assert exceed <= MAX_EXCEEDANCES, name
        assert np.median(eps) > 0.6 * eps_true, name  # power: the test could fail
    # Exactly, for the fixed threshold: the bound depends only on (TP, FP) ~ Binomial(n, p) x
    # Binomial(n, 1 - p); sum the probability of every count pair whose bound exceeds the truth.
    tps = np.arange(n // 2, n + 1)
    fps = np.arange(0, n // 2)
    tps = tps[scipy.stats.binom.pmf(tps, n, p) > 1e-6]
    fps = fps[scipy.stats.binom.pmf(fps, n, 1 - p) > 1e-6]
    # The count pairs left out weigh this much; count them all as exceedances.
    prob = 1 - scipy.stats.binom.pmf(tps, n, p).sum() * scipy.stats.binom.pmf(fps, n, 1 - p).sum()
    assert prob < 1e-3
    for tp in tps:
        for fp in fps:
            member = np.r_[np.ones(tp), np.zeros(n - tp)]
            nonmember = np.r_[np.ones(fp), np.zeros(n - fp)]
            b = A.epsilon_lower_bound_clopper_pearson(
                member, nonmember, delta=DELTA, selection=A.FixedThreshold(threshold=1.0)
            )
            if b.epsilon > eps_true:
                prob += scipy.stats.binom.pmf(tp, n, p) * scipy.stats.binom.pmf(fp, n, 1 - p)
    print(f"CP fixed: exact P[bound > true epsilon] = {prob:.4f}")
    assert prob <= 0.05


def test_validity_clopper_pearson_gaussian_mechanism():
    mu = 3.0
    eps_true = _gdp_epsilon_closed_form(mu, DELTA)
    rng = np.random.default_rng(7)
    n = 400
    members, nonmembers = rng.normal(mu, 1, (TRIALS, n)), rng.normal(0, 1, (TRIALS, n))
    eps = np.array(
        [
            A.epsilon_lower_bound_clopper_pearson(
                members[s], nonmembers[s], delta=DELTA, selection=A.SplitThreshold(seed=s)
            ).epsilon
            for s in range(TRIALS)
        ]
    )
    print(
        f"CP split, Gaussian: exceedances {int(np.sum(eps > eps_true))}/{TRIALS}, "
        f"median {np.median(eps):.3f} (true {eps_true:.3f})"
    )
    assert int(np.sum(eps > eps_true)) <= MAX_EXCEEDANCES
    assert np.median(eps) > 1.0


def test_validity_one_run_steinke_randomized_response():
    """Coin-flip canaries through randomized response (eps0 = 2), one run of m = 1000 canaries: guess
    every canary from its report (the guesses are a function of the output only)."""
    delta = 1e-6
    p = math.exp(2.0) / (1 + math.exp(2.0))
    eps_true = _rr_true_epsilon(p, delta)
    rng = np.random.default_rng(11)
    m = 1000
    coins = rng.random((TRIALS, m)) < 0.5
    reports = np.where(rng.random((TRIALS, m)) < p, coins, ~coins).astype(float)
    eps = []
    for s in range(TRIALS):
        member, nonmember = reports[s][coins[s]], reports[s][~coins[s]]
        ones = int(reports[s].sum())
        guesses = A.FixedGuesses(k_plus=ones, k_minus=m - ones)
        eps.append(A.epsilon_lower_bound_one_run(member, nonmember, delta=delta, guesses=guesses).epsilon)
    eps = np.array(eps)
    exceed = int(np.sum(eps > eps_true))
    print(f"one-run Steinke: exceedances {exceed}/{TRIALS}, median {np.median(eps):.3f} (true {eps_true:.3f})")
    assert exceed <= MAX_EXCEEDANCES
    assert np.median(eps) > 0.8 * eps_true
    # Exactly: guessing every canary, the bound depends only on the number W ~ Binomial(m, p) of
    # correct guesses; the probability of the W whose bound exceeds the truth must be <= 5% (the test
    # is nearly exact, so this lands just below 5%: the sampled rate above is noise around it).
    ws = np.arange(m + 1)
    ws = ws[scipy.stats.binom.pmf(ws, m, p) > 1e-12]
    prob = 0.0
    for w in ws:
        member = np.r_[np.ones(w // 2), np.zeros(m // 2 - w // 2)]  # correct: the ones ...
        nonmember = np.r_[np.zeros(w - w // 2), np.ones(m // 2 - (w - w // 2))]  # ... and these zeros
        ones = int(member.sum() + nonmember.sum())
        b = A.epsilon_lower_bound_one_run(
            member, nonmember, delta=delta, guesses=A.FixedGuesses(k_plus=ones, k_minus=m - ones)
        )
        assert b.correct == w and b.guesses == m
        if b.epsilon > eps_true:
            prob += scipy.stats.binom.pmf(w, m, p)
    print(f"one-run Steinke: exact P[bound > true epsilon] = {prob:.4f}")
    assert 0.03 < prob <= 0.05  # valid, and tight (a looser test would sit far below 5%)


def test_validity_one_run_fdp_gaussian_mechanism():
    """Coin-flip canaries through a Gaussian mechanism (score = mu * coin + N(0, 1)): mu-GDP exactly,
    so the f-DP bound's rejected mu must stay below mu in >= 95% of the runs."""
    mu = 2.0
    eps_true = _gdp_epsilon_closed_form(mu, DELTA)
    rng = np.random.default_rng(5)
    m = 1000
    coins = rng.random((TRIALS, m)) < 0.5
    scores = mu * coins + rng.normal(0, 1, (TRIALS, m))
    mus, eps, eps_steinke = [], [], []
    for s in range(TRIALS):
        member, nonmember = scores[s][coins[s]], scores[s][~coins[s]]
        guesses = A.FixedGuesses(k_plus=100, k_minus=100)
        b = A.epsilon_lower_bound_one_run_fdp(member, nonmember, delta=DELTA, guesses=guesses)
        mus.append(b.mu)
        eps.append(b.epsilon)
        eps_steinke.append(A.epsilon_lower_bound_one_run(member, nonmember, delta=DELTA, guesses=guesses).epsilon)
    mus, eps, eps_steinke = map(np.array, (mus, eps, eps_steinke))
    print(
        f"one-run f-DP: mu exceedances {int(np.sum(mus > mu))}/{TRIALS}, median mu {np.median(mus):.3f} "
        f"(true {mu}); median eps {np.median(eps):.3f}, Steinke {np.median(eps_steinke):.3f} (true {eps_true:.3f})"
    )
    assert int(np.sum(mus > mu)) <= MAX_EXCEEDANCES
    assert int(np.sum(eps > eps_true)) <= MAX_EXCEEDANCES
    assert int(np.sum(eps_steinke > eps_true)) <= MAX_EXCEEDANCES
    assert np.median(mus) > 0.5 * mu
    assert np.median(eps) > np.median(eps_steinke)  # the f-DP analysis is the tighter one


# ------------------------------------------------------------------------------------------------
# ROC details, edge cases, the result record


def test_roc_ties_by_hand():
    # Members [1, 1, 2], non-members [1, 0]: vertices at thresholds inf, 2, 1, 0.
    roc = A.roc_curve([1.0, 1.0, 2.0], [1.0, 0.0])
    np.testing.assert_allclose(roc.thresholds, [np.inf, 2, 1, 0])
    np.testing.assert_allclose(roc.tpr, [0, 1 / 3, 1, 1])
    np.testing.assert_allclose(roc.fpr, [0, 0, 0.5, 1])
    # Pairs: 2 beats both (2), each 1 beats the 0 (2), each 1 ties the 1 (2 x 1/2): 5 of 6.
    assert roc.auc() == pytest.approx(5 / 6)
    assert roc.advantage() == pytest.approx(0.5)
    assert roc.tpr_at(0.0) == pytest.approx(1 / 3)


def test_all_scores_tied():
    member, nonmember = np.full(50, 0.3), np.full(60, 0.3)
    roc = A.roc_curve(member, nonmember)
    np.testing.assert_allclose(roc.fpr, [0, 1])
    np.testing.assert_allclose(roc.tpr, [0, 1])
    result = A.audit_scores(
        member, nonmember, delta=DELTA, seed=0, coin_flip=True, claimed_epsilon=0.1, num_bootstrap=100
    )
    assert result.auc.value == 0.5 and result.auc.ci.low == result.auc.ci.high == 0.5
    assert result.advantage.value == 0.0
    assert all(t.tpr == 0.0 for t in result.tpr_at_fpr)
    assert all(b.epsilon == 0.0 for b in result.bounds)
    assert result.epsilon_lower_bound == 0.0 and not result.exceeds_claim


def test_one_score_each_still_audits():
    result = A.audit_scores([2.0], [1.0], delta=DELTA, seed=0, coin_flip=True, num_bootstrap=50)
    assert result.auc.value == 1.0
    assert [b.selection for b in result.bounds] == ["bonferroni"] * 3  # no split of one score
    assert result.bounds[0].confidence == pytest.approx(1 - 0.05 / 3)
    assert result.epsilon_lower_bound == 0.0  # one trial proves nothing at 95%


@pytest.mark.parametrize(
    "fn",
    [
        lambda m, n: A.roc_curve(m, n),
        lambda m, n: A.auc(m, n, seed=0),
        lambda m, n: A.tpr_at_fpr(m, n, 0.01, seed=0),
        lambda m, n: A.epsilon_lower_bound_clopper_pearson(m, n, delta=DELTA),
        lambda m, n: A.epsilon_lower_bound_one_run(m, n, delta=DELTA),
        lambda m, n: A.epsilon_lower_bound_one_run_fdp(m, n, delta=DELTA),
        lambda m, n: A.audit_scores(m, n, delta=DELTA, seed=0),
    ],
    ids=["roc", "auc", "tpr", "cp", "one_run", "fdp", "audit"],
)
def test_bad_scores_are_value_errors(fn):
    good = np.arange(10.0)
    with pytest.raises(ValueError, match="member_scores is empty"):
        fn([], good)
    with pytest.raises(ValueError, match="nonmember_scores is empty"):
        fn(good, [])
    with pytest.raises(ValueError, match=r"member_scores has 1 non-finite score\(s\) \(first at index 3: nan\)"):
        fn(np.r_[good[:3], np.nan, good[3:]], good)
    with pytest.raises(ValueError, match="nonmember_scores has 2 non-finite"):
        fn(good, np.r_[good, np.inf, -np.inf])
    with pytest.raises(ValueError, match="1-D"):
        fn(good.reshape(2, 5), good)


def test_parameters_are_validated():
    m, n = _gauss(0, 20, 20)
    with pytest.raises(ValueError, match="delta must be in"):
        A.epsilon_lower_bound_clopper_pearson(m, n, delta=0.0)
    with pytest.raises(ValueError, match="confidence must be in"):
        A.epsilon_lower_bound_one_run(m, n, delta=DELTA, confidence=1.0)
    with pytest.raises(ValueError, match="fraction must be in"):
        A.SplitThreshold(fraction=1.0)
    with pytest.raises(ValueError, match="k_plus and k_minus"):
        A.FixedGuesses(k_plus=0)
    with pytest.raises(ValueError, match="exceeds the 40 canaries"):
        A.epsilon_lower_bound_one_run(m, n, delta=DELTA, guesses=A.FixedGuesses(k_plus=30, k_minus=11))
    with pytest.raises(ValueError, match="empty member part"):
        A.epsilon_lower_bound_clopper_pearson(m[:1], n, delta=DELTA, selection=A.SplitThreshold())


def test_min_nonmembers_and_the_flag():
    assert A.min_nonmembers_for(0.001) == 1000
    assert A.min_nonmembers_for(0.01) == 100
    assert A.min_nonmembers_for(0.001, false_positives=10) == 10000
    member, nonmember = _gauss(3, 500, 500)
    few = A.tpr_at_fpr(member, nonmember, 0.001, seed=0, num_samples=200)
    assert not few.enough_nonmembers and few.min_nonmembers == 1000 and few.achieved_fpr == 0.0
    enough = A.tpr_at_fpr(member, nonmember, 0.01, seed=0, num_samples=200)
    assert enough.enough_nonmembers and enough.achieved_fpr <= 0.01
    # The threshold reported attains the reported rates.
    assert enough.tpr == np.mean(member >= enough.threshold)
    assert enough.achieved_fpr == np.mean(nonmember >= enough.threshold)
    result = A.audit_scores(member, nonmember, delta=DELTA, seed=0, num_bootstrap=200)
    assert any("needs >= 1000 non-members, have 500" in w for w in result.warnings)


def test_split_bound_is_evaluated_on_the_held_apart_part():
    member, nonmember = _gauss(4, 301, 401)
    b = A.epsilon_lower_bound_clopper_pearson(member, nonmember, delta=DELTA, selection=A.SplitThreshold(seed=9))
    (m1, n1), (m2, n2) = A.SplitThreshold(seed=9).partition(member, nonmember)
    assert (b.n_members, b.n_nonmembers) == (m2.size, n2.size) == (301 - 150, 401 - 200)
    assert (b.true_positives, b.false_positives) == (np.sum(m2 >= b.threshold), np.sum(n2 >= b.threshold))
    # The threshold is the best one of the choosing part, not of the evaluation part.
    on_choice = [
        A.epsilon_lower_bound_clopper_pearson(m1, n1, delta=DELTA, selection=A.FixedThreshold(threshold=t)).epsilon
        for t in np.unique(np.r_[m1, n1])
    ]
    at_b = A.epsilon_lower_bound_clopper_pearson(m1, n1, delta=DELTA, selection=A.FixedThreshold(threshold=b.threshold))
    assert at_b.epsilon == pytest.approx(max(on_choice))


def test_exceeds_claim_is_flagged_loudly_and_json_round_trips():
    member, nonmember = _gauss(5, 1000, 1000, mu=4.0)
    result = A.audit_scores(
        member, nonmember, delta=DELTA, claimed_epsilon=0.5, seed=0, coin_flip=True, num_bootstrap=200
    )
    assert result.exceeds_claim and result.epsilon_lower_bound > 0.5
    assert result.warnings[0].startswith("EMPIRICAL EPSILON LOWER BOUND")
    assert any("f-DP one-run bound" in w for w in result.warnings)
    ok = A.audit_scores(member, nonmember, delta=DELTA, claimed_epsilon=50.0, seed=0, num_bootstrap=200)
    assert not ok.exceeds_claim and not any("EXCEEDS" in w for w in ok.warnings)
    text = json.dumps(result.to_json(), allow_nan=False)  # strict JSON: +inf thresholds as strings
    back = A.AuditResult.from_json(json.loads(text))
    assert back.to_json() == result.to_json()
    assert back.bounds == result.bounds and back.roc.thresholds[0] == np.inf
    with pytest.raises(ValueError, match="schema"):
        A.AuditResult.from_json({**json.loads(text), "schema": "other"})


def test_audit_imports_neither_jax_nor_torch():
    # The audit must work in a torch-only (or jax-free) install.
    import subprocess
    import sys

    code = (
        "import sys, dpaudit.audit\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'jax', 'torch', 'flax', 'jax_privacy'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
