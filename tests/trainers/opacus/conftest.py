"""Shared fixtures of the opacus tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every opacus test runs on one torch thread (tests/trainers/conftest.py says why)."""
