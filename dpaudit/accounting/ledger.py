"""The PrivacyLedger: what a trainer actually spent, step by step, and the budget it may not exceed.

A trainer appends every realized DP step (q_t, sigma_t, sensitivity factor) with :meth:`record`;
the ledger run-length compresses them into :class:`~dpaudit.accounting.Segment` s, derives the
final ``DpEvent`` from them (:meth:`event`), refuses a step that would take epsilon past the target
(:class:`BudgetExceededError`, nothing appended), and is saved with every checkpoint
(:meth:`to_json` / :meth:`from_json`) so that a resumed run keeps counting from where it was.

Accountant calls are kept rare with a *certificate*: a multiset of mechanisms, {(q, sigma):
steps}, whose epsilon has been computed and found within the target. Composition is monotone (more
steps never cost less privacy), so any realized run whose step count per mechanism stays within the
certificate is within budget without another call. :meth:`plan` certifies a whole planned run once;
a step off the plan certifies, in one search, the most steps of that mechanism that still fit, so a
run that drifts off its plan still costs only O(log steps) accountant calls.

Delta: the ledger's ``delta`` is the accountant's, the one its epsilon is computed at. A run whose float
noise sampler has a tail figure (:mod:`dpaudit.accounting.noise_tail`) reserves that figure for its whole
plan before the first step (``noise_tail``) and states ``delta + noise_tail`` (:attr:`stated_delta`); the
epsilon of any prefix at ``delta`` then holds at the stated delta, whose tail part covers every step the
plan allows. A ledger written before ``noise_tail`` existed (schema /2) reads with 0, its delta was the stated one,
and its steps become :attr:`PrivacyLedger.former_segments`: they drew their noise with a sampler of shorter reach.

Non-private runs: a ledger with ``target_epsilon=None`` and no steps recorded stands for a run
trained without DP. Its :meth:`event` is ``NonPrivateDpEvent`` and its :meth:`epsilon` is ``inf``.
A ledger with a target and no steps is a DP run that has not started (epsilon 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dp_accounting.dp_event import DpEvent, NonPrivateDpEvent

from dpaudit.accounting.accountants import ACCOUNTANTS, Accountant, epsilon
from dpaudit.accounting.calibration import max_steps
from dpaudit.accounting.events import Segment, schedule_event
from dpaudit.accounting.serialization import Json, event_from_json, event_to_json
from dpaudit.common.errors import UserInputError
from dpaudit.common.figures import format_up

__all__ = ["BudgetExceededError", "PrivacyLedger", "SAMPLING_METHODS", "SCHEMA"]

SCHEMA = "dpaudit.privacy_ledger/3"
#: Version 2 (and 1) ledgers were written by dpaudit versions whose float noise samplers stopped at 5.22-6.76
#: sigma, with no noise tail inside delta: a run resumed from one keeps those steps as ``former_segments``,
#: whose tail its record counts at the shortest former reach (:mod:`dpaudit.accounting.noise_tail`).
_SCHEMA_V2 = "dpaudit.privacy_ledger/2"
#: Version 1 stored each segment's noise std over C (sigma x sensitivity_factor) as its noise_multiplier;
#: version 2 stores sigma, ``dp_accounting``'s noise multiplier. A /1 ledger (a checkpoint of an older run)
#: is converted on reading, and the stored event checks the conversion.
_SCHEMA_V1 = "dpaudit.privacy_ledger/1"
#: "poisson": what the accountant assumes. "shuffle": shuffled fixed-size batches, accounted AS IF
#: Poisson (q = batch / N) and labelled so in every report (the honest-accounting rules).
SAMPLING_METHODS = ("poisson", "shuffle")
_SHUFFLE_NOTE = (
    "batches were fixed-size and shuffled; the epsilon assumes Poisson sampling with q = batch / N, "
    "which these batches do not satisfy"
)

Mechanism = tuple[float, float]


class BudgetExceededError(RuntimeError):
    """A step (or plan) would take epsilon past the ledger's target; nothing was recorded."""


def _counts(segments: Sequence[Segment]) -> dict[Mechanism, int]:
    counts: dict[Mechanism, int] = {}
    for segment in segments:
        counts[segment.mechanism] = counts.get(segment.mechanism, 0) + segment.steps
    return counts


