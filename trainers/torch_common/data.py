"""The tasks' data: inject-directory rows -> token tensors, labels, and MLM masking.

- ``classify``: ``{"text", "label"}`` rows (``dpaudit inject`` keeps the corpus labels), read by the
  core inject reader (:mod:`dpaudit.inject_dir.reader`). The label set, released in the model's
  ``config.json`` (``id2label``, and the head's width), comes from public information only:
  ``public.jsonl``'s labels or the user's ``--labels`` (:func:`resolve_label_set`), never from
  ``train.jsonl``.
- ``mlm``: the texts, with BERT's 80/10/10 masking redrawn every step (masking is not part of the DP
  mechanism, so it is public randomness). Each example's mask is a function of that example alone and
  public values: a 64-bit BLAKE2b hash of its own token ids, the public ``--seed`` and the step
  (:func:`mask_tokens`); never of its batch position, the batch size or the padding width (otherwise one
  added or removed row re-masks the others and moves the clipped sum by up to 3.5C instead of C:
  docs/privacy.md, "One example's contribution"). Only masked positions are gathered for the output layer (the
  full-vocabulary layer over every position dominated the step: docs/trainers.md, "Performance notes").

- ``clm``: the texts as ``[CLS] text [SEP]`` (or the start's BOS first, :func:`encode`); nothing is drawn:
  the loss covers every token after the first (:func:`trainers.torch_common.model.causal_losses`).

Truncation to ``--max-length`` is per example (the tokenizer's). Dropout is off in every mode
(:mod:`trainers.torch_common.model` builds models in ``eval()`` mode), so no per-batch dropout noise
couples the examples either.

Tensors are padded per batch to the batch's longest row, not to ``--max-length``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from dpaudit.common.errors import UserInputError
from dpaudit.inject_dir.reader import (
    HELDOUT,
    LABELS_DECLARED,
    PUBLIC,
    TRAIN,
    InjectRun,
    LabelSet,
    SplitRows,
    load_inject_run,
    public_label_set,
)


@dataclass(frozen=True, kw_only=True)
class InjectData:
    """The verified inject directory (:class:`dpaudit.inject_dir.reader.InjectRun`) as the torch trainers read it.

    ``train`` holds the rows trained on (``public.jsonl``'s with ``--data-split public``). For ``classify``,
    ``label_set`` is the model's label set and ``label_ids`` maps each split name
    (``"train"``, ``"heldout"``, ``"public"``) to its rows' class ids; -1 marks a heldout or public row
    whose label is outside the set (left out wherever labels are used: :meth:`labelled_rows`).
    """

    run: InjectRun
    train: SplitRows
    heldout: SplitRows
    public: SplitRows
    label_set: LabelSet | None = None  # None: mlm
    label_ids: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def label_names(self) -> list[str] | None:
        """The model's labels in class-id order (its ``id2label``), or None for mlm."""
        return None if self.label_set is None else list(self.label_set.names)

    def labelled_rows(self, split: str) -> np.ndarray:
        """Indices of ``split``'s rows with a class id (all rows for mlm): what evaluation may use."""
        ids = self.label_ids.get(split)
        if ids is None:
            return np.arange(len({"train": self.train, "heldout": self.heldout, "public": self.public}[split].texts))
        return np.flatnonzero(ids >= 0)

    def label_details(self) -> dict[str, Any]:
        """``privacy.json`` details of the label set: where it came from, its size, the unknown-label
        policy, and how many heldout/public rows were left out (rows, not their labels: public counts)."""
        if self.label_set is None:
            return {}
        left_out = {name: int((ids < 0).sum()) for name, ids in self.label_ids.items() if name != "train"}
        return {**self.label_set.details(), "rows_left_out_for_unknown_labels": left_out}

    @property
    def inputs(self) -> dict[str, str]:
        """Inject file path -> sha256, for the train manifest."""
        return self.run.inputs

    @property
    def identity(self) -> str:
        """One hash naming the data: what a checkpoint belongs to."""
        return self.run.identity

    @property
    def manifest(self) -> dict[str, Any]:
        return self.run.manifest


def load_inject_dir(
    data_dir: Path,
    *,
    task: str,
    labels: Sequence[str] | None = None,
    unknown_label: str | None = None,
    split: str = "train",
) -> InjectData:
    """Verify an inject directory (the core reader) and read its three splits for ``task``.

    ``split`` is the one trained on (``--data-split``): ``train`` (``train.jsonl``) or ``public``
    (``public.jsonl``); :attr:`InjectData.train` holds its rows either way. ``classify`` needs a labelled
    corpus; its label set is :func:`resolve_label_set` of ``labels`` (the Config's ``--labels``) and
    ``unknown_label``, and every split's class ids are read here, so a training row with an undeclared
    label is refused before anything is trained or written.
    """
    run = load_inject_run(data_dir)
    labelled = task == "classify"
    if labelled and not run.labelled:
        raise UserInputError(
            f"--data {data_dir}: the corpus has no labels; use --task mlm or inject a labelled corpus "
            "(dpaudit inject --corpus x.tsv)."
        )
    trained = TRAIN if split == "train" else PUBLIC
    train, heldout, public = (run.split(name) for name in (trained, HELDOUT, PUBLIC))
    if not train.texts:
        raise UserInputError(f"{data_dir / trained} is empty; there is nothing to train on.")
    if not public.texts:
        raise UserInputError(f"{data_dir / PUBLIC} is empty; the tokenizer and clip scaling use it.")
    if not labelled:
        return InjectData(run=run, train=train, heldout=heldout, public=public)
    label_set = resolve_label_set(run, labels=labels, unknown_label=unknown_label)
    ids = {
        name: split_label_ids(rows, label_set, path=Path(data_dir) / file, private=name == "train")
        for name, file, rows in (("train", trained, train), ("heldout", HELDOUT, heldout), ("public", PUBLIC, public))
    }
    return InjectData(run=run, train=train, heldout=heldout, public=public, label_set=label_set, label_ids=ids)


def resolve_label_set(run: InjectRun, *, labels: Sequence[str] | None, unknown_label: str | None) -> LabelSet:
    """The classifier's label set from public information only: the declared ``labels`` (``--labels``, ids
    in the order given), else the labels of ``public.jsonl`` in :func:`dpaudit.inject_dir.reader.label_order`.

    Never the labels of ``train.jsonl``: the set is released un-noised in ``config.json`` (``id2label``
    and the head's width), so a set that grew with one extra private row's new label would have infinite
    epsilon for that neighbour (docs/privacy.md, "Nothing released is computed from private data").
    """
    if labels is not None:
        return LabelSet(names=tuple(labels), source=LABELS_DECLARED, unknown=unknown_label)
    return public_label_set(run, unknown=unknown_label)


def split_label_ids(split: SplitRows, label_set: LabelSet, *, path: Path, private: bool) -> np.ndarray:
    """Class ids of a split's rows under ``label_set``'s unknown-label policy.

    A label outside the set maps to ``label_set.unknown`` when one was declared (``--unknown-label``).
    Otherwise a row of the private ``train.jsonl`` (``private``) is refused: the one-line error is seen by
    the data owner before training, not released (nothing is trained or written), and a model that
    silently dropped the row would be trained on other data than the user gave. A non-private (heldout,
    public) row gets -1 instead: left out wherever labels are used, and counted in ``privacy.json``.
    """
    out = np.empty(len(split.texts), dtype=np.int64)
    for i, label in enumerate(split.labels or []):
        class_id = label_set.id_of(label)
        if class_id is None and private:
            origin = "from public.jsonl" if label_set.source != LABELS_DECLARED else "from --labels"
            raise UserInputError(
                f"{path}:{i + 1}: label {label!r} is not in the public label set ({origin}); declare "
                "it with --labels or map unknown labels with --unknown-label NAME."
            )
        out[i] = -1 if class_id is None else class_id
    return out


@dataclass(frozen=True)
class Encoded:
    """Token ids [N, max_length] (padded with 0), lengths [N], and each row's content hash [N]
    (:func:`content_hashes`, computed once here: what keys its MLM masks)."""

    input_ids: torch.Tensor
    lengths: torch.Tensor
    content: torch.Tensor

    def batch(self, indices: np.ndarray | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(input_ids [B, T], attention_mask [B, T]) trimmed to the batch's longest row."""
        idx = torch.as_tensor(indices, dtype=torch.long)
        lengths = self.lengths[idx]
        width = max(int(lengths.max()) if len(idx) else 1, 1)
        ids = self.input_ids[idx, :width]
        mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
        return ids, mask


def encode(tokenizer: Tokenizer, texts: list[str], *, max_length: int, bos_id: int | None = None) -> Encoded:
    """Tokenize (``[CLS] ... [SEP]``, truncated to ``max_length``) into padded tensors.

    ``bos_id`` (``--task clm`` from a causal LM whose tokenizer does not add it, e.g. GPT-2's BPE): prepended
    to each row that does not start with it, then the row is cut to ``max_length`` again (docs/scoring.md,
    convention 2: the first token is context only). Either way each row depends on its own text alone.
    """
    tokenizer = Tokenizer.from_str(tokenizer.to_str())  # a private copy: truncation is tokenizer state
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    encodings = tokenizer.encode_batch(texts)
    ids = np.zeros((len(texts), max_length), dtype=np.int64)
    lengths = np.zeros(len(texts), dtype=np.int64)
    for i, enc in enumerate(encodings):
        row = enc.ids
        if bos_id is not None and (not row or row[0] != bos_id):
            row = [bos_id, *row][:max_length]
        n = len(row)
        ids[i, :n] = row
        lengths[i] = n
    input_ids, lengths_t = torch.from_numpy(ids), torch.from_numpy(lengths)
    return Encoded(input_ids, lengths_t, content_hashes(input_ids, lengths_t))


_MASK_PERSON = b"dpaudit.mlm-mask"  # BLAKE2b personalization (16 bytes): this hash serves masking only
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def content_hashes(input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each row's 64-bit BLAKE2b hash of its real token ids (``input_ids[i, :lengths[i]]`` as little-endian
    int64), as an int64 tensor [N] holding the hash's bits.

    A function of the example's own tokens only (not of its padding, its index or the other rows):
    equal rows get equal hashes, so a duplicated row shares its mask (allowed: docs/privacy.md, "One example's contribution").
    """
    ids = input_ids.numpy().astype("<i8", copy=False)
    out = np.empty(len(ids), dtype=np.uint64)
    for i, n in enumerate(lengths.tolist()):
        digest = hashlib.blake2b(ids[i, :n].tobytes(), digest_size=8, person=_MASK_PERSON).digest()
        out[i] = int.from_bytes(digest, "little")
    return torch.from_numpy(out.view(np.int64))


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (Steele, Lea and Flood 2014): a bijection of uint64 that spreads
    every input bit over every output bit."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _draws(keys: np.ndarray, stream: int, count: int) -> np.ndarray:
    """[B, count] uint64: numbers ``1..count`` of SplitMix64 stream ``stream`` of each row's key, so
    entry [i, j] is a function of (``keys[i]``, ``stream``, ``j``) only."""
    counter = (np.uint64(stream) << np.uint64(32)) + np.arange(1, count + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return _mix64(keys[:, None] + counter[None, :] * _GOLDEN)


def _uniform(bits: np.ndarray) -> torch.Tensor:
    """The top 53 bits as a float64 in [0, 1)."""
    return torch.from_numpy((bits >> np.uint64(11)).astype(np.float64) * 2.0**-53)


def example_keys(content: torch.Tensor, generator: torch.Generator) -> np.ndarray:
    """[B] uint64: each example's masking key, ``mix(content hash XOR mix(generator's seed))``.

    Only the generator's seed is read (:meth:`torch.Generator.initial_seed`, the caller's public
    ``(--seed, stream, step)`` key), not its state: how many numbers were drawn before, or for how
    many rows, changes nothing.
    """
    step_key = _mix64(np.array([generator.initial_seed() & (2**64 - 1)], dtype=np.uint64))
    return _mix64(np.asarray(content.numpy(), dtype=np.int64).view(np.uint64) ^ step_key)


def draw_contents(content: torch.Tensor, draws: int) -> torch.Tensor:
    """[B x ``draws``] masking keys of each example's ``--mask-draws`` copies, example i's at i K .. i K + K - 1:
    draw 0 keeps its content hash (so one draw masks as before), draw d > 0 is number d of its SplitMix64 stream 0
    (:func:`_draws`: ``mix(hash + d x golden)``). A function of the example's own tokens and the public draw index
    only: the K maskings of one example are K independent masks, and a duplicated row shares all K
    (docs/privacy.md, "One example's contribution")."""
    bits = np.asarray(content.numpy(), dtype=np.int64).view(np.uint64)
    keys = np.concatenate([bits[:, None], _draws(bits, 0, draws - 1)], axis=1)
    return torch.from_numpy(keys.reshape(-1).view(np.int64))


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 4D additive mask [B, 1, 1, T] (0 keep, finfo.min pad). transformers 5.23 BERT under torch.func
    vmap needs it pre-built: the 2D path calls ``.all()``, which vmap rejects (docs/trainers.md, "Performance notes")."""
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def max_predictions(max_length: int, mask_prob: float) -> int:
    return min(max_length, math.ceil(max_length * mask_prob) + 1)


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    generator: torch.Generator,
    mask_id: int,
    vocab_size: int,
    special_ids: list[int],
    mask_prob: float,
    n_predictions: int,
    content: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """BERT masking (80% [MASK], 10% random token, 10% kept), vectorized over the batch.

    The rule (docs/privacy.md, "One example's contribution"): an example's mask is a function of that example alone and public
    values: its content hash (``content``, :func:`content_hashes`; computed from the rows when not
    given), and ``generator``'s seed, which the caller keys by the public ``--seed`` and the step
    (:func:`example_keys`). Row i's uniforms are numbers of a SplitMix64 stream of its own key, one per
    real position, so nothing depends on its batch position, the batch size or the padding width: a
    row added to, removed from or duplicated in the batch leaves every other row's mask unchanged,
    and one example moves the clipped sum by at most the clipper's sensitivity. Cost (one thread, a
    2-core VM): 0.77 ms for 32 rows of 128 tokens (0.52 ms with one batch-wide torch generator), 5.4 ms
    for 512 rows (7.0 ms before); the hashes are computed once, at :func:`encode`.

    Each candidate (a real, non-special token) is chosen with probability ``mask_prob``; a row with
    none chosen predicts its candidate of smallest uniform; the first ``P = min(n_predictions, T)``
    chosen positions in uniform order are predicted.

    Returns ``input_ids`` (masked), ``positions`` [B, P], ``targets`` [B, P] and ``weights`` [B, P]
    (1 at a real prediction, 0 at padding of the fixed P slots).
    """
    b, t = input_ids.shape
    if content is None:
        content = content_hashes(input_ids, attention_mask.sum(1))
    keys = example_keys(content, generator)
    candidate = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special_ids))
    u = _uniform(_draws(keys, 0, t))  # u[i, j]: a function of row i's key and position j only
    chosen = candidate & (u < mask_prob)
    # Rows with no chosen token get their best candidate, so every row predicts something.
    none = ~chosen.any(1, keepdim=True)
    best = torch.where(candidate, u, torch.full_like(u, 2.0)).argmin(1, keepdim=True)
    chosen |= none & candidate & (torch.arange(t)[None, :] == best)
    p = min(n_predictions, t)
    key = torch.where(chosen, u, torch.full_like(u, 2.0))
    positions = key.argsort(dim=1)[:, :p]
    weights = chosen.gather(1, positions).float()
    targets = input_ids.gather(1, positions)
    r = _uniform(_draws(keys, 1, p))  # slot s: the row's s-th chosen position in uniform order
    n_special = len(special_ids)
    random_tokens = torch.from_numpy(
        (_draws(keys, 2, p) % np.uint64(vocab_size - n_special)).astype(np.int64) + n_special
    )
    replacement = torch.where(r < 0.8, torch.full_like(targets, mask_id), torch.where(r < 0.9, random_tokens, targets))
    replacement = torch.where(weights.bool(), replacement, targets)
    masked = input_ids.scatter(1, positions, replacement)
    return {"input_ids": masked, "positions": positions, "targets": targets, "weights": weights}
