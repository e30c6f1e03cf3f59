"""``dpaudit inject --template`` (hardening, round two; moved from tests/test_bad_inputs_round2.py): unknown
placeholders, stray braces, format-string escapes and no context are refused in one line, exit code 2, nothing
written; a context shared by every canary is warned about (and kept in the manifest).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli

SMALL = ["--corpus", "builtin:assistant", "--corpus-size", "60", "--frequencies", "1", "--per-frequency", "2"]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_line_error(args: list[str], *needles: str, cwd: Path | None = None) -> str:
    """Run ``dpaudit ARGS`` in this process and return its one error line, checking exit code 2 and the needles."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


TEMPLATE_CASES = [
    ("unknown placeholder", "{nmae}'s account number is {secret}", ["unknown placeholder {nmae}"]),
    ("stray brace", "{name's account number is {secret}", ["a stray brace"]),
    ("closing brace", "{name}'s pin} is {secret}", ["a stray brace"]),
    ("format escape", "{name} has {{secret}}", ["doubled braces"]),
    ("secret alone", "{secret}", ["gives digits:N canaries no context"]),
]


@pytest.mark.parametrize(("template", "needles"), [c[1:] for c in TEMPLATE_CASES], ids=[c[0] for c in TEMPLATE_CASES])
def test_bad_template_is_one_line_and_writes_nothing(tmp_path, template, needles):
    out = tmp_path / "out"
    one_line_error(["inject", *SMALL, "--out", str(out), "--template", template], f"--template {template!r}", *needles)
    assert tree(tmp_path) == []


def test_shared_context_template_is_warned_and_recorded(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["inject", *SMALL, "--out", str(out), "--template", "my pin is {secret}"])
    assert result.exit_code == 0, result.output
    assert "warning: --template 'my pin is {secret}' has no {name}: all 4 canaries share the context" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert "mixture of their secrets" in manifest["warnings"][0]


def test_literal_braces_and_phrase_template_are_kept():
    from dpaudit.canaries.generate import check_context, parse_template

    assert parse_template("pin {secret} {not a field}") == ("pin ", " {not a field}")
    check_context("{secret}", kind="phrases")  # a phrase keeps its own sentence around it
