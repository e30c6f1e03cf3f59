"""The DP-SGD step (Anil et al. 2021, Algorithm 1): per-example clipping, accumulation, noise, update.

One logical batch is processed as one or more fixed-shape *chunks* of ``S`` micro-steps of ``m``
examples (see :mod:`trainers.jax_bert.sampling`). For each chunk one jitted call runs a
``lax.scan`` over the ``S`` micro-steps; each micro-step computes per-example gradients with
``vmap(grad)``, clips each to L2 norm ``C``, zeroes padding slots and adds the result to a running sum.
The scan reuses the same per-example gradient buffers for every micro-step (on CPU, fresh multi-GB
buffers per micro-step cost more in page faults than the arithmetic), and the running sum is donated
from call to call. After the last chunk, one jitted *finish* adds ``N(0, noise_std^2 I)`` once
(``noise_std = noise_multiplier * step.sensitivity``), divides by the expected batch size (not the
realized one: the realized size is private) and applies the optimizer. Nothing here syncs to the host: metrics come back as device scalars.

``noise_std`` and ``expected_batch_size`` are traced, so an increasing batch-size schedule or a new
noise level never recompiles. The per-example loss is ``loss_fn(params, example) -> (loss, aux)``
with ``aux = dict(n_correct=..., n_predictions=...)``.

Sensitivity: with add/remove adjacency, one example changes the clipped sum by at most ``C``; the
clipped-sum function carries this as its ``sensitivity`` attribute, and the step owns it (as
jax_privacy's ``clipped_grad(...).sensitivity``): the caller passes the noise *multiplier* and the
step multiplies by its own ``step.sensitivity``, so no caller recomputes ``sigma * C``.

White-box audit (:meth:`_Engine.audit_step`, used only when a run hosts gradient canaries): an
*audit block* of trained scalars rides beside the model (:class:`AuditBlock`); audit rows are Dirac
canaries whose gradient ``gain * e_c`` lives on the block only, clipped by the engine's own rule
(``clipped_sum.clip_factors``) and summed per chunk (:func:`audit_clipped_sum`); the finish noises the
block with the same draw as the model and returns the block's noisy clipped sum for the auditor.

References:
  Abadi et al. 2016, "Deep Learning with Differential Privacy", Algorithm 1.
  Anil et al. 2021, "Large-Scale Differentially Private BERT", Section 3.
  Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning" (Dirac gradient canaries).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh

from dpaudit.trainers.jax_bert import parallel

PyTree = Any
LossFn = Callable[[PyTree, PyTree], tuple[jax.Array, dict[str, jax.Array]]]
Chunk = tuple[PyTree, Any]


class StepMetrics(NamedTuple):
    """Device scalars of one logical batch; the caller syncs them to the host only every k steps.

    ``clipped_sum_norm``, ``grad_snr`` and ``clip_fraction`` are computed on private data and are not
    covered by the epsilon (telemetry is a release too); they are for the user's eyes only.
    """

    loss: jax.Array  # mean per-example loss over the real (mask = 1) examples
    n_correct: jax.Array  # correct masked-token predictions, summed over real examples
    n_predictions: jax.Array  # masked-token predictions, summed over real examples
    batch_size: jax.Array  # realized (Poisson) batch size
    clipped_sum_norm: jax.Array  # ||sum of clipped per-example gradients||
    noise_norm: jax.Array  # ||noise|| added to that sum
    grad_snr: jax.Array  # clipped_sum_norm / noise_norm (inf without noise)
    clip_fraction: jax.Array  # fraction of real examples whose gradient norm exceeded C


class ChunkStats(NamedTuple):
    """Sums over the real examples of one chunk (sums, so that they add across chunks and devices)."""

    loss_sum: jax.Array
    n_correct: jax.Array
    n_predictions: jax.Array
    batch_size: jax.Array
    n_clipped: jax.Array


#: ``fn(params, batch [S, m, ...], mask [S, m], clip_norm=None) -> (clipped_sum, ChunkStats)``: a clipped-sum
#: engine (:func:`make_clipped_sum_fn`, the ghost engine), its optional ``clip_norm`` a traced float32 ``C``.
ClippedSumFn = Callable[..., tuple[PyTree, ChunkStats]]

StepFn = Callable[
    [PyTree, optax.OptState, Sequence[Chunk], jax.Array, Any, Any],
    tuple[PyTree, optax.OptState, StepMetrics],
]


#: A parameter's path in the parameter tree, e.g. ``("bert", "embeddings", "word_embeddings", "embedding")``.
Key = tuple[str, ...]


def path_key(path: Sequence[Any]) -> Key:
    """A parameter's :data:`Key` from its path in ``jax.tree_util.tree_flatten_with_path``."""
    return tuple(str(getattr(part, "key", part)) for part in path)


def check_frozen(params: PyTree, frozen: frozenset[Key]) -> None:
    """A ValueError unless every frozen key names a parameter of ``params`` (a typo would train it silently)."""
    present = {path_key(path) for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]}
    missing = sorted("/".join(key) for key in frozen - present)
    if missing:
        raise ValueError(f"frozen parameters {missing} are not parameters of the model.")


def freeze_loss(loss_fn: LossFn, frozen: frozenset[Key]) -> LossFn:
    """``loss_fn`` with ``stop_gradient`` on the frozen parameters: their gradient is exactly 0, so a per-example
    gradient's norm (and its clipping) is the trained parameters' alone (docs/trainers.md, "Frozen parameters")."""
    if not frozen:
        return loss_fn

    def loss(params: PyTree, example: PyTree) -> tuple[jax.Array, dict[str, jax.Array]]:
        held = jax.tree_util.tree_map_with_path(
            lambda path, p: jax.lax.stop_gradient(p) if path_key(path) in frozen else p, params
        )
        return loss_fn(held, example)

    return loss


