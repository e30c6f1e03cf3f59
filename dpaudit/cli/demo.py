"""``dpaudit demo``: inject -> train (non-private and epsilon 8) -> attack -> one comparison report.

A thin shell over :mod:`dpaudit.demo`: the plan (sizes and commands), the resumable stage runner and
the verdict. Every stage is the ``dpaudit`` command a user would type, printed before it runs.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dpaudit.demo.console import Caveats
from dpaudit.training.api import available_trainers
from dpaudit.training.config_types import seed_type

if TYPE_CHECKING:
    from dpaudit.demo.plan import DemoSizes, Stage


def _model_summary(model: Path) -> str:
    """Epsilon (recomputed from the stored DpEvent, rounded up) with its caveats, and the last held-out
    accuracy (telemetry on private data) of a train run."""
    from dpaudit.claim.record import group_privacy_text
    from dpaudit.common.figures import format_up
    from dpaudit.files.run_dirs import read_jsonl
    from dpaudit.scoring.source import read_privacy_record
    from dpaudit.training.baselines import UTILITY_KINDS, eval_rows_text

    record = read_privacy_record(model / "privacy.json")
    if record.private:
        eps = record.recompute_epsilon()
        delta = format_up(record.delta, 2)
        if record.epsilon is None:  # e.g. --sampling shuffle: no proven figure
            claim = f"NO proven epsilon (epsilon_if_poisson = {format_up(eps, 3)} at delta = {delta})"
        else:
            claim = f"epsilon = {format_up(eps, 3)} at delta = {delta} for model/ only"
        groups = [f"{row['frequency']}x: {group_privacy_text(row)}" for row in record.group_privacy]
        if groups:
            claim += "; canaries repeated f times get only group privacy (" + ", ".join(groups) + ")"
        claim += "; " + record.randomness.rstrip(".")
    elif record.public_data_only:
        claim = "public model (trained on public.jsonl only, non-private: nothing private went into it)"
    else:
        claim = "non-private (epsilon = inf)"
    if record.init_from:
        claim += f"; started from {record.init_from.get('path', 'a public model')}"
    rows = list(read_jsonl(model / "metrics.jsonl"))
    for kind in UTILITY_KINDS:  # each held-out figure beside its trivial baseline
        key = next((k for k in kind.keys if any(row.get(k) is not None for row in rows)), None)
        if key is None:
            continue
        last = [row for row in rows if row.get(key) is not None][-1]
        base = last.get(kind.baseline_key)
        evaluated = eval_rows_text(last)  # "on 512 of 880 held-out rows" (not the metrics rows the loop reads)
        claim += (
            f"; {kind.name} {last[key]:.1%}"
            + ("" if evaluated is None else f" {evaluated}")
            + (f" ({kind.rule} {base:.1%})" if base is not None else "")
            + " (telemetry, not covered)"
        )
    return claim


def _model_line(model: Path, caveats: Caveats, notes: list[str]) -> str:
    """One line per model for the compact terminal: its claim and held-out figure, the caveats that apply to it by
    name; each caveat's full text is appended to ``notes`` the first time the command names it (:class:`Caveats`)."""
    from dpaudit.claim.record import group_privacy_text
    from dpaudit.common.figures import format_up
    from dpaudit.files.run_dirs import read_jsonl
    from dpaudit.scoring.source import read_privacy_record
    from dpaudit.training.baselines import UTILITY_KINDS

    record = read_privacy_record(model / "privacy.json")
    named: list[str] = []

    def name(key: str, text: str) -> None:
        named.append(key)
        full = caveats.say(key, text)
        if full is not None:
            notes.append(f"[{key}] {full}")

    if record.private:
        eps, delta = record.recompute_epsilon(), format_up(record.delta, 2)
        if record.epsilon is None:
            line = f"NO proven epsilon (epsilon_if_poisson = {format_up(eps, 3)} at delta = {delta})"
        else:
            line = f"epsilon = {format_up(eps, 3)} at delta = {delta} for model/ only"
        groups = [f"{row['frequency']}x {group_privacy_text(row)}" for row in record.group_privacy]
        if groups:
            line += "; groups: " + ", ".join(g.replace(" (group delta >= 1)", "") for g in groups)
            name(
                "group privacy",
                "a canary inserted f times is a group of f rows, which the per-example epsilon covers only by group "
                f"privacy: {record.group_privacy[0].get('bound', '')}",
            )
        if record.public_parameters and record.n_public:
            name("N public", record.public_parameters)
        if record.noise_seed_explicit:
            name("noise seed", record.randomness.rstrip("."))
        name("what epsilon covers", COVERAGE)
    elif record.public_data_only:
        line = "public model (trained on public.jsonl only, non-private: nothing private went into it)"
    else:
        line = "non-private (epsilon = inf)"
    if record.init_from:
        line += f"; started from {Path(str(record.init_from.get('path', 'a public model'))).name}"
    rows = list(read_jsonl(model / "metrics.jsonl"))
    for kind in UTILITY_KINDS:
        key = next((k for k in kind.keys if any(row.get(k) is not None for row in rows)), None)
        if key is None:
            continue
        last = [row for row in rows if row.get(key) is not None][-1]
        base = last.get(kind.baseline_key)
        line += f"; {kind.name} {last[key]:.1%}" + (f" (trivial {base:.1%})" if base is not None else "")
        if not record.public_data_only:
            name("telemetry", "held-out figures are telemetry on the data owner's rows, not covered by epsilon")
    return line + (f" [{', '.join(named)}]" if named else "")


