"""``dpaudit audit-trainer``: audit a DP trainer's implementation white-box, with gradient canaries.

Runs the registered trainer ``--runs`` times on a small built-in dataset, each run hosting
``--canaries`` Dirac gradient canaries included by fair coins (Nasr et al. 2023), and tests the
``privacy.json`` each run writes against what the canaries saw (:mod:`dpaudit.whitebox`). Writes
``whitebox.json``, per-canary scores and ``index.html`` to ``--out``.

Like ``dpaudit train`` it holds the lock of ``--out`` for the whole audit and checks ``--out`` (writable, new,
its own earlier work, or dpaudit's with ``--overwrite``) before any run starts. The dataset and each finished
run are kept in ``--out/runs/`` until the audit directory replaces it, so Ctrl-C, a killed worker or a failed
write loses no finished run: the same command resumes them, and once the audit is written it returns it.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import tempfile
import types
import typing
from pathlib import Path
from typing import Any, TypedDict

import click

_EPILOG = (
    "Example: dpaudit audit-trainer --trainer edp-sgd --set mode=dp-sgd --target-epsilon 4 --runs 5 "
    "--out audits/dpsgd-eps4"
)

#: The audit's training data: a tiny inject directory of the built-in corpus (its rows matter little:
#: the canaries live on coordinates of their own).
AUDIT_INJECT = (
    "--corpus",
    "builtin:assistant",
    "--corpus-size",
    "210",
    "--heldout-size",
    "24",
    "--public-size",
    "96",
    "--frequencies",
    "1",
    "--per-frequency",
    "1",
    "--seed",
    "0",
)
#: Default sampling rate q of the audit runs: high enough that the claimed mechanism is nearly Gaussian
#: (one-run audits are tightest there), low enough that a sampling rate under-stated by half still shows.
SAMPLING_RATE = 0.5
#: Default steps of each audit run.
AUDIT_STEPS = 4
#: The smallest --target-epsilon: ten steps of the PLD accountant's discretization (1e-4). A smaller claim is stated
#: to worse than 10% and a huge calibrated noise reads as epsilon 0, a claim no audit can be a share of.
MIN_TARGET_EPSILON = 1e-3


class _AuditPlan(TypedDict):
    """The keywords of :func:`audit_config` every run of one audit shares (the rows differ)."""

    target_epsilon: float
    noise_seed: int | None
    settings: tuple[str, ...]
    sampling_rate: float
    steps: int


def _field_value(field: dataclasses.Field, text: str, config_cls: type) -> Any:
    """``text`` as the type the config field is annotated with (bool, int, float or str; Optional: "none")."""
    tp = typing.get_type_hints(config_cls).get(field.name, str)
    options = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(options) < len(typing.get_args(tp)) and text.lower() in ("none", "null"):
        return None
    base = options[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) else tp
    if base is bool:
        if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1", "yes")
    if base in (int, float):
        try:
            return base(text)
        except ValueError:
            raise ValueError(
                f"{field.name} must be {'an integer' if base is int else 'a number'}, got {text!r}"
            ) from None
    return text


def _overrides(config_cls: type, settings: tuple[str, ...]) -> dict[str, Any]:
    return {name: value for name, (_item, value) in _set_items(config_cls, settings).items()}


def _set_items(config_cls: type, settings: tuple[str, ...]) -> dict[str, tuple[str, Any]]:
    """``--set KEY=VALUE`` items by field: (the item as given, its typed value); a one-line error naming the item."""
    from dpaudit.common.errors import UserInputError

    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    out: dict[str, tuple[str, Any]] = {}
    for item in settings:
        key, sep, value = item.partition("=")
        name = key.strip().replace("-", "_")
        if not sep or name not in fields:
            known = ", ".join(sorted(fields))
            raise UserInputError(
                f"--set {item!r}: expected KEY=VALUE with KEY a field of the trainer's config ({known})."
            )
        try:
            out[name] = (item, _field_value(fields[name], value.strip(), config_cls))
        except ValueError as err:
            raise UserInputError(f"--set {item!r}: {err}.") from None
    return out


def audit_config(
    trainer: Any,
    *,
    target_epsilon: float,
    rows: int,
    noise_seed: int | None,
    settings: tuple[str, ...],
    sampling_rate: float = SAMPLING_RATE,
    steps: int = AUDIT_STEPS,
) -> Any:
    """The trainer's smallest config (``tiny_config``) with the audit's plan: ``target_epsilon``, about
    ``steps`` steps at q ~ ``sampling_rate`` over ``rows`` rows (trainers that count epochs: epochs of
    ceil(1 / q) steps); ``--set`` overrides last.

    Raises:
        UserInputError: the config refuses a value, naming what the user gave that set it: a ``--set`` item, or
            the audit-trainer option the plan's value comes from (``--sampling-rate`` sets the batch size,
            ``--steps`` the steps or epochs), never ``--set`` for a value it did not set.
    """
    from dpaudit.common.errors import UserInputError
    from dpaudit.training.config_types import ConfigTypeError, option_name

    names = {f.name for f in dataclasses.fields(trainer.Config)}
    batch = max(2, math.floor(rows * sampling_rate))
    plan: dict[str, Any] = {
        "target_epsilon": target_epsilon,
        "noise_multiplier": None,
        "noise_seed": noise_seed,
        "batch_size": batch,
    }
    # Where each planned value comes from, as the user can find it on their command line.
    origin = {
        "target_epsilon": f"--target-epsilon {target_epsilon:g}",
        "noise_seed": "--noise-seed",
        "batch_size": f"--sampling-rate {sampling_rate:g} (the audit's batch size {batch} of {rows} rows)",
    }
    if "non_private" in names:
        plan["non_private"] = False
    if "epochs" in names:
        plan["epochs"] = max(1, round(steps / math.ceil(1 / sampling_rate)))
        origin["epochs"] = f"--steps {steps} ({plan['epochs']} epochs of {math.ceil(1 / sampling_rate)} steps)"
    elif "steps" in names:
        plan["steps"] = steps
        origin["steps"] = f"--steps {steps}"
    plan = {k: v for k, v in plan.items() if k in names}
    items = _set_items(trainer.Config, settings)

    def build(chosen: dict[str, tuple[str, Any]]) -> Any:
        """The config with the plan and ``chosen`` items, or the error refusing it."""
        try:
            return trainer.tiny_config(**{**plan, **{name: value for name, (_item, value) in chosen.items()}})
        except (TypeError, ValueError) as err:
            return err

    error = build(items)
    if not isinstance(error, (TypeError, ValueError)):
        return error
    # Which of the user's inputs the refusal is about: the --set items that fail alone (or all of them together),
    # unless the plan fails without them; and the planned values the message names (ConfigTypeError's field, or
    # the option spelling of a field).
    text = str(error)
    named = (
        [error.field]
        if isinstance(error, ConfigTypeError)
        else [name for name in names if re.search(re.escape(option_name(name)) + r"(?![\w-])", text)]
    )
    blamed: list[str] = []
    if items and not isinstance(build({}), Exception):
        alone = [name for name, item in items.items() if isinstance(build({name: item}), Exception)]
        alone = [name for name in alone if name in named] or alone or list(items)  # the one the message names first
        blamed += [f"--set {items[name][0]}" for name in alone]
    blamed += [origin[name] for name in named if name in origin and name not in items]
    if not blamed:
        blamed = [origin[name] for name in ("target_epsilon", "batch_size", "epochs", "steps") if name in origin]
    if blamed == [origin.get("target_epsilon")] and text.startswith("--target-epsilon "):
        raise UserInputError(text) from None  # the config's own words already name the option the user gave
    raise UserInputError(f"{' with '.join(blamed)}: {text}") from None


@click.command("audit-trainer", epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.option("--trainer", "trainer_name", required=True, help="A registered trainer (see `dpaudit train --help`).")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Audit directory to write (whitebox.json, scores/, index.html).",
)
@click.option(
    "--target-epsilon",
    type=click.FloatRange(min=0, min_open=True),
    default=4.0,
    show_default=True,
    help="The epsilon each audit run is calibrated to (the claim under test).",
)
@click.option(
    "--canaries",
    type=click.IntRange(min=2, max=10**6),
    default=100000,
    show_default=True,
    help="Gradient canaries per run, each a member by a fair coin (they cost no model work: more is "
    "tighter). Micro-batch trainers: at most their micro-batches per step (see --set micro_batches=K).",
)
@click.option(
    "--sampling-rate",
    type=click.FloatRange(min=0, max=1, min_open=True),
    default=SAMPLING_RATE,
    show_default=True,
    help="q of the audit runs (the expected batch over all rows, real and audit).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1, max=10**5),
    default=AUDIT_STEPS,
    show_default=True,
    help="Steps of each audit run (about: trainers that count epochs round to whole epochs).",
)
@click.option(
    "--runs",
    type=click.IntRange(min=1, max=10**4),
    default=1,
    show_default=True,
    help="Independent training runs; more pool their canaries (the many-run audit).",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs trained at once on the model fleet (Ray when installed, else a process pool), each in its own "
    "worker process; 1: one after another in this process (a jax trainer then compiles its step once).",
)
@click.option(
    "--ray-address",
    default=None,
    metavar="ADDR",
    help="Train the runs on this Ray cluster (e.g. ray://host:10001); every node needs dpaudit installed.",
)
@click.option(
    "--partners",
    type=click.IntRange(min=1, max=1000),
    default=16,
    show_default=True,
    help="Micro-batch trainers: partner rows per canary (so one example's move can reach 2C).",
)
@click.option(
    "--confidence",
    type=click.FloatRange(min=0.5, max=1, min_open=True, max_open=True),
    default=0.95,
    show_default=True,
    help="Confidence of the verdict (each of its two bounds at half the risk).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a field of the trainer's config (repeatable), e.g. --set mode=dp-sgd.",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=None,
    help="Seed of the auditor's coin flips [default: OS entropy]. The trainer's noise stays secret.",
)
@click.option(
    "--noise-seed",
    type=click.IntRange(min=0, max=2**63 - 1),
    default=None,
    help="Fix the trainer's secret noise (reproducible audits of the implementation; never recorded).",
)
@click.option("--overwrite", is_flag=True, help="Replace an existing audit directory written by dpaudit.")
@click.option(
    "--setup",
    default=None,
    metavar="FILE.py:FUNCTION",
    help="Library trainers (--trainer opacus): audit your own model, optimizer and loader, built by this function.",
)
def audit_trainer(
    trainer_name: str,
    out: Path,
    target_epsilon: float,
    canaries: int,
    sampling_rate: float,
    steps: int,
    runs: int,
    partners: int,
    confidence: float,
    settings: tuple[str, ...],
    seed: int | None,
    noise_seed: int | None,
    overwrite: bool,
    workers: int = 1,
    ray_address: str | None = None,
    setup: str | None = None,
) -> None:
    """Audit a DP trainer's implementation with white-box gradient canaries (Nasr et al. 2023).

    Each run trains the trainer on a tiny built-in dataset plus CANARIES audit rows: a canary's gradient
    is a Dirac vector on a coordinate reserved for it, so clipping moves that coordinate by exactly C
    (by up to 2C with the partners of micro-batch clipping) and the noisy update shows the mechanism
    itself. The claim under test is the privacy.json of the run. The verdict rests on two bounds, each
    at half the risk: the one-run f-DP proof (Mahloujifar et al. 2024, no assumption) and the pooled
    bound over all canaries (valid when the trainer treats canaries independently, as DP-SGD does);
    Steinke et al.'s one-run bound and the last-iterate view are reported beside them.
    """
    from dpaudit.common.errors import UserInputError
    from dpaudit.files.run_dirs import REDACTED, redact_config, run_dir_lock
    from dpaudit.training.api import load_trainer, plugin_class

    if target_epsilon < MIN_TARGET_EPSILON:
        raise UserInputError(
            f"--target-epsilon {target_epsilon:g} is below {MIN_TARGET_EPSILON:g}: the accountant states "
            "epsilon on a grid of 1e-4, so such a claim reads as about 0 and no audit bound can be "
            f"compared with it; audit a claim of at least {MIN_TARGET_EPSILON:g}."
        )
    if ray_address is not None:  # before anything starts: Ray's own answer is a traceback, or minutes of retries
        from dpaudit.fleet.fleet import check_ray_address

        ray_address = check_ray_address(ray_address)
    trainer = load_trainer(trainer_name)
    from dpaudit.training.gradient_path import gradient_path_host

    if gradient_path_host(trainer) is not None:  # the library owns the step: canaries through its gradient path
        from dpaudit.cli.audit_library import audit_library

        if workers > 1 or ray_address:
            raise UserInputError(
                f"--trainer {trainer_name} trains its audit runs one after another in this process; drop "
                f"{'--workers' if workers > 1 else '--ray-address'}."
            )

        audit_library(
            trainer,
            trainer_name,
            out,
            setup=setup,
            target_epsilon=target_epsilon,
            canaries=canaries,
            sampling_rate=sampling_rate,
            steps=steps,
            runs=runs,
            confidence=confidence,
            settings=settings,
            seed=seed,
            noise_seed=noise_seed,
            overwrite=overwrite,
            helpers=sys.modules[__name__],
        )
        return
    if setup is not None:
        raise UserInputError(f"--setup {setup}: only a library trainer (--trainer opacus) trains a setup file.")
    plugin_cls = plugin_class(trainer)
    if not all(
        hasattr(plugin_cls, name) for name in ("gradient_canary_unit", "host_gradient_canaries", "canary_parameters")
    ):
        raise UserInputError(
            f"--trainer {trainer_name}: its plug-in does not host gradient canaries "
            "(dpaudit.training.gradient_canaries.GradientCanaryHost); it cannot be audited white-box."
        )
    _check_sampling(trainer, trainer_name, settings)
    given = _noise_seed_option(noise_seed, _overrides(trainer.Config, settings))
    if given is not None and runs > 1:  # every run would draw the same noise and sampling: not independent
        raise UserInputError(
            f"{given} with --runs {runs}: a fixed noise seed makes every run draw the same noise "
            "and Poisson sampling, so the runs are not the independent trials the many-run bound "
            f"pools; drop {given} (OS entropy) or use --runs 1."
        )
    # What the manifest records (secrets redacted): a rerun with the same settings is this very audit.
    audit_settings = redact_config(
        {
            "target_epsilon": target_epsilon,
            "canaries": canaries,
            "sampling_rate": sampling_rate,
            "steps": steps,
            "runs": runs,
            "partners": partners,
            "confidence": confidence,
            "seed": seed,
            "set": list(settings),
            "noise_seed": None if given is None else REDACTED,
        }
    )
    identity = {"trainer": trainer_name, **audit_settings}
    check_out(out, identity, overwrite=overwrite)  # refuse a bad --out before any training, and again under the lock
    with run_dir_lock(out, stage=f"audit-trainer --trainer {trainer_name}"):
        body = None if overwrite else finished_audit(out, identity)
        if body is not None:  # this very command finished here: its result, nothing run or written
            click.echo(
                f"note: --out {out} holds this audit, finished (the same command; its files verified): nothing "
                "was run or written; pass --overwrite to run it again.",
                err=True,
            )
            click.echo(_verdict_text(body, trainer_name, out))
            return
        work = check_out(out, identity, overwrite=overwrite, locked=True)
        created = not out.exists()
        try:
            work.mkdir(parents=True, exist_ok=True)
            _check_writable(out, work)
            _write_identity(work, identity)
        except OSError as err:
            _discard(work, out if created else None)
            raise UserInputError(
                f"--out {out}: cannot write in it ({err.strerror or err}); choose a writable location."
            ) from None
        try:
            analysis, evidence, config = _audit(
                trainer,
                trainer_name,
                work,
                target_epsilon=target_epsilon,
                canaries=canaries,
                sampling_rate=sampling_rate,
                steps=steps,
                runs=runs,
                partners=partners,
                confidence=confidence,
                settings=settings,
                seed=seed,
                noise_seed=noise_seed,
                workers=workers,
                ray_address=ray_address,
            )
        except (KeyboardInterrupt, click.Abort):
            kept = _kept_runs(work, runs)
            if not kept:
                _discard(work, out if created else None)
            click.echo(f"\ninterrupted: {_kept_text(kept, runs, work)}", err=True)
            raise SystemExit(130) from None
        except UserInputError as err:
            kept = _kept_runs(work, runs)
            if not kept:
                _discard(work, out if created else None)
                raise
            raise UserInputError(f"{err} ({_kept_text(kept, runs, work)})") from None
        except BaseException:
            kept = _kept_runs(work, runs)
            if not kept:
                _discard(work, out if created else None)
            else:
                click.echo(f"error: {_kept_text(kept, runs, work)}", err=True)
            raise
        from dpaudit.report.whitebox import write_page
        from dpaudit.whitebox.analysis import summary
        from dpaudit.whitebox.audit import write_audit

        public_config = config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
        write_audit(
            out,
            analysis,
            evidence,
            trainer=trainer_name,
            config=public_config,
            settings=audit_settings,
            overwrite=overwrite,
            page=write_page,
            work=work.name,
        )
    click.echo(_verdict_text(summary(analysis), trainer_name, out))


#: The folder of ``--out`` that keeps the audit's dataset and finished runs until the audit is written.
WORK_DIR = "runs"
#: The file in :data:`WORK_DIR` that says whose runs they are (the audit's settings, secrets redacted).
WORK_IDENTITY = "audit.json"
WORK_SCHEMA = "dpaudit.whitebox-runs/1"


def _check_sampling(trainer: Any, trainer_name: str, settings: tuple[str, ...]) -> None:
    """Refuse, before any run, a config whose batches are not Poisson-sampled: its ``privacy.json`` states no epsilon
    (``proven: false``), so there is no claim to audit (the run used to train, then fail with a traceback)."""
    from dpaudit.common.errors import UserInputError

    fields = {f.name: f for f in dataclasses.fields(trainer.Config)}
    if "sampling" not in fields:
        return
    default = fields["sampling"].default
    sampling = _overrides(trainer.Config, settings).get("sampling", default)
    if sampling in ("poisson", dataclasses.MISSING):
        return
    given = next(
        (f"--set {item}" for item in settings if item.partition("=")[0].strip().replace("-", "_") == "sampling"),
        f"--trainer {trainer_name} (sampling={sampling} by default)",
    )
    raise UserInputError(
        f"{given}: {sampling} batches have no proven epsilon (privacy.json states none), so the run "
        "makes no claim to audit; audit Poisson sampling (--set sampling=poisson)."
    )


def _noise_seed_option(noise_seed: int | None, overrides: dict[str, Any]) -> str | None:
    """How a fixed noise seed was given (``--noise-seed`` or ``--set noise_seed``), or None (OS entropy).

    Raises:
        UserInputError: both ways at once.
    """
    from dpaudit.common.errors import UserInputError

    by_set = overrides.get("noise_seed") is not None
    if noise_seed is not None and by_set:
        raise UserInputError("--noise-seed and --set noise_seed both fix the trainer's secret noise seed; keep one.")
    return "--noise-seed" if noise_seed is not None else "--set noise_seed" if by_set else None


def _read_identity(work: Path) -> dict[str, Any] | None:
    """The settings of the audit whose runs ``work`` keeps, or None when it is not such a folder."""
    import json

    try:
        stored = json.loads((work / WORK_IDENTITY).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("schema") != WORK_SCHEMA or not isinstance(stored.get("audit"), dict):
        return None
    return stored["audit"]


def _write_identity(work: Path, identity: dict[str, Any]) -> None:
    from dpaudit.files.run_dirs import atomic_write_json

    if _read_identity(work) is None:
        atomic_write_json(
            work / WORK_IDENTITY,
            {
                "schema": WORK_SCHEMA,
                "audit": identity,
                "note": "the finished runs of an unfinished dpaudit audit-trainer: "
                "rerun its command to resume (private to the data owner).",
            },
        )


def check_out(out: Path, identity: dict[str, Any], *, overwrite: bool, locked: bool = False) -> Path:
    """Check ``--out`` before any run (and again under its lock) and return the folder that keeps the runs.

    ``--out`` may be new or empty; hold the kept runs of this very audit (resumed); hold a finished audit of this
    very command (returned by :func:`finished_audit`); or, with ``--overwrite``, hold only what dpaudit wrote. The
    kept runs of an audit with other settings are discarded only with ``--overwrite``, and only by the process
    that holds the lock of ``--out`` (``locked``).

    Raises:
        UserInputError: naming ``--out`` and what to do.
    """
    import shutil

    from dpaudit.common.errors import UserInputError
    from dpaudit.files.run_dirs import prepare_output_dir, refuse_foreign, same_json

    prepare_output_dir(out, overwrite=True, only_own=False)  # a file, the current directory, a parent that is a file
    work = out / WORK_DIR
    stored = _read_identity(work)
    if stored is not None and not same_json(stored, identity):
        if not overwrite:
            differing = sorted(k for k in set(stored) | set(identity) if not same_json(stored.get(k), identity.get(k)))
            detail = ", ".join(f"{k} {stored.get(k)!r} -> {identity.get(k)!r}" for k in differing[:4])
            raise UserInputError(
                f"--out {out} keeps the finished runs of an audit with other settings ({detail}) in "
                f"{work}; rerun that command to finish it, or pass --overwrite to discard them."
            )
    ours = stored is not None
    others = [p for p in out.iterdir() if not (ours and p == work)] if out.is_dir() else []
    if others:
        if not overwrite and finished_audit(out, identity) is None:
            raise UserInputError(
                f"--out {out} exists and is not empty; pass --overwrite to replace it or choose another path."
            )
        refuse_foreign(out, ignore=(WORK_DIR,) if ours else ())
    if ours and overwrite and locked and not same_json(stored, identity):
        shutil.rmtree(work)
    return work


def finished_audit(out: Path, identity: dict[str, Any]) -> dict[str, Any] | None:
    """The ``whitebox.json`` of a finished audit of this very command in ``out`` (its manifest records the same
    settings and every file verifies), or None."""
    import json

    from dpaudit.files.run_dirs import finished_output, same_json
    from dpaudit.whitebox.audit import PATH_LABELS

    manifest = finished_output(out, schema_prefix="dpaudit.whitebox/")
    recorded = manifest.get("config") if manifest is not None else None
    if isinstance(recorded, dict):  # the canary-path label describes the canaries, not the command
        recorded = {key: value for key, value in recorded.items() if key not in PATH_LABELS}
    if manifest is None or not same_json(recorded, identity):
        return None
    try:
        return json.loads((out / "whitebox.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _check_writable(out: Path, work: Path) -> None:
    """Create and remove a file in ``--out`` and in ``work`` before any run: a read-only ``--out`` is found now, not
    after every run (the audit is written into ``--out``'s parent and replaces ``--out`` as a whole: the lock, taken
    beside it, proved the parent writable)."""
    import os

    for folder in (out, work):
        fd, probe = tempfile.mkstemp(prefix=".dpaudit-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)


def _discard(work: Path, out: Path | None) -> None:
    """Remove ``work`` (nothing in it is worth keeping), and ``out`` when this command created it and it is empty."""
    import shutil

    shutil.rmtree(work, ignore_errors=True)
    if out is not None:
        try:
            out.rmdir()
        except OSError:
            pass


def _kept_runs(work: Path, runs: int) -> int:
    from dpaudit.whitebox.audit import finished_run

    return sum(finished_run(work, r) for r in range(runs))


def _kept_text(kept: int, runs: int, work: Path) -> str:
    if not kept:
        return "no audit run had finished; nothing is kept."
    return (
        f"{kept} of {runs} audit runs finished and are kept in {work}; run the same dpaudit audit-trainer command "
        "again to resume (--overwrite discards them)."
    )


def _audit(
    trainer: Any,
    trainer_name: str,
    work: Path,
    *,
    target_epsilon: float,
    canaries: int,
    sampling_rate: float,
    steps: int,
    runs: int,
    partners: int,
    confidence: float,
    settings: tuple[str, ...],
    seed: int | None,
    noise_seed: int | None,
    workers: int,
    ray_address: str | None,
) -> tuple[Any, Any, Any]:
    """The audit's runs in ``work`` (its dataset in ``work/data``, run r in ``work/run-r``; finished ones kept and read
    back): (analysis, evidence, the trainer config of the runs)."""
    from dpaudit.whitebox.audit import RegisteredRuns
    from dpaudit.whitebox.audit import audit_trainer as run_audit

    plugin_cls = trainer.Plugin
    data_dir = work / "data"
    _inject(data_dir)
    real_rows = _train_rows(data_dir)
    plan: _AuditPlan = {
        "target_epsilon": target_epsilon,
        "noise_seed": noise_seed,
        "settings": settings,
        "sampling_rate": sampling_rate,
        "steps": steps,
    }
    probe = audit_config(trainer, rows=real_rows + canaries, **plan)
    with tempfile.TemporaryDirectory(prefix="dpaudit-audit-probe-") as scratch:
        unit, slots = plugin_cls(data_dir, Path(scratch) / "probe", probe, seed=0).gradient_canary_unit()
    if (
        unit == "micro-batch"
        and canaries > slots
        and not any(s.split("=")[0].strip().replace("-", "_") == "micro_batches" for s in settings)
    ):
        # One canary per micro-batch: the micro-batch count is a public parameter that the claim (2C per
        # example) does not depend on, so the audit may choose it.
        click.echo(
            f"note: micro-batch clipping: the audit runs {canaries} micro-batches per step, one per canary "
            "(--set micro_batches=K to choose).",
            err=True,
        )
        plan["settings"] = (*settings, f"micro_batches={canaries}")
        slots = canaries
    if unit == "micro-batch" and canaries > slots:
        click.echo(
            f"warning: {canaries} canaries share {slots} micro-batches: canaries in one micro-batch are "
            f"clipped together, which costs power (--set micro_batches={canaries} gives each its own).",
            err=True,
        )
    rows = real_rows + canaries * (1 + (partners if unit == "micro-batch" else 0))
    config = audit_config(trainer, rows=rows, **plan)
    cost = _announce_cost(
        config,
        jax=trainer_name == "jax-bert",
        canaries=canaries,
        runs=runs,
        partners=partners if unit == "micro-batch" else 0,
        sampling_rate=sampling_rate,
        workers=workers,
        fleet=workers > 1 or bool(ray_address),
    )
    if workers > 1 or ray_address:  # the runs as jobs of the model fleet (its own progress bar)
        # The fields as they are (a --noise-seed travels to the workers in memory, never to a file).
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        runs_spec = RegisteredRuns(
            trainer=trainer_name, config=fields, data_dir=data_dir, workers=workers, ray_address=ray_address
        )
        analysis, evidence = run_audit(
            runs_spec,
            canaries=canaries,
            runs=runs,
            partners=partners,
            confidence=confidence,
            seed=seed,
            workdir=work,
            progress=lambda done, total: _analysis_note(done, total, cost),
        )
    else:
        bar = click.progressbar(length=runs, label=f"audit-trainer {trainer_name}: runs", file=sys.stderr)
        with bar:
            analysis, evidence = run_audit(
                lambda run_out: plugin_cls(data_dir, run_out, config, seed=0),
                canaries=canaries,
                runs=runs,
                partners=partners,
                confidence=confidence,
                seed=seed,
                workdir=work,
                progress=lambda done, total: _runs_done(bar, done, total, cost),
            )
    return analysis, evidence, config


def _announce_cost(
    config: Any,
    *,
    jax: bool,
    canaries: int,
    runs: int,
    partners: int,
    sampling_rate: float,
    workers: int,
    fleet: bool,
) -> Any:
    """The audit's cost (:mod:`dpaudit.whitebox.cost`): refused before any run when it cannot fit (a worker's memory
    bound, this machine's memory), said first when it is long: time and memory, then the CPU time from the measured
    table scaled by this machine's speed and the wall time at the current load."""
    from dpaudit.whitebox import cost as audit_cost

    steps = getattr(config, "steps", None)
    if not isinstance(steps, int):
        steps = max(1, int(getattr(config, "epochs", None) or 1)) * math.ceil(1 / sampling_rate)
    cost = audit_cost.estimate(canaries=canaries, runs=runs, steps=steps, partners=partners)
    audit_cost.check_fits(cost, fleet=fleet)
    if audit_cost.worth_saying(cost):
        from dpaudit.common import cost_model

        click.echo(audit_cost.describe(cost, workers=workers), err=True)
        for line in cost_model.estimate(audit_cost.cpu_works(cost, jax=jax)).lines():
            click.echo(line, err=True)
    return cost


