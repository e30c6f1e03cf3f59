"""The gradient-path audit's verdict is the cooperative audit's: the same two tests, planned from the claim.

:func:`dpaudit.whitebox.gradient_path.analyse_path` (canaries through a DP library's own gradient path) and
:func:`dpaudit.whitebox.analysis.analyse` (dpaudit's cooperative block) score a canary the same way when the library's
claim is the mechanism that ran, so on the same evidence they must reach the same verdict: the one-run test of
:func:`dpaudit.whitebox.plan.planned_one_run` and the pooled test of :func:`dpaudit.whitebox.plan.planned_pooled`, with
the same bounds. Simulated runs of the claimed mechanism (R = 2 runs of 2,000 add/remove canaries, q = 0.5, 4 updates,
epsilon 4): at these sizes the plan picks the order statistics for both, which read more of the claim than the f-DP
recursion and the Clopper-Pearson points the gradient-path audit read before.
"""

from __future__ import annotations

import numpy as np

from dpaudit.training.gradient_canaries import UNIT_EXAMPLE
from dpaudit.whitebox.analysis import analyse
from dpaudit.whitebox.gradient_path import PathRun, analyse_path
from dpaudit.whitebox.harness import RunEvidence
from dpaudit.whitebox.layout import CanaryLayout
from dpaudit.whitebox.plan import planned_one_run, planned_pooled
from tests.claims import poisson_claim

CANARIES, RUNS, Q, STEPS, SIGMA = 2000, 2, 0.5, 4, 1.0
CLAIM = poisson_claim(Q, STEPS, SIGMA, source="stated", accountant="prv", sampling="poisson")


def _evidence(seed: int) -> RunEvidence:
    """One run of the claimed mechanism on m fair-coin canaries: each member sampled with probability q per update,
    its clipped gradient C on its own coordinate, Gaussian noise of std sigma C on every coordinate."""
    rng = np.random.default_rng(seed)
    member = rng.integers(0, 2, CANARIES).astype(bool)
    sampled = rng.random((STEPS, CANARIES)) < Q
    y = (member[None, :] & sampled) * CLAIM.clip_norm + rng.normal(0.0, SIGMA * CLAIM.clip_norm, (STEPS, CANARIES))
    return RunEvidence(CanaryLayout(member=member, unit=UNIT_EXAMPLE), CLAIM, y, -y.sum(axis=0))


def test_the_gradient_path_verdict_is_the_planned_one_run_and_pooled_test_of_the_cooperative_audit():
    evidence = [_evidence(seed) for seed in range(RUNS)]
    runs = [PathRun(evidence=ev, ran=CLAIM, record=None) for ev in evidence]  # type: ignore[arg-type]
    path = analyse_path(runs, full=False)
    cooperative = analyse(evidence, full=False)
    alpha = 0.025  # each verdict bound's significance at the verdict's 95%
    assert path.one_run_method == planned_one_run(CLAIM, UNIT_EXAMPLE, 0, CANARIES, alpha) == "order_stats"
    assert path.pooled_method == planned_pooled(CLAIM, UNIT_EXAMPLE, 0, CANARIES, RUNS, alpha) == "order_stats"
    assert (path.one_run_method, path.pooled_method) == (cooperative.one_run_method, cooperative.pooled_method)
    for kind in ("one_run", "pooled"):
        mine = path.one_run["all_iterates"][0] if kind == "one_run" else path.pooled["all_iterates"]
        theirs = cooperative.one_run["all_iterates"][0] if kind == "one_run" else cooperative.pooled["all_iterates"]
        assert mine["order_stats"].epsilon == theirs["order_stats"].epsilon, kind
        assert mine["order_stats"].guesses == theirs["order_stats"].guesses, kind
    assert path.primary[1].epsilon == cooperative.primary[1].epsilon < CLAIM.epsilon
    assert path.ceilings == cooperative.ceilings and not path.alarm
