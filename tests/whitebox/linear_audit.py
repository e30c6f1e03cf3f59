"""A small DP-SGD trainer that hosts gradient canaries, and deliberately broken versions of it.

A numpy least-squares model written against the plug-in surface only (like the template of
``tests/test_trainer_contract.py``) that implements :class:`~dpaudit.training.gradient_canaries.GradientCanaryHost`:
per-example clipping (DP-SGD) or micro-batch clipping (eDP-SGD, sensitivity 2C), noise of std
sigma x sensitivity on every trained coordinate, the block included. Its steps cost microseconds, so
the audit's validity and power can be measured over many seeded runs. The broken variants are the
bugs the audit must catch: noise at sigma / 2, and at 0.8 sigma; micro-batch clipping accounted as sensitivity C; a
sampling rate reported at half its true value; noise drawn once and reused at every step (its seed reset per step).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from dpaudit.training import RecordParts, RunData, RunSettings, TrainerPlugin
from dpaudit.training.gradient_canaries import UNIT_EXAMPLE, UNIT_MICROBATCH, GradientCanaries

REAL_ROWS = 64
FEATURES = 3


class _Step:
    def __init__(self, plugin: LinearAuditPlugin) -> None:
        self.p = plugin
        self.clip_norm = plugin.clip_norm
        self.sensitivity_factor = plugin.claimed_factor
        self.sensitivity = self.clip_norm * self.sensitivity_factor

    def __call__(self, step, indices, sigma, expected_batch):
        p = self.p
        real = indices[indices < REAL_ROWS]
        audit = indices[indices >= REAL_ROWS] - REAL_ROWS
        grads = (p.x[real] @ p.w - p.y[real])[:, None] * p.x[real]  # (n, d) per-example least-squares gradients
        if p.microbatches:  # units: the micro-batches (real rows by their fixed hash slot, audit rows by theirs)
            units = p.microbatches
            real_unit = p.slots[real]
            audit_unit = p.canaries.slot[audit] if p.canaries is not None else np.zeros(0, int)
        else:  # units: the examples
            units = len(real) + len(audit)
            real_unit, audit_unit = np.arange(len(real)), len(real) + np.arange(len(audit))
        unit_w = np.zeros((units, FEATURES))
        np.add.at(unit_w, real_unit, grads)
        sq = (unit_w**2).sum(1)
        m = p.canaries.size if p.canaries is not None else 0
        if len(audit):  # each audit row is gain x e_coordinate: sum per (unit, coordinate), sparsely
            keys, inverse = np.unique(audit_unit * m + p.canaries.coordinate[audit], return_inverse=True)
            cell = np.bincount(inverse, weights=p.canaries.gain[audit])
            sq += np.bincount(keys // m, weights=cell**2, minlength=units)
        scale = np.minimum(1.0, self.clip_norm / np.maximum(np.sqrt(sq), 1e-12))
        gen = p.source.numpy_generator(2, 0 if p.reuse_noise else step)  # broken: the noise seed reset per step
        std = sigma * self.sensitivity * p.noise_fraction
        noisy_w = (unit_w * scale[:, None]).sum(0) + gen.normal(0.0, std, FEATURES)
        if p.canaries is not None:
            noisy_b = gen.normal(0.0, std, m)
            if len(audit):
                np.add.at(noisy_b, keys % m, cell * scale[keys // m])
            p.canaries.observe(step, noisy_b)
            p.block -= p.lr * noisy_b / expected_batch
        p.w -= p.lr * noisy_w / expected_batch
        return len(indices)


class _DoubledSampler:
    """Samples at twice the rate the plan (and so privacy.json) states: the "q reported at half" bug."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def sample(self, step, n, q):
        return self.inner.sample(step, n, min(1.0, 2 * q))

    def state(self):
        return self.inner.state()

    def restore(self, state):
        self.inner.restore(state)