def _runs_done(bar: Any, done: int, total: int, cost: Any) -> None:
    """The runs bar; once the last run is in, a line for the analysis when it is long (its bounds score every
    canary: minutes at a million canaries)."""
    bar.update(done - bar.pos)
    _analysis_note(done, total, cost, newline=True)


def _analysis_note(done: int, total: int, cost: Any, *, newline: bool = False) -> None:
    if done == total and cost.analysis_seconds >= 15:
        click.echo(
            f"{chr(10) if newline else ''}audit-trainer: analysing {cost.runs * cost.canaries:,} canaries (about "
            f"{math.ceil(cost.analysis_seconds):,} s) ...",
            err=True,
        )


def _inject(data_dir: Path) -> None:
    """The audit's dataset in ``data_dir`` (kept with the runs: a resumed audit trains on the same files)."""
    import shutil

    from click.testing import CliRunner

    from dpaudit.cli import cli
    from dpaudit.files.run_dirs import finished_output

    if data_dir.exists() and finished_output(data_dir, schema_prefix="dpaudit.inject/") is not None:
        return
    shutil.rmtree(data_dir, ignore_errors=True)  # a damaged or unfinished copy of the audit's own dataset
    result = CliRunner().invoke(cli, ["inject", *AUDIT_INJECT, "--out", str(data_dir)], catch_exceptions=False)
    if result.exit_code != 0:
        raise RuntimeError(f"the audit's built-in inject failed: {result.output}")