#: What every private model's epsilon covers (said once per demo).
COVERAGE = (
    "epsilons and deltas are rounded up and cover each model/ (and privacy.json) only; manifest.json, metrics.jsonl "
    "and checkpoints/ are computed from the private rows without noise: for the data owner only, not covered"
)


def _cost_lines(stages: Sequence[Stage], sizes: DemoSizes, state: Path) -> list[str]:
    """The estimated CPU and wall time of the stages still to run (:mod:`dpaudit.demo.cost`), said before the first
    one; nothing when every stage is complete (the probe is not run then)."""
    from dpaudit.common.cost_model import estimate
    from dpaudit.demo.cost import plan_work
    from dpaudit.demo.stages import is_complete

    todo = [s for s in stages if not is_complete(s, state)]
    if not any(s.schema_prefix is not None for s in todo):  # only the report left: seconds
        return []
    lines = estimate(plan_work(todo, sizes)).lines()
    if len(todo) < len(stages):
        lines[0] = lines[0].replace("in all", f"for the {len(todo)} stages still to run", 1)
    return lines


#: The demo's record of its size in its state folder (``{"quick": bool}``), written when its first stage runs.
SIZE_RECORD = "size.json"


def _recorded_size(out: Path) -> bool | None:
    """Whether the demo in ``out`` is a quick one (None: no demo there, or one that recorded no size)."""
    from dpaudit.demo.stages import STATE_DIR

    for path in (out / STATE_DIR / SIZE_RECORD, out / "stage-times.json"):
        try:
            quick = json.loads(path.read_text(encoding="utf-8")).get("quick")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(quick, bool):
            return quick
    return None


def _check_size(out: Path, quick: bool) -> None:
    """Refuse to run a demo of one size in a folder holding the other: its stages' commands differ, so every stage
    would be replaced (a quick demo silently overwrote a full one)."""
    recorded = _recorded_size(out)
    if recorded is None or recorded == quick:
        return
    from dpaudit.common.errors import UserInputError

    held, asked = ("quick", "full") if recorded else ("full", "quick")
    default = QUICK_OUT if quick else DEFAULT_OUT
    raise UserInputError(
        f"--out {out} holds a {held} demo, which this {asked} demo would replace stage by stage; choose another "
        f"--out (the {asked} demo's default is {default}) or remove {out} if you no longer need it."
    )


def _record_size(out: Path, quick: bool) -> None:
    from dpaudit.demo.stages import STATE_DIR
    from dpaudit.files.run_dirs import atomic_write_json

    if _recorded_size(out) is None:
        (out / STATE_DIR).mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / STATE_DIR / SIZE_RECORD, {"quick": quick})


