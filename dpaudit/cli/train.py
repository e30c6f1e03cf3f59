"""``dpaudit train``: run a registered trainer on an inject directory.

The command knows nothing about any trainer. It reads ``--trainer NAME`` first, loads that
trainer through the entry-point registry, and turns the fields of its ``Config`` dataclass into
options, so ``dpaudit train --trainer jax-bert --help`` lists exactly that trainer's settings.
Values come from, in rising priority: the Config defaults, ``--config FILE.toml``, the command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from dpaudit.claim.record import PrivacyRecord, group_privacy_text, read_privacy_record
from dpaudit.cli import params
from dpaudit.common.errors import UserInputError
from dpaudit.common.extras import MissingExtraError
from dpaudit.common.figures import format_up
from dpaudit.files.run_dirs import run_dir_lock
from dpaudit.training.api import (
    Trainer,
    available_trainers,
    load_trainer,
    writes_run_dir,
)
from dpaudit.training.config_types import ConfigTypeError, config_keys, option_name, seed_type

#: errno values of a write that failed for lack of room: reported in one line, not as a traceback.
_NO_ROOM = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}

_COMMON = {"trainer", "data", "out", "seed", "config_file", "as_json"}

_EPILOG = (
    "Example: dpaudit train --trainer jax-bert --data runs/data --out runs/model "
    "--preset tiny --steps 200 --batch-size 64 --target-epsilon 8"
)


def config_options(config_cls: type) -> list[click.Option]:
    """One click option per field of a trainer's Config dataclass (:func:`dpaudit.cli.params.config_options`, the
    generator ``dpaudit attack`` shares)."""
    return params.config_options(config_cls, reserved=_COMMON)


def _renamed(config_cls: type) -> dict[str, str]:
    """A Config's former field names -> current ones (its ``RENAMED_FIELDS``; none by default)."""
    return dict(getattr(config_cls, "RENAMED_FIELDS", {}))


def _deprecated(old: str, new: str) -> str:
    return f"warning: {old} is deprecated and will be removed; use {new} (the same setting)."


def _load_toml(path: Path, config_cls: type) -> dict[str, tuple[str, Any]]:
    """Read a trainer config file: ``{field name: (key as written, value)}``.

    Keys are Config field names (dashes or underscores). The values are returned as TOML typed
    them; :func:`build_config` lets the Config check them (:mod:`dpaudit.training.config_types`).
    """
    try:
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise UserInputError(
            f"--config {path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset "
            f"{err.start}); save it as UTF-8."
        ) from None
    except OSError as err:
        raise UserInputError(f"--config {path}: cannot read it ({err.strerror or err}).") from None
    except tomllib.TOMLDecodeError as err:
        raise UserInputError(f"--config {path}: not valid TOML ({err}).") from None
    raw = raw.get("trainer", raw) if isinstance(raw.get("trainer"), dict) else raw
    return config_keys(raw, config_cls, f"--config {path}", warn=lambda message: click.echo(message, err=True))


def _culprits(err: ValueError, fields: list[str]) -> list[str]:
    """Config fields an error from ``Config.__post_init__`` is about.

    A :class:`ConfigTypeError` names its field; other messages name options as ``--batch-size``.
    """
    if isinstance(err, ConfigTypeError):
        return [err.field]
    text = str(err)
    return [name for name in fields if re.search(re.escape(option_name(name)) + r"(?![\w-])", text)]


def build_config(trainer: Trainer, params: dict[str, Any], ctx: click.Context | None, config_file: Path | None) -> Any:
    """Merge defaults, the TOML file and explicit command-line values into the trainer's Config.

    The Config validates every value whatever its source; an error about a value that came from
    the file names the file and the key as written there (the command line names its option).
    """
    from_file = _load_toml(config_file, trainer.Config) if config_file else {}
    values = {name: value for name, (_key, value) in from_file.items()}
    for f in dataclasses.fields(trainer.Config):
        given = ctx is None or ctx.get_parameter_source(f.name) == ParameterSource.COMMANDLINE
        if given and params.get(f.name) is not None:
            values[f.name] = params[f.name]
            from_file.pop(f.name, None)
    for old, new in _renamed(trainer.Config).items():
        if params.get(old) is None:
            continue
        if ctx is not None and ctx.get_parameter_source(new) == ParameterSource.COMMANDLINE:
            raise UserInputError(
                f"{option_name(old)} and {option_name(new)} are the same setting; keep {option_name(new)}."
            )
        click.echo(_deprecated(option_name(old), option_name(new)), err=True)
        values[new] = params[old]
        from_file.pop(new, None)
    try:
        return trainer.Config(**values)
    except (TypeError, ValueError) as err:
        if isinstance(err, TypeError) or not (culprits := [n for n in _culprits(err, list(values)) if n in from_file]):
            raise UserInputError(f"trainer {trainer.name} config: {err}") from None
        keys = ", ".join(repr(from_file[name][0]) for name in culprits)
        if isinstance(err, ConfigTypeError):
            raise UserInputError(f"--config {config_file}: key {keys} {err.reason}") from None
        raise UserInputError(f"--config {config_file}: key {keys}: {err}") from None


