"""Masked-secret reconstruction (Anil et al. 2021, Figure 7): the model's top-1 fill of the secret.

All secret positions are masked at once; the fill takes the most likely symbol at each position
(over the space's alphabet; over the whole vocabulary for phrase secrets), decoded to text. Per
canary: exact match, the Levenshtein distance from the fill to the true secret over its symbols (digits,
or words: a substituted digit costs 1, the spaces between digits nothing), raw and divided by the
secret's length in symbols (so 1.0 is the maximum for a fill of the same length: a 4-digit secret's
spaced text "2 8 1 7" has 7 characters, and dividing by those capped it at 4/7) and, for product spaces, the rank of the true secret among the k best fills
(a beam over positions: exact, since a candidate's score is a sum of independent per-position
scores, so every prefix of a top-k sequence is itself among the top-k prefixes).

With ``--reveal K`` the fill and the distances concern the masked (last) positions only.

References:
  Anil et al. 2021, "Large-Scale Differentially Private BERT", section 5.4 and Figure 7.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

import Levenshtein
import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome, BaseAttack, by_frequency
from dpaudit.attacks.options import SecretOptions, option
from dpaudit.attacks.results import (
    ReconstructionParameters,
    ReconstructionResult,
    ReconstructionRow,
)
from dpaudit.audit.intervals import (
    bootstrap_interval,
    clopper_pearson,
    mann_whitney_greater,
)
from dpaudit.scoring.source import CAUSAL_LM, MASKED_LM


def top_k_fills(log_probs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k highest-scoring fills of each canary by beam search over positions (exact here).

    Args:
        log_probs: [n, positions, alphabet] per-position log-probabilities.
        k: beam width (clipped to the space size).

    Returns:
        (indices [n, k', positions], scores [n, k']) sorted best first, ties broken by index.
    """
    n, m, a = log_probs.shape
    seqs = np.zeros((n, 1, 0), dtype=np.int64)
    scores = np.zeros((n, 1))
    for pos in range(m):
        cand = scores[:, :, None] + log_probs[:, pos, None, :]  # [n, beam, a]
        flat = cand.reshape(n, -1)
        width = min(k, flat.shape[1])
        order = np.argsort(-flat, axis=1, kind="stable")[:, :width]
        beam, sym = np.divmod(order, a)
        seqs = np.concatenate([np.take_along_axis(seqs, beam[:, :, None], axis=1), sym[:, :, None]], axis=2)
        scores = np.take_along_axis(flat, order, axis=1)
    return seqs, scores


def _normalize(text: str) -> str:
    return " ".join(text.lower().split())


def symbol_edit_distances(pairs: list[tuple[list[str], list[str]]]) -> tuple[np.ndarray, np.ndarray]:
    """(Levenshtein distance over symbols, that distance / the secret's length in symbols) of each (fill, secret) pair
    of symbol lists (digits or words): 1.0 is the most a fill of the secret's length can be off."""
    edit = np.asarray([Levenshtein.distance(f, s) for f, s in pairs], dtype=np.float64)
    return edit, edit / np.asarray([max(len(s), 1) for _, s in pairs], dtype=np.float64)


def reconstruction_rows(
    frequencies: np.ndarray,
    exact: np.ndarray,
    edit: np.ndarray,
    normalized: np.ndarray,
    top_k_hit: np.ndarray | None,
    *,
    seed: int,
    level: float,
) -> tuple[ReconstructionRow, ...]:
    """Statistics by frequency; each inserted group's normalized edit distance tested (lower) against the controls."""
    controls = normalized[frequencies == 0]
    rows = []
    for f, idx in by_frequency(frequencies):
        hits = int(exact[idx].sum())
        rows.append(
            ReconstructionRow(
                frequency=f,
                n=int(idx.size),
                exact_matches=hits,
                exact_match_rate=hits / idx.size,
                exact_match_ci=clopper_pearson(hits, int(idx.size), level=level),
                edit_distance_mean=float(edit[idx].mean()),
                normalized_edit_distance_mean=float(normalized[idx].mean()),
                normalized_edit_distance_ci=bootstrap_interval(normalized[idx], np.mean, seed=seed, level=level),
                top_k_hits=None if top_k_hit is None else int(top_k_hit[idx].sum()),
                vs_controls=None if f == 0 else mann_whitney_greater(-normalized[idx], -controls),
            )
        )
    return tuple(rows)


