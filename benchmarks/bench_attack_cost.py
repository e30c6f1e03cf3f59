"""The cost of each attack at the presets' sizes, and how far the estimate ``dpaudit attack`` prints is from it.

A model of a preset's shapes (random weights: the cost does not depend on them): a causal LM (``gpt2-small``: GPT-2's
own 12 x 768, vocabulary 50,257; ``llama-100m``: Llama-style 12 x 768, RMSNorm, rotary positions, SwiGLU, vocabulary
32,000) or a masked LM (``bert-base``: BERT's own 12 x 768, vocabulary 30,522), with the trainer's WordPiece tokenizer
learned on public.jsonl and padded to the family's vocabulary (as ``bench_finetune_sizes.py`` does; one token per
digit), and an inject directory of the built-in corpus with ``--canaries`` digit canaries (half inserted once, half
controls; ``--format``, default the inject default digits:10) and ``--examples`` membership examples (half members,
half held out).

For exposure, extraction, loss and Min-K%++ on a causal LM, and exposure, reconstruction and loss on a masked LM
(:mod:`dpaudit.attacks.attack_cost`; on a masked LM reconstruction runs after exposure on the same context and reads
its passes, as in ``dpaudit attack``):

- ``full``: the forward passes and tokens the attack runs at the full size (``--canaries``, ``--examples``), and the
  estimate of their time, priced by :func:`~dpaudit.attacks.attack_cost.measure_forward_cost` on this model now;
- ``measured``: the attack's own ``run`` on a subset (``--subset-canaries`` canaries for exposure, with
  ``--subset-samples`` sampled candidates, and extraction; ``--subset-examples`` examples, beside every canary's
  text, for the membership scores), wall and process CPU time, beside the estimate of that
  subset: their ratio is the estimate's error at this size on this machine, and the full-size time it implies is
  printed as the full estimate times that ratio (a projection, said as one: the full runs take hours on 2 CPU cores).
  With ``--clock cpu`` both the prices and the measured subset are process CPU seconds (the load of a shared machine
  moves wall seconds by several times; the estimate ``dpaudit attack`` prints is in wall seconds).

Threads: as ``dpaudit attack`` sets them (:mod:`dpaudit.scoring.threads`: the cores free, or ``DPAUDIT_THREADS``);
printed once the model is loaded. On the shared 2-core machine at load 8-10 two torch threads made a pass of
Llama-100M cost 2-18x the CPU of one thread (a one-token pass 0.75 s against 0.04 s: each thread waits for the other
at every parallel region), so the CPU-clock figures below are with ``DPAUDIT_THREADS=1``. The load is printed before
and after (``uptime``).

``--shadow-check``: the shadow and reference models' estimate instead (:mod:`dpaudit.attacks.shadow_cost`, printed by
``dpaudit attack`` before the first model trains) against what they took, end to end: for each ``--shadow-tasks``
task (``classify``, ``clm``) a tiny public start (edp-sgd, non-private, on public.jsonl) and DP-SGD targets at epsilon
8 fine-tuned from it, in full and with ``--peft lora`` (``--shadow-peft``), each attacked by ``dpaudit.attack(...,
[attack], shadow_models=--shadows)`` for each ``--shadow-attacks`` attack, in that order (default lira, then rmia);
every call that trains models (``train_shadows``) is timed (wall and process CPU) with its printed estimate read back:
estimate / measured, wall and CPU, both the whole call's (what the estimate is of: the models' training and the work
around each, loading its data, its privacy plan, the speed probe; the user waits for all of it). The models' own
``trained in`` seconds are printed beside it: they leave that work out (on a quiet machine the four models' sum was
0.72-0.81 of the call's wall, which an earlier version of this script divided by and read as the models using more than
one core; they do not: a tiny edp-sgd run with ``DPAUDIT_THREADS=1`` spends 7.7 of its 8.0 CPU s in its main thread,
``/proc/PID/task/*/stat``, and the call's CPU equals its wall within 0.1 s when quiet).

Measured (``DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4``, tiny
targets, 4 models a call; then with ``--shadow-attacks rmia,lira``, and with ``--shadow-tasks mlm,clm``; the three run
twice: at load 7.1-8.3, 9.7-10.3 and 8.6-9.6 with the wall time from the load average, then at load 5.0-6.4, 7.4-7.8 and
7.4-7.6 with the wall time from the share of a core measured on the speed probe): the CPU estimate / measured was
0.78-1.14 in all 48 calls (classifier, masked and causal LM, full and LoRA, LiRA and RMIA, either first); LiRA's causal
shadows 0.91-1.04 (12 calls), the masked LMs' LoRA models the lowest (0.78-0.84: the in-process table prices a masked LM
as a classifier; on 3 RMIA models of 24 steps a classifier's took 0.80 and 0.69 CPU s each, full and LoRA, a masked LM's
0.91 and 0.73). LiRA's causal shadows had read 0.59-0.72 in all eight calls of the previous version: each of them
evaluated 512 held-out rows three times (the start's utility before the first step, then each of 2 epochs), 0.49 of its
1.5 CPU s (``time.process_time`` around the trainer's ``evaluate``), where RMIA's models of the same recipe evaluated
the target's 40 held-out rows (0.05 s): a causal or masked LM's pool has no labels, so on labelled data the target's
held-out rows do not stand in for a LiRA shadow's and it evaluates the audit universe's rows it did not train on (918
here, up to ``eval_examples``). Training, data and steps were the same (363 rows, 24 steps each). The in-process table
now prices each model's evaluations by its own held-out rows
(:func:`dpaudit.attacks.shadow_cost.in_process_evaluations`), and since these figures were measured a language model's
shadows evaluate the target's held-out texts they did not train on, as the target did (RMIA's rows), not the
universe's (:func:`dpaudit.attacks.shadow_models.train_shadows`). Wall: from the load average's share
(:func:`dpaudit.common.resources.wall_seconds`: 2.9-4.0x the CPU at load 7.1-10.3 on 2 cores) 0.91-2.92, above 1.3 in 19
of 24 calls, where the models' wall was 1.2-1.8x the call's CPU in 18 of 24 calls under ``nice -n 10`` and 2.3-4.6x in
the others; from the share measured on the speed probe (:func:`dpaudit.attacks.shadow_cost.timed_speed`) 0.83-1.33,
above 1.3 in one call of 24 (1.33, a classifier's LiRA shadows at load 7.4). Those wall figures were against the
models' own ``trained in`` seconds; since 2026-11-30 against the call's wall (module docstring above):

    DPAUDIT_THREADS=1 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4 [--shadow-tasks mlm,clm]
        load 0.7-2.0 (16 calls, the probe's share alone): wall 0.88-1.36, CPU 0.94-1.22; the 1.36 (a probe preempted
        once: 0.64 of a core at load 0.7) reads 0.85 with the load average's share, the larger, as now
    DPAUDIT_THREADS=1 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4 [--shadow-tasks mlm,clm]
        load 1.0-1.2 (16 calls, the larger share): wall 0.96-1.25, CPU 0.93-1.23
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4 --shadow-tasks mlm,clm
        load 5.6-6.3 (8 calls, the larger share): wall 0.51-1.05 (one below 0.83: mlm LoRA LiRA, 2.7 s estimated, 5.2 s
        taken), CPU 0.90-1.02
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4
        load 2.6-2.8: wall 0.93-1.21, CPU 0.95-1.24; load 6.1-7.7 with the test suite running at nice 5 (a higher
        priority than the models'): wall 0.34-0.58, CPU 0.77-1.01 (the probe and the load average do not see
        priorities)
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4 [--shadow-tasks mlm,clm]
        the wall said as a range ("about" by the larger share, "up to" by the smaller), each call's CPU / wall (the
        share the models got) and its threads' waiting for a core (/proc/self/task/*/schedstat):
        beside another session's bench (load 3.8-4.1; probe 0.95-1.00, load average 0.54-0.57, the models 0.96-0.98):
            about 0.67-0.86, up to 1.16-1.57, CPU 0.70-0.89; the wall within [about / 1.3, up to x 1.3] in 8 of 8
        beside the test suite at nice 5 in this session (load 6.1-8.5; probe 0.05-0.23, load average 0.29-0.39, the
            models 0.08-0.17): about 0.17-0.35, up to 0.39-1.58, CPU 0.66-0.82; within in 7 of 10 (after the
            suite ended, load 4.9-5.6: about 0.67-0.88, up to 1.54-2.00, within in 6 of 6): 21 of 24 in all
        quiet (load 0.8-1.0; both readings 1.00, one figure): 0.65-1.00, within in 7 of 8 (the one outside: its CPU
            estimate read 0.64)
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4 --shadow-workers 2
        (two workers, Ray: the measured table's estimate, only the wall compared)
        Ray's workers at nice +15 (Ray's default, before 97c3a33), load 3.2-5.6: 1.07-1.63, and 0.22-0.65 for the
            causal LoRA models, starved (68-229 s for 4 tiny models)
        workers at the caller's priority, the wall priced as one thread, load 5.0-5.8: 1.41-1.79
        spread over the workers by the load average, load 4.0-7.0: 0.58-1.08; plus Ray's start (8 s), load 6.6-8.0:
            1.37-1.71; each worker given the probe's share, load 5.3-6.7: 0.69-0.83
        sharing the cores with the threads the load average counts, or fewer when the probe got more of a core than
            that count leaves, plus Ray's start (the shipped rule), load 4.9-8.3: 0.87-1.14 (8 calls)
        the same rule as "about" and the other reading as "up to": beside another session's bench (load 3.4-4.1):
            about 0.69-0.87, up to 0.86-1.17, within [about / 1.3, up to x 1.3] in 8 of 8; beside the test suite at
            nice 5 in this session (load 5.6-8.1): about 0.21-0.33, up to 0.39-0.67, within in 0 of 5; after it
            ended (load 6.0-7.4): about 0.76-0.95, up to 1.10-1.91, within in 3 of 3

Examples (a few minutes each on 2 shared cores):
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --shadow-check --shadows 4
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --preset gpt2-small --subset-canaries 1 --clock cpu
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --preset llama-100m --subset-canaries 1 --clock cpu
    DPAUDIT_THREADS=1 nice -n 10 python benchmarks/bench_attack_cost.py --preset bert-base --subset-canaries 100 --clock cpu
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Vocabulary of each preset's family.
VOCAB = {"gpt2-small": 50257, "mini": 50257, "tiny": 300, "llama-100m": 32000, "llama-tiny": 300, "bert-base": 30522}
#: The masked-LM presets (the others are causal).
MASKED = frozenset({"bert-base"})
#: The attacks measured on a causal LM.
NAMES = ("exposure", "extraction", "loss", "min-k++")


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def build(root: Path, *, preset: str, canaries: int, examples: int, secret_format: str) -> tuple[Path, Path]:
    """(inject directory, model directory)."""
    from click.testing import CliRunner

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_finetune_sizes import _fillers

    from dpaudit.cli import cli
    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.trainers.torch_common.model import build_causal_model, build_model
    from dpaudit.training.tokenizer import special_token_ids, train_wordpiece

    half = canaries // 2
    args = [
        "inject", "--corpus", "builtin:assistant", "--corpus-size", str(examples + 600), "--heldout-size",
        str(examples // 2 + 50), "--public-size", "400", "--format", secret_format, "--frequencies", "1",
        "--per-frequency", str(canaries - half), "--holdout", str(half), "--seed", "0", "--out", str(root / "data"),
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    if result.exit_code != 0:
        raise SystemExit(result.output)
    texts = [json.loads(line)["text"] for line in (root / "data" / "public.jsonl").read_text().splitlines()]
    digits = tuple(str(d) for d in range(10))
    tok = train_wordpiece(texts, vocab_size=3000, new_tokens=digits)
    extra = _fillers(max(0, VOCAB[preset] - tok.get_vocab_size()))
    tok = train_wordpiece(texts, vocab_size=3000, new_tokens=(*digits, *extra))
    ids = special_token_ids(tok)
    specials = {"cls": ids["cls"], "sep": ids["sep"], "pad": ids["pad"]}
    if preset in MASKED:
        model = build_model(
            "mlm", preset=preset, vocab_size=tok.get_vocab_size(), max_length=128, label_names=None, seed=0
        ).eval()
    else:
        model = build_causal_model(
            preset=preset, vocab_size=tok.get_vocab_size(), max_length=128, specials=specials, seed=0
        ).eval()
    save_hf(root / "model", model, tok)
    return root / "data", root / "model"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2-small", choices=sorted(VOCAB))
    parser.add_argument("--format", dest="secret_format", default="digits:10")
    parser.add_argument("--canaries", type=int, default=100)
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--subset-canaries", type=int, default=2)
    parser.add_argument("--subset-examples", type=int, default=64)
    parser.add_argument("--subset-samples", type=int, default=100, help="exposure samples of the measured subset")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="price the passes and compare in wall seconds (what dpaudit attack prints) or in process CPU seconds "
        "(which the load of a shared machine moves less)",
    )
    parser.add_argument("--shadow-check", action="store_true", help="measure the shadow models' estimate instead")
    parser.add_argument("--shadows", type=int, default=4)
    parser.add_argument("--shadow-tasks", default="classify,clm")
    parser.add_argument("--shadow-peft", default="none,lora")
    parser.add_argument(
        "--shadow-workers",
        type=int,
        default=None,
        help="train the models with this many parallel workers (the fleet: Ray when installed); the models' CPU is "
        "then spent in the workers, so only the wall time is compared",
    )
    parser.add_argument(
        "--shadow-attacks", default="lira,rmia", help="attacked one after the other in this order, one call each"
    )
    args = parser.parse_args(argv)
    if args.shadow_check:
        return shadow_check(args, argv)

    import torch

    from dpaudit.attacks import attack_cost
    from dpaudit.attacks.base import AttackContext
    from dpaudit.attacks.mia import canary_task, example_options, example_task
    from dpaudit.attacks.registry import AttackOptions, attack_class
    from dpaudit.inject_dir.reader import load_inject_run
    from dpaudit.scoring import causal_secrets as cs
    from dpaudit.scoring import load, resolve_model

    if args.clock == "cpu":
        attack_cost.CLOCK = time.process_time
    print(f"load before: {uptime()}; clock {args.clock}")
    print(f"command: python benchmarks/bench_attack_cost.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    with tempfile.TemporaryDirectory(prefix="bench-attack-cost-") as tmp:
        data, model_dir = build(
            Path(tmp),
            preset=args.preset,
            canaries=args.canaries,
            examples=args.examples,
            secret_format=args.secret_format,
        )
        run = load_inject_run(data)
        scorer = load(resolve_model(model_dir), batch_size=args.batch_size, device="cpu", progress=False)
        params = sum(p.numel() for p in scorer.model.parameters())
        print(f"torch threads: {torch.get_num_threads()}")
        kind = scorer.kind
        canaries = list(run.canaries)
        space = run.space
        triple = (len(space.alphabet), int(space.length), int(space.size))
        whole = [c.prefix + c.secret + c.suffix for c in canaries]
        canary_tokens = attack_cost._token_lengths(scorer.tokenizer, whole, scorer.max_length)
        located: list[tuple[int, int]] = []
        if kind == "causal-lm":
            secrets, _ = cs.alphabet_secrets(scorer.tokenizer, canaries, space, max_length=scorer.max_length)
            located = [(len(s.context), len(s.secret)) for s in secrets]

        def texts_of(mia_examples: int) -> list[list[int]]:
            options = AttackOptions(mia_examples=mia_examples // 2)
            tasks = [example_task(run, **example_options(options))]
            task = canary_task(run)
            tasks += [task] if task is not None else []
            return [attack_cost._token_lengths(scorer.tokenizer, list(t.texts), 128) for t in tasks]

        lengths = [n for t in texts_of(args.examples) for n in t]
        length = max(8, min(attack_cost.TEXT_TOKENS, statistics.median_high(lengths)))  # as dpaudit attack prices
        cost = attack_cost.measure_forward_cost(
            attack_cost.forward_model(scorer),
            device="cpu",
            rows=attack_cost.price_rows(kind, args.batch_size),
            length=length,
            vocab=scorer.model.config.vocab_size,
        )
        print(
            f"model: {args.preset} ({kind}, {params / 1e6:.1f}M parameters, vocabulary "
            f"{scorer.model.config.vocab_size:,}); {len(canaries)} canaries of {args.secret_format} "
            f"(|R| = {space.size:,}); forward cost measured now at {attack_cost.price_rows(kind, args.batch_size)} x {length} tokens: "
            f"{cost.per_token * 1e3:.3f} ms per token, {cost.per_call * 1e3:.1f} ms per pass"
        )
        options = dict(batch_size=args.batch_size, beam_width=5, exposure_limit=10**5, exposure_samples=1000)
        names = ("exposure", "reconstruction", "loss") if kind == "masked-lm" else NAMES

        def works(indices: list[int], examples: int, samples: int = 1000) -> list[attack_cost.AttackWork]:
            out = []
            for name in names:
                texts = texts_of(examples) if name in attack_cost.TEXT_SCORES else []
                work = attack_cost.attack_work(
                    name, kind=kind, canaries=[located[i] for i in indices] if located else [],
                    canary_tokens=[canary_tokens[i] for i in indices], space=triple, single_tokens=True, texts=texts,
                    options={**options, "exposure_samples": samples}, node_batch=cs.NODE_BATCH,
                )  # fmt: skip
                assert work is not None, name
                out.append(work)
            return attack_cost.shared_passes(out, kind, phrases=False)

        k = args.subset_canaries
        inserted = [i for i, c in enumerate(canaries) if c.frequency > 0][: (k + 1) // 2]
        indices = inserted + [i for i, c in enumerate(canaries) if c.frequency == 0][: k // 2]
        everyone = list(range(len(canaries)))
        full_works = works(everyone, args.examples)
        subset_canary_works = works(indices, args.subset_examples, args.subset_samples)
        subset_text_works = works(everyone, args.subset_examples, args.subset_samples)
        shared_context = None  # masked LM: reconstruction runs on exposure's context, as in dpaudit attack
        rows = []
        for i, name in enumerate(names):
            membership = name in attack_cost.TEXT_SCORES
            full = full_works[i]
            full_s = cost.seconds(full.calls, full.tokens)
            subset = (subset_text_works if membership else subset_canary_works)[i]
            sub_s = cost.seconds(subset.calls, subset.tokens)
            opts = AttackOptions(
                batch_size=args.batch_size,
                mia_examples=args.subset_examples // 2,
                blind_baseline=False,
                exposure_samples=args.subset_samples,
            )
            chosen = canaries if membership else [canaries[i] for i in indices]
            context = AttackContext(scorer=scorer, canaries=chosen, space=space, options=opts, data=run)
            if kind == "masked-lm" and name == "reconstruction" and shared_context is not None:
                context = shared_context
            if kind == "masked-lm" and name == "exposure":
                shared_context = context
            wall, cpu = time.perf_counter(), time.process_time()
            attack_class(name)().run(context)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            got = wall if args.clock == "wall" else cpu
            ratio = got / sub_s if sub_s > 0 else None
            rows.append((name, full, full_s, subset.what, sub_s, got, ratio))
            said = "-" if ratio is None else f"{ratio:.2f}"
            print(
                f"{name:>14}: full: {full.what}: {full.tokens:,} tokens in {full.calls:,} passes, estimate "
                f"{full_s / 60:.2f} min | subset ({subset.what}): estimate {sub_s:.2f} s, measured {wall:.2f} s wall "
                f"({cpu:.2f} s CPU), measured ({args.clock}) / estimate {said}"
                + ("" if ratio is None else f" -> full size about {full_s * ratio / 60:.2f} min"),
                flush=True,
            )
        print(f"load after: {uptime()}")
        print("\n| attack | full size: work | estimate | subset measured / estimate | full size projected |")
        print("|---|---|---|---|---|")
        for name, full, full_s, what, sub_s, got, ratio in rows:
            said = f"{got:.1f} s / {sub_s:.1f} s = " + ("-" if ratio is None else f"{ratio:.2f}")
            projected = "-" if ratio is None else f"{full_s * ratio / 60:.2f} min"
            print(
                f"| {name} | {full.what}: {full.tokens:,} tokens, {full.calls:,} passes | {full_s / 60:.2f} min | "
                f"{said} ({what}) | {projected} |"
            )
    return 0


def run_queue_seconds() -> float:
    """Seconds this process's live threads have waited runnable for a core (``/proc/self/task/*/schedstat``'s second
    field, summed over threads), 0 where unreadable: beside the CPU, how much of a call the scheduler kept its threads
    waiting (a share of a core is what the estimate models)."""
    total = 0
    for stat in Path("/proc/self/task").glob("*/schedstat"):
        try:
            total += int(stat.read_text(encoding="ascii").split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def shadow_check(args: argparse.Namespace, argv: list[str] | None) -> int:
    """The ``--shadow-check`` run (module docstring)."""
    import contextlib
    import io
    import re

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_lora_shadows import estimate_figures, make_data, train_target

    import dpaudit
    from dpaudit.attacks import lira, shadow_models
    from dpaudit.training.privacy_plan import observed_plans

    print(f"load before: {uptime()}")
    print(f"command: python benchmarks/bench_attack_cost.py {' '.join(sys.argv[1:] if argv is None else argv)}")
    real = shadow_models.train_shadows
    calls: list[dict[str, object]] = []

    def timed(*a: object, **kw: object) -> object:
        err = io.StringIO()
        waited = run_queue_seconds()
        wall, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stderr(err), observed_plans() as plans:
            out = real(*a, **kw)
        text = err.getvalue()
        calls.append(
            dict(
                attack=kw.get("attack"),
                wall=time.perf_counter() - wall,
                cpu=time.process_time() - cpu,
                waited=run_queue_seconds() - waited,
                text=text,
                plans=sum(t for _, t in plans),
            )
        )
        return out

    lira.train_shadows = shadow_models.train_shadows = timed  # type: ignore[assignment]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-shadow-cost-") as tmp:
        root = Path(tmp)
        data = make_data(root, 400, 1200)
        for task in args.shadow_tasks.split(","):
            common: dict[str, object] = dict(task=task, preset="tiny", max_length=32, batch_size=32)
            if task == "classify":
                common["labels"] = None
            start = train_target(
                data, root / f"{task}-start", data_split="public", non_private=True, epochs=1, **common
            )
            for peft in args.shadow_peft.split(","):
                lora = {"peft": "lora", "lora_rank": 8} if peft == "lora" else {}
                name = f"{task}-{peft}"
                target = train_target(
                    data, root / name, init_from=str(start), mode="dp-sgd", target_epsilon=8.0, epochs=2,
                    noise_seed=1, **lora, **common,
                )  # fmt: skip
                calls.clear()
                load = os.getloadavg()[0]
                for attack in args.shadow_attacks.split(","):
                    dpaudit.attack(
                        target, data, [attack], out=root / f"{name}-{attack}", shadow_models=args.shadows,
                        shadow_cache=str(root / f"{name}-cache"), progress=False, workers=args.shadow_workers,
                    )  # fmt: skip
                for call in calls:
                    text = str(call["text"])
                    got = estimate_figures(text)
                    trained = [float(x) for x in re.findall(r"trained in ([\d.]+) s", text)]
                    line = next((x for x in text.splitlines() if "estimated CPU time" in x), "(all cached)")
                    print(f"{name} {call['attack']}: {line.strip()}", flush=True)
                    wall_line = next((x for x in text.splitlines() if "estimated wall time" in x), None)
                    if wall_line:
                        print(f"{name} {call['attack']}: {wall_line.strip()}", flush=True)
                    if got is None or not trained:
                        continue
                    est_cpu, est_wall, said_upper = got
                    wall, cpu = float(call["wall"]), float(call["cpu"])  # type: ignore[arg-type]
                    models = len(trained)
                    upper = said_upper or est_wall
                    rows.append((name, call["attack"], models, load, est_wall, upper, wall, est_cpu, cpu))
                    versus = "n/a (spent in the workers)" if args.shadow_workers else f"{est_cpu / cpu:.2f}"
                    waited = float(call["waited"])  # type: ignore[arg-type]
                    print(
                        f"{name} {call['attack']}: the call's wall {wall:.1f} s; its threads' CPU {cpu:.1f} s and "
                        f"waiting for a core {waited:.1f} s (summed over threads, so not a split of the wall)",
                        flush=True,
                    )
                    print(
                        f"{name} {call['attack']}: {models} models: estimate wall {est_wall:.1f} s, CPU "
                        f"{est_cpu:.1f} s; measured: the call's wall {wall:.1f} s (the models' own {sum(trained):.1f} "
                        f"s), the call's CPU {cpu:.1f} s; estimate / measured: wall {est_wall / wall:.2f}, CPU "
                        f"{versus} (load {load:.1f}); privacy plans made in the call: "
                        f"{float(call['plans']):.1f} s wall; each model's wall: "
                        + ", ".join(f"{t:.1f} s" for t in trained),
                        flush=True,
                    )
    print(f"load after: {uptime()}")
    print(
        "\n| target | attack | models | load | wall: estimate / measured | 'up to' / measured | measured within "
        "[about / 1.3, up to x 1.3] | CPU: estimate / measured |"
    )
    print("|---|---|---|---|---|---|---|---|")
    inside = 0
    for name, attack, k, load, est_wall, upper, wall, est_cpu, cpu in rows:
        versus = "- (spent in the workers)" if args.shadow_workers else f"{cpu:.1f} s = {est_cpu / cpu:.2f}"
        held = est_wall / 1.3 <= wall <= upper * 1.3
        inside += held
        print(
            f"| {name} | {attack} | {k} | {load:.1f} | {est_wall:.1f} s / {wall:.1f} s = {est_wall / wall:.2f} | "
            f"{upper:.1f} s / {wall:.1f} s = {upper / wall:.2f} | {'yes' if held else 'NO'} | "
            f"{est_cpu:.1f} s / {versus} |"
        )
    print(f"measured wall within [about / 1.3, up to x 1.3] in {inside} of {len(rows)} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
