"""A causal LM's canary secrets: their scores, their exact exposure by a prefix tree, and their extraction.

Torch code run after :func:`dpaudit.scoring.load` (torch is imported inside the functions, never at import).
Every function takes the loaded ``model`` and ``tokenizer`` (a causal scorer's ``.model``/``.tokenizer``) and
returns numpy; the attacks turn the numbers into statistics.

The secret's score (docs/scoring.md, convention 3) is ``sum_i log p(secret token i | every token before it)`` over
the secret's token positions, each log-probability normalized over the whole vocabulary, in float64; the
suffix is not scored. A text is tokenized with its special tokens; when the tokenizer has a BOS token and the
text does not start with it, it is prepended; with no BOS the first token is context only.

Exposure (Carlini et al. 2019, Definition 3) ranks the secret's score among all |R| candidates' scores with
the same prefix. For a causal LM the per-position scores do not factor (position i conditions on the symbols
before it), so the rank is counted over every candidate: :func:`prefix_tree_scores` runs the prefix once,
keeps its key/value cache, then scores each tree node's next symbol over the alphabet's tokens, one token per node
on top of its parent's cache, batched across nodes (sum_{k<L} |A|^k nodes for |A|^L candidates). That is exact only when every alphabet symbol is
one token in context (:func:`dpaudit.scoring.targets.check_secret_tokens`); otherwise, or above the size limit,
:func:`sampled_reference_scores` scores m candidates drawn uniformly from R for Carlini et al.'s sampled
estimates (:func:`dpaudit.attacks.exposure_rank.sampled_exposure`).

Extraction (Carlini et al. 2021, "Extracting Training Data from Large Language Models", sec. 4; the
k-extractability of Carlini et al. 2023, "Quantifying Memorization Across Neural Language Models", sec. 2):
:func:`beam_decode` continues each canary's prefix by as many tokens as its secret has, greedily (width 1) or
by beam search, over the alphabet's tokens or the whole vocabulary.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from dpaudit.common.errors import UserInputError
from dpaudit.scoring.targets import (
    CanaryLike,
    ProductSpaceLike,
    SpaceLike,
    _overlapping,
    alphabet_token_ids,
    check_secret_tokens,
    locate_secrets,
)

#: Tree nodes (or sampled candidates) scored per forward pass on top of one prefix's cache.
NODE_BATCH = 1024


@dataclass(frozen=True)
class CausalSecret:
    """A canary tokenized for a causal LM: the context before its secret and the secret's tokens.

    Attributes:
        context: token ids before the secret (BOS first when the tokenizer has one); never empty.
        secret: the secret's token ids, in order (the tokens after ``context``).
    """

    context: list[int]
    secret: list[int]


def _with_bos(tokenizer: Any, ids: list[int]) -> tuple[list[int], int]:
    """``ids`` with the tokenizer's BOS prepended when it has one and they lack it; and the shift applied."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and (not ids or ids[0] != bos):
        return [bos, *ids], 1
    return list(ids), 0


def _split(tokenizer: Any, canary: CanaryLike, ids: list[int], positions: list[int], max_length: int) -> CausalSecret:
    """Context and secret tokens from a tokenized canary and its secret positions (checked)."""
    ids, shift = _with_bos(tokenizer, ids)
    positions = [p + shift for p in positions]
    if not positions:
        raise UserInputError(
            f"canary {canary.id}: its secret {canary.secret!r} has no token of its own for this "
            "tokenizer; it cannot be scored."
        )
    if positions != list(range(positions[0], positions[-1] + 1)):
        raise UserInputError(f"canary {canary.id}: its secret's tokens are not contiguous for this tokenizer.")
    if positions[0] == 0:
        raise UserInputError(
            f"canary {canary.id}: its secret is the first token and the tokenizer has no BOS token, "
            "so a causal LM has no context to score it from; give the template a prefix."
        )
    if positions[-1] + 1 > max_length:
        raise UserInputError(
            f"canary {canary.id}: its secret ends at token {positions[-1] + 1}, beyond the model's "
            f"{max_length}; use a shorter --template."
        )
    return CausalSecret(context=ids[: positions[0]], secret=ids[positions[0] : positions[-1] + 1])


#: Random candidates per canary whose tokens are checked against the in-context alphabet (beside the true secret).
CANDIDATE_CHECKS = 16


