"""The demo's epsilon-8 masked LM fine-tunes the public model with the recipe chosen on public rows
(``masked_dp_*``: 250 steps of 64 at 3e-4 after 25 warm-up steps, benchmarks/bench_dp_recipe.py --task mlm); the
non-private masked LM, the one-run audit's models and every size that leaves the fields at 0 keep their commands."""

from __future__ import annotations

import pytest

from dpaudit.demo.plan import FULL, QUICK, DemoSizes, build_plan


def _option(args: tuple[str, ...], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def _stages(sizes: DemoSizes, tmp_path):
    plan = build_plan(tmp_path / "demo", sizes, seed=0, report=tmp_path / "r.html", classifiers=False)
    return {s.name: s.args for s in plan.stages}


def test_the_full_demo_trains_the_dp_masked_lm_with_the_chosen_recipe_and_nothing_else(tmp_path):
    stages = _stages(FULL, tmp_path)
    dp = stages["train-dp-eps8"]
    assert (_option(dp, "--steps"), _option(dp, "--batch-size")) == ("250", "64")
    assert (_option(dp, "--learning-rate"), _option(dp, "--warmup-steps")) == ("0.0003", "25")
    nonprivate = stages["train-nonprivate"]
    assert (_option(nonprivate, "--steps"), _option(nonprivate, "--learning-rate")) == ("1000", "0.003")
    others = [args for name, args in stages.items() if name.startswith("train-") and name != "train-dp-eps8"]
    assert others and all("--warmup-steps" not in args for args in others)


def test_quick_keeps_its_masked_recipe(tmp_path):
    dp = _stages(QUICK, tmp_path)["train-dp-eps8"]
    assert (_option(dp, "--steps"), _option(dp, "--learning-rate")) == (str(QUICK.steps), f"{QUICK.dp_learning_rate:g}")
    assert "--warmup-steps" not in dp


def test_a_warm_up_as_long_as_the_run_is_refused():
    with pytest.raises(ValueError, match="masked_dp_warmup_steps"):
        DemoSizes(**{**FULL.__dict__, "dp_steps": 20})
    with pytest.raises(ValueError, match="masked_dp_steps must be >= 0"):
        DemoSizes(**{**QUICK.__dict__, "masked_dp_steps": -1})
