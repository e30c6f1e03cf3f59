"""``dpaudit report`` refuses bad input with a one-line error and exit code 2, writing nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.rundir import sha256_file


def _report(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["report", *args])
    return result.exit_code, result.output


def _one_line_error(code: int, output: str, *needles: str) -> None:
    assert code == 2, output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), output
    for needle in needles:
        assert needle in lines[0], output


def _copy(attack_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(attack_dir, tmp_path / "copy"))


def test_not_an_attack_directory(tmp_path: Path, attack_dir: Path) -> None:
    out = tmp_path / "page.html"
    _one_line_error(*_report(str(tmp_path), "--out", str(out)), "manifest.json is missing")
    _one_line_error(*_report(str(tmp_path / "nope"), "--out", str(out)), "is not a directory")
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "manifest.json").write_text(json.dumps({"schema": "dpaudit.inject/1", "outputs": {}}))
    _one_line_error(*_report(str(inject), "--out", str(out)), "not an attack directory")
    assert not out.exists()


def test_changed_file_is_refused(tmp_path: Path, attack_dir: Path) -> None:
    copy = _copy(attack_dir, tmp_path)
    path = copy / "scores" / "canaries.jsonl"
    path.write_text(path.read_text().replace('"frequency": 16', '"frequency": 17', 1))
    out = tmp_path / "page.html"
    _one_line_error(*_report(str(copy), "--out", str(out)), "canaries.jsonl was changed")
    assert not out.exists()


def test_unknown_results_schema_is_refused(tmp_path: Path, attack_dir: Path) -> None:
    copy = _copy(attack_dir, tmp_path)
    results = json.loads((copy / "results.json").read_text())
    results["schema"] = "dpaudit.attack/99"
    (copy / "results.json").write_text(json.dumps(results))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["outputs"]["results.json"] = sha256_file(copy / "results.json")  # a consistent directory of a future version
    (copy / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "page.html"
    _one_line_error(*_report(str(copy), "--out", str(out)), "dpaudit.attack/99", "dpaudit.attack/1")
    assert not out.exists()


def test_changed_upstream_telemetry_is_refused(tmp_path: Path, make_attack) -> None:
    run = make_attack(tmp_path, "stale")
    metrics = tmp_path / "stale-model" / "metrics.jsonl"
    metrics.write_text(metrics.read_text() + '{"step": 999, "loss": 0.1}\n')
    out = tmp_path / "page.html"
    _one_line_error(*_report(str(run), "--out", str(out)), "metrics.jsonl changed")
    assert not out.exists()
    metrics.unlink()  # gone (e.g. rendered on another machine): shown as unavailable, not an error
    code, output = _report(str(run), "--out", str(out))
    assert code == 0, output
    assert "No training telemetry for" in out.read_text(encoding="utf-8")