def in_context_alphabet(
    tokenizer: Any, canaries: Sequence[CanaryLike], space: ProductSpaceLike, *, max_length: int
) -> np.ndarray:
    """The token id of each alphabet symbol where a secret's symbols stand: in each canary's sentence, at every position.

    A symbol's token can depend on what precedes it: a byte-level BPE writes the digit 4 as ``"4"`` at the start of a
    text and as ``"Ġ4"`` after a space, so the alphabet tokenized alone (:func:`alphabet_token_ids`) is not what a
    candidate reads in context. Each canary's sentence with every position set to symbol a is tokenized (one batched
    call, |A| texts per canary), and each symbol must be one token, the same one at every position of every canary,
    and distinct from the others' (WordPiece gives the alphabet's own ids).

    Raises:
        UserInputError: a symbol that is not one token in context, or whose token differs between positions or
            canaries: the candidates' scores would not be the tree's, so the exact methods do not apply.
    """
    a, length = len(space.alphabet), space.length
    texts = [
        SimpleNamespace(id=c.id, prefix=c.prefix, secret=space.secret_of([k] * length), suffix=c.suffix)
        for c in canaries
        for k in range(a)
    ]
    located = locate_secrets(tokenizer, texts, space, max_length=max_length)
    tokens = np.asarray([[t.input_ids[p] for p in t.secret_positions] for t in located], dtype=np.int64)
    tokens = tokens.reshape(len(canaries), a, length)
    alphabet = tokens[0, :, 0]
    differ = tokens != alphabet[None, :, None]
    if differ.any():
        i, k, j = (int(x) for x in np.argwhere(differ)[0])
        raise UserInputError(
            f"canary {canaries[i].id}: the symbol {space.alphabet[k]!r} is token "
            f"{tokenizer.convert_ids_to_tokens(int(tokens[i, k, j]))!r} at secret position {j} but "
            f"{tokenizer.convert_ids_to_tokens(int(alphabet[k]))!r} elsewhere: this tokenizer reads a "
            "symbol differently by its context, so candidates cannot be scored by one alphabet."
        )
    if len(set(alphabet.tolist())) != a:
        raise UserInputError(
            f"this model's tokenizer maps two symbols of the {space.format} space to one token in "
            "context; the secrets cannot be told apart."
        )
    return alphabet


def alphabet_secrets(
    tokenizer: Any, canaries: Sequence[CanaryLike], space: ProductSpaceLike, *, max_length: int, seed: int = 0
) -> tuple[list[CausalSecret], np.ndarray]:
    """Canaries whose every secret symbol is one alphabet token in context, and the alphabet's token ids in context.

    Checked: every symbol is one token alone (:func:`alphabet_token_ids`) and in each sentence at every position
    (:func:`in_context_alphabet`); each canary's secret, and :data:`CANDIDATE_CHECKS` random candidates of each
    (drawn with the public ``seed``), tokenize in their sentence as those tokens
    (:func:`dpaudit.scoring.targets.check_secret_tokens`).

    Raises:
        UserInputError: a check fails (:mod:`dpaudit.scoring.targets`): the exact methods do not apply to this
            tokenizer.
    """
    if not canaries:
        return [], alphabet_token_ids(tokenizer, space)
    alphabet_token_ids(tokenizer, space)  # each symbol one known token, named in its error
    alphabet = in_context_alphabet(tokenizer, canaries, space, max_length=max_length)
    located = locate_secrets(tokenizer, canaries, space, max_length=max_length)
    check_secret_tokens(tokenizer, canaries, located, space, alphabet)
    draws = np.random.default_rng(seed).integers(
        0, len(space.alphabet), size=(len(canaries), CANDIDATE_CHECKS, space.length)
    )
    probes = [
        SimpleNamespace(id=c.id, prefix=c.prefix, secret=space.secret_of(d), suffix=c.suffix)
        for c, rows in zip(canaries, draws.tolist())
        for d in rows
    ]
    check_secret_tokens(
        tokenizer, probes, locate_secrets(tokenizer, probes, space, max_length=max_length), space, alphabet
    )
    return [
        _split(tokenizer, c, t.input_ids, t.secret_positions, max_length) for c, t in zip(canaries, located)
    ], alphabet


