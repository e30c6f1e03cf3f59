"""Attacks as plug-ins: options generated from their Configs, the entry-point group, a third-party attack.

``dpaudit attack``'s options are generated from :class:`dpaudit.attacks.options.RunOptions` and each registered
attack's ``Config`` (as ``dpaudit train``'s are from a trainer's); attacks register under the entry-point group
``dpaudit.attacks``; an option of an attack that does not run is refused in one line.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.attacks.registry import (
    ENTRY_POINT_GROUP,
    AttackOptions,
    available_attacks,
    option_sections,
    prop,
    registered_classes,
)
from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError

REPO = Path(__file__).resolve().parents[2]

#: Every option of ``dpaudit attack`` when its list was written by hand, with its default (None: none shown): the
#: generated command keeps each name and default.
HAND_WRITTEN = {
    "--batch-size": 32,
    "--reveal": 0,
    "--top-k": 10,
    "--seed": 0,
    "--shadow-models": 4,
    "--attack-model": "logreg",
    "--reference-model": None,
    "--max-shadow-minutes": None,
    "--shadow-cache": None,
    "--workers": None,
    "--ray-address": None,
    "--shadow-trainer": None,
    "--shadow-config": None,
    "--shadow-dirs": None,
    "--claimed-epsilon": None,
    "--claimed-delta": None,
    "--claimed-from-opacus": None,
    "--fpr": None,
    "--mia-examples": None,
    "--lira-global-variance": False,
    "--lira-variance": "auto",
    "--lira-offline": "one-sided",
    "--min-k": 0.2,
    "--beam-width": 5,
    "--exposure-limit": 10**5,
    "--exposure-samples": 1000,
    "--blind-baseline": True,
    # added with the generated command
    "--mia-sample-seed": None,
    "--near-duplicates": "exclude",
    "--near-duplicate-threshold": 0.8,
}
#: Fields of the Python API that have no option (a dict, or knobs the command line never offered).
PYTHON_ONLY = {"level", "tolerance", "shadow_overrides"}


def _generated() -> dict[str, object]:
    from dpaudit.cli.params import config_options

    return {
        o.opts[0]: o
        for cls, fields, _ in option_sections(registered_classes())
        for o in config_options(cls, fields=fields)
    }


def test_every_config_field_is_an_option_and_every_hand_written_option_kept_its_name_and_default():
    generated = _generated()
    fields = {
        f.name: f
        for cls, names, _ in option_sections(registered_classes())
        for f in dataclasses.fields(cls)
        if f.name in names
    }
    assert {f.name for f in fields.values() if f.metadata.get("python_only")} == PYTHON_ONLY
    assert {o.name for o in generated.values()} == set(fields) - PYTHON_ONLY  # one option per field, none other
    assert set(generated) == set(HAND_WRITTEN)
    for flag, default in HAND_WRITTEN.items():
        option = generated[flag]
        assert (option.default if not option.multiple else None) == default, flag
        assert fields[option.name].default == default, flag  # the Config's default is the option's
    assert generated["--blind-baseline"].secondary_opts == ["--no-blind-baseline"]
    assert (
        generated["--lira-global-variance"].hidden
        and generated["--fpr"].multiple
        and generated["--shadow-dirs"].multiple
    )
    help_text = CliRunner().invoke(cli, ["attack", "--attacks", "all", "--help"], terminal_width=200).output
    for flag, option in generated.items():
        assert option.hidden or flag in help_text, flag


def test_each_attacks_help_shows_its_options_and_the_shared_ones():
    def shown(*args: str) -> str:
        result = CliRunner().invoke(cli, ["attack", *args, "--help"], terminal_width=200)
        assert result.exit_code == 0, result.output
        return result.output.split("\nOptions:\n", 1)[1]  # the option sections and the epilog, not the description

    lira = shown("--attacks", "lira")
    for flag in (
        "--lira-variance",
        "--lira-offline",
        "--shadow-models",
        "--shadow-dirs",
        "--mia-examples",
        "--batch-size",
        "--seed",
        "--fpr",
        "--claimed-epsilon",
    ):
        assert flag in lira, flag
    for flag in ("--min-k", "--beam-width", "--exposure-limit", "--reveal", "--attack-model", "--reference-model"):
        assert flag not in lira, flag
    assert "LiRA's options (lira):" in lira and "Shadow and reference models (shadow, ref, lira, rmia):" in lira
    min_k = shown("--attacks=min-k")
    assert "--min-k" in min_k and "--blind-baseline" in min_k and "--shadow-models" not in min_k
    default = shown()  # the defaults and what they become: extraction on a causal LM, the canary attack's audit
    for flag in ("--reveal", "--top-k", "--beam-width", "--exposure-limit", "--exposure-samples"):
        assert flag in default, flag
    assert "--shadow-models" not in default and "Add --attacks NAME --help" in default
    assert "Example: dpaudit attack" in default.strip().splitlines()[-1]


def test_attack_help_imports_no_framework():
    code = textwrap.dedent("""
        import sys
        from click.testing import CliRunner
        from dpaudit.cli import cli
        for args in (["--help"], ["attack", "--help"], ["attack", "--attacks", "all", "--help"]):
            r = CliRunner().invoke(cli, args)
            assert r.exit_code == 0, r.output
        print(",".join(sorted({m.split(".")[0] for m in sys.modules} & {"torch", "jax", "flax", "transformers", "sklearn"})))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "", out.stdout


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (
            ["--attacks", "lira", "--beam-width", "3"],
            [
                "--beam-width is an option of --attacks extraction, which --attacks lira does not run",
                "add extraction to --attacks, or remove --beam-width",
            ],
        ),
        (
            ["--shadow-models=2"],
            [
                "--shadow-models is an option of --attacks shadow, ref, lira, rmia",
                "exposure,reconstruction (the default)",
            ],
        ),
        (
            ["--attacks", "exposure", "--no-blind-baseline"],
            ["--blind-baseline is an option of --attacks loss,", "which --attacks exposure does not run"],
        ),
    ],
)
def test_an_option_of_an_attack_that_does_not_run_is_refused_in_one_line(tmp_path, args, needles):
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli, ["attack", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--out", str(out), *args]
    )
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("Error: "), result.output
    for needle in needles:
        assert needle in result.output, (needle, result.output)
    assert not out.exists()


