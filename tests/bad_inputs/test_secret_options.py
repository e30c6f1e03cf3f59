"""Every way of passing the secret noise seed is redacted the same way wherever it is written, and refused the
same way where a fixed seed is invalid.

Before: ``dpaudit audit-trainer --set noise_seed=N`` wrote N in clear into ``manifest.json`` (the command line and
the settings), ``whitebox.json`` (``settings.set``) and ``index.html``, beside the trainer config's
``"noise_seed": "<given: secret>"``; and it slipped past the refusal of a fixed noise seed with ``--runs > 1``
(every run would draw the same noise and sampling: not the independent trials the pooled bound counts). The one
list of secrets is ``dpaudit.files.run_dirs.SECRET_FIELDS``; its redactors (``redact_command`` for command lines,
``redact_config`` for configs, settings and ``--set`` words) are what every manifest, the audit's files, the
report's provenance and the demo's stage records go through.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import REDACTED
from tests.bad_inputs import audit_fake

SECRET = "987654321987654321"


@pytest.fixture()
def fake(monkeypatch):
    return audit_fake.install(monkeypatch)


def _audit(out: Path, *args: str):
    return CliRunner().invoke(
        cli,
        [
            "audit-trainer",
            "--trainer",
            audit_fake.NAME,
            "--canaries",
            "100",
            "--steps",
            "2",
            "--seed",
            "2",
            *args,
            "--out",
            str(out),
        ],
    )


@pytest.mark.parametrize(
    "given", [["--noise-seed", "7"], ["--set", "noise_seed=7"], ["--set", "noise-seed=7"], ["--set= noise_seed = 7"]]
)
def test_a_fixed_noise_seed_with_several_runs_is_refused_however_it_is_given(fake, tmp_path, given):
    out = tmp_path / "audit"
    result = _audit(out, "--runs", "3", *given)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "with --runs 3: a fixed noise seed makes every run draw the same noise" in lines[0]
    assert ("--noise-seed" if given[0] == "--noise-seed" else "--set noise_seed") in lines[0]
    assert "7" not in lines[0].replace("--runs 3", "")  # the error never echoes the secret
    assert fake.trained == [] and list(tmp_path.iterdir()) == []


def test_the_option_and_set_together_are_refused(fake, tmp_path):
    result = _audit(tmp_path / "audit", "--noise-seed", "7", "--set", "noise_seed=8")
    assert result.exit_code == 2, result.output
    assert "--noise-seed and --set noise_seed both fix the trainer's secret noise seed; keep one." in result.output
    assert fake.trained == [] and list(tmp_path.iterdir()) == []


def test_an_audits_noise_seed_given_by_set_is_written_nowhere(fake, tmp_path, monkeypatch):
    """End to end through ``--set`` (the other spellings: the command-line test below; ``--noise-seed``:
    tests/whitebox/test_audit_trainer_cli.py)."""
    import html
    import sys

    out = tmp_path / "audit"
    given = ["--set", f"noise_seed={SECRET}"]
    argv = ["dpaudit", "audit-trainer", "--trainer", audit_fake.NAME, *given, "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)  # what the manifest records as the command line
    result = _audit(out, *given)
    assert result.exit_code == 0, result.output
    assert fake.seeds == [int(SECRET)]  # the trainer got the secret...
    for path in out.rglob("*"):  # ...and no file holds it
        assert path.is_dir() or SECRET not in path.read_text(encoding="utf-8"), path
    manifest = json.loads((out / "manifest.json").read_text())
    body = json.loads((out / "whitebox.json").read_text())
    assert body["config"]["noise_seed"] == REDACTED  # the trainer's config, as before
    assert body["settings"]["set"] == manifest["config"]["set"] == [f"noise_seed={REDACTED}"]
    assert body["settings"]["noise_seed"] == manifest["config"]["noise_seed"] == REDACTED
    assert manifest["command"][-4:-2] == ["--set", f"noise_seed={REDACTED}"]
    assert html.escape(f"noise_seed={REDACTED}") in (out / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "argv, shown",
    [
        (
            ["--set", "noise_seed=5", "--set", "mode=dp-sgd"],
            ["--set", f"noise_seed={REDACTED}", "--set", "mode=dp-sgd"],
        ),
        (["--set=noise-seed=5"], [f"--set=noise-seed={REDACTED}"]),
        (["--set", " noise_seed = 5"], ["--set", f" noise_seed ={REDACTED}"]),
        (["--noise-seed", "5", "--noise-seed=6"], ["--noise-seed", REDACTED, f"--noise-seed={REDACTED}"]),
        (["--set", "noise_multiplier=5", "--seed", "5"], ["--set", "noise_multiplier=5", "--seed", "5"]),
    ],
)
def test_every_spelling_is_redacted_from_a_command_line(argv, shown):
    from dpaudit.files.run_dirs import redact_command

    assert redact_command(["dpaudit", "audit-trainer", *argv]) == ["dpaudit", "audit-trainer", *shown]


def test_configs_settings_and_manifests_are_redacted_by_the_same_list():
    from dpaudit.files.run_dirs import build_manifest, redact_config

    settings = {
        "set": ["noise_seed=5", "mode=dp-sgd"],
        "trainer": {"noise_seed": 5, "noise_multiplier": 1.0},
        "seed": 3,
        "noise_seed": None,
    }
    assert redact_config(settings) == {
        "set": [f"noise_seed={REDACTED}", "mode=dp-sgd"],
        "trainer": {"noise_seed": REDACTED, "noise_multiplier": 1.0},
        "seed": 3,
        "noise_seed": None,
    }
    manifest = build_manifest(
        schema="dpaudit.test/1",
        config={"noise_seed": 5, "set": ["noise-seed=5"]},
        seed=3,
        inputs={},
        outputs={},
        command=["dpaudit", "x", "--set", "noise_seed=5"],
        extra={"settings": {"noise_seed": 5}},
    )
    assert "5" not in json.dumps({k: manifest[k] for k in ("config", "command", "settings")}).replace(
        "dpaudit.test", ""
    )


def test_the_reports_provenance_redacts_an_older_manifests_set_words():
    """A directory written before this change holds ``--set noise_seed=N`` in clear: the page never shows it."""
    from dpaudit.report.sections import stage_view

    stage = stage_view(
        "audit-trainer",
        {
            "schema": "dpaudit.whitebox/1",
            "command": ["dpaudit", "audit-trainer", "--set", f"noise_seed={SECRET}"],
            "config": {"set": [f"noise_seed={SECRET}"]},
            "seed": 1,
        },
    )
    assert SECRET not in stage.command and SECRET not in stage.config and REDACTED in stage.config


def test_the_demos_stage_records_redact_its_noise_seed():
    from dpaudit.demo.plan import Stage
    from dpaudit.demo.stages import _record

    stage = Stage(
        name="train",
        title="train",
        output=Path("runs/demo/model"),
        schema_prefix="dpaudit.train/",
        args=("train", "--trainer", "jax-bert", "--noise-seed", SECRET, "--seed", "0"),
    )
    assert _record(stage)["args"] == ["train", "--trainer", "jax-bert", "--noise-seed", REDACTED, "--seed", "0"]