def zero_frozen(tree: PyTree, frozen: frozenset[Key]) -> PyTree:
    """``tree`` with its frozen leaves replaced by zeros (a frozen parameter gets no gradient and no noise)."""
    if not frozen:
        return tree
    return jax.tree_util.tree_map_with_path(lambda path, x: jnp.zeros_like(x) if path_key(path) in frozen else x, tree)


def keep_frozen(new: PyTree, old: PyTree, frozen: frozenset[Key]) -> PyTree:
    """``new`` with its frozen leaves taken from ``old``: a frozen parameter is never updated (no weight decay
    either), bit for bit."""
    if not frozen:
        return new
    return jax.tree_util.tree_map_with_path(lambda path, n, o: o if path_key(path) in frozen else n, new, old)


def check_clip_norm(clip_norm: float) -> float:
    """C as a float; a ValueError unless C > 0 (inf allowed: no clipping)."""
    clip_norm = float(clip_norm)
    if not clip_norm > 0:  # also rejects NaN
        raise ValueError(f"clip_norm must be > 0 (inf disables clipping), got {clip_norm}.")
    return clip_norm


def _value_and_grad_per_example(
    loss_fn: LossFn, params: PyTree, batch: PyTree
) -> tuple[PyTree, jax.Array, dict[str, jax.Array]]:
    """vmap over the leading axis of ``batch``: (per-example grads, losses [m], aux of [m] arrays)."""

    def one(p: PyTree, example: PyTree) -> tuple[PyTree, jax.Array, dict[str, jax.Array]]:
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, example)
        return grads, loss, aux

    return jax.vmap(one, in_axes=(None, 0))(params, batch)


def per_example_grads(loss_fn: LossFn, params: PyTree, batch: PyTree) -> PyTree:
    """Gradients of ``loss_fn`` for each example of ``batch`` (leading axis), by ``vmap(grad)``.

    The result has the structure of ``params`` with an extra leading example axis; it must equal a
    Python loop of batch-size-1 gradients (the oracle the tests check).
    """
    grads, _, _ = _value_and_grad_per_example(loss_fn, params, batch)
    return grads


def per_example_global_norms(grads: PyTree) -> jax.Array:
    """L2 norm of each example's whole gradient (all leaves together), shape ``[m]``."""
    leaves = jax.tree.leaves(grads)
    sq = sum(jnp.sum(jnp.square(g.astype(jnp.float32)).reshape(g.shape[0], -1), axis=1) for g in leaves)
    return jnp.sqrt(sq)


def clip_factors(norms: jax.Array, clip_norm: float | jax.Array) -> jax.Array:
    """min(1, C / norm) per example; exactly 1 when C = inf or norm = 0 (no 0/0, no inf/inf).

    ``clip_norm`` is a host float or a traced float32 scalar (the clipped-sum functions' ``clip_norm``
    argument): the same float32 operations either way. For a traced ``C = inf`` no norm exceeds it, so every
    factor is the ``1.0`` branch, as the host float's shortcut gives.
    """
    if isinstance(clip_norm, float) and math.isinf(clip_norm):
        return jnp.ones_like(norms)
    safe = jnp.where(norms > clip_norm, norms, clip_norm)
    return jnp.where(norms > clip_norm, clip_norm / safe, 1.0)


def clip_rule(clip_norm: float) -> Callable[[jax.Array], jax.Array]:
    """``norms -> clip_factors(norms, clip_norm)``: the clipping rule a clipped-sum function applies.

    Each engine carries its rule as ``clipped_sum.clip_factors`` (it clips its rows with
    :func:`clip_factors` at the same ``C``, given to it as a traced scalar), and the white-box audit
    (:func:`audit_clipped_sum`) clips its Dirac canaries with that attribute, so the audit follows the
    engine's rule even if an engine's rule changes (Nasr et al. 2023 audit the code that runs).
    """
    clip_norm = check_clip_norm(clip_norm)

    def factors(norms: jax.Array) -> jax.Array:
        return clip_factors(norms, clip_norm)

    return factors


def clip_by_global_norm_per_example(grads: PyTree, clip_norm: float) -> tuple[PyTree, jax.Array]:
    """Scales each example's gradient (leading axis) to L2 norm at most ``clip_norm``.

    Returns ``(clipped, norms)`` with ``norms`` the pre-clipping norms. ``clip_norm = inf`` leaves
    the gradients unchanged.
    """
    clip_norm = check_clip_norm(clip_norm)
    norms = per_example_global_norms(grads)
    factors = clip_factors(norms, clip_norm)
    clipped = jax.tree.map(lambda g: (g * factors.reshape((-1,) + (1,) * (g.ndim - 1))).astype(g.dtype), grads)
    return clipped, norms


def _weighted_sum(weights: jax.Array, grads: PyTree) -> PyTree:
    """sum_k weights[k] * grads[k] per leaf, in float32 (elementwise: exact, fused, no matmul precision)."""
    return jax.tree.map(
        lambda g: jnp.sum(weights.reshape((-1,) + (1,) * (g.ndim - 1)) * g.astype(jnp.float32), axis=0),
        grads,
    )


def zeros_f32(params: PyTree) -> PyTree:
    """A float32 zero accumulator shaped like `params`."""
    return jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)


