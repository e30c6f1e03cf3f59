"""``privacy.json`` of a JAX Privacy run: the library's own claim beside dpaudit's recomputation of what ran.

JAX Privacy's ``DpsgdTrainingAccountant`` (its PLD or RDP config) composes one event per accounted step: a
Poisson-subsampled Gaussian of sigma for Poisson sampling, of sigma / 2 for fixed-size batches (its reduction:
replace-one doubles the sensitivity); its epsilon is what a JAX Privacy user is told. dpaudit does not copy it: the
record's event and epsilon are accounted from the mechanism that ran by the shared
:func:`dpaudit.trainers.library_record.build_library_record` (PLD for Poisson sampling; fixed-size batches sampled
without replacement by RDP under replace-one adjacency), and a library history that differs from what ran is a
flagged mismatch. The noise is JAX Privacy's ``gaussian_privatizer``: ``jax.random.normal`` in float32, whose reach
is 5.22 standard deviations (:data:`dpaudit.accounting.noise_tail.SAMPLERS`, ``jax-float32``); dpaudit counts its
tail figure inside delta as it does for its own trainers, which JAX Privacy's accountant does not. See
``docs/trainers.md`` ("jax-privacy").
"""

from __future__ import annotations

from typing import Any

from dpaudit.claim.record import PrivacyRecord
from dpaudit.trainers.jax_privacy.loop import JaxPrivacyRun
from dpaudit.trainers.library_record import LibraryRun, build_library_record

__all__ = ["NOISE_SAMPLER", "build_record", "library_run"]

#: JAX Privacy's noise: ``jax.random.normal`` float32 (what its ``gaussian_privatizer`` draws with).
NOISE_SAMPLER = "jax-float32"


def library_run(run: JaxPrivacyRun, accountant: str) -> LibraryRun:
    """The facts of a JAX Privacy run in the shared shape of :mod:`dpaudit.trainers.library_record`."""
    return LibraryRun(
        library="jax_privacy",
        version=run.library_version,
        accountant=accountant,
        library_epsilon=run.library_epsilon,
        history=list(run.history),
        updates=run.updates,
        sample_rate=run.sample_rate,
        dataset_size=run.dataset_size,
        noise_multiplier=run.noise_multiplier,
        clip_norm=run.clip_norm,
        normalizer=run.normalizer,
        sampling=run.sampling,
        library_sampling=run.library_sampling,
        batch_size=run.batch_size,
    )


def build_record(
    run: JaxPrivacyRun,
    *,
    delta: float,
    accountant: str,
    target_epsilon: float | None,
    accept_noise_tail: bool = False,
    extra: dict[str, Any] | None = None,
) -> PrivacyRecord:
    """The record of a finished JAX Privacy run (dpaudit's accounting of what ran, the library's claim beside it).

    Raises:
        UserInputError: the noise sampler's tail figure alone reaches delta (unless ``accept_noise_tail``).
    """
    fixed = run.sampling == "fixed"
    sampler = (
        f"FixedBatchSampling(batch_size={run.batch_size})"
        if fixed
        else f"CyclicPoissonSampling(q = {run.sample_rate:g})"
    )
    return build_library_record(
        library_run(run, accountant),
        trainer="jax-privacy",
        display="JAX Privacy",
        delta=delta,
        mechanism=(
            f"JAX Privacy {run.library_version} DP-SGD: {sampler} batches, clipped_grad (each example's gradient "
            f"clipped to C = {run.clip_norm:g}, summed), gaussian_privatizer noise of std sigma C on the clipped sum, "
            f"divided by the expected batch size {run.normalizer:g}."
        ),
        randomness=(
            "batch selection and noise keyed by --noise-seed (explicit: reproducible, secret only as long as the seed "
            "is)"
            if run.noise_seed_explicit
            else "batch selection and noise keyed by a 128-bit seed from OS entropy (secret, never written; the noise "
            "key is 64 bits of its hash)"
        ),
        noise_seed_explicit=run.noise_seed_explicit,
        target_epsilon=target_epsilon,
        library_details={"sampling_method": "FIXED_BATCH_SIZE" if fixed else "POISSON"},
        notes=[],
        noise_sampler=NOISE_SAMPLER,
        accept_noise_tail=accept_noise_tail,
        extra=extra,
    )
