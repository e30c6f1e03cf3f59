"""A Flax BERT masked-LM, architecturally identical to ``transformers.BertForMaskedLM``.

transformers 5 ships no Flax models, so the module is written here. It follows
``transformers/models/bert/modeling_bert.py`` exactly: absolute position embeddings, token-type
embeddings (zeros when not given), post-LayerNorm encoder layers, exact (erf) GELU, an additive
large-negative attention mask over padded keys, and the MLM head (dense + GELU + LayerNorm
transform, then a decoder tied to the word embeddings plus an output-only bias).

The parameter tree mirrors the Hugging Face ``state_dict`` one to one, so export is a rename:
``bert/encoder/layer/0/attention/self/query/kernel`` is ``bert.encoder.layer.0.attention.self.query.weight``
transposed; ``embedding`` and LayerNorm ``scale`` are ``weight``; ``cls/predictions/bias`` is
``cls.predictions.bias``. There is no separate decoder matrix (it is the word embedding).

Speed: when ``masked_positions`` are given, the hidden states are gathered at those positions first
and the MLM head (transform and the [hidden x vocab] decoder) runs only there. On BERT-mini with a
30K vocabulary the full-vocabulary layer over every position was 70% of a training step.

All computation is float32.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from dpaudit.training.presets import PRESETS  # noqa: F401  (re-exported: the table lives in the core)

_HF_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "hidden_act",
    "pad_token_id",
    "initializer_range",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
)

#: Activation names as in ``transformers.activations.ACT2FN`` that this module implements.
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")


@dataclass(frozen=True, kw_only=True)
class BertConfig:
    """The architecture of a BERT masked-LM, with the field names (and defaults) of ``transformers.BertConfig``.

    Attributes:
        vocab_size: number of tokens (the tokenizer's vocabulary size).
        hidden_size: width of every layer; a multiple of ``num_attention_heads``.
        num_hidden_layers: encoder layers.
        num_attention_heads: attention heads per layer.
        intermediate_size: width of the feed-forward layer.
        max_position_embeddings: longest sequence the model accepts.
        type_vocab_size: number of token types (segments).
        layer_norm_eps: LayerNorm epsilon (HF default 1e-12).
        hidden_act: ``"gelu"`` is the exact erf GELU, as in HF; ``"gelu_new"`` /
            ``"gelu_pytorch_tanh"`` the tanh approximation; or ``"relu"``.
        pad_token_id: id of ``[PAD]``; its embedding row starts at zero, as in HF.
        initializer_range: std of the normal initializer of every matrix.
        hidden_dropout_prob: dropout after embeddings and each residual branch (training only).
        attention_probs_dropout_prob: dropout on attention probabilities (training only).
    """

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"
    pad_token_id: int = 0
    initializer_range: float = 0.02
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "type_vocab_size",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size must be a multiple of num_attention_heads ({self.num_attention_heads}), got {self.hidden_size}."
            )
        if (
            isinstance(self.pad_token_id, bool)
            or not isinstance(self.pad_token_id, int)
            or not 0 <= self.pad_token_id < self.vocab_size
        ):
            raise ValueError(
                f"pad_token_id must be an integer in [0, vocab_size={self.vocab_size}), got {self.pad_token_id!r}."
            )
        if not self.layer_norm_eps > 0:
            raise ValueError(f"layer_norm_eps must be > 0, got {self.layer_norm_eps}.")
        if not self.initializer_range > 0:
            raise ValueError(f"initializer_range must be > 0, got {self.initializer_range}.")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {value}.")
        if self.hidden_act not in ACTIVATIONS:
            raise ValueError(f"hidden_act must be one of {', '.join(ACTIVATIONS)}, got {self.hidden_act!r}.")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_attention_heads

    def to_hf_dict(self) -> dict[str, Any]:
        """The ``config.json`` content that ``transformers.BertForMaskedLM`` loads (tied decoder)."""
        out: dict[str, Any] = {
            "architectures": ["BertForMaskedLM"],
            "model_type": "bert",
            "tie_word_embeddings": True,
            "is_decoder": False,
            "add_cross_attention": False,
            "dtype": "float32",
        }
        out.update(dataclasses.asdict(self))
        return out

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> BertConfig:
        """Read a Hugging Face BERT ``config.json`` dict; fields this model does not use are ignored.

        Raises:
            ValueError: for a config this module cannot reproduce (another ``model_type``, a decoder,
                untied output embeddings, relative position embeddings) or invalid values.
        """
        model_type = d.get("model_type", "bert")
        if model_type != "bert":
            raise ValueError(f"model_type must be 'bert', got {model_type!r}.")
        if d.get("is_decoder", False) or d.get("add_cross_attention", False):
            raise ValueError("is_decoder and add_cross_attention must be false (an encoder masked-LM), got true.")
        if not d.get("tie_word_embeddings", True):
            raise ValueError("tie_word_embeddings must be true (decoder tied to the word embeddings), got false.")
        position_type = d.get("position_embedding_type", "absolute")
        if position_type != "absolute":
            raise ValueError(f"position_embedding_type must be 'absolute', got {position_type!r}.")
        kwargs = {name: d[name] for name in _HF_FIELDS if name in d}
        if kwargs.get("pad_token_id", 0) is None:
            kwargs["pad_token_id"] = 0
        return cls(**kwargs)


def preset_config(name: str, *, vocab_size: int, max_position_embeddings: int = 128, **overrides: Any) -> BertConfig:
    """The :class:`BertConfig` of a named preset, with the tokenizer's vocabulary size.

    ``overrides`` set any other :class:`BertConfig` field (e.g. ``hidden_dropout_prob=0.0``).
    """
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {name!r}.")
    fields = {**PRESETS[name], "vocab_size": vocab_size, "max_position_embeddings": max_position_embeddings}
    fields.update(overrides)
    return BertConfig(**fields)


# ----------------------------------------------------------------------------------------------
# Modules. Names (``name=...``) are the Hugging Face attribute names; do not rename them.


def _activation(name: str, x: jnp.ndarray) -> jnp.ndarray:
    if name == "gelu":
        return jax.nn.gelu(x, approximate=False)
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return jax.nn.gelu(x, approximate=True)
    return jax.nn.relu(x)


class TapedDense(nn.Module):
    """``nn.Dense`` (same parameters, same numerics) that can record what ghost clipping needs.

    With a mutable ``"tape"`` collection it sows its input; with a ``"perturbations"`` collection it
    adds a zero perturbation to its output, whose gradient is dL/d(output) at every position. Both
    are no-ops in an ordinary ``apply``. Per-example weight-gradient norms then follow from
    input/output-gradient Gram matrices (Li et al. 2022; Bu et al. 2023).
    """

    features: int
    initializer_range: float

    @nn.compact
    def __call__(self, inputs: jnp.ndarray) -> jnp.ndarray:
        kernel = self.param(
            "kernel",
            nn.initializers.normal(stddev=self.initializer_range),
            (inputs.shape[-1], self.features),
            jnp.float32,
        )
        bias = self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32)
        self.sow("tape", "inputs", inputs)
        outputs = jax.lax.dot_general(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ()))) + bias
        return self.perturb("outputs", outputs)


class TapedLayerNorm(nn.Module):
    """LayerNorm with torch's two-pass variance, ``scale``/``bias`` parameters, and the same tape
    hooks as :class:`TapedDense` (it sows the normalized input ``x_hat``)."""

    epsilon: float

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        features = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (features,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (features,), jnp.float32)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        centered = x - mean
        var = jnp.mean(jnp.square(centered), axis=-1, keepdims=True)
        normalized = centered * jax.lax.rsqrt(var + self.epsilon)
        self.sow("tape", "normalized", normalized)
        return self.perturb("outputs", normalized * scale + bias)


def _dense(features: int, config: BertConfig, name: str) -> TapedDense:
    return TapedDense(features, config.initializer_range, name=name)


def _layer_norm(config: BertConfig, name: str) -> TapedLayerNorm:
    # Two-pass variance as torch.nn.LayerNorm (parity to 1e-4).
    return TapedLayerNorm(config.layer_norm_eps, name=name)


def _embed(num: int, config: BertConfig, name: str) -> nn.Embed:
    return nn.Embed(
        num,
        config.hidden_size,
        embedding_init=nn.initializers.normal(stddev=config.initializer_range),
        dtype=jnp.float32,
        param_dtype=jnp.float32,
        name=name,
    )


class BertEmbeddings(nn.Module):
    """Word + token-type + absolute position embeddings, then LayerNorm and dropout."""

    config: BertConfig

    @nn.compact
    def __call__(self, input_ids: jnp.ndarray, token_type_ids: jnp.ndarray, *, deterministic: bool) -> jnp.ndarray:
        cfg = self.config
        seq_len = input_ids.shape[-1]
        words = _embed(cfg.vocab_size, cfg, "word_embeddings")(input_ids)
        types = _embed(cfg.type_vocab_size, cfg, "token_type_embeddings")(token_type_ids)
        positions = _embed(cfg.max_position_embeddings, cfg, "position_embeddings")(
            jnp.arange(seq_len, dtype=jnp.int32)
        )
        # The perturbation's gradient, dL/d(sum of embeddings), is what all three tables receive.
        hidden = _layer_norm(cfg, "LayerNorm")(self.perturb("embedding_sum", words + types + positions))
        return nn.Dropout(cfg.hidden_dropout_prob)(hidden, deterministic=deterministic)


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention; ``bias`` is 0 for real keys, very negative for padding."""

    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, bias: jnp.ndarray, *, deterministic: bool) -> jnp.ndarray:
        cfg = self.config
        heads_shape = (*hidden.shape[:-1], cfg.num_attention_heads, cfg.head_dim)
        query = _dense(cfg.hidden_size, cfg, "query")(hidden).reshape(heads_shape)
        key = _dense(cfg.hidden_size, cfg, "key")(hidden).reshape(heads_shape)
        value = _dense(cfg.hidden_size, cfg, "value")(hidden).reshape(heads_shape)
        scores = jnp.einsum("bqhd,bkhd->bhqk", query, key) * (cfg.head_dim**-0.5) + bias
        probs = jax.nn.softmax(scores, axis=-1)
        probs = nn.Dropout(cfg.attention_probs_dropout_prob)(probs, deterministic=deterministic)
        context = jnp.einsum("bhqk,bkhd->bqhd", probs, value)
        return context.reshape(hidden.shape)


