"""The ``dpaudit`` command group.

Subcommands are imported only when they run (or when their own ``--help`` is asked for), so that
``dpaudit --help`` is instant and imports neither torch nor jax. Each subcommand lives in its own
module under :mod:`dpaudit.cli` and is registered in :data:`SUBCOMMANDS` by import path.
"""

from __future__ import annotations

import importlib
import sys

import click

from dpaudit import __version__
from dpaudit.errors import UserInputError

#: name -> ("module:attribute", one-line summary shown by ``dpaudit --help`` without importing it).
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "inject": ("dpaudit.cli.inject:inject", "Plant secret canaries in a corpus and write the train/heldout/public splits."),
    "account": ("dpaudit.cli.account:account", "Compute, calibrate and explain the privacy budget (epsilon) of a DP-SGD run."),
    "train": ("dpaudit.cli.train:train", "Train a model on an inject directory with a pluggable (DP) trainer."),
    "attack": ("dpaudit.cli.attack:attack", "Attack a model's canaries: exact exposure and masked-secret reconstruction."),
    "report": ("dpaudit.cli.report:report", "Render the HTML audit report of one or several attack directories (comparison page)."),
    "demo": ("dpaudit.cli.demo:demo", "Run the whole pipeline end to end on the built-in corpus."),
}


class UserError(click.ClickException):
    """A one-line error for the user; exit code 2 like click's own usage errors."""

    exit_code = 2


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
    sys.exit(main())
