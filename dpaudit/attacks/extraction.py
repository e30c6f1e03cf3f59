"""Extraction of each canary's secret from its prefix (causal LMs): greedy and beam decoding, by repetition count.

The model continues each canary's prefix (its tokens before the secret) by as many tokens as the secret has:
greedily, and by a beam search of ``--beam-width`` beams (:func:`dpaudit.scoring.causal_secrets.beam_decode`),
over the alphabet's tokens for a digits:N or words:N space whose symbols are single tokens in context, else over
the whole vocabulary (phrases, or a tokenizer that splits the symbols; the continuation is then compared as text).
Per canary: the greedy continuation (the fill), exact match, the Levenshtein distance over symbols (raw and divided
by the secret's length), and the secret's rank in the final beam. A secret is *extractable* when greedy decoding
from its prefix emits it (Carlini et al. 2021); with the prefix's k tokens as context this is Carlini et al. 2023's
k-extractability, k recorded in the parameters.

By repetition count against the never-inserted controls, as the masked LM's reconstruction attack does
(:func:`dpaudit.attacks.reconstruction.reconstruction_rows`): the greedy and beam exact-match rates with
Clopper-Pearson intervals, the mean normalized edit distance with its bootstrap interval, a one-sided Mann-Whitney
test of the edit distances and a one-sided Fisher exact test of the extraction rate against the controls'.

References:
  Carlini et al. 2019, "The Secret Sharer", section 8 (extracting secrets by search from the prefix).
  Carlini et al. 2021, "Extracting Training Data from Large Language Models", sections 4-5.
  Carlini et al. 2023, "Quantifying Memorization Across Neural Language Models", section 2 (k-extractable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome, BaseAttack, by_frequency
from dpaudit.attacks.options import SecretOptions, option
from dpaudit.attacks.reconstruction import _normalize, reconstruction_rows, symbol_edit_distances
from dpaudit.attacks.results import (
    ExtractionParameters,
    ExtractionResult,
    ExtractionRow,
)
from dpaudit.audit.intervals import clopper_pearson, fisher_greater
from dpaudit.common.errors import UserInputError
from dpaudit.scoring.source import CAUSAL_LM, MASKED_LM


def extraction_rows(
    frequencies: np.ndarray,
    greedy_exact: np.ndarray,
    beam_exact: np.ndarray,
    edit: np.ndarray,
    normalized: np.ndarray,
    beam_hit: np.ndarray,
    *,
    seed: int,
    level: float,
) -> tuple[ExtractionRow, ...]:
    """Reconstruction's statistics by frequency (the greedy continuation as the fill, the final beam as the top-k),
    plus the beam's exact-match rate and a Fisher test of the greedy extraction rate against the controls'."""
    base = reconstruction_rows(frequencies, greedy_exact, edit, normalized, beam_hit, seed=seed, level=level)
    controls = frequencies == 0
    control_hits, n_controls = int(greedy_exact[controls].sum()), int(controls.sum())
    rows = []
    for row, (f, idx) in zip(base, by_frequency(frequencies)):
        beam_hits = int(beam_exact[idx].sum())
        rows.append(
            ExtractionRow(
                **{name: getattr(row, name) for name in row.__dataclass_fields__},
                beam_exact_matches=beam_hits,
                beam_exact_match_ci=clopper_pearson(beam_hits, int(idx.size), level=level),
                fisher_vs_controls=None
                if f == 0
                else fisher_greater(row.exact_matches, row.n, control_hits, n_controls),
            )
        )
    return tuple(rows)


@dataclass(frozen=True, kw_only=True)
class ExtractionConfig(SecretOptions):
    """Extraction's options.

    Attributes:
        beam_width: the beam search's width (greedy decoding is always run beside it).
    """

    beam_width: int = field(
        default=5,
        metadata=option(
            "extraction (causal LMs): beams of the beam search beside greedy decoding from each canary's prefix.", min=1
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beam_width < 1:
            raise ValueError(f"--beam-width must be >= 1, got {self.beam_width}.")


class ExtractionAttack(BaseAttack):
    """Greedy and beam extraction of each canary's secret from its prefix; statistics by frequency vs the controls."""

    name: ClassVar[str] = "extraction"
    model_kinds: ClassVar[frozenset[str]] = frozenset({CAUSAL_LM})
    Config: ClassVar[type] = ExtractionConfig
    scores_canaries: ClassVar[bool] = True
    counterparts: ClassVar[Mapping[str, tuple[str, str]]] = MappingProxyType(
        {
            MASKED_LM: (
                "reconstruction",
                "--attacks extraction decodes a secret from its prefix, which needs a causal LM, and {model} "
                "is a masked LM; use --attacks reconstruction (the masked secret filled in: extraction's "
                "counterpart for a masked LM).",
            )
        }
    )
    order: ClassVar[int] = 30

    def run(self, context: AttackContext) -> AttackOutcome:
        from dpaudit.scoring import causal_secrets as cs

        options, canaries, scorer = context.options, context.canaries, context.scorer
        if options.reveal:
            raise UserInputError(
                f"--reveal {options.reveal}: extraction decodes the whole secret from its prefix; remove --reveal."
            )
        space = context.space if getattr(context.space, "alphabet", None) is not None else None
        max_length, alphabet = context.scorer.max_length, None
        warnings: tuple[str, ...] = ()
        if space is not None:
            try:
                secrets, alphabet = cs.alphabet_secrets(scorer.tokenizer, canaries, space, max_length=max_length)
            except UserInputError as err:
                warnings = (
                    f"the secret's symbols are not single tokens for this tokenizer ({err}): decoded over the "
                    "whole vocabulary and compared as text.",
                )
        if alphabet is None:
            secrets = cs.span_secrets(scorer.tokenizer, canaries, max_length=max_length)
        contexts, lengths = [s.context for s in secrets], [len(s.secret) for s in secrets]
        decode = dict(allowed=alphabet, device=scorer.device, batch_size=scorer.batch_size)
        greedy = cs.beam_decode(scorer.model, scorer.tokenizer, contexts, lengths, width=1, **decode)
        beam = cs.beam_decode(scorer.model, scorer.tokenizer, contexts, lengths, width=options.beam_width, **decode)

        if alphabet is not None and space is not None:  # (an alphabet comes from the space)
            symbol_of = dict(zip(alphabet.tolist(), space.alphabet))
            fill_symbols = [[symbol_of[t] for t in g.beams[0]] for g in greedy]
            secret_symbols = [space.split(c.secret) for c in canaries]
            fills = [" ".join(f) for f in fill_symbols]
            kind = f"greedy continuation of the prefix over the {space.format} alphabet's tokens"
        else:  # compared as the tokenizer decodes them: the secret's own tokens decoded the same way as the fill's
            decoded = [_normalize(scorer.tokenizer.decode(s.secret)) for s in secrets]
            fills = [scorer.tokenizer.decode(g.beams[0]).strip() for g in greedy]
            fill_symbols = [_normalize(f).split() for f in fills]
            secret_symbols = [d.split() for d in decoded]
            kind = (
                "greedy continuation of the prefix over the vocabulary, as many tokens as the secret has, decoded "
                "(edit distance over the words of the decoded fill and of the secret's own tokens decoded)"
            )

        def matches(tokens: list[int], i: int) -> bool:
            if tokens == secrets[i].secret:
                return True
            return alphabet is None and _normalize(scorer.tokenizer.decode(tokens)) == decoded[i]

        greedy_exact = np.asarray([matches(g.beams[0], i) for i, g in enumerate(greedy)], dtype=bool)
        beam_exact = np.asarray([matches(b.beams[0], i) for i, b in enumerate(beam)], dtype=bool)
        beam_rank = [
            next((r + 1 for r, tokens in enumerate(b.beams) if matches(tokens, i)), None) for i, b in enumerate(beam)
        ]
        edit, normalized = symbol_edit_distances(list(zip(fill_symbols, secret_symbols)))
        fields = {
            c.id: {
                "fill": fills[i],
                "exact": bool(greedy_exact[i]),
                "edit_distance": int(edit[i]),
                "normalized_edit_distance": float(normalized[i]),
                "top_k_rank": beam_rank[i],
            }
            for i, c in enumerate(canaries)
        }
        beam_hit = np.asarray([r is not None for r in beam_rank], dtype=bool)
        params = ExtractionParameters(
            secret_format=space.format if space is not None else (canaries[0].format if canaries else "phrases"),
            reveal=0,
            top_k=options.beam_width,
            fill=kind,
            bootstrap_seed=options.seed,
            beam_width=options.beam_width,
            decoding=f"greedy (extractable) and beam search of width {options.beam_width} (top_k_rank: the secret's "
            "place in the final beam), log-probabilities over the vocabulary",
            context_tokens_min=min((len(c) for c in contexts), default=None),
            context_tokens_max=max((len(c) for c in contexts), default=None),
        )
        rows = extraction_rows(
            context.frequencies,
            greedy_exact,
            beam_exact,
            edit,
            normalized,
            beam_hit,
            seed=options.seed,
            level=options.level,
        )
        if not (context.frequencies == 0).any():
            warnings += ("no control canaries (frequency 0): no baseline to compare with.",)
        return AttackOutcome(ExtractionResult(parameters=params, rows=rows, warnings=warnings), fields)
