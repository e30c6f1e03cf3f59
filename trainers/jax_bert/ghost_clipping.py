"""Per-example clipping without per-example gradients: ghost norms and book-keeping for BERT.

The vmap recipe (:func:`trainers.jax_bert.dp_step.make_clipped_sum_fn`) materializes each
example's whole gradient. On a CPU that costs ~2.3x a non-private step of BERT-mini. Here one
*batched* backward pass yields, for every parametrized layer, its input ``x`` and the gradient of
the loss with respect to its output ``g`` at every position of every example (Flax ``sow`` and
``perturb``; see :class:`trainers.jax_bert.model.TapedDense`). Because examples do not interact in
BERT, example i's gradient of a dense layer is ``x_i^T g_i``, and

    ||x_i^T g_i||_F^2 = sum_{t,t'} (x_t . x_t') (g_t . g_t')        (ghost norm: two [T, T] Grams)

so every example's norm comes from small Gram matrices, and the clipped sum is one matmul per layer,
``X^T diag(c) G`` (book-keeping). LayerNorm scale/bias and biases have per-example gradients of size
H, computed directly. The tied word embedding W receives ``scatter(ids_i, E_i) + G_i^T Hd_i`` (E the
gradient of the summed embeddings, G of the logits, Hd the decoder inputs), whose squared norm is

    sum_{l,l'} [id_l = id_l'] E_l.E_l' + sum_{p,q} (G_p.G_q)(Hd_p.Hd_q) + 2 sum_{l,p} (E_l.Hd_p) G_p[id_l].

The result equals the vmap oracle (tests check leaf by leaf, with clipping active), so the
sensitivity is unchanged: one example moves the clipped sum by at most ``C``.

References:
  Goodfellow 2015, "Efficient Per-Example Gradient Computations".
  Li, Tramer, Liang, Hashimoto 2022, "Large Language Models Can Be Strong Differentially Private
  Learners" (ghost clipping).
  Bu, Wang, Zha, Karypis 2023, "Differentially Private Optimization on Large Model at Small Cost"
  (book-keeping).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import traverse_util

from dpaudit.trainers.jax_bert import dp_step
from dpaudit.trainers.jax_bert.model import FlaxBertForMaskedLM, masked_lm_terms

PyTree = Any
Key = tuple[str, ...]
_HIGHEST = jax.lax.Precision.HIGHEST

_EMBEDDINGS: Key = ("bert", "embeddings")
_HEAD: Key = ("cls", "predictions")

#: The three embedding tables (``--freeze embeddings``). The word table is tied to the MLM decoder, so freezing it
#: freezes the output projection too (the decoder's bias stays trained).
EMBEDDING_TABLES: frozenset[Key] = frozenset(
    _EMBEDDINGS + (table, "embedding") for table in ("word_embeddings", "position_embeddings", "token_type_embeddings")
)


def _einsum(spec: str, *operands: jax.Array) -> jax.Array:
    return jnp.einsum(spec, *operands, precision=_HIGHEST)


def _kernel_sq_norms(x: jax.Array, g: jax.Array, x_grams: dict[int, jax.Array], x_id: int) -> jax.Array:
    """||x_i^T g_i||_F^2 per example; x [m, T, d_in], g [m, T, d_out].

    ``x_grams`` caches each input's [m, T, T] Gram under ``x_id``, so layers that read the same
    input (query, key and value) compute it once.
    """
    t, d_in, d_out = x.shape[1], x.shape[2], g.shape[2]
    if t * t <= d_in * d_out:  # ghost norm: two [T, T] Grams
        if x_id not in x_grams:
            x_grams[x_id] = _einsum("mtd,msd->mts", x, x)
        return jnp.sum(x_grams[x_id] * _einsum("mte,mse->mts", g, g), axis=(1, 2))
    # the per-example gradient is the smaller object
    return jnp.sum(jnp.square(_einsum("mtd,mte->mde", x, g)), axis=(1, 2))


def _same_id_gram_sq_norms(ids: jax.Array, e: jax.Array) -> jax.Array:
    """||scatter(ids_i, e_i)||^2 per example: rows with equal ids add up. ids [m, T], e [m, T, H]."""
    same = (ids[:, :, None] == ids[:, None, :]).astype(jnp.float32)
    return jnp.sum(same * _einsum("mtd,msd->mts", e, e), axis=(1, 2))


def _flat3(a: jax.Array, m: int) -> jax.Array:
    return a.reshape(m, -1, a.shape[-1])


def _sq(a: jax.Array) -> jax.Array:
    """Squared norm per example of [m, ...]."""
    return jnp.sum(jnp.square(a), axis=tuple(range(1, a.ndim)))


class _Tape:
    """One micro-step's recorded inputs and output gradients, keyed by module path.

    ``dense`` lists the TapedDense modules (those that sowed an input), ``layer_norms`` the
    TapedLayerNorm modules; ``input_id`` identifies inputs that several layers share (query, key
    and value all read the same hidden states), so that their [T, T] Gram is computed once.
    """

    def __init__(self, tape: PyTree, grads: PyTree, batch: PyTree, m: int) -> None:
        self.inputs = traverse_util.flatten_dict(tape)
        self.grads = traverse_util.flatten_dict(grads)
        self.batch = batch
        self.m = m
        self.dense: list[Key] = []
        self.layer_norms: list[Key] = []
        for key in self.grads:
            module, kind = key[:-1], key[-1]
            if kind == "outputs":
                (self.dense if module + ("inputs",) in self.inputs else self.layer_norms).append(module)

    def taped(self, module: Key, name: str) -> jax.Array:
        (value,) = self.inputs[module + (name,)]
        return _flat3(value, self.m)

    def input_id(self, module: Key) -> int:
        (value,) = self.inputs[module + ("inputs",)]
        return id(value)

    def grad(self, module: Key, name: str) -> jax.Array:
        return _flat3(self.grads[module + (name,)], self.m)


def _ghost_terms(
    tape: _Tape, params_flat: dict[Key, jax.Array], tables_frozen: bool = False
) -> tuple[jax.Array, dict[Key, jax.Array]]:
    """Squared norm of each example's whole gradient, and the per-example gradients of every small
    parameter (biases, LayerNorm scales: [m, size] each), which the weighted sums reuse.

    ``tables_frozen``: the embedding tables (:data:`EMBEDDING_TABLES`) are not trained, so their terms are left out
    of the norm (their gradient is 0, as ``stop_gradient`` makes it in the vmap engine).
    Raises if some parameter is not covered (a module added to the model without ghost support).
    """
    m = tape.m
    small: dict[Key, jax.Array] = {}
    sq = jnp.zeros((m,), jnp.float32)
    grams: dict[int, jax.Array] = {}
    for module in tape.dense:
        x, g = tape.taped(module, "inputs"), tape.grad(module, "outputs")
        sq = sq + _kernel_sq_norms(x, g, grams, tape.input_id(module))
        small[module + ("bias",)] = jnp.sum(g, axis=1)
    for module in tape.layer_norms:  # d scale = sum_t g * x_hat, d bias = sum_t g
        g = tape.grad(module, "outputs")
        small[module + ("scale",)] = jnp.sum(g * tape.taped(module, "normalized"), axis=1)
        small[module + ("bias",)] = jnp.sum(g, axis=1)
    logits_grad = tape.grad(_HEAD, "logits")  # [m, P, V]
    small[_HEAD + ("bias",)] = jnp.sum(logits_grad, axis=1)
    for value in small.values():
        sq = sq + _sq(value)
    if tables_frozen:
        return _checked(jnp.maximum(sq, 0.0), small, tape, params_flat)
    e = tape.grad(_EMBEDDINGS, "embedding_sum")  # [m, L, H]
    decoder_in = tape.taped(_HEAD, "decoder_inputs")  # [m, P, H]
    ids = tape.batch["input_ids"]
    # Position table: example i writes e_i[t] to row t (distinct rows). Token types: scatter by id.
    sq = sq + _sq(e) + _same_id_gram_sq_norms(_token_types(tape.batch), e)
    # Tied word table: input rows (scatter of e by token id) plus the decoder's G^T Hd, and their cross term.
    g_at_ids = jnp.take_along_axis(logits_grad, ids[:, None, :].astype(jnp.int32), axis=2)  # [m, P, L]
    sq = sq + _same_id_gram_sq_norms(ids, e)
    sq = sq + jnp.sum(
        _einsum("mpv,mqv->mpq", logits_grad, logits_grad) * _einsum("mpd,mqd->mpq", decoder_in, decoder_in), axis=(1, 2)
    )
    sq = sq + 2.0 * jnp.sum(_einsum("mld,mpd->mpl", e, decoder_in) * g_at_ids, axis=(1, 2))
    return _checked(jnp.maximum(sq, 0.0), small, tape, params_flat)


def _checked(
    sq: jax.Array, small: dict[Key, jax.Array], tape: _Tape, params_flat: dict[Key, jax.Array]
) -> tuple[jax.Array, dict[Key, jax.Array]]:
    """``(sq, small)`` once every parameter is known to be covered (trained, or a frozen embedding table)."""
    covered = set(small) | {module + ("kernel",) for module in tape.dense} | EMBEDDING_TABLES
    missing = set(params_flat) - covered
    if missing:
        raise ValueError(f"ghost clipping does not cover parameters {sorted('/'.join(k) for k in missing)}.")
    return sq, small


def _token_types(batch: PyTree) -> jax.Array:
    types = batch.get("token_type_ids")
    return jnp.zeros_like(batch["input_ids"]) if types is None else types


def _weighted_sums(
    tape: _Tape,
    weights: jax.Array,
    small: dict[Key, jax.Array],
    params_flat: dict[Key, jax.Array],
    tables_frozen: bool = False,
) -> dict[Key, jax.Array]:
    """sum_i weights_i * grad_i for every parameter, without forming any per-example gradient.

    The weight of example i is applied to whichever factor of its gradient is smallest (the
    narrower of a dense layer's input and output gradient; the decoder's inputs rather than its
    [P, vocabulary] logit gradients; the small per-example gradients directly). Frozen embedding tables
    (``tables_frozen``) get zeros.
    """
    out = {key: _einsum("m,mk->k", weights, value) for key, value in small.items()}
    w = weights[:, None, None]
    for module in tape.dense:
        x, g = tape.taped(module, "inputs"), tape.grad(module, "outputs")
        if x.shape[2] <= g.shape[2]:
            x = x * w
        else:
            g = g * w
        out[module + ("kernel",)] = _einsum("mtd,mte->de", x, g)
    if tables_frozen:
        return out | {key: jnp.zeros(params_flat[key].shape, jnp.float32) for key in EMBEDDING_TABLES}
    e = tape.grad(_EMBEDDINGS, "embedding_sum") * w
    hidden = e.shape[-1]
    ids, types = tape.batch["input_ids"], _token_types(tape.batch)
    word_key = _EMBEDDINGS + ("word_embeddings", "embedding")
    pos_key = _EMBEDDINGS + ("position_embeddings", "embedding")
    type_key = _EMBEDDINGS + ("token_type_embeddings", "embedding")
    word = jnp.zeros(params_flat[word_key].shape, jnp.float32).at[ids.reshape(-1)].add(e.reshape(-1, hidden))
    out[word_key] = word + _einsum("mpv,mpd->vd", tape.grad(_HEAD, "logits"), tape.taped(_HEAD, "decoder_inputs") * w)
    seq_len = e.shape[1]
    out[pos_key] = jnp.zeros(params_flat[pos_key].shape, jnp.float32).at[:seq_len].add(jnp.sum(e, axis=0))
    out[type_key] = jnp.zeros(params_flat[type_key].shape, jnp.float32).at[types.reshape(-1)].add(e.reshape(-1, hidden))
    return out


def make_ghost_clipped_sum_fn(
    model: FlaxBertForMaskedLM, *, clip_norm: float, frozen: frozenset[Key] = frozenset()
) -> dp_step.ClippedSumFn:
    """Drop-in for ``make_clipped_sum_fn(example_mlm_loss)`` on a BERT masked LM (deterministic, no
    dropout): same signature (``C`` its optional traced fourth argument), same result, same ``sensitivity``; no
    per-example gradient is formed.

    Each micro-step runs one batched forward and one backward pass to the layer outputs, computes
    per-example norms from Gram matrices, and adds the clipped sum with one matmul per layer.
    ``frozen``: no parameter, or exactly :data:`EMBEDDING_TABLES` (the result then equals the vmap engine's with
    ``dp_step.freeze_loss``: the tables' gradients are 0 and out of every norm).
    """
    frozen = frozenset(frozen)
    if frozen not in (frozenset(), EMBEDDING_TABLES):
        raise ValueError("the ghost engine freezes no parameter or exactly the embedding tables; use the vmap engine.")
    tables_frozen = bool(frozen)
    default_clip_norm = dp_step.check_clip_norm(clip_norm)
    factors_of = dp_step.clip_rule(default_clip_norm)

    def clipped_sum(
        params: PyTree, batch: PyTree, mask: jax.Array, clip_norm: jax.Array | None = None
    ) -> tuple[PyTree, dp_step.ChunkStats]:
        dp_step.check_chunk(batch, mask)
        mask = jnp.asarray(mask, jnp.float32)
        c = default_clip_norm if clip_norm is None else clip_norm
        params_flat = traverse_util.flatten_dict(params)

        def forward(step_batch: PyTree, perturbations: PyTree | None, mutable: list[str]):
            variables = (
                {"params": params} if perturbations is None else {"params": params, "perturbations": perturbations}
            )
            return model.apply(
                variables,
                step_batch["input_ids"],
                step_batch["attention_mask"],
                step_batch.get("token_type_ids"),
                step_batch["masked_positions"],
                mutable=mutable,
            )

        def micro_step(carry, xs):
            acc, stats = carry
            step_batch, step_mask = xs
            m = step_mask.shape[0]
            shapes = jax.eval_shape(lambda: forward(step_batch, None, ["perturbations"])[1]["perturbations"])
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

            def summed_loss(perturbations):
                logits, state = forward(step_batch, perturbations, ["tape"])
                loss, n_correct, n_predictions = masked_lm_terms(
                    logits, step_batch["masked_labels"], step_batch["masked_weights"]
                )
                aux = {"n_correct": n_correct, "n_predictions": n_predictions}
                return jnp.sum(step_mask * loss), (loss, aux, state["tape"])

            grads, (loss, aux, tape) = jax.grad(summed_loss, has_aux=True)(zeros)
            recorded = _Tape(tape, grads, step_batch, m)
            sq_norms, small = _ghost_terms(recorded, params_flat, tables_frozen)
            norms = jnp.sqrt(sq_norms)
            weights = step_mask * dp_step.clip_factors(norms, c)
            sums = traverse_util.unflatten_dict(_weighted_sums(recorded, weights, small, params_flat, tables_frozen))
            acc = dp_step.tree_add(acc, sums)
            n_clipped = jnp.sum(step_mask * (norms > c))
            stats = dp_step.tree_add(stats, dp_step.step_stats(loss, aux, step_mask, n_clipped))
            return acc, stats

        (acc, stats), _ = jax.lax.scan(
            dp_step.skip_if_empty(micro_step), (dp_step.zeros_f32(params), dp_step.zero_stats()), (batch, mask)
        )
        return acc, stats

    clipped_sum.sensitivity = default_clip_norm  # type: ignore[attr-defined]
    clipped_sum.clip_factors = factors_of  # type: ignore[attr-defined]  (the audit's clipping rule too)
    clipped_sum.frozen = frozen  # type: ignore[attr-defined]
    return clipped_sum
