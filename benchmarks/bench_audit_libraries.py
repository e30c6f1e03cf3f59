"""Audit Opacus 1.6 and JAX Privacy 2.0 through their own gradient paths: bound / claim per configuration, planted
faults, and cost.

Run: ``nice python benchmarks/bench_audit_libraries.py [--canaries 1000] [--runs 4] [--epsilons 1,4,8]
[--libraries opacus,jax-privacy] [--configs default,Adam] [--skip plan,configs,faults,cost] [--spread S]``.

What it measures (everything printed is measured in this run, with the command and the machine's load):

0. What the plan (:mod:`dpaudit.whitebox.plan`) expects of the verdict's two tests at this design (m canaries x R
   runs) for a correct run of each accountant's claim, before any training: the share of the claim the planned counts
   reject, beside the claim's own ceiling (dpaudit's epsilon of the mechanism that ran / the library's claim: an RDP
   claim over-states its mechanism, so no audit reads all of it).
1. Correct configurations of Opacus as installed (its default PRV accountant with SGD and hooks; its RDP accountant;
   Adam; its ghost clipping), each calibrated by Opacus's own ``get_noise_multiplier`` to epsilon 1, 4 and 8 (q = 0.5,
   4 updates, delta 1e-5): the verdict's one-run bound (the first run's canaries) and multi-run bound (all runs'
   canaries pooled), each the test the plan chose (named in the last column), as shares of Opacus's claimed epsilon,
   and the verdict. A tiny linear model (``tests/trainers/opacus/faults.py``):
   the canaries' clipped gradients do not depend on the model.
2. Opacus as installed over 20 seeds and the planted library faults of the power tests over 10: how many are flagged
   in one run (and a scale-only fault no audit of this kind is expected to see).
3. Cost: one audit run (a BERT-tiny classifier of the opacus trainer, with the canaries) against the same training
   without them, and the ratio.

The same three parts for JAX Privacy (``tests/trainers/jax_privacy/faults.py``): its default (PLD accountant, SGD,
Poisson sampling), its RDP accountant, Adam, and minibatches (``physical_batch``: padded minibatches accumulated into
one noisy update) and fixed-size batches (audited with signed canaries against the library's replace-one claim), each
calibrated by JAX Privacy's own ``calibrate_noise_multiplier``; JAX Privacy as installed over
20 seeds and its planted faults over 10 (the privacy.json mismatch flag counted beside the audit's); the cost on
jax-bert's Flax BERT masked LM of the jax-privacy trainer. JAX Privacy's noise is ``jax.random.normal`` float32
(reach 5.22 sigma): where its tail figure alone reaches delta (epsilon 8 here) the run states delta plus the figure
(``accept_noise_tail``), and the library's claim is tested at that larger delta (printed), where the mechanism that
ran has a smaller epsilon than the claim: each JAX row prints it (``mech``, dpaudit's accounting of what ran at the
tested delta) and each bound's share of it beside its share of the claim. With ``--spread S`` (part 1s), each Poisson
JAX configuration is audited in S independent one-run audits and S ideal ones (the claimed mechanism's canary
observations drawn by numpy, audited by the same code): the spread of the one-run share, how many runs read above the
claim (the validity count) and the plan's expected share, which is one binomial standard deviation pessimistic.
For Opacus, ``--spread S`` (part 1o) runs S independent one-run audits of its default (PRV, SGD) under hooks and
under ghost clipping on the same seeds: the validity count of each, and on how many seeds the two modes read the same
bound.

Each row's seeds (coins, batches, noise) are a function of its configuration and its epsilon's value
(:func:`row_trial`), so cells measured by separate single-epsilon commands are independent measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def row_trial(config: int, epsilon: float) -> int:
    """The seed index of a table row: a function of its configuration and of its epsilon's VALUE, not of its place in
    ``--epsilons``, so that the cells of one configuration measured by separate commands (``--epsilons 1``, then
    ``--epsilons 4``) draw independent coins, batches and noise (a row's index in its command's list used to be the
    seed: every single-epsilon command reran one noise draw, rescaled, and one set of coins)."""
    return 1000 * config + round(10 * epsilon)


def _sigma(epsilon: float, accountant: str) -> float:
    from opacus.accountants.utils import get_noise_multiplier

    return float(
        get_noise_multiplier(target_epsilon=epsilon, target_delta=1e-5, sample_rate=0.5, steps=4, accountant=accountant)
    )


class _Host:
    """The light host of the tests with a chosen sigma, accountant and optimizer."""

    library = "opacus"

    def __init__(self, sigma: float, accountant: str, optimizer: str, noise_seed: int, mode: str = "hooks") -> None:
        self.sigma, self.accountant, self.optimizer, self.noise_seed = sigma, accountant, optimizer, noise_seed
        self.mode = mode

    def train_with_gradient_canaries(self, data_dir, out_dir, config, *, gains, seed):  # noqa: ANN001
        import json

        import torch

        from dpaudit.trainers.opacus.loop import PrivacySettings, run_opacus
        from dpaudit.trainers.opacus.privacy import build_record
        from tests.trainers.opacus.faults import tiny_setup

        setup = tiny_setup()
        if self.optimizer == "adam":
            setup.optimizer = torch.optim.Adam(setup.model.parameters(), lr=1e-3)
        settings = PrivacySettings(
            noise_multiplier=self.sigma,
            clip_norm=1.0,
            steps=4,
            delta=1e-5,
            accountant=self.accountant,
            grad_sample_mode=self.mode,
            noise_seed=self.noise_seed,
        )
        run = run_opacus(setup, settings, gains=gains)
        record = build_record(
            run,
            delta=1e-5,
            accountant=self.accountant,
            grad_sample_mode=self.mode,
            clipping="flat",
            target_epsilon=None,
            noise_seed_explicit=True,
        )
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "privacy.json").write_text(json.dumps(record.to_json()))
        return run.observations, run.final


def correct_configurations(canaries: int, runs: int, epsilons: list[float], only: str = "") -> None:
    from dpaudit.common.figures import format_down as down
    from dpaudit.common.figures import format_up as up
    from dpaudit.whitebox.gradient_path import audit_gradient_path

    print(f"\n1. Correct Opacus configurations: {canaries} canaries x {runs} runs, q = 0.5, 4 updates, delta 1e-5")
    print(
        f"{'configuration':<28}{'eps':>5}{'sigma':>8}{'claim':>8}{'one-run':>9}{'ceil':>7}{'/claim':>8}{'multi-run':>11}"
        f"{'ceil':>7}{'/claim':>8}  verdict   seconds  tests (one-run, multi-run)"
    )
    for c, (name, accountant, optimizer, mode) in enumerate(
        (
            ("default (PRV, SGD, hooks)", "prv", "sgd", "hooks"),
            ("RDP accountant", "rdp", "sgd", "hooks"),
            ("PRV, Adam", "prv", "adam", "hooks"),
            ("PRV, ghost clipping", "prv", "sgd", "ghost"),
        )
    ):
        if only and not any(word.strip() and word.strip() in name for word in only.split(",")):
            continue
        for epsilon in epsilons:
            start = time.perf_counter()
            sigma = _sigma(epsilon, accountant)
            # each row its own secret noise seeds: equal seeds would repeat one row's canary observations
            trial = row_trial(c, epsilon)
            seeds = iter(range(1000 * trial, 1000 * trial + 10_000))
            host = _Host(sigma, accountant, optimizer, noise_seed=0, mode=mode)

            class _Fresh:  # a fresh secret noise seed per run (the runs must be independent trials)
                library = "opacus"

                def train_with_gradient_canaries(self, *args, **kwargs):  # noqa: ANN002, ANN003
                    host.noise_seed = 1000 + next(seeds)
                    return host.train_with_gradient_canaries(*args, **kwargs)

            analysis, _ = audit_gradient_path(
                _Fresh(), None, None, canaries=canaries, runs=runs, seed=7 + trial, full=False
            )
            claim = float(analysis.claim.epsilon)
            one, multi = _verdict_bounds(analysis)
            verdict = "FLAGGED" if analysis.alarm else "ok"
            ceil_one, ceil_multi = analysis.ceilings["one-run"], analysis.ceilings["pooled"]
            print(
                f"{name:<28}{epsilon:>5g}{sigma:>8.3f}{up(claim):>8}{down(one):>9}{down(ceil_one):>7}"
                f"{down(one / claim):>8}{down(multi):>11}{down(ceil_multi):>7}{down(multi / claim):>8}  {verdict:<9}"
                f"{time.perf_counter() - start:>6.0f}  {_methods(analysis)}",
                flush=True,
            )


def opacus_one_run_spread(canaries: int, seeds: int, epsilons: list[float]) -> None:
    """The one-run bound's spread over ``seeds`` independent correct Opacus runs (PRV, SGD) under hooks and under ghost
    clipping, each seed's coins and noise the same in both modes: the validity count (bounds above the claim, at most
    the stated 5%) and whether the two clipping modes read the same bound on the same draw. Shares of a lower bound
    print rounded down."""
    from dpaudit.common.figures import format_down as down
    from dpaudit.whitebox.gradient_path import audit_gradient_path

    print(
        f"\n1o. One-run spread: {seeds} independent one-run audits of correct Opacus runs ({canaries} canaries, q = 0.5, "
        "4 updates), hooks and ghost clipping on the same seeds, share of the claim: mean, sd, least, most; > claim"
    )
    for epsilon in epsilons:
        sigma = _sigma(epsilon, "prv")
        shares: dict[str, list[float]] = {}
        for mode in ("hooks", "ghost"):
            start = time.perf_counter()
            got = shares.setdefault(mode, [])
            for s in range(seeds):
                trial = 20_000_000 + 1000 * round(10 * epsilon) + s  # apart from the tables' seeds
                host = _Host(sigma, "prv", "sgd", noise_seed=trial, mode=mode)
                analysis, _ = audit_gradient_path(host, None, None, canaries=canaries, runs=1, seed=trial, full=False)
                got.append(_verdict_bounds(analysis)[0] / float(analysis.claim.epsilon))
            a = np.asarray(got)
            print(
                f"{mode:<8}{epsilon:>4g}  mean {down(a.mean())}  sd {a.std(ddof=1):.3f}  least {down(a.min())}  most "
                f"{down(a.max())}  > claim {int((a > 1).sum())}/{seeds}  ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
        same = sum(h == g for h, g in zip(shares["hooks"], shares["ghost"]))
        print(f"        hooks and ghost clipping read the same bound on {same} of {seeds} seeds", flush=True)


def _verdict_bounds(analysis: Any) -> tuple[float, float]:
    """The verdict's one-run and multi-run bounds (the tests :mod:`dpaudit.whitebox.plan` planned from the claim, m
    and R), not the other bounds shown beside them as evidence."""
    one = analysis.one_run["all_iterates"][0][analysis.one_run_method].epsilon
    return one, analysis.pooled["all_iterates"][analysis.pooled_method].epsilon


def _methods(analysis: Any) -> str:
    return f"{analysis.one_run_method}, {analysis.pooled_method}"


def _planned_one_run_share(claim: Any, canaries: int, alpha: float = 0.025) -> float:
    """The share of ``claim`` the plan expects the verdict's one-run test to reject at m = ``canaries`` (its counts one
    binomial standard deviation worse than expected: :mod:`dpaudit.whitebox.plan`), what part 0 prints."""
    from dpaudit.audit.claim_family import _expected_counts, _rejects
    from dpaudit.audit.order_stats_claim import order_test
    from dpaudit.whitebox import plan as wp

    def share(test: Any) -> float:
        _, scale = claim.best_test([test])
        return 0.0 if scale is None else claim.epsilon_at(scale) / claim.epsilon

    if wp.planned_one_run(claim, "example", 0, canaries, alpha) == "order_stats":
        order = wp.planned_order_stats(claim, "example", 0, canaries, alpha)
        return share(order_test(canaries, order.r, order.mistakes, alpha))
    member, nonmember = wp._simulated_scores(claim, "example", 0, wp._plan_size(claim))
    pooled = np.sort(np.concatenate([member, nonmember]))
    pair = wp.planned_guesses(claim, "example", 0, canaries, alpha)
    return share(_rejects(canaries, *_expected_counts(member, nonmember, pooled, canaries, *pair), alpha))


def planned_shares(canaries: int, runs: int, epsilons: list[float], libraries: set[str]) -> None:
    """What the plan expects of the verdict's two tests for a correct run at this design, before any training: the
    share of the claim the planned counts reject (:mod:`dpaudit.whitebox.plan`; counts one binomial standard deviation
    worse than expected), beside the f-DP recursion's and the Clopper-Pearson points' (the tests the gradient-path
    verdict ran before it was planned)."""
    from dpaudit.accounting.segment import Segment
    from dpaudit.audit.claim_family import _expected_counts, _rejects
    from dpaudit.audit.order_stats_claim import order_test
    from dpaudit.claim import Claim
    from dpaudit.whitebox import plan as wp

    alpha = 0.025  # each verdict bound's significance at the verdict's 95%
    print(
        f"\n0. Planned shares of the claim (no training): {canaries} canaries x {runs} runs, q = 0.5, 4 updates (truth: "
        "dpaudit's epsilon of the mechanism that ran / the claim, the most any audit can read)"
    )
    print(
        f"{'claim':<25}{'eps':>4}{'delta':>9}{'sigma':>8}{'truth':>7}{'f-DP rec.':>11}{'one-run':>9}{'CP points':>11}{'multi-run':>11}  tests"
    )
    from dpaudit.accounting.noise_tail import sampler_reach, tail_figure

    rows = []
    if "opacus" in libraries:
        rows += [(f"Opacus {acc.upper()}", acc, e, _sigma(e, acc), 1e-5) for acc in ("prv", "rdp") for e in epsilons]
    if "jax-privacy" in libraries:
        for acc in ("pld", "rdp"):
            for e in epsilons:
                sigma = _jax_sigma(e, acc, 64 + canaries, round(0.5 * (64 + canaries)))
                # JAX Privacy's float32 noise: where its tail figure reaches delta, the claim is tested at delta + it
                tail = tail_figure(
                    [Segment(steps=4, sampling_probability=0.5, noise_multiplier=sigma)], sampler_reach("jax-float32")
                )
                rows.append((f"JAX Privacy {acc.upper()}", acc, e, sigma, 1e-5 if tail < 1e-5 else 1e-5 + tail))
    for name, accountant, epsilon, sigma, delta in rows:
        claim = Claim(
            known=True,
            private=True,
            epsilon=epsilon,
            delta=delta,
            clip_norm=1.0,
            sampling="poisson",
            segments=(Segment(steps=4, sampling_probability=0.5, noise_multiplier=sigma),),
            accountant=accountant,
        )
        member, nonmember = wp._simulated_scores(claim, "example", 0, wp._plan_size(claim))
        pooled = np.sort(np.concatenate([member, nonmember]))

        def share(test: Any, claim: Claim = claim) -> float:
            _, scale = claim.best_test([test])
            return 0.0 if scale is None else claim.epsilon_at(scale) / epsilon

        pair = wp.planned_guesses(claim, "example", 0, canaries, alpha)
        recursion = share(_rejects(canaries, *_expected_counts(member, nonmember, pooled, canaries, *pair), alpha))
        order = wp.planned_order_stats(claim, "example", 0, canaries, alpha)
        total = canaries * runs
        points = share(wp._planned_points_test(member, nonmember, total - total // 2, total // 2, alpha))
        pooled_order = wp.planned_order_stats(claim, "example", 0, total, alpha)
        one = {"claim_family": recursion, "order_stats": share(order_test(canaries, order.r, order.mistakes, alpha))}
        multi = {
            "claim_family": points,
            "order_stats": share(order_test(total, pooled_order.r, pooled_order.mistakes, alpha)),
        }
        method = wp.planned_one_run(claim, "example", 0, canaries, alpha)
        pooled_method = wp.planned_pooled(claim, "example", 0, canaries, runs, alpha) if runs > 1 else "claim_family"
        print(
            f"{name:<25}{epsilon:>4g}{delta:>9.2g}{sigma:>8.3f}{claim.epsilon_at(1.0) / epsilon:>7.2f}{recursion:>11.2f}{one.get(method, float('nan')):>9.2f}"
            f"{points:>11.2f}{multi[pooled_method]:>11.2f}  {method}, {pooled_method}",
            flush=True,
        )


def planted_faults(canaries: int) -> None:
    import pytest

    from tests.trainers.opacus.faults import FAULTS, SCALE_ONLY, verdicts

    print(f"\n2. Planted library faults (epsilon 4 claimed): flagged in one run ({canaries} canaries each)")
    patch = pytest.MonkeyPatch()
    for fault, seeds in ((None, 20), *((f, 10) for f in (*FAULTS, SCALE_ONLY))):
        start = time.perf_counter()
        flags = verdicts(fault, seeds, patch, canaries=canaries)
        name = fault or "none (Opacus as installed)"
        print(f"{name:<28} flagged {sum(flags):>2}/{seeds}   ({time.perf_counter() - start:.0f} s)", flush=True)


def cost(canaries: int, mode: str = "hooks", physical: int | None = None) -> None:
    from click.testing import CliRunner

    from dpaudit.cli import cli
    from dpaudit.cli.audit_trainer import AUDIT_INJECT
    from dpaudit.trainers.opacus.trainer import OpacusTrainer

    print(
        f"\n3. Cost: the opacus trainer's BERT-tiny classifier, 4 updates, q = 0.5, {canaries} canaries, "
        f"grad_sample_mode {mode}"
        + (
            ""
            if physical is None
            else f", physical batches of {physical} (canary-only ones feed the model their first position only)"
        )
    )
    trainer = OpacusTrainer()
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        CliRunner().invoke(cli, ["inject", *AUDIT_INJECT, "--out", str(data)], catch_exceptions=False)
        from dpaudit.cli.audit_trainer import _train_rows

        rows = _train_rows(data)
        same = {
            "noise_multiplier": 1.0,
            "steps": 4,
            "noise_seed": 1,
            "grad_sample_mode": mode,
            "physical_batch": physical,
        }
        plain_cfg = trainer.tiny_config(batch_size=rows // 2, **same)
        audit_cfg = trainer.tiny_config(batch_size=(rows + canaries) // 2, **same)
        trainer.train(data, Path(scratch) / "warm", plain_cfg, seed=0)  # imports and first-call costs
        start = time.perf_counter()
        trainer.train(data, Path(scratch) / "plain", plain_cfg, seed=0)
        plain = time.perf_counter() - start
        gains = np.where(np.random.default_rng(0).integers(0, 2, canaries) == 1, 1e6, 0.0)
        start = time.perf_counter()
        trainer.train_with_gradient_canaries(data, Path(scratch) / "audit", audit_cfg, gains=gains, seed=0)
        audited = time.perf_counter() - start
    print(f"pass without the audit: {plain:.1f} s; one audit run: {audited:.1f} s; ratio {audited / plain:.2f}")


def _jax_sigma(epsilon: float, accountant: str, rows: int, batch: int, sampling: str = "poisson") -> float:
    """JAX Privacy's calibrated sigma for ``epsilon`` over 4 updates, as the jax-privacy trainer calibrates it (doubled
    for fixed-size batches, which JAX Privacy accounts as Poisson steps of sigma / 2)."""
    from dpaudit.trainers.jax_privacy.trainer import JaxPrivacyTrainer, _sigma

    config = JaxPrivacyTrainer().tiny_config(target_epsilon=epsilon, accountant=accountant, steps=4, sampling=sampling)
    return _sigma(config, rows, batch, 1e-5)


#: The JAX Privacy configurations of part 1j: (name, accountant, optimizer, physical batch, sampling).
JAX_CONFIGS = (
    ("default (PLD, SGD, Poisson)", "pld", "sgd", None, "poisson"),
    ("RDP accountant", "rdp", "sgd", None, "poisson"),
    ("PLD, Adam", "pld", "adam", None, "poisson"),
    ("PLD, minibatches of 100", "pld", "sgd", 100, "poisson"),
    ("PLD, fixed-size batches", "pld", "sgd", None, "fixed"),
)


def _chosen(name: str, only: str) -> bool:
    return not only or any(word.strip() and word.strip() in name for word in only.split(","))


def mechanism_epsilon(record: Any, delta: float) -> float:
    """dpaudit's epsilon of the mechanism that ran (the record's event, by the record's accountant) at ``delta``, the
    delta the library's claim is tested at: the most any audit of a correct run can read there (rounded up when
    printed). Where the float32 noise's tail figure raised that delta above the library's (epsilon 8 here), this is
    below the library's claimed epsilon."""
    from dpaudit import accounting

    return float(accounting.epsilon(accounting.event_from_json(record.event), delta, record.accountant))


