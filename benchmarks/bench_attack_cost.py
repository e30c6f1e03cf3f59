"""The cost of each attack at the presets' sizes, and how far the estimate ``dpaudit attack`` prints is from it.

A causal LM of a preset's shapes (``gpt2-small``: GPT-2's own 12 x 768, vocabulary 50,257; random weights: the cost
does not depend on them) with the trainer's WordPiece tokenizer learned on public.jsonl and padded to the family's
vocabulary (as ``bench_finetune_sizes.py`` does; one token per digit), and an inject directory of the built-in corpus
with ``--canaries`` digit canaries (half inserted once, half controls; ``--format``, default the inject default
digits:10) and ``--examples`` membership examples (half members, half held out).

For exposure, extraction, loss and Min-K%++ (:mod:`dpaudit.attacks.attack_cost`):

- ``full``: the forward passes and tokens the attack runs at the full size (``--canaries``, ``--examples``), and the
  estimate of their time, priced by :func:`~dpaudit.attacks.attack_cost.measure_forward_cost` on this model now;
- ``measured``: the attack's own ``run`` on a subset (``--subset-canaries`` canaries for exposure, with
  ``--subset-samples`` sampled candidates, and extraction; ``--subset-examples`` examples, beside every canary's
  text, for the membership scores), wall and process CPU time, beside the estimate of that
  subset: their ratio is the estimate's error at this size on this machine, and the full-size time it implies is
  printed as the full estimate times that ratio (a projection, said as one: the full runs take hours on 2 CPU cores).
  With ``--clock cpu`` both the prices and the measured subset are process CPU seconds (the load of a shared machine
  moves wall seconds by several times; the estimate ``dpaudit attack`` prints is in wall seconds).

Threads: torch uses OMP_NUM_THREADS (2 unless set). The load is printed before and after (``uptime``).

Example (about 5 minutes on 2 shared cores at load ~10):
    OMP_NUM_THREADS=2 nice -n 10 python benchmarks/bench_attack_cost.py --preset gpt2-small
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

#: Vocabulary of each causal preset's family.
VOCAB = {"gpt2-small": 50257, "mini": 50257, "tiny": 300}


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
    from dpaudit.trainers.torch_common.model import build_causal_model
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
    args = parser.parse_args(argv)

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
    print(f"load before: {uptime()}; torch threads {torch.get_num_threads()}; clock {args.clock}")
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
        canaries = list(run.canaries)
        space = run.space
        secrets, _ = cs.alphabet_secrets(scorer.tokenizer, canaries, space, max_length=scorer.max_length)
        located = [(len(s.context), len(s.secret)) for s in secrets]
        triple = (len(space.alphabet), int(space.length), int(space.size))

        def texts_of(mia_examples: int) -> list[int]:
            options = AttackOptions(mia_examples=mia_examples // 2)
            tasks = [example_task(run, **example_options(options))]
            task = canary_task(run)
            tasks += [task] if task is not None else []
            return [n for t in tasks for n in attack_cost._token_lengths(scorer.tokenizer, list(t.texts), 128)]

        cost = attack_cost.measure_forward_cost(
            scorer.model, device="cpu", rows=8, length=32, vocab=scorer.model.config.vocab_size
        )
        print(
            f"model: {args.preset} ({params / 1e6:.1f}M parameters, vocabulary {scorer.model.config.vocab_size:,}); "
            f"{len(canaries)} canaries of {args.secret_format} (|R| = {space.size:,}); "
            f"forward cost measured now: {cost.per_token * 1e3:.2f} ms per token, {cost.per_call * 1e3:.1f} ms per pass"
        )
        options = dict(batch_size=args.batch_size, beam_width=5, exposure_limit=10**5, exposure_samples=1000)

        def work(name: str, indices: list[int], examples: int, samples: int = 1000) -> attack_cost.AttackWork:
            texts = texts_of(examples) if name in attack_cost.TEXT_SCORES else []
            out = attack_cost.attack_work(
                name, kind="causal-lm", canaries=[located[i] for i in indices], canary_tokens=[], space=triple,
                single_tokens=True, texts=texts, options={**options, "exposure_samples": samples},
                node_batch=cs.NODE_BATCH,
            )  # fmt: skip
            assert out is not None
            return out

        rows = []
        for name in ("exposure", "extraction", "loss", "min-k++"):
            membership = name in attack_cost.TEXT_SCORES
            full = work(name, list(range(len(canaries))), args.examples)
            full_s = cost.seconds(full.calls, full.tokens)
            k = args.subset_canaries
            inserted = [i for i, c in enumerate(canaries) if c.frequency > 0][: (k + 1) // 2]
            indices = inserted + [i for i, c in enumerate(canaries) if c.frequency == 0][: k // 2]
            subset = work(
                name, list(range(len(canaries))) if membership else indices, args.subset_examples, args.subset_samples
            )
            sub_s = cost.seconds(subset.calls, subset.tokens)
            opts = AttackOptions(
                batch_size=args.batch_size,
                mia_examples=args.subset_examples // 2,
                blind_baseline=False,
                exposure_samples=args.subset_samples,
            )
            chosen = canaries if membership else [canaries[i] for i in indices]
            context = AttackContext(scorer=scorer, canaries=chosen, space=space, options=opts, data=run)
            wall, cpu = time.perf_counter(), time.process_time()
            attack_class(name)().run(context)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            ratio = (wall if args.clock == "wall" else cpu) / sub_s
            rows.append((name, full, full_s, subset.what, sub_s, wall, cpu, ratio))
            print(
                f"{name:>10}: full: {full.what}: {full.tokens:,} tokens in {full.calls:,} passes, estimate "
                f"{full_s / 60:.1f} min | subset ({subset.what}): estimate {sub_s:.1f} s, measured {wall:.1f} s wall "
                f"({cpu:.1f} s CPU), measured ({args.clock}) / estimate {ratio:.2f} -> full size about {full_s * ratio / 60:.1f} min",
                flush=True,
            )
        print(f"load after: {uptime()}")
        print("\n| attack | full size: work | estimate | subset measured / estimate | full size projected |")
        print("|---|---|---|---|---|")
        for name, full, full_s, what, sub_s, wall, cpu, ratio in rows:
            print(
                f"| {name} | {full.what}: {full.tokens:,} tokens, {full.calls:,} passes | {full_s / 60:.1f} min | "
                f"{wall if args.clock == 'wall' else cpu:.1f} s / {sub_s:.1f} s = {ratio:.2f} ({what}) | "
                f"{full_s * ratio / 60:.1f} min |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
