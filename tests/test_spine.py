"""The package spine: packaging, the lazy CLI group, and import hygiene."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

import canaries
import dpaudit
import trainers
from dpaudit.cli import SUBCOMMANDS, cli

REPO = Path(__file__).resolve().parents[1]


def test_top_level_packages_are_this_repository():
    # Other distributions ship packages named `canaries`/`trainers`; ours must win.
    for module in (dpaudit, canaries, trainers):
        assert Path(module.__file__).resolve().is_relative_to(REPO), module.__file__


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
    result = CliRunner().invoke(cli, ["train", "--trainer", "nope", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "m")])
    assert result.exit_code == 2
    assert "not a registered trainer" in result.output
    assert not (tmp_path / "m").exists()
