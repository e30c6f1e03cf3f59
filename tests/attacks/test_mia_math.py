"""The membership-inference mathematics without models: LiRA's Gaussian fits, RMIA's ratio, the
examples task (duplicates, equal counts, seed), ROC downsampling. Oracles worked out here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.stats import norm

from dpaudit.attacks.lira import balanced_membership, fit_and_score, logit_confidence
from dpaudit.attacks.mia import ROC_POINTS, _downsample_roc, example_task
from dpaudit.attacks.rmia import rmia_scores


def test_logit_confidence_is_log_odds_of_exp_minus_loss():
    loss = np.array([0.01, 0.5, 2.0, 30.0])
    p = np.exp(-loss)
    np.testing.assert_allclose(logit_confidence(loss), np.log(p / (1 - p)), rtol=1e-9)


def test_balanced_membership_puts_each_row_in_half_the_models():
    keep = balanced_membership(4, 1000, seed=0)
    assert (keep.sum(0) == 2).all()
    assert abs(keep.mean() - 0.5) < 1e-12 and not (balanced_membership(4, 1000, seed=1) == keep).all()


def test_lira_matches_the_gaussian_likelihood_ratio():
    rng = np.random.default_rng(0)
    k, n = 8, 5
    member = balanced_membership(k, n, seed=0)
    phi = rng.normal(size=(k, n)) + 2 * member
    target = rng.normal(size=n)
    fit = fit_and_score(phi, member, target, variance="per-example")
    assert fit.variance == "per-example" and fit.offline_test == "one-sided"
    two = fit_and_score(phi, member, target, variance="per-example", offline="two-sided")
    for j in range(n):  # the oracle: a loop over candidates with numpy's sample statistics
        a, b = phi[member[:, j], j], phi[~member[:, j], j]
        want = norm.logpdf(target[j], a.mean(), a.std(ddof=1)) - norm.logpdf(target[j], b.mean(), b.std(ddof=1))
        assert fit.online[j] == pytest.approx(want)
        assert fit.offline[j] == pytest.approx(norm.logcdf((target[j] - b.mean()) / b.std(ddof=1)))
        assert two.offline[j] == pytest.approx(-norm.logpdf(target[j], b.mean(), b.std(ddof=1)))
    shared = fit_and_score(phi, member, target, variance="global")
    assert shared.variance == "global" and fit_and_score(phi, member, target).variance == "global"  # auto: 8 < 64
    # one s for IN, OUT and every candidate: the pooled spread around each candidate's own IN / OUT mean
    resid = [phi[member[:, j], j] - phi[member[:, j], j].mean() for j in range(n)]
    resid += [phi[~member[:, j], j] - phi[~member[:, j], j].mean() for j in range(n)]
    s = np.sqrt(sum((r**2).sum() for r in resid) / (k * n - 2 * n))
    for j in range(n):
        a, b = phi[member[:, j], j], phi[~member[:, j], j]
        assert shared.online[j] == pytest.approx(
            norm.logpdf(target[j], a.mean(), s) - norm.logpdf(target[j], b.mean(), s)
        )


def test_lira_separates_simulated_members():
    rng = np.random.default_rng(1)
    k, n = 16, 400
    member = balanced_membership(k, n, seed=2)
    difficulty = rng.normal(size=n)  # per-example offsets: what LiRA's per-example fit removes
    phi = difficulty + 1.5 * member + 0.3 * rng.normal(size=(k, n))
    truth = rng.random(n) < 0.5
    target = difficulty + 1.5 * truth + 0.3 * rng.normal(size=n)
    fit = fit_and_score(phi, member, target, variance="per-example")
    online, offline = fit.online, fit.offline
    from dpaudit.audit import roc_curve

    assert roc_curve(online[truth], online[~truth]).auc() > 0.95
    assert roc_curve(offline[truth], offline[~truth]).auc() > 0.9
    # the raw confidence (a loss attack) is blurred by the per-example difficulty
    assert roc_curve(target[truth], target[~truth]).auc() < 0.9


def test_rmia_score_is_the_fraction_of_population_dominated():
    p_t_x, p_r_x = np.array([0.5, 0.1]), np.array([[0.25, 0.1]])
    p_t_z, p_r_z = np.array([0.2, 0.4, 0.6]), np.array([[0.2, 0.2, 0.2]])
    a = 0.3

    def lr(pt, pr):
        return pt / (0.5 * ((1 + a) * pr + (1 - a)))

    lx, lz = lr(p_t_x, p_r_x[0]), lr(p_t_z, p_r_z[0])
    want = [(lx[i] / lz > 1).mean() for i in range(2)]
    np.testing.assert_allclose(rmia_scores(p_t_x, p_r_x, p_t_z, p_r_z, a=a), want)


def test_downsampled_roc_keeps_ends_and_low_fpr_detail():
    fpr = np.r_[0, np.sort(np.random.default_rng(0).random(5000)), 1]
    tpr = np.sqrt(fpr)
    x, y = _downsample_roc(fpr, tpr)
    assert len(x) <= ROC_POINTS and x[0] == 0 and x[-1] == 1 and y[-1] == 1
    assert sum(v < 0.01 for v in x) >= 10  # log-spaced points keep the region a log-axis plot shows
    assert np.all(np.diff(x) >= 0)


def test_examples_task_removes_duplicates_and_balances(tmp_path):
    from dpaudit.attacks.shadow_models import write_shadow_data
    from dpaudit.inject_dir.reader import load_inject_run

    train = [{"text": f"member {i}"} for i in range(10)] + [{"text": "shared row"}, {"text": "shared row"}]
    heldout = [{"text": f"other {i}"} for i in range(6)] + [{"text": "shared row"}]
    write_shadow_data(
        tmp_path / "d", train=train, heldout=heldout, public=[{"text": "p"}], labelled=False, target_manifest={}
    )
    run = load_inject_run(tmp_path / "d")
    task = example_task(run, seed=5)
    assert task.info["duplicates_removed"] == {"texts": 1, "train_rows": 2, "heldout_rows": 1}
    assert task.n_members == task.n_nonmembers == 6 and "shared row" not in task.texts
    assert example_task(run, seed=5).texts == task.texts  # seeded
    assert example_task(run, seed=6).texts[:6] != task.texts[:6]
    assert example_task(run, seed=5, max_per_side=3).n_members == 3


def test_a_bound_above_the_claim_is_flagged_loudly():
    """Perfectly separated scores refute a claim of epsilon 0.5: loudly from coin-flip canaries inserted once (the
    one-run bound, a proof), as "investigate" from the examples of one model (Clopper-Pearson, a heuristic)."""
    from types import SimpleNamespace

    from dpaudit.attacks.mia import MembershipTask, audit_tasks
    from dpaudit.attacks.registry import AttackOptions

    n, k = 2000, 200
    task = MembershipTask(
        "examples", [""] * 2 * n, None, np.r_[np.ones(n, bool), np.zeros(n, bool)], [str(i) for i in range(2 * n)]
    )
    canaries = MembershipTask(
        "canaries",
        [""] * 2 * k,
        None,
        np.r_[np.ones(k, bool), np.zeros(k, bool)],
        [f"c{i}" for i in range(2 * k)],
        coin_flip=True,
        info={"frequencies": [1]},
    )
    context = SimpleNamespace(options=AttackOptions(), _mia_claim=(0.5, 1e-5))  # the claim as claim_of caches it
    scores = np.r_[np.linspace(10, 11, n), np.linspace(0, 1, n)]
    flips = np.r_[np.linspace(10, 11, k), np.linspace(0, 1, k)]
    outcome = audit_tasks(context, "loss", [(task, scores), (canaries, flips)], parameters={})
    result = outcome.result
    assert result["examples"].epsilon_lower_bound > 0.5 and not result["examples"].exceeds_claim  # heuristic
    assert any("heuristic bound above the claim: investigate" in w for w in result["examples"].warnings)
    assert result.exceeds_claim and result["canaries"].exceeds_claim  # proof
    assert (
        result.warnings[0].startswith("one-run proof bound ")
        and "on canaries is above the claimed epsilon 0.500" in result.warnings[0]
    )
    assert "for this audit alone (not corrected" in result.warnings[0]
    # repeated canaries bound group epsilon: never compared with the per-example claim
    group = dataclasses.replace(canaries, info={"frequencies": [1, 10]})
    grouped = audit_tasks(context, "loss", [(group, flips)], parameters={}).result
    assert not grouped.exceeds_claim and any("group bound" in w for w in grouped["canaries"].warnings)
    assert len(outcome.score_files["scores/mia_loss.jsonl"]) == 2 * n + 2 * k