class BertResidualOutput(nn.Module):
    """Projection back to the hidden size, dropout, then the post-LN residual.

    HF has two identical classes for this (``BertSelfOutput`` after attention, ``BertOutput`` after
    the feed-forward block); parameter paths come from the ``name`` each use is given.
    """

    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, residual: jnp.ndarray, *, deterministic: bool) -> jnp.ndarray:
        hidden = _dense(self.config.hidden_size, self.config, "dense")(hidden)
        hidden = nn.Dropout(self.config.hidden_dropout_prob)(hidden, deterministic=deterministic)
        return _layer_norm(self.config, "LayerNorm")(hidden + residual)


class BertAttention(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, bias: jnp.ndarray, *, deterministic: bool) -> jnp.ndarray:
        attended = BertSelfAttention(self.config, name="self")(hidden, bias, deterministic=deterministic)
        return BertResidualOutput(self.config, name="output")(attended, hidden, deterministic=deterministic)


class BertIntermediate(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray) -> jnp.ndarray:
        hidden = _dense(self.config.intermediate_size, self.config, "dense")(hidden)
        return _activation(self.config.hidden_act, hidden)


class BertLayer(nn.Module):
    """One post-LN transformer encoder layer."""

    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, bias: jnp.ndarray, *, deterministic: bool) -> jnp.ndarray:
        attended = BertAttention(self.config, name="attention")(hidden, bias, deterministic=deterministic)
        inner = BertIntermediate(self.config, name="intermediate")(attended)
        return BertResidualOutput(self.config, name="output")(inner, attended, deterministic=deterministic)


