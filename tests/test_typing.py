"""The packages that hold dpaudit's mathematics (accounting, audit, claim) type-check strictly and use no ``Any``.

``pyproject.toml``'s ``[tool.mypy]`` holds the settings: strict flags for these three packages, ``Any`` written
nowhere in them, dp_accounting read from its own annotations. CI's type check (``.ci/run``) runs mypy with them; the
suite checks that the settings and the step are there, and that no ``Any`` is written.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

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


#: --strict's per-module flags, and no ``Any`` written (``disallow_any_explicit``).
STRICT_FLAGS = (
    "disallow_any_generics",
    "disallow_subclassing_any",
    "disallow_untyped_calls",
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "check_untyped_defs",
    "disallow_untyped_decorators",
    "warn_unused_ignores",
    "warn_return_any",
    "strict_equality",
    "extra_checks",
    "disallow_any_explicit",
)


def test_ci_type_checks_the_strict_packages_with_the_strict_flags() -> None:
    """The type check itself is CI's step (``.ci/run``: ``mypy --config-file pyproject.toml dpaudit``, the whole
    package, these three strictly); running it here again cost the suite a cold mypy run (30-70 s on 2 cores). What
    the suite holds is that the step and its settings are there: the strict flags on exactly these packages."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    modules = {package.replace("/", ".") + ".*" for package in PACKAGES}
    strict = [o for o in config.get("overrides", []) if modules <= set(o.get("module", []))]
    assert strict, f"[tool.mypy] has no override for {sorted(modules)}"
    missing = [flag for flag in STRICT_FLAGS if strict[0].get(flag) is not True]
    assert not missing, f"the strict packages' override lacks {missing}"
    assert strict[0].get("implicit_reexport") is False
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^[^#\n]*\bmypy --config-file pyproject\.toml dpaudit\s*$", ci, re.MULTILINE), (
        ".ci/run no longer type-checks the package"
    )
    assert importlib.util.find_spec("mypy") is not None, f"mypy is not installed in {sys.executable}: {INSTALL}."


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
