"""Render the report page: typed sections in, one self-contained HTML string out.

Jinja2 with autoescaping on (every string from data, configs or command lines is escaped); the
templates and the stylesheet are package data under ``dpaudit/report/templates/``. The page has a
Content-Security-Policy that allows inline styles and ``data:`` images only, so nothing can run or
load even if a string escaped the escaping. The output is a pure function of the directories rendered:
no dates, no random ids, stable ordering; rendering twice gives the same bytes.

Attack directories get the attack report (one model) or its comparison page, which opens with a table, a row
per model (:mod:`dpaudit.report.comparison`); directories of one model are merged first and each model is
labelled (:mod:`dpaudit.report.models`, ``labels``: ``dpaudit report --label NAME=DIR``); audit-trainer directories
alone get the white-box page (:mod:`dpaudit.report.whitebox`); a mix gets the comparison page with the
white-box audits leading its verdict (the strongest valid bound for the per-example claim) and a
section of their own.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpaudit.report.load import ReportRun, load_run
from dpaudit.report.sections import build_page
from dpaudit.report.templating import environment, stylesheet

if TYPE_CHECKING:
    from dpaudit.report.whitebox import WhiteboxView

#: Default folder of ``dpaudit report`` pages.
DEFAULT_DIR = Path("reports")


def render_runs(
    runs: Sequence[ReportRun],
    *,
    whitebox: Sequence[Any] = (),
    labels: Mapping[str, str] | None = None,
    page_dir: str | os.PathLike[str] | None = None,
) -> str:
    """The HTML page of one run, or the comparison page of several; ``whitebox`` audits
    (:class:`~dpaudit.report.whitebox_load.WhiteboxRun`) lead its verdict and get a section of their own.

    Attack directories of one model are merged into one run (:func:`dpaudit.report.models.merge_models`) and each
    model gets a short label (``labels``: directory -> name; else the model's directory name). ``page_dir``: the
    folder the page will be written to (a comparison page's links to the attack directories are relative to it)."""
    from dpaudit.report.models import label_runs, merge_models

    if not runs:
        raise ValueError("render_runs needs at least one run.")
    views: tuple[WhiteboxView, ...] = ()
    if whitebox:
        from dpaudit.report.whitebox import whitebox_view

        views = tuple(whitebox_view(w, index=i, histograms=False) for i, w in enumerate(whitebox))
    page = build_page(
        label_runs(merge_models(runs), labels), whitebox=views, page_dir=None if page_dir is None else Path(page_dir)
    )
    return environment().get_template("report.html.j2").render(page=page, css=stylesheet())


def load_dir(path: str | os.PathLike[str]) -> Any:
    """One directory for the report, verified against its manifest: a :class:`ReportRun` of an attack directory,
    or a :class:`~dpaudit.report.whitebox_load.WhiteboxRun` of an audit-trainer directory.

    Raises:
        UserInputError: neither kind of directory, a changed file, or results of an unknown schema version.
    """
    from dpaudit.common.errors import UserInputError
    from dpaudit.files.run_dirs import load_manifest
    from dpaudit.report.whitebox_load import is_whitebox_dir, load_whitebox

    manifest = load_manifest(path)
    if is_whitebox_dir(manifest):
        return load_whitebox(path)
    if not str(manifest["schema"]).startswith("dpaudit.attack/"):
        raise UserInputError(
            f"{path} is a {manifest['schema']!r} directory, not an attack directory (the --out of dpaudit "
            "attack) or an audit-trainer directory (the --out of dpaudit audit-trainer)."
        )
    return load_run(path)


def render_report(
    paths: Sequence[str | os.PathLike[str]],
    *,
    labels: Mapping[str, str] | None = None,
    page_dir: str | os.PathLike[str] | None = None,
) -> str:
    """Render the report of one or several attack or audit-trainer directories (verified; no model loaded).

    ``labels`` maps a directory (as given) to the name its model gets on the page (``dpaudit report --label``);
    ``page_dir`` is the folder the page will be written to (a comparison page links the attack directories' files
    relative to it).

    Only audit-trainer directories: the white-box page (one audit, or several side by side). Only attack
    directories: the attack report or comparison page. A mix: the comparison page, its verdict led by the
    white-box audits, with a white-box section.

    Raises:
        UserInputError: a path that is not an attack or audit-trainer directory, has changed files, or holds
            results of an unknown schema version.
    """
    from dpaudit.report.whitebox_load import WhiteboxRun

    loaded = [load_dir(p) for p in paths]
    whitebox = [r for r in loaded if isinstance(r, WhiteboxRun)]
    runs = [r for r in loaded if not isinstance(r, WhiteboxRun)]
    if not runs:
        from dpaudit.report.whitebox import render_whitebox

        return render_whitebox(whitebox)
    return render_runs(runs, whitebox=whitebox, labels=labels, page_dir=page_dir)


def write_report(
    paths: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    labels: Mapping[str, str] | None = None,
    overwrite: bool = False,
    option: str = "--out",
) -> Path:
    """Render and write ``out`` atomically (``labels``: as :func:`render_report`).

    ``out`` is never a file dpaudit did not write, nor a path inside a run directory
    (:func:`dpaudit.files.run_dirs.check_page_target`, checked before rendering). A page dpaudit wrote is replaced only with
    ``overwrite``; one that already holds exactly this page is left as it is (rendering is deterministic, so
    rerunning the same command writes nothing).

    Raises:
        UserInputError: naming ``option`` (the caller's name for ``out``) and what to do.
    """
    from dpaudit.common.errors import UserInputError
    from dpaudit.files.run_dirs import atomic_write_text, check_page_target

    out = Path(out)
    exists = check_page_target(out, option=option)
    html = render_report(paths, labels=labels, page_dir=out.parent)
    if exists:
        if out.read_bytes() == html.encode("utf-8"):
            return out  # the same page: nothing to write
        if not overwrite:
            raise UserInputError(
                f"{option} {out} holds another report page dpaudit wrote; pass --overwrite to replace "
                "it or choose another path."
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(out, html)
