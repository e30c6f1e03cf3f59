"""Shared fixtures. Tests use tiny data made here; nothing is downloaded and shared/ is not needed."""

from __future__ import annotations

import os

# Two CPU devices for the data-parallel tests; must be set before jax is first imported.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