def _jax_host(first_seed: int, **kwargs: Any) -> Any:
    """A light JAX Privacy host with a fresh secret noise seed per run (the runs must be independent trials)."""
    from tests.trainers.jax_privacy.faults import LightHost

    class _Fresh(LightHost):
        def __init__(self) -> None:
            super().__init__(noise_seed=first_seed, **kwargs)
            self.seeds = iter(range(first_seed, first_seed + 10_000))

        def train_with_gradient_canaries(self, *args: Any, **kwargs: Any) -> Any:
            self.noise_seed = next(self.seeds)
            return super().train_with_gradient_canaries(*args, **kwargs)

    return _Fresh()


def jax_correct_configurations(canaries: int, runs: int, epsilons: list[float], only: str = "") -> None:
    from dpaudit.common.figures import format_down as down
    from dpaudit.common.figures import format_up as up
    from dpaudit.whitebox.gradient_path import audit_gradient_path

    rows = 64 + canaries
    batch = round(0.5 * rows)
    print(
        f"\n1j. Correct JAX Privacy configurations: {canaries} canaries x {runs} runs, q = 0.5, 4 updates, delta 1e-5 "
        "(ceil: the same bound for a perfect attack at these sizes; mech: dpaudit's epsilon of what ran at the tested "
        "delta, the most any audit reads, and each bound's share of it; fixed-size batches: signed canaries, replace-one)"
    )
    print(
        f"{'configuration':<30}{'eps':>4}{'sigma':>7}{'claim':>7}{'delta':>9}{'mech':>7}{'one-run':>9}{'ceil':>7}"
        f"{'/claim':>8}{'/mech':>7}{'multi-run':>11}{'ceil':>7}{'/claim':>8}{'/mech':>7}  verdict  seconds  tests "
        "(one-run, multi-run)"
    )
    for c, (name, accountant, optimizer, physical, sampling) in enumerate(JAX_CONFIGS):
        if not _chosen(name, only):
            continue
        for epsilon in epsilons:
            start = time.perf_counter()
            sigma = _jax_sigma(epsilon, accountant, rows, batch, sampling)
            # each row its own secret noise seeds and coins: equal seeds would repeat one row's canary observations
            trial = row_trial(c, epsilon)
            host = _jax_host(
                1000 + 1000 * trial,
                sigma=sigma,
                accountant=accountant,
                optimizer=optimizer,
                physical_batch=physical,
                sampling=sampling,
            )
            analysis, done = audit_gradient_path(
                host, None, None, canaries=canaries, runs=runs, seed=7 + trial, full=False
            )
            claim = float(analysis.claim.epsilon)
            mech = mechanism_epsilon(done[0].record, float(analysis.claim.delta))
            one, multi = _verdict_bounds(analysis)
            verdict = "FLAGGED" if analysis.alarm else "ok"
            ceil_one, ceil_multi = analysis.ceilings["one-run"], analysis.ceilings["pooled"]
            print(
                f"{name:<30}{epsilon:>4g}{sigma:>7.3f}{up(claim):>7}{up(analysis.claim.delta, 2):>9}{up(mech):>7}"
                f"{down(one):>9}{down(ceil_one):>7}{down(one / claim):>8}{down(one / mech):>7}{down(multi):>11}"
                f"{down(ceil_multi):>7}{down(multi / claim):>8}{down(multi / mech):>7}  {verdict:<8}"
                f"{time.perf_counter() - start:>6.0f}  {_methods(analysis)}",
                flush=True,
            )