def span_secrets(tokenizer: Any, canaries: Sequence[CanaryLike], *, max_length: int) -> list[CausalSecret]:
    """Canaries tokenized as text: the secret is every token overlapping its characters.

    A token that straddles the prefix and the secret (a BPE token carrying the space before the secret, ``" 4"``)
    belongs to the secret: it is the model's choice of the secret's first symbol.
    """
    enc = tokenizer([c.prefix + c.secret + c.suffix for c in canaries], return_offsets_mapping=True, truncation=False)
    out = []
    for c, ids, offsets in zip(canaries, enc["input_ids"], enc["offset_mapping"]):
        start = len(c.prefix)
        positions = _overlapping(offsets, start, start + len(c.secret))
        out.append(_split(tokenizer, c, list(ids), positions, max_length))
    return out


def _pad_id(tokenizer: Any) -> int:
    for x in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if x is not None:
            return int(x)
    return 0


def _last_log_probs(model: Any, rows: Sequence[Sequence[int]], *, device: str, pad: int) -> Any:
    """float64 log-probabilities over the vocabulary of the token after each row's last one [rows, vocab]
    (rows right-padded: positions stay those of the unpadded text)."""
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        mask[i, : len(r)] = 1
    last = torch.tensor([len(r) - 1 for r in rows])
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    return torch.log_softmax(logits[torch.arange(len(rows)), last.to(logits.device)].double(), dim=-1)


def sequence_log_likelihoods(
    model: Any, tokenizer: Any, secrets: Sequence[CausalSecret], *, device: str, batch_size: int
) -> np.ndarray:
    """Each secret's score given its context: sum over its tokens of log p(token | all tokens before it).

    One forward pass per batch of full texts (right-padded), every position's full log-softmax: the brute-force
    oracle of the tree (tests, ``benchmarks/bench_causal_exposure.py``), written apart from the scorer's own
    :meth:`dpaudit.scoring.causal.CausalScorer.secret_log_likelihoods` so that the two check each other.
    """
    import torch

    pad, out = _pad_id(tokenizer), np.zeros(len(secrets))
    with torch.inference_mode():
        for start in range(0, len(secrets), batch_size):
            batch = secrets[start : start + batch_size]
            rows = [s.context + s.secret for s in batch]
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
                mask[i, : len(r)] = 1
            log_probs = torch.log_softmax(
                model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.double(), dim=-1
            )
            for i, s in enumerate(batch):
                positions = torch.arange(len(s.context), len(s.context) + len(s.secret), device=log_probs.device)
                true = torch.tensor(s.secret, device=log_probs.device)
                out[start + i] = float(log_probs[i, positions - 1, true].sum())
    return out


def _prefix_cache(model: Any, context: Sequence[int], device: str) -> tuple[Any, Any]:
    """The context's key/value cache and the float64 log-probabilities of the token after it [vocab]."""
    import torch

    out = model(input_ids=torch.tensor([list(context)], device=device), use_cache=True)
    return out.past_key_values, torch.log_softmax(out.logits[0, -1].double(), dim=-1)


def _take(cache: Any, rows: Any) -> Any:
    """A new key/value cache holding ``cache``'s batch rows ``rows`` (an index tensor; repeats allowed); ``cache``
    itself is left as it is (a forward pass on the new one appends to the new one only)."""
    layers = getattr(cache, "layers", None)
    if layers is not None and all(hasattr(layer, "keys") and hasattr(layer, "values") for layer in layers):
        out = copy.copy(cache)  # transformers' DynamicCache: new layer objects over indexed (new) tensors
        out.layers = []
        for layer in layers:
            new = copy.copy(layer)
            new.keys, new.values = layer.keys[rows], layer.values[rows]
            out.layers.append(new)
        return out
    if isinstance(cache, tuple):  # legacy tuples of (key, value) per layer
        return tuple(tuple(t[rows] for t in layer) for layer in cache)
    out = copy.deepcopy(cache)  # another Cache class: its own row selection
    out.batch_select_indices(rows)
    return out


def _repeat_cache(cache: Any, n: int) -> Any:
    """A batch-1 cache repeated to ``n`` rows, as a new cache (the original is left as it is, for the next chunk)."""
    import torch

    return _take(cache, torch.zeros(n, dtype=torch.long, device=_cache_device(cache)))


