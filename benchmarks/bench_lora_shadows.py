"""Shadow models of a LoRA target against those of a fully fine-tuned one, and the up-front cost estimate against the
time they took.

For each preset (default ``tiny`` and ``mini``) and task (``classify``, ``mlm``, ``clm``), on the built-in assistant
corpus (``dpaudit inject --corpus builtin:assistant``, a temporary folder): a public start trained on ``public.jsonl``
(edp-sgd, non-private), then two targets fine-tuned from it with DP-SGD at ``--epsilon``: ``full`` (every weight) and
``lora`` (``--peft lora``, rank ``--rank``). For each target, ``--shadows`` shadow models are trained like it exactly
as ``dpaudit attack`` trains them (:func:`dpaudit.attacks.shadow_models.train_shadows` on the public pool, the
``shadow``/``rmia`` split, one after the other in this process), and its estimate lines (printed before the first
shadow trains) are read back. Printed per configuration:

- the estimate: CPU seconds and wall seconds as printed (:mod:`dpaudit.attacks.shadow_cost`: measured on a probe of
  the first model's recipe), beside the two tables' for the same models: the in-process table
  (:func:`dpaudit.attacks.shadow_cost.in_process_lines`, what the attack prints for models it does not probe) and the
  measured table of :mod:`dpaudit.common.cost_model` (fitted on ``dpaudit`` subprocesses: what ``--workers`` get);
- per configuration, each model's CPU, the probe's step, evaluation and fixed seconds, and what a LoRA shadow pays to
  have its base (loading the start from disk and hashing its state, the fastest of 3) against its wall time;
- measured: the k models' own wall seconds (each model's ``trained in X s`` line, what the estimate is of) and the
  whole call's (the probe, the data folders, the models), and the ratio estimate / measured (the goal: within
  [1/1.3, 1.3]);
- shadows per hour (3600 / the measured wall per model) and, per preset and task, lora / full.

Run with ``nice -n 10``; ``uptime`` is printed before and after each configuration (the figures are wall times on a
shared machine: compare the CPU columns when the load moved).

Example:
    nice -n 10 python benchmarks/bench_lora_shadows.py --presets tiny,mini --tasks classify,mlm,clm --shadows 2

Measured on the shared 2-core machine at load 9-11 (``nice -n 10``), DP-SGD at epsilon 8, 2 shadows each:

- the in-process table (fitted on the first two runs below, checked on the third; load 14-17): tiny shadows at 24
  steps (``--presets tiny --tasks classify,mlm,clm``, 363 rows) took 0.58-1.2 CPU s a model and at 72 steps
  (``--epochs 6``) 1.38-3.22; ``--epochs 4 --rows 600`` (450 rows, 75 steps, not fitted on): its CPU estimate /
  measured 0.94-1.08 (5 configurations; the sixth's model CPU is not measurable here: the first configuration's
  privacy plan, timed in wall seconds, is larger than the call's CPU at that load), its wall 0.50-1.12, the probe's
  wall 0.64-1.12, the measured table's CPU 3.1-4.9 and wall 1.40-4.94. The wall is the CPU at the current load
  (:func:`dpaudit.common.resources.wall_seconds`); under ``nice -n 10`` at load 15-17 the models got less than that
  share (12.6 wall s per CPU s for the clm LoRA shadows, 5.8 by the load), so both estimates' wall is short there.
- ``--presets mini --tasks clm --rows 300 --public 900 --epochs 2`` (273 rows, 18 steps, load 15-19; probed by
  default): the probe's estimate / measured wall 0.99-1.00, CPU 0.84-0.99; the measured table's CPU 0.93-1.33; the
  in-process table's CPU 0.19-0.22 (fitted on tiny models, its price of a token does not grow with the model: the
  attack uses it only for models it does not probe). LoRA / full shadows per hour 2.66x.
- a LoRA shadow's base: loading it and hashing its state took 0.03-0.24 s of its 3.9-38 s wall (tiny, load 14-17) and
  0.18-0.34 s of 20-54 s (mini): 1-3% of a model, so training each over one copy of the base in memory would save at
  most that.

- ``--presets tiny --tasks classify,mlm,clm`` (363 rows, 24 steps a shadow): the probe's estimate / measured wall
  0.92-1.04 (CPU 0.87-1.03); the measured table's 5.6-9.7 (CPU 4.5-7.2), and the attack prints the table's here
  (these models' steps are under a CPU-minute). LoRA shadows per hour / full: 1.27x (classify), 1.32x (mlm), 1.37x
  (clm); 1029-2182 shadows an hour.
- ``--presets mini --tasks classify,clm --rows 300 --public 900 --epochs 2`` (273 rows, 18 steps; the attack probes:
  weights over 10 MB): the probe 0.82-1.04 (CPU 0.86-1.01), the table 0.92-1.77 (CPU 0.65-1.38). LoRA / full shadows
  per hour: 1.70x (classify), 1.72x (clm); 218-419 an hour.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def make_data(root: Path, rows: int, public: int) -> Path:
    from click.testing import CliRunner

    from dpaudit.cli import cli

    out = root / "data"
    args = ["inject", "--corpus", "builtin:assistant", "--corpus-size", str(rows), "--public-size", str(public)]
    args += ["--out", str(out), "--seed", "0", "--frequencies", "1,2", "--per-frequency", "1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(result.output)
    return out


def _seconds(text: str) -> float:
    """format_minutes' figure back to seconds ("12 s", "1.5 min", "14 min")."""
    number, unit = text.split()
    return float(number) * (60.0 if unit.startswith("min") else 1.0)


