"""The package spine: packaging, the lazy CLI group, and import hygiene."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import dpaudit
import dpaudit.canaries as canaries
import dpaudit.trainers as trainers
from dpaudit.cli import SUBCOMMANDS, cli

REPO = Path(__file__).resolve().parents[1]


def test_top_level_packages_are_this_repository():
    # The repository's canaries/ and trainers/ install as dpaudit.canaries and dpaudit.trainers: other
    # distributions ship top-level packages named `canaries`/`trainers`, and ours never take those names.
    for module in (dpaudit, canaries, trainers):
        assert Path(module.__file__).resolve().is_relative_to(REPO), module.__file__
    assert canaries.__name__ == "dpaudit.canaries" and trainers.__name__ == "dpaudit.trainers"


def test_the_distribution_installs_no_top_level_canaries_or_trainers():
    from importlib.metadata import distribution

    dist = distribution("dpaudit")
    entry_points = {ep.name: ep.value for ep in dist.entry_points if ep.group == "dpaudit.trainers"}
    assert entry_points and all(value.startswith("dpaudit.trainers.") for value in entry_points.values()), entry_points
    code = (
        "import importlib.util, sys; print(importlib.util.find_spec('canaries'), importlib.util.find_spec('trainers'))"
    )
    elsewhere = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert elsewhere.stdout.split() == ["None", "None"], elsewhere.stdout


def test_help_imports_neither_torch_nor_jax():
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from dpaudit.cli import cli\n"
        "r = CliRunner().invoke(cli, ['--help'])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in {'torch', 'jax', 'flax', 'transformers', 'tensorflow'})\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY=\n" in out, out


def test_help_lists_every_subcommand_and_version():
    runner = CliRunner()
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in SUBCOMMANDS:
        assert name in result.output
    version = runner.invoke(cli, ["--version"])
    assert version.exit_code == 0 and dpaudit.__version__ in version.output


def test_every_subcommand_help_ends_with_example():
    runner = CliRunner()
    for name in SUBCOMMANDS:
        result = runner.invoke(cli, [name, "--help"], catch_exceptions=False)
        assert result.exit_code == 0, (name, result.output)
        assert "Example: dpaudit" in result.output.strip().splitlines()[-1] or "Example: dpaudit" in result.output, name


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "dpaudit", "--version"], capture_output=True, text=True, check=True)
    assert dpaudit.__version__ in out.stdout


def test_unknown_trainer_is_a_one_line_usage_error(tmp_path):
    (tmp_path / "data").mkdir()
    result = CliRunner().invoke(
        cli, ["train", "--trainer", "nope", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "m")]
    )
    assert result.exit_code == 2
    assert "not a registered trainer" in result.output
    assert not (tmp_path / "m").exists()


def test_pyproject_lists_every_package_folder():
    """The packages are listed by hand (the folder mapping to dpaudit.canaries / dpaudit.trainers rules out
    setuptools' find): a new package folder missing from the list would be left out of the wheel."""
    import tomllib

    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set(setuptools["package-data"])  # folders of data only are packages too (tests/bad_inputs/test_installs.py)
    for root, prefix in (("dpaudit", "dpaudit"), ("canaries", "dpaudit.canaries"), ("trainers", "dpaudit.trainers")):
        for init in (REPO / root).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / root).parts
            found.add(".".join((prefix, *rel)))
    assert found == listed, (found - listed, listed - found)
