"""Exposure (Carlini et al. 2019), exact, by repetition count.

exposure(s) = log2 |R| - log2 rank(s), rank = 1 + #candidates scored strictly better. With every
secret position masked at once, a masked LM scores a candidate by the sum of its per-position
log-probabilities, so the rank is computed exactly from the [positions, alphabet] table
(:func:`dpaudit.attacks.exposure_rank.exposure_rank`), never by sampling. Ties within the tolerance
make the rank an interval; the statistics use the lower end of each canary's exposure (ties counted
against the canary), so they never overstate memorization.

With ``--reveal K`` the first K secret tokens are shown and the rank is over the remaining
positions' space, |R| = |alphabet|^(positions - K).

A causal LM (the Secret Sharer's own setting) scores a candidate by its log-likelihood given the prefix,
which does not factor over positions: :func:`causal_exposure_intervals` scores every candidate by a prefix
tree (:func:`dpaudit.scoring.causal_secrets.prefix_tree_scores`, method ``enumerate``) when |R| is at most
``exposure_limit`` and every symbol is one token in context, and otherwise estimates the rank from
``exposure_samples`` uniformly drawn candidates (Carlini et al.'s interpolation, sec. 4.2, with the skew-normal
extrapolation beside it). The method is recorded per canary (``rank_method``).

References:
  Carlini et al. 2019, "The Secret Sharer: Evaluating and Testing Unintended Memorization in
  Neural Networks", sections 4-5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import ClassVar

import numpy as np

from dpaudit.attacks.base import AttackContext, AttackOutcome, BaseAttack, by_frequency
from dpaudit.attacks.exposure_rank import RankInterval, sampled_exposure
from dpaudit.attacks.options import SecretOptions, option
from dpaudit.attacks.results import ExposureParameters, ExposureResult, ExposureRow
from dpaudit.audit.intervals import (
    bootstrap_interval,
    log_frequency_slope,
    mann_whitney_greater,
)
from dpaudit.common.errors import UserInputError
from dpaudit.common.progress import progress_bar
from dpaudit.scoring.source import CAUSAL_LM, MASKED_LM

PHRASES_WARNING = (
    "exposure needs a secret space with a finite per-position alphabet (digits:N, words:N); phrase and "
    "designed (new-tokens, rare-tokens) canaries have none, so exposure was not computed (see the "
    "reconstruction attack, and the canary attack's pseudo-log-likelihood)."
)
#: :data:`PHRASES_WARNING` for a causal LM (nothing is masked: extraction, and the canary attack's log-likelihood).
CAUSAL_PHRASES_WARNING = PHRASES_WARNING.replace(
    "reconstruction attack, and the canary attack's pseudo-log-likelihood",
    "extraction attack, and the canary attack's log-likelihood",
)


def exposure_rows(
    exposures: np.ndarray, frequencies: np.ndarray, *, seed: int, level: float
) -> tuple[ExposureRow, ...]:
    """Statistics of per-canary exposures by frequency; each inserted group tested against the controls."""
    controls = exposures[frequencies == 0]
    rows = []
    for f, idx in by_frequency(frequencies):
        x = exposures[idx]
        rows.append(
            ExposureRow(
                frequency=f,
                n=int(x.size),
                mean=float(x.mean()),
                median=float(np.median(x)),
                max=float(x.max()),
                mean_ci=bootstrap_interval(x, np.mean, seed=seed, level=level),
                median_ci=bootstrap_interval(x, np.median, seed=seed, level=level),
                vs_controls=None if f == 0 else mann_whitney_greater(x, controls),
            )
        )
    return tuple(rows)


def tree_rank(scores: np.ndarray, secret_index: int, *, tolerance: float) -> RankInterval:
    """The rank interval of the candidate at ``secret_index`` among every candidate's score (all of R scored)."""
    own = scores[secret_index]
    better = int(np.count_nonzero(scores > own + tolerance))
    at_least = int(np.count_nonzero(scores >= own - tolerance))
    return RankInterval(better=better, tied=at_least - better - 1, space_size=int(scores.size), method="enumerate")