def _train_rows(data_dir: Path) -> int:
    from dpaudit.inject_dir.reader import load_inject_run

    return len(load_inject_run(data_dir).train_texts)


def _verdict_text(body: dict[str, Any], trainer: str, out: Path) -> str:
    """What the audit prints: its claim, its verdict's bound and the verdict, from the summary ``whitebox.json``
    holds (:func:`dpaudit.whitebox.analysis.summary`), so that a rerun of a finished audit prints the same lines."""
    from dpaudit.common.figures import format_down, format_up

    claim, primary = body["claim"], body["primary"]
    bound = float(primary["epsilon"])
    lines = [
        f"{trainer}: claimed epsilon {format_up(claim['epsilon'])} (delta {claim['delta']:g}, {claim['steps']} steps).",
        f"white-box lower bound ({primary['kind']}, all iterates, {body['confidence']:.0%} with its twin): "
        f"epsilon >= {format_down(bound)}"
        + (
            f" = {math.floor(100 * bound / claim['epsilon']) / 100:.2f} of the claim."
            if claim["epsilon"] > 0
            else " (the claim is 0: no share)."
        ),
    ]
    if body["refuted"]:
        lines.append("VERDICT: the claim is REFUTED: the trainer leaks more than its privacy.json says.")
    else:
        lines.append(
            "verdict: consistent with the claim (the audit found no violation; a bound below the claim "
            "proves nothing more)."
        )
    lines.append(f"written: {out}/index.html")
    return "\n".join(lines)
