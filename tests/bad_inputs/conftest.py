"""Fixtures of the bad-input suites."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def scratch():
    """A folder for a module's cases, removed at its end (read-only folders made writable first)."""
    base = Path(tempfile.mkdtemp(prefix="dpaudit-bad-inputs-"))
    base.chmod(0o755)
    yield base
    for path in base.rglob("*"):  # undo read-only folders before removing
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    shutil.rmtree(base, ignore_errors=True)
