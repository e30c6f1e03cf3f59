"""Shared fixtures of the gradient-path tests of dpaudit's own torch clipping."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread(one_torch_thread):
    """Every test here runs on one torch thread (tests/trainers/conftest.py says why)."""
