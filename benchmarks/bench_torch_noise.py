"""Time of the torch trainers' DP noise draw: one step's Gaussian noise for a BERT's parameters.

Compares the draw the trainers make (:func:`trainers.torch_common.noise.gaussian_sum`: 16 keyed pieces
drawn by torch's thread count, each by the C Philox sampler or, where it cannot be built, by an
mt19937 generator given a full keyed state) with one ``manual_seed`` generator filling every tensor
in turn (the first draw of all, whose stream had only 2^32 possible seeds). Prints milliseconds per
draw and the ratio to that first draw. The last two rows are what a step pays for its noise: the
draw, both norms (gradient-SNR telemetry) and the add, or the one pass that a single process makes
(:func:`trainers.torch_common.noise.add_gaussian_`).

    python benchmarks/bench_torch_noise.py                 # the paper's BERT (7.2M parameters)
    python benchmarks/bench_torch_noise.py --params 110e6  # BERT-base size
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dpaudit.trainers.torch_common import noise, philox
from dpaudit.trainers.torch_common.distributed import World
from dpaudit.trainers.torch_common.loop import StepNoise, noised_total
from dpaudit.training.host_allocator import tune_host_allocator


def _shapes(params: float) -> list[tuple[int, ...]]:
    """Tensors of a 312-wide BERT (embedding table, 1200-wide blocks, biases) totalling ~``params``."""
    shapes: list[tuple[int, ...]] = [(3190, 312), (128, 312), (2, 312)]
    while sum(torch.Size(s).numel() for s in shapes) < params:
        shapes += [(312, 312)] * 4 + [(1200, 312), (312, 1200)] + [(312,)] * 8 + [(1200,)]
    return shapes


def _time(fn, repeats: int) -> tuple[float, float]:
    fn()  # warm-up (allocator, threads)
    wall, cpu = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return statistics.median(wall), statistics.median(cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=float, default=7.2e6, help="Parameters to noise (default: the paper's BERT).")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    tune_host_allocator()  # as the trainers do
    like = [torch.empty(s) for s in _shapes(args.params)]
    total = sum(t.numel() for t in like)
    threads = torch.get_num_threads()

    def former() -> None:
        generator = torch.Generator().manual_seed(12345)
        for t in like:
            torch.empty(t.shape).normal_(0.0, 1.0, generator=generator)

    built = philox._library

    def keyed(n: int, sampler: str):
        def draw() -> None:
            torch.set_num_threads(n)
            philox._library = built if sampler == "Philox" else lambda: None
            try:
                noise.gaussian_sum(like, [(1.0, (7,))], 2**100 + 3)
            finally:
                torch.set_num_threads(threads)
                philox._library = built

        return draw

    grads = [torch.randn(t.shape) for t in like]  # a clipped sum to noise, for the two steps below
    fusable = noise.fusable

    def step(one_pass: bool):
        """The trainers' own noised_total on one process; without the one-pass path it takes the path
        that 2+ processes take (draw, two norms, add)."""
        step_noise = StepNoise(grads, [(1.0, (7,))], 2**100 + 3, True)

        def run() -> None:
            noise.fusable = fusable if one_pass else lambda *args: False
            try:
                noised_total(grads, step_noise, (0.0, 0.0, 0.0, 0.0), world=World(0, 1), device=torch.device("cpu"))
            finally:
                noise.fusable = fusable

        return run

    rows = [("one manual_seed generator (former)", _time(former, args.repeats))]
    samplers = ["mt19937", "Philox"] if philox.available() else ["mt19937"]
    for sampler in samplers:
        for n in sorted({1, threads}):
            rows.append((f"keyed {sampler} pieces, {n} thread{'s' * (n > 1)}", _time(keyed(n, sampler), args.repeats)))
    if philox.available():
        rows.append(("Philox draw, 2 norms, add (step, 2+ processes)", _time(step(False), args.repeats)))
        rows.append(("Philox added in place, norms in pass (1 process)", _time(step(True), args.repeats)))
    base = rows[0][1][0]
    print(f"{total / 1e6:.1f}M Gaussian numbers per draw, float32, median of {args.repeats}")
    print(f"{'draw':48s} {'wall ms':>8s} {'cpu ms':>8s} {'x former':>9s}")
    for name, (wall, cpu) in rows:
        print(f"{name:48s} {wall * 1e3:8.1f} {cpu * 1e3:8.1f} {wall / base:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