@dataclass(frozen=True, kw_only=True)
class ReconstructionConfig(SecretOptions):
    """Reconstruction's options.

    Attributes:
        top_k: beam width for the rank of the true secret among the top-k fills (0 = off).
    """

    top_k: int = field(
        default=10, metadata=option("Beam width for the true secret's rank among the best fills (0: off).", min=0)
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}.")


class ReconstructionAttack(BaseAttack):
    """Top-1 fill, exact match, edit distance and top-k rank of each canary's masked secret."""

    name: ClassVar[str] = "reconstruction"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM})
    Config: ClassVar[type] = ReconstructionConfig
    scores_canaries: ClassVar[bool] = True
    counterparts: ClassVar[Mapping[str, tuple[str, str]]] = MappingProxyType(
        {
            CAUSAL_LM: (
                "extraction",
                "--attacks reconstruction fills a masked secret, and {model} is a causal-lm with no mask; use "
                "--attacks extraction (the secret decoded from its prefix, greedy and beam).",
            )
        }
    )
    order: ClassVar[int] = 20

    def run(self, context: AttackContext) -> AttackOutcome:
        options, space, canaries = context.options, context.space, context.canaries
        reveal = options.reveal if space is not None else 0
        top_k_rank: list[int | None] = [None] * len(canaries)
        if space is not None:
            log_probs = context.masked_log_probs
            best = log_probs.argmax(axis=-1)
            truth = context.secret_indices[:, reveal:]
            fill_symbols = [[space.alphabet[j] for j in row] for row in best.tolist()]
            secret_symbols = [space.split(c.secret)[reveal:] for c in canaries]
            fills, secrets = [" ".join(f) for f in fill_symbols], [" ".join(s) for s in secret_symbols]
            exact = (best == truth).all(axis=1)
            top_k_hit = None
            if options.top_k:
                seqs, _ = top_k_fills(log_probs, options.top_k)
                match = (seqs == truth[:, None, :]).all(axis=2)  # [n, k]
                top_k_hit = match.any(axis=1)
                top_k_rank = [int(np.argmax(m)) + 1 if m.any() else None for m in match]
            fill_kind = f"argmax per position over the {space.format} alphabet"
        else:
            fills = [f.text for f in context.vocab_fills]
            secrets = [c.secret for c in canaries]
            exact = np.asarray([_normalize(f) == _normalize(s) for f, s in zip(fills, secrets)], dtype=bool)
            top_k_hit = None
            fill_kind = "argmax per position over the vocabulary (secret tokens masked at once), decoded"
        if space is not None:
            pairs = list(zip(fill_symbols, secret_symbols))
        else:  # phrases: words of the normalized texts
            pairs = [(_normalize(f).split(), _normalize(s).split()) for f, s in zip(fills, secrets)]
        edit, normalized = symbol_edit_distances(pairs)
        fields = {
            c.id: {
                "fill": fills[i],
                "exact": bool(exact[i]),
                "edit_distance": int(edit[i]),
                "normalized_edit_distance": float(normalized[i]),
                "top_k_rank": top_k_rank[i],
            }
            for i, c in enumerate(canaries)
        }
        params = ReconstructionParameters(
            secret_format=space.format if space is not None else canaries[0].format,
            reveal=reveal,
            top_k=options.top_k if space is not None else None,
            fill=fill_kind,
            bootstrap_seed=options.seed,
        )
        rows = reconstruction_rows(
            context.frequencies, exact, edit, normalized, top_k_hit, seed=options.seed, level=options.level
        )
        return AttackOutcome(ReconstructionResult(parameters=params, rows=rows), fields)