def _run_logged(cli: click.Group, args: list[str], log: Path, caveats: Caveats, *, warnings: bool = True) -> None:
    """Run one stage's command with its standard output in ``log`` and its standard error filtered
    (:class:`dpaudit.demo.console.StageStderr`: bars and each new warning on the terminal, all of it in ``log``)."""
    import contextlib
    import sys

    from dpaudit.demo.console import StageStderr

    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as stream:
        stream.write(f"$ dpaudit {shlex.join(args)}\n")
        err = StageStderr(stream, sys.stderr, caveats, warnings=warnings)
        try:
            with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(err):  # type: ignore[type-var]
                cli.main(args=args, prog_name="dpaudit", standalone_mode=False)
        except BaseException:
            err.close_line()
            click.echo(f"      failed; its full output: {log}", err=True)
            raise
        err.close_line()
    if err.repeated:
        click.echo(f"      warning again (in full above): {'; '.join(err.repeated)}")


def _merge_times(path: Path, times: list) -> list[dict]:
    """This run's stage times, keeping a previous run's figure for each stage skipped now."""
    try:
        before = {row["name"]: row for row in json.loads(path.read_text(encoding="utf-8"))["stages"]}
    except (OSError, ValueError, KeyError, TypeError):
        before = {}
    return [before.get(t.name, t.to_json()) if t.skipped else t.to_json() for t in times]


#: The demo's record of the report pages it wrote (resolved path -> sha256), in its state folder: a later demo
#: replaces its own page, and no other file.
PAGES_RECORD = "report-pages.json"


def _check_report(path: Path, state: Path) -> bool:
    """Check ``--report`` before any stage runs; True when it holds the page this demo wrote there before.

    The demo replaces only its own page (its sha256 recorded in ``state`` when it was written): a user's file, a
    link, a path inside a run directory or a report page of another command is refused in one line.
    """
    from dpaudit.common.errors import UserInputError
    from dpaudit.files.run_dirs import check_page_target, sha256_file

    if not check_page_target(path, option="--report"):
        return False
    recorded = _read_pages(state).get(str(path.resolve()))
    if recorded is None or recorded != sha256_file(path):
        raise UserInputError(
            f"--report {path} holds a report page this demo did not write (or one changed since); "
            "choose another --report, or remove that page if you no longer need it."
        )
    return True


