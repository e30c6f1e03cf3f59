"""The demo's DP models and its audit recipe, at epsilon 4 and 8: the float noise sampler's tail figure is at most
delta / 100, computed through each trainer's own privacy plan (the real calibration, with the tail inside delta) for
the demo plan's real commands and its real inject directories, without training.

With the samplers every trainer drew from before (jax.random.normal float32, reach 5.22 sigma), the epsilon-8 BERT's
figure was 0.0014, 140x its delta of 1e-5.
"""

from __future__ import annotations

import dataclasses
import math

import click
import pytest
from click.testing import CliRunner

from dpaudit import accounting as A
from dpaudit.cli import cli
from dpaudit.cli.train import build_config
from dpaudit.demo.plan import FULL, TARGET_EPSILON, build_plan
from dpaudit.files.run_dirs import read_jsonl


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The full demo's plan (classifiers and causal LMs included) and its inject directories, written for real."""
    out = tmp_path_factory.mktemp("demo-tail")
    plan = build_plan(out, FULL, seed=3, report=out / "report.html", classifiers=True, causal=True)
    for stage in plan.stages:
        if stage.args[0] == "inject":
            result = CliRunner().invoke(cli, list(stage.args), catch_exceptions=False)
            assert result.exit_code == 0, result.output
    return plan


def _config(args):
    command = cli.get_command(click.Context(cli), "train")
    with command.make_context("dpaudit train", list(args[1:])) as ctx:
        trainer = ctx.meta["dpaudit.trainer"]
        return trainer, build_config(trainer, ctx.params, ctx, None)


def _plan(trainer, config, data, tmp_path):
    """The plan the trainer's skeleton would make: jax-bert's ``plan_run_privacy``; for a torch trainer, its
    plug-in's own plan request after its own ``load_data`` (the --init-from start is not trained here: it sets
    nothing in the plan). The sensitivity factor scales the noise std, never the accountant's sigma or the tail."""
    if trainer.name == "jax-bert":
        from dpaudit.trainers.jax_bert.trainer import plan_run_privacy

        return plan_run_privacy(config, sum(1 for _ in read_jsonl(data / "train.jsonl")))
    import torch

    from dpaudit.training.privacy_plan import plan_privacy

    plugin = trainer.Plugin(data, tmp_path / "never-written", dataclasses.replace(config, init_from=None), seed=3)
    plugin.device = torch.device("cpu")
    run = plugin.load_data()
    return plan_privacy(dataset_size=run.size, sensitivity_factor=1.0, **plugin._plan_request())


@pytest.mark.parametrize("epsilon", [4.0, 8.0])
def test_every_dp_model_of_the_demo_has_its_noise_tail_below_delta_over_100(demo, epsilon, tmp_path):
    trains = [m.train for m in demo.models if "--target-epsilon" in m.train.args]
    names = {stage.name for stage in trains}
    assert names == {
        "train-dp-eps8",
        "train-dp-eps8-audit",
        "train-clf-dp-sgd",
        "train-clf-edp-sgd",
        "train-clm-dp-eps8",
    }
    for stage in trains:
        args = list(stage.args)
        assert float(args[args.index("--target-epsilon") + 1]) == TARGET_EPSILON
        args[args.index("--target-epsilon") + 1] = f"{epsilon:g}"
        trainer, config = _config(args)
        plan = _plan(trainer, config, stage.inputs[0], tmp_path)
        reach = A.sampler_reach(plan.noise_sampler)
        assert plan.noise_sampler not in A.RETIRED_SAMPLERS and reach > 11.5, stage.name
        tail = A.tail_figure(plan.segments(), reach)
        assert plan.noise_tail == pytest.approx(tail, rel=1e-12) and 0 < tail <= plan.delta / 100, (stage.name, tail)
        # the claim states delta; the accountant's epsilon at delta - tail meets the target
        assert plan.accountant_delta == pytest.approx(plan.delta - tail, rel=1e-12)
        assert A.epsilon(plan.event(), plan.accountant_delta) <= epsilon
        # the figure the retired float32 JAX sampler would have had for the same run: far above delta
        if stage.name == "train-dp-eps8" and epsilon == 8.0:
            assert A.tail_figure(plan.segments(), A.sampler_reach("jax-float32")) > 100 * plan.delta
            assert math.isclose(plan.delta, 1e-5)
