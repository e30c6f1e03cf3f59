"""RMIA on a masked LM's low-probability outputs: no longer the loss attack where the references carry information.

A synthetic masked LM: every text x has an intrinsic difficulty (its loss under any model trained on this
distribution, 7 +- 1.5 nats, so p = exp(-loss) ~ 1e-3 as for the demo's MLM) that the reference models see
too, and training on x lowers the target's loss by 0.4 nats. The loss attack sees the difficulty as much as
membership; RMIA with the masked-LM ``a`` divides it out through the references and must rank differently
and better. With the classifier's a = 0.3 the constant (1 - a) / 2 swamps the ~1e-3 reference term and RMIA
ranks as the loss (Spearman 0.999998): the test shows that too, so it fails if the choice regresses.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr

from dpaudit.attacks.rmia import CLASSIFIER_A, MASKED_LM_A, offline_a, rmia_scores
from dpaudit.audit import roc_curve
from dpaudit.scoring.source import CLASSIFIER, MASKED_LM


def synthetic_mlm(seed: int = 0, n: int = 600, n_pop: int = 400, refs: int = 4):
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(7.0, 1.5, n)  # nats: p ~ 1e-3
    member = rng.random(n) < 0.5
    loss_target = difficulty - 0.4 * member + 0.15 * rng.normal(size=n)
    loss_refs = difficulty + 0.15 * rng.normal(size=(refs, n))  # OUT models that know how easy x is
    pop = rng.normal(7.0, 1.5, n_pop)
    loss_tz, loss_rz = pop + 0.15 * rng.normal(size=n_pop), pop + 0.15 * rng.normal(size=(refs, n_pop))
    p = np.exp
    return member, loss_target, p(-loss_target), p(-loss_refs), p(-loss_tz), p(-loss_rz)


def auc(scores: np.ndarray, member: np.ndarray) -> float:
    return roc_curve(scores[member], scores[~member]).auc()


def test_rmia_uses_the_references_on_low_probability_outputs():
    member, loss, p_tx, p_rx, p_tz, p_rz = synthetic_mlm()
    assert np.median(p_tx) < 2e-3  # the low-probability regime
    rmia = rmia_scores(p_tx, p_rx, p_tz, p_rz, a=offline_a(MASKED_LM))
    loss_auc, rmia_auc = auc(-loss, member), auc(rmia, member)
    assert spearmanr(rmia, -loss).statistic < 0.5  # ranks differently from the loss attack
    assert rmia_auc > loss_auc + 0.15, (rmia_auc, loss_auc)  # and better: difficulty divided out
    # the failure being fixed: the classifier's a on the same outputs is the loss attack, rank for rank
    old = rmia_scores(p_tx, p_rx, p_tz, p_rz, a=CLASSIFIER_A)
    assert spearmanr(old, -loss).statistic > 0.995 and abs(auc(old, member) - loss_auc) < 0.01


def test_a_is_chosen_by_model_kind_and_checked():
    assert offline_a(MASKED_LM) == MASKED_LM_A == 1.0 and offline_a(CLASSIFIER) == CLASSIFIER_A == 0.3
    member, _, p_tx, p_rx, p_tz, p_rz = synthetic_mlm(n=20, n_pop=10)
    # a = 1: the score is the population rank of p_target / mean p_ref
    lr_x, lr_z = p_tx / p_rx.mean(0), p_tz / p_rz.mean(0)
    np.testing.assert_allclose(rmia_scores(p_tx, p_rx, p_tz, p_rz, a=1.0), [(lr_z < v).mean() for v in lr_x])
    with pytest.raises(ValueError, match="a must be in"):
        rmia_scores(p_tx, p_rx, p_tz, p_rz, a=1.5)
