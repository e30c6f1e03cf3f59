"""DP-SGD step vs non-private step of the jax-bert trainer, and vs Opacus on the torch twin.

Prints one table: examples/s of the trainer's JAX DP-SGD step (ghost norms + book-keeping), of the
non-private step of the same model at the same logical batch, and of the plain vmap(grad) DP step,
measured in one run with the steps interleaved (run-to-run spread on a shared CPU is 10-25%, so
only same-run ratios mean much), their ratios and the process's peak RSS; then Opacus 1.6 DP-SGD
(hooks) and plain torch on the ``transformers.BertForMaskedLM`` of the same config.

Model: the Dupuy et al. BERT (``--preset mini``: 4 layers, hidden 312, 12 heads, intermediate 1200),
sequence length 64, vocabulary 30,522. Synthetic token ids, 10 masked positions per example; one
full chunk of ``batch / physical_batch`` micro-steps per logical batch (no Poisson padding: timing only).
The JAX process applies what the trainer applies at start-up (``cpu_runtime.tune_cpu_runtime``).

Two torch references, both timed in a separate process with default settings (what an Opacus
user runs; ``--opacus-in-process`` times them here instead, with the JAX process's tuning):
  - "twin": the masked-LM logits only at the masked positions, as the JAX model computes them;
  - "stock": HF's own forward with ``labels`` (-100 off the masked positions), which runs the
    [hidden x vocabulary] decoder at every position: what a user of BertForMaskedLM + Opacus runs.

Opacus note: Opacus 1.6 crashes on transformers 5's BertForMaskedLM because ``cls.predictions.bias``
is the same tensor as ``cls.predictions.decoder.bias``; this benchmark deletes
``cls.predictions._parameters["bias"]`` before ``make_private`` (measured on a 2-core CPU) and says so.

Example:
    python benchmarks/bench_jax_bert_step.py                       # defaults, a few minutes on 2 cores
    python benchmarks/bench_jax_bert_step.py --batch-sizes 32,256,1024 --repeats 5 --json
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

DEFAULT_PRESET = "mini"


@dataclass(frozen=True, kw_only=True)
class Row:
    """One measured configuration (examples/s are medians over the timed repeats)."""

    batch: int
    physical_batch: int
    dp_examples_per_s: float  # the trainer's DP step: ghost norms + book-keeping (trainers.jax_bert.ghost_clipping)
    nonprivate_examples_per_s: float
    dp_over_nonprivate_time: float
    dp_vmap_examples_per_s: float  # plain vmap(grad) of every parameter (the generic recipe)
    dp_vmap_over_nonprivate_time: float
    peak_rss_mib_after_nonprivate: float
    peak_rss_mib_after_dp: float
    dp_minor_faults_per_step: float
    nonprivate_minor_faults_per_step: float


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def synthetic_examples(n: int, *, seq_len: int, n_pred: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random full-length token sequences with ``n_pred`` distinct masked positions each."""
    rng = np.random.default_rng(seed)
    pos = np.sort(np.argsort(rng.random((n, seq_len - 2)), axis=1)[:, :n_pred] + 1, axis=1)
    return {
        "input_ids": rng.integers(5, vocab, size=(n, seq_len)).astype(np.int32),
        "attention_mask": np.ones((n, seq_len), np.int32),
        "masked_positions": pos.astype(np.int32),
        "masked_labels": rng.integers(5, vocab, size=(n, n_pred)).astype(np.int32),
        "masked_weights": np.ones((n, n_pred), np.float32),
    }