class BertLayerCollection(nn.Module):
    """The ``encoder.layer`` list; layers are named ``"0"``, ``"1"``, ... as in the HF state dict."""

    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, bias: jnp.ndarray, *, deterministic: bool) -> jnp.ndarray:
        for index in range(self.config.num_hidden_layers):
            hidden = BertLayer(self.config, name=str(index))(hidden, bias, deterministic=deterministic)
        return hidden


class BertEncoder(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, bias: jnp.ndarray, *, deterministic: bool) -> jnp.ndarray:
        return BertLayerCollection(self.config, name="layer")(hidden, bias, deterministic=deterministic)


class BertModule(nn.Module):
    """The BERT encoder without pooler (``BertModel(config, add_pooling_layer=False)``)."""

    config: BertConfig

    @nn.compact
    def __call__(
        self,
        input_ids: jnp.ndarray,
        attention_mask: jnp.ndarray,
        token_type_ids: jnp.ndarray,
        *,
        deterministic: bool,
    ) -> jnp.ndarray:
        hidden = BertEmbeddings(self.config, name="embeddings")(input_ids, token_type_ids, deterministic=deterministic)
        # [B, 1, 1, L]: padded keys get the most negative float, as in HF's eager attention.
        bias = jnp.where(attention_mask[:, None, None, :] > 0, 0.0, jnp.finfo(jnp.float32).min).astype(jnp.float32)
        return BertEncoder(self.config, name="encoder")(hidden, bias, deterministic=deterministic)