class LinearAuditPlugin(TrainerPlugin):
    """DP-SGD (``microbatches=0``) or eDP-SGD (k micro-batches) least squares hosting gradient canaries."""

    name = "linear-audit"
    noise_fraction = 1.0  # broken: 0.5
    claimed_factor_override: float | None = None  # broken: 1.0 with micro-batches
    double_sampling = False  # broken: True
    reuse_noise = False  # broken: True (one noise draw, reused at every step)

    def __init__(
        self,
        *,
        target_epsilon: float,
        steps: int,
        batch: int,
        noise_seed: int,
        microbatches: int = 0,
        clip_norm: float = 1.0,
        lr: float = 0.05,
        seed: int = 0,
    ) -> None:
        self.target_epsilon, self.steps, self.batch, self.noise_seed = target_epsilon, steps, batch, noise_seed
        self.microbatches, self.clip_norm, self.lr, self.seed = microbatches, clip_norm, lr, seed
        self.claimed_factor = self.claimed_factor_override or (2.0 if microbatches else 1.0)
        data = np.random.default_rng(seed)
        self.x = data.normal(size=(REAL_ROWS, FEATURES))
        self.y = self.x @ np.array([0.5, -1.0, 2.0]) + data.normal(0, 0.1, REAL_ROWS)
        self.slots = np.array(
            [int(hashlib.sha256(str(i).encode()).hexdigest(), 16) % max(microbatches, 1) for i in range(REAL_ROWS)]
        )
        self.w = np.zeros(FEATURES)
        self.canaries: GradientCanaries | None = None
        self.block = np.zeros(0)
        self.source = None

    # -- the gradient-canary capability -------------------------------------------------------
    def gradient_canary_unit(self):
        return (UNIT_MICROBATCH, self.microbatches) if self.microbatches else (UNIT_EXAMPLE, 1)

    def host_gradient_canaries(self, canaries: GradientCanaries) -> None:
        self.canaries = canaries
        self.block = np.zeros(canaries.size)

    def canary_parameters(self) -> np.ndarray:
        return self.block.copy()

    # -- the plug-in surface --------------------------------------------------------------------
    def settings(self):
        return RunSettings(
            config={
                "target_epsilon": self.target_epsilon,
                "steps": self.steps,
                "batch": self.batch,
                "microbatches": self.microbatches,
            },
            noise_seed=self.noise_seed,
            checkpoint_every=10**9,
            log_every=10**9,
            plan={
                "stages": [(self.steps, self.batch)],
                "noise_multiplier": None,
                "non_private": False,
                "target_epsilon": self.target_epsilon,
                "delta": 1e-5,
            },
        )

    def load_data(self):
        rows = self.canaries.rows if self.canaries is not None else 0
        return RunData(size=REAL_ROWS + rows, inputs={}, identity="synthetic")

    def share_source(self, source):
        self.source = source
        return source

    def make_sampler(self, source):
        sampler = super().make_sampler(source)
        return _DoubledSampler(sampler) if self.double_sampling else sampler

    def init_model(self, resume_state):
        self.w = np.zeros(FEATURES)

    def make_step(self, dataset_size, resume_state):
        return _Step(self)

    def save(self, directory, step, state):  # the skeleton checkpoints the end of a run; never resumed here
        from dpaudit.training.train_dir import write_checkpoint

        write_checkpoint(
            directory, step=step, write_arrays=lambda path: Path(path).write_bytes(self.w.tobytes()), state=state
        )

    def read_state(self, path):
        raise AssertionError("no checkpoints in an audit run")

    def restore(self, path):
        raise AssertionError("no checkpoints in an audit run")

    def export(self, model_dir: Path):
        model_dir.mkdir(parents=True, exist_ok=True)
        np.save(model_dir / "w.npy", self.w)

    def fetch(self, pending):
        return [{"step": s + 1, "batch_size": n} for s, n in pending]

    def record_parts(self, plan, steps):
        unit = f"{self.microbatches} micro-batches" if self.microbatches else "per-example clipping"
        return RecordParts(mechanism=f"DP-SGD least squares, {unit}, C = {self.clip_norm}", details={})


class NoiseHalf(LinearAuditPlugin):
    noise_fraction = 0.5


class MicrobatchAccountedAsC(LinearAuditPlugin):
    claimed_factor_override = 1.0


class HalfSamplingRate(LinearAuditPlugin):
    double_sampling = True


class NoiseEightTenths(LinearAuditPlugin):
    noise_fraction = 0.8


class NoiseReused(LinearAuditPlugin):
    reuse_noise = True
