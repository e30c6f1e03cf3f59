"""``dpaudit report`` refuses bad input with a one-line error and exit code 2, writing nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import sha256_file


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
    manifest["outputs"]["results.json"] = sha256_file(
        copy / "results.json"
    )  # a consistent directory of a future version
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


def test_a_privacy_record_of_another_version_or_damaged_is_one_line(tmp_path: Path, make_attack) -> None:
    """The report reads the train run's privacy.json through the one typed reader (as the attack does): a
    record of another schema or one that is not JSON, consistent with the hashes the attack recorded, is
    refused naming the file, never shown half-understood."""
    attack = make_attack(tmp_path, "old", mia=False, n_canaries=8, frequencies=(1,))
    privacy = tmp_path / "old-model" / "privacy.json"
    manifest_path = attack / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    out = tmp_path / "page.html"
    for text, needles in (
        (
            json.dumps({**json.loads(privacy.read_text()), "schema": "dpaudit.privacy/1"}),
            ["dpaudit.privacy/1", "retrain"],
        ),
        ('{"schema": "dpaudit.privacy/2", "trainer": ', ["not valid JSON", "rerun dpaudit train"]),
    ):
        privacy.write_text(text)
        manifest["inputs"][str(privacy)] = sha256_file(privacy)  # the attack ran on this very file
        manifest_path.write_text(json.dumps(manifest))
        _one_line_error(*_report(str(attack), "--out", str(out)), str(privacy), *needles)
        assert not out.exists()
