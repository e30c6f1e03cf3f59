"""How far LoRA can move a language model at all, on PUBLIC rows only: what limits the adapters' reach.

A start's WordPiece tokenizer is trained on its public text, so private text of another kind is written in word
pieces whose embeddings public training barely moved; an adapter on a linear layer does not reach them. This
benchmark measures that on a split of the built-in corpus's public intents (the ones ``bench_dp_recipe.py
--public-intents`` gives the public start), so it reads no private row and may choose a recipe:

- a pseudo start: edp-sgd tiny (``--task clm``; ``mlm-torch``: ``--task mlm`` at 30% masking, as
  ``bench_dp_recipe.py``'s), 3 epochs of 64 at 3e-3 (the tasks' public start) on ``--start-rows`` rows of the first
  intents (call_contact, send_message, refill_prescription, medication_reminder);
- ``--rows`` pseudo-private rows and 400 pseudo-held-out rows of the other intents (book_appointment, play_movie,
  play_music), no canaries;
- from the pseudo start, without clipping or noise (``--mode sgd``): the full model (20 epochs of 64 at 3e-3, the
  bench's non-private model), LoRA r32 on every linear layer (10 epochs of 512 at 1e-2, the recipe of
  ``bench_dp_recipe.py``'s r32 cell), the same with the token and position embeddings trained in full
  (``--lora-modules-to-save``: GPT-2's ``wte,wpe``, BERT's ``word_embeddings,position_embeddings``) and with every
  LayerNorm too; with ``--dp``, the LoRA + embeddings schedule at epsilon 8 (one noise seed).

Printed: held-out next-token accuracy of each, the trained parameter counts, and each / the full model's.

Measured (2026-12-01, the shared 2-core machine beside other runs of the session, load 2-3; ``DPAUDIT_THREADS=1``;
one run each; the trivial baseline is the most frequent token)::

    python benchmarks/bench_lora_reach.py --workdir R --task mlm-torch --dp
    python benchmarks/bench_lora_reach.py --workdir R --task clm --dp

                                                           trained      causal LM        masked LM (torch)
      pseudo start (12,000 rows of 4 intents)                           11.08%           8.63%
      full, non-private, 20 ep x 64 at 3e-3                all          75.80%  1.00     81.82%  1.00
      LoRA r32 all linear, 10 ep x 512 at 1e-2             65,536       31.49%  0.42     35.68%  0.44
      the same + token and position embeddings in full     127,360      73.18%  0.97     73.61%  0.90
      the same + every LayerNorm too                       128,000      73.34%  0.97     72.21%  0.88
      LoRA + embeddings, epsilon 8 (noise seed 0)          127,360      64.14%  0.85     50.14%  0.61

    (trained: the causal LM's counts; the masked LM's 61,440, 123,264 and 124,032; trivial 5.21% and 4.20%)

The adapters alone keep two fifths of what the full model learns here; with the token and position embeddings
trained beside them, 0.90-0.97x. README, "DP fine-tuning with LoRA", has the cells this chose on the real rows.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dp_recipe import EPSILON, figure, inject_split, train  # noqa: E402

from dpaudit.corpus import assistant  # noqa: E402

START_INTENTS = ("call_contact", "send_message", "refill_prescription", "medication_reminder")
HELD_INTENTS = ("book_appointment", "play_movie", "play_music")
COMMON = ("--trainer", "edp-sgd", "--preset", "tiny", "--max-length", "32", "--seed", "0")
LORA = ("--epochs", "10", "--batch-size", "512", "--learning-rate", "1e-2", "--peft", "lora", "--lora-rank", "32")


@dataclass(frozen=True)
class Model:
    """What differs between the causal and the masked LM: the task's options and its modules' names."""

    options: tuple[str, ...]
    linear: str  # every linear layer: the LoRA targets
    embeddings: str  # token and position embeddings
    norms: str  # the LayerNorms


MODELS = {
    "clm": Model(("--task", "clm"), "c_attn,c_proj,c_fc", "wte,wpe", "ln_1,ln_2,ln_f"),
    # bench_dp_recipe.py's --task mlm-torch: edp-sgd's masked LM at its 30% masking
    "mlm-torch": Model(
        ("--task", "mlm", "--mask-prob", "0.3"),
        "query,key,value,dense",
        "word_embeddings,position_embeddings",
        "LayerNorm",
    ),
}


def split(root: Path, start_rows: int, rows: int) -> Path:
    """The pseudo split's inject directory (the built-in stream, seed 0; public rows of the two intent groups)."""
    data = root / "data"
    if (data / "manifest.json").is_file():
        return data
    pool = list(assistant.generate(20 * (start_rows + rows), 0))
    start = [r for r in pool if r["label"] in START_INTENTS][:start_rows]
    held = [r for r in pool if r["label"] in HELD_INTENTS][: rows + 400]
    if len(start) < start_rows or len(held) < rows + 400:
        raise SystemExit(f"the built-in stream of {len(pool)} rows is too short for --start-rows / --rows")
    src = root / "src"
    src.mkdir(parents=True, exist_ok=True)
    for name, part in {"public": start, "private": held[400:], "heldout": held[:400]}.items():
        lines = ["text\tlabel", *(f"{r['text']}\t{r['label']}" for r in part)]
        (src / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    inject_split(data, src / "private.tsv", src / "heldout.tsv", src / "public.tsv", ("--no-canaries",))
    return data


def trained_parameters(run: Path) -> str:
    privacy = json.loads((run / "privacy.json").read_text(encoding="utf-8"))
    trained = (privacy.get("details") or {}).get("trained")
    return f"{trained['trained_parameters']:,}" if isinstance(trained, dict) else "all parameters"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="Runs are cached here (default: a temp folder).")
    parser.add_argument("--start-rows", type=int, default=12000, help="Rows of the pseudo start's intents.")
    parser.add_argument("--rows", type=int, default=6000, help="Pseudo-private rows of the other intents.")
    parser.add_argument("--dp", action="store_true", help="Also the LoRA + embeddings schedule at epsilon 8.")
    parser.add_argument(
        "--task", choices=sorted(MODELS), default="clm", help="clm: the causal LM; mlm-torch: edp-sgd's masked LM."
    )
    args = parser.parse_args()
    if args.start_rows < 1 or args.rows < 1:
        parser.error("--start-rows and --rows: give positive numbers")
    model = MODELS[args.task]
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-lora-reach-"))
    root.mkdir(parents=True, exist_ok=True)
    data = split(root, args.start_rows, args.rows)
    base = ("--data", str(data), *COMMON, *model.options, "--eval-examples", "400")
    at = root / args.task
    start = train(at / "start", *base, "--mode", "sgd", "--data-split", "public", "--non-private", "--epochs", "3",
                  "--batch-size", "64", "--learning-rate", "3e-3")  # fmt: skip
    sgd = ("--init-from", str(start), "--mode", "sgd", "--non-private")
    lora = (*LORA, "--lora-targets", model.linear)
    embeddings = ("--lora-modules-to-save", model.embeddings)
    runs = {
        "full, non-private, 20 ep x 64 at 3e-3": train(
            at / "full", *base, *sgd, "--epochs", "20", "--batch-size", "64", "--learning-rate", "3e-3"
        ),
        "LoRA r32 all linear, 10 ep x 512 at 1e-2": train(at / "lora", *base, *sgd, *lora),
        f"the same + {model.embeddings} in full": train(at / "lora-emb", *base, *sgd, *lora, *embeddings),
        f"the same + {model.norms} too": train(
            at / "lora-emb-ln", *base, *sgd, *lora, "--lora-modules-to-save", f"{model.embeddings},{model.norms}"
        ),
    }
    if args.dp:
        dp = ("--init-from", str(start), "--mode", "dp-sgd", "--target-epsilon", EPSILON, "--noise-seed", "0")
        runs[f"LoRA r32 all linear + embeddings, epsilon {EPSILON}"] = train(
            at / "lora-emb-dp", *base, *dp, *lora, *embeddings
        )
    full = figure(runs["full, non-private, 20 ep x 64 at 3e-3"]).value
    start_fig = figure(start)
    print(f"\npublic rows only; uptime {os.getloadavg()}")
    print(f"  pseudo start ({args.start_rows:,} rows of {len(START_INTENTS)} intents)   start {start_fig.value:.2%}"
          f"  (trivial {start_fig.baseline or float('nan'):.2%})")  # fmt: skip
    for name, run in runs.items():
        value = figure(run).value
        print(f"  {name:<62} {trained_parameters(run):>15} {value:>8.2%} {value / full:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
