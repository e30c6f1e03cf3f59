"""Text to token arrays, and BERT's dynamic 80/10/10 masking as a jittable JAX function.

Encoding runs once on the host (:func:`encode_texts`), and gives each example its content key: a
64-bit BLAKE2b hash of its own token ids (:func:`content_keys`). Masking runs inside the jitted
training step (:func:`mask_tokens`), so every step draws fresh masks (dynamic masking, as in RoBERTa
and Anil et al.) and nothing is precomputed per epoch. Shapes are static: each example has exactly
``max_predictions`` prediction slots, the unused ones with weight 0, so the step compiles once.

The rule (docs/privacy.md, "One example's contribution"): an example's mask is a function of that
example alone and public values. Its key is the step's public key (``--seed``, the step) with its content key folded in,
never its index in the file or its batch slot: removing row 0 used to shift every later index and
re-mask those examples (a clipped sum moved by ~3-5C, not C). Equal rows share a mask (allowed).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import tokenizers


def encode_texts(tokenizer: tokenizers.Tokenizer, texts: Sequence[str], *, max_length: int) -> dict[str, np.ndarray]:
    """Tokenize ``texts`` with ``[CLS] ... [SEP]``, truncated and padded with ``[PAD]`` to ``max_length``.

    The caller's tokenizer is not modified (truncation and padding are set on a copy).

    Returns:
        ``input_ids`` [N, max_length] int32, ``attention_mask`` [N, max_length] int32 (1 = real token)
        and ``content_key`` [N, 2] uint32 (:func:`content_keys`: what keys each example's masks).
    """
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"max_length must be an integer >= 2 (room for [CLS] and [SEP]), got {max_length!r}.")
    pad_id = tokenizer.token_to_id("[PAD]")
    if pad_id is None:
        raise ValueError("tokenizer must have a [PAD] token, got a vocabulary without one.")
    tok = tokenizers.Tokenizer.from_str(tokenizer.to_str())
    tok.enable_truncation(max_length=max_length)
    tok.enable_padding(pad_id=pad_id, pad_token="[PAD]", length=max_length)
    encodings = tok.encode_batch(list(texts))
    if not encodings:
        empty = np.zeros((0, max_length), np.int32)
        return {"input_ids": empty, "attention_mask": empty.copy(), "content_key": np.zeros((0, 2), np.uint32)}
    input_ids = np.asarray([e.ids for e in encodings], dtype=np.int32)
    attention_mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int32)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "content_key": content_keys(input_ids, attention_mask),
    }


_MASK_PERSON = b"dpaudit.mlm-mask"  # BLAKE2b personalization: the same content hash as the torch trainers'


def content_keys(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """[N, 2] uint32: each row's 64-bit BLAKE2b hash of its real token ids (as little-endian int64),
    low word first, for ``jax.random.fold_in``.

    A function of the example's own tokens only (not of its padding, its index or the other rows), so
    it keys that example's masks (docs/privacy.md, "One example's contribution"); equal rows get equal keys.
    """
    ids = np.asarray(input_ids).astype("<i8")
    out = np.empty((len(ids), 2), np.uint32)
    for i, row in enumerate(ids):
        real = row[np.asarray(attention_mask[i]) > 0]
        value = int.from_bytes(hashlib.blake2b(real.tobytes(), digest_size=8, person=_MASK_PERSON).digest(), "little")
        out[i] = (value & 0xFFFFFFFF, value >> 32)
    return out


def mask_tokens(
    key: jax.Array,
    input_ids: jnp.ndarray,
    attention_mask: jnp.ndarray,
    *,
    mask_token_id: int,
    vocab_size: int,
    special_ids: jnp.ndarray,
    mask_prob: float = 0.15,
    max_predictions: int,
) -> dict[str, jnp.ndarray]:
    """BERT masking of ONE example ([L] arrays); ``jax.vmap`` it over a batch with one key per example.

    As in BERT's ``create_pretraining_data.py``: among the candidate positions (real tokens that are
    not special tokens — ``[PAD]``, ``[CLS]``, ``[SEP]`` and whatever ``special_ids`` lists are never
    chosen), ``n = min(max_predictions, max(1, round(mask_prob * n_candidates)))`` positions are
    chosen uniformly at random (0 when there is no candidate). Each chosen token is replaced by
    ``[MASK]`` with probability 0.8, by a random non-special token with probability 0.1, and kept
    with probability 0.1; the model must predict the original token at every chosen position.

    Args:
        key: PRNG key for this example.
        input_ids: [L] int token ids.
        attention_mask: [L], 1 for real tokens and 0 for padding.
        mask_token_id: id of ``[MASK]``.
        vocab_size: random replacements are drawn from ``[0, vocab_size)`` minus ``special_ids``.
        special_ids: 1-D int array (may repeat ids; may be traced) of the ids, all < ``vocab_size``,
            never masked nor used as replacements: pass every special token id, ``[PAD]`` included.
        mask_prob: fraction of candidate tokens to predict.
        max_predictions: P, the static number of prediction slots (<= L).

    Returns:
        ``input_ids`` [L] (masked), ``attention_mask`` [L] (unchanged), ``masked_positions`` [P]
        int32 (sorted; 0 in unused slots), ``masked_labels`` [P] int32 (the original tokens; 0 in
        unused slots), ``masked_weights`` [P] float32 (1 for used slots, 0 for unused).
    """
    seq_len = input_ids.shape[-1]
    if input_ids.ndim != 1:
        raise ValueError(f"input_ids must be one example of shape [L] (vmap for a batch), got shape {input_ids.shape}.")
    if not 1 <= max_predictions <= seq_len:
        raise ValueError(f"max_predictions must be in [1, L={seq_len}], got {max_predictions}.")
    if not 0.0 < mask_prob <= 1.0:
        raise ValueError(f"mask_prob must be in (0, 1], got {mask_prob}.")
    input_ids = input_ids.astype(jnp.int32)
    special_ids = jnp.sort(jnp.asarray(special_ids, jnp.int32).reshape(-1))
    key_select, key_action, key_random = jax.random.split(key, 3)

    is_special = jnp.any(input_ids[:, None] == special_ids[None, :], axis=-1)
    candidate = (attention_mask > 0) & ~is_special
    n_candidates = jnp.sum(candidate)
    n_mask = jnp.round(mask_prob * n_candidates).astype(jnp.int32)
    n_mask = jnp.where(n_candidates > 0, jnp.clip(n_mask, 1, max_predictions), 0)

    # A uniformly random subset of n_mask candidates: the n_mask largest of i.i.d. uniform scores.
    scores = jnp.where(candidate, jax.random.uniform(key_select, (seq_len,)), -1.0)
    _, top = jax.lax.top_k(scores, max_predictions)
    used = jnp.arange(max_predictions) < n_mask
    positions = jnp.sort(jnp.where(used, top, seq_len))  # used slots first, in position order
    used = positions < seq_len
    safe_positions = jnp.where(used, positions, 0).astype(jnp.int32)
    labels = jnp.where(used, input_ids[safe_positions], 0)

    action = jax.random.uniform(key_action, (max_predictions,))
    # Random non-special token: draw r from [0, V - n_special) and step over each distinct special id
    # in increasing order (r -> r + 1 when r >= s), a bijection onto the non-special ids.
    distinct = jnp.concatenate([jnp.ones((1,), bool), special_ids[1:] != special_ids[:-1]])
    n_special = jnp.sum(distinct)
    random_tokens = jax.random.randint(key_random, (max_predictions,), 0, vocab_size - n_special, dtype=jnp.int32)
    for index in range(special_ids.shape[0]):
        random_tokens = random_tokens + ((random_tokens >= special_ids[index]) & distinct[index]).astype(jnp.int32)
    replacement = jnp.where(action < 0.8, jnp.int32(mask_token_id), jnp.where(action < 0.9, random_tokens, labels))
    # Unused slots scatter out of bounds and are dropped, so they never collide with a used position.
    masked_ids = input_ids.at[jnp.where(used, positions, seq_len)].set(replacement, mode="drop")
    return {
        "input_ids": masked_ids,
        "attention_mask": attention_mask,
        "masked_positions": safe_positions,
        "masked_labels": labels.astype(jnp.int32),
        "masked_weights": used.astype(jnp.float32),
    }