def estimate_figures(text: str) -> tuple[float, float, float | None] | None:
    """The shadow estimate's CPU, wall ("about") and "up to" seconds (None when it said one figure) in an attack's
    output; None when it printed none (every model cached)."""
    cpu = re.search(r"estimated CPU time of \d+ shadow models?: ([\d.]+ (?:s|min))", text)
    wall = re.search(
        r"estimated wall time at the current load \([^)]*\): about ([\d.]+ (?:s|min))(?:, up to ([\d.]+ (?:s|min)))?",
        text,
    )
    if cpu is None or wall is None:
        return None
    return _seconds(cpu.group(1)), _seconds(wall.group(1)), _seconds(wall.group(2)) if wall.group(2) else None


def parse_estimate(stderr: str) -> tuple[float, float]:
    figures = estimate_figures(stderr)
    if figures is None:
        raise SystemExit(f"no estimate in the output:\n{stderr[-3000:]}")
    return figures[0], figures[1]


def train_target(data: Path, out: Path, **config) -> Path:
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import EdpSgdTrainer

    with contextlib.redirect_stderr(io.StringIO()):
        EdpSgdTrainer().train(data, out, EdpSgdConfig(**config), seed=0)
    return out


def base_seconds(start: Path, task: str) -> float:
    """What each LoRA shadow pays to have its base: loading the start from disk (``from_pretrained``) and the sha256 of
    its state (the trainer's record of the base), the fastest of 3 (the files are in the page cache, as for the
    shadows after the first)."""
    import transformers

    from dpaudit.trainers.torch_common.lora import state_sha256

    auto = {"clm": transformers.AutoModelForCausalLM, "mlm": transformers.AutoModelForMaskedLM}.get(
        task, transformers.AutoModelForSequenceClassification
    )
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        state_sha256(auto.from_pretrained(start / "model", local_files_only=True, use_safetensors=True))
        times.append(time.perf_counter() - t0)
    return min(times)