class BertPredictionHeadTransform(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray) -> jnp.ndarray:
        hidden = _dense(self.config.hidden_size, self.config, "dense")(hidden)
        hidden = _activation(self.config.hidden_act, hidden)
        return _layer_norm(self.config, "LayerNorm")(hidden)


class BertLMPredictionHead(nn.Module):
    """Transform, then logits = h @ word_embeddings.T + bias (decoder tied to the input embeddings)."""

    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, word_embeddings: jnp.ndarray) -> jnp.ndarray:
        hidden = BertPredictionHeadTransform(self.config, name="transform")(hidden)
        bias = self.param("bias", nn.initializers.zeros, (self.config.vocab_size,), jnp.float32)
        self.sow("tape", "decoder_inputs", hidden)
        return self.perturb("logits", jnp.einsum("...h,vh->...v", hidden, word_embeddings) + bias)


class BertOnlyMLMHead(nn.Module):
    config: BertConfig

    @nn.compact
    def __call__(self, hidden: jnp.ndarray, word_embeddings: jnp.ndarray) -> jnp.ndarray:
        return BertLMPredictionHead(self.config, name="predictions")(hidden, word_embeddings)


class FlaxBertForMaskedLM(nn.Module):
    """BERT masked-LM (``bert`` encoder + ``cls`` head), equal to ``transformers.BertForMaskedLM``.

    Call with batched int arrays ``input_ids`` and ``attention_mask`` of shape [B, L] (1 = real
    token), optional ``token_type_ids`` [B, L] (zeros if omitted) and optional
    ``masked_positions`` [B, P] (indices into L). Returns float32 logits [B, P, V] at the masked
    positions when they are given (the MLM head runs only there), else [B, L, V].

    Dropout is off unless ``deterministic=False``, which needs ``rngs={"dropout": key}``.

    For ghost clipping (:mod:`trainers.jax_bert.ghost_clipping`) every parametrized layer can
    record its input (mutable ``"tape"`` collection) and expose dL/d(output) through a zero
    ``"perturbations"`` variable; both are inactive in an ordinary ``apply``.
    """

    config: BertConfig

    @nn.compact
    def __call__(
        self,
        input_ids: jnp.ndarray,
        attention_mask: jnp.ndarray,
        token_type_ids: jnp.ndarray | None = None,
        masked_positions: jnp.ndarray | None = None,
        *,
        deterministic: bool = True,
    ) -> jnp.ndarray:
        seq_len = input_ids.shape[-1]
        if seq_len > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence length must be <= max_position_embeddings={self.config.max_position_embeddings}, got {seq_len}."
            )
        if token_type_ids is None:
            token_type_ids = jnp.zeros_like(input_ids)
        bert = BertModule(self.config, name="bert")
        hidden = bert(input_ids, attention_mask, token_type_ids, deterministic=deterministic)
        if masked_positions is not None:
            hidden = jnp.take_along_axis(hidden, masked_positions[..., None].astype(jnp.int32), axis=-2, mode="clip")
        word_embeddings = bert.variables["params"]["embeddings"]["word_embeddings"]["embedding"]
        return BertOnlyMLMHead(self.config, name="cls")(hidden, word_embeddings)


