"""The ``dpaudit`` command group.

Subcommands are imported only when they run (or when their own ``--help`` is asked for), so that
``dpaudit --help`` is instant and imports neither torch nor jax. Each subcommand lives in its own
module under :mod:`dpaudit.cli` and is registered in :data:`SUBCOMMANDS` by import path.
"""

from __future__ import annotations

import errno
import importlib
import os

import click

from dpaudit import __version__
from dpaudit.common.errors import UserInputError

#: name -> ("module:attribute", one-line summary shown by ``dpaudit --help`` without importing it).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "inject": (
        "dpaudit.cli.inject:inject",
        "Plant secret canaries in a corpus and write the train/heldout/public splits.",
    ),
    "account": (
        "dpaudit.cli.account:account",
        "Compute, calibrate and explain the privacy budget (epsilon) of a DP-SGD run.",
    ),
    "train": ("dpaudit.cli.train:train", "Train a model on an inject directory with a pluggable (DP) trainer."),
    "audit-trainer": (
        "dpaudit.cli.audit_trainer:audit_trainer",
        "Audit a DP trainer's implementation white-box with gradient canaries (claim vs lower bound).",
    ),
    "attack": (
        "dpaudit.cli.attack:attack",
        "Attack a model: exposure and reconstruction of its canaries, membership "
        "inference (loss, shadow, ref, LiRA, RMIA) and an empirical epsilon lower bound.",
    ),
    "report": (
        "dpaudit.cli.report:report",
        "Render the HTML audit report of one or several attack directories (a comparison table, a row per model).",
    ),
    "demo": ("dpaudit.cli.demo:demo", "Run the whole pipeline end to end on the built-in corpus."),
}


class UserError(click.ClickException):
    """A one-line error for the user; exit code 2 like click's own usage errors."""

    exit_code = 2


#: errno -> (verb, what to do) of a file-system failure that the user, not dpaudit, can fix: a full disk or
#: quota, a file-size limit (``ulimit -f``), a device error, missing permissions, a read-only file
#: system, and an output path that runs through a file (``--out notes.txt/report.html``).
_ENVIRONMENT_ERRNOS: dict[int, tuple[str, str]] = {
    errno.ENOSPC: ("write", "free disk space, then rerun the same command"),
    errno.EDQUOT: ("write", "free space within your disk quota, then rerun the same command"),
    errno.EFBIG: (
        "write",
        "the file-size limit was reached: raise it (ulimit -f) or free space, then rerun the same command",
    ),
    errno.EIO: ("access", "the device reported an input/output error: check the disk (dmesg) or use another location"),
    errno.EACCES: ("access", "choose a location you may use or fix its permissions"),
    errno.EPERM: ("access", "choose a location you may use or fix its permissions"),
    errno.EROFS: ("write", "the file system is read-only: choose a writable location"),
    errno.EEXIST: ("create", "a part of the path is a file, not a folder: choose another path"),
    errno.ENOTDIR: ("create", "a part of the path is a file, not a folder: choose another path"),
    errno.EISDIR: ("write", "it is a folder: name a file inside it"),
    errno.ENAMETOOLONG: ("create", "the name is too long: choose a shorter path"),
}


def os_error_message(command: str, err: OSError) -> str:
    """The one line for a file-system failure during ``dpaudit COMMAND``: the path, the system's reason, the fix.

    The writers of :mod:`dpaudit.files.run_dirs` name the output a failed write was for (not a temporary file), so
    the path here is one the user gave or will recognize. Nothing is left half-written: staged
    directories and temporary files are removed before the error reaches this point.
    """
    verb, fix = _ENVIRONMENT_ERRNOS.get(err.errno, ("use", "check the path"))  # type: ignore[arg-type]
    where = f" {os.fsdecode(err.filename)}" if err.filename is not None else " a file"
    reason = err.strerror or str(err)
    prefix = f"dpaudit {command}" if command else "dpaudit"
    return f"{prefix}: cannot {verb}{where}: {reason}; {fix}."


class LazyGroup(click.Group):
    """A click group that imports each subcommand's module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        module_name, attribute = SUBCOMMANDS[cmd_name][0].split(":")
        return getattr(importlib.import_module(module_name), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except UserInputError as err:
            raise UserError(str(err)) from None
        except OSError as err:
            if err.errno not in _ENVIRONMENT_ERRNOS:
                raise  # not the environment: a bug, keep the traceback
            raise UserError(os_error_message(ctx.invoked_subcommand or "", err)) from None


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Example: dpaudit inject --corpus builtin:assistant --out runs/data && dpaudit account --help",
)
@click.version_option(__version__, prog_name="dpaudit")
def cli() -> None:
    """dpaudit: plant canaries, train with differential privacy, and audit what the model memorized.

    The pipeline is inject -> train -> attack; each stage writes a run directory with a
    hash-checked manifest that the next stage verifies before reading.
    """


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dpaudit")


if __name__ == "__main__":  # pragma: no cover
    main()  # click exits with the command's status