def shadows_of(target: Path, data: Path, cache: Path, k: int) -> dict[str, float]:
    """Train k shadows like ``target`` as the attack does; the printed estimate and the measured cost."""
    from dpaudit.attacks import shadow_cost
    from dpaudit.attacks.shadow_models import (
        plan_config,
        public_pool,
        public_specs,
        split_public,
        target_recipe,
        train_shadows,
    )
    from dpaudit.common.cost_model import RATES, shadow_lines, training_work
    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.scoring import resolve_model
    from dpaudit.training.api import load_trainer

    source, run = resolve_model(target), load_inject_run(data)
    pool = public_pool(run, source.label_set())
    recipe = target_recipe(source, "lira", run=run)
    reference, _ = split_public(len(pool.texts), recipe.rows, 0)
    n_in = min(recipe.rows or reference.size // 2, reference.size // 2)
    specs = public_specs(reference, len(pool.texts), n_in, k, 0)
    options = SimpleNamespace(workers=None, ray_address=None, shadow_trainer=None, shadow_config=None, seed=0)
    # the measured table's estimate of the same models (what the attack prints when it does not probe)
    fixed = {"labels": list(source.labels)} if source.labels is not None else None
    config, _, steps = plan_config(load_trainer(recipe.trainer), recipe, train_size=n_in, fixed=fixed)
    table_cpu, table_wall = parse_estimate("\n".join(shadow_lines(recipe.trainer, asdict(config), steps, todo=k)))
    # what the attack prints for models it does not probe, trained one after the other in this process
    in_process = shadow_cost.in_process_lines(recipe.trainer, asdict(config), steps, todo=k)
    assert in_process is not None, "no in-process rate for these models"
    inproc_cpu, inproc_wall = parse_estimate("\n".join(in_process))
    one = training_work(recipe.trainer, asdict(config), steps)
    table_ref = k * RATES[one.kind].per_unit * one.units  # as train_shadows decides
    real, real_probe = shadow_cost.worth_probing, shadow_cost.probe_cost
    shadow_cost.worth_probing = lambda *a: True  # the probe's estimate at every size (the attack: costly ones only)
    probes = []

    def keep(*a, **kw):  # the probe's own measurement, to take its CPU out of the call's
        probes.append(real_probe(*a, **kw))
        return probes[-1]

    shadow_cost.probe_cost = keep
    err = io.StringIO()
    load = os.getloadavg()[0]
    wall0, cpu0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stderr(err):
        models, _ = train_shadows(
            source=source, run=run, pool=pool, specs=specs, attack="lira", cache=cache, options=options, recipe=recipe
        )
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    shadow_cost.worth_probing, shadow_cost.probe_cost = real, real_probe
    assert len(models) == k and not any(m.cached for m in models) and probes and probes[0] is not None
    probe = probes[0]
    est_cpu, est_wall = parse_estimate(err.getvalue())
    lines = [line for line in err.getvalue().splitlines() if "estimated" in line]
    trained = [float(x) for x in re.findall(r"trained in ([\d.]+) s", err.getvalue())]
    assert len(trained) == k, err.getvalue()[-2000:]
    return {
        "est_cpu": est_cpu,
        "est_wall": est_wall,
        "table_cpu": table_cpu,
        "table_wall": table_wall,
        "inproc_cpu": inproc_cpu,
        "inproc_wall": inproc_wall,
        "probed_by_default": real(table_ref, source.model_dir),
        "wall": sum(trained),  # the k models' own training, as the attack prints it (the estimate's scope)
        "total": wall,  # the whole call: the probe, the data folders, the k models
        "cpu": cpu,
        "models_cpu": cpu - probe.cpu - (probe.planning or 0.0),  # the plan: single-threaded accountant
        "load": load,
        "steps": float(models[0].steps or 0),
        "rows": float(n_in),
        "kind": one.kind,
        "units": float(one.units),
        "probe_fixed": probe.fixed,
        "probe_step": probe.step,
        "probe_eval": probe.evaluation,
        "lines": lines,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default="tiny,mini")
    parser.add_argument("--tasks", default="classify,mlm,clm")
    parser.add_argument("--shadows", type=int, default=2)
    parser.add_argument("--rows", type=int, default=400, help="Corpus rows (train.jsonl holds about 90%%).")
    parser.add_argument("--public", type=int, default=1200, help="public.jsonl rows (the shadows' pool).")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--epsilon", type=float, default=8.0)
    parser.add_argument("--peft", default="none,lora")
    args = parser.parse_args()
    print("$ " + " ".join(["python", *sys.argv]))
    print(f"torch threads: DPAUDIT_THREADS={os.environ.get('DPAUDIT_THREADS')} OMP={os.environ.get('OMP_NUM_THREADS')}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-lora-shadows-") as tmp:
        root = Path(tmp)
        data = make_data(root, args.rows, args.public)
        for preset in args.presets.split(","):
            for task in args.tasks.split(","):
                common = dict(task=task, preset=preset, max_length=args.max_length, batch_size=args.batch_size)
                if task == "classify":
                    common["labels"] = None
                start = train_target(
                    data, root / f"{preset}-{task}-start", data_split="public", non_private=True, epochs=1, **common
                )
                for peft in args.peft.split(","):
                    lora = {"peft": "lora", "lora_rank": args.rank} if peft == "lora" else {}
                    name = f"{preset}-{task}-{peft}"
                    target = train_target(
                        data,
                        root / name,
                        init_from=str(start),
                        mode="dp-sgd",
                        target_epsilon=args.epsilon,
                        epochs=args.epochs,
                        noise_seed=1,
                        **lora,
                        **common,
                    )
                    before = uptime()
                    got = shadows_of(target, data, root / f"{name}-cache", args.shadows)
                    got.update(preset=preset, task=task, peft=peft, before=before, after=uptime())
                    got["base_s"] = base_seconds(start, task)
                    rows.append(got)
                    print(
                        f"{preset:5s} {task:8s} {peft:4s}: {int(got['rows'])} rows, {int(got['steps'])} steps/shadow; "
                        f"estimate CPU {got['est_cpu']:.0f} s wall {got['est_wall']:.0f} s (load {got['load']:.1f}); "
                        f"measured: the {args.shadows} models {got['wall']:.1f} s wall (the whole call, probe "
                        f"included, {got['total']:.1f} s wall, {got['cpu']:.1f} s CPU); estimate / measured wall "
                        f"{got['est_wall'] / got['wall']:.2f}",
                        flush=True,
                    )
                    for line in got["lines"]:
                        print("    " + line.strip())
                    print(
                        f"    {got['kind']}: {got['units']:.0f} units (tokens) a model, CPU a model "
                        f"{got['models_cpu'] / args.shadows:.2f} s; the probe: {got['probe_step'] * 1000:.1f} ms a "
                        f"step, {got['probe_eval']:.2f} s an evaluation, {got['probe_fixed']:.2f} s fixed; loading the base and "
                        f"hashing it: {got['base_s']:.3f} s of {got['wall'] / args.shadows:.2f} s a model's wall",
                        flush=True,
                    )
                    print(f"    {got['before']}\n    {got['after']}", flush=True)
    print()
    print(
        "| preset | task | shadows | steps | load | wall s | probe est. | ratio | table est. | ratio | in-process est. | "
        "ratio | CPU s | probe est. | ratio | table est. | ratio | in-process est. | ratio | probed by default | "
        "shadows/h |"
    )
    print("|---" * 21 + "|")
    for r in rows:
        per_hour = 3600 * args.shadows / r["wall"]
        print(
            f"| {r['preset']} | {r['task']} | {r['peft']} | {int(r['steps'])} | {r['load']:.1f} | {r['wall']:.1f} | "
            f"{r['est_wall']:.1f} | {r['est_wall'] / r['wall']:.2f} | {r['table_wall']:.0f} | "
            f"{r['table_wall'] / r['wall']:.2f} | {r['inproc_wall']:.1f} | {r['inproc_wall'] / r['wall']:.2f} | "
            f"{r['models_cpu']:.1f} | {r['est_cpu']:.1f} | "
            f"{r['est_cpu'] / r['models_cpu']:.2f} | {r['table_cpu']:.0f} | {r['table_cpu'] / r['models_cpu']:.2f} | "
            f"{r['inproc_cpu']:.1f} | {r['inproc_cpu'] / r['models_cpu']:.2f} | "
            f"{'yes' if r['probed_by_default'] else 'no'} | {per_hour:.0f} |"
        )
    print()
    for preset in args.presets.split(","):
        for task in args.tasks.split(","):
            pair = {r["peft"]: r for r in rows if r["preset"] == preset and r["task"] == task}
            if {"none", "lora"} <= pair.keys():
                print(
                    f"{preset} {task}: LoRA shadows per hour / full: {pair['none']['wall'] / pair['lora']['wall']:.2f}x "
                    "(the models' own wall)"
                )
    for key, measured, what in (
        ("est_wall", "wall", "the probe's wall"),
        ("table_wall", "wall", "the measured table's wall"),
        ("inproc_wall", "wall", "the in-process table's wall (the attack's for models it does not probe)"),
        ("est_cpu", "models_cpu", "the probe's CPU"),
        ("table_cpu", "models_cpu", "the measured table's CPU"),
        ("inproc_cpu", "models_cpu", "the in-process table's CPU"),
    ):
        ratios = np.array([r[key] / r[measured] for r in rows])
        print(f"{what} estimate / measured: {ratios.min():.2f}-{ratios.max():.2f} over {len(rows)} configurations")


if __name__ == "__main__":
    main()
