"""Calibrating sigma for Anil et al.'s settings: dp_accounting called naively vs dpaudit.accounting.

Both settings use N = 346M examples, delta = 2.89e-9, target epsilon 5.36 and 20K steps:
  constant:  batch 65,536 throughout;
  variable:  262K -> 458K -> 655K -> 851K (1,875 steps each) then 1M for 12,500 steps.

"naive" is ``dp_accounting.calibrate_dp_mechanism`` with a fresh ``PLDAccountant`` per evaluation
(its defaults: bracket from [0, 1], tol 1e-6); "naive @tol" is the same with the tolerance dpaudit
uses (1e-3 relative), so that the speed-up is not just a looser stopping rule. dpaudit's sigma is
checked afterwards with a fresh ``PLDAccountant`` at its default discretization. Caches are cleared
before each dpaudit run (cold timings). Ratios are measured in one run on one machine.

Run: python benchmarks/bench_accounting.py [--skip-naive]
"""

from __future__ import annotations

import argparse
import time

import dp_accounting
from dp_accounting import pld

from dpaudit import accounting as A

N = 346_000_000
DELTA = 2.89e-9
TARGET = 5.36
CONSTANT = [(20_000, 65_536)]
VARIABLE = [(1_875, 262_144), (1_875, 458_752), (1_875, 655_360), (1_875, 851_968), (12_500, 1_048_576)]


def raw_event(schedule, sigma):
    return dp_accounting.ComposedDpEvent(
        [
            dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(batch / N, dp_accounting.GaussianDpEvent(sigma)), steps
            )
            for steps, batch in schedule
        ]
    )


def pld_epsilon(event):
    accountant = pld.PLDAccountant()
    accountant.compose(event)
    return accountant.get_epsilon(DELTA)


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-naive", action="store_true", help="time only dpaudit (the naive runs take ~1 min)")
    args = parser.parse_args()

    rows = []
    for name, schedule in (("constant 65K", CONSTANT), ("262K->1M", VARIABLE)):
        A.clear_caches()
        ours, t_ours = timed(
            lambda: A.calibrate_noise(
                lambda s: A.schedule_event(
                    A.batch_schedule_segments(dataset_size=N, schedule=schedule, noise_multiplier=s)
                ),
                TARGET,
                DELTA,
            )
        )
        A.clear_caches()
        ours_cert, t_cert = timed(
            lambda: A.calibrate_noise(
                lambda s: A.schedule_event(
                    A.batch_schedule_segments(dataset_size=N, schedule=schedule, noise_multiplier=s)
                ),
                TARGET,
                DELTA,
                certify_minimal=True,
            )
        )
        eps_ours, t_one = timed(lambda: pld_epsilon(raw_event(schedule, ours)))
        A.clear_caches()
        eps_one_ours, t_one_ours = timed(lambda: A.epsilon(raw_event(schedule, ours), DELTA))
        assert eps_one_ours == eps_ours, (eps_one_ours, eps_ours)  # same PLD, bit for bit
        row = {
            "name": name,
            "ours": ours,
            "t_ours": t_ours,
            "eps_ours": eps_ours,
            "t_one": t_one,
            "t_one_ours": t_one_ours,
            "ours_cert": ours_cert,
            "t_cert": t_cert,
        }
        if not args.skip_naive:
            row["naive"], row["t_naive"] = timed(
                lambda: dp_accounting.calibrate_dp_mechanism(
                    pld.PLDAccountant, lambda s: raw_event(schedule, s), TARGET, DELTA
                )
            )
            row["naive_tol"], row["t_naive_tol"] = timed(
                lambda: dp_accounting.calibrate_dp_mechanism(
                    pld.PLDAccountant, lambda s: raw_event(schedule, s), TARGET, DELTA, tol=1e-3 * ours
                )
            )
            row["eps_naive"] = pld_epsilon(raw_event(schedule, row["naive"]))
        rows.append(row)

    print(f"Calibrating sigma for epsilon {TARGET} at delta {DELTA} (N = {N:,}, 20K steps), PLD accountant\n")
    header = f"{'schedule':14s} {'method':28s} {'sigma':>10s} {'PLD epsilon':>12s} {'seconds':>8s} {'speed-up':>9s}"
    print(header)
    print("-" * len(header))
    for r in rows:
        base = r.get("t_naive")
        if base is not None:
            print(
                f"{r['name']:14s} {'naive (tol 1e-6)':28s} {r['naive']:10.6f} {r['eps_naive']:12.5f} {base:8.2f} {'1.0x':>9s}"
            )
            print(
                f"{'':14s} {'naive (tol 1e-3 relative)':28s} {r['naive_tol']:10.6f} {'':12s} "
                f"{r['t_naive_tol']:8.2f} {base / r['t_naive_tol']:8.1f}x"
            )
        speed = f"{base / r['t_ours']:8.1f}x" if base else ""
        print(
            f"{'' if base else r['name']:14s} {'dpaudit calibrate_noise':28s} {r['ours']:10.6f} {r['eps_ours']:12.5f} "
            f"{r['t_ours']:8.2f} {speed:>9s}"
        )
        speed = f"{base / r['t_cert']:8.1f}x" if base else ""
        print(
            f"{'':14s} {'dpaudit, certify_minimal':28s} {r['ours_cert']:10.6f} {'':12s} {r['t_cert']:8.2f} {speed:>9s}"
        )
        print(f"{'':14s} {'(one PLDAccountant call)':28s} {'':10s} {'':12s} {r['t_one']:8.2f}")
        print(f"{'':14s} {'(one dpaudit epsilon, cold)':28s} {'':10s} {'':12s} {r['t_one_ours']:8.2f}")
    print(
        "\nTarget: under 5 s for both. Every dpaudit sigma is re-checked above with a fresh PLDAccountant"
        " (default discretization 1e-4): its epsilon is <= the target, and dpaudit's own epsilon of the same"
        " event is bit-identical to it."
    )


if __name__ == "__main__":
    main()
