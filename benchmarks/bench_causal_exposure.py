"""Exact causal exposure of one canary: the prefix tree against scoring every candidate's full text.

A GPT-2 of the ``mini`` (or ``tiny``) preset with random weights (the cost does not depend on the weights) and a
WordPiece tokenizer trained on a few sentences (one token per digit, ``[CLS]`` as BOS). For digits:L, |R| = 10^L:

- ``tree``: :func:`dpaudit.scoring.causal_secrets.prefix_tree_scores`, the canary's prefix run once with its key/value
  cache, then sum_{k<L} 10^k tree nodes, each one token on top of its parent's cache, 1024 nodes per pass;
- ``brute``: :func:`dpaudit.scoring.causal_secrets.sequence_log_likelihoods` on all 10^L full texts (prefix + candidate),
  batch 256: the oracle the tree is tested against (tests/attacks/test_causal_exposure.py).

Both give every candidate's score; the largest difference is printed (float32 forward passes). Wall and CPU time,
minimum over --repeats, in one process (so the ratio is measured side by side). Threads: torch uses
OMP_NUM_THREADS (1 unless set).

Run: python benchmarks/bench_causal_exposure.py [--preset mini] [--lengths 3,4] [--repeats 2] [--brute-max 4]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402

TEXTS = [
    "the quick brown fox jumps over the lazy dog",
    "alice smith's account number is 4 8 1 5 9 0 2 3 6 7",
    "please call me back at 5 5 5 0 1 9 9 tomorrow",
    "the meeting moved to room 1 2 on friday",
]
PREFIX = "alice smith's account number is "


def _timed(fn, repeats: int):  # noqa: ANN001, ANN202
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        best_wall, best_cpu = min(best_wall, time.perf_counter() - wall), min(best_cpu, time.process_time() - cpu)
    return out, best_wall, best_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="mini", choices=["tiny", "mini"])
    parser.add_argument("--lengths", default="3,4")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--brute-max", type=int, default=4, help="skip brute force above digits:N")
    args = parser.parse_args()

    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    from dpaudit.inject_dir.secret_spaces import ProductSpace
    from dpaudit.scoring import causal_secrets as cs
    from dpaudit.trainers.torch_common.hf_export import save_hf
    from dpaudit.training.presets import CAUSAL_PRESETS
    from dpaudit.training.tokenizer import special_token_ids, train_wordpiece

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    tokenizer = train_wordpiece(TEXTS, vocab_size=200, min_frequency=1)
    ids = special_token_ids(tokenizer)
    config = GPT2Config(
        vocab_size=tokenizer.get_vocab_size(),
        bos_token_id=ids["cls"],
        eos_token_id=ids["sep"],
        pad_token_id=ids["pad"],
        tie_word_embeddings=True,
        **CAUSAL_PRESETS[args.preset],
    )
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        save_hf(Path(tmp), GPT2LMHeadModel(config).eval(), tokenizer)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp).eval()
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp)
    print(
        f"preset {args.preset}, {sum(p.numel() for p in model.parameters()):,} parameters, torch threads "
        f"{torch.get_num_threads()}, load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"{'space':>9} {'|R|':>8} {'tree wall s':>11} {'tree cpu s':>10} {'brute wall s':>12} {'brute cpu s':>11} "
        f"{'ratio':>6} {'max |diff|':>10}"
    )
    for length in (int(x) for x in args.lengths.split(",")):
        space = ProductSpace(kind="digits", alphabet=[str(i) for i in range(10)], length=length)
        canary = SimpleNamespace(
            id="c", prefix=PREFIX, secret=space.secret_of([4, 8, 1, 5, 9, 0, 2][:length]), suffix=""
        )
        (secret,), alphabet = cs.alphabet_secrets(hf_tokenizer, [canary], space, max_length=128)
        tree, t_wall, t_cpu = _timed(
            lambda: cs.prefix_tree_scores(model, secret.context, alphabet, length, device="cpu"), args.repeats
        )
        row = f"{space.format:>9} {space.size:>8,} {t_wall:>11.3f} {t_cpu:>10.3f}"
        if length <= args.brute_max:
            candidates = [
                cs.CausalSecret(context=secret.context, secret=alphabet[list(d)].tolist())
                for d in np.ndindex(*(10,) * length)
            ]
            brute, b_wall, b_cpu = _timed(
                lambda: cs.sequence_log_likelihoods(model, hf_tokenizer, candidates, device="cpu", batch_size=256),
                args.repeats,
            )
            row += f" {b_wall:>12.3f} {b_cpu:>11.3f} {b_wall / t_wall:>6.1f} {np.abs(tree - brute).max():>10.2e}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
