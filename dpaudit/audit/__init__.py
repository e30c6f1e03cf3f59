"""Membership scores in, audit statistics out: ROC, AUC, TPR at low FPR, empirical epsilon lower bounds.

Every attack in dpaudit produces scores where **higher means member**; this package is the one place
that turns them into numbers (the attacks never compute metrics themselves), and the one home of the
statistics the canary attacks share (:mod:`.intervals`: bootstrap and Clopper-Pearson intervals,
one-sided tests). It is pure numpy/scipy so that the audit works in a torch-only install (no jax).

One module per job: :mod:`.roc` (ROC, AUC, TPR at FPR, advantage), :mod:`.bootstrap` (the seeded
stratified bootstrap of those), :mod:`.counts` (the vectorized ROC-count engine both share),
:mod:`.thresholds` (how a bound picks its threshold or guesses), :mod:`.bounds` (the bound record and
Clopper-Pearson), :mod:`.one_run` (Steinke et al. and its f-DP analysis), :mod:`.gdp` (the mu-GDP
curve), :mod:`.result` (:func:`audit_scores` and :class:`AuditResult`), :mod:`.intervals`,
:mod:`.checks` (input checks). Every public name is re-exported here (``from dpaudit.audit import X``), imported on first use so that
the attacks' result types (which need only :mod:`.intervals`) do not import scipy.

What it computes, and the convention each follows:

- :func:`roc_curve`: the exact empirical ROC, one vertex per distinct score; the rule at threshold
  ``t`` is "predict member iff score >= t", so tied scores move together (a diagonal ROC segment).
- :func:`auc`: the area under that ROC (= the Mann-Whitney statistic with ties counted 1/2, which is
  also what ``sklearn.metrics.roc_auc_score`` returns), with a seeded, stratified percentile
  bootstrap CI (:class:`BootstrapCI`).
- :func:`tpr_at_fpr`: TPR at a low FPR (Carlini et al. 2022): the largest TPR of a threshold whose
  empirical FPR is <= the target (no randomized mixing of thresholds), with a bootstrap CI and the
  number of non-members that makes the FPR meaningful (:func:`min_nonmembers_for`).
  :meth:`Roc.tpr_at_randomized` gives the randomized-threshold value (the ROC convex hull).
- :func:`attacker_advantage`: max over thresholds of TPR - FPR (Yeom et al. 2018).
- :func:`epsilon_lower_bound_clopper_pearson`: Clopper-Pearson intervals on TPR and FPR turned into
  epsilon >= log((TPR_low - delta) / FPR_high) (Jagielski et al. 2020; Nasr et al. 2021), at a
  threshold chosen on a held-apart split (:class:`SplitThreshold`), under a Bonferroni correction
  over a fixed threshold set or over every threshold (:class:`BonferroniThresholds`), or at a
  threshold fixed in advance (:class:`FixedThreshold`). Never the best threshold of the evaluation
  set itself without a correction.
- :func:`epsilon_lower_bound_one_run`: the one-run audit of Steinke, Nasr & Jagielski (2023) on
  coin-flip canaries: guess "member" for the k+ top scores and "non-member" for the k- bottom
  scores, abstain on the rest, and test the number of correct guesses.
- :func:`epsilon_lower_bound_one_run_fdp`: the f-DP analysis of the same guessing game by
  Mahloujifar, Melis & Chaudhuri (2024), tighter, reported against the Gaussian-DP family: it refutes
  mu-GDP (Gaussian mechanisms only), not an (epsilon, delta) claim.
- :func:`audit_scores`: all of the above for ONE set of scores in one typed :class:`AuditResult`,
  with ``exceeds_claim`` set (and a loud warning) when a proof (one-run bound on coin-flip
  canaries) is above the accountant's epsilon. The headline of a whole attack run (the best of
  several audits, corrected for how many) is :mod:`dpaudit.verdict.headline`.

When is a bound a proof? An (epsilon, delta) lower bound at 95% confidence means: if the mechanism
really were (epsilon, delta)-DP, the bound would exceed epsilon with probability at most 5%.

- Clopper-Pearson treats every score as an independent trial of the mechanism. That holds when each
  score comes from its own training run (the setting of Jagielski et al. and Nasr et al.). Scores of
  many examples of ONE model are not independent trials, so on them the bound is the customary but
  heuristic audit.
- The one-run bounds are proofs for ONE training run, provided membership of every canary was decided
  by an independent fair coin (Steinke et al. 2023): use them on coin-flip canaries.
- The f-DP bound rejects "the mechanism is mu-GDP" and reports the epsilon at ``delta`` of the largest
  rejected mu. It is an (epsilon, delta) lower bound only for mechanisms whose privacy profile is
  that of a Gaussian mechanism (DP-SGD is close to one by the central limit theorem of Dong, Roth &
  Su); on randomized response with epsilon 2 it exceeded the true epsilon in 99.5% of simulated
  trials. :class:`AuditResult` therefore keeps it out of ``exceeds_claim`` and the headline, and
  labels it "refutes mu-GDP (Gaussian mechanisms only), not an (epsilon, delta) bound".

Conventions shared with ``jax_privacy.auditing.CanaryScoreAuditor`` (cross-checked in the tests):
significance = 1 - confidence; Clopper-Pearson one-sided intervals at significance / 2 each for TPR
and FPR; a split draws ``rng.permutation`` of the members, then of the non-members, from
``numpy.random.default_rng(seed)`` and keeps the first ``int(n * fraction)`` of each for choosing.
Deliberate differences: (1) the Bonferroni correction over "all thresholds" here counts every
possible false/true-positive count (n_nonmembers events for the FPR bounds, n_members for the TPR
bounds), which is valid uniformly over every real threshold; jax-privacy divides by the number of
thresholds on the empirical ROC convex hull, a data-dependent count. A fixed threshold set gives
identical results. (2) :func:`auc` is the empirical AUC; jax-privacy's ``attack_auroc`` is the AUC
of the ROC convex hull (here ``roc_curve(...).convex_hull().auc()``). (3) ``tpr_at_fpr`` uses
deterministic thresholds; jax-privacy's ``tpr_at_given_fpr`` interpolates on the convex hull (here
:meth:`Roc.tpr_at_randomized`). (4) the bootstrap is the percentile bootstrap (jax-privacy applies a
bias correction). (5) the one-run bounds also take k- guesses (jax-privacy: k- = 0 only), and the
Bonferroni grid of guess counts is fixed in advance (:class:`GuessGrid`) rather than the data's hull.
(6) choosing the one-run guesses on a split, jax-privacy skips thresholds whose precision is below
logistic(best epsilon so far): exact for Steinke et al., a heuristic for the f-DP bound that can miss
the best threshold; here every candidate is evaluated.

References:
  - Carlini et al. 2022, "Membership Inference Attacks From First Principles" (TPR at low FPR).
  - Yeom et al. 2018, "Privacy Risk in Machine Learning" (membership advantage).
  - Jagielski, Ullman & Oprea 2020, "Auditing Differentially Private Machine Learning: How Private is
    Private SGD?"; Nasr et al. 2021, "Adversary Instantiation: Lower Bounds for Differentially
    Private Machine Learning" (Clopper-Pearson epsilon lower bounds).
  - Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run".
  - Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-Differential Privacy in One Run".
  - Dong, Roth & Su 2022, "Gaussian Differential Privacy" (the mu-GDP epsilon-delta curve).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for type checkers (``X as X``: re-exported); at run time each is imported on first use
    from dpaudit.audit.bootstrap import BootstrapCI as BootstrapCI
    from dpaudit.audit.bounds import (
        GUARANTEE_DP as GUARANTEE_DP,
    )
    from dpaudit.audit.bounds import (
        GUARANTEE_GDP as GUARANTEE_GDP,
    )
    from dpaudit.audit.bounds import (
        EpsilonBound as EpsilonBound,
    )
    from dpaudit.audit.bounds import (
        epsilon_lower_bound_clopper_pearson as epsilon_lower_bound_clopper_pearson,
    )
    from dpaudit.audit.gdp import gdp_delta as gdp_delta
    from dpaudit.audit.gdp import gdp_epsilon as gdp_epsilon
    from dpaudit.audit.gdp import gdp_mu as gdp_mu
    from dpaudit.audit.intervals import (
        BOOTSTRAP_RESAMPLES as BOOTSTRAP_RESAMPLES,
    )
    from dpaudit.audit.intervals import (
        LEVEL as LEVEL,
    )
    from dpaudit.audit.intervals import (
        Interval as Interval,
    )
    from dpaudit.audit.intervals import (
        OneSidedTest as OneSidedTest,
    )
    from dpaudit.audit.intervals import (
        bootstrap_interval as bootstrap_interval,
    )
    from dpaudit.audit.intervals import (
        clopper_pearson as clopper_pearson,
    )
    from dpaudit.audit.intervals import (
        log_frequency_slope as log_frequency_slope,
    )
    from dpaudit.audit.intervals import (
        mann_whitney_greater as mann_whitney_greater,
    )
    from dpaudit.audit.one_run import (
        epsilon_lower_bound_one_run as epsilon_lower_bound_one_run,
    )
    from dpaudit.audit.one_run import (
        epsilon_lower_bound_one_run_fdp as epsilon_lower_bound_one_run_fdp,
    )
    from dpaudit.audit.result import SCHEMA as SCHEMA
    from dpaudit.audit.result import AuditResult as AuditResult
    from dpaudit.audit.result import audit_scores as audit_scores
    from dpaudit.audit.roc import (
        Estimate as Estimate,
    )
    from dpaudit.audit.roc import (
        Roc as Roc,
    )
    from dpaudit.audit.roc import (
        TprAtFpr as TprAtFpr,
    )
    from dpaudit.audit.roc import (
        attacker_advantage as attacker_advantage,
    )
    from dpaudit.audit.roc import (
        auc as auc,
    )
    from dpaudit.audit.roc import (
        min_nonmembers_for as min_nonmembers_for,
    )
    from dpaudit.audit.roc import (
        roc_curve as roc_curve,
    )
    from dpaudit.audit.roc import (
        tpr_at_fpr as tpr_at_fpr,
    )
    from dpaudit.audit.thresholds import (
        DEFAULT_GUESS_FRACTIONS as DEFAULT_GUESS_FRACTIONS,
    )
    from dpaudit.audit.thresholds import (
        BonferroniThresholds as BonferroniThresholds,
    )
    from dpaudit.audit.thresholds import (
        FixedGuesses as FixedGuesses,
    )
    from dpaudit.audit.thresholds import (
        FixedThreshold as FixedThreshold,
    )
    from dpaudit.audit.thresholds import (
        GuessGrid as GuessGrid,
    )
    from dpaudit.audit.thresholds import (
        SplitGuesses as SplitGuesses,
    )
    from dpaudit.audit.thresholds import (
        SplitThreshold as SplitThreshold,
    )

#: public name -> the module of this package that defines it.
_HOME = {
    "AuditResult": "result",
    "BOOTSTRAP_RESAMPLES": "intervals",
    "BonferroniThresholds": "thresholds",
    "BootstrapCI": "bootstrap",
    "DEFAULT_GUESS_FRACTIONS": "thresholds",
    "EpsilonBound": "bounds",
    "Estimate": "roc",
    "FixedGuesses": "thresholds",
    "FixedThreshold": "thresholds",
    "GUARANTEE_DP": "bounds",
    "GUARANTEE_GDP": "bounds",
    "GuessGrid": "thresholds",
    "Interval": "intervals",
    "LEVEL": "intervals",
    "OneSidedTest": "intervals",
    "Roc": "roc",
    "SCHEMA": "result",
    "SplitGuesses": "thresholds",
    "SplitThreshold": "thresholds",
    "TprAtFpr": "roc",
    "attacker_advantage": "roc",
    "auc": "roc",
    "audit_scores": "result",
    "bootstrap_interval": "intervals",
    "clopper_pearson": "intervals",
    "epsilon_lower_bound_clopper_pearson": "bounds",
    "epsilon_lower_bound_one_run": "one_run",
    "epsilon_lower_bound_one_run_fdp": "one_run",
    "gdp_delta": "gdp",
    "gdp_epsilon": "gdp",
    "gdp_mu": "gdp",
    "log_frequency_slope": "intervals",
    "mann_whitney_greater": "intervals",
    "min_nonmembers_for": "roc",
    "roc_curve": "roc",
    "tpr_at_fpr": "roc",
}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> object:
    if name in _HOME:
        value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))