def _cache_device(cache: Any) -> Any:
    layers = getattr(cache, "layers", None)
    if layers:
        return layers[0].keys.device
    if isinstance(cache, tuple):
        return cache[0][0].device
    return None


def _logits_to_keep(model: Any) -> dict[str, int]:
    """``{"logits_to_keep": 1}`` when the model's forward takes it (the vocabulary projection at the last position
    only), else nothing."""
    import inspect

    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


def _continuations(model: Any, cache: Any, tokens: np.ndarray, pick: Any, *, device: str, node_batch: int) -> Any:
    """``pick`` applied to the float64 log-probabilities [chunk, k, vocab] of the token after each prefix of each
    row of ``tokens`` [rows, k] fed on top of the context's cache (position j: the token after the context and
    tokens[:, :j + 1]), chunk by chunk, concatenated: only what ``pick`` keeps is held for all rows."""
    import torch

    outs = []
    for start in range(0, tokens.shape[0], node_batch):
        rows = tokens[start : start + node_batch]
        chunk = torch.as_tensor(rows, dtype=torch.long, device=device)
        logits = model(input_ids=chunk, past_key_values=_repeat_cache(cache, chunk.shape[0]), use_cache=True).logits
        outs.append(pick(torch.log_softmax(logits.double(), dim=-1), rows))
    return torch.cat(outs)


def prefix_tree_scores(
    model: Any,
    context: Sequence[int],
    alphabet_ids: np.ndarray,
    length: int,
    *,
    device: str,
    node_batch: int = NODE_BATCH,
) -> np.ndarray:
    """The score of every candidate secret of a product space, by a prefix tree over the alphabet's tokens.

    The context runs once and its key/value cache is kept. The candidates sharing their first k symbols share the
    tree node at depth k; a node's next-token log-probabilities (over the vocabulary, read at the alphabet's tokens)
    come from one token fed on top of its parent's cache, batched across siblings and cousins (``node_batch`` nodes
    per forward pass, depth first so that at most ``length`` chunks of caches are alive): sum_{k<length} |A|^k tree
    nodes, each one token, for |A|^length candidates. A candidate's score is summed position by position in order,
    as :func:`sequence_log_likelihoods` does.

    Returns:
        [|A|^length] float64 scores, row-major over the positions (position 0 slowest: the candidate with
        symbol indices (i_0, ..., i_{L-1}) at flat index sum_j i_j |A|^(L-1-j)).
    """
    import torch

    alphabet_ids = np.asarray(alphabet_ids, dtype=np.int64)
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}.")
    with torch.inference_mode():
        cache, first = _prefix_cache(model, context, device)
        cols = torch.as_tensor(alphabet_ids, device=first.device)
        return _expand(
            model,
            cache,
            first[None, cols].cpu().numpy(),
            np.zeros(1),
            cols,
            length - 1,
            device=device,
            node_batch=node_batch,
            keep=_logits_to_keep(model),
        )


