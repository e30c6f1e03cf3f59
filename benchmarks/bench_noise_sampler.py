"""The DP noise sampler (Box-Muller with a 96-bit radius uniform) against the one each trainer used before.

Every trainer now draws its Gaussian noise from four random 32-bit words per pair of normals, u = (w0 2^64 + w1 2^32
+ w2 + 1/2) 2^-96, so the radius reaches 11.596 standard deviations (``dpaudit.accounting.noise_tail``); the
samplers before stopped at 5.22 (jax-bert: ``jax.random.normal`` float32), 6.66 (the torch trainers' C Philox with a
32-bit uniform), 5.77 (torch's CPU ``normal_``, the fallback) and 6.76 (CUDA). Measured in one run, on the same
machine, interleaved so that load drift hits both alike (medians of process CPU time, which other users' load on a
shared machine moves far less than wall time; a step's wall time is printed beside it):

1. the cost per number of each sampler, new and former;
2. jax-bert's DP step at the demo's sizes (tiny BERT, 32 tokens, vocabulary 2,000, per-example ghost clipping: the
   epsilon-8 model's batch 64 and the one-run audit recipe's batch 1,024): the step with the new noise and with the
   former (``jax.random.normal``), and the noise draw alone as a share of the step;
3. edp-sgd's DP step at the demo's sizes (the intent classifiers: tiny BERT, 32 tokens, batch 32, dp-sgd and
   edp-sgd; the causal LM: GPT-2-shaped tiny, batch 64, dp-sgd), the trainer's own ``step``, with the new C sampler
   and with the former one (its C source read from git, commit ``FORMER``, and built the same way);
4. the largest |z| over 10^8 draws of each (for a true Gaussian, P(max over 10^8 > 6) is only ~0.18: the max cannot
   show the new reach, which tests/trainers/test_noise_reach.py measures with the extreme words instead).

    python benchmarks/bench_noise_sampler.py                 # all four tables, ~10 minutes on 2 cores
    python benchmarks/bench_noise_sampler.py --skip-steps    # per-number costs and the 10^8 maxima only
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: The last commit whose C Philox sampler used a 32-bit uniform (reach 6.66).
FORMER = "0248047"


def _median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _interleaved(fns: dict, repeats: int) -> dict[str, float]:
    """Median process CPU seconds of each callable (all its threads: the work done, which other users' load on a
    shared machine moves far less than wall time), timed in rotating order after one warm-up call each; the
    median wall seconds under ``"<name> wall"``."""
    for fn in fns.values():
        fn()
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    wall: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start, cpu_start = time.perf_counter(), time.process_time()
            fns[name]()
            cpu[name].append(time.process_time() - cpu_start)
            wall[name].append(time.perf_counter() - start)
    return {
        **{name: statistics.median(v) for name, v in cpu.items()},
        **{f"{name} wall": statistics.median(v) for name, v in wall.items()},
    }


# -- the former samplers -------------------------------------------------------------------------------------------


def former_philox() -> ctypes.CDLL | None:
    """The former C sampler (32-bit uniform), built from git with the flags philox.py uses; None without git."""
    from dpaudit.trainers.torch_common import philox

    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{FORMER}:trainers/torch_common/philox_normal.c"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tempfile.TemporaryDirectory(prefix="former-philox-") as tmp:
        path, target = Path(tmp) / "former.c", Path(tmp) / "former.so"
        path.write_text(source)
        subprocess.run(["cc", *philox._FLAGS, *philox._NATIVE, "-o", str(target), str(path)], check=True)
        library = ctypes.CDLL(str(target))
    library.dpaudit_philox_normal.argtypes = [
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_float,
        ctypes.c_int,
    ]
    library.dpaudit_philox_add_ranges.argtypes = (
        [ctypes.c_int64] + [ctypes.c_void_p] * 4 + [ctypes.c_float, ctypes.c_void_p]
    )
    library.dpaudit_philox4x32_10.argtypes = [ctypes.c_void_p] * 3
    return library


def _former_gaussian_like(key, tree):
    """jax-bert's former draw: jax.random.normal in float32, one key per leaf."""
    import jax
    import jax.numpy as jnp

    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, jnp.float32) for k, x in zip(keys, leaves)])