def zero_stats() -> ChunkStats:
    """Empty :class:`ChunkStats` to accumulate micro-steps into."""
    z = jnp.zeros((), jnp.float32)
    return ChunkStats(z, z, z, z, z)


def tree_add(a: PyTree, b: PyTree) -> PyTree:
    """Leafwise a + b."""
    return jax.tree.map(jnp.add, a, b)


def step_stats(loss: jax.Array, aux: dict[str, jax.Array], mask: jax.Array, n_clipped: jax.Array) -> ChunkStats:
    """One micro-step's masked loss sum, MLM counts, batch size and clipped count."""
    return ChunkStats(
        loss_sum=jnp.sum(mask * loss.astype(jnp.float32)),
        n_correct=jnp.sum(mask * aux["n_correct"].astype(jnp.float32)),
        n_predictions=jnp.sum(mask * aux["n_predictions"].astype(jnp.float32)),
        batch_size=jnp.sum(mask),
        n_clipped=n_clipped,
    )


def skip_if_empty(micro_step: Callable[..., tuple[PyTree, ChunkStats]]) -> Callable[..., Any]:
    """Wraps a scan body so that a micro-step whose slots are all padding costs nothing.

    ``microstep_capacity`` sizes chunks for a 1e-6 overflow probability, so the last micro-steps of
    a chunk are usually empty; ``lax.cond`` skips them (the carry passes through unchanged, which
    equals adding their zero contribution). Step time therefore tracks the realized batch size, as
    in any Poisson-sampled DP-SGD implementation; timing is outside the threat model of the epsilon.
    """

    def body(carry: tuple[PyTree, ChunkStats], xs: tuple[PyTree, jax.Array]):
        _, step_mask = xs
        carry = jax.lax.cond(
            jnp.any(step_mask > 0),
            lambda c, x: micro_step(c, x),
            lambda c, x: c,
            carry,
            xs,
        )
        return carry, None

    return body


def check_chunk(batch: PyTree, mask: Any) -> None:
    """Raises unless `mask` is [micro-steps, examples per micro-step] and every leaf of `batch` starts with those axes."""
    shape = tuple(mask.shape)
    if len(shape) != 2:
        raise ValueError(f"mask must have shape [S, m], got {shape}.")
    for leaf in jax.tree.leaves(batch):
        if tuple(leaf.shape[:2]) != shape:
            raise ValueError(f"every batch array must start with the mask's shape {shape}, got {leaf.shape}.")


#: Default number of examples per vmap(grad) call inside the scan (see ``make_clipped_sum_fn``):
#: ``None`` = 1 on CPU (measured on BERT-mini, 2 cores, 32 examples per micro-step: 2.1 s per DP step at 1,
#: 3.6 s at 4, 7 s at 8, 15 s at 32; a dense [k, 30522, 312] per-example embedding gradient per
#: group is memory-bound) and 32 on accelerators, where wide vmaps are what keeps them busy.
DEFAULT_VMAP_SIZE: int | None = None


def _resolve_vmap_size(vmap_size: int | None) -> int:
    if vmap_size is None:
        return 1 if jax.default_backend() == "cpu" else 32
    if int(vmap_size) != vmap_size or vmap_size < 1:
        raise ValueError(f"vmap_size must be a positive integer or None, got {vmap_size}.")
    return int(vmap_size)


def _group_size(slots: int, vmap_size: int) -> int:
    """Largest divisor of ``slots`` that is <= ``vmap_size`` (so groups tile a micro-step)."""
    return max(d for d in range(1, min(slots, vmap_size) + 1) if slots % d == 0)