def bench_jax(args: argparse.Namespace) -> list[Row]:
    import jax

    from dpaudit.trainers.jax_bert import dp_step, ghost_clipping, model, optimizer, sampling

    cfg = model.preset_config(
        args.preset,
        vocab_size=args.vocab,
        max_position_embeddings=max(128, args.seq_len),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    net = model.FlaxBertForMaskedLM(cfg)
    loss_fn = functools.partial(model.example_mlm_loss, model=net)
    params = model.init_params(cfg, jax.random.key(0), seq_len=args.seq_len)
    n_params = sum(x.size for x in jax.tree.leaves(params))
    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform} x{jax.device_count()}; "
        f"{args.preset} BERT, {n_params / 1e6:.1f}M parameters, seq {args.seq_len}, "
        f"{args.n_pred} masked positions",
        file=sys.stderr,
    )
    opt = optimizer.make_optimizer(learning_rate=1e-4, warmup_steps=10, total_steps=10_000, weight_decay=0.01)
    data = synthetic_examples(max(args.batch_sizes), seq_len=args.seq_len, n_pred=args.n_pred, vocab=args.vocab)
    rows = []
    for batch in args.batch_sizes:
        m = min(args.physical_batch, batch)
        if batch % m:
            raise SystemExit(f"--batch-sizes {batch} must be a multiple of --physical-batch {m}.")
        ((idx, mask),) = sampling.pack_microsteps(np.arange(batch), m, batch // m)
        chunks = [({k: v[idx] for k, v in data.items()}, mask)]
        steps = {
            "nonprivate": dp_step.make_nonprivate_train_step(loss_fn, opt, donate_state=True),
            "dp": dp_step.make_dp_train_step(
                loss_fn,
                opt,
                clip_norm=1.0,
                donate_state=True,
                clipped_sum_fn=ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=1.0),
            ),
            "dp_vmap": dp_step.make_dp_train_step(
                loss_fn, opt, clip_norm=1.0, donate_state=True, vmap_size=args.vmap_size
            ),
        }
        state = {}
        peak = {}
        for name, step in steps.items():  # compile + one warm step each, non-private first
            p = jax.tree.map(lambda x: x.copy(), params)
            s = opt.init(p)
            p, s, metrics = step(p, s, chunks, jax.random.key(0), 1.0, float(batch))
            p, s, metrics = step(p, s, chunks, jax.random.key(1), 1.0, float(batch))
            jax.block_until_ready((p, s, metrics))
            state[name] = (p, s)
            peak[name] = _peak_rss_mib()
        times = {name: [] for name in steps}
        faults = {name: [] for name in steps}
        for r in range(args.repeats):  # interleaved, so load drift hits both alike
            for name, step in steps.items():
                p, s = state[name]
                f0, t0 = _minor_faults(), time.perf_counter()
                p, s, metrics = step(p, s, chunks, jax.random.key(2 + r), 1.0, float(batch))
                jax.block_until_ready((p, s, metrics))
                times[name].append(time.perf_counter() - t0)
                faults[name].append(_minor_faults() - f0)
                state[name] = (p, s)
        dp_t = statistics.median(times["dp"])
        np_t = statistics.median(times["nonprivate"])
        vmap_t = statistics.median(times["dp_vmap"])
        row = Row(
            batch=batch,
            physical_batch=m,
            dp_examples_per_s=batch / dp_t,
            nonprivate_examples_per_s=batch / np_t,
            dp_over_nonprivate_time=dp_t / np_t,
            dp_vmap_examples_per_s=batch / vmap_t,
            dp_vmap_over_nonprivate_time=vmap_t / np_t,
            peak_rss_mib_after_nonprivate=peak["nonprivate"],
            peak_rss_mib_after_dp=peak["dp"],
            dp_minor_faults_per_step=statistics.median(faults["dp"]),
            nonprivate_minor_faults_per_step=statistics.median(faults["nonprivate"]),
        )
        print(
            f"  batch {batch}: DP {row.dp_examples_per_s:.1f} ex/s, non-private "
            f"{row.nonprivate_examples_per_s:.1f} ex/s, ratio {row.dp_over_nonprivate_time:.2f}x; plain vmap DP "
            f"{row.dp_vmap_examples_per_s:.1f} ex/s ({row.dp_vmap_over_nonprivate_time:.2f}x) "
            f"(times dp {[round(t, 2) for t in times['dp']]}, vmap {[round(t, 2) for t in times['dp_vmap']]}, "
            f"np {[round(t, 2) for t in times['nonprivate']]})",
            file=sys.stderr,
        )
        rows.append(row)
    return rows


