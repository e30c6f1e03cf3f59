"""``--setup FILE.py:FUNCTION`` of the library trainers: import the user's file and call its function.

Shared by the ``opacus`` and ``jax-privacy`` trainers (each then checks what the function returned against its own
library's types). A file that is missing or does not import, a missing function or one that raises is one line
naming ``--setup SPEC`` and the fix (:class:`dpaudit.common.errors.UserInputError`), before any directory is written.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from dpaudit.common.errors import UserInputError

__all__ = ["call_setup", "first_line"]


def first_line(err: BaseException) -> str:
    """``Type: first line of the message`` of an exception the user's code raised."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def call_setup(spec: str) -> Any:
    """Import ``FILE.py`` of ``spec`` (``FILE.py:FUNCTION``) and return what the function returns.

    Raises:
        UserInputError: naming ``--setup SPEC`` and the fix.
    """
    where = f"--setup {spec}"
    path_text, _, function = spec.rpartition(":")
    path = Path(path_text)
    if not path_text or not function.isidentifier():
        raise UserInputError(f"{where}: expected FILE.py:FUNCTION (e.g. my_setup.py:build).")
    if not path.is_file():
        raise UserInputError(f"{where}: {path} is not a file; give the path of your setup file.")
    name = f"_dpaudit_setup_{abs(hash(str(path.resolve())))}"
    try:
        loader = importlib.util.spec_from_file_location(name, path)
        if loader is None or loader.loader is None:
            raise ImportError("not a Python file")
        module = importlib.util.module_from_spec(loader)
        sys.modules[name] = module
        loader.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any failure of the user's file is one line naming it
        sys.modules.pop(name, None)
        raise UserInputError(f"{where}: {path} fails to import ({first_line(err)}); fix the file.") from None
    build = getattr(module, function, None)
    if not callable(build):
        raise UserInputError(f"{where}: {path} defines no function {function}(); define it or name the right one.")
    try:
        return build()
    except Exception as err:  # noqa: BLE001 - the user's code
        raise UserInputError(f"{where}: {function}() raised {first_line(err)}; fix the function.") from None