def init_params(config: BertConfig, key: jax.Array, seq_len: int = 16, zero_rows: Sequence[int] = ()) -> dict[str, Any]:
    """Fresh parameters, initialized as HF does (normal(initializer_range) matrices, zero biases,
    unit LayerNorm scales, a zero ``[PAD]`` embedding row, a zero output bias).

    ``zero_rows``: further word-embedding rows that start at zero, as ``[PAD]``'s: the declared new tokens of
    new-token canaries (Panda et al. 2025), each used by one canary only. A random start would give every
    canary's token its own offset that training never touches unless the canary was inserted, which adds to
    both members' and non-members' scores a spread unrelated to membership (at the demo's audit recipe about
    40% of a non-member row's variance); with zero rows the scores differ only by what training did."""
    model = FlaxBertForMaskedLM(config)
    seq_len = max(1, min(seq_len, config.max_position_embeddings))
    ids = jnp.zeros((1, seq_len), jnp.int32)
    params = jax.jit(model.init)(key, ids, jnp.ones_like(ids))["params"]
    embeddings = params["bert"]["embeddings"]["word_embeddings"]
    rows = jnp.asarray(sorted({int(config.pad_token_id), *(int(r) for r in zero_rows)}), jnp.int32)
    embeddings["embedding"] = embeddings["embedding"].at[rows].set(0.0)
    return params


# ----------------------------------------------------------------------------------------------
# Losses. The masked-LM loss of one example is what DP-SGD clips (one example = one privacy unit).


def masked_lm_terms(
    logits: jnp.ndarray, labels: jnp.ndarray, weights: jnp.ndarray
) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
    """Per-example weighted mean cross-entropy, number correct and number of predictions over the last
    prediction axis (logits [..., P, V], labels/weights [..., P])."""
    weights = weights.astype(jnp.float32)
    label_logits = jnp.take_along_axis(logits, labels[..., None].astype(jnp.int32), axis=-1, mode="clip")[..., 0]
    nll = jax.nn.logsumexp(logits, axis=-1) - label_logits
    n_predictions = jnp.sum(weights, axis=-1)
    safe = jnp.where(n_predictions > 0, n_predictions, 1.0)
    loss = jnp.sum(nll * weights, axis=-1) / safe
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    n_correct = jnp.sum(correct * weights, axis=-1)
    return loss, n_correct, n_predictions


_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "masked_positions")


def _apply(
    model: FlaxBertForMaskedLM, params: Any, batch: dict[str, jnp.ndarray], dropout_rng: jax.Array | None
) -> jnp.ndarray:
    return model.apply(
        {"params": params},
        batch["input_ids"],
        batch["attention_mask"],
        batch.get("token_type_ids"),
        batch["masked_positions"],
        deterministic=dropout_rng is None,
        rngs=None if dropout_rng is None else {"dropout": dropout_rng},
    )


def example_mlm_loss(
    params: Any, example: dict[str, jnp.ndarray], *, model: FlaxBertForMaskedLM, dropout_rng: jax.Array | None = None
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Masked-LM loss of ONE example (no batch axis), to be wrapped in ``jax.vmap(jax.grad(...))``.

    Args:
        params: the model parameters.
        example: ``input_ids`` [L] int, ``attention_mask`` [L], optional ``token_type_ids`` [L],
            ``masked_positions`` [P], ``masked_labels`` [P], ``masked_weights`` [P] (0 for padding
            prediction slots), as produced by :func:`trainers.jax_bert.data.mask_tokens`. Other keys
            are ignored.
        model: the :class:`FlaxBertForMaskedLM` the params belong to.
        dropout_rng: when given, dropout is applied with this key; default deterministic.

    Returns:
        ``(loss, aux)``: the weighted mean cross-entropy over the example's masked tokens (0 when it
        has none), and ``aux = {"n_correct", "n_predictions"}`` (float32 scalars, weighted counts).
    """
    batched = {k: example[k][None] for k in _MODEL_INPUTS if example.get(k) is not None}
    logits = _apply(model, params, batched, dropout_rng)[0]
    loss, n_correct, n_predictions = masked_lm_terms(logits, example["masked_labels"], example["masked_weights"])
    return loss, {"n_correct": n_correct, "n_predictions": n_predictions}


def batch_mlm_loss(
    params: Any, batch: dict[str, jnp.ndarray], *, model: FlaxBertForMaskedLM, dropout_rng: jax.Array | None = None
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """:func:`example_mlm_loss` on a batch ([B, ...] arrays) in one forward pass.

    Returns the mean over examples of the per-example losses (each example weighs the same, as in
    DP-SGD) and ``aux`` with ``n_correct`` and ``n_predictions`` summed over the batch.
    """
    logits = _apply(model, params, batch, dropout_rng)
    loss, n_correct, n_predictions = masked_lm_terms(logits, batch["masked_labels"], batch["masked_weights"])
    return jnp.mean(loss), {"n_correct": jnp.sum(n_correct), "n_predictions": jnp.sum(n_predictions)}