def _regroup(batch: PyTree, mask: jax.Array, vmap_size: int) -> tuple[PyTree, jax.Array]:
    """[S, m, ...] -> [S * m / k, k, ...] with k = _group_size(m, vmap_size); slot order is kept."""
    s, m = mask.shape
    k = _group_size(m, vmap_size)
    regroup = lambda x: x.reshape((s * m // k, k) + x.shape[2:])  # noqa: E731
    return jax.tree.map(regroup, batch), regroup(mask)


def make_clipped_sum_fn(
    loss_fn: LossFn, *, clip_norm: float, vmap_size: int | None = DEFAULT_VMAP_SIZE
) -> ClippedSumFn:
    """Returns ``fn(params, batch [S, m, ...], mask [S, m], clip_norm=None) -> (clipped_sum, ChunkStats)``.

    A ``lax.scan`` over the ``S`` micro-steps of ``vmap(grad)`` on ``m`` examples; each example's
    gradient is clipped to norm ``clip_norm`` and weighted by its mask (0 for padding), and the sum
    over all ``S * m`` slots is returned in float32 with the structure of ``params``.
    ``clip_norm = inf`` means no clipping. The function is pure and not jitted (jit or shard it).
    ``fn.sensitivity`` is the L2 sensitivity of ``clipped_sum`` under add/remove of one example.
    ``fn``'s optional ``clip_norm`` argument is ``C`` as a traced float32 scalar (the engine passes its own
    ``C`` so; omitted: the host float, compiled in as a constant): one compiled program then serves every
    ``C`` (:func:`clip_factors`).

    ``vmap_size`` is a performance knob that does not change the result: each micro-step's ``m``
    examples are vectorized ``k`` at a time (``k`` the largest divisor of ``m`` up to ``vmap_size``),
    because the per-example gradients of ``k`` examples (``k`` copies of the model, e.g. 57 MB each
    for BERT-mini) must be materialized; on CPU small groups keep that buffer small and hot in
    cache (``None``: 1 on CPU, 32 on GPU/TPU).
    """
    default_clip_norm = check_clip_norm(clip_norm)
    vmap_size = _resolve_vmap_size(vmap_size)
    factors_of = clip_rule(default_clip_norm)

    def clipped_sum(
        params: PyTree, batch: PyTree, mask: jax.Array, clip_norm: jax.Array | None = None
    ) -> tuple[PyTree, ChunkStats]:
        check_chunk(batch, mask)
        mask = jnp.asarray(mask, jnp.float32)
        c = default_clip_norm if clip_norm is None else clip_norm

        def micro_step(carry: tuple[PyTree, ChunkStats], xs: tuple[PyTree, jax.Array]):
            acc, stats = carry
            step_batch, step_mask = xs
            grads, loss, aux = _value_and_grad_per_example(loss_fn, params, step_batch)
            norms = per_example_global_norms(grads)
            weights = step_mask * clip_factors(norms, c)
            acc = tree_add(acc, _weighted_sum(weights, grads))
            n_clipped = jnp.sum(step_mask * (norms > c))
            stats = tree_add(stats, step_stats(loss, aux, step_mask, n_clipped))
            return acc, stats

        (acc, stats), _ = jax.lax.scan(
            skip_if_empty(micro_step),
            (zeros_f32(params), zero_stats()),
            _regroup(batch, mask, vmap_size),
        )
        return acc, stats

    clipped_sum.sensitivity = default_clip_norm  # type: ignore[attr-defined]
    clipped_sum.clip_factors = factors_of  # type: ignore[attr-defined]
    return clipped_sum


def _make_grad_sum_fn(
    loss_fn: LossFn,
) -> Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, ChunkStats]]:
    """Non-private counterpart: the gradient of the mask-weighted *sum* of losses (one backward pass);
    the finish divides it by the realized batch size."""

    def grad_sum(params: PyTree, batch: PyTree, mask: jax.Array) -> tuple[PyTree, ChunkStats]:
        check_chunk(batch, mask)
        mask = jnp.asarray(mask, jnp.float32)

        def summed_loss(p: PyTree, step_batch: PyTree, step_mask: jax.Array):
            loss, aux = jax.vmap(loss_fn, in_axes=(None, 0))(p, step_batch)
            return jnp.sum(step_mask * loss.astype(jnp.float32)), (loss, aux)

        def micro_step(carry: tuple[PyTree, ChunkStats], xs: tuple[PyTree, jax.Array]):
            acc, stats = carry
            step_batch, step_mask = xs
            grads, (loss, aux) = jax.grad(summed_loss, has_aux=True)(params, step_batch, step_mask)
            acc = tree_add(acc, jax.tree.map(lambda g: g.astype(jnp.float32), grads))
            stats = tree_add(stats, step_stats(loss, aux, step_mask, jnp.zeros((), jnp.float32)))
            return acc, stats

        (acc, stats), _ = jax.lax.scan(skip_if_empty(micro_step), (zeros_f32(params), zero_stats()), (batch, mask))
        return acc, stats

    return grad_sum


def _global_norm(tree: PyTree) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(tree)))


#: Random 32-bit words per Box-Muller pair of :func:`wide_normal_pairs`: three for the radius, one for the angle.
PAIR_WORDS = 4


def wide_normal_pairs(words: Sequence[jax.Array] | jax.Array) -> tuple[jax.Array, jax.Array]:
    """Two standard normals per set of four uint32 words (``words[0..3]``: an array ``uint32[4, ...]`` or four
    broadcastable arrays): Box-Muller with a 96-bit radius uniform.

    ``u = (w0 2^64 + w1 2^32 + w2 + 1/2) 2^-96`` is never 0, so the radius ``sqrt(-2 ln u)`` reaches
    ``sqrt(194 ln 2) = 11.596`` standard deviations; ``jax.random.normal`` in float32 (``sqrt(2) erfinv`` of a
    23-bit uniform) stopped at 5.22, and a neighbour alone on a gradient coordinate was revealed whenever
    its shift carried the noise past that edge (:mod:`dpaudit.accounting.noise_tail`). The angle comes from
    ``w3``: a quarter turn from its top 2 bits, an offset in (-pi/4, pi/4) from the other 30, as the torch
    trainers' C sampler forms it (``trainers/torch_common/philox_normal.c``); the second normal is the first
    one of ``w3 - 2^30`` (a quarter turn back: cos(t - pi/2) = sin t), bit for bit.

    Float32 arithmetic, without enabling x64: u is formed from the smallest term up, and a term only
    matters when the words before it are 0, so the float32 sum keeps u's whole dynamic range (down to
    2^-97, a normal float32) at 24-bit relative precision; tests/trainers/jax_bert/test_wide_normal.py feeds the
    extreme words through this function and tests its far tail (w0 = 0) for the exact law.
    """
    w0, w1, w2, w3 = (words[i] for i in range(PAIR_WORDS))
    f32 = jnp.float32
    u = (w2.astype(f32) + f32(0.5)) * f32(2.0**-96) + w1.astype(f32) * f32(2.0**-64)
    u = u + w0.astype(f32) * f32(2.0**-32)
    radius = jnp.sqrt(f32(-2.0) * jnp.log(u))
    offset = ((w3 & jnp.uint32(0x3FFFFFFF)).astype(f32) + f32(0.5)) * f32(2.0**-30) - f32(0.5)
    angle = offset * f32(math.pi / 2)
    cos, sin = jnp.cos(angle), jnp.sin(angle)
    odd = ((w3 >> 30) & jnp.uint32(1)) == 1  # an odd quarter turn maps (cos, sin) to (-sin, cos)
    flip = jnp.where((w3 >> 31) == 1, f32(-1.0), f32(1.0))  # two quarter turns negate both
    return radius * flip * jnp.where(odd, -sin, cos), radius * flip * jnp.where(odd, cos, sin)


