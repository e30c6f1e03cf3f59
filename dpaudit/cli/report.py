"""``dpaudit report RUN_DIR...``: one self-contained HTML page for one or several audit directories.

Each RUN_DIR is an attack directory (``dpaudit attack --out``) or a white-box trainer audit
(``dpaudit audit-trainer --out``). Several attack directories make a comparison page (e.g. the same
data trained at epsilon 1, 5, 10 and non-private, or sgd vs dp-sgd vs edp-sgd): memorization curves
overlaid as in Anil et al. 2021, Figure 7. Audit-trainer directories alone make the white-box page;
mixed with attack directories, their verdicts lead the comparison page and get a section of their
own. Rendering reads the directories (and the upstream files their manifests name), verified against
their manifests, and never loads a model; the same directories give the same bytes.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import click

_EPILOG = ("\b\nExample: dpaudit report runs/eps1-attack runs/eps8-attack runs/nonprivate-attack --out "
           "reports/epsilons.html\n"
           "Example: dpaudit report audits/dpsgd-eps4 runs/eps4-attack --out reports/whitebox-and-attack.html")


def default_output(run_dirs: tuple[Path, ...]) -> Path:
    """``reports/<name>.html``: the directory's name for one run; for several, their names joined
    (a short hash of the full list keeps the name bounded and distinct)."""
    from dpaudit.report import DEFAULT_DIR

    names = [Path(p).resolve().name or "run" for p in run_dirs]
    if len(names) == 1:
        stem = names[0][:80]
    else:
        digest = hashlib.sha256("\0".join(str(Path(p).resolve()) for p in run_dirs).encode()).hexdigest()[:8]
        stem = f"{'-vs-'.join(names)[:60]}-{digest}"
    return DEFAULT_DIR / f"{stem}.html"


@click.command(epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", type=click.Path(path_type=Path, dir_okay=False),
              help="HTML file to write [default: reports/<run name>.html].")
def report(run_dirs: tuple[Path, ...], out: Path | None) -> None:
    """Render the audit report of one attack or audit-trainer directory, or a comparison page of several.

    The page is one self-contained HTML file (inline SVG and CSS, no scripts, no network): verdict,
    memorization by repetition count, membership inference, training telemetry, per-canary table,
    provenance. Each RUN_DIR is the --out of `dpaudit attack` or of `dpaudit audit-trainer` (the
    white-box page: verdict, every bound, canary score histograms, claimed mechanism, limits); its
    hashes are checked first. White-box audits lead the verdict of a page that mixes both kinds.
    """
    from dpaudit.errors import UserInputError
    from dpaudit.report import write_report

    out = default_output(run_dirs) if out is None else out
    if out.is_dir():
        raise UserInputError(f"--out {out} is a directory; pass a file name such as {out / 'report.html'}.")
    blocked = next((p for p in out.absolute().parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:  # before rendering: the page could never be written there
        raise UserInputError(f"--out {out}: {blocked} is a file, not a folder; choose another path for the page.")
    created = [p for p in out.absolute().parents if not p.exists()]  # deepest first
    try:
        path = write_report(run_dirs, out)
    except BaseException:  # disk full, permissions, bad input...: remove the folders made for the page
        for folder in created:
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    click.echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
