"""``dpaudit attack``: run the canary attacks on a model and write the attack directory.

A thin shell over the attack stage (:func:`dpaudit.stages.attack.attack`): options in, a summary table (or JSON with
``--json``) out, warnings on stderr. Never imports jax (models load through transformers/torch).

The command knows no attack's options: it reads ``--attacks`` first (the defaults when absent) and turns the fields
of :class:`~dpaudit.attacks.options.RunOptions` and of the Configs of those attacks into options, as ``dpaudit
train`` does with a trainer's Config (:func:`dpaudit.cli.params.config_options`), so ``dpaudit attack --attacks lira
--help`` lists LiRA's options beside the shared ones. Every registered attack's options are read, and one of an
attack that does not run is refused in one line (:func:`dpaudit.attacks.registry.check_options`).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from dpaudit.attacks.registry import DEFAULT_ATTACKS
from dpaudit.cli import params as cli_params

_EPILOG = (
    "Example: dpaudit attack --model runs/np --data runs/data --out runs/np-attack --attacks exposure,reconstruction"
)
#: The command's own options (the others are generated from the Configs).
_OWN = frozenset({"model", "data", "out", "attack_names", "overwrite", "as_json"})
_SECTIONS = "dpaudit.attack.sections"


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _summary(results) -> str:  # noqa: ANN001
    from dpaudit.attacks.results import ExposureResult, MiaResult, ReconstructionResult
    from dpaudit.common.figures import format_down, format_up
    from dpaudit.report.notes import tpr_cell
    from dpaudit.verdict.headline import headline_of

    head = headline_of(results)
    lines = [f"model {results.model.path} ({results.model.architecture}); claimed: {head.claim.text()}"]
    if results.model.utility is not None:  # a model trained elsewhere: its held-out utility, measured by the attack
        lines.append(results.model.utility.text())
    for result in results.attacks:
        if isinstance(result, ExposureResult) and result.rows:
            lines.append(
                f"exposure (log2|R| = {result.parameters.log2_space_size:.2f}, reveal {result.parameters.reveal}):"
            )
            lines.append(f"  {'freq':>5} {'n':>4} {'mean':>7} {'95% CI':>17} {'median':>7} {'p vs controls':>13}")
            for r in result.rows:
                low, high = (None, None) if r.mean_ci is None else (r.mean_ci.low, r.mean_ci.high)
                ci = f"[{_fmt(low)}, {_fmt(high)}]"
                p = "baseline" if r.vs_controls is None else f"{r.vs_controls.p_value:.2g}"
                lines.append(f"  {r.frequency:>5} {r.n:>4} {r.mean:>7.2f} {ci:>17} {r.median:>7.2f} {p:>13}")
        elif isinstance(result, ReconstructionResult) and result.rows:
            lines.append(
                "extraction (greedy from the prefix; top-k: in the final beam):"
                if result.attack == "extraction"
                else "reconstruction (top-1 fill):"
            )
            lines.append(f"  {'freq':>5} {'n':>4} {'exact':>7} {'95% CI':>15} {'norm. edit':>10} {'top-k hits':>10}")
            for row in result.rows:
                match_ci = row.exact_match_ci
                low, high = (None, None) if match_ci is None else (match_ci.low, match_ci.high)
                ci = f"[{_fmt(low)}, {_fmt(high)}]"
                hits = "-" if row.top_k_hits is None else str(row.top_k_hits)
                lines.append(
                    f"  {row.frequency:>5} {row.n:>4} {row.exact_match_rate:>7.2f} {ci:>15} "
                    f"{row.normalized_edit_distance_mean:>10.3f} {hits:>10}"
                )
    mia = [r for r in results.attacks if isinstance(r, MiaResult)]
    if mia:
        # Bounds as the headline recomputes them: each at 1 - 0.05/m (m audits), so that all hold together.
        by_name = {b.name: b for b in head.bounds}
        lines.append(
            f"membership inference (AUC [95% CI], TPR at FPR; epsilon lower bound {head.label}, rounded down; "
            "P = proof, H = heuristic, G = group of f rows; ceiling: the bound of a perfect attack at these sizes):"
        )
        lines.append(
            f"  {'attack':>12} {'task':>17} {'AUC':>6} {'CI':>15} {'TPR@0.1%':>9} {'TPR@1%':>8} {'eps LB':>9} {'ceiling':>8} {'vs':>7}"
        )
        for m in mia:
            for t in m.tasks:
                tpr = {
                    round(x["fpr"], 6): tpr_cell(x, t.n_members, t.n_nonmembers) for x in t.tpr_at
                }  # n/a: too few non-members
                b = by_name.get(f"{m.attack}/{t.task}")
                lb, ceiling, vs, flag = "-", "-", "-", ""
                if b is not None:
                    tag = ("P" if b.kind == "proof" else "H") + ("" if b.eligible else "G")
                    lb = f"{format_down(b.epsilon)} {tag}"
                    ceiling = "-" if b.ceiling is None else format_down(b.ceiling)
                    vs = "-" if b.compared_with is None else format_up(b.compared_with)
                    if b.above:
                        flag = (
                            "  <-- EXCEEDS CLAIM"
                            if b.eligible and b.kind == "proof"
                            else "  <-- above: investigate (heuristic)"
                            if b.eligible
                            else "  <-- above f x epsilon: investigate"
                        )
                    if b.left_out:  # dpaudit.verdict.headline.below_blind
                        flag += "  <-- does not beat the blind baseline, which separates the sides: not in the headline"
                    elif b.below_blind:
                        flag += "  <-- does not beat the blind baseline"
                lines.append(
                    f"  {m.attack:>12} {t.task:>17} {t.auc:>6.3f} {'[' + _fmt(t.auc_ci[0], '.3f') + ', ' + _fmt(t.auc_ci[1], '.3f') + ']':>15} "
                    f"{tpr.get(0.001, '-'):>9} {tpr.get(0.01, '-'):>8} {lb:>9} {ceiling:>8} {vs:>7}{flag}"
                )
        from dpaudit.attacks.canary import fit_lines

        lines.extend(fit_lines(mia))  # the coin-flip audits' Gaussian-pair fits: evidence beside the bounds
        for m in mia:  # which tokens leak (the attacks against the target's base)
            leaks = getattr(m, "token_leaks", None)
            if leaks is not None and leaks.top_members:
                from dpaudit.attacks.token_leaks import leak_lines

                lines.append(
                    f"top leaking tokens ({m.attack}: log p_target - log p_base in nats, * = a canary's secret token; "
                    f"all in {leaks.file}):"
                )
                lines.extend(f"  {line}" for line in leak_lines(leaks))
    if head.bounds:  # the headline as results.json stores it (every reader prints this line)
        lines.append(head.text())
        lines.extend(f"  {note}" for note in head.investigate)
    return "\n".join(lines)


def _peek_attacks(args: list[str]) -> str | None:
    """The value of the last ``--attacks`` among ``args`` (click keeps the last), before parsing."""
    found = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--attacks" and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith("--attacks="):
            found = arg.split("=", 1)[1]
    return found


def _section_title(config_cls: type, attacks: tuple[str, ...]) -> str:
    """A Config's help section: the first line of its docstring, and the attacks that take its options."""
    title = ((config_cls.__doc__ or config_cls.__name__).strip().splitlines() or [config_cls.__name__])[0].rstrip(".")
    return f"{title} ({', '.join(attacks)})" if attacks else title


