"""A registered-trainer stand-in for ``dpaudit audit-trainer`` tests: the numpy least-squares plug-in of
``tests/whitebox/linear_audit.py`` (steps cost microseconds) behind the Trainer surface the CLI uses (``Config``,
``tiny_config``, ``Plugin(data_dir, out_dir, config, seed=...)``), so that an audit of a few runs takes a second
or two. :func:`install` makes ``load_trainer("fake-audit")`` return it (in this process: the CLI and the inline
fleet engine); a run can be made to fail as it starts (Ctrl-C, a worker that died) by naming its run directory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from dpaudit.training.config_types import redacted_dict
from tests.whitebox.linear_audit import LinearAuditPlugin

NAME = "fake-audit"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FakeConfig:
    """The audit's plan fields (audit_config sets them) and the secret noise seed."""

    target_epsilon: float = 4.0
    noise_multiplier: float | None = None
    noise_seed: int | None = None
    batch_size: int = 32
    steps: int = 4

    def to_dict(self) -> dict[str, Any]:
        return redacted_dict(self)


class FakePlugin(LinearAuditPlugin):
    """The linear audit plug-in built from a :class:`FakeConfig`; records the run directories it trains in
    :attr:`trained` and raises :attr:`fail_with` for the run directory named :attr:`fail_at`."""

    trained: ClassVar[list[str]] = []
    fail_at: ClassVar[str | None] = None
    fail_with: ClassVar[BaseException | None] = None
    seeds: ClassVar[list[int | None]] = []

    def __init__(self, data_dir: Path, out_dir: Path, config: FakeConfig, *, seed: int = 0) -> None:
        super().__init__(
            target_epsilon=config.target_epsilon,
            steps=config.steps,
            batch=config.batch_size,
            noise_seed=config.noise_seed,
            seed=seed,
        )
        name = Path(out_dir).name
        if name.startswith("run-"):
            if name == FakePlugin.fail_at and FakePlugin.fail_with is not None:
                raise FakePlugin.fail_with
            FakePlugin.trained.append(name)
            FakePlugin.seeds.append(config.noise_seed)


class FakeTrainer:
    name = NAME
    Config = FakeConfig
    Plugin = FakePlugin

    def train(self, data_dir: Path, out_dir: Path, config: Any, *, seed: int) -> Any:  # pragma: no cover
        raise NotImplementedError("the audit trains through Plugin")

    def tiny_config(self, **overrides: Any) -> FakeConfig:
        return FakeConfig(**overrides)


def install(monkeypatch: Any) -> type[FakePlugin]:
    """Make ``--trainer fake-audit`` load :class:`FakeTrainer` in this process; returns the plug-in class, its
    records cleared and no failure set."""
    import dpaudit.training.api as api

    real = api.load_trainer
    monkeypatch.setattr(api, "load_trainer", lambda name: FakeTrainer() if name == NAME else real(name))
    FakePlugin.trained, FakePlugin.seeds = [], []
    monkeypatch.setattr(FakePlugin, "fail_at", None)
    monkeypatch.setattr(FakePlugin, "fail_with", None)
    return FakePlugin