# -- 1. per number -------------------------------------------------------------------------------------------------


def per_number(args, former) -> list[tuple[str, float]]:
    import jax
    import torch

    from dpaudit.trainers.jax_bert import dp_step
    from dpaudit.trainers.torch_common import noise, philox

    n = 4_000_000
    out = torch.empty(n)
    key = np.array([1, 2, 3, 4], np.uint32)
    new_jax = jax.jit(functools.partial(dp_step.wide_normal, shape=(n,)))
    old_jax = jax.jit(lambda k: jax.random.normal(k, (n,), jax.numpy.float32))
    fns = {
        "C Philox, 96-bit Box-Muller, float64 (new)": lambda: philox.normal_(out, key, 1.0),
        "torch words, 96-bit Box-Muller, float64 (new fallback)": lambda: noise.torch_normal(
            n, noise.keyed_generator(5, 1)
        ),
        "torch normal_ (former fallback)": lambda: out.normal_(0.0, 1.0, generator=noise.keyed_generator(5, 1)),
        "JAX Threefry, 96-bit Box-Muller, float32 (new)": lambda: new_jax(jax.random.PRNGKey(0)).block_until_ready(),
        "JAX jax.random.normal float32 (former)": lambda: old_jax(jax.random.PRNGKey(0)).block_until_ready(),
    }
    if former is not None:
        fns["C Philox, 32-bit Box-Muller, float32 (former)"] = lambda: former.dpaudit_philox_normal(
            out.data_ptr(), n, key.ctypes.data, 1.0, 0
        )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = _interleaved(fns, args.repeats)
    finally:
        torch.set_num_threads(threads)
    return [(name, times[name] / n * 1e9) for name in fns]


# -- 2. jax-bert ---------------------------------------------------------------------------------------------------