def _within(counts: dict[Mechanism, int], certificate: dict[Mechanism, int] | None) -> bool:
    return certificate is not None and all(n <= certificate.get(m, 0) for m, n in counts.items())


def _segments_of(counts: dict[Mechanism, int]) -> list[Segment]:
    return [Segment(steps=n, sampling_probability=q, noise_multiplier=sigma) for (q, sigma), n in counts.items() if n]


class PrivacyLedger:
    """Realized DP-SGD steps of one run, with a hard epsilon budget.

    Args:
      delta: the accountant's delta, the one epsilon is computed at, in (0, 1) (the stated delta is ``delta + noise_tail``).
      target_epsilon: the budget; ``None`` for a run without a budget (or a non-private run: see the
        module docstring).
      accountant: "pld" (default) or "rdp": the accountant of record.
      privacy_unit: what one neighbouring dataset adds or removes ("example", "user", ...).
      sampling: "poisson" or "shuffle" (accounted as Poisson, and labelled so). (Sampling without
        replacement is a different mechanism, accounted by :func:`dpaudit.accounting.fixed_size_event`.)
      noise_tail: the float noise sampler's tail figure reserved for the whole planned run, counted inside
        the stated delta (``delta + noise_tail``); 0 when the sampler has none stated.
    """

    def __init__(
        self,
        *,
        delta: float,
        target_epsilon: float | None,
        accountant: Accountant = "pld",
        privacy_unit: str = "example",
        sampling: str = "poisson",
        noise_tail: float = 0.0,
    ) -> None:
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < float(delta) < 1.0:
            raise ValueError(f"delta must be in (0, 1), got {delta!r}.")
        if target_epsilon is not None and (
            isinstance(target_epsilon, bool)
            or not isinstance(target_epsilon, (int, float))
            or not 0.0 < float(target_epsilon) < math.inf
        ):
            raise ValueError(f"target_epsilon must be a positive number or None, got {target_epsilon!r}.")
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant must be one of {', '.join(ACCOUNTANTS)}, got {accountant!r}.")
        if not isinstance(privacy_unit, str) or not privacy_unit.strip():
            raise ValueError(f"privacy_unit must be a non-empty string, got {privacy_unit!r}.")
        if sampling not in SAMPLING_METHODS:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLING_METHODS)}, got {sampling!r}.")
        if (
            isinstance(noise_tail, bool)
            or not isinstance(noise_tail, (int, float))
            or not 0.0 <= float(noise_tail) < 1.0
        ):
            raise ValueError(f"noise_tail must be in [0, 1), got {noise_tail!r}.")
        self.delta = float(delta)
        self.noise_tail = float(noise_tail)
        #: Steps recorded by a dpaudit whose noise sampler had a shorter reach (a run resumed from a /2 ledger).
        self.former_segments: list[Segment] = []
        self.target_epsilon = None if target_epsilon is None else float(target_epsilon)
        self.accountant: Accountant = accountant
        self.privacy_unit = privacy_unit
        self.sampling = sampling
        self._segments: list[Segment] = []
        self._certificate: dict[Mechanism, int] | None = None
        self._certified_epsilon: float | None = None
        self.accountant_calls = 0  # how many times the ledger asked an accountant (tests, telemetry)

    # ---------------------------------------------------------------------------------------------- views
    @property
    def steps(self) -> int:
        """Total steps recorded."""
        return sum(segment.steps for segment in self._segments)

    @property
    def segments(self) -> list[Segment]:
        """The recorded steps, run-length compressed (a copy)."""
        return list(self._segments)

    @property
    def stated_delta(self) -> float:
        """The delta a claim of this ledger's epsilon states: the accountant's plus the reserved noise tail."""
        return self.delta + self.noise_tail

    def _at_delta(self) -> str:
        """'at delta D' for messages: the stated delta, and its two parts when the tail is counted."""
        if not self.noise_tail:
            return f"at delta {self.delta:g}"
        return (
            f"at delta {self.stated_delta:g} (the accountant's {self.delta:g} plus the noise sampler's tail "
            f"{format_up(self.noise_tail, 2)})"
        )

    @property
    def is_private(self) -> bool:
        """False for the non-private run: no target and no steps."""
        return self.target_epsilon is not None or bool(self._segments)

    @property
    def sampling_note(self) -> str | None:
        """The caveat every report must print with the epsilon, or None."""
        return _SHUFFLE_NOTE if self.sampling == "shuffle" else None

    def event(self) -> DpEvent:
        """The DpEvent of what was recorded (``NonPrivateDpEvent`` for a non-private run)."""
        if not self.is_private:
            return NonPrivateDpEvent()
        return schedule_event(self._segments)

    def epsilon(self) -> float:
        """Epsilon of what was recorded, by the accountant of record (inf for a non-private run)."""
        if not self.is_private:
            return math.inf
        return self._epsilon_of(self._segments)

    def remaining_steps(self, *, sampling_probability: float, noise_multiplier: float) -> int | None:
        """How many more steps at (q, sigma) fit the budget (None without a target)."""
        if self.target_epsilon is None:
            return None
        return max_steps(
            sampling_probability=sampling_probability,
            noise_multiplier=noise_multiplier,
            target_epsilon=self.target_epsilon,
            delta=self.delta,
            accountant=self.accountant,
            preceding=self._segments,
        )

    # --------------------------------------------------------------------------------------- spending
    def _epsilon_of(self, segments: Sequence[Segment]) -> float:
        self.accountant_calls += 1
        return epsilon(schedule_event(segments), self.delta, self.accountant)

    def plan(self, segments: Sequence[Segment]) -> float:
        """Certify a whole planned run once and return its epsilon.

        Raises BudgetExceededError if the plan's epsilon is above the target (the previous
        certificate is kept). Afterwards, recording any part of the plan costs no accountant call.
        """
        segments = list(segments)
        for segment in segments:
            if not isinstance(segment, Segment):
                raise TypeError(f"plan takes Segment instances, got {type(segment).__name__}.")
        eps = self._epsilon_of(segments)
        if self.target_epsilon is not None and eps > self.target_epsilon:
            raise BudgetExceededError(
                f"the planned run spends epsilon {format_up(eps, 4)} > target {self.target_epsilon:g} "
                f"{self._at_delta()}; add noise, sample less or take fewer steps."
            )
        self._certificate = _counts(segments)
        self._certified_epsilon = eps
        return eps

    def record(
        self, *, sampling_probability: float, noise_multiplier: float, steps: int = 1, sensitivity_factor: float = 1.0
    ) -> None:
        """Append `steps` realized steps, or raise BudgetExceededError and append nothing.

        ``noise_multiplier`` is sigma (std over ``sensitivity_factor * C``, see :class:`Segment`);
        ``sensitivity_factor`` is stored with it so that std / C stays derivable.
        """
        new = Segment(
            steps=steps,
            sampling_probability=sampling_probability,
            noise_multiplier=noise_multiplier,
            sensitivity_factor=sensitivity_factor,
        )
        candidate = self._appended(new)
        if self.target_epsilon is not None and not _within(_counts(candidate), self._certificate):
            self._certify_after(candidate, new)
        self._segments = candidate

    def _appended(self, new: Segment) -> list[Segment]:
        segments = list(self._segments)
        if segments and segments[-1] == new.with_steps(segments[-1].steps):
            segments[-1] = new.with_steps(segments[-1].steps + new.steps)
        else:
            segments.append(new)
        return segments

    def _certify_after(self, candidate: list[Segment], new: Segment) -> None:
        """Certify `candidate` plus as many further steps of `new`'s mechanism as fit, or refuse."""
        assert self.target_epsilon is not None
        counts = _counts(candidate)
        others = {m: n for m, n in counts.items() if m != new.mechanism}
        mine = counts[new.mechanism]
        # Look ahead by doubling: one call usually certifies the next `mine` steps too.
        ahead = dict(others)
        ahead[new.mechanism] = 2 * mine
        eps = self._epsilon_of(_segments_of(ahead))
        if eps <= self.target_epsilon:
            self._certificate, self._certified_epsilon = ahead, eps
            return
        q, sigma = new.mechanism
        self.accountant_calls += 1
        allowed = max_steps(
            sampling_probability=q,
            noise_multiplier=sigma,
            target_epsilon=self.target_epsilon,
            delta=self.delta,
            accountant=self.accountant,
            preceding=_segments_of(others),
            limit=2 * mine,
        )
        if allowed < mine:
            eps = self._epsilon_of(candidate)
            raise BudgetExceededError(
                f"recording {new.steps} more step(s) (q={q:.4g}, sigma={sigma:.4g}) would spend epsilon "
                f"{format_up(eps, 4)} > target {self.target_epsilon:g} {self._at_delta()}; "
                f"{self.steps} steps recorded so far"
            )
        certified = dict(others)
        certified[new.mechanism] = allowed
        self._certificate = certified
        self._certified_epsilon = self._epsilon_of(_segments_of(certified))

    # ------------------------------------------------------------------------------------ persistence
    def to_json(self) -> Json:
        """Everything needed to resume: settings, recorded segments, certificate, and the event."""
        certificate = None
        if self._certificate is not None:
            certificate = {
                "segments": [s.to_json() for s in _segments_of(self._certificate)],
                "epsilon": self._certified_epsilon,
            }
        return {
            "schema": SCHEMA,
            "delta": self.delta,
            "noise_tail": self.noise_tail,
            "target_epsilon": self.target_epsilon,
            "accountant": self.accountant,
            "privacy_unit": self.privacy_unit,
            "sampling": self.sampling,
            "steps": self.steps,
            "segments": [s.to_json() for s in self._segments],
            "former_segments": [s.to_json() for s in self.former_segments],
            "certificate": certificate,
            "event": event_to_json(self.event()),
        }

    @classmethod
    def from_json(cls, obj: object) -> PrivacyLedger:
        """Rebuild a ledger saved by :meth:`to_json` (or by version 1, converted); a malformed file raises
        UserInputError."""
        if isinstance(obj, dict) and obj.get("schema") == _SCHEMA_V1:
            obj = _from_v1(obj)
        if isinstance(obj, dict) and obj.get("schema") == _SCHEMA_V2:  # every step so far drew the former sampler
            obj = {**obj, "schema": SCHEMA, "noise_tail": 0.0, "former_segments": obj.get("segments", [])}
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
            found = obj.get("schema") if isinstance(obj, dict) else type(obj).__name__
            raise UserInputError(f"privacy ledger: expected schema {SCHEMA!r}, got {found!r}.")
        try:
            ledger = cls(
                delta=obj["delta"],
                target_epsilon=obj["target_epsilon"],
                accountant=obj["accountant"],
                privacy_unit=obj["privacy_unit"],
                sampling=obj["sampling"],
                noise_tail=obj.get("noise_tail", 0.0),
            )
        except (KeyError, ValueError) as err:
            raise UserInputError(f"privacy ledger: bad settings ({err}).") from None
        ledger._segments = [
            Segment.from_json(s, where=f"privacy ledger segment {i}") for i, s in enumerate(obj.get("segments", []))
        ]
        ledger.former_segments = [
            Segment.from_json(s, where=f"privacy ledger former segment {i}")
            for i, s in enumerate(obj.get("former_segments", []))
        ]
        certificate = obj.get("certificate")
        if certificate is not None:
            segments = [
                Segment.from_json(s, where=f"privacy ledger certificate segment {i}")
                for i, s in enumerate(certificate.get("segments", []))
            ]
            ledger._certificate = _counts(segments)
            ledger._certified_epsilon = certificate.get("epsilon")
        if "event" in obj and event_from_json(obj["event"]) != ledger.event():
            raise UserInputError(
                "privacy ledger: the stored event does not match the stored segments; the file was edited or corrupted."
            )
        return ledger


def _from_v1(obj: Mapping[str, object]) -> dict[str, object]:
    """A /1 ledger in /2 terms: each segment's noise_multiplier (std / C) divided by its sensitivity_factor."""

    def converted(segments: object) -> object:
        if not isinstance(segments, list):
            return segments
        out = []
        for seg in segments:
            if isinstance(seg, dict) and isinstance(seg.get("noise_multiplier"), (int, float)):
                factor = seg.get("sensitivity_factor", 1.0)
                if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor >= 1.0:
                    seg = {**seg, "noise_multiplier": seg["noise_multiplier"] / factor}
            out.append(seg)
        return out

    new = {**obj, "schema": _SCHEMA_V2, "segments": converted(obj.get("segments", []))}
    certificate = obj.get("certificate")
    if isinstance(certificate, dict):
        new["certificate"] = {**certificate, "segments": converted(certificate.get("segments", []))}
    return new
