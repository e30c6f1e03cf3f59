"""LiRA's scoring choices measured where the truth is known: shared vs per-example variance, one- vs two-sided offline.

A Gaussian toy in logit-confidence units (what :func:`dpaudit.attacks.lira.fit_and_score` receives): candidate j
has an OUT confidence N(mu_j, s_j) and an IN confidence N(mu_j + g_j, r_j s_j) over the randomness of training,
with a per-candidate difficulty mu_j ~ N(0, 1.5), a gain g_j ~ |N(gain, 0.7 gain)| (training on x raises its
confidence), a per-candidate spread s_j = 0.5 exp(N(0, spread)) (``--spread``: at 0.5 the 5%-95% range of s_j is
5x; one table per spread) and r_j = exp(N(-0.2, 0.3)) (IN models agree more). k shadow models each hold a balanced half; the
target holds the candidates whose fair coin says member. Each cell is the mean over ``--repeats`` seeds of the
AUC (and TPR at 1% FPR) of the scores of every variant, scored by :func:`dpaudit.audit.audit_scores`' ROC.

This is how the defaults of :mod:`dpaudit.attacks.lira` were chosen: ``auto`` switches to per-example variances
at the first shadow count where they win here and in Carlini et al. (2022, section VI-A); the offline test is
one-sided because a confidence below the OUT models' is no evidence of membership.

Run: python benchmarks/bench_lira_scoring.py [--n 2000] [--shadows 4,8,16,32,64,128] [--repeats 5] [--spread 0,0.25,0.5,1]
"""

from __future__ import annotations

import argparse

import numpy as np


def simulate(k: int, n: int, seed: int, *, gain: float, spread: float):
    """(phi_shadow [k, n], member [k, n], phi_target [n], truth [n]) of the toy."""
    from dpaudit.attacks.lira import balanced_membership

    rng = np.random.default_rng([seed, k])
    mu = rng.normal(0, 1.5, n)
    g = np.abs(rng.normal(gain, 0.7 * gain, n))
    s_out = 0.5 * np.exp(rng.normal(0, spread, n))
    s_in = s_out * np.exp(rng.normal(-0.2, 0.3, n))
    member = balanced_membership(k, n, seed)

    def draw(inside: np.ndarray) -> np.ndarray:
        return np.where(
            inside, mu + g + s_in * rng.normal(size=inside.shape), mu + s_out * rng.normal(size=inside.shape)
        )

    truth = rng.random(n) < 0.5
    return draw(member), member, draw(truth), truth


def metrics(scores: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    from dpaudit.audit import roc_curve

    roc = roc_curve(scores[truth], scores[~truth])
    tpr = float(np.interp(0.01, roc.fpr, roc.tpr))
    return roc.auc(), tpr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--shadows", default="4,8,16,32,64,128")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gain", type=float, default=1.0)
    parser.add_argument("--spread", default="0,0.25,0.5,1", help="comma-separated log-sd of s_j (one table each)")
    args = parser.parse_args()
    variants = {
        "online shared": ("global", "online"),
        "online per-example": ("per-example", "online"),
        "offline 1-sided shared": ("global", "one-sided"),
        "offline 2-sided shared": ("global", "two-sided"),
        "offline 1-sided per-ex.": ("per-example", "one-sided"),
        "offline 2-sided per-ex.": ("per-example", "two-sided"),
    }
    for spread in (float(x) for x in args.spread.split(",")):
        print(
            f"Gaussian toy: n = {args.n}, gain {args.gain}, spread {spread:g}, {args.repeats} seeds; "
            "AUC (TPR at 1% FPR)"
        )
        print(f"{'variant':>24} " + " ".join(f"{'k=' + k:>13}" for k in args.shadows.split(",")))
        for name, cells in run_table(args, spread, variants).items():
            print(f"{name:>24} " + " ".join(f"{c:>13}" for c in cells))
        print()


def run_table(args: argparse.Namespace, spread: float, variants: dict[str, tuple[str, str]]) -> dict[str, list[str]]:
    from dpaudit.attacks.lira import fit_and_score

    table: dict[str, list[str]] = {v: [] for v in variants}
    for k in (int(x) for x in args.shadows.split(",")):
        sums = {v: np.zeros(2) for v in variants}
        for seed in range(args.repeats):
            phi, member, target, truth = simulate(k, args.n, seed, gain=args.gain, spread=spread)
            for name, (variance, which) in variants.items():
                out = fit_and_score(
                    phi, member, target, variance=variance, offline="one-sided" if which == "online" else which
                )
                sums[name] += metrics(out.online if which == "online" else out.offline, truth)
        for name in variants:
            auc, tpr = sums[name] / args.repeats
            table[name].append(f"{auc:.3f} ({tpr:.2f})")
    return table


if __name__ == "__main__":
    main()