def tie_secret_draws(scores: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``scores`` (the secret's first, then the sampled candidates') with every draw of the secret itself scored
    exactly as the secret: a uniform sample of R contains the secret about M / |R| times, and the same text scored in
    another batch (other padding, another thread count) differs by float noise, which would put it on either side
    of the secret's score at random, not tie it. ``rows``: the candidates' symbol indices, the secret's first."""
    tied = np.array(scores, dtype=np.float64)
    same = np.all(rows[1:] == rows[0], axis=1)
    tied[1:][same] = tied[0]
    return tied


def causal_exposure_intervals(context: AttackContext) -> tuple[list[RankInterval], list[float], str | None]:
    """Each canary's exposure rank interval on a causal LM, its skew-normal exposure estimate (NaN when exact),
    and a note saying why the ranks were sampled (None when exact): :func:`_causal_exposure_intervals`, computed
    once per context (the exposure and canary attacks both read it)."""
    cache = vars(context)
    if "_causal_exposure" not in cache:
        cache["_causal_exposure"] = _causal_exposure_intervals(context)
    return cache["_causal_exposure"]


def _causal_exposure_intervals(context: AttackContext) -> tuple[list[RankInterval], list[float], str | None]:
    """Each canary's exposure rank interval on a causal LM, its skew-normal exposure estimate (NaN when exact),
    and a note saying why the ranks were sampled (None when exact).

    Exact (a prefix tree, every candidate scored) when |R| <= ``exposure_limit`` and every alphabet symbol is one
    token in context; otherwise the sampled estimates from ``exposure_samples`` candidates drawn uniformly from R
    (the same draws for every canary), each canary's secret scored alongside them in the same way.
    """
    from dpaudit.scoring import causal_secrets as cs

    options, space, canaries, scorer = context.options, context.space, context.canaries, context.scorer
    model, tokenizer, device = scorer.model, scorer.tokenizer, scorer.device
    size, a = space.size, len(space.alphabet)
    try:
        secrets, alphabet = cs.alphabet_secrets(tokenizer, canaries, space, max_length=context.scorer.max_length)
        single = True
        note = (
            None
            if size <= options.exposure_limit
            else (
                f"|R| = {size:,} is above --exposure-limit {options.exposure_limit:,}: exposure is Carlini et al.'s sampled "
                f"estimate from {options.exposure_samples:,} uniformly drawn candidates (it cannot exceed log2 of that)"
            )
        )
    except UserInputError as err:
        single, note = (
            False,
            (
                f"the secret's symbols are not single tokens for this tokenizer ({err}): exposure is "
                f"Carlini et al.'s sampled estimate from {options.exposure_samples:,} uniformly drawn "
                "candidates"
            ),
        )
    intervals, skew = [], []
    if single and note is None:
        bar = progress_bar(list(zip(canaries, secrets)), desc="exposure (prefix tree)", unit="canary")
        for canary, secret in bar:
            scores = cs.prefix_tree_scores(model, secret.context, alphabet, space.length, device=device)
            index = int(np.ravel_multi_index(space.index_of(canary.secret), (a,) * space.length))
            intervals.append(tree_rank(scores, index, tolerance=options.tolerance))
            skew.append(float("nan"))
        return intervals, skew, None
    references = cs.sampled_candidates(space, options.exposure_samples, seed=options.seed)
    assert note is not None  # (the exact case, without a note, returned above)
    sampled = progress_bar(list(enumerate(canaries)), desc="exposure (sampled)", unit="canary")
    for i, canary in sampled:
        rows = np.vstack([np.asarray(space.index_of(canary.secret))[None, :], references])
        if single:
            scores = cs.candidate_scores(model, secrets[i].context, alphabet[rows], device=device)
        else:
            texts = [
                SimpleNamespace(id=canary.id, prefix=canary.prefix, secret=space.secret_of(r), suffix=canary.suffix)
                for r in rows.tolist()
            ]
            scores = scorer.secret_log_likelihoods(texts)  # the scorer's own: each secret's tokens given its prefix
        scores = tie_secret_draws(scores, rows)
        intervals.append(
            sampled_exposure(scores[0], scores[1:], size, method="interpolation", tolerance=options.tolerance)
        )
        try:
            skew.append(sampled_exposure(scores[0], scores[1:], size, method="skewnorm").exposure_low)
        except ValueError:  # all reference scores equal: no fit
            skew.append(float("nan"))
    return intervals, skew, note + "; the skew-normal extrapolation is in exposure_skewnorm."


@dataclass(frozen=True, kw_only=True)
class ExposureConfig(SecretOptions):
    """Exposure's options.

    On a causal LM, exposure is exact up to a size of the secret space and sampled above it.

    Attributes:
        exposure_limit: a causal LM's exposure is exact (every candidate scored by a prefix tree) up to this |R|;
            above it, Carlini et al.'s sampled estimates.
        exposure_samples: candidates drawn uniformly from R for the sampled estimates (causal LMs).
    """

    exposure_limit: int = field(
        default=10**5,
        metadata=option(
            "exposure (causal LMs): exact (every candidate scored by a prefix tree) up to |R| = N; above, Carlini et al.'s "
            "sampled estimates from --exposure-samples candidates.",
            metavar="N",
            min=1,
        ),
    )
    exposure_samples: int = field(
        default=1000,
        metadata=option(
            "exposure (causal LMs): candidates drawn uniformly for the sampled estimates (resolve at most log2 M bits).",
            metavar="M",
            min=3,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.exposure_limit < 1:
            raise ValueError(f"--exposure-limit must be >= 1, got {self.exposure_limit}.")
        if self.exposure_samples < 3:
            raise ValueError(
                f"--exposure-samples must be >= 3 (a skew-normal fit needs 3), got {self.exposure_samples}."
            )


class ExposureAttack(BaseAttack):
    """Exact exposure of every canary; statistics by frequency with the controls as the baseline."""

    name: ClassVar[str] = "exposure"
    model_kinds: ClassVar[frozenset[str]] = frozenset({MASKED_LM, CAUSAL_LM})
    Config: ClassVar[type] = ExposureConfig
    scores_canaries: ClassVar[bool] = True
    order: ClassVar[int] = 10

    def run(self, context: AttackContext) -> AttackOutcome:
        options, space = context.options, context.space
        if context.is_causal and options.reveal:
            raise UserInputError(
                f"--reveal {options.reveal}: a causal LM is scored from the secret's prefix, with "
                "nothing masked; remove --reveal."
            )
        if space is None or (context.is_causal and getattr(space, "alphabet", None) is None):
            params = ExposureParameters(
                secret_format=context.canaries[0].format if context.canaries else "phrases",
                log2_space_size=None,
                reveal=options.reveal,
                tolerance=options.tolerance,
                bootstrap_seed=options.seed,
            )
            warning = CAUSAL_PHRASES_WARNING if context.is_causal else PHRASES_WARNING
            return AttackOutcome(ExposureResult(parameters=params, warnings=(warning,)))
        notes: tuple[str, ...] = ()
        if context.is_causal:
            intervals, skew, note = causal_exposure_intervals(context)
            notes = () if note is None else (note,)
        else:
            intervals, skew = context.exposure_intervals, [float("nan")] * len(context.canaries)
        fields, low = {}, np.empty(len(context.canaries))
        bar = progress_bar(context.canaries, desc="exposure ranks", unit="canary")
        for i, (canary, interval) in enumerate(zip(bar, intervals)):
            low[i] = interval.exposure_low
            fields[canary.id] = {
                "rank_low": int(interval.rank_low),
                "rank_high": int(interval.rank_high),
                "rank_method": interval.method,
                "exposure_low": float(interval.exposure_low),
                "exposure_high": float(interval.exposure_high),
            }
            if not np.isnan(skew[i]):
                fields[canary.id]["exposure_skewnorm"] = skew[i]
        freqs = context.frequencies
        params = ExposureParameters(
            secret_format=space.format,
            log2_space_size=(space.length - options.reveal) * math.log2(len(space.alphabet)),
            reveal=options.reveal,
            tolerance=options.tolerance,
            bootstrap_seed=options.seed,
        )
        warnings = notes + (
            () if (freqs == 0).any() else ("no control canaries (frequency 0): no baseline to compare with.",)
        )
        result = ExposureResult(
            parameters=params,
            rows=exposure_rows(low, freqs, seed=options.seed, level=options.level),
            slope_per_doubling=log_frequency_slope(freqs, low),
            warnings=warnings,
        )
        return AttackOutcome(result, fields)
