"""Installs that are not the development one: a base install without torch or jax, a wheel, a clean build.

A missing extra is simulated, never uninstalled: the child process gets a ``sitecustomize`` whose meta-path finder
refuses to find the blocked modules (``import torch`` raises ``ModuleNotFoundError`` as in an install without it).
Every command that needs an extra names it in one line at once, before any work, with the command that installs
only that extra for this installation (``dpaudit.common.extras``; README, "Which extra each command needs").
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from fnmatch import fnmatch
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FOLDERS = {"dpaudit": "dpaudit", "canaries": "dpaudit.canaries", "trainers": "dpaudit.trainers"}

_BLOCKER = '''
import os, sys
_BLOCKED = tuple(m for m in os.environ.get("DPAUDIT_TEST_BLOCK", "").split(",") if m)
class _Blocker:
    """Finds nothing for a blocked top-level module: its import fails as if it were not installed."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Blocker())
'''


@pytest.fixture(scope="module")
def blocker(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("blocker")
    (folder / "sitecustomize.py").write_text(_BLOCKER, encoding="utf-8")
    return folder


def _dpaudit(blocker: Path, blocked: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DPAUDIT_TEST_BLOCK": blocked,
        "PYTHONPATH": os.pathsep.join([str(blocker), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }
    return subprocess.run(
        [sys.executable, "-m", "dpaudit", *args], capture_output=True, text=True, timeout=120, cwd=cwd, env=env
    )


def _data(tmp_path: Path) -> Path:
    """An inject directory of the base install (inject needs no extra)."""
    data = tmp_path / "data"
    from click.testing import CliRunner

    from dpaudit.cli import cli

    result = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "60",
            "--frequencies",
            "1",
            "--per-frequency",
            "2",
            "--out",
            str(data),
        ],
    )
    assert result.exit_code == 0, result.output
    return data


@pytest.mark.parametrize(
    ("blocked", "args", "what", "extra"),
    [
        ("torch", ["attack", "--model", "M", "--data", "D", "--out", "OUT"], "dpaudit attack", "torch"),
        ("transformers", ["attack", "--model", "M", "--data", "D", "--out", "OUT"], "dpaudit attack", "torch"),
        (
            "torch",
            ["train", "--trainer", "edp-sgd", "--data", "D", "--out", "OUT", "--non-private"],
            "--trainer edp-sgd",
            "torch",
        ),
        (
            "torch",
            ["train", "--trainer", "rgp", "--data", "D", "--out", "OUT", "--target-epsilon", "8"],
            "--trainer rgp",
            "torch",
        ),
        (
            "jax",
            ["train", "--trainer", "jax-bert", "--data", "D", "--out", "OUT", "--non-private"],
            "--trainer jax-bert",
            "jax",
        ),
        ("torch", ["audit-trainer", "--trainer", "edp-sgd", "--out", "OUT"], "--trainer edp-sgd", "torch"),
        ("jax", ["audit-trainer", "--trainer", "jax-bert", "--out", "OUT"], "--trainer jax-bert", "jax"),
        ("jax", ["demo", "--out", "OUT", "--report", "OUT.html"], "dpaudit demo", "jax"),
        (
            "ray",
            ["audit-trainer", "--trainer", "edp-sgd", "--out", "OUT", "--ray-address", "127.0.0.1:6379"],
            "--ray-address 127.0.0.1:6379",
            "fleet",
        ),
    ],
    ids=[
        "attack-torch",
        "attack-transformers",
        "train-edp-sgd",
        "train-rgp",
        "train-jax-bert",
        "audit-edp-sgd",
        "audit-jax-bert",
        "demo",
        "ray-address",
    ],
)
def test_missing_extra_is_one_line_at_once(blocker, tmp_path, blocked, args, what, extra):
    data = _data(tmp_path)
    args = [
        str(data)
        if a == "D"
        else str(tmp_path / "model")
        if a == "M"
        else str(tmp_path / a)
        if a.startswith("OUT")
        else a
        for a in args
    ]
    before = sorted(p.name for p in tmp_path.iterdir())
    started = time.monotonic()
    proc = _dpaudit(blocker, blocked, args, cwd=tmp_path)
    assert time.monotonic() - started < 30  # no work before the check (attack used to fail after 40 s)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"Error: {what} needs the {extra} extra ({blocked} is not installed): pip install "), (
        lines
    )
    assert lines[0].endswith(f"[{extra}]'."), lines  # only the extra this command needs
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_base_install_commands_need_no_extra(blocker, tmp_path):
    """inject, account and report run with torch, transformers, jax and ray all missing."""
    blocked = "torch,transformers,jax,flax,optax,ray"
    proc = _dpaudit(
        blocker,
        blocked,
        [
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "60",
            "--frequencies",
            "1",
            "--per-frequency",
            "2",
            "--out",
            str(tmp_path / "data"),
        ],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    proc = _dpaudit(
        blocker, blocked, ["account", "-N", "1000", "-B", "10", "-S", "100", "--noise-multiplier", "1"], cwd=tmp_path
    )
    assert proc.returncode == 0 and "epsilon (PLD)" in proc.stdout, proc.stderr


def test_install_command_follows_the_installation(tmp_path, monkeypatch):
    """A wheel user is told ``pip install 'dpaudit[torch]'``; a source checkout ``pip install -e`` of the checkout
    (``.`` when run there). Only the extras named."""
    import dpaudit.common.extras as extras

    monkeypatch.chdir(REPO)
    assert extras.install_command(["torch"]) == "pip install -e '.[torch]'"
    monkeypatch.chdir(tmp_path)
    assert extras.install_command(["jax", "torch"]) == f"pip install -e '{REPO}[jax,torch]'"
    monkeypatch.setattr(extras, "_ROOT", tmp_path / "site-packages")  # a wheel: no pyproject.toml beside dpaudit/
    assert extras.install_command(["torch"]) == "pip install 'dpaudit[torch]'"
    message = extras.missing_extra_message("dpaudit attack", ["torch"], ["torch"])
    assert message == "dpaudit attack needs the torch extra (torch is not installed): pip install 'dpaudit[torch]'."


def test_attack_needs_the_targets_trainer_extra_only_when_it_trains(tmp_path):
    from dpaudit.cli.params import attack_extras

    model = tmp_path / "model"
    model.mkdir()
    (model / "manifest.json").write_text(json.dumps({"config": {"trainer": "jax-bert"}}), encoding="utf-8")
    kw = {"shadow_trainer": None, "shadow_dirs": (), "reference_model": None}
    assert attack_extras(model, "exposure,reconstruction,loss", **kw) == ("torch",)
    assert attack_extras(model, "exposure,shadow", **kw) == ("torch", "jax")
    assert attack_extras(model, "all", **kw) == ("torch", "jax")
    assert attack_extras(model, "lira", **{**kw, "shadow_dirs": ("a", "b")}) == ("torch",)
    assert attack_extras(model, "ref", **{**kw, "reference_model": "r"}) == ("torch",)
    assert attack_extras(model, "rmia", **{**kw, "shadow_trainer": "edp-sgd"}) == ("torch",)
    assert attack_extras(tmp_path / "elsewhere", "shadow", **kw) == ("torch",)


# -- packaging ---------------------------------------------------------------------------------------------------


def _setuptools_config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _shipped_data_files() -> list[tuple[str, str]]:
    """(dotted package of its folder, file name) of every file that is not Python under the package folders."""
    out = []
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix not in (".py", ".pyc") and "__pycache__" not in path.parts:
                rel = path.parent.relative_to(REPO / folder).parts
                out.append((".".join((package, *rel)), path.name))
    return out


def test_every_data_file_is_in_a_declared_package():
    """setuptools installs a file only through a package that names its folder, and warns "Package would be ignored"
    for a folder of data that is not one (``python -m build`` printed it for dpaudit.canaries.data, dpaudit.data
    and dpaudit.report.templates)."""
    config = _setuptools_config()
    files = _shipped_data_files()
    assert files, "no package data found"
    for package, name in files:
        assert package in config["packages"], f"{package} (holding {name}) is not in [tool.setuptools] packages"
        globs = config.get("package-data", {}).get(package, [])
        assert any(fnmatch(name, g) for g in globs), f"{package}/{name} matches no package-data glob of {package}"


def test_wheel_builds_without_warnings_and_ships_the_data(tmp_path):
    """setuptools' own build of a wheel and an sdist from a copy of the sources (offline, no isolation): no
    "absent from the packages configuration" warning, and every data file in the wheel."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    code = "import setuptools.build_meta as b, sys; d = sys.argv[1]; print(b.build_sdist(d)); print(b.build_wheel(d))"
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c", code, str(tmp_path / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert "absent from the `packages` configuration" not in output, output[-3000:]
    assert "would be ignored" not in output, output[-3000:]
    wheel = next((tmp_path / "dist").glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for package, name in _shipped_data_files():
        assert "/".join([*package.split("."), name]) in names, (package, name)
