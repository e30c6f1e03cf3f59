"""``dpaudit demo``: the whole pipeline on the built-in corpus, small enough for a laptop CPU.

Stages run in order (inject -> train -> attack -> report). A stage whose implementation has not
landed yet is listed as missing rather than faked, so the demo always tells the truth about what
this installation can do.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import click

from dpaudit.trainer_api import available_trainers


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def _model_summary(model: Path) -> str:
    """Epsilon (recomputed from the stored DpEvent, rounded up) with its caveats, and the last heldout
    MLM accuracy (telemetry on private data) of a train run."""
    from dpaudit.figures import format_up
    from dpaudit.privacy_record import PrivacyRecord, group_privacy_text
    from dpaudit.rundir import read_jsonl

    path = model / "privacy.json"
    record = PrivacyRecord.from_json(json.loads(path.read_text(encoding="utf-8")), where=str(path))
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
        claim += "; " + record.randomness
    else:
        claim = "non-private (epsilon = inf)"
    accuracy = [row["mlm_accuracy"] for row in read_jsonl(model / "metrics.jsonl") if row.get("mlm_accuracy") is not None]
    return claim + (f"; heldout MLM accuracy {accuracy[-1]:.1%} (telemetry, not covered)" if accuracy else "")


@click.command(epilog="Example: dpaudit demo --out runs/demo")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/demo"), show_default=True,
              help="Folder for the demo's run directories (replaced if it exists).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for every stage.")
@click.option("--steps", type=int, default=60, show_default=True, help="Training steps per model (tiny BERT).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              default=Path("reports/demo/index.html"), show_default=True, help="Where to write the comparison report.")
def demo(out: Path, seed: int, steps: int, report_path: Path) -> None:
    """Run inject -> train (non-private and DP) -> attack -> report on the built-in voice-assistant corpus."""

    from dpaudit.cli import cli

    out.mkdir(parents=True, exist_ok=True)
    done, missing = [], []

    def run(args: list[str]) -> None:
        click.echo(f"$ dpaudit {' '.join(args)}")
        cli.main(args=args, prog_name="dpaudit", standalone_mode=False)

    data = out / "data"
    run(["inject", "--corpus", "builtin:assistant", "--corpus-size", "3000", "--out", str(data), "--seed", str(seed),
         "--frequencies", "1,5,20,100", "--per-frequency", "5", "--overwrite"])
    done.append(f"inject -> {data}")

    attacked = []
    if "jax-bert" in available_trainers() and _has_module("jax"):
        for label, extra in (("nonprivate", ["--non-private"]), ("dp-eps8", ["--target-epsilon", "8"])):
            model = out / f"model-{label}"
            run(["train", "--trainer", "jax-bert", "--data", str(data), "--out", str(model), "--seed", str(seed),
                 "--preset", "tiny", "--steps", str(steps), "--batch-size", "64", *extra])
            done.append(f"train jax-bert ({label}) -> {model}: {_model_summary(model)}")
            if _has_module("torch") and _has_module("transformers"):
                attack_dir = out / f"attack-{label}"
                run(["attack", "--model", str(model), "--data", str(data), "--out", str(attack_dir),
                     "--attacks", "exposure,reconstruction,loss", "--overwrite"])
                attacked.append(attack_dir)
                done.append(f"attack ({label}) -> {attack_dir}/index.html")
    else:
        missing.append("train: the jax-bert trainer needs `pip install -e '.[jax]'`")
    if attacked:
        run(["report", *map(str, attacked), "--out", str(report_path)])
        done.append(f"report comparing {len(attacked)} runs -> {report_path}")
    elif "jax-bert" in available_trainers():
        missing.append("attack + report: scoring a model needs `pip install -e '.[torch]'`")
    missing.append("edp-sgd fine-tuning, shadow-model attacks and demo sizes that show the effect clearly on "
                   "real text: a later milestone")
    done.append("privacy: epsilons and deltas are rounded up; they cover each model/ only. manifest.json, "
                "metrics.jsonl and checkpoints/ are private to the data owner (not covered).")

    click.echo("\nDone:")
    for line in done:
        click.echo(f"  - {line}")
    click.echo("Not yet available:")
    for line in missing:
        click.echo(f"  - {line}")