def _read_pages(state: Path) -> dict[str, str]:
    try:
        pages = json.loads((state / PAGES_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in pages.items()} if isinstance(pages, dict) else {}


def _record_page(path: Path, state: Path) -> None:
    """Record the page the demo just wrote (so that the next demo may replace it)."""
    from dpaudit.files.run_dirs import atomic_write_json, sha256_file

    atomic_write_json(state / PAGES_RECORD, {**_read_pages(state), str(path.resolve()): sha256_file(path)})


def _classifier_gap() -> str | None:
    """Why the edp-sgd classifiers cannot run here (None: they can)."""
    from dpaudit.common.extras import missing_extra_message, missing_modules

    if "edp-sgd" not in available_trainers() or missing_modules(["torch"]):
        return missing_extra_message(
            "the edp-sgd trainer", ["torch"], missing_modules(["torch"]) or ["dpaudit's trainers"]
        )
    return None


#: Where the demo writes by default; ``--quick`` (another plan: other sizes, fewer attacks) has its own folders, so
#: that ``dpaudit demo --quick`` never replaces the stages of the full demo, nor the full demo the quick one's.
DEFAULT_OUT, QUICK_OUT = Path("runs/demo"), Path("runs/demo-quick")
DEFAULT_REPORT, QUICK_REPORT = Path("reports/demo/index.html"), Path("reports/demo-quick/index.html")


@click.command(epilog="Example: dpaudit demo --quick", context_settings={"max_content_width": 100})
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"Folder for the demo's run directories; rerunning the same command resumes there [default: "
    f"{DEFAULT_OUT}, or {QUICK_OUT} with --quick].",
)
@click.option(
    "--quick",
    is_flag=True,
    help="Smaller corpus, fewer canaries and steps, no LiRA/RMIA (about 4 CPU-minutes instead of 10; the demo prints "
    "its estimate for this machine first).",
)
@click.option(
    "--seed",
    type=seed_type(),
    default=0,
    show_default=True,
    help="Public seed of every stage (data, initialization, masking).",
)
@click.option(
    "--noise-seed",
    type=click.IntRange(min=0),
    default=None,
    help="Seed of the DP noise and Poisson sampling of every training, for tests only (default: OS "
    "entropy; with it the guarantees hold only while the number stays secret).",
)
@click.option(
    "--classifiers/--no-classifiers",
    default=True,
    show_default=True,
    help="Also fine-tune and attack the edp-sgd intent classifiers (needs torch).",
)
@click.option(
    "--causal",
    is_flag=True,
    help="Also train and attack GPT-2-shaped causal LMs on canaries inserted 1, 10 and 100 times (their own "
    "inject directory at the full size; edp-sgd --task clm, needs torch): pretrained on public utterances, then "
    "non-private and DP-SGD at epsilon 8; exposure, "
    "greedy extraction from the prefix, loss, zlib, Min-K%++ and the training-free attacks against the public "
    "start (base-ratio, error-zone, min-k++-base) (about 2 more minutes with --quick).",
)
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Where to write the comparison report: a new file, or the page an earlier demo wrote there (never a "
    f"file of your own, nor any other page) [default: {DEFAULT_REPORT}, or {QUICK_REPORT} with --quick].",
)
@click.option(
    "--verbose",
    is_flag=True,
    help="Print every stage's command and full output (its caveats each time) and the long verdict; without it "
    "each stage's output goes to <out>/.demo/logs/ and the terminal says each caveat once.",
)
def demo(
    out: Path | None,
    quick: bool,
    seed: int,
    noise_seed: int | None,
    classifiers: bool,
    causal: bool,
    report_path: Path | None,
    verbose: bool,
) -> None:
    """Show memorization and what DP does about it, on the built-in voice-assistant corpus.

    Plants digit canaries (inserted 1, 10 and 100 times, plus never-inserted controls) beside public
    utterances, pretrains a tiny BERT on the public ones (jax-bert, non-private, public data only), then
    trains it twice on the private rows (non-private, and DP-SGD at epsilon 8) and, with torch, pretrains
    an intent classifier on public utterances and trains it three times with the edp-sgd trainer (sgd,
    dp-sgd and edp-sgd modes, the last two at epsilon 8); audits the two BERTs' recipe (from scratch) in
    one run on coin-flip new-token canaries (two more trainings, inserted once or not by fair coins);
    attacks every model and writes one comparison report. With --causal, GPT-2-shaped causal LMs trained on the same
    canaries (non-private and at epsilon 8) are attacked too: the Secret Sharer's exposure, extraction of each secret
    from its prefix, and the causal membership attacks. Ctrl-C is safe: rerun the same command to resume.
    """
    from dpaudit.cli import cli
    from dpaudit.common.extras import require_extras
    from dpaudit.demo.plan import AUDIT_SUFFIX, FULL, QUICK, build_plan
    from dpaudit.demo.stages import STATE_DIR, check_out, run_stages
    from dpaudit.demo.verdict import verdict_lines
    from dpaudit.files.run_dirs import atomic_write_json

    require_extras("dpaudit demo", "jax", "torch")  # jax-bert trains, transformers loads every model: one line if not
    # --quick has folders of its own: a quick demo after the full one (or before) must not replace it.
    out = out if out is not None else QUICK_OUT if quick else DEFAULT_OUT
    report_path = report_path if report_path is not None else QUICK_REPORT if quick else DEFAULT_REPORT
    check_out(out)  # before anything is written: never a folder of the user's own
    _check_size(out, quick)  # nor a demo of the other size, whose stages this one would replace
    own_page = _check_report(report_path, out / STATE_DIR)  # never a file of the user's own either
    for option, path in (("--out", out), ("--report", report_path)):  # before minutes of training, not after
        blocked = next((p for p in path.absolute().parents if p.exists() and not p.is_dir()), None)
        if blocked is not None:
            from dpaudit.common.errors import UserInputError

            raise UserInputError(f"{option} {path}: {blocked} is a file, not a folder; choose another path.")
    gap = _classifier_gap() if classifiers else "--no-classifiers"
    if causal and _classifier_gap() is not None:
        raise click.ClickException(f"--causal: {_classifier_gap()}")
    sizes = QUICK if quick else FULL
    plan = build_plan(
        out, sizes, seed=seed, report=report_path, classifiers=gap is None, noise_seed=noise_seed, causal=causal
    )
    inside = next(
        (
            s.output
            for s in plan.stages
            if s.schema_prefix is not None and report_path.resolve().is_relative_to(s.output.resolve())
        ),
        None,
    )
    if inside is not None:
        from dpaudit.common.errors import UserInputError

        raise UserInputError(
            f"--report {report_path} is inside the demo's run directory {inside}; dpaudit never writes a "
            "report into a run directory: choose a path outside it."
        )

    caveats = Caveats()
    logs = out / STATE_DIR / "logs"

    def run(stage: Stage) -> None:
        _record_size(out, quick)
        args = list(stage.args)
        if stage.name == "report" and own_page and report_path.exists():  # the page this demo wrote before
            args.append("--overwrite")
        if verbose:
            click.echo(f"      $ dpaudit {shlex.join(args)}")
            cli.main(args=args, prog_name="dpaudit", standalone_mode=False)
        else:
            if not logs.is_dir():  # said once, when the first stage's log is written
                click.echo(f"      each stage's command and full output: {logs}/ (--verbose prints them here)")
            # an attack's warnings are about its audits: the closing summary reads them from the results
            _run_logged(cli, args, logs / f"{stage.name}.log", caveats, warnings=not stage.name.startswith("attack"))
        if stage.name == "report":
            _record_page(report_path, out / STATE_DIR)

    try:
        trained = [s.output.name.removeprefix("model-") for s in plan.public_models] + [m.label for m in plan.models]
        header = (
            f"dpaudit demo{' --quick' if quick else ''}: {len(plan.stages)} stages, {len(trained)} models "
            f"({', '.join(trained)}) in {out}; Ctrl-C is safe (the same command resumes)"
        )
        header += "".join(f"\n{line}" for line in _cost_lines(plan.stages, sizes, out / STATE_DIR))
        times = run_stages(
            plan.stages, state=out / STATE_DIR, run=run, echo=click.echo, compact=not verbose, header=header
        )
    except (KeyboardInterrupt, click.Abort):
        click.echo(
            "\ninterrupted: finished stages are kept and the unfinished one left nothing that looks complete; "
            "run the same dpaudit demo command again to resume.",
            err=True,
        )
        raise SystemExit(130) from None
    atomic_write_json(
        out / "stage-times.json", {"quick": quick, "stages": _merge_times(out / "stage-times.json", times)}
    )

    models = [(s.output.name.removeprefix("model-"), s.output) for s in plan.public_models]
    models += [(m.label, m.train.output) for m in plan.models]
    click.echo("\nModels:")
    if verbose:
        for label, path in models:
            click.echo(f"  - {label}: {_model_summary(path)}")
        click.echo(
            "  - privacy: epsilons and deltas are rounded up; they cover each model/ only. manifest.json, "
            "metrics.jsonl and checkpoints/ are private to the data owner (not covered)."
        )
    else:
        notes: list[str] = []
        for label, path in models:
            click.echo(f"  - {label}: {_model_line(path, caveats, notes)}")
        for note in notes:  # each caveat in full, once: the lines above name them
            click.echo(f"  {note}")
    mlm = [(m.label, m.attack.output) for m in plan.models if m.label in ("nonprivate", "dp-eps8")]
    audits = [(m.label, m.attack.output) for m in plan.models if m.label.endswith(AUDIT_SUFFIX)]
    clf = [(m.label, m.attack.output) for m in plan.models if m.label.startswith("clf-")]
    clm = [(m.label, m.attack.output) for m in plan.models if m.label.startswith("clm-")]
    click.echo(f"\nReport: {plan.report}")
    if verbose:
        click.echo("Verdict:")
        for line in verdict_lines(mlm, clf, gap, audits, clm):
            click.echo(f"  {line}")
    elif gap is not None:
        click.echo(f"intent classifiers: not run ({gap})")
    from dpaudit.report.answers import terminal_summary

    attacked = [(m.label, m.attack.output) for m in plan.models]
    for line in terminal_summary([p for _, p in attacked], {str(p): label for label, p in attacked}):
        click.echo(line)