class _IdealHost:
    """A host whose canaries read exactly the claimed mechanism, drawn by numpy (Poisson sampling with the run's q,
    the clip norm C on a member's row when sampled, Gaussian noise of std sigma C), with the ``privacy.json`` of a real
    run of the same configuration: the same audit code then gives what a correct run reads at this design, for
    comparison with the library's real runs."""

    library = "jax_privacy"

    def __init__(
        self, record_text: str, q: float, std: float, clip: float, steps: int, rng: np.random.Generator
    ) -> None:
        self.record_text, self.q, self.std, self.clip, self.steps, self.rng = record_text, q, std, clip, steps, rng

    def train_with_gradient_canaries(self, data_dir, out_dir, config, *, gains, seed):  # noqa: ANN001
        member = np.asarray(gains) > 0
        sampled = self.rng.random((self.steps, member.size)) < self.q
        observations = self.clip * (sampled & member) + self.rng.standard_normal((self.steps, member.size)) * self.std
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "privacy.json").write_text(self.record_text)
        return observations, observations.sum(axis=0)


def jax_one_run_spread(canaries: int, seeds: int, epsilons: list[float], only: str = "", runs: int = 1) -> None:
    """The one-run bound's spread over ``seeds`` independent real runs of each (Poisson) JAX Privacy configuration,
    beside as many ideal runs (:class:`_IdealHost`: the claimed mechanism drawn by numpy, the same audit code) and the
    plan's expected share (:mod:`dpaudit.whitebox.plan`, its counts one binomial standard deviation worse than
    expected): whether the real runs read more than a correct mechanism allows. ``> claim``: the runs whose bound is
    above the claim (the validity count: at most 5% of them for a correct run). With ``runs`` R > 1 the ideal audits
    pool R runs each, and their multi-run share is printed too (the real multi-run audits are part 1j's, one per row:
    R real runs cost R times a one-run audit, the ideal ones little)."""
    from dpaudit.common.figures import format_down as down
    from dpaudit.common.figures import format_up as up
    from dpaudit.whitebox.gradient_path import audit_gradient_path

    rows = 64 + canaries
    batch = round(0.5 * rows)
    print(
        f"\n1s. One-run spread: {seeds} independent one-run audits of JAX Privacy ({canaries} canaries, q = 0.5, "
        f"4 updates) and {seeds} ideal ones (the claimed mechanism drawn by numpy, the same audit code), share of the "
        "claim: mean, standard deviation, least, most; > claim: the runs whose bound exceeds the claim"
        + (f"; ideal multi-run: {seeds} ideal audits of {runs} runs pooled" if runs > 1 else "")
    )
    print(
        f"{'configuration':<30}{'eps':>4}{'claim':>7}{'plan':>6}{'real mean':>11}{'sd':>7}{'min':>7}{'max':>7}"
        f"{'> claim':>9}{'ideal mean':>12}{'sd':>7}{'min':>7}{'max':>7}{'> claim':>9}"
        + (f"{'multi mean':>12}{'sd':>7}{'min':>7}{'max':>7}{'> claim':>9}" if runs > 1 else "")
        + "  seconds"
    )
    for c, (name, accountant, optimizer, physical, sampling) in enumerate(JAX_CONFIGS):
        if not _chosen(name, only) or sampling != "poisson":
            continue
        for epsilon in epsilons:
            start = time.perf_counter()
            sigma = _jax_sigma(epsilon, accountant, rows, batch, sampling)
            # seeds of their own, apart from the tables' (row_trial's 1000 + 1000 x trial and 7 + trial)
            trial = 10_000_000 + 1000 * row_trial(c, epsilon)
            real, ideal, pooled = [], [], []
            for s in range(seeds):
                host = _jax_host(
                    trial + s, sigma=sigma, accountant=accountant, optimizer=optimizer, physical_batch=physical
                )
                analysis, done = audit_gradient_path(host, None, None, canaries=canaries, seed=trial + s, full=False)
                real.append(_verdict_bounds(analysis)[0] / float(analysis.claim.epsilon))
            claim = analysis.claim
            assert claim.epsilon is not None
            record_text = json.dumps(done[0].record.to_json())
            q, std = claim.per_step()
            for s in range(seeds):
                rng = np.random.default_rng((trial, s))
                ideal_host = _IdealHost(record_text, float(q[0]), float(std[0]), float(claim.clip_norm), q.size, rng)
                analysis, _ = audit_gradient_path(
                    ideal_host, None, None, canaries=canaries, runs=runs, seed=50_000_000 + trial + s, full=False
                )
                one, multi = _verdict_bounds(analysis)
                ideal.append(one / float(claim.epsilon))
                pooled.append(multi / float(claim.epsilon))
            plan = _planned_one_run_share(claim, canaries)
            r, i, p = np.asarray(real), np.asarray(ideal), np.asarray(pooled)
            more = (
                f"{down(p.mean()):>12}{p.std(ddof=1):>7.3f}{down(p.min()):>7}{down(p.max()):>7}{int((p > 1).sum()):>6}/{seeds:<2}"
                if runs > 1
                else ""
            )
            print(
                f"{name:<30}{epsilon:>4g}{up(float(claim.epsilon)):>7}{plan:>6.2f}{down(r.mean()):>11}{r.std(ddof=1):>7.3f}"
                f"{down(r.min()):>7}{down(r.max()):>7}{int((r > 1).sum()):>6}/{seeds:<2}{down(i.mean()):>12}"
                f"{i.std(ddof=1):>7.3f}{down(i.min()):>7}{down(i.max()):>7}{int((i > 1).sum()):>6}/{seeds:<2}{more}"
                f"{time.perf_counter() - start:>7.0f}",
                flush=True,
            )


