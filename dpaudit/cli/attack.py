"""``dpaudit attack``: run the canary attacks on a model and write the attack directory.

A thin shell over the attack stage (:func:`dpaudit.stages.attack.attack`): options in, a summary table (or JSON with
``--json``) out, warnings on stderr. Never imports jax (models load through transformers/torch).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import click

from dpaudit.attacks.lira import LIRA_HELP as _LIRA_HELP
from dpaudit.cli.params import FiniteFloat
from dpaudit.training.config_types import seed_type

_EPILOG = ("Example: dpaudit attack --model runs/np --data runs/data --out runs/np-attack "
           "--attacks exposure,reconstruction")


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _summary(results) -> str:  # noqa: ANN001
    from dpaudit.attacks.results import ExposureResult, MiaResult, ReconstructionResult
    from dpaudit.figures import format_down, format_up
    from dpaudit.report.notes import tpr_cell
    from dpaudit.headline import headline_of

    head = headline_of(results)
    lines = [f"model {results.model.path} ({results.model.architecture}); claimed: {head.claim.text()}"]
    if results.model.utility is not None:  # a model trained elsewhere: its held-out utility, measured by the attack
        lines.append(results.model.utility.text())
    for result in results.attacks:
        if isinstance(result, ExposureResult) and result.rows:
            lines.append(f"exposure (log2|R| = {result.parameters.log2_space_size:.2f}, reveal {result.parameters.reveal}):")
            lines.append(f"  {'freq':>5} {'n':>4} {'mean':>7} {'95% CI':>17} {'median':>7} {'p vs controls':>13}")
            for r in result.rows:
                ci = f"[{_fmt(r.mean_ci and r.mean_ci.low)}, {_fmt(r.mean_ci and r.mean_ci.high)}]"
                p = "baseline" if r.vs_controls is None else f"{r.vs_controls.p_value:.2g}"
                lines.append(f"  {r.frequency:>5} {r.n:>4} {r.mean:>7.2f} {ci:>17} {r.median:>7.2f} {p:>13}")
        elif isinstance(result, ReconstructionResult) and result.rows:
            lines.append("extraction (greedy from the prefix; top-k: in the final beam):" if result.attack == "extraction"
                         else "reconstruction (top-1 fill):")
            lines.append(f"  {'freq':>5} {'n':>4} {'exact':>7} {'95% CI':>15} {'norm. edit':>10} {'top-k hits':>10}")
            for r in result.rows:
                ci = f"[{_fmt(r.exact_match_ci and r.exact_match_ci.low)}, {_fmt(r.exact_match_ci and r.exact_match_ci.high)}]"
                hits = "-" if r.top_k_hits is None else str(r.top_k_hits)
                lines.append(f"  {r.frequency:>5} {r.n:>4} {r.exact_match_rate:>7.2f} {ci:>15} "
                             f"{r.normalized_edit_distance_mean:>10.3f} {hits:>10}")
    mia = [r for r in results.attacks if isinstance(r, MiaResult)]
    if mia:
        # Bounds as the headline recomputes them: each at 1 - 0.05/m (m audits), so that all hold together.
        by_name = {b.name: b for b in head.bounds}
        lines.append(f"membership inference (AUC [95% CI], TPR at FPR; epsilon lower bound {head.label}, rounded down; "
                     "P = proof, H = heuristic, G = group of f rows; ceiling: the bound of a perfect attack at these sizes):")
        lines.append(f"  {'attack':>7} {'task':>17} {'AUC':>6} {'CI':>15} {'TPR@0.1%':>9} {'TPR@1%':>8} {'eps LB':>9} {'ceiling':>8} {'vs':>7}")
        for r in mia:
            for t in r.tasks:
                tpr = {round(x["fpr"], 6): tpr_cell(x, t.n_members, t.n_nonmembers) for x in t.tpr_at}  # n/a: too few non-members
                b = by_name.get(f"{r.attack}/{t.task}")
                lb, ceiling, vs, flag = "-", "-", "-", ""
                if b is not None:
                    tag = ("P" if b.kind == "proof" else "H") + ("" if b.eligible else "G")
                    lb = f"{format_down(b.epsilon)} {tag}"
                    ceiling = "-" if b.ceiling is None else format_down(b.ceiling)
                    vs = "-" if b.compared_with is None else format_up(b.compared_with)
                    if b.above:
                        flag = ("  <-- EXCEEDS CLAIM" if b.eligible and b.kind == "proof" else
                                "  <-- above: investigate (heuristic)" if b.eligible else "  <-- above f x epsilon: investigate")
                lines.append(f"  {r.attack:>7} {t.task:>17} {t.auc:>6.3f} {'[' + _fmt(t.auc_ci[0], '.3f') + ', ' + _fmt(t.auc_ci[1], '.3f') + ']':>15} "
                             f"{tpr.get(0.001, '-'):>9} {tpr.get(0.01, '-'):>8} {lb:>9} {ceiling:>8} {vs:>7}{flag}")
    if head.bounds:  # the headline as results.json stores it (every reader prints this line)
        lines.append(head.text())
        lines.extend(f"  {note}" for note in head.investigate)
    return "\n".join(lines)


@click.command(epilog=_EPILOG, context_settings={"max_content_width": 100})
@click.option("--model", required=True, type=click.Path(path_type=Path),
              help="Train run directory (dpaudit train) or a Hugging Face model directory (safetensors + tokenizer).")
@click.option("--data", required=True, type=click.Path(path_type=Path), help="Inject run directory (dpaudit inject).")
@click.option("--out", required=True, type=click.Path(path_type=Path), help="Attack directory to write.")
@click.option("--attacks", "attack_names", default="exposure,reconstruction", show_default=True,
              help="Comma-separated attacks, or 'all' (every attack the model type supports).")
@click.option("--batch-size", type=click.IntRange(min=1), default=32, show_default=True, help="Canaries per forward pass.")
@click.option("--reveal", type=click.IntRange(min=0), default=0, show_default=True,
              help="Partial reveal: show the first K secret tokens, mask and rank the rest.")
@click.option("--top-k", type=click.IntRange(min=0), default=10, show_default=True,
              help="Beam width for the true secret's rank among the best fills (0: off).")
@click.option("--seed", type=seed_type(), default=0, show_default=True, help="Seed of the bootstrap intervals.")
@click.option("--shadow-models", type=click.IntRange(min=1), default=4, show_default=True,
              help="Shadow/reference models for the shadow, lira (>= 2) and rmia attacks. Each trains like the target "
                   "(its trainer and recipe, as many rows and optimizer steps): about the target's own training time "
                   "each. shadow and rmia share theirs, lira has its own, ref trains 1: --attacks shadow,lira,rmia,ref "
                   "--shadow-models 8 trains 8 + 8 + 1 = 17 models (cached: a rerun trains none). The phase, the count "
                   "and the estimated cost are printed before training starts. 4 by default: with few shadows LiRA "
                   "fits one shared variance, which Carlini et al. 2022 find works from a handful of shadows; "
                   "per-example variances need about 64.")
@click.option("--attack-model", type=click.Choice(["logreg", "gbdt"]), default="logreg", show_default=True,
              help="The shadow attack's classifier: logistic regression or gradient boosting.")
@click.option("--reference-model", type=click.Path(path_type=Path), default=None,
              help="Reference model for --attacks ref (same tokenizer as the target); default: one trained like the "
                   "target on public.jsonl.")
@click.option("--max-shadow-minutes", type=FiniteFloat(min=0, min_open=True), default=None,
              help="Stop starting new shadow models after this many minutes (the ones trained are used).")
@click.option("--shadow-cache", type=click.Path(path_type=Path), default=None,
              help="Where shadow and reference models are kept (they train on private rows: created mode 0700, their "
                   "data folders reference the rows, never copy them) [default: $DPAUDIT_CACHE/shadows when set, else "
                   "OUT-shadows beside --out].")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Shadow/reference models trained at once (each in its own process: Ray when installed, else a "
                   "process pool). Default: one at a time in this process.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Train the shadow/reference models on this Ray cluster (e.g. ray://host:10001; its nodes must see "
                   "--shadow-cache and have dpaudit installed).")
@click.option("--shadow-trainer", default=None, metavar="NAME",
              help="The registered dpaudit trainer that trains shadow/reference models of a model trained elsewhere "
                   "(a Hugging Face directory without a dpaudit manifest), with --shadow-config's recipe.")
@click.option("--shadow-config", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE.json",
              help="A JSON object of --shadow-trainer's Config fields (the target's recipe, e.g. "
                   '{"mode": "sgd", "epochs": 3, "batch_size": 32}); shadows train on as many rows as train.jsonl.')
@click.option("--shadow-dirs", multiple=True, metavar="DIR", default=(),
              help="A shadow model trained by you (repeatable; or a text file listing directories, one per line): a "
                   "model directory with the target's tokenizer holding members.json, a JSON list of the texts it "
                   "trained on (or \"sha256:<hex>\" of each text's UTF-8). No shadow is trained; lira needs >= 2.")
@click.option("--claimed-epsilon", type=FiniteFloat(min=0, min_open=True), default=None, metavar="E",
              help="The privacy claim of a model trained elsewhere (no privacy.json): epsilon, tested as given.")
@click.option("--claimed-delta", type=FiniteFloat(min=0, max=1, min_open=True, max_open=True), default=None, metavar="D",
              help="The delta of the stated claim (--claimed-epsilon or --claimed-from-opacus).")
@click.option("--claimed-from-opacus", type=click.Path(path_type=Path, dir_okay=False), default=None, metavar="FILE",
              help="The claim of a model trained with Opacus: its accountant's state_dict() saved as JSON (or with "
                   "torch.save); its history of (noise multiplier, sample rate, steps) is accounted here (PLD) at "
                   "--claimed-delta.")
@click.option("--fpr", "fprs", type=FiniteFloat(min=0, max=1, min_open=True, max_open=True), multiple=True,
              help="Report TPR at this FPR (repeatable); refused if heldout.jsonl has too few non-members to measure it. "
                   "Default: 0.1% and 1%, with a warning when unmeasurable.")
@click.option("--mia-examples", type=click.IntRange(min=2), default=None,
              help="At most this many members (and as many non-members) in the examples membership task.")
@click.option("--lira-global-variance", is_flag=True, hidden=True, help="Same as --lira-variance global (kept for old commands).")
@click.option("--lira-variance", type=click.Choice(["auto", "global", "per-example"]), default="auto", show_default=True,
              help=_LIRA_HELP)
@click.option("--lira-offline", type=click.Choice(["one-sided", "two-sided"]), default="one-sided", show_default=True,
              help="Offline LiRA's test: the paper's one-sided log Phi, or the reference code's two-sided density "
                   "(see --lira-variance).")
@click.option("--min-k", type=FiniteFloat(min=0, max=1, min_open=True), default=0.2, show_default=True, metavar="K",
              help="min-k and min-k++ (causal LMs): average each text's fraction K of lowest-scoring tokens.")
@click.option("--beam-width", type=click.IntRange(min=1), default=5, show_default=True,
              help="extraction (causal LMs): beams of the beam search beside greedy decoding from each canary's prefix.")
@click.option("--exposure-limit", type=click.IntRange(min=1), default=10**5, show_default=True, metavar="N",
              help="exposure (causal LMs): exact (every candidate scored by a prefix tree) up to |R| = N; above, Carlini "
                   "et al.'s sampled estimates from --exposure-samples candidates.")
@click.option("--exposure-samples", type=click.IntRange(min=3), default=1000, show_default=True, metavar="M",
              help="exposure (causal LMs): candidates drawn uniformly for the sampled estimates (resolve at most log2 M bits).")
@click.option("--blind-baseline/--no-blind-baseline", default=True, show_default=True,
              help="Beside every membership attack, a classifier that never looks at the model (word and character "
                   "n-grams, length, label; Das et al. 2024), cross-fitted: when an attack does not beat it, the "
                   "membership signal may be distribution shift, not memorization.")
@click.option("--overwrite", is_flag=True, help="Replace --out if it exists and is not empty.")
@click.option("--json", "as_json", is_flag=True, help="Print results.json on stdout instead of the summary.")
def attack(model: Path, data: Path, out: Path, attack_names: str, batch_size: int, reveal: int, top_k: int, seed: int,
           shadow_models: int, attack_model: str, reference_model: Path | None, max_shadow_minutes: float | None,
           shadow_cache: Path | None, fprs: tuple[float, ...], mia_examples: int | None, lira_global_variance: bool,
           overwrite: bool, as_json: bool, workers: int | None = None, ray_address: str | None = None,
           shadow_trainer: str | None = None, shadow_config: Path | None = None, shadow_dirs: tuple[str, ...] = (),
           claimed_epsilon: float | None = None, claimed_delta: float | None = None, lira_variance: str = "auto",
           lira_offline: str = "one-sided", blind_baseline: bool = True, claimed_from_opacus: Path | None = None,
           min_k: float = 0.2, beam_width: int = 5, exposure_limit: int = 10**5, exposure_samples: int = 1000) -> None:
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
    from dpaudit.cli.params import attack_extras
    from dpaudit.extras import require_extras

    # Before any work: the extras the attacks need, and the cluster (one line each, not a traceback or minutes).
    require_extras("dpaudit attack", *attack_extras(model, attack_names, shadow_trainer=shadow_trainer,
                                                     shadow_dirs=shadow_dirs, reference_model=reference_model))
    if ray_address is not None:
        from dpaudit.training.fleet import check_ray_address

        ray_address = check_ray_address(ray_address)
    from dpaudit.attacks.run import AttackWarning, FinishedAttack
    from dpaudit.stages.attack import attack as run_attack

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AttackWarning)
        results = run_attack(model, data, attack_names.split(","), out=out, overwrite=overwrite, batch_size=batch_size,
                             reveal=reveal, top_k=top_k, seed=seed, command=["dpaudit", *sys.argv[1:]],
                             shadow_models=shadow_models, attack_model=attack_model,
                             reference_model=None if reference_model is None else str(reference_model),
                             max_shadow_minutes=max_shadow_minutes,
                             shadow_cache=None if shadow_cache is None else str(shadow_cache),
                             fprs=tuple(fprs) or None, mia_examples=mia_examples,
                             lira_global_variance=lira_global_variance, workers=workers, ray_address=ray_address,
                             shadow_trainer=shadow_trainer,
                             shadow_config=None if shadow_config is None else str(shadow_config),
                             shadow_dirs=tuple(shadow_dirs) or None, claimed_epsilon=claimed_epsilon,
                             claimed_delta=claimed_delta, lira_variance=lira_variance, lira_offline=lira_offline,
                             blind_baseline=blind_baseline, min_k=min_k, beam_width=beam_width,
                             exposure_limit=exposure_limit, exposure_samples=exposure_samples,
                             claimed_from_opacus=None if claimed_from_opacus is None else str(claimed_from_opacus))
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