def wide_normal(key: jax.Array, shape: Sequence[int]) -> jax.Array:
    """Standard normal float32 noise of ``shape`` from ``key``: pair i of :func:`wide_normal_pairs` on the words
    ``jax.random.bits(key, (ceil(n / 2), 4), uint32)[i]`` gives numbers 2i and 2i + 1 (the last one dropped when
    n is odd). Number j depends on the key and j only (its words' counters are 4 (j // 2) .. 4 (j // 2) + 3), never
    on n. Jittable, no host sync.

    Both normals of a pair are written as the first output of the pair's words, the second with ``w3 - 2^30``:
    one elementwise computation over (pairs, 2), which XLA's CPU backend vectorizes; a concatenation of the two
    outputs fused the random-bit hashing into a concatenate loop that ran ~10x slower than the parts.
    """
    n = math.prod(shape)
    half = (n + 1) // 2
    words = jax.random.bits(key, (half, 1, PAIR_WORDS), jnp.uint32)
    quarter = jax.lax.broadcasted_iota(jnp.uint32, (half, 2), 1) * jnp.uint32(1 << 30)
    first, _ = wide_normal_pairs((words[..., 0], words[..., 1], words[..., 2], words[..., 3] - quarter))
    return first.reshape(-1)[:n].reshape(shape)


def _gaussian_like(key: jax.Array, tree: PyTree) -> PyTree:
    """Standard normal noise with the structure of ``tree``: ONE :func:`wide_normal` draw of all its numbers, the
    leaves in flattening order (one draw for the ~40 leaves of a BERT, where a draw per leaf paid a fusion and
    its start-up per leaf). A leaf's numbers depend on the key and the leaves before it only, so appending a leaf
    (the white-box audit block, last) leaves every other leaf's noise as a run without it draws it."""
    return _split_like(wide_normal(key, (_tree_size(tree),)), tree)


def _tree_size(tree: PyTree) -> int:
    """How many numbers ``tree`` holds (the length of its noise draw)."""
    return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def _split_like(flat: jax.Array, tree: PyTree) -> PyTree:
    """``flat`` cut into the leaves of ``tree`` (same shapes, flattening order): :func:`_gaussian_like`'s layout."""
    leaves, treedef = jax.tree.flatten(tree)
    sizes = [math.prod(x.shape) for x in leaves]
    offsets = [0, *itertools.accumulate(sizes)]
    return jax.tree.unflatten(treedef, [flat[a:b].reshape(x.shape) for a, b, x in zip(offsets, offsets[1:], leaves)])


def _apply(
    optimizer: optax.GradientTransformation, params: PyTree, opt_state: optax.OptState, grads: PyTree
) -> tuple[PyTree, optax.OptState]:
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def _stats_metrics(stats: ChunkStats) -> dict[str, jax.Array]:
    n = jnp.maximum(stats.batch_size, 1.0)
    return dict(
        loss=stats.loss_sum / n,
        n_correct=stats.n_correct,
        n_predictions=stats.n_predictions,
        batch_size=stats.batch_size,
        clip_fraction=stats.n_clipped / n,
    )


class AuditRows(NamedTuple):
    """One chunk's audit slots (white-box gradient canaries, Nasr et al. 2023), aligned with its mask.

    Each array is ``[S, m]`` like the chunk's mask. A slot that holds a sampled audit row has
    ``mask`` 1, its canary's ``gain`` and block ``coordinate``; every other slot (a real row or padding)
    has mask 0, so it contributes nothing, exactly as a padding slot contributes nothing to the real sum.
    """

    gain: Any  # [S, m] float32: the audit row's gradient is gain * e_coordinate on the audit block
    coordinate: Any  # [S, m] int32: its block coordinate (0 where mask is 0)
    mask: Any  # [S, m] float32: 1 where the slot holds a sampled audit row


class AuditBlock(NamedTuple):
    """The audit block: trained scalars beside the model, with their own state of the same optimizer.

    The optimizer (:mod:`.optimizer`: Adam, decoupled weight decay, the step-count schedule) acts leaf by
    leaf, so updating the block with its own state of the same transformation is the update it would get
    as one more leaf of the parameters, while the model's parameters and optimizer state keep exactly
    their structure (checkpoints, export and resume never see the block).
    """

    values: jax.Array  # [size] float32
    opt_state: optax.OptState


def dirac_norms(gain: jax.Array) -> jax.Array:
    """The L2 norm of each Dirac gradient ``gain * e_c``: the engines' ``sqrt`` of the float32 sum of
    squares (:func:`per_example_global_norms`) over its one nonzero entry (the zeros add exactly 0)."""
    return jnp.sqrt(jnp.square(gain.astype(jnp.float32)))


