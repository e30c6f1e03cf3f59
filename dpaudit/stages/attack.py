"""The attack stage: attack a model, then render the report page into the same attack directory.

``dpaudit.attack(...)``, ``dpaudit attack`` and the demo come through here. The attacks
(:mod:`dpaudit.attacks.run`) write ``results.json`` and the scores; the report (:mod:`dpaudit.report`)
reads typed results. Neither imports the other: this module passes the report's page writer to the
attack run, so ``index.html`` is rendered in the staged directory and listed in its manifest, and
``dpaudit report DIR`` renders the very same page later.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dpaudit.attacks.registry import DEFAULT_ATTACKS
from dpaudit.attacks.results import AttackResults

__all__ = ["attack", "index_page", "write_attack_dir"]


def index_page(stage: Path, results: AttackResults, manifest: Mapping[str, Any], *, label: str) -> dict[str, str]:
    """``{"index.html": page}``: the report of one attack directory, rendered from what it holds.

    Args:
        stage: the staged attack directory (results and scores written, manifest not yet).
        results: the results it holds.
        manifest: the manifest as a reader of ``manifest.json`` will see it (outputs without the page).
        label: the page's name for the run (the directory as the user gave it).
    """
    from dpaudit.report.load import REPORT_FILE, run_from_results
    from dpaudit.report.render import render_runs

    return {REPORT_FILE: render_runs([run_from_results(stage, results, manifest, label=label)])}


def _pages_for(out: str | os.PathLike[str]):  # noqa: ANN202
    return lambda stage, results, manifest: index_page(stage, results, manifest, label=str(out))


def attack(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    attacks: Iterable[str] = DEFAULT_ATTACKS,
    *,
    out: str | os.PathLike[str] | None = None,
    **options: Any,
) -> AttackResults:
    """Run canary attacks on a model and (with ``out``) write the attack directory with its ``index.html``.

    Arguments as :func:`dpaudit.attacks.run.attack` (``overwrite``, ``device``, ``progress``, ``command`` and the
    attacks' options by field name).

    Raises:
        UserInputError: bad input, before anything is loaded or written.
    """
    from dpaudit.attacks import run

    return run.attack(model, data, attacks, out=out, pages=None if out is None else _pages_for(out), **options)


def write_attack_dir(out: str | os.PathLike[str], results: AttackResults, **kwargs: Any) -> Path:
    """:func:`dpaudit.attacks.run.write_attack_dir` with the report page: what ``dpaudit attack`` writes."""
    from dpaudit.attacks import run

    return run.write_attack_dir(out, results, pages=_pages_for(out), **kwargs)
