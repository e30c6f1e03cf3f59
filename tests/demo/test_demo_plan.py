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
    assert names == [
        "inject",
        "inject-audit",
        "inject-classifier",
        "train-public",
        "train-clf-public",
        "train-nonprivate",
        "attack-nonprivate",
        "train-dp-eps8",
        "attack-dp-eps8",
        "train-nonprivate-audit",
        "attack-nonprivate-audit",
        "train-dp-eps8-audit",
        "attack-dp-eps8-audit",
        "train-clf-sgd",
        "attack-clf-sgd",
        "train-clf-dp-sgd",
        "attack-clf-dp-sgd",
        "train-clf-edp-sgd",
        "attack-clf-edp-sgd",
        "report",
    ]
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
    for mode in ("sgd", "dp-sgd", "edp-sgd"):
        assert trains[f"train-clf-{mode}"][trains[f"train-clf-{mode}"].index("--mode") + 1] == mode
    from dpaudit.corpus.assistant import INTENTS

    for name in (
        "train-clf-public",
        "train-clf-sgd",
        "train-clf-dp-sgd",
        "train-clf-edp-sgd",
    ):  # the label set is declared (public)
        assert trains[name][trains[name].index("--labels") + 1].split(",") == [intent.name for intent in INTENTS]
    # Public pretraining: the public models train on public.jsonl only, non-private, and every attacked
    # model of the canary picture starts from its public model (a stage input: a new public model retrains it).
    demo = tmp_path / "demo"
    for public, data, models in (
        ("train-public", "data", ("nonprivate", "dp-eps8")),
        ("train-clf-public", "data-classifier", ("clf-sgd", "clf-dp-sgd", "clf-edp-sgd")),
    ):
        args = trains[public]
        assert args[args.index("--data-split") + 1] == "public" and "--non-private" in args
        assert args[args.index("--data") + 1] == str(demo / data)
        for label in models:
            stage = next(s for s in plan.stages if s.name == f"train-{label}")
            assert stage.args[stage.args.index("--init-from") + 1] == str(
                demo / f"model-{public.removeprefix('train-')}"
            )
            assert stage.inputs == (demo / data, demo / f"model-{public.removeprefix('train-')}")
    inject = {s.name: s.args for s in plan.stages}
    assert inject["inject"][inject["inject"].index("--public-size") + 1] == str(sizes.public_size)
    assert sizes.public_size > sizes.corpus_size and sizes.classifier_public_size > sizes.classifier_corpus_size
    assert [s.name for s in plan.public_models] == ["train-public", "train-clf-public"]
    assert plan.stages[-1].inputs == tuple(m.attack.output for m in plan.models)
    # The one-run audit: coin-flip new-token canaries, the same two recipes, the canary attack (its one-run bound).
    stages = {s.name: s.args for s in plan.stages}
    audit = stages["inject-audit"]
    assert "--coin-flip" in audit and audit[audit.index("--design") + 1] == "new-tokens"
    assert audit[audit.index("--per-frequency") + 1] == str(sizes.audit_canaries) and sizes.audit_canaries >= 200
    for label in ("nonprivate", "dp-eps8"):  # the same recipe, from random weights (the start lacks the new tokens)
        args = stages[f"train-{label}"]
        start = args.index("--init-from")
        same = [
            a
            for i, a in enumerate(args)
            if i not in (start, start + 1)
            and a not in (str(tmp_path / "demo" / "data"), str(tmp_path / "demo" / f"model-{label}"))
        ]
        audit_args = [a for a in stages[f"train-{label}-audit"] if "audit" not in a]
        if "--warmup-steps" in same:  # the epsilon-8 fine-tuning recipe's warm-up: the audit trains from random weights
            at = same.index("--warmup-steps")
            del same[at : at + 2]
        # what the audit recipe sets apart: its steps, batch and learning-rate decay (fewer, larger batches at the
        # peak rate: what a black-box look at the last iterate needs); everything else is the masked LMs' recipe
        for option, value in (
            ("--steps", sizes.audit_steps or sizes.steps),
            ("--batch-size", sizes.audit_batch_size or sizes.batch_size),
            ("--lr-decay", sizes.audit_lr_decay),
        ):
            at = same.index(option) + 1
            assert audit_args[at] == str(value)
            same[at] = audit_args[at]
        rate = same.index("--learning-rate") + 1
        assert audit_args[:rate] + audit_args[rate + 1 :] == same[:rate] + same[rate + 1 :]
        assert audit_args[rate] == f"{sizes.learning_rate:g}" and "--init-from" not in audit_args
        attack = stages[f"attack-{label}-audit"]
        assert attack[attack.index("--attacks") + 1] == "canary" and str(tmp_path / "demo" / "data-audit") in attack


def test_without_classifiers_only_the_masked_lms_run(tmp_path):
    plan = build_plan(tmp_path, QUICK, seed=0, report=tmp_path / "r.html", classifiers=False)
    assert [m.label for m in plan.models] == ["nonprivate", "dp-eps8", "nonprivate-audit", "dp-eps8-audit"]
    assert [s.name for s in plan.public_models] == ["train-public"]
    assert not any("noise-seed" in a for s in plan.stages for a in s.args)  # OS entropy unless asked