def audit_clipped_sum(block_size: int, clip_factors_of: Callable[[jax.Array], jax.Array], rows: AuditRows) -> jax.Array:
    """The audit block's clipped sum over one chunk's audit slots, vectorized (no loop over rows).

    Audit row r's gradient is ``gain[r] * e_{coordinate[r]}`` on the block and zero on the model
    (Nasr et al. 2023, Dirac canaries); it is clipped by the engine's own rule ``clip_factors_of``
    (the engine's ``clipped_sum.clip_factors``), weighted by its slot's mask as the engines weight real
    rows (``weights = mask * factors``), and scatter-added onto its coordinate: a canary above the clip
    norm moves its coordinate by exactly ``C`` (up to float32 rounding of ``gain * (C / |gain|)``).
    """
    gain = jnp.asarray(rows.gain, jnp.float32).reshape(-1)
    mask = jnp.asarray(rows.mask, jnp.float32).reshape(-1)
    weights = mask * clip_factors_of(dirac_norms(gain))
    coordinate = jnp.asarray(rows.coordinate, jnp.int32).reshape(-1)
    return jnp.zeros((block_size,), jnp.float32).at[coordinate].add(weights * gain)


def _add_noise(acc: PyTree, draw: jax.Array, noise_std: jax.Array) -> tuple[PyTree, PyTree]:
    """``(acc + noise_std * z, z)`` with ``z`` the step's one noise draw (``draw``, flat: :func:`wide_normal` of
    :func:`_tree_size` numbers) cut into ``acc``'s leaves, as :func:`_gaussian_like` cuts it."""
    if draw.shape != (_tree_size(acc),):  # static shapes: checked once, when the finish is traced
        raise ValueError(f"the noise draw holds {draw.shape} numbers, the clipped sum {_tree_size(acc)}.")
    z = _split_like(draw, acc)
    noisy = jax.tree.map(lambda s, n: s + noise_std * n, acc, z)
    return noisy, z


def _dp_metrics(acc: PyTree, z: PyTree, noise_std: jax.Array, stats: ChunkStats) -> StepMetrics:
    """The DP step's telemetry: the clipped sum's and the noise's norms, their ratio, the chunk stats."""
    sum_norm = _global_norm(acc)
    noise_norm = noise_std * _global_norm(z)
    return StepMetrics(
        clipped_sum_norm=sum_norm,
        noise_norm=noise_norm,
        grad_snr=jnp.where(noise_norm > 0, sum_norm / jnp.maximum(noise_norm, 1e-30), jnp.inf),
        **_stats_metrics(stats),
    )


