"""The registered trainer object both torch trainers share: lock ownership, ``train`` and ``tiny_config``.

A trainer module subclasses :class:`TorchTrainer` with its ``name``, its ``Config`` class, its run
class (a :class:`~trainers.torch_common.loop.TorchPlugin` subclass) and the settings of its smallest
run; what differs between trainers lives in those, not here (docs/trainers.md, "The trainer contract";
:mod:`dpaudit.training.api`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from dpaudit.trainers.torch_common import distributed
from dpaudit.training.api import TrainResult

__all__ = ["TorchTrainer"]


class TorchTrainer:
    """Base of the torch trainers' plugin classes (``edp-sgd``, ``rgp``)."""

    name: ClassVar[str]
    Config: ClassVar[type]
    #: The :class:`~dpaudit.training.TrainerPlugin` class this trainer runs on the core skeleton:
    #: ``Plugin(data_dir, out_dir, config, seed=...).execute()`` trains and returns the result.
    Plugin: ClassVar[type]
    #: Settings of the contract suite's smallest private run (:meth:`tiny_config`).
    TINY_SETTINGS: ClassVar[Mapping[str, Any]]

    def writes_run_dir(self) -> bool:
        """Only process 0 of a torch.distributed run writes the run directory, so only it takes the lock."""
        return distributed.env_rank() == 0

    def train(self, data_dir: Path, out_dir: Path, config: Any, *, seed: int) -> TrainResult:
        """Train on an inject run directory and write (or resume) the train run directory ``out_dir``.

        Raises:
            UserInputError: bad data or options, a plan that cannot fit the budget, or an ``out_dir``
                holding a different run; raised before anything is written.
        """
        if not isinstance(config, self.Config):
            raise TypeError(f"config must be an {self.Config.__name__}, got {type(config).__name__}.")
        from dpaudit.scoring.threads import apply_torch_threads

        apply_torch_threads()  # the cores actually free, unless OMP_NUM_THREADS / DPAUDIT_THREADS says
        return self.Plugin(Path(data_dir), Path(out_dir), config, seed=int(seed)).execute()

    def tiny_config(self, **overrides: Any) -> Any:
        """The smallest private run: :attr:`TINY_SETTINGS` with ``overrides``."""
        return self.Config(**{**self.TINY_SETTINGS, **overrides})
