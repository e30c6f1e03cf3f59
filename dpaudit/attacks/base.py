"""What every attack is, receives and returns: its class attributes, a shared context, and the Attack protocol.

Attacks are small classes registered by name under the entry-point group ``dpaudit.attacks``
(:mod:`dpaudit.attacks.registry`). Each declares its options (a frozen ``Config``, :mod:`dpaudit.attacks.options`)
and its properties as class attributes (:class:`BaseAttack`: the model kinds it supports, whether it is a
membership attack, trains models, scores the canaries...), which the registry, ``dpaudit attack`` and the run read
generically; ``run(context)`` returns an :class:`AttackOutcome`: its typed summary plus per-canary fields. The
context computes each expensive model query once (the masked log-probabilities are shared by exposure and
reconstruction) and caches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from dpaudit.attacks.options import NoOptions
from dpaudit.attacks.results import AttackResult


@dataclass
class AttackContext:
    """The target model, the inject run and the options, with shared model queries cached.

    Attributes:
        scorer: the model (:class:`dpaudit.scoring.Scorer`).
        canaries: the inject run's canaries (frequency 0 = controls).
        space: the finite product secret space, or None for phrases.
        options: the run's options (:class:`dpaudit.attacks.registry.AttackOptions`): every attack's fields read by
            name (``context.options.min_k``), the attack's own Config by ``context.options.of(cls)``.
        data: the verified inject run (for attacks that read its files).
    """

    scorer: Any
    canaries: Sequence[Any]
    space: Any
    options: Any
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

        secrets = self.secret_indices[:, self.options.reveal :]
        return exposure_ranks(
            self.masked_log_probs,
            secrets,
            tolerance=self.options.tolerance,
            workers=max(1, min(4, os.cpu_count() or 1)),
        )

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
    """An attack: a name, the model kinds it supports, its options' ``Config``, and ``run``."""

    name: ClassVar[str]
    model_kinds: ClassVar[frozenset[str]]
    Config: ClassVar[type]

    def run(self, context: AttackContext) -> AttackOutcome: ...


class BaseAttack:
    """The properties of an attack, as class attributes, with the values of an attack that has none of them.

    The registry, ``dpaudit attack`` and the run read them from the class (a plug-in that does not subclass this
    gets these defaults), never from the attack's name. A subclass sets ``name``, ``model_kinds``, ``Config`` and
    what applies of the rest, and implements ``run``.

    Attributes:
        name: the name ``--attacks`` takes (the entry point's name).
        model_kinds: the model kinds (:mod:`dpaudit.scoring.source`) it runs on.
        Config: the frozen keyword-only dataclass of its options (:mod:`dpaudit.attacks.options`): each field is an
            option of ``dpaudit attack``, and ``context.options`` reads it by name.
        membership: it scores the membership tasks (train.jsonl members vs heldout.jsonl non-members) from the model:
            the blind baseline runs beside it.
        baseline: it is the baseline that never queries the model (run beside the membership attacks, never in
            the headline).
        scores_canaries: it scores the inject run's canaries (refused on an inject run without any).
        designs: the secret-space kinds (``secret_space.kind`` of the inject manifest) it knows a score for; None:
            every kind.
        counterparts: model kind -> (the attack that does this one's job on that kind, the refusal naming it, with
            ``{model}``): a default attack is replaced by it, an explicit one refused with the message.
        one_run_default: it joins the default attacks when the canaries are coin-flip ones (the one-run audit).
        default_when_able: it joins the default attacks on the model kinds it supports whenever its :meth:`check`
            passes on the target (the attacks against the target's base: when that base is known).
        order: its place in ``--attacks all`` (and so in ``results.json`` and the report); plug-ins come after the
            built-in attacks.
    """

    name: ClassVar[str] = ""
    model_kinds: ClassVar[frozenset[str]] = frozenset()
    Config: ClassVar[type] = NoOptions
    membership: ClassVar[bool] = False
    baseline: ClassVar[bool] = False
    scores_canaries: ClassVar[bool] = False
    designs: ClassVar[frozenset[str] | None] = None
    counterparts: ClassVar[Mapping[str, tuple[str, str]]] = MappingProxyType({})
    one_run_default: ClassVar[bool] = False
    default_when_able: ClassVar[bool] = False
    order: ClassVar[int] = 1000

    @classmethod
    def check(cls, options: Any, source: Any, run: Any) -> None:
        """Checks that need only the options, the model's directory and the inject run, before any model is loaded
        (raise :class:`~dpaudit.common.errors.UserInputError`); nothing by default."""
        del options, source, run

    @classmethod
    def trains_models(cls, options: Any) -> bool:
        """Whether, with these options, it trains models (shadow or reference ones: the trainer's extra is then
        needed); never by default."""
        del options
        return False

    def run(self, context: AttackContext) -> AttackOutcome:
        raise NotImplementedError(f"{type(self).__name__}.run")


def by_frequency(frequencies: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(frequency, row indices) groups in increasing frequency, controls (0) first."""
    return [(int(f), np.flatnonzero(frequencies == f)) for f in np.unique(frequencies)]