class _Engine:
    """The chunk loop shared by the DP and non-private steps: accumulate on device, then finish.

    With ``audit_finish`` (the DP step) it also runs the white-box audit step (:meth:`audit_step`),
    whose jitted functions compile on its first call only: a run without canaries compiles and runs
    exactly the functions it ran before.
    """

    def __init__(
        self,
        sum_fn: Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, ChunkStats]],
        finish: Callable[..., tuple[PyTree, optax.OptState, StepMetrics]],
        mesh: Mesh | None,
        donate_state: bool,
        sensitivity: float | None,
        audit_finish: Callable[..., Any] | None = None,
        clip_norm: float | None = None,
    ) -> None:
        self._mesh = mesh
        # C reaches the jitted accumulation as an argument (a float32 scalar), not as a constant compiled into
        # it: steps that differ in C only (a sweep, the tests' clipping regimes) share one compiled program.
        self._clip_args: tuple[np.float32, ...] = () if clip_norm is None else (np.float32(clip_norm),)
        #: L2 sensitivity of the summed gradient under add/remove of one example (None: not private).
        self.sensitivity = sensitivity
        clip_factors_of = getattr(sum_fn, "clip_factors", None)  # read before shard_over_data wraps it
        if mesh is not None:
            sum_fn = parallel.shard_over_data(sum_fn, mesh)
            rep = parallel.replicated(mesh)
            self._zeros = jax.jit(zeros_f32, out_shardings=rep)
            self.zero_stats = jax.jit(zero_stats, out_shardings=rep)
        else:
            self._zeros = jax.jit(zeros_f32)
            self.zero_stats = jax.jit(zero_stats)

        def accumulate(params, acc, stats, batch, mask, *clip_args):
            s, st = sum_fn(params, batch, mask, *clip_args)
            return tree_add(acc, s), tree_add(stats, st)

        self._accumulate = jax.jit(accumulate, donate_argnums=(1, 2))
        # The step's noise is drawn by a program of its own, and the finish takes the draw as an input: fused into
        # the finish, the draw's hashing and Box-Muller code was copied into each leaf's update, and the tiny
        # model's DP finish compiled in 5.4-6.0 s instead of 1.9-2.0 s plus 0.3 s for the draw (a tiny DP run:
        # 20.7-21.0 s of CPU instead of 16.6-16.9 s). The numbers drawn are the same; at the small preset (17M
        # parameters) the draw and the finish run in 0.79-1.00x the fused finish's time on the 2-core machine.
        self._draw = None
        if sensitivity is not None:
            placed = {} if mesh is None else {"out_shardings": parallel.replicated(mesh)}
            self._draw = jax.jit(wide_normal, static_argnums=1, **placed)
        # The new params / optimizer state can reuse the old ones' buffers (not the gradient sum's).
        self._finish = jax.jit(finish, donate_argnums=(0, 1) if donate_state else ())
        self._audit_finish = None
        if audit_finish is not None and clip_factors_of is not None:

            def accumulate_audit(block_acc: jax.Array, rows: AuditRows) -> jax.Array:
                return block_acc + audit_clipped_sum(block_acc.shape[0], clip_factors_of, rows)

            self._accumulate_audit = jax.jit(accumulate_audit, donate_argnums=(0,))
            self._audit_finish = jax.jit(audit_finish, donate_argnums=(0, 1, 2) if donate_state else ())

    @property
    def hosts_audit(self) -> bool:
        """Whether this step can host white-box gradient canaries (a DP step whose clipped-sum function
        carries its clipping rule)."""
        return self._audit_finish is not None

    def noise_std(self, noise_multiplier: Any) -> float:
        """The std of the noise this step adds for ``noise_multiplier``: multiplier * sensitivity."""
        return _noise_std(noise_multiplier, self.sensitivity)

    def _noise_draw(self, key: jax.Array, tree: PyTree) -> jax.Array | None:
        """The step's one flat noise draw for the numbers of ``tree`` (:func:`_gaussian_like`'s), None when the
        step adds no noise (non-private)."""
        if self._draw is None:
            return None
        return self._draw(key, (_tree_size(tree),))

    def _place(self, *trees: Any) -> tuple[Any, ...]:
        """The step's state as global replicated arrays on the mesh (unchanged without one)."""
        if self._mesh is None:
            return trees
        rep = parallel.replicated(self._mesh)
        return tuple(jax.device_put(tree, rep) for tree in trees)

    def _clipped_sums(self, params: PyTree, chunks: Sequence[Chunk]) -> tuple[PyTree, ChunkStats]:
        """The real rows' clipped sum and stats over every chunk (the jitted ``_accumulate``)."""
        if not chunks:
            raise ValueError("chunks must hold at least one (batch, mask) chunk.")
        acc, stats = self._zeros(params), self.zero_stats()
        for batch, mask in chunks:
            if self._mesh is not None:
                batch, mask = parallel.place_chunk(self._mesh, batch, mask)
            acc, stats = self._accumulate(params, acc, stats, batch, mask, *self._clip_args)
        return acc, stats

    def __call__(
        self,
        params: PyTree,
        opt_state: optax.OptState,
        chunks: Sequence[Chunk],
        key: jax.Array,
        noise_multiplier: Any,
        expected_batch_size: Any,
    ) -> tuple[PyTree, optax.OptState, StepMetrics]:
        params, opt_state, key = self._place(params, opt_state, key)
        acc, stats = self._clipped_sums(params, chunks)
        return self._finish(
            params,
            opt_state,
            acc,
            stats,
            self._noise_draw(key, params),
            jnp.asarray(self.noise_std(noise_multiplier), jnp.float32),
            jnp.asarray(expected_batch_size, jnp.float32),
        )

    def audit_step(
        self,
        params: PyTree,
        opt_state: optax.OptState,
        block: AuditBlock,
        chunks: Sequence[Chunk],
        audit_rows: Sequence[AuditRows],
        key: jax.Array,
        noise_multiplier: Any,
        expected_batch_size: Any,
    ) -> tuple[PyTree, optax.OptState, AuditBlock, StepMetrics, jax.Array]:
        """The step with white-box gradient canaries (Nasr et al. 2023) hosted on ``block``.

        ``audit_rows`` holds the step's sampled audit rows in fixed-shape pieces (they never take a slot
        of ``chunks``, which hold the real rows). The real rows' clipped sum is the same jitted
        accumulation as :meth:`__call__`'s; the block's clipped sum is accumulated piece by piece beside it;
        then one finish noises model and block with the trainer's one noise draw (block last), divides
        by the expected batch size and applies the optimizer to both. Returns ``(params, opt_state,
        block, metrics, noisy_block)``, ``noisy_block`` the block's clipped sum plus its noise, before
        the division and the optimizer (what the audit observes). Nothing is synced to the host.
        """
        if self._audit_finish is None:
            raise ValueError(
                "this step hosts no gradient canaries (non-private, or its clipped sum carries no clipping rule)."
            )
        params, opt_state, block, key = self._place(params, opt_state, block, key)
        acc, stats = self._clipped_sums(params, chunks)
        block_acc = self._zeros(block.values)
        for rows in audit_rows:
            if self._mesh is not None:
                rows = parallel.replicate(self._mesh, rows)
            block_acc = self._accumulate_audit(block_acc, rows)
        return self._audit_finish(
            params,
            opt_state,
            block,
            acc,
            block_acc,
            stats,
            self._noise_draw(key, (params, block.values)),
            jnp.asarray(self.noise_std(noise_multiplier), jnp.float32),
            jnp.asarray(expected_batch_size, jnp.float32),
        )


def _noise_std(noise_multiplier: Any, sensitivity: float | None) -> float:
    """``noise_multiplier * sensitivity`` as a host float64 product (cast to float32 once, on the way
    to the device); 0 when the multiplier is 0 (also for ``C = inf``, where the product is NaN)."""
    multiplier = float(noise_multiplier)
    if multiplier == 0.0 or sensitivity is None:
        return 0.0
    return multiplier * float(sensitivity)


