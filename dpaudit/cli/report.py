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

_EPILOG = (
    "\b\nExample: dpaudit report runs/eps1-attack runs/eps8-attack runs/nonprivate-attack --out "
    "reports/epsilons.html\n"
    "Example: dpaudit report runs/np-attack runs/np-mia runs/dp8-attack --label non-private=runs/np-attack "
    "--label 'DP eps 8'=runs/dp8-attack\n"
    "Example: dpaudit report audits/dpsgd-eps4 runs/eps4-attack --out reports/whitebox-and-attack.html"
)


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


def parse_labels(labels: tuple[str, ...], run_dirs: tuple[Path, ...]) -> dict[str, str]:
    """``--label NAME=DIR`` values as {DIR as given among RUN_DIRS: NAME} (split at the first "=", so a directory may
    hold one; a name may not).

    Raises:
        UserInputError: a value without "=", an empty name, or a DIR that is not one of the RUN_DIRs.
    """
    from dpaudit.common.errors import UserInputError

    given = {Path(d).resolve(): str(d) for d in run_dirs}
    out: dict[str, str] = {}
    for value in labels:
        name, sep, directory = value.partition("=")
        if not sep or not name.strip() or not directory:
            raise UserInputError(f"--label {value!r}: expected NAME=DIR, e.g. --label non-private=runs/np-attack.")
        match = given.get(Path(directory).resolve())
        if match is None:
            raise UserInputError(
                f"--label {value!r}: {directory} is not one of the RUN_DIRs; name one of "
                f"{', '.join(str(d) for d in run_dirs)}."
            )
        out[match] = name.strip()
    return out


@click.command(epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="HTML file to write [default: reports/<run name>.html].",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="NAME=DIR",
    help="Name the model of RUN_DIR DIR on the page (repeatable) [default: the model's directory name, e.g. "
    "runs/np -> np].",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace --out if it holds another report page dpaudit wrote (never a file it did not write, nor a "
    "file inside a run directory).",
)
def report(run_dirs: tuple[Path, ...], out: Path | None, labels: tuple[str, ...], overwrite: bool = False) -> None:
    """Render the audit report of one attack or audit-trainer directory, or a comparison page of several.

    The page is one self-contained HTML file (inline SVG and CSS, no scripts, no network): verdict,
    memorization by repetition count, membership inference, training telemetry, per-canary table,
    provenance. Each RUN_DIR is the --out of `dpaudit attack` or of `dpaudit audit-trainer` (the
    white-box page: verdict, every bound, canary score histograms, claimed mechanism, limits); its
    hashes are checked first. White-box audits lead the verdict of a page that mixes both kinds.

    A comparison page opens with one table, a row per model: claimed epsilon, held-out utility beside its
    trivial baseline, the most-repeated canaries' exposure against the controls, secrets reconstructed, the
    best valid lower bound, and the strongest membership attack's AUC and TPR at 1% FPR. Attack directories
    of one model (the same weight files) that ran different attacks are one model on the page.

    --out is never a file dpaudit did not write, nor a file inside a run directory; an earlier page is replaced
    only with --overwrite (rerunning the same command finds the same page and writes nothing).
    """
    from dpaudit.common.errors import UserInputError
    from dpaudit.report import write_report

    names = parse_labels(labels, run_dirs)
    out = default_output(run_dirs) if out is None else out
    if out.is_dir():
        raise UserInputError(f"--out {out} is a directory; pass a file name such as {out / 'report.html'}.")
    blocked = next((p for p in out.absolute().parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:  # before rendering: the page could never be written there
        raise UserInputError(f"--out {out}: {blocked} is a file, not a folder; choose another path for the page.")
    created = [p for p in out.absolute().parents if not p.exists()]  # deepest first
    before = _identity(out)
    try:
        path = write_report(run_dirs, out, labels=names, overwrite=overwrite)
    except BaseException:  # disk full, permissions, bad input...: remove the folders made for the page
        for folder in created:
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    if before is not None and _identity(path) == before:  # the same page was there: nothing was written
        click.echo(
            f"{path} is up to date: it holds this very page ({path.stat().st_size / 1024:.0f} KiB); nothing written"
        )
        return
    click.echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


def _identity(path: Path) -> tuple[int, int] | None:
    """(inode, mtime) of an existing file: unchanged when nothing replaced it (an atomic write makes a new inode)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns
