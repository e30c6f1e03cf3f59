"""Library-style faults planted in JAX Privacy 2.0 itself (monkeypatched for one test), and a light audit host.

Each fault is a bug class DP libraries have shipped (``docs/auditing.md``, "Planted library faults"):

- ``noise_for_mean``: the privatizer's std is the one meant for the mean (sigma C / expected batch) but the noise is
  added to the clipped sum;
- ``noise_reused``: the privatizer's key never advances: one noise draw reused at every update;
- ``micro_steps``: gradient accumulation accounted per micro-step (the accountant is told k steps of batch B / k per
  update);
- ``fixed_as_poisson``: fixed-size batches accounted as Poisson sampling (the accountant is told POISSON).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpaudit.trainers.jax_privacy.loop import JaxSetup, Settings, run_jax_privacy
from dpaudit.trainers.jax_privacy.privacy import build_record

FAULTS = ("noise_for_mean", "noise_reused", "micro_steps")
#: JAX Privacy's own sigma for epsilon 4 at q = 0.5, 4 steps, delta 1e-5 (its PLD accountant).
SIGMA = 1.43
DELTA = 1e-5
CANARIES = 500
#: Micro-steps per update of the accumulation fault (its claim is far below the epsilon 4 that ran).
ACCUMULATION = 32


def _loss(params: Any, batch: dict[str, Any]) -> Any:
    logits = batch["x"] @ params["w"] + params["b"]
    return jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(logits), batch["y"][:, None], axis=1))


def tiny_setup() -> JaxSetup:
    """A linear classifier on 64 rows of 8 features (the canaries' clipped gradients do not depend on the model)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32)
    params = {"w": jnp.zeros((8, 2), jnp.float32), "b": jnp.zeros(2, jnp.float32)}
    return JaxSetup(loss=_loss, params=params, data={"x": x, "y": y}, batch_size=32)


class LightHost:
    """A gradient-path host that trains :func:`tiny_setup` with JAX Privacy and writes only ``privacy.json`` (the
    audit reads nothing else): the library's real per-example gradient path in a few hundredths of a second."""

    library = "jax_privacy"

    def __init__(
        self,
        *,
        noise_seed: int,
        sigma: float = SIGMA,
        accountant: str = "pld",
        sampling: str = "poisson",
        optimizer: str = "sgd",
        physical_batch: int | None = None,
    ):
        self.noise_seed, self.sigma, self.accountant, self.sampling = noise_seed, sigma, accountant, sampling
        self.optimizer, self.physical_batch = optimizer, physical_batch

    def gradient_path_adjacency(self, config: Any) -> str:
        return "replace_one" if self.sampling == "fixed" else "add_remove"

    def train_with_gradient_canaries(
        self, data_dir: Any, out_dir: Path, config: Any, *, gains: np.ndarray, seed: int
    ) -> tuple[np.ndarray, np.ndarray]:
        settings = Settings(
            noise_multiplier=self.sigma,
            clip_norm=1.0,
            steps=4,
            delta=DELTA,
            accountant=self.accountant,
            sampling=self.sampling,
            noise_seed=self.noise_seed,
            physical_batch=self.physical_batch,
            optimizer=self.optimizer,
            learning_rate=1e-3 if self.optimizer == "adam" else 0.05,
        )
        run = run_jax_privacy(tiny_setup(), settings, gains=gains)
        record = build_record(run, delta=DELTA, accountant=self.accountant, target_epsilon=None, accept_noise_tail=True)
        Path(out_dir).mkdir(parents=True)
        (Path(out_dir) / "privacy.json").write_text(json.dumps(record.to_json()))
        assert run.observations is not None and run.final is not None
        return run.observations, run.final


@contextlib.contextmanager
def planted(fault: str | None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Plant ``fault`` (None: JAX Privacy as installed) for the duration of the block."""
    from jax_privacy import accounting, noise_addition

    with monkeypatch.context() as patch:
        if fault == "noise_for_mean":
            original = noise_addition.gaussian_privatizer
            expected = 0.5 * (64 + CANARIES)  # the expected batch of the light host's runs

            def for_mean(*, stddev: float, **kwargs: Any) -> Any:
                return original(stddev=stddev / expected, **kwargs)

            patch.setattr(noise_addition, "gaussian_privatizer", for_mean)
        elif fault == "noise_reused":
            original = noise_addition.gaussian_privatizer

            def reused(**kwargs: Any) -> Any:
                inner = original(**kwargs)

                def update(sum_of_clipped_grads: Any, noise_state: Any, params: Any = None) -> Any:
                    noisy, _ = inner.update(sum_of_clipped_grads, noise_state, params)
                    return noisy, noise_state  # the state (its key) never advances

                return type(inner)(inner.init, update)

            patch.setattr(noise_addition, "gaussian_privatizer", reused)
        elif fault in ("micro_steps", "fixed_as_poisson"):
            compute = accounting.DpsgdTrainingAccountant.compute_epsilon

            def told(self: Any, num_updates: Any, dp_params: Any, allow_approximate_cache: bool = False) -> float:
                if fault == "micro_steps":
                    dp_params = dataclasses.replace(dp_params, batch_size=max(1, dp_params.batch_size // ACCUMULATION))
                    num_updates = num_updates * ACCUMULATION
                else:
                    dp_params = dataclasses.replace(dp_params, sampling_method=accounting.SamplingMethod.POISSON)
                return compute(self, num_updates, dp_params, allow_approximate_cache)

            patch.setattr(accounting.DpsgdTrainingAccountant, "compute_epsilon", told)
        elif fault is not None:
            raise ValueError(fault)
        yield


def one_run_audits(
    fault: str | None, seeds: int, monkeypatch: pytest.MonkeyPatch, *, sampling: str = "poisson"
) -> list[tuple[Any, list[Any]]]:
    """``seeds`` one-run verdict audits (:class:`LightHost`, :data:`CANARIES` canaries) of JAX Privacy with ``fault``
    planted (None: as installed): each audit's (analysis, runs). Fixed-size ``sampling``: signed canaries test the
    library's claim."""
    from dpaudit.whitebox.gradient_path import audit_gradient_path

    with planted(fault, monkeypatch):
        return [
            audit_gradient_path(
                LightHost(noise_seed=10_000 + seed, sampling=sampling),
                None,
                None,
                canaries=CANARIES,
                seed=seed,
                full=False,
                min_scale=1.0,
            )
            for seed in range(seeds)
        ]