def test_dp_steps_shorten_only_the_epsilon_8_masked_lm(tmp_path):
    """A test-sized plan's ``dp_steps``: the epsilon-8 masked LM runs (and is priced at) that many steps; the
    non-private one and the one-run audit's keep theirs; the demo's own sizes leave it unset."""
    from dpaudit.demo.cost import stage_work

    assert QUICK.dp_steps is None and FULL.dp_steps is None
    sizes = DemoSizes(**{**QUICK.__dict__, "dp_steps": 7})
    plan = build_plan(tmp_path, sizes, seed=0, report=tmp_path / "r.html", classifiers=False)
    stages = {s.name: s for s in plan.stages}
    steps = {name: s.args[s.args.index("--steps") + 1] for name, s in stages.items() if name.startswith("train-")}
    assert steps == {
        "train-public": str(QUICK.public_steps),
        "train-nonprivate": str(QUICK.steps),
        "train-dp-eps8": "7",
        "train-nonprivate-audit": str(QUICK.audit_steps),
        "train-dp-eps8-audit": str(QUICK.audit_steps),
    }
    assert stage_work(stages["train-dp-eps8"], sizes).units * QUICK.steps == (
        stage_work(stages["train-nonprivate"], sizes).units * 7
    )
    with pytest.raises(ValueError, match="dp_steps"):
        DemoSizes(**{**QUICK.__dict__, "dp_steps": 0})


def test_sizes_are_validated():
    with pytest.raises(ValueError, match="mask_prob"):
        DemoSizes(**{**QUICK.__dict__, "mask_prob": 1.5})
    with pytest.raises(ValueError, match="frequencies"):
        DemoSizes(**{**QUICK.__dict__, "frequencies": ()})
    with pytest.raises(ValueError, match="audit_canaries"):
        DemoSizes(**{**QUICK.__dict__, "audit_canaries": -1})
    no_audit = build_plan(
        Path("demo"),
        DemoSizes(**{**QUICK.__dict__, "audit_canaries": 0}),
        seed=0,
        report=Path("r.html"),
        classifiers=False,
    )
    assert [s.name for s in no_audit.stages] == [
        "inject",
        "train-public",
        "train-nonprivate",
        "attack-nonprivate",
        "train-dp-eps8",
        "attack-dp-eps8",
        "report",
    ]
    with pytest.raises(ValueError, match="public_steps needs public_size"):
        DemoSizes(**{**QUICK.__dict__, "public_size": 0})
    scratch = build_plan(
        Path("demo"),
        DemoSizes(**{**QUICK.__dict__, "public_steps": 0, "classifier_public_epochs": 0}),
        seed=0,
        report=Path("r.html"),
        classifiers=True,
    )
    assert not scratch.public_models and not any("--init-from" in s.args for s in scratch.stages)


@pytest.mark.parametrize("sizes", [FULL, QUICK], ids=["full", "quick"])
def test_causal_stages_train_gpt2_shaped_models_on_the_same_canaries(sizes, tmp_path):
    """--causal: a public causal LM on public.jsonl, then a non-private and an epsilon-8 one from it, on the causal
    LMs' own inject directory when the sizes give one (full: fewer members, enough held-out rows for a 1% false-positive
    rate, its own public rows) or else the masked LMs' (quick), 1x/10x/100x canaries, attacked with the causal
    attacks."""
    demo = tmp_path / "demo"
    plan = build_plan(demo, sizes, seed=3, report=tmp_path / "r.html", classifiers=False, causal=True)
    names = [s.name for s in plan.stages]
    assert names[-5:] == [
        "train-clm-nonprivate",
        "attack-clm-nonprivate",
        "train-clm-dp-eps8",
        "attack-clm-dp-eps8",
        "report",
    ]
    assert [s.name for s in plan.public_models] == ["train-public", "train-clm-public"]
    data = demo / ("data-causal" if sizes.causal_corpus_size else "data")
    data.mkdir(parents=True)
    stages = {s.name: s for s in plan.stages}
    if sizes.causal_corpus_size:
        inject = list(stages["inject-causal"].args)
        assert inject[inject.index("--out") + 1] == str(data)
        for option, value in (
            ("--corpus-size", sizes.causal_corpus_size),
            ("--heldout-size", sizes.causal_heldout_size),
            ("--per-frequency", sizes.causal_per_frequency),
            ("--public-size", sizes.public_size),
        ):
            assert inject[inject.index(option) + 1] == str(value)
        command = cli.get_command(click.Context(cli), "inject")
        with command.make_context("dpaudit inject", inject[1:], resilient_parsing=False):
            pass
    else:
        assert "inject-causal" not in stages
    for name in ("train-clm-public", "train-clm-nonprivate", "attack-clm-nonprivate", "train-clm-dp-eps8"):
        args = stages[name].args
        command = cli.get_command(click.Context(cli), args[0])
        with command.make_context(f"dpaudit {args[0]}", list(args[1:]), resilient_parsing=False):
            pass
        if args[0] == "train":
            assert args[args.index("--task") + 1] == "clm" and args[args.index("--data") + 1] == str(data)
    public = stages["train-clm-public"].args
    assert public[public.index("--data-split") + 1] == "public" and "--non-private" in public
    for label, mode in (("clm-nonprivate", "sgd"), ("clm-dp-eps8", "dp-sgd")):
        args = stages[f"train-{label}"].args
        assert args[args.index("--mode") + 1] == mode
        assert args[args.index("--init-from") + 1] == str(demo / "model-clm-public")
        assert stages[f"train-{label}"].inputs == (data, demo / "model-clm-public")
        attack = stages[f"attack-{label}"].args
        assert attack[attack.index("--attacks") + 1].split(",")[:2] == ["exposure", "extraction"]
    assert "--target-epsilon" in stages["train-clm-dp-eps8"].args
    assert "--target-epsilon" not in stages["train-clm-nonprivate"].args
    assert plan.stages[-1].inputs == tuple(m.attack.output for m in plan.models)