def jax_planted_faults() -> None:
    import pytest

    from tests.trainers.jax_privacy.faults import CANARIES, FAULTS, one_run_audits

    print(f"\n2j. JAX Privacy's planted faults (epsilon 4 claimed): flagged in one run ({CANARIES} canaries each)")
    patch = pytest.MonkeyPatch()
    for fault, seeds in ((None, 20), *((f, 10) for f in (*FAULTS, "fixed_as_poisson"))):
        start = time.perf_counter()
        flags, mismatched = [], 0
        sampling = "fixed" if fault == "fixed_as_poisson" else "poisson"
        # fixed-size batches: signed canaries test the library's claim (here one for Poisson sampling)
        for analysis, done in one_run_audits(fault, seeds, patch, sampling=sampling):
            flags.append(analysis.alarm)
            mismatched += not done[0].record.details["library"]["agrees"]
        name = fault or "none (JAX Privacy as installed)"
        audit = f"flagged {sum(flags):>2}/{seeds}"
        print(
            f"{name:<32} {audit}   privacy.json mismatch {mismatched:>2}/{seeds}   ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )


def jax_cost(canaries: int) -> None:
    from click.testing import CliRunner

    from dpaudit.cli import cli
    from dpaudit.cli.audit_trainer import AUDIT_INJECT, _train_rows
    from dpaudit.trainers.jax_privacy.trainer import JaxPrivacyTrainer

    print(f"\n3j. Cost: the jax-privacy trainer's Flax BERT-tiny masked LM, 4 updates, q = 0.5, {canaries} canaries")
    trainer = JaxPrivacyTrainer()
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        CliRunner().invoke(cli, ["inject", *AUDIT_INJECT, "--out", str(data)], catch_exceptions=False)
        rows = _train_rows(data)
        # sigma 1 at q = 0.5: JAX Privacy's float32 noise tail figure exceeds delta 1e-5, stated as delta + figure
        same = {"noise_multiplier": 1.0, "steps": 4, "noise_seed": 1, "accept_noise_tail": True}
        plain_cfg = trainer.tiny_config(batch_size=rows // 2, **same)
        audit_cfg = trainer.tiny_config(batch_size=(rows + canaries) // 2, **same)
        trainer.train(data, Path(scratch) / "warm", plain_cfg, seed=0)  # imports and compilation
        start = time.perf_counter()
        trainer.train(data, Path(scratch) / "plain", plain_cfg, seed=0)
        plain = time.perf_counter() - start
        gains = np.where(np.random.default_rng(0).integers(0, 2, canaries) == 1, 1e6, 0.0)
        warm = np.zeros(canaries)
        trainer.train_with_gradient_canaries(data, Path(scratch) / "warm-audit", audit_cfg, gains=warm, seed=0)
        start = time.perf_counter()
        trainer.train_with_gradient_canaries(data, Path(scratch) / "audit", audit_cfg, gains=gains, seed=0)
        audited = time.perf_counter() - start
    print(
        f"pass without the audit ({rows} rows): {plain:.1f} s; one audit run ({rows + canaries} rows): {audited:.1f} s; "
        f"ratio {audited / plain:.2f} (both compiled before timing)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--epsilons", default="1,4,8")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: plan, configs, faults, cost")
    parser.add_argument("--libraries", default="opacus,jax-privacy", help="comma-separated: opacus, jax-privacy")
    parser.add_argument(
        "--configs",
        default="",
        help="only the configurations (Opacus and JAX Privacy) whose name contains one of these comma-separated words",
    )
    parser.add_argument(
        "--cost-mode",
        default="hooks",
        help="Opacus grad_sample_mode of the cost part: hooks (a B x (m + 1) per-example gradient of the canary "
        "table) or ghost (its per-example norms only: the table costs O(B + m))",
    )
    parser.add_argument(
        "--cost-physical",
        type=int,
        default=None,
        help="Opacus BatchMemoryManager physical batch of the cost part (Poisson samples are sorted, so the canary rows "
        "fill physical batches of their own, which the trainer runs at the first position only)",
    )
    parser.add_argument(
        "--spread",
        type=int,
        default=0,
        help="this many independent one-run audits per JAX Privacy configuration and epsilon, beside as many ideal ones "
        "(part 1s; with --runs R > 1 the ideal ones pool R runs and print their multi-run share too), and of Opacus's "
        "default under hooks and ghost clipping on the same seeds (part 1o); 0: skip",
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print("command: python " + " ".join(sys.argv))
    print(f"machine: {os.cpu_count()} cores, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    skip = set(filter(None, args.skip.split(",")))
    libraries = set(filter(None, args.libraries.split(",")))
    epsilons = [float(e) for e in args.epsilons.split(",")]
    with contextlib.suppress(KeyboardInterrupt):
        if "plan" not in skip:
            planned_shares(args.canaries, args.runs, epsilons, libraries)
        if "opacus" in libraries:
            if "configs" not in skip:
                correct_configurations(args.canaries, args.runs, epsilons, args.configs)
            if args.spread > 0:
                opacus_one_run_spread(args.canaries, args.spread, epsilons)
            if "faults" not in skip:
                planted_faults(500)
            if "cost" not in skip:
                cost(args.canaries, args.cost_mode, args.cost_physical)
        if "jax-privacy" in libraries:
            if "configs" not in skip:
                jax_correct_configurations(args.canaries, args.runs, epsilons, args.configs)
            if args.spread > 0:
                jax_one_run_spread(args.canaries, args.spread, epsilons, args.configs, args.runs)
            if "faults" not in skip:
                jax_planted_faults()
            if "cost" not in skip:
                jax_cost(args.canaries)
    print(f"load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore")
    main()
