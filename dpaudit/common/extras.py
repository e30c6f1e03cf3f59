"""Which optional extra a command needs, and the one message that says how to install it.

dpaudit's base install (``pip install dpaudit``) runs ``inject``, ``account`` and ``report``; everything that
loads or trains a model needs an extra (README, "Which extra each command needs", is the contract):
``torch`` (torch and transformers: ``attack``, the edp-sgd and rgp trainers), ``jax`` (jax, flax and optax:
the jax-bert trainer) and ``fleet`` (Ray: ``--ray-address``). A command checks its extras before any work
(:func:`require_extras`), so a missing one is one line at once, naming the extra and the install command,
instead of a traceback after the work that came before the first import.

The install command depends on how dpaudit was installed (:func:`install_command`): from a wheel,
``pip install 'dpaudit[torch]'``; from a source checkout (an editable install, its ``pyproject.toml`` beside
the package), ``pip install -e '.[torch]'`` from the checkout. Only the extras the command needs are named.

Checks use :func:`importlib.util.find_spec`, which imports nothing (``dpaudit attack --help`` stays instant);
a module whose lookup itself fails counts as missing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable
from pathlib import Path

from dpaudit.common.errors import UserInputError

__all__ = [
    "EXTRA_MODULES",
    "TRAINER_EXTRAS",
    "MissingExtraError",
    "extra_of_module",
    "install_command",
    "installed",
    "missing_extra_message",
    "missing_modules",
    "require_extras",
    "trainer_extras",
]

#: The modules each extra of ``pyproject.toml`` provides (the ones dpaudit imports).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "torch": ("torch", "transformers"),
    "jax": ("jax", "flax", "optax"),
    "fleet": ("ray",),
    "opacus": ("opacus",),
}

#: The extra each shipped trainer needs (a third-party trainer's is found from its import error).
TRAINER_EXTRAS: dict[str, tuple[str, ...]] = {
    "jax-bert": ("jax",),
    "edp-sgd": ("torch",),
    "rgp": ("torch",),
    "opacus": ("torch", "opacus"),
}

_ROOT = Path(__file__).resolve().parents[2]  # dpaudit/common/extras.py -> the checkout (an editable install)


class MissingExtraError(UserInputError):
    """An optional extra that the command needs is not installed (a one-line user error, exit code 2)."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (nothing is imported; a failing lookup counts as missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_modules(extras: Iterable[str]) -> list[str]:
    """The modules of ``extras`` that are not installed, in order."""
    return [m for extra in extras for m in EXTRA_MODULES[extra] if not installed(m)]


def extra_of_module(module: str | None) -> str | None:
    """The extra that provides top-level ``module`` (``"torch"`` for ``transformers.models``), or None."""
    top = (module or "").split(".")[0]
    return next((extra for extra, modules in EXTRA_MODULES.items() if top in modules), None)


def trainer_extras(name: str) -> tuple[str, ...]:
    """The extras a registered trainer needs (empty when unknown: a third-party trainer)."""
    return TRAINER_EXTRAS.get(name, ())


def _source_checkout() -> Path | None:
    """The source checkout dpaudit runs from (an editable install: its pyproject.toml beside the package), or None."""
    pyproject = _ROOT / "pyproject.toml"
    try:
        if pyproject.is_file() and 'name = "dpaudit"' in pyproject.read_text(encoding="utf-8"):
            return _ROOT
    except OSError:
        pass
    return None


def install_command(extras: Iterable[str]) -> str:
    """The pip command that installs ``extras`` for this installation: ``pip install 'dpaudit[torch]'`` from a
    wheel, ``pip install -e '.[torch]'`` (run in the checkout; its path when elsewhere) from a source checkout."""
    names = ",".join(dict.fromkeys(extras))
    checkout = _source_checkout()
    if checkout is None:
        return f"pip install 'dpaudit[{names}]'"
    try:
        here = Path.cwd().resolve() == checkout
    except OSError:
        here = False
    return f"pip install -e '.[{names}]'" if here else f"pip install -e '{os.fspath(checkout)}[{names}]'"


def missing_extra_message(what: str, extras: Iterable[str], missing: Iterable[str]) -> str:
    """The one line for ``what`` (``"dpaudit attack"``, ``"--trainer jax-bert"``) needing ``extras`` of which
    ``missing`` modules are not installed."""
    extras, missing = list(dict.fromkeys(extras)), list(dict.fromkeys(missing))
    names = " and ".join(f"the {e} extra" for e in extras)
    lacking = ", ".join(missing)
    verb = "is" if len(missing) == 1 else "are"
    return f"{what} needs {names} ({lacking} {verb} not installed): {install_command(extras)}."


def require_extras(what: str, *extras: str) -> None:
    """Refuse at once when a module of ``extras`` is missing: :class:`MissingExtraError` naming only the extras
    that lack something, and the command that installs them."""
    lacking = [e for e in dict.fromkeys(extras) if missing_modules([e])]
    if lacking:
        raise MissingExtraError(missing_extra_message(what, lacking, missing_modules(lacking)))
