"""BERT 80/10/10 masking: rates, never special or padding tokens, static shapes, weights, jit/vmap."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpaudit.trainers.jax_bert.data import mask_tokens

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIAL = jnp.array([PAD, UNK, CLS, SEP, MASK], jnp.int32)
VOCAB = 60
SEQ = 40
P = 8


def _examples(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] tokens [SEP] [PAD]...; real tokens drawn from the non-special ids, some [UNK] inside."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, SEQ + 1, size=n)
    ids = np.zeros((n, SEQ), np.int32)
    for i, length in enumerate(lengths):
        body = rng.integers(5, VOCAB, size=length - 2)
        body[rng.random(length - 2) < 0.05] = UNK
        ids[i, :length] = [CLS, *body, SEP]
    mask = (ids != PAD).astype(np.int32)
    return ids, mask


@functools.lru_cache
def _masker(max_predictions: int = P, mask_prob: float = 0.15):
    fn = functools.partial(
        mask_tokens,
        mask_token_id=MASK,
        vocab_size=VOCAB,
        special_ids=SPECIAL,
        mask_prob=mask_prob,
        max_predictions=max_predictions,
    )
    return jax.jit(jax.vmap(fn))


def _run(ids: np.ndarray, mask: np.ndarray, seed: int = 0, **kwargs) -> dict[str, np.ndarray]:
    keys = jax.random.split(jax.random.key(seed), len(ids))
    return {k: np.asarray(v) for k, v in _masker(**kwargs)(keys, jnp.asarray(ids), jnp.asarray(mask)).items()}


def test_static_shapes_dtypes_and_single_example():
    ids, mask = _examples(5)
    out = _run(ids, mask)
    assert out["input_ids"].shape == (5, SEQ) and out["input_ids"].dtype == np.int32
    for name in ("masked_positions", "masked_labels", "masked_weights"):
        assert out[name].shape == (5, P)
    assert out["masked_weights"].dtype == np.float32 and out["masked_positions"].dtype == np.int32
    np.testing.assert_array_equal(out["attention_mask"], mask)
    # One example, unbatched, is the documented call.
    single = jax.jit(functools.partial(mask_tokens, mask_token_id=MASK, vocab_size=VOCAB, max_predictions=P))(
        jax.random.key(0),
        jnp.asarray(ids[0]),
        jnp.asarray(mask[0]),
        special_ids=SPECIAL,  # special ids may be traced
    )
    assert single["masked_positions"].shape == (P,)
    with pytest.raises(ValueError, match="one example of shape"):
        mask_tokens(
            jax.random.key(0),
            jnp.asarray(ids),
            jnp.asarray(mask),
            mask_token_id=MASK,
            vocab_size=VOCAB,
            special_ids=SPECIAL,
            max_predictions=P,
        )
    with pytest.raises(ValueError, match="max_predictions must be in"):
        mask_tokens(
            jax.random.key(0),
            jnp.asarray(ids[0]),
            jnp.asarray(mask[0]),
            mask_token_id=MASK,
            vocab_size=VOCAB,
            special_ids=SPECIAL,
            max_predictions=SEQ + 1,
        )


def test_positions_labels_weights_are_consistent_and_never_special_or_padding():
    ids, mask = _examples(400, seed=1)
    out = _run(ids, mask, seed=1)
    n_candidates = ((mask == 1) & ~np.isin(ids, np.asarray(SPECIAL))).sum(1)
    expected = np.where(n_candidates > 0, np.clip(np.round(0.15 * n_candidates), 1, P), 0)
    np.testing.assert_array_equal(out["masked_weights"].sum(1), expected)
    for i in range(len(ids)):
        used = out["masked_weights"][i] == 1
        n = int(used.sum())
        assert used[:n].all() and not used[n:].any()  # used slots first
        positions = out["masked_positions"][i][used]
        assert (np.diff(positions) > 0).all()  # distinct, sorted
        np.testing.assert_array_equal(out["masked_positions"][i][~used], 0)
        np.testing.assert_array_equal(out["masked_labels"][i][~used], 0)
        np.testing.assert_array_equal(out["masked_labels"][i][used], ids[i, positions])
        assert mask[i, positions].all() and not np.isin(ids[i, positions], np.asarray(SPECIAL)).any()
        unchanged = np.ones(SEQ, bool)
        unchanged[positions] = False
        np.testing.assert_array_equal(out["input_ids"][i][unchanged], ids[i][unchanged])


def test_rates_fifteen_percent_and_80_10_10():
    ids, mask = _examples(4000, seed=2)
    out = _run(ids, mask, seed=2, max_predictions=SEQ)  # no cap: the rate is 15% of candidates
    candidates = ((mask == 1) & ~np.isin(ids, np.asarray(SPECIAL))).sum()
    chosen = out["masked_weights"].sum()
    assert abs(chosen / candidates - 0.15) < 0.01
    used = out["masked_weights"] == 1
    rows = np.nonzero(used)[0]
    new = out["input_ids"][rows, out["masked_positions"][used]]
    original = out["masked_labels"][used]
    n = len(new)
    assert n > 10000
    frac_mask = np.mean(new == MASK)
    frac_kept = np.mean(new == original)
    frac_random = 1 - frac_mask - frac_kept
    # Binomial standard errors at n > 10000 are < 0.4% (80%) and < 0.3% (10%); allow ~4 s.e.
    assert abs(frac_mask - 0.8) < 0.016
    # A random replacement equals the original with probability 1/55, counted as "kept" here.
    assert abs(frac_kept - (0.1 + 0.1 / (VOCAB - 5))) < 0.012
    assert abs(frac_random - (0.1 - 0.1 / (VOCAB - 5))) < 0.012
    replaced = new[(new != MASK) & (new != original)]
    assert not np.isin(replaced, np.asarray(SPECIAL)).any()  # random replacements are never special
    assert replaced.min() >= 5 and replaced.max() < VOCAB
    # ... and cover the non-special vocabulary roughly uniformly.
    counts = np.bincount(replaced, minlength=VOCAB)[5:]
    assert counts.min() > 0 and counts.max() < 3 * counts.mean()
    # Chosen positions are uniform over the candidate positions (no bias to the start or end).
    relative = out["masked_positions"][used] / (mask.sum(1)[rows] - 1)
    assert abs(relative.mean() - 0.5) < 0.02


def test_cap_at_max_predictions_and_examples_without_candidates():
    ids, mask = _examples(50, seed=3)
    ids[0] = [CLS, SEP] + [PAD] * (SEQ - 2)
    mask[0] = ids[0] != PAD
    out = _run(ids, mask, seed=3, max_predictions=2, mask_prob=0.5)
    assert out["masked_weights"][0].sum() == 0
    np.testing.assert_array_equal(out["input_ids"][0], ids[0])
    assert out["masked_weights"][1:].sum(1).max() == 2


def test_deterministic_given_key_and_different_keys_differ():
    ids, mask = _examples(20, seed=4)
    a, b, c = _run(ids, mask, seed=5), _run(ids, mask, seed=5), _run(ids, mask, seed=6)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["masked_positions"], c["masked_positions"])


def test_duplicate_and_unsorted_special_ids_are_handled():
    ids, mask = _examples(200, seed=7)
    specials = jnp.array([MASK, PAD, SEP, CLS, UNK, PAD], jnp.int32)
    fn = jax.jit(
        jax.vmap(
            functools.partial(
                mask_tokens,
                mask_token_id=MASK,
                vocab_size=VOCAB,
                special_ids=specials,
                mask_prob=0.5,
                max_predictions=SEQ,
            )
        )
    )
    out = fn(jax.random.split(jax.random.key(8), len(ids)), jnp.asarray(ids), jnp.asarray(mask))
    masked_ids = np.asarray(out["input_ids"])
    assert masked_ids.max() < VOCAB
    used = np.asarray(out["masked_weights"]) == 1
    rows = np.nonzero(used)[0]
    new = masked_ids[rows, np.asarray(out["masked_positions"])[used]]
    assert not np.isin(new[new != MASK], np.asarray(SPECIAL)).any()