def test_the_python_api_refuses_the_same_way(tmp_path):
    import dpaudit

    with pytest.raises(UserInputError, match="^--beam-width is an option of --attacks extraction"):
        dpaudit.attack(tmp_path / "m", tmp_path / "d", ["loss"], beam_width=3)
    with pytest.raises(UserInputError, match="^bogus: not an option of dpaudit attack"):
        dpaudit.attack(tmp_path / "m", tmp_path / "d", ["loss"], bogus=3)
    with pytest.raises(TypeError, match="unknown attack option"):
        AttackOptions(bogus=3)


def test_options_are_read_by_name_and_kept_flat_as_the_manifest_records_them():
    options = AttackOptions(min_k=0.5, shadow_models=2, claimed_epsilon=8, claimed_delta=1e-5, fprs=[0.01])
    assert (options.min_k, options.shadow_models, options.claimed_epsilon, options.fprs) == (0.5, 2, 8.0, (0.01,))
    lira = registered_classes()[[c.name for c in registered_classes()].index("lira")]
    assert options.of(lira).shadow_models == 2 and options.of(lira).lira_variance == "auto"
    record = options.to_dict()
    assert len(record) == 33 and record["min_k"] == 0.5 and record["exposure_limit"] == 10**5
    with pytest.raises(ValueError, match="--shadow-models must be an integer"):
        AttackOptions(shadow_models="4")


