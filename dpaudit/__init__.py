"""dpaudit: measure memorization in language models and train them with differential privacy.

The core package holds everything that is framework-neutral: the command line, the run-directory
formats shared by every stage, privacy accounting, scoring, attacks and the audit report. Trainers
live in the separate ``trainers`` package and are reached only through the ``dpaudit.trainers``
entry-point group, so that importing :mod:`dpaudit` never imports torch or jax.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "attack"]


def __getattr__(name: str):
    # ``dpaudit.attack(model, data, attacks=[...])`` for notebooks, imported on first use so that
    # ``import dpaudit`` stays light (no torch, no scipy).
    if name == "attack":
        from dpaudit.stages.attack import attack

        return attack
    raise AttributeError(f"module 'dpaudit' has no attribute {name!r}")