def bench_opacus(args: argparse.Namespace) -> dict[str, Any]:
    """Opacus DP-SGD (hooks) and plain torch on ``BertForMaskedLM`` of the same config."""
    import opacus
    import torch
    import transformers
    from opacus import PrivacyEngine

    torch.manual_seed(0)
    from dpaudit.trainers.jax_bert import model as jax_model

    preset = jax_model.PRESETS[args.preset]
    config = transformers.BertConfig(
        vocab_size=args.vocab,
        hidden_size=preset["hidden_size"],
        num_hidden_layers=preset["num_hidden_layers"],
        num_attention_heads=preset["num_attention_heads"],
        intermediate_size=preset["intermediate_size"],
        max_position_embeddings=max(128, args.seq_len),
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )
    batch = args.opacus_batch
    data = {
        k: torch.from_numpy(v)
        for k, v in synthetic_examples(batch, seq_len=args.seq_len, n_pred=args.n_pred, vocab=args.vocab).items()
    }

    ids_long = data["input_ids"].long()
    stock_labels = torch.full_like(ids_long, -100)
    stock_labels.scatter_(1, data["masked_positions"].long(), data["masked_labels"].long())

    def stock_mlm_loss(net: torch.nn.Module) -> torch.Tensor:
        # What a user writes: HF's own forward with labels (-100 off the masked positions), which
        # runs the [hidden x vocabulary] decoder at every position.
        positions = torch.arange(ids_long.shape[1]).expand_as(ids_long).contiguous()
        return net(
            input_ids=ids_long,
            attention_mask=data["attention_mask"].long(),
            token_type_ids=torch.zeros_like(ids_long),
            position_ids=positions,
            labels=stock_labels,
        ).loss

    def mlm_loss(net: torch.nn.Module) -> torch.Tensor:
        # Logits only at the masked positions, as in the JAX model (HF's forward does all positions).
        # Explicit [B, L] position and token-type ids: HF's default [1, L] buffers would give Opacus's
        # per-sample embedding hooks a batch of 1.
        ids = data["input_ids"].long()
        positions = torch.arange(ids.shape[1]).expand_as(ids).contiguous()
        hidden = net.bert(
            input_ids=ids,
            attention_mask=data["attention_mask"].long(),
            token_type_ids=torch.zeros_like(ids),
            position_ids=positions,
        )[0]
        index = data["masked_positions"].long()[..., None].expand(-1, -1, hidden.shape[-1])
        logits = net.cls(torch.gather(hidden, 1, index))
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), data["masked_labels"].long().reshape(-1), reduction="none"
        ).reshape(batch, -1)
        return (nll.mean(dim=1)).mean()

    def timed(step, examples: int) -> float:
        step()  # warm-up
        times = []
        for _ in range(args.opacus_repeats):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        return examples / statistics.median(times)

    def plain_rate(loss) -> float:
        plain = transformers.BertForMaskedLM(config).train()
        plain_opt = torch.optim.SGD(plain.parameters(), lr=1e-4)

        def plain_step() -> None:
            plain_opt.zero_grad()
            loss(plain).backward()
            plain_opt.step()

        return timed(plain_step, batch)

    def opacus_rates(loss) -> dict[str, float]:
        """ex/s at each logical batch: physical batches of ``batch`` with Opacus's virtual steps
        (``signal_skip_step``, as its BatchMemoryManager does), one noisy update per logical batch."""
        dp_model = transformers.BertForMaskedLM(config).train()
        # The the Opacus shared-bias fix: the head's `bias` is shared with `decoder.bias`; Opacus 1.6 crashes on it.
        del dp_model.cls.predictions._parameters["bias"]
        dp_opt = torch.optim.SGD(dp_model.parameters(), lr=1e-4)
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data["input_ids"]), batch_size=batch)
        gsm, dp_opt, _ = PrivacyEngine().make_private(
            module=dp_model,
            optimizer=dp_opt,
            data_loader=loader,
            noise_multiplier=1.0,
            max_grad_norm=1.0,
            poisson_sampling=False,
        )
        rates = {}
        for logical in args.batch_sizes:
            if logical % batch:
                continue
            physical_steps = logical // batch

            def opacus_step() -> None:
                for j in range(physical_steps):
                    dp_opt.signal_skip_step(do_skip=j < physical_steps - 1)
                    dp_opt.zero_grad()
                    loss(gsm._module).backward()
                    dp_opt.step()

            rates[str(logical)] = timed(opacus_step, logical)
        return rates

    result: dict[str, Any] = {
        "opacus_version": opacus.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "physical_batch": batch,
        "opacus_examples_per_s": opacus_rates(mlm_loss),
        "torch_nonprivate_examples_per_s": plain_rate(mlm_loss),
        "fix_applied": 'deleted cls.predictions._parameters["bias"] before make_private (shared with decoder.bias)',
    }
    if args.opacus_stock:
        result["opacus_stock_examples_per_s"] = opacus_rates(stock_mlm_loss)
        result["torch_stock_nonprivate_examples_per_s"] = plain_rate(stock_mlm_loss)
    return result


