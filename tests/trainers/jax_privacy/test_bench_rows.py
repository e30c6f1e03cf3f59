"""``benchmarks/bench_audit_libraries.py``'s tables of correct configurations: each cell an independent measurement.

The README's tables are measured one epsilon per command (``--epsilons 1``, then ``--epsilons 4``). A row's seeds
(the auditor's coins, the batches and the noise) used to be its place in the command's ``--epsilons`` list, so every
single-epsilon command of a configuration reran the same coins and the same noise draw, rescaled by its sigma: one
lucky draw then read high at every epsilon. The seeds are now a function of the configuration and the epsilon's value
(``row_trial``). The audits are stopped at their first call: only the seeds are under test.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_audit_libraries.py"


class _Stop(Exception):
    pass


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_audit_libraries", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seeds(monkeypatch: pytest.MonkeyPatch, table: str, epsilons: list[float]) -> list[tuple[Any, ...]]:
    """The (audit seed, first noise seed) of each row ``table`` of the benchmark would audit for ``epsilons``."""
    bench = _bench()
    seen: list[tuple[Any, ...]] = []

    def audit(host: Any, *args: Any, seed: int, **kwargs: Any) -> Any:
        seen.append((seed, getattr(host, "noise_seed", None)))
        raise _Stop

    monkeypatch.setattr("dpaudit.whitebox.gradient_path.audit_gradient_path", audit)
    monkeypatch.setattr(bench, "_sigma", lambda *args, **kwargs: 1.0)
    monkeypatch.setattr(bench, "_jax_sigma", lambda *args, **kwargs: 1.0)
    run = bench.jax_correct_configurations if table == "jax" else bench.correct_configurations
    for epsilon in epsilons:  # one command per epsilon, as the README's tables were measured
        with pytest.raises(_Stop):
            run(100, 2, [epsilon], "default")
    return seen


@pytest.mark.parametrize("table", ["jax", "opacus"])
def test_each_epsilon_of_a_configuration_draws_its_own_seeds_when_measured_alone(table, monkeypatch):
    seen = _seeds(monkeypatch, table, [1.0, 4.0, 8.0])
    assert len(seen) == 3
    assert len({audit for audit, _ in seen}) == 3, seen
    if table == "jax":
        assert len({noise for _, noise in seen}) == 3, seen


def test_a_rows_seeds_do_not_depend_on_the_other_epsilons_of_its_command(monkeypatch):
    bench = _bench()
    assert bench.row_trial(0, 4.0) != bench.row_trial(0, 1.0)
    assert bench.row_trial(0, 4.0) != bench.row_trial(1, 4.0)
    alone = _seeds(monkeypatch, "jax", [4.0])
    assert alone[0][0] == 7 + bench.row_trial(0, 4.0)
