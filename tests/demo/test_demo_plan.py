"""The demo's plan: every stage is a valid `dpaudit` command line, checked by click without running it."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from dpaudit.cli import cli
from dpaudit.demo.plan import FULL, QUICK, DemoSizes, build_plan


@pytest.mark.parametrize("sizes", [FULL, QUICK], ids=["full", "quick"])
def test_every_stage_parses_as_the_command_a_user_would_type(sizes, tmp_path):
    plan = build_plan(tmp_path / "demo", sizes, seed=3, report=tmp_path / "r.html", classifiers=True, noise_seed=5)
    names = [s.name for s in plan.stages]
    assert names == ["inject", "inject-audit", "inject-classifier", "train-nonprivate", "attack-nonprivate",
                     "train-dp-eps8", "attack-dp-eps8", "train-nonprivate-audit", "attack-nonprivate-audit",
                     "train-dp-eps8-audit", "attack-dp-eps8-audit", "train-clf-sgd", "attack-clf-sgd",
                     "train-clf-edp-sgd", "attack-clf-edp-sgd", "report"]
    for stage in plan.stages:  # --data must exist for click; inject's outputs stand in for themselves
        if stage.schema_prefix == "dpaudit.inject/":
            stage.output.mkdir(parents=True)
    for stage in plan.stages:
        command = cli.get_command(click.Context(cli), stage.args[0])
        with command.make_context(f"dpaudit {stage.args[0]}", list(stage.args[1:]), resilient_parsing=False) as ctx:
            if stage.args[0] == "train":
                assert ctx.params.get("seed") == 3
    trains = {s.name: s.args for s in plan.stages if s.name.startswith("train")}
    assert all(args[args.index("--noise-seed") + 1] == "5" for args in trains.values())
    assert "--non-private" in trains["train-nonprivate"] and "--target-epsilon" in trains["train-dp-eps8"]
    assert trains["train-clf-edp-sgd"][trains["train-clf-edp-sgd"].index("--mode") + 1] == "edp-sgd"
    from dpaudit.corpus.assistant import INTENTS

    for name in ("train-clf-sgd", "train-clf-edp-sgd"):  # the label set is declared (public), not read off the rows
        assert trains[name][trains[name].index("--labels") + 1].split(",") == [intent.name for intent in INTENTS]
    assert plan.stages[-1].inputs == tuple(m.attack.output for m in plan.models)
    # The one-run audit: coin-flip new-token canaries, the same two recipes, the canary attack (its one-run bound).
    stages = {s.name: s.args for s in plan.stages}
    audit = stages["inject-audit"]
    assert "--coin-flip" in audit and audit[audit.index("--design") + 1] == "new-tokens"
    assert audit[audit.index("--per-frequency") + 1] == str(sizes.audit_canaries) and sizes.audit_canaries >= 200
    for label in ("nonprivate", "dp-eps8"):
        same = [a for a in stages[f"train-{label}"] if a not in (str(tmp_path / "demo" / "data"), str(tmp_path / "demo" / f"model-{label}"))]
        assert [a for a in stages[f"train-{label}-audit"] if "audit" not in a] == same  # the same recipe
        attack = stages[f"attack-{label}-audit"]
        assert attack[attack.index("--attacks") + 1] == "canary" and str(tmp_path / "demo" / "data-audit") in attack


def test_without_classifiers_only_the_masked_lms_run(tmp_path):
    plan = build_plan(tmp_path, QUICK, seed=0, report=tmp_path / "r.html", classifiers=False)
    assert [m.label for m in plan.models] == ["nonprivate", "dp-eps8", "nonprivate-audit", "dp-eps8-audit"]
    assert not any("noise-seed" in a for s in plan.stages for a in s.args)  # OS entropy unless asked


def test_sizes_are_validated():
    with pytest.raises(ValueError, match="mask_prob"):
        DemoSizes(**{**QUICK.__dict__, "mask_prob": 1.5})
    with pytest.raises(ValueError, match="frequencies"):
        DemoSizes(**{**QUICK.__dict__, "frequencies": ()})
    with pytest.raises(ValueError, match="audit_canaries"):
        DemoSizes(**{**QUICK.__dict__, "audit_canaries": -1})
    no_audit = build_plan(Path("demo"), DemoSizes(**{**QUICK.__dict__, "audit_canaries": 0}), seed=0, report=Path("r.html"),
                          classifiers=False)
    assert [s.name for s in no_audit.stages] == ["inject", "train-nonprivate", "attack-nonprivate", "train-dp-eps8",
                                                 "attack-dp-eps8", "report"]