def _peek_trainer(args: list[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--trainer" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--trainer="):
            return arg.split("=", 1)[1]
    return None


class TrainCommand(click.Command):
    """Adds the chosen trainer's Config options before parsing."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        name = _peek_trainer(args)
        if name is not None:
            try:
                trainer = load_trainer(name)
            except MissingExtraError:
                raise  # one line (the command group's), naming the extra to install: not a usage mistake
            except UserInputError as err:
                raise click.UsageError(str(err), ctx) from None
            ctx.meta["dpaudit.trainer"] = trainer
            self.params = [*(p for p in self.params if p.name in _COMMON), *config_options(trainer.Config)]
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        trainer = ctx.meta.get("dpaudit.trainer")
        if trainer is None:
            names = ", ".join(sorted(available_trainers())) or "none registered"
            formatter.write_paragraph()
            formatter.write_text(f"Registered trainers: {names}. Add --trainer NAME --help for its options.")
        example = getattr(trainer, "example", None)  # a trainer's own example (its options), else jax-bert's
        if isinstance(example, str) and example:
            formatter.write_paragraph()
            with formatter.indentation():
                formatter.write_text(example)
            return
        super().format_epilog(ctx, formatter)


@click.command(cls=TrainCommand, epilog=_EPILOG)
@click.option("--trainer", required=True, help="Registered trainer name (entry point group dpaudit.trainers).")
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="Inject run directory (train.jsonl, heldout.jsonl, public.jsonl, manifest.json).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    required=True,
    help="Train run directory to write; rerunning the same command on it resumes from its last checkpoint.",
)
@click.option(
    "--seed",
    type=seed_type(),
    default=0,
    show_default=True,
    help="Public seed (written to the manifest) for initialization, masking and the tokenizer; never the "
    "DP noise or sampling, which come from OS entropy (or the trainer's --noise-seed).",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="TOML file of trainer options (field names as keys); command-line options override it.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result summary as JSON on stdout.")
@click.pass_context
def train(
    ctx: click.Context,
    trainer: str,
    data: Path,
    out: Path,
    seed: int,
    config_file: Path | None,
    as_json: bool,
    **params: Any,
) -> None:
    """Train a model on DATA with a pluggable trainer and write a train run directory.

    The run directory holds model/ (Hugging Face layout) and privacy.json (the DpEvent that actually
    ran and its epsilon): what the guarantee covers. manifest.json (hashes of the training data),
    metrics.jsonl (loss, gradient-SNR, realized batch sizes, computed on private data) and
    checkpoints/ (the secret noise state; deleted at the end unless kept) are for the data owner
    only and NOT covered by the epsilon. Printed epsilons and deltas are rounded up.

    Threads: the torch trainers use the cores actually free (CPU affinity minus the 1-minute load
    average, at least 1); set OMP_NUM_THREADS=N (or DPAUDIT_THREADS=N) to choose.
    """
    plugin: Trainer = ctx.meta.get("dpaudit.trainer") or load_trainer(trainer)
    config = build_config(plugin, params, ctx, config_file)
    warning = short_noise_seed_warning(getattr(config, "noise_seed", None))
    if warning:
        click.echo(warning, err=True)
    # The whole run holds the lock of --out (a second train on it is refused, naming this process); only
    # the process that writes the directory takes it (the others of a multi-process run do not).
    lock = (
        run_dir_lock(out, stage=f"train --trainer {plugin.name}")
        if writes_run_dir(plugin)
        else contextlib.nullcontext()
    )
    with lock:
        try:
            result = plugin.train(data, out, config, seed=seed)
        except FileNotFoundError as err:  # an input or the run directory removed while the run went on
            raise UserInputError(
                f"{err.filename or data} vanished during the run (deleted or moved); restore it and rerun the same "
                "command to resume from the last checkpoint, or start over with a new --out."
            ) from None
        except OSError as err:
            if err.errno not in _NO_ROOM:
                raise
            where = f" ({err.filename})" if err.filename else ""
            raise UserInputError(
                f"--out {out}: a write failed{where}: {err.strerror}; free disk space or raise the file-size limit "
                "(ulimit -f), then rerun the same command to resume from the last checkpoint."
            ) from None
    record = _read_privacy(result.out_dir)
    telemetry = dict(result.summary.get("telemetry") or {})
    telemetry.setdefault("note", "telemetry: not privacy figures and not covered by the epsilon.")
    summary = {
        "trainer": plugin.name,
        "out_dir": str(result.out_dir),
        "steps": result.steps,
        "epsilon": result.epsilon,
        "delta": result.delta,
        **result.summary,
        "telemetry": {**telemetry, "final_loss": result.final_loss},
        "guarantee": record.guarantee if record else None,
        "proven": record.proven if record else False,
        "n_public": record.n_public if record else None,
        "public_parameters": record.public_parameters if record else None,
        "epsilon_replace_one": record.epsilon_replace_one if record else None,
        "unaccounted_releases": list(record.unaccounted_releases) if record else [],
        "noise_tail": record.noise_tail if record else None,
        "accountant_delta": record.accountant_delta if record else None,
        "noise_tail_delta": record.noise_tail_delta if record else None,
        "released_files": record.released_files if record else None,
        "private_files": record.private_files if record else None,
        "notes": list(record.notes) if record else [],
    }
    if record is not None and record.init_from is not None:
        summary["init_from_requirement"] = record.init_from.get("requirement")
    for note in summary["notes"]:
        if note.startswith("warning:"):
            click.echo(note, err=True)
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
        return
    click.echo(f"trained {plugin.name} for {result.steps} steps -> {result.out_dir} ({_claim(result, record)})")
    parts = record.delta_parts() if record is not None and record.private else None
    if parts is not None and parts.noise_tail is not None:  # the float noise sampler's tail, counted inside delta
        # the record's tail figure comes with the entry of its sampler (noise_tail: z_max, the formula)
        assert record is not None and record.noise_tail is not None
        click.echo(
            f"  delta {format_up(parts.delta, 2)} includes the noise sampler's tail figure {format_up(parts.noise_tail, 2)} "
            f"(reach {record.noise_tail['z_max']:g} sigma); epsilon is the accountant's at delta - tail "
            f"({format_up(parts.accountant, 3)})"
        )
    for line in utility_lines(summary):
        click.echo(f"  {line}")
    if record is not None and record.init_from is not None:
        click.echo(f"  started from --init-from {record.init_from.get('path')}: {record.init_from.get('requirement')}")
    for release in summary["unaccounted_releases"]:
        click.echo(f"  NOT covered by the epsilon (unaccounted release): {release}")
    if record is not None and record.private and record.public_parameters:  # q = batch / N: only where it is DP
        click.echo(f"  {record.public_parameters}")
    for note in summary["notes"]:
        click.echo(f"  {note}")
    for line in coverage_lines(record):
        click.echo(f"  {line}")
    groups = record.group_privacy if record is not None and record.private else []  # non-private: nothing to group
    for row in groups:
        click.echo(f"  group privacy, canary inserted {row['frequency']}x: {group_privacy_text(row)}")
    if groups:
        click.echo(f"  (group bound: {groups[0]['bound']})")


def utility_lines(summary: dict[str, Any]) -> list[str]:
    """Each held-out utility figure of a run's summary, on how many held-out rows, with its trivial baseline beside it
    (the best constant prediction on the same rows and positions: a model that does not beat it learned nothing
    usable)."""
    from dpaudit.training.baselines import UTILITY_KINDS, eval_rows_text

    lines = []
    for kind in UTILITY_KINDS:
        value = next((summary[k] for k in kind.keys if summary.get(k) is not None), None)
        if value is None:
            continue
        baseline = summary.get(kind.baseline_key)
        beside = f" (trivial baseline {baseline:.4f}: {kind.rule})" if baseline is not None else ""
        rows = eval_rows_text(summary)  # the first --eval-examples rows only
        lines.append(f"{kind.name} {value:.4f}{'' if rows is None else ' ' + rows}{beside}")
        warning = below_start_warning(summary, kind.keys, kind.name, value)
        if warning is not None:
            lines.append(warning)
    return lines


def below_start_warning(summary: dict[str, Any], keys: tuple[str, ...], name: str, value: float) -> str | None:
    """The warning of a private run whose held-out figure ends below its public start's on the same rows
    (``start_eval``: the --init-from model evaluated before the first step): the private data made the model
    worse, so the recipe (steps, learning rate, batch, trained parameters) needs choosing again on public data."""
    start = summary.get("start_eval") or {}
    before = next((start[k] for k in keys if start.get(k) is not None), None)
    if before is None or round(value, 4) >= round(before, 4):  # a drop the printed figures show
        return None
    return (
        f"warning: this private run ends below its public start: {name} {value:.4f} < the start's {before:.4f} on "
        "the same rows (the private training made the model worse); the start alone is the better release. Choose "
        "the recipe on public data (--data-split public): fewer steps, a lower learning rate, a larger batch, or "
        "fewer trained parameters (--peft lora)."
    )


#: What a non-private run on private rows says instead of what a guarantee covers: there is none.
NO_GUARANTEE = (
    "no privacy guarantee: trained without DP on train.jsonl, so model/ and every file of this run may "
    "reveal its rows (canaries included); treat all of them as private data."
)
#: What a public run says: nothing private went in, so there is nothing for a guarantee to cover.
PUBLIC_ONLY = "no privacy guarantee needed: trained on public.jsonl only (no private row, no canary)."


def coverage_lines(record: PrivacyRecord | None) -> list[str]:
    """What the summary says the guarantee covers: where the mechanism's randomness came from and which files the
    epsilon covers for a DP run; that there is no guarantee for a non-private one (no noise was drawn, nothing is
    covered), and that none is needed for a public one."""
    if record is None:
        return []
    if record.public_data_only:
        return [PUBLIC_ONLY]
    if not record.private and record.data_split == "public":  # from a start not known to be public
        return [f"no privacy guarantee: {record.guarantee.removeprefix('none: ')}"]
    if not record.private:
        return [NO_GUARANTEE]
    return ([f"randomness: {record.randomness}"] if record.randomness else []) + [record.covers]


def _read_privacy(out_dir: Path) -> PrivacyRecord | None:
    """The run's privacy.json as a :class:`PrivacyRecord` (every trainer writes one; None if it is missing)."""
    path = Path(out_dir) / "privacy.json"
    return read_privacy_record(path) if path.is_file() else None


#: Seeds below this can be found by search (2^64 candidates): a ``--noise-seed`` must carry more entropy.
SHORT_SEED_BOUND = 2**64


def short_noise_seed_warning(noise_seed: int | None) -> str | None:
    """A warning when ``--noise-seed`` is below 2^64: accepted (reproducible tests), but anyone who searches the
    small seeds can regenerate the noise and sampling, and then the guarantee is void."""
    if noise_seed is None or noise_seed >= SHORT_SEED_BOUND:
        return None
    return (
        "warning: --noise-seed is below 2^64 (at most 64 bits of entropy): it can be found by searching small "
        "seeds, which regenerates the noise and the sampling and voids the guarantee. Use it for tests only; "
        "omit it (OS entropy) or pass a secret number of >= 128 random bits."
    )


def _claim(result: Any, record: PrivacyRecord | None) -> str:
    """The one-line guarantee, rounded up, with its caveat when no epsilon is proven, the replace-one epsilon
    when N is treated as public, and the unaccounted releases beside it."""
    from dpaudit.claim import claim_of_record

    if result.epsilon is not None and (record is None or record.proven):
        # recomputed from privacy.json's event, as dpaudit attack, the report and the demo do: one figure everywhere
        claim = claim_of_record(record) if record is not None and record.event is not None else None
        epsilon = claim.epsilon if claim is not None and claim.epsilon is not None else result.epsilon
        text = f"epsilon = {format_up(epsilon)} at delta = {format_up(result.delta, 2)}, for model/ only"
        if record is not None and record.n_public and record.epsilon_replace_one is not None:
            replace_one = (
                claim.epsilon_replace_one
                if claim is not None and claim.epsilon_replace_one is not None
                else record.epsilon_replace_one
            )
            text += f" (add/remove, N treated as public; replace-one epsilon = {format_up(replace_one)})"
        elif record is not None and not record.n_public:
            text += f" (add/remove; q and steps from the declared public --dataset-size {record.declared_dataset_size})"
        if record is not None and record.unaccounted_releases:
            text += f"; NOT covering {len(record.unaccounted_releases)} unaccounted release(s), listed below"
        if claim is not None and claim.conditions:  # what it holds only under, as every claim line says it
            text += "; " + "; ".join(claim.conditions)
        return text
    if record is not None and record.epsilon_if_poisson is not None:
        return (
            f"NO proven epsilon: {record.sampling} sampling; epsilon_if_poisson = "
            f"{format_up(record.epsilon_if_poisson)} at delta = {format_up(result.delta, 2)} only if batches "
            f"had been Poisson-sampled"
        )
    if record is not None and record.public_data_only:
        return "public run: trained on public data only, no epsilon needed"
    return "non-private (epsilon = inf)"