def make_dp_train_step(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    *,
    clip_norm: float,
    mesh: Mesh | None = None,
    donate_state: bool = False,
    vmap_size: int | None = DEFAULT_VMAP_SIZE,
    clipped_sum_fn: ClippedSumFn | None = None,
    frozen: frozenset[Key] = frozenset(),
) -> StepFn:
    """Returns ``step(params, opt_state, chunks, key, noise_multiplier, expected_batch_size)``.

    ``chunks`` is a list of ``(batch [S, m, ...], mask [S, m])`` (from ``pack_microsteps``); their
    clipped sums are added on device, then one jitted finish adds ``N(0, noise_std^2 I)`` with
    ``noise_std = noise_multiplier * step.sensitivity`` (``step.sensitivity = C``: the step owns it)
    once, divides by ``expected_batch_size`` and applies ``optimizer``.
    Returns ``(params, opt_state, StepMetrics)``. With ``mesh`` (axis ``"data"``) the ``m`` axis is
    sharded over its devices and the clipped sums are psum-ed before the noise is added (once).
    With ``donate_state=True`` the ``params`` and ``opt_state`` buffers passed in are donated to
    the update (saves memory; the caller must not use them after the call). ``vmap_size`` is the
    performance knob of :func:`make_clipped_sum_fn` (examples per vmap(grad) call).
    ``clipped_sum_fn`` replaces the generic vmap clipped sum by an equivalent one (e.g. ghost norms,
    :mod:`trainers.jax_bert.ghost_clipping`); its ``sensitivity`` must equal ``clip_norm``, and it takes ``C`` as
    its optional fourth argument (the step passes ``clip_norm`` so, as a float32 scalar).

    ``frozen`` (paths of parameters, :data:`Key`) are not trained: their per-example gradients are 0 before the
    norm is taken (so the clipped sum of the trained parameters alone has sensitivity ``C``, as before), the
    noise on them is dropped and the optimizer's result for them is discarded (bit-identical after any number of
    steps). The noise on the trained parameters is the draw an unfrozen step makes for them, and the mechanism the
    accountant composes (one Gaussian of std ``sigma * C`` on a sum of sensitivity ``C``) is unchanged.
    ``clipped_sum_fn`` must then carry the same ``frozen`` set (its ``frozen`` attribute).
    """
    clip_norm = check_clip_norm(clip_norm)
    frozen = frozenset(frozen)
    if clipped_sum_fn is None:
        clipped_sum = make_clipped_sum_fn(freeze_loss(loss_fn, frozen), clip_norm=clip_norm, vmap_size=vmap_size)
    else:
        clipped_sum = clipped_sum_fn
        if getattr(clipped_sum, "sensitivity", None) != clip_norm:
            raise ValueError(
                f"clipped_sum_fn.sensitivity must equal clip_norm={clip_norm}, got {getattr(clipped_sum, 'sensitivity', None)}."
            )
        if frozenset(getattr(clipped_sum, "frozen", frozenset())) != frozen:
            raise ValueError("clipped_sum_fn.frozen must be the step's frozen parameters.")

    def finish(params, opt_state, acc, stats, draw, noise_std, expected_batch_size):
        noisy, z = _add_noise(acc, draw, noise_std)
        noisy, z = zero_frozen(noisy, frozen), zero_frozen(z, frozen)
        grads = jax.tree.map(lambda g: g / expected_batch_size, noisy)
        new_params, new_opt_state = _apply(optimizer, params, opt_state, grads)
        return keep_frozen(new_params, params, frozen), new_opt_state, _dp_metrics(acc, z, noise_std, stats)

    def audit_finish(params, opt_state, block, acc, block_acc, stats, draw, noise_std, expected_batch_size):
        # The block is one more trained leaf, the last: the one noise draw covers (model, block), and as a
        # number of the draw depends on its position only (_gaussian_like), the model's noise is the one a
        # canary-free run draws.
        noisy, z = _add_noise((acc, block_acc), draw, noise_std)
        noisy, z = (zero_frozen(noisy[0], frozen), noisy[1]), (zero_frozen(z[0], frozen), z[1])
        grads, block_grads = jax.tree.map(lambda g: g / expected_batch_size, noisy)
        new_params, new_opt_state = _apply(optimizer, params, opt_state, grads)
        new_params = keep_frozen(new_params, params, frozen)
        new_values, new_block_state = _apply(optimizer, block.values, block.opt_state, block_grads)
        metrics = _dp_metrics((acc, block_acc), z, noise_std, stats)
        return new_params, new_opt_state, AuditBlock(new_values, new_block_state), metrics, noisy[1]

    return _Engine(
        clipped_sum, finish, mesh, donate_state, float(clipped_sum.sensitivity), audit_finish, clip_norm=clip_norm
    )


def make_nonprivate_train_step(
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    *,
    mesh: Mesh | None = None,
    donate_state: bool = False,
    frozen: frozenset[Key] = frozenset(),
) -> StepFn:
    """Non-private baseline with the same signature: mean gradient over the real examples.

    ``key``, ``noise_multiplier`` and ``expected_batch_size`` are accepted and ignored (its
    ``sensitivity`` is None: nothing bounds it); the gradient sum is
    divided by the realized batch size. ``clipped_sum_norm`` reports the (unclipped) sum's norm.
    ``frozen`` parameters are not trained, as in :func:`make_dp_train_step`.
    """
    frozen = frozenset(frozen)
    grad_sum = _make_grad_sum_fn(freeze_loss(loss_fn, frozen))

    def finish(params, opt_state, acc, stats, draw, noise_std, expected_batch_size):
        del draw, noise_std, expected_batch_size  # draw is None: nothing is drawn
        n = jnp.maximum(stats.batch_size, 1.0)
        grads = jax.tree.map(lambda g: g / n, acc)
        new_params, new_opt_state = _apply(optimizer, params, opt_state, grads)
        new_params = keep_frozen(new_params, params, frozen)
        zero = jnp.zeros((), jnp.float32)
        metrics = StepMetrics(
            clipped_sum_norm=_global_norm(acc),
            noise_norm=zero,
            grad_snr=jnp.asarray(jnp.inf, jnp.float32),
            **_stats_metrics(stats),
        )
        return new_params, new_opt_state, metrics

    return _Engine(grad_sum, finish, mesh, donate_state, None)
