"""What every attack receives and returns: options, a shared context, and the Attack protocol.

Attacks are small classes registered by name (:mod:`dpaudit.attacks.registry`). Each declares the
model kinds it supports, and ``run(context)`` returns an :class:`AttackOutcome`: its typed summary
plus per-canary fields. The context computes each expensive model query once (the masked
log-probabilities are shared by exposure and reconstruction) and caches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from dpaudit.attacks.results import AttackResult


@dataclass(frozen=True, kw_only=True)
class AttackOptions:
    """Knobs shared by the attacks of one run (all serializable; recorded in the manifest).

    Attributes:
        batch_size: examples per forward pass.
        reveal: partial reveal: the first ``reveal`` secret tokens are shown, the rest masked.
        top_k: beam width for the rank of the true secret among the top-k fills (0 = off).
        seed: seeds the bootstrap (and any other randomness of the statistics).
        tolerance: score difference below which a candidate ties the secret (exposure ranks).
        level: confidence level of every interval.
        shadow_models: shadow / reference models for the shadow, LiRA and RMIA attacks.
        attack_model: the shadow attack's classifier: ``"logreg"`` or ``"gbdt"``.
        reference_model: a reference model directory for the ``ref`` attack (None: train one on public.jsonl).
        max_shadow_minutes: stop starting new shadow models after this many minutes (None: no limit).
        shadow_cache: the shadow-model cache directory (the attack stage sets its default: ``$DPAUDIT_CACHE/shadows``,
            else ``<out>-shadows``, else a temporary folder removed afterwards).
        fprs: FPRs asked for explicitly (refused when the non-members cannot measure them); None: 0.1% and 1%, warned.
        mia_examples: at most this many members (and as many non-members) in the examples task (None: all).
        lira_global_variance: LiRA fits one variance over all examples whatever the shadow count (= ``lira_variance``
            ``"global"``).
        lira_variance: LiRA's variance fit, ``auto`` (shared below 64 shadows, per-example from 64), ``global`` or
            ``per-example`` (:data:`dpaudit.attacks.lira.LIRA_HELP` says why).
        lira_offline: offline LiRA's test, ``one-sided`` (the paper's log Phi) or ``two-sided`` (the reference code).
        blind_baseline: run the blind baseline (:mod:`dpaudit.attacks.blind`) beside any membership attack.
        min_k: the fraction k of each text's lowest-scoring tokens the min-k and min-k++ attacks average (causal LMs).
        shadow_overrides: Config fields replaced in every shadow/reference model (Python API only: e.g. fewer steps
            in tests; the result records them, since shadows then differ from the target's recipe).
        workers: shadow/reference models trained at once (:func:`dpaudit.training.fleet.run_fleet`; None: one at a
            time in this process).
        ray_address: a Ray cluster to train them on (None: a local instance when ``workers`` asks for one).
        shadow_trainer, shadow_config: the registered trainer and a JSON file of its Config fields, for shadows of a
            model trained elsewhere (no dpaudit manifest), or to replace the recipe of the target's manifest.
        shadow_dirs: user-supplied shadow models (directories holding ``members.json``, or text files listing
            them); no shadow is trained (:mod:`dpaudit.attacks.shadow_models`).
        claimed_epsilon, claimed_delta: the privacy claim of a model trained elsewhere (no ``privacy.json``).
        claimed_from_opacus: an Opacus accountant's saved state (its ``history`` of (noise multiplier, sample rate,
            steps)): the claim of a model trained elsewhere with Opacus, accounted here at ``claimed_delta``.
        beam_width: the extraction attack's beam width (causal LMs; greedy decoding is always run beside it).
        exposure_limit: a causal LM's exposure is exact (every candidate scored by a prefix tree) up to this |R|; above
            it, Carlini et al.'s sampled estimates.
        exposure_samples: candidates drawn uniformly from R for the sampled estimates (causal LMs).
    """

    batch_size: int = 32
    reveal: int = 0
    top_k: int = 10
    seed: int = 0
    tolerance: float = 1e-9
    level: float = 0.95
    shadow_models: int = 4
    attack_model: str = "logreg"
    reference_model: str | None = None
    max_shadow_minutes: float | None = None
    shadow_cache: str | None = None
    fprs: tuple[float, ...] | None = None
    mia_examples: int | None = None
    lira_global_variance: bool = False
    lira_variance: str = "auto"
    lira_offline: str = "one-sided"
    blind_baseline: bool = True
    min_k: float = 0.2
    shadow_overrides: dict[str, Any] | None = None
    workers: int | None = None
    ray_address: str | None = None
    shadow_trainer: str | None = None
    shadow_config: str | None = None
    shadow_dirs: tuple[str, ...] | None = None
    claimed_epsilon: float | None = None
    claimed_delta: float | None = None
    claimed_from_opacus: str | None = None
    beam_width: int = 5
    exposure_limit: int = 10**5
    exposure_samples: int = 1000

    def __post_init__(self) -> None:
        if self.shadow_models < 1:
            raise ValueError(f"--shadow-models must be >= 1, got {self.shadow_models}.")
        if self.attack_model not in ("logreg", "gbdt"):
            raise ValueError(f"--attack-model must be logreg or gbdt, got {self.attack_model!r}.")
        if self.max_shadow_minutes is not None and not self.max_shadow_minutes > 0:
            raise ValueError(f"--max-shadow-minutes must be > 0, got {self.max_shadow_minutes}.")
        if self.fprs is not None and not all(0 < f < 1 for f in self.fprs):
            raise ValueError(f"--fpr values must be in (0, 1), got {self.fprs}.")
        if self.mia_examples is not None and self.mia_examples < 2:
            raise ValueError(f"--mia-examples must be >= 2, got {self.mia_examples}.")
        if not 0 < self.min_k <= 1:
            raise ValueError(f"--min-k must be a fraction in (0, 1], got {self.min_k}.")
        if self.lira_variance not in ("auto", "global", "per-example"):
            raise ValueError(f"--lira-variance must be auto, global or per-example, got {self.lira_variance!r}.")
        if self.lira_offline not in ("one-sided", "two-sided"):
            raise ValueError(f"--lira-offline must be one-sided or two-sided, got {self.lira_offline!r}.")
        if self.workers is not None and self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}.")
        if self.shadow_config is not None and self.shadow_trainer is None:
            raise ValueError("--shadow-config needs --shadow-trainer NAME (the registered trainer the config is for).")
        if self.claimed_from_opacus is not None:
            if self.claimed_epsilon is not None:
                raise ValueError("--claimed-from-opacus states the claim through its accountant's history; remove "
                                 "--claimed-epsilon (keep --claimed-delta: the delta to read epsilon at).")
            if self.claimed_delta is None:
                raise ValueError("--claimed-from-opacus needs --claimed-delta D: the delta at which the history's "
                                 "epsilon is read (Opacus's get_epsilon(delta)).")
        elif (self.claimed_epsilon is None) != (self.claimed_delta is None):
            raise ValueError("--claimed-epsilon and --claimed-delta go together: state the whole (epsilon, delta) claim.")
        if self.claimed_epsilon is not None and not (self.claimed_epsilon > 0 and self.claimed_epsilon < float("inf")):
            raise ValueError(f"--claimed-epsilon must be a finite number > 0, got {self.claimed_epsilon}.")
        if self.claimed_delta is not None and not 0 < self.claimed_delta < 1:
            raise ValueError(f"--claimed-delta must be in (0, 1), got {self.claimed_delta}.")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}.")
        if self.reveal < 0:
            raise ValueError(f"reveal must be >= 0, got {self.reveal}.")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}.")
        if not 0 <= self.tolerance < 1:
            raise ValueError(f"tolerance must be in [0, 1), got {self.tolerance}.")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1), got {self.level}.")
        if self.beam_width < 1:
            raise ValueError(f"--beam-width must be >= 1, got {self.beam_width}.")
        if self.exposure_limit < 1:
            raise ValueError(f"--exposure-limit must be >= 1, got {self.exposure_limit}.")
        if self.exposure_samples < 3:
            raise ValueError(f"--exposure-samples must be >= 3 (a skew-normal fit needs 3), got {self.exposure_samples}.")


@dataclass
class AttackContext:
    """The target model, the inject run and the options, with shared model queries cached.

    Attributes:
        scorer: the model (:class:`dpaudit.scoring.Scorer`).
        canaries: the inject run's canaries (frequency 0 = controls).
        space: the finite product secret space, or None for phrases.
        options: see :class:`AttackOptions`.
        data: the verified inject run (for attacks that read its files).
    """

    scorer: Any
    canaries: Sequence[Any]
    space: Any
    options: AttackOptions
    data: Any = None

    @cached_property
    def frequencies(self) -> np.ndarray:
        return np.asarray([c.frequency for c in self.canaries], dtype=np.int64)

    @cached_property
    def masked_log_probs(self) -> np.ndarray:
        """[n, positions - reveal, |alphabet|] log-probabilities (one scoring pass per run)."""
        return self.scorer.masked_log_probs(self.canaries, self.space, reveal=self.options.reveal)

    @cached_property
    def secret_indices(self) -> np.ndarray:
        """[n, positions] alphabet index of each canary's secret symbol at each position."""
        return np.asarray([self.space.index_of(c.secret) for c in self.canaries], dtype=np.int64)

    @cached_property
    def exposure_intervals(self) -> list[Any]:
        """Each canary's exact exposure rank interval (:func:`dpaudit.attacks.exposure_rank.exposure_rank`), in
        canary order, ranked in threads: numpy releases the GIL in the sorts and searches that dominate, so a
        2-core machine ranks two at once (same results). Shared by the exposure and canary attacks."""
        import os

        from dpaudit.attacks.exposure_rank import exposure_ranks

        secrets = self.secret_indices[:, self.options.reveal:]
        return exposure_ranks(self.masked_log_probs, secrets, tolerance=self.options.tolerance,
                              workers=max(1, min(4, os.cpu_count() or 1)))

    @cached_property
    def is_causal(self) -> bool:
        """Whether the target is a causal LM (its secrets are scored and extracted from their prefix)."""
        from dpaudit.scoring.source import CAUSAL_LM

        kind = getattr(self.scorer, "kind", None) or getattr(getattr(self.scorer, "source", None), "kind", None)
        return kind == CAUSAL_LM

    @cached_property
    def vocab_fills(self) -> list[Any]:
        """Top-1 fills over the vocabulary (phrases)."""
        return self.scorer.vocab_fills(self.canaries)


@dataclass(frozen=True)
class AttackOutcome:
    """An attack's summary, per canary id the :class:`~dpaudit.attacks.results.CanaryScore` fields it set, and
    extra score files (``scores/mia_<attack>.jsonl`` -> rows) for the attack directory."""

    result: AttackResult
    canary_fields: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    score_files: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)


@runtime_checkable
class Attack(Protocol):
    """An attack: a name, the model kinds it supports, and ``run``."""

    name: ClassVar[str]
    model_kinds: ClassVar[frozenset[str]]

    def run(self, context: AttackContext) -> AttackOutcome: ...


def by_frequency(frequencies: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(frequency, row indices) groups in increasing frequency, controls (0) first."""
    return [(int(f), np.flatnonzero(frequencies == f)) for f in np.unique(frequencies)]