def _expand(
    model: Any,
    cache: Any,
    following: np.ndarray,
    scores: np.ndarray,
    cols: Any,
    remaining: int,
    *,
    device: str,
    node_batch: int,
    keep: dict[str, int],
) -> np.ndarray:
    """The scores of every completion below B tree nodes, in order: ``cache`` holds the nodes' B rows, ``following``
    [B, |A|] their next symbol's log-probabilities, ``scores`` [B] their own; ``remaining`` symbols still to place
    after the next one."""
    import torch

    children = (scores[:, None] + following).ravel()  # parent-major: lexicographic
    if remaining == 0:
        return children
    a, n = int(cols.numel()), scores.size
    per = max(1, node_batch // a)  # parents whose children share one forward pass
    out = []
    for start in range(0, n, per):
        count = min(per, n - start)
        rows = torch.arange(start, start + count, device=_cache_device(cache)).repeat_interleave(a)
        child_cache = _take(cache, rows)  # extended in place below: the children's own cache
        tokens = cols.repeat(count)[:, None].to(device)
        logits = model(input_ids=tokens, past_key_values=child_cache, use_cache=True, **keep).logits[:, -1]
        next_lp = torch.log_softmax(logits.double(), dim=-1)[:, cols.to(logits.device)].cpu().numpy()
        out.append(
            _expand(
                model,
                child_cache,
                next_lp,
                children[start * a : (start + count) * a],
                cols,
                remaining - 1,
                device=device,
                node_batch=node_batch,
                keep=keep,
            )
        )
    return np.concatenate(out)


def candidate_scores(
    model: Any, context: Sequence[int], candidates: np.ndarray, *, device: str, node_batch: int = NODE_BATCH
) -> np.ndarray:
    """Scores of given candidate token sequences [m, L] after one context (its cache reused): the sampled
    references of a space whose symbols are single tokens but too many to enumerate."""
    import torch

    candidates = np.asarray(candidates, dtype=np.int64)
    with torch.inference_mode():
        cache, first = _prefix_cache(model, context, device)
        tokens = torch.as_tensor(candidates, device=first.device)
        scores = first[tokens[:, 0]]
        if candidates.shape[1] > 1:
            following = _continuations(
                model,
                cache,
                candidates,
                lambda lp, rows: (
                    lp[:, :-1].gather(2, torch.as_tensor(rows[:, 1:], device=lp.device)[..., None])[..., 0].sum(dim=1)
                ),
                device=device,
                node_batch=node_batch,
            )
            scores = scores + following
    return scores.cpu().numpy()


@dataclass(frozen=True)
class Decoded:
    """A beam search's result for one canary: its beams' token ids and scores, best first."""

    beams: list[list[int]]
    scores: list[float]


def beam_decode(
    model: Any,
    tokenizer: Any,
    contexts: Sequence[Sequence[int]],
    lengths: Sequence[int],
    *,
    width: int,
    allowed: np.ndarray | None,
    device: str,
    batch_size: int,
) -> list[Decoded]:
    """Continue each context by ``lengths[i]`` tokens: greedy (``width`` 1) or beam search of ``width`` beams.

    Each step runs every live beam's full text (right-padded, batched ``batch_size`` rows at a time) and extends
    it by the tokens of highest log-probability; ``allowed`` restricts the tokens to those ids (the alphabet of a
    product space), None allows the whole vocabulary. Log-probabilities are normalized over the vocabulary in
    float64, so a beam's score is the model's log-probability of its tokens; ties go to the lower token id.
    """
    import torch

    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}.")
    pad = _pad_id(tokenizer)
    beams: list[list[tuple[list[int], float]]] = [[([], 0.0)] for _ in contexts]
    cols = None if allowed is None else np.asarray(allowed, dtype=np.int64)
    with torch.inference_mode():
        for step in range(max(lengths, default=0)):
            live = [(i, j) for i in range(len(contexts)) if step < lengths[i] for j in range(len(beams[i]))]
            rows = [list(contexts[i]) + beams[i][j][0] for i, j in live]
            parts = []
            for start in range(0, len(rows), batch_size):
                lp = _last_log_probs(model, rows[start : start + batch_size], device=device, pad=pad)
                parts.append((lp if cols is None else lp[:, torch.as_tensor(cols, device=lp.device)]).cpu().numpy())
            log_probs = np.concatenate(parts) if parts else np.zeros((0, 0))
            by_canary: dict[int, list[int]] = {}
            for r, (i, _) in enumerate(live):
                by_canary.setdefault(i, []).append(r)
            for i, rs in by_canary.items():
                base = np.asarray([beams[i][j][1] for _, j in (live[r] for r in rs)])
                total = base[:, None] + log_probs[rs]  # [beams, tokens]
                order = np.argsort(-total, axis=None, kind="stable")[:width]
                b, t = np.divmod(order, total.shape[1])
                ids = t if cols is None else cols[t]
                beams[i] = [
                    (beams[i][live[rs[bb]][1]][0] + [int(tok)], float(total[bb, tt]))
                    for bb, tt, tok in zip(b.tolist(), t.tolist(), ids.tolist())
                ]
    return [Decoded(beams=[s for s, _ in bs], scores=[v for _, v in bs]) for bs in beams]


def sampled_candidates(space: SpaceLike, m: int, *, seed: int) -> np.ndarray:
    """m candidates drawn uniformly (with replacement) from a product space, as symbol indices [m, length]
    (public randomness: the references of Carlini et al.'s sampled estimates, sec. 4.2)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, len(space.alphabet), size=(m, space.length))


def log2_size(space: SpaceLike) -> float:
    return space.length * math.log2(len(space.alphabet))
