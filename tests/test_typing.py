"""The packages that hold dpaudit's mathematics (accounting, audit, claim) type-check strictly and use no ``Any``.

``pyproject.toml``'s ``[tool.mypy]`` holds the settings: strict flags for these three packages, ``Any`` written
nowhere in them, dp_accounting read from its own annotations. mypy runs on them alone (``--follow-imports=silent``:
the modules they import are read, not reported), with its cache in a temporary folder (a cold run, ~30 s).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dpaudit/accounting", "dpaudit/audit", "dpaudit/claim")
INSTALL = "pip install -e '.[test]' -c constraints.txt (mypy is in the test extra, pinned in constraints.txt)"

#: ``Any`` as a type: imported, ``typing.Any``, after ``:``, ``->``, ``[``, ``|`` or ``,`` (inside brackets), or
#: before ``]`` or ``|``. The word in prose ("Any object that ...") is not matched.
_ANY = re.compile(
    r"^\s*from\s+typing(?:_extensions)?\s+import\b.*\bAny\b"
    r"|\btyping(?:_extensions)?\.Any\b"
    r"|(?:->|:|\[|\||,)\s*Any\b"
    r"|\bAny\s*[\]|]",
    re.MULTILINE,
)


def _sources() -> list[Path]:
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert len(files) > 20, f"the packages {PACKAGES} were not found under {ROOT}"
    return files


def test_the_strict_packages_pass_mypy(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.fail(f"mypy is not installed in {sys.executable}: {INSTALL}.")
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--follow-imports=silent",
        # the overrides for modules only the rest of the core imports are unused here; CI's check of the whole
        # package (mypy --config-file pyproject.toml dpaudit) reports a stale one
        "--no-warn-unused-configs",
        "--cache-dir",
        str(tmp_path / "mypy_cache"),
        "--no-color-output",
        "--no-error-summary",
        *PACKAGES,
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    report = (result.stdout + result.stderr).strip()
    assert result.returncode == 0, f"mypy {' '.join(PACKAGES)} failed (exit {result.returncode}):\n{report}"
    assert "Unrecognized option" not in report, report  # a mypy too old or a typo in [tool.mypy]


def test_the_strict_packages_write_no_any() -> None:
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT)
        for match in _ANY.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{where}:{line}: {text.splitlines()[line - 1].strip()}")
        for node in ast.walk(ast.parse(text, filename=str(path))):  # from typing import (..., Any, ...) over lines
            if (
                isinstance(node, ast.ImportFrom)
                and node.module in ("typing", "typing_extensions")
                and any(alias.name == "Any" for alias in node.names)
            ):
                found.append(f"{where}:{node.lineno}: imports Any")
    assert not found, "Any in the strictly typed packages (use a real type, object, or a Protocol):\n" + "\n".join(
        sorted(set(found))
    )
