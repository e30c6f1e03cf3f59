"""Sphinx configuration of dpaudit's documentation: the pages of docs/ (Markdown, through myst-parser) and the API
reference generated from the docstrings (autodoc, napoleon for the Google-style sections).

Build (CI runs it with warnings as errors)::

    python -m sphinx -W -b html docs docs/_build

Needs the ``docs`` extra (``pip install -e '.[docs]'``) and, for the trainers' Configs, the ``jax`` and ``torch``
extras: autodoc imports every documented module.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import dpaudit

project = "dpaudit"
author = "dpaudit maintainers"
copyright = "dpaudit maintainers"  # noqa: A001 - Sphinx's name
release = version = dpaudit.__version__

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
root_doc = "contents"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
# Headings get anchors, so that a page's links to another page's section ("privacy.md#...") resolve.
myst_heading_anchors = 3

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = False
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"show-inheritance": True}

html_theme = "alabaster"
html_title = f"dpaudit {release}"
html_static_path: list[str] = []


def _field_help(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    """A trainer Config's field is documented by its ``metadata["help"]`` (what ``dpaudit train --help`` shows)."""
    del app, obj, options
    if what != "attribute" or lines:
        return
    owner_name, _, field_name = name.rpartition(".")
    module_name, _, class_name = owner_name.rpartition(".")
    try:
        owner = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError):
        return
    if not dataclasses.is_dataclass(owner):
        return
    for field in dataclasses.fields(owner):
        if field.name == field_name and field.metadata.get("help"):
            lines.append(str(field.metadata["help"]))


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _field_help)