def opacus_in_default_process(args: argparse.Namespace) -> dict[str, Any]:
    """Runs the Opacus part in a fresh interpreter with glibc's default malloc: the environment an
    Opacus user gets (the JAX trainer tunes its own process; see ``cpu_runtime``)."""
    import subprocess

    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--no-jax",
        "--json",
        "--no-tune-runtime",
        "--preset",
        args.preset,
        "--vocab",
        str(args.vocab),
        "--seq-len",
        str(args.seq_len),
        "--n-pred",
        str(args.n_pred),
        "--opacus-batch",
        str(args.opacus_batch),
        "--batch-sizes",
        ",".join(str(b) for b in args.batch_sizes),
        "--opacus-repeats",
        str(args.opacus_repeats),
        "--opacus-stock" if args.opacus_stock else "--no-opacus-stock",
    ]
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the Opacus benchmark process failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)["opacus"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Example: python benchmarks/bench_jax_bert_step.py --batch-sizes 32,256",
    )
    parser.add_argument("--preset", default=DEFAULT_PRESET)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--n-pred", type=int, default=10, help="masked positions per example (15%% of 64)")
    parser.add_argument("--batch-sizes", default="32,256", help="comma-separated logical batch sizes")
    parser.add_argument(
        "--physical-batch", type=int, default=32, help="examples per micro-step (the trainer's --physical-batch)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed steps per configuration")
    parser.add_argument("--opacus-batch", type=int, default=32)
    parser.add_argument("--opacus-repeats", type=int, default=2)
    parser.add_argument("--no-opacus", action="store_true")
    parser.add_argument(
        "--opacus-in-process",
        action="store_true",
        help="time Opacus in this process, after the JAX part and with its runtime tuning "
        "(default: a fresh process with default malloc, as an Opacus user runs it)",
    )
    parser.add_argument(
        "--opacus-stock",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time Opacus on HF's stock forward with labels (decoder at every position)",
    )
    parser.add_argument("--no-jax", action="store_true", help="only the torch/Opacus part")
    parser.add_argument(
        "--vmap-size", type=int, default=None, help="examples per vmap(grad), plain vmap DP (default: auto)"
    )
    parser.add_argument(
        "--no-tune-runtime",
        action="store_true",
        help="keep glibc's default malloc and JAX's rolled CPU Threefry (the trainer tunes both; "
        "see trainers/jax_bert/cpu_runtime.py)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    args = parser.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    tuned = {"host_allocator": False, "unrolled_threefry": False}
    if not args.no_tune_runtime:
        from dpaudit.trainers.jax_bert import cpu_runtime

        tuned = cpu_runtime.tune_cpu_runtime()  # what the trainer applies at start-up

    rows = [] if args.no_jax else bench_jax(args)
    if args.no_opacus:
        opacus_res = None
    elif args.no_jax or args.opacus_in_process:
        opacus_res = bench_opacus(args)
    else:
        opacus_res = opacus_in_default_process(args)
    result = {
        "env": {
            "GLIBC_TUNABLES": os.environ.get("GLIBC_TUNABLES", ""),
            "cpus": os.cpu_count(),
            "cpu_runtime_tuning": tuned,
            "vmap_size": args.vmap_size,
        },
        "jax": [asdict(r) for r in rows],
        "opacus": opacus_res,
    }
    if opacus_res is not None:
        for variant in ("opacus", "opacus_stock"):
            rates = opacus_res.get(f"{variant}_examples_per_s", {})
            result[f"dp_over_{variant}_examples_per_s"] = {
                str(r.batch): r.dp_examples_per_s / rates[str(r.batch)] for r in rows if str(r.batch) in rates
            }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        "DP = the trainer's step (ghost norms + book-keeping: no per-example gradient is formed); "
        "vmap DP = per-example vmap(grad) of every parameter (the generic recipe)."
    )
    print(
        f"{'batch':>6} {'micro':>5} {'DP ex/s':>8} {'non-priv ex/s':>13} {'DP/non-priv':>11} {'vmap DP ex/s':>12} "
        f"{'vmap/non-priv':>13} {'peak RSS MiB (np / dp)':>22} {'minor faults/step (dp / np)':>28}"
    )
    for r in rows:
        print(
            f"{r.batch:>6} {r.physical_batch:>5} {r.dp_examples_per_s:>8.1f} {r.nonprivate_examples_per_s:>13.1f} "
            f"{r.dp_over_nonprivate_time:>10.2f}x {r.dp_vmap_examples_per_s:>12.1f} {r.dp_vmap_over_nonprivate_time:>12.2f}x "
            f"{r.peak_rss_mib_after_nonprivate:>10.0f} / {r.peak_rss_mib_after_dp:<9.0f} "
            f"{r.dp_minor_faults_per_step:>13.0f} / {r.nonprivate_minor_faults_per_step:<12.0f}"
        )
    if opacus_res is not None:
        print(
            f"\nOpacus {opacus_res['opacus_version']} DP-SGD (hooks) on torch {opacus_res['torch_version']} BertForMaskedLM, "
            f"physical batch {opacus_res['physical_batch']} (virtual steps up to the logical batch), separate process "
            "with default settings" + (" (here: in-process)" if args.opacus_in_process or args.no_jax else "") + ":"
        )
        stock = "opacus_stock_examples_per_s" in opacus_res
        print(
            f"{'batch':>6} {'JAX DP ex/s':>11} {'Opacus twin ex/s':>16} {'JAX/Opacus twin':>15}"
            + (f" {'Opacus stock ex/s':>17} {'JAX/Opacus stock':>16}" if stock else "")
        )
        for batch in args.batch_sizes:
            key = str(batch)
            jax_rate = next((r.dp_examples_per_s for r in rows if r.batch == batch), None)
            twin = opacus_res["opacus_examples_per_s"].get(key)
            if twin is None:
                continue
            line = f"{batch:>6} {jax_rate if jax_rate is not None else float('nan'):>11.1f} {twin:>16.1f} "
            line += f"{result.get('dp_over_opacus_examples_per_s', {}).get(key, float('nan')):>14.1f}x"
            if stock:
                stock_rate = opacus_res["opacus_stock_examples_per_s"][key]
                line += f" {stock_rate:>17.1f} {result.get('dp_over_opacus_stock_examples_per_s', {}).get(key, float('nan')):>15.1f}x"
            print(line)
        print(
            f"torch non-private, batch {opacus_res['physical_batch']}: twin {opacus_res['torch_nonprivate_examples_per_s']:.1f} ex/s"
            + (f", stock {opacus_res['torch_stock_nonprivate_examples_per_s']:.1f} ex/s" if stock else "")
            + ". twin = MLM logits only at the masked positions (as the JAX model); stock = HF forward with labels."
        )
        print(f"Opacus fix applied: {opacus_res['fix_applied']}.")
    print(
        f"CPU runtime tuning (cpu_runtime.tune_cpu_runtime, as in the trainer): {tuned}; "
        f"vmap size: {args.vmap_size or 'auto'}."
    )
    print("Note: the 2 cores are shared; absolute figures are noisy, compare same-run ratios.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