class AttackCommand(click.Command):
    """Adds the attacks' options before parsing: every registered attack's (a misplaced one is then refused by name,
    in one line, rather than as an unknown word), those of the attacks asked for (``--attacks``, else the defaults)
    shown in ``--help``, one section per Config."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from dpaudit.attacks.registry import check_options, option_attacks, option_sections, registered_classes

        names = _peek_attacks(args) or ",".join(DEFAULT_ATTACKS)
        shown = {name for _, fields, _ in option_sections(option_attacks(names)) for name in fields}
        generated: list[click.Option] = []
        sections: list[tuple[str, list[click.Option]]] = []
        for config_cls, fields, attacks in option_sections(registered_classes()):
            options = cli_params.config_options(config_cls, reserved=_OWN, fields=fields)
            for option in options:
                option.hidden = option.hidden or option.name not in shown
            generated += options
            if any(o.name in shown for o in options):
                sections.append((_section_title(config_cls, attacks), [o for o in options if o.name in shown]))
        self.params = [*(p for p in self.params if p.name in _OWN), *generated]
        ctx.meta[_SECTIONS] = sections
        rest = super().parse_args(ctx, args)
        check_options(
            [o.name for o in generated if ctx.get_parameter_source(o.name) is ParameterSource.COMMANDLINE], names
        )
        return rest

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections = ctx.meta.get(_SECTIONS, [])
        generated = {o.name for _, options in sections for o in options}
        own = [r for p in self.get_params(ctx) if p.name not in generated and (r := p.get_help_record(ctx))]
        for title, params in [("Options", None), *sections]:
            rows = own if params is None else [r for p in params if (r := p.get_help_record(ctx))]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from dpaudit.attacks.registry import available_attacks

        formatter.write_paragraph()
        formatter.write_text(
            f"Registered attacks: {', '.join(sorted(available_attacks())) or 'none'}. Add --attacks "
            "NAME --help for an attack's options (--attacks all --help: every attack's)."
        )
        super().format_epilog(ctx, formatter)


@click.command(cls=AttackCommand, epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.option(
    "--model",
    required=True,
    type=click.Path(path_type=Path),
    help="Train run directory (dpaudit train) or a Hugging Face model directory (safetensors + tokenizer).",
)
@click.option("--data", required=True, type=click.Path(path_type=Path), help="Inject run directory (dpaudit inject).")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Attack directory to write.")
@click.option(
    "--attacks",
    "attack_names",
    default=",".join(DEFAULT_ATTACKS),
    show_default=True,
    help="Comma-separated attacks, or 'all' (every attack the model type supports); --attacks NAME --help "
    "lists its options.",
)
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists and is not empty.")
@click.option("--json", "as_json", is_flag=True, help="Print results.json on stdout instead of the summary.")
@click.pass_context
def attack(
    ctx: click.Context,
    model: Path,
    data: Path,
    out: Path,
    attack_names: str,
    overwrite: bool,
    as_json: bool,
    **params: Any,
) -> None:
    """Attack a model's canaries and write results.json, scores/canaries.jsonl and manifest.json.

    Exposure (Carlini et al. 2019) is exact: all secret tokens are masked at once and the secret's
    rank among all |R| candidates is counted, not sampled. Reconstruction reports the model's top-1
    fill of the masked secret, its edit distance to the truth and the exact-match rate, by how
    often each canary was inserted (controls = 0, the baseline). For a causal LM, exposure ranks the secret's
    log-likelihood given its prefix among every candidate's (a prefix tree; sampled above --exposure-limit),
    and extraction decodes the secret from its prefix, greedily and by beam search (--beam-width).

    Membership inference (loss, shadow, ref, lira, rmia; zlib, min-k, min-k++ for causal LMs) scores train.jsonl members vs heldout.jsonl
    non-members and inserted vs control canaries, and sets an empirical epsilon lower bound beside the
    accountant's claim (flagged loudly when above it). Shadow models are cached and resumable.

    Shadow and reference models match the target (its trainer, recipe, label set, row count and optimizer
    steps); each one's held-out accuracy is recorded beside the target's, with a warning when their mean
    differs from it by more than 10 points (absolute). A failing attack never discards the others' results:
    they are written, the failure is recorded in results.json, and the exit status is 1.

    Threads: scoring and torch-trained shadow models use the cores actually free (CPU affinity minus the 1-minute
    load average, at least 1); set OMP_NUM_THREADS=N (or DPAUDIT_THREADS=N) to choose.
    """
    from dpaudit.common.extras import require_extras

    # The options given on the command line, by field name (the others keep their Configs' defaults).
    values = {
        name: value for name, value in params.items() if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE
    }
    # Before any work: the extras the attacks need, and the cluster (one line each, not a traceback or minutes).
    require_extras(
        "dpaudit attack",
        *cli_params.attack_extras(
            model,
            attack_names,
            shadow_trainer=values.get("shadow_trainer"),
            shadow_dirs=values.get("shadow_dirs", ()),
            reference_model=values.get("reference_model"),
        ),
    )
    if values.get("ray_address") is not None:
        from dpaudit.fleet.fleet import check_ray_address

        values["ray_address"] = check_ray_address(values["ray_address"])
    from dpaudit.attacks.attack_cost import announce
    from dpaudit.attacks.run import AttackWarning, FinishedAttack
    from dpaudit.stages.attack import attack as run_attack

    def estimate(context: Any, classes: Any) -> None:  # what the passes will cost, once the model is loaded
        announce(context, classes, lambda line: click.echo(line, err=True))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AttackWarning)
        results = run_attack(
            model,
            data,
            attack_names.split(","),
            out=out,
            overwrite=overwrite,
            command=["dpaudit", *sys.argv[1:]],
            before_attacks=estimate,
            **values,
        )
    for w in caught:
        if issubclass(w.category, AttackWarning):  # a rerun of a finished attack says so in a note
            click.echo(f"{'note' if issubclass(w.category, FinishedAttack) else 'warning'}: {w.message}", err=True)
    if as_json:
        click.echo(json.dumps(results.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(_summary(results))
        from dpaudit.report.notes import attack_notes

        for line in attack_notes(results, out):  # n/a footnotes, the audits' stored warnings, the undertrained hint
            click.echo(line)
        click.echo(f"wrote {out} (report: {out / 'index.html'})")
    if results.errors:  # the others' results are written; the exit status says one failed
        for error in results.errors:
            click.echo(f"error: {error['attack']} failed: {error['error']}", err=True)
        raise SystemExit(1)
