"""Known answer for the whole stage: a non-private model memorizes canaries repeated 100 times.

``dpaudit inject`` plants 100x canaries (each with its own ``{name}`` key) and never-inserted control
canaries; ``dpaudit train --trainer jax-bert --non-private`` trains a tiny BERT (the shared session
run of ``conftest.py``); the product's scorer (:mod:`dpaudit.scoring`) scores each canary with all its
secret digits masked at once, and :func:`dpaudit.attacks.exposure_rank.exposure_rank` ranks the secret
exactly among all 10^4 candidates. Memorized canaries must rank far above the controls, whose rank is
that of a random secret (about 5,000 of 10,000).
"""

from __future__ import annotations

import itertools

import numpy as np

from dpaudit.canaries.manifest import load_inject_run

DIGITS = 4


def test_non_private_model_ranks_100x_canaries_far_above_controls(canary_model, canary_data):
    from dpaudit import scoring
    from dpaudit.attacks.exposure_rank import exposure_rank

    run = load_inject_run(canary_data)
    tables = scoring.load(canary_model, progress=False).masked_log_probs(run.canaries, run.space)
    ranks = {c.id: exposure_rank(t, run.space.index_of(c.secret)).rank_high for c, t in zip(run.canaries, tables)}
    inserted = [ranks[c.id] for c in run.canaries if c.frequency == 100]
    controls = [ranks[c.id] for c in run.canaries if c.frequency == 0]
    assert len(inserted) == 4 and len(controls) == 8
    # 100x canaries: near the top of 10,000 candidates; controls: where random secrets land.
    assert max(inserted) < min(controls), (inserted, controls)
    assert np.exp(np.mean(np.log(controls))) > 100 * np.exp(np.mean(np.log(inserted))), (inserted, controls)
    assert np.mean(controls) > 1000, (inserted, controls)  # controls rank like random secrets
    assert min(inserted) == 1, inserted  # with a unique key per canary, some are reconstructed exactly


def test_exact_rank_matches_brute_force():
    from dpaudit.attacks.exposure_rank import exposure_rank

    rng = np.random.default_rng(0)
    table = np.log(rng.dirichlet(np.ones(10), size=DIGITS))
    scores = np.array([sum(table[i, d] for i, d in enumerate(c)) for c in itertools.product(range(10), repeat=DIGITS)])
    for secret in ((0, 0, 0, 0), (3, 1, 4, 1), (9, 9, 9, 9)):
        target = sum(table[i, d] for i, d in enumerate(secret))
        interval = exposure_rank(table, list(secret))
        assert interval.rank_low == 1 + int(np.sum(scores > target + 1e-9))
        assert interval.rank_high == int(np.sum(scores >= target - 1e-9))
        assert interval.space_size == 10**DIGITS
