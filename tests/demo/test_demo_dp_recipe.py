"""The demo's epsilon-8 causal LM trains with the recipe chosen on public rows (``causal_dp_batch_size``: 20 epochs of
256, benchmarks/bench_dp_recipe.py --task clm); the non-private causal LM, and every size that leaves the field at 0,
keep ``causal_batch_size``."""

from __future__ import annotations

import pytest

from dpaudit.demo.plan import FULL, QUICK, DemoSizes, build_plan


def _batch(plan, name: str) -> int:
    args = {s.name: s.args for s in plan.stages}[name]
    return int(args[args.index("--batch-size") + 1])


@pytest.mark.parametrize(("sizes", "dp_batch"), [(FULL, 256), (QUICK, QUICK.causal_batch_size)])
def test_the_dp_causal_lm_uses_its_own_batch_and_the_non_private_one_does_not(sizes, dp_batch, tmp_path):
    plan = build_plan(tmp_path / "demo", sizes, seed=0, report=tmp_path / "r.html", classifiers=False, causal=True)
    assert _batch(plan, "train-clm-dp-eps8") == dp_batch
    assert _batch(plan, "train-clm-nonprivate") == sizes.causal_batch_size == 64


def test_a_negative_dp_causal_batch_is_refused():
    with pytest.raises(ValueError, match="causal_dp_batch_size"):
        DemoSizes(**{**QUICK.__dict__, "causal_dp_batch_size": -1})
