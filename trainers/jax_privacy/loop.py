"""One JAX Privacy 2.0 DP-SGD run as its documentation composes it, optionally hosting canaries through its real
gradient path.

The components are JAX Privacy's own: a batch selection strategy (``batch_selection.CyclicPoissonSampling`` for
Poisson sampling, ``FixedBatchSampling`` for fixed-size batches) yields each logical batch's indices;
``batch_selection.split_and_pad_global_batch`` cuts it into padded minibatches of one static shape; the clipped
per-example gradient sum is ``jax_privacy.clipped_grad(loss, l2_clip_norm=C, batch_argnums=1)`` (``vmap`` of
``value_and_grad``, each example's gradient clipped to C, padding examples zeroed through ``is_padding_example``),
accumulated over the minibatches; ``noise_addition.gaussian_privatizer(stddev=sigma C)`` adds the noise; the noisy
sum divided by the expected batch size is the optax optimizer's gradient. The library's claim is its own
accountant's (``accounting.DpsgdTrainingAccountant`` with its PLD or RDP config, ``DpParams`` with the sampling
method). What dpaudit adds is observation only: the updates counted where they happen, the canary rows of the
released update multiplied back by the public normalizer, and the events the library's accountant composed, read off
the accountant itself (:class:`_RecordingConfig`), for dpaudit's accounting beside the library's
(:mod:`dpaudit.trainers.library_record`).

The randomness the guarantee rests on is secret (:class:`dpaudit.training.noise_source.NoiseSource`): the batch
selection's numpy generator is seeded with the whole 128-bit seed, the privatizer's key is 64 bits of a hash of it
(JAX's key size); JAX Privacy's own default key (``np.random.randint(0, 2**31)``) is never used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpaudit.trainers.jax_privacy.canary import CANARY_KEY, with_canaries

__all__ = ["JaxPrivacyRun", "JaxSetup", "Settings", "clipped_batch_sum", "library_epsilon", "run_jax_privacy"]

#: The NoiseSource purpose of the privatizer's key (hashed_words) and the numpy stream of the batch selection.
_NOISE_PURPOSE = "jax-privacy"
_SAMPLING_STREAM = 0
#: XLA's backend (LLVM) optimization level of the noisy step (:func:`_noisy_step`): elementwise work that costs little
#: to run at any size but seconds to compile for a model's many leaves, so level 0 (the same HLO, float32 without
#: fast-math, only less optimised machine code: the mechanism is unchanged). The clipped gradient, where a real run
#: spends its time, keeps XLA's default.
_QUICK = {"xla_backend_optimization_level": 0}


@dataclass
class JaxSetup:
    """What a user's JAX training is made of: ``loss(params, batch)`` (a scalar for a batch with a leading axis,
    called by ``clipped_grad`` on one example at a time), the initial ``params`` (a pytree), the training ``data``
    (a dict of arrays whose leading axis is the N rows), the expected ``batch_size`` (q = batch_size / N) and an
    optional optax ``optimizer`` (default: SGD at the config's learning rate)."""

    loss: Callable[[Any, dict[str, Any]], Any]
    params: Any
    data: dict[str, np.ndarray]
    batch_size: int
    optimizer: Any = None


@dataclass(frozen=True)
class Settings:
    """The mechanism's settings of a run and its length (noisy updates)."""

    noise_multiplier: float
    clip_norm: float
    steps: int
    delta: float
    accountant: str = "pld"
    sampling: str = "poisson"
    noise_seed: int | None = None
    #: JAX Privacy's minibatch: each logical batch runs as padded minibatches of this size (None: the expected batch).
    physical_batch: int | None = None
    learning_rate: float = 0.05
    optimizer: str = "sgd"


@dataclass
class JaxPrivacyRun:
    """What ran, as read from the objects that ran."""

    updates: int
    sample_rate: float
    sampling: str
    batch_size: int
    dataset_size: int
    noise_multiplier: float
    clip_norm: float
    normalizer: float
    history: list[tuple[float, float, int]]
    library_sampling: str
    library_epsilon: float
    library_version: str
    noise_seed_explicit: bool
    losses: list[float] = field(default_factory=list)
    observations: np.ndarray | None = None
    final: np.ndarray | None = None
    params: Any = None


class _RecordingConfig:
    """A JAX Privacy ``DpAccountantConfig`` whose accountants note every event they compose (the accountant's own
    history: what the library's claim was computed from)."""

    def __init__(self, inner: Any, composed: list[tuple[Any, int]]) -> None:
        self.inner, self.composed = inner, composed

    def create_accountant(self) -> Any:
        accountant = self.inner.create_accountant()
        compose = accountant.compose

        def noting(event: Any, count: int = 1) -> Any:
            self.composed.append((event, int(count)))
            return compose(event, count)

        accountant.compose = noting
        return accountant


def _history(composed: list[tuple[Any, int]]) -> list[tuple[float, float, int]]:
    """(sigma, q, steps) of the Poisson-subsampled Gaussian events the library's accountant composed (other events:
    left out, so that the history no longer matches what ran and the record says so)."""
    import dp_accounting

    rows = []
    for event, count in composed:
        if isinstance(event, dp_accounting.PoissonSampledDpEvent) and isinstance(
            event.event, dp_accounting.GaussianDpEvent
        ):
            rows.append((float(event.event.noise_multiplier), float(event.sampling_probability), count))
    return rows


def library_epsilon(
    accountant: str, sampling: str, sigma: float, *, rows: int, batch: int, updates: int, delta: float
) -> tuple[float, list[tuple[float, float, int]]]:
    """JAX Privacy's own epsilon for what it was told (``DpsgdTrainingAccountant.compute_epsilon``) and the history
    of events its accountant composed for it. Cached per accountant implementation (the runs of one audit tell it the
    same; its PLD takes seconds), so a replaced ``compute_epsilon`` is called afresh."""
    from jax_privacy import accounting

    compute = accounting.DpsgdTrainingAccountant.compute_epsilon
    epsilon, history = _library_epsilon(accountant, sampling, sigma, rows, batch, updates, delta, compute)
    return epsilon, list(history)


@functools.lru_cache(maxsize=256)
def _library_epsilon(
    accountant: str, sampling: str, sigma: float, rows: int, batch: int, updates: int, delta: float, compute: Any
) -> tuple[float, tuple[tuple[float, float, int], ...]]:
    from jax_privacy import accounting

    composed: list[tuple[Any, int]] = []
    inner = accounting.PldAccountantConfig() if accountant == "pld" else accounting.RdpAccountantConfig()
    trainer = accounting.DpsgdTrainingAccountant(_RecordingConfig(inner, composed))  # type: ignore[arg-type]
    method = accounting.SamplingMethod.FIXED_BATCH_SIZE if sampling == "fixed" else accounting.SamplingMethod.POISSON
    params = accounting.DpParams(
        noise_multipliers=sigma, num_samples=rows, delta=delta, batch_size=batch, sampling_method=method
    )
    try:
        epsilon = float(trainer.compute_epsilon(updates, params))
    except (MemoryError, ValueError, OverflowError, ArithmeticError):  # e.g. PLD's grid for a tiny sigma
        epsilon = float("inf")
    return epsilon, tuple(_history(composed))


@functools.lru_cache(maxsize=16)
def _clipped_sum(loss: Any, clip_norm: float) -> Any:
    """``jax_privacy.clipped_grad`` of ``loss``, jitted once per loss and clip norm (its per-example values too)."""
    import jax_privacy

    grad = jax_privacy.clipped_grad(
        loss, l2_clip_norm=clip_norm, batch_argnums=1, keep_batch_dim=True, return_values=True
    )
    return jax.jit(lambda params, batch, pad: grad(params, batch, is_padding_example=pad))


def clipped_batch_sum(
    clipped_sum: Any, params: Any, data: dict[str, np.ndarray], indices: np.ndarray, minibatch: int, zeros: Any
) -> tuple[Any, list[tuple[np.ndarray, np.ndarray, np.ndarray]]]:
    """The clipped gradient sum of one logical batch (``indices``, before the noise) as JAX Privacy's documentation
    builds it: ``split_and_pad_global_batch`` cuts it into padded minibatches of ``minibatch`` rows (padding: row 0
    flagged ``is_padding_example``, which ``clipped_grad`` zeroes), each summed by ``clipped_sum`` (:func:`_clipped_sum`)
    and accumulated onto ``zeros``. Returns the sum and, per minibatch, (its per-example loss values, its rows, its
    padding flags). The sensitivity contract (``docs/privacy.md``, "One example's contribution") drives this."""
    from jax_privacy import batch_selection

    total, parts = zeros, []
    for part in batch_selection.split_and_pad_global_batch(np.asarray(indices), minibatch):
        pad = part < 0
        rows = np.where(pad, 0, part)
        chunk = {k: jnp.asarray(v[rows]) for k, v in data.items()}
        grads, aux = clipped_sum(params, chunk, jnp.asarray(pad))
        total = _tree_add(total, grads)
        parts.append((np.asarray(aux.values), rows, pad))
    return total, parts


def run_jax_privacy(
    setup: JaxSetup, settings: Settings, *, gains: np.ndarray | None = None, batch_size: int | None = None
) -> JaxPrivacyRun:
    """Train ``setup`` with JAX Privacy for ``settings.steps`` noisy updates; with ``gains`` ((m,), 0 for a
    non-member), host m canaries through the real gradient path and return their observations (updates, m) and final
    values. ``batch_size``: the expected batch over the rows trained (canaries included); default: the setup's q
    (its batch size over its rows) times those rows."""
    import jax_privacy
    from jax_privacy import batch_selection, noise_addition

    from dpaudit.training.noise_source import NoiseSource

    source = NoiseSource.resolve(settings.noise_seed)
    n_real = int(len(next(iter(setup.data.values()))))
    q_user = min(1.0, setup.batch_size / n_real)
    loss, params, data = setup.loss, setup.params, dict(setup.data)
    if gains is not None:
        loss, params, data = with_canaries(setup.loss, setup.params, setup.data, np.asarray(gains, dtype=np.float64))
    n = int(len(data[next(iter(data))]))
    batch = int(batch_size) if batch_size is not None else max(1, round(q_user * n))
    if settings.sampling == "fixed":
        strategy: Any = batch_selection.FixedBatchSampling(batch_size=batch, iterations=settings.steps)
    else:
        strategy = batch_selection.CyclicPoissonSampling(sampling_prob=batch / n, iterations=settings.steps)
    sample_rate = batch / n
    minibatch = int(settings.physical_batch or batch)
    clipped_sum = _clipped_sum(loss, float(settings.clip_norm))
    key = jnp.asarray(source.hashed_words(2, _NOISE_PURPOSE), dtype=jnp.uint32)  # never JAX Privacy's 31-bit default
    stddev = settings.noise_multiplier * settings.clip_norm
    factory = noise_addition.gaussian_privatizer  # looked up per run: a replaced privatizer is the one that runs
    privatizer = factory(stddev=stddev, prng_key=key)
    optimizer = _optimizer(setup.optimizer, settings.optimizer, float(settings.learning_rate), gains is not None)
    noise_state = privatizer.init(params)
    opt_state = optimizer.init(params)
    normalizer = float(batch)  # the expected batch size, public (JAX Privacy's examples divide by it)
    zeros = _zeros(params)
    step = _noisy_step(factory, optimizer)
    # the step's traced scalars, as the op-by-op privatizer and division received them (float32 operands)
    traced_stddev, traced_normalizer = jnp.float32(stddev), jnp.float32(normalizer)
    seen: list[np.ndarray] = []
    losses: list[float] = []
    updates = 0
    rng = source.numpy_generator(_SAMPLING_STREAM)
    for indices in strategy.batch_iterator(n, rng=rng):
        total, parts = clipped_batch_sum(clipped_sum, params, data, indices, minibatch, zeros)
        values = [  # the real rows' losses (not the canary terms)
            part_values[~pad if gains is None else ~pad & (data[CANARY_KEY][rows] == 0)]
            for part_values, rows, pad in parts
        ]
        gradient, noise_state, opt_state, params = step(
            key, traced_stddev, traced_normalizer, total, noise_state, opt_state, params
        )
        updates += 1
        if gains is not None:
            seen.append(np.asarray(gradient[CANARY_KEY], dtype=np.float64)[1:] * normalizer)
        flat = np.concatenate(values) if values else np.zeros(0)
        losses.append(float(flat.mean()) if flat.size else 0.0)
    epsilon, history = library_epsilon(
        settings.accountant,
        settings.sampling,
        settings.noise_multiplier,
        rows=n,
        batch=batch,
        updates=updates,
        delta=settings.delta,
    )
    # the sampling the library's accountant assumed, read off what it composed: fixed-size batches by their
    # reduction (Poisson steps of sigma / 2), Poisson sampling as Poisson steps of sigma
    halved = bool(history) and abs(history[0][0] - settings.noise_multiplier / 2) <= 1e-9 * settings.noise_multiplier
    said = "fixed" if halved else "poisson"
    run = JaxPrivacyRun(
        updates=updates,
        sample_rate=sample_rate,
        sampling=settings.sampling,
        batch_size=batch,
        dataset_size=n,
        noise_multiplier=float(settings.noise_multiplier),
        clip_norm=float(settings.clip_norm),
        normalizer=normalizer,
        history=history,
        library_sampling=said,
        library_epsilon=epsilon,
        library_version=str(jax_privacy.__version__),
        noise_seed_explicit=source.explicit,
        losses=losses,
        params=params if gains is None else params["model"],
    )
    if gains is not None:
        run.observations = np.stack(seen) if seen else np.zeros((0, len(gains)))
        run.final = np.asarray(params[CANARY_KEY], dtype=np.float64)[1:]
    return run


@jax.jit
def _tree_add(total: Any, grads: Any) -> Any:
    """The minibatch accumulation ``total + grads``, leaf by leaf, as one compiled program per parameter tree."""
    return jax.tree.map(jnp.add, total, grads)


@jax.jit
def _zeros(params: Any) -> Any:
    """Zeros shaped like ``params`` (the accumulation's start), one compiled program per parameter tree."""
    return jax.tree.map(jnp.zeros_like, params)


@functools.lru_cache(maxsize=16)
def _noisy_step(factory: Any, optimizer: Any) -> Any:
    """One update after the clipped sum, jitted once per privatizer factory and optimizer (so every run of an audit
    with the same shapes reuses it): ``factory(stddev=stddev, prng_key=key)``'s ``update`` adds the noise (JAX Privacy's
    ``gaussian_privatizer``, its key carried in ``noise_state``), the noisy sum divided by the public ``normalizer``
    is the optimizer's gradient, then ``optax.apply_updates``. The same components and arithmetic as calling them op
    by op, compiled as one program instead of a few per parameter shape. Returns (gradient, noise state, optimizer
    state, parameters)."""
    import optax

    def step(
        key: Any, stddev: Any, normalizer: Any, total: Any, noise_state: Any, opt_state: Any, params: Any
    ) -> tuple[Any, Any, Any, Any]:
        noisy, noise_state = factory(stddev=stddev, prng_key=key).update(total, noise_state)
        gradient = jax.tree.map(lambda x: x / normalizer, noisy)
        change, opt_state = optimizer.update(gradient, opt_state, params)
        return gradient, noise_state, opt_state, optax.apply_updates(params, change)

    return jax.jit(step, compiler_options=_QUICK)


def _optimizer(user: Any, name: str, learning_rate: float, canaries: bool) -> Any:
    """The run's optax optimizer: the user's, or SGD/Adam at ``learning_rate``; with canaries, :func:`_canary_sgd` of
    it. Built once per setting (:func:`_built_optimizer`) so that :func:`_noisy_step` compiles once per audit."""
    if user is not None and not canaries:
        return user
    try:
        return _built_optimizer(user, name, learning_rate, canaries)
    except TypeError:  # an unhashable user optimizer: built afresh
        return _built_optimizer.__wrapped__(user, name, learning_rate, canaries)


@functools.lru_cache(maxsize=16)
def _built_optimizer(user: Any, name: str, learning_rate: float, canaries: bool) -> Any:
    import optax

    base = user or (optax.adam if name == "adam" else optax.sgd)(learning_rate)
    return _canary_sgd(base, learning_rate) if canaries else base


def _canary_sgd(base: Any, learning_rate: float) -> Any:
    """The user's optimizer on the model, plain SGD on the canary table: its rows' last iterate is then minus the
    learning rate times the sum of their released updates, whatever the user's optimizer (Adam would rescale each
    row by its own noisy moments). The released updates the audit scores are read before any optimizer."""
    import optax

    return optax.multi_transform({"model": base, "canary": optax.sgd(learning_rate)}, _labels)


def _labels(params: Any) -> Any:
    return {"model": jax.tree.map(lambda _: "model", params["model"]), CANARY_KEY: "canary"}
