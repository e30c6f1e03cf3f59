"""jax-bert's masked LM gets `dpaudit train`'s below-the-start warning too: its summary's ``mlm_accuracy`` against the
``start_eval`` the shared run skeleton records for a private run from an ``--init-from`` start (the edp-sgd runs are
tested end to end in tests/trainers/edp_sgd/test_below_start.py; the skeleton and the printing are the same code)."""

from __future__ import annotations

from dpaudit.cli.train import utility_lines
from dpaudit.training.baselines import MLM_BASELINE_KEY


def test_a_masked_lm_below_its_start_is_warned_and_one_above_it_is_not():
    summary = {"mlm_accuracy": 0.5774, MLM_BASELINE_KEY: 0.065, "start_eval": {"mlm_accuracy": 0.5813}}
    lines = utility_lines(summary)
    assert lines[0].startswith("held-out MLM accuracy 0.5774")
    assert (
        "warning: this private run ends below its public start: held-out MLM accuracy 0.5774 < the start's 0.5813"
        in (lines[1])
    )
    above = {**summary, "start_eval": {"mlm_accuracy": 0.57}}
    assert not any("warning" in line for line in utility_lines(above))