def jax_bert_steps(args) -> list[dict]:
    import jax

    from dpaudit.trainers.jax_bert import dp_step, ghost_clipping, model, optimizer, sampling

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_jax_bert_step import synthetic_examples

    seq, vocab, n_pred = 32, 2000, 11  # the demo: --max-length 32, --mask-prob 0.3 (ceil(32 x 0.3) + 1 predictions)
    cfg = model.preset_config(
        "tiny", vocab_size=vocab, max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    net = model.FlaxBertForMaskedLM(cfg)
    loss_fn = functools.partial(model.example_mlm_loss, model=net)
    params = model.init_params(cfg, jax.random.key(0), seq_len=seq)
    n_params = sum(x.size for x in jax.tree.leaves(params))
    opt = optimizer.make_optimizer(learning_rate=1e-3, warmup_steps=0, total_steps=10_000, weight_decay=0.0)
    rows = []
    for label, batch in (("epsilon-8 model, batch 64", 64), ("audit recipe, batch 1,024", 1024)):
        data = synthetic_examples(batch, seq_len=seq, n_pred=n_pred, vocab=vocab)
        m = min(32, batch)
        ((idx, mask),) = sampling.pack_microsteps(np.arange(batch), m, batch // m)
        chunks = [({k: v[idx] for k, v in data.items()}, mask)]
        steps, states = {}, {}
        real = dp_step._gaussian_like
        for name, draw in (("new", real), ("former", _former_gaussian_like)):
            dp_step._gaussian_like = draw  # read when the finish is traced (below, in the warm-up call)
            try:
                step = dp_step.make_dp_train_step(
                    loss_fn,
                    opt,
                    clip_norm=1.0,
                    donate_state=True,
                    clipped_sum_fn=ghost_clipping.make_ghost_clipped_sum_fn(net, clip_norm=1.0),
                )
                p = jax.tree.map(lambda x: x.copy(), params)
                states[name] = step(p, opt.init(p), chunks, jax.random.key(0), 1.0, float(batch))[:2]
                jax.block_until_ready(states[name])
            finally:
                dp_step._gaussian_like = real
            steps[name] = step

        def run(name, steps=steps, states=states, chunks=chunks, batch=batch):
            p, s, metrics = steps[name](*states[name], chunks, jax.random.key(1), 1.0, float(batch))
            jax.block_until_ready((p, s, metrics))
            states[name] = (p, s)

        new_noise = jax.jit(dp_step._gaussian_like)
        old_noise = jax.jit(_former_gaussian_like)
        times = _interleaved(
            {
                "step new": functools.partial(run, "new"),
                "step former": functools.partial(run, "former"),
                "noise new": lambda: jax.block_until_ready(new_noise(jax.random.key(3), params)),
                "noise former": lambda: jax.block_until_ready(old_noise(jax.random.key(3), params)),
            },
            args.repeats,
        )
        rows.append({"trainer": "jax-bert", "what": label, "params": n_params, **times})
    return rows


# -- 3. edp-sgd ----------------------------------------------------------------------------------------------------


def edp_sgd_steps(args, former) -> list[dict]:
    import torch
    from click.testing import CliRunner

    from dpaudit.cli import cli
    from dpaudit.corpus.assistant import INTENTS
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig
    from dpaudit.trainers.edp_sgd.trainer import _Plugin
    from dpaudit.trainers.torch_common import noise, philox

    rows = []
    built = philox._library
    with tempfile.TemporaryDirectory(prefix="bench_noise_sampler.") as tmp:
        root = Path(tmp)
        clf, lm = root / "clf", root / "lm"  # the demo's two inject directories (classifiers; masked and causal LMs)
        for out, size, public, freqs in ((clf, 1000, 3000, "1,10"), (lm, 3000, 20000, "1,10,100")):
            result = CliRunner().invoke(
                cli,
                [
                    "inject",
                    "--corpus",
                    "builtin:assistant",
                    "--corpus-size",
                    str(size),
                    "--out",
                    str(out),
                    "--seed",
                    "0",
                    "--format",
                    "digits:4",
                    "--frequencies",
                    freqs,
                    "--per-frequency",
                    "10",
                    "--public-size",
                    str(public),
                ],
                catch_exceptions=False,
            )
            if result.exit_code != 0:
                raise SystemExit(result.output)
        labels = ",".join(intent.name for intent in INTENTS)
        cases = (
            ("classifier, dp-sgd, batch 32", clf, dict(task="classify", mode="dp-sgd", batch_size=32, labels=labels)),
            ("classifier, edp-sgd, batch 32", clf, dict(task="classify", mode="edp-sgd", batch_size=32, labels=labels)),
            ("causal LM, dp-sgd, batch 64", lm, dict(task="clm", mode="dp-sgd", batch_size=64)),
        )
        for label, data, options in cases:
            config = EdpSgdConfig(
                preset="tiny",
                max_length=32,
                epochs=1,
                learning_rate=1e-3,
                noise_multiplier=1.0,
                noise_seed=2**80 + 1,
                eval_examples=0,
                **options,
            )
            run = _Plugin(data, root / f"out-{len(rows)}", config, seed=0)
            run._setup()
            grads = [torch.zeros_like(p) for p in run.params]
            n_params = sum(p.numel() for p in run.params)
            counter = iter(range(10**9))

            def step(library, run=run, counter=counter):
                philox._library = lambda: library
                try:
                    i = next(counter) % run.plan.total_steps
                    run.step(i, run._sample(i))
                finally:
                    philox._library = built

            def draw(library, grads=grads):
                philox._library = lambda: library
                try:
                    noise.add_gaussian_(grads, (1.0, (7,)), 2**80 + 1)  # what one process's step adds
                finally:
                    philox._library = built

            fns = {"step new": functools.partial(step, built()), "noise new": functools.partial(draw, built())}
            if former is not None:
                fns.update(
                    {"step former": functools.partial(step, former), "noise former": functools.partial(draw, former)}
                )
            rows.append({"trainer": "edp-sgd", "what": label, "params": n_params, **_interleaved(fns, args.repeats)})
    return rows


# -- 4. max over 10^8 ------------------------------------------------------------------------------------------------


def maxima(args, former) -> list[tuple[str, float, float]]:
    import jax
    import torch

    from dpaudit.trainers.jax_bert import dp_step
    from dpaudit.trainers.torch_common import philox

    total, chunk = int(args.draws), 10_000_000
    out = torch.empty(chunk)
    results = []

    def over(draw) -> tuple[float, float]:
        top = 0.0
        start = time.perf_counter()
        for c in range(math.ceil(total / chunk)):
            top = max(top, draw(c))
        return top, time.perf_counter() - start

    def c_draw(library, c):
        words = np.array([7, 11, c, 0x5EED], np.uint32)
        if library is None:
            philox.normal_(out, words, 1.0)
        else:
            library.dpaudit_philox_normal(out.data_ptr(), chunk, words.ctypes.data, 1.0, 0)
        return float(out.abs().max())

    new_jax = jax.jit(lambda k: jax.numpy.abs(dp_step.wide_normal(k, (chunk,))).max())
    old_jax = jax.jit(lambda k: jax.numpy.abs(jax.random.normal(k, (chunk,), jax.numpy.float32)).max())
    samplers = [
        ("C Philox, 96-bit Box-Muller (new)", functools.partial(c_draw, None)),
        ("JAX, 96-bit Box-Muller (new)", lambda c: float(new_jax(jax.random.PRNGKey(c)))),
        ("JAX jax.random.normal float32 (former)", lambda c: float(old_jax(jax.random.PRNGKey(c)))),
    ]
    if former is not None:
        samplers.insert(1, ("C Philox, 32-bit Box-Muller (former)", functools.partial(c_draw, former)))
    for name, draw in samplers:
        top, seconds = over(draw)
        results.append((name, top, seconds))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--draws", type=float, default=1e8, help="Draws per sampler for the maxima.")
    parser.add_argument("--skip-steps", action="store_true", help="Per-number costs and maxima only.")
    args = parser.parse_args(argv)
    import torch

    from dpaudit.trainers.jax_bert.cpu_runtime import tune_cpu_runtime
    from dpaudit.training.host_allocator import tune_host_allocator

    tune_host_allocator()
    tune_cpu_runtime()
    former = former_philox()
    print(
        f"threads: torch {torch.get_num_threads()}; medians of {args.repeats}, interleaved; former C sampler: "
        f"{'git ' + FORMER if former is not None else 'not available (no git)'}"
    )
    print("\n1. Cost per number, process CPU time (4M numbers, one thread for the C and torch samplers)")
    for name, ns in per_number(args, former):
        print(f"  {name:58s} {ns:7.2f} ns")
    if not args.skip_steps:
        print(
            "\n2-3. A DP step at the demo's sizes, process CPU ms (wall ms of the new step in brackets): the step with "
            "the new sampler and with the former, and the noise draw alone as a share of the new step"
        )
        print(
            f"  {'trainer':9s} {'case':32s} {'params':>9s} {'step ms':>16s} {'former':>8s} {'ratio':>6s} "
            f"{'noise ms':>9s} {'former':>7s} {'noise share':>11s}"
        )
        for row in [*jax_bert_steps(args), *edp_sgd_steps(args, former)]:
            step_old, noise_old = row.get("step former"), row.get("noise former")
            step = f"{row['step new'] * 1e3:.1f} ({row['step new wall'] * 1e3:.1f})"
            print(
                f"  {row['trainer']:9s} {row['what']:32s} {row['params']:9,d} {step:>16s} "
                f"{(step_old or math.nan) * 1e3:8.1f} {row['step new'] / (step_old or math.nan):6.3f} "
                f"{row['noise new'] * 1e3:9.2f} {(noise_old or math.nan) * 1e3:7.2f} "
                f"{row['noise new'] / row['step new']:11.2%}"
            )
    print(
        f"\n4. Largest |z| over {args.draws:.0e} draws (a true Gaussian's exceeds 6 with probability ~0.18; the new "
        f"reach, 11.596, is measured with the extreme words in tests/trainers/test_noise_reach.py)"
    )
    for name, top, seconds in maxima(args, former):
        print(f"  {name:44s} {top:8.4f}   ({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