def test_the_entry_point_group_lists_the_built_in_attacks_and_their_properties_are_class_attributes():
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    installed = {name: ep.value for name, ep in available_attacks().items()}
    assert installed == declared  # the installed metadata is pyproject's (reinstall with `pip install -e .` if not)
    by_name = {c.name: c for c in registered_classes()}
    assert {n for n, c in by_name.items() if prop(c, "membership")} == {
        "loss",
        "shadow",
        "ref",
        "lira",
        "rmia",
        "zlib",
        "min-k",
        "min-k++",
        "base-ratio",
        "error-zone",
        "min-k++-base",
    }
    assert {n for n, c in by_name.items() if prop(c, "default_when_able")} == {
        "base-ratio",
        "error-zone",
        "min-k++-base",
    }
    assert [n for n, c in by_name.items() if prop(c, "baseline")] == ["blind"]
    assert {n for n, c in by_name.items() if prop(c, "scores_canaries")} == {
        "exposure",
        "reconstruction",
        "extraction",
        "canary",
    }
    from types import SimpleNamespace

    trains = SimpleNamespace(shadow_dirs=(), reference_model=None)
    assert {n for n, c in by_name.items() if prop(c, "trains_models")(trains)} == {"shadow", "ref", "lira", "rmia"}
    shared = {prop(by_name[n], "check").__func__ for n in ("shadow", "ref", "lira", "rmia")}
    assert len(shared) == 1  # one check for every shadow-trained attack


#: A third-party attack, its own module and distribution: written against dpaudit's attack surface only.
PLUGIN = '''
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from dpaudit.attacks.mia import MembershipAttack, audit_tasks, membership_tasks
from dpaudit.attacks.options import MembershipOptions, option
from dpaudit.attacks.results import MiaResult, register_result


@register_result
@dataclass(frozen=True, kw_only=True)
class LengthLossResult(MiaResult):
    attack: ClassVar[str] = "length-loss"
    reference: ClassVar[str] = "a test plug-in"


@dataclass(frozen=True, kw_only=True)
class LengthLossConfig(MembershipOptions):
    """The length-loss attack's options."""

    length_weight: float = field(default=0.0, metadata=option("Weight of the text's length in the score.", min=0))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.length_weight < 0:
            raise ValueError(f"--length-weight must be >= 0, got {self.length_weight}.")


class LengthLossAttack(MembershipAttack):
    """score = -loss + length_weight x characters."""

    name: ClassVar[str] = "length-loss"
    model_kinds: ClassVar[frozenset[str]] = frozenset({"masked-lm", "classifier", "causal-lm"})
    Config: ClassVar[type] = LengthLossConfig

    def run(self, context):
        weight, seed = context.options.length_weight, context.options.seed
        scored = [(task, -np.asarray(context.scorer.example_losses(task.texts, task.labels, seed=seed))
                   + weight * np.asarray([len(t) for t in task.texts], dtype=float))
                  for task in membership_tasks(context)]
        return audit_tasks(context, self.name, scored, parameters={"score": "-loss + w x length", "length_weight": weight},
                           result_class=LengthLossResult)
'''


def test_a_third_party_attack_plugs_in_through_the_entry_point_group(tiny_causal_dir, data_dir, tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "length_loss_attack-0.1.dist-info").mkdir(parents=True)
    (site / "length_loss_attack.py").write_text(PLUGIN, encoding="utf-8")
    (site / "length_loss_attack-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: length-loss-attack\nVersion: 0.1\n", encoding="utf-8"
    )
    (site / "length_loss_attack-0.1.dist-info" / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\nlength-loss = length_loss_attack:LengthLossAttack\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(site))  # as `pip install` of its package would
    assert "length-loss" in available_attacks()

    runner = CliRunner()
    shown = runner.invoke(cli, ["attack", "--attacks", "length-loss", "--help"], terminal_width=200).output
    shown = shown.split("\nOptions:\n", 1)[1]
    assert "The length-loss attack's options (length-loss):" in shown and "--length-weight" in shown
    assert "--mia-examples" in shown and "--beam-width" not in shown
    out = tmp_path / "attack"
    result = runner.invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--attacks",
            "length-loss",
            "--length-weight",
            "0.5",
            "--no-blind-baseline",
        ],
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [a["attack"] for a in results["attacks"]] == ["length-loss"]
    assert results["attacks"][0]["parameters"]["length_weight"] == 0.5
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["config"]["length_weight"] == 0.5
    again = runner.invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--attacks",
            "length-loss",
            "--length-weight",
            "0.5",
            "--no-blind-baseline",
        ],
    )
    assert (
        again.exit_code == 0 and "holds the results of this very command" in again.output
    )  # read back, its type known
    refused = runner.invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(tmp_path / "other"),
            "--attacks",
            "loss",
            "--length-weight",
            "1",
        ],
    )
    assert refused.exit_code == 2 and "--length-weight is an option of --attacks length-loss" in refused.output
