"""``privacy.json`` of a run whose DP library owns the step: the library's own claim beside dpaudit's recomputation.

Shared by the library trainers (``opacus``, ``jax-privacy``; neither imports the other's framework). Each reads the
facts of what ran off the objects that ran (:class:`LibraryRun`: the sampler and its rate, the optimizer updates
counted where they happen, the noise multiplier the noise was drawn with) and what the library's accountant was
told (its history of (sigma, q, steps), as it composes them: Poisson-subsampled Gaussian steps). dpaudit accounts the
mechanism that ran itself (:mod:`dpaudit.accounting`: PLD for Poisson sampling; fixed-size batches sampled without
replacement by RDP under replace-one adjacency, the project's rule) and never copies the library's epsilon; when
the two mechanisms differ (another sampler, another rate, steps counted per micro-step, another sigma) the record
says so in ``details.library.agrees`` and a note, which the trainer prints. See ``docs/trainers.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dpaudit.accounting.segment import Segment
from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.figures import format_up

__all__ = [
    "LibraryRun",
    "build_library_record",
    "library_mismatches",
    "ran_history",
    "refuse_unsupported_options",
    "tail_figure",
]

_RTOL = 1e-9
#: What each sampling kind is called in the words of a record.
SAMPLING_WORDS = {"poisson": "Poisson-sampled", "fixed": "fixed-size batches sampled without replacement"}


@dataclass
class LibraryRun:
    """What ran and what the library's accountant was told, as read from the objects that ran.

    Attributes:
        library, version, accountant: the library (``opacus``, ``jax_privacy``), its version, its accountant's name.
        library_epsilon: the epsilon the library's accountant states (inf: none).
        history: the library accountant's (sigma, q, steps) rows: Poisson-subsampled Gaussian steps of noise
            multiplier sigma (fixed-size sampling, accounted by reduction, carries sigma / 2).
        library_sampling: the sampling the library's accountant assumed (``poisson`` or ``fixed``).
        updates, sample_rate, sampling, batch_size, dataset_size, noise_multiplier, clip_norm, normalizer: what
            ran (``batch_size``: the fixed batch of fixed-size sampling; ``normalizer``: what the noisy sum was
            divided by, as documented).
    """

    library: str
    version: str
    accountant: str
    library_epsilon: float
    history: list[tuple[float, float, int]]
    updates: int
    sample_rate: float
    dataset_size: int
    noise_multiplier: float
    clip_norm: float
    normalizer: float
    sampling: str = "poisson"
    library_sampling: str = "poisson"
    batch_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def refuse_unsupported_options(config: Any, *, trainer: str, library: str, takes_q: str) -> None:
    """The options a library trainer cannot honour, refused in one line before anything trains: ``--dataset-size``
    (the library takes q from the real rows, ``takes_q`` says how) and a ``--target-epsilon`` beside a
    ``--noise-multiplier`` (the library calibrates the target or runs the sigma given; it never stops at a budget)."""
    from dpaudit.common.errors import UserInputError

    if config.dataset_size is not None:
        raise UserInputError(
            f"--dataset-size {config.dataset_size}: {takes_q}; drop --dataset-size for the {trainer} trainer."
        )
    if config.noise_multiplier is not None and config.target_epsilon is not None:
        raise UserInputError(
            f"--target-epsilon with --noise-multiplier: the {trainer} trainer does not stop at a budget; give one of "
            f"them (the target alone is calibrated by {library})."
        )


def _merged(rows: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    out: list[tuple[float, float, int]] = []
    for sigma, q, steps in rows:
        if out and abs(out[-1][0] - sigma) <= _RTOL * sigma and abs(out[-1][1] - q) <= _RTOL * q:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + steps)
        else:
            out.append((sigma, q, steps))
    return out


def ran_history(run: LibraryRun) -> list[tuple[float, float, int]]:
    """The (sigma, q, steps) rows an accountant of Poisson-subsampled Gaussian steps must hold for what ran (fixed-size
    sampling by the usual reduction: replace-one doubles the sensitivity, so sigma / 2)."""
    sigma = run.noise_multiplier / (2.0 if run.sampling == "fixed" else 1.0)
    return [(sigma, run.sample_rate, run.updates)]


def library_mismatches(run: LibraryRun, *, name: str | None = None) -> list[str]:
    """How the library's accounted mechanism differs from the one that ran (empty: they agree)."""
    who = name or run.library
    found: list[str] = []
    if not math.isfinite(run.library_epsilon):
        found.append("the library's accountant states no finite epsilon for this run")
    if run.sampling != run.library_sampling:
        if run.library_sampling == "poisson" and run.library == "opacus":
            found.append("the batches were not Poisson-sampled, which every Opacus accountant assumes")
        else:
            found.append(
                f"the batches were {SAMPLING_WORDS.get(run.sampling, run.sampling)}; {who}'s accountant assumed "
                f"{SAMPLING_WORDS.get(run.library_sampling, run.library_sampling)}"
            )
    ran = _merged(ran_history(run))
    said = _merged(run.history)
    said_steps = sum(s for _, _, s in said)
    if said_steps != run.updates:
        found.append(f"the accountant counted {said_steps} steps, the optimizer took {run.updates} updates")
    if len(said) != len(ran) or any(
        abs(a[0] - b[0]) > _RTOL * b[0] or abs(a[1] - b[1]) > _RTOL * b[1] for a, b in zip(said, ran)
    ):
        found.append(
            "the accountant's (sigma, q) "
            + ", ".join(f"({s:g}, {q:g}) x {t}" for s, q, t in said)
            + f" differ from what ran: sigma {run.noise_multiplier:g}, q {run.sample_rate:g}"
        )
    return found


def tail_figure(*, steps: int, sample_rate: float, noise_multiplier: float, sampling: str, noise_sampler: str) -> float:
    """The tail figure of ``noise_sampler`` (:data:`dpaudit.accounting.noise_tail.SAMPLERS`) over the run's steps
    (fixed-size sampling at sigma / 2: replace-one doubles the sensitivity), what is counted inside delta."""
    from dpaudit.accounting import noise_tail

    sigma = noise_multiplier / (2.0 if sampling == "fixed" else 1.0)
    segment = Segment(steps=steps, sampling_probability=sample_rate, noise_multiplier=sigma)
    return noise_tail.tail_figure([segment], noise_tail.sampler_reach(noise_sampler))


def build_library_record(
    run: LibraryRun,
    *,
    trainer: str,
    display: str,
    delta: float,
    mechanism: str,
    randomness: str,
    noise_seed_explicit: bool,
    target_epsilon: float | None,
    library_details: dict[str, Any],
    notes: list[str],
    noise_sampler: str | None = None,
    accept_noise_tail: bool = False,
    extra: dict[str, Any] | None = None,
    public_parameters: str | None = None,
) -> PrivacyRecord:
    """The record of a finished library run: dpaudit's accounting of what ran, the library's claim beside it.

    ``display``: the library's name in sentences (``Opacus``, ``JAX Privacy``). ``noise_sampler``: the
    :data:`dpaudit.accounting.noise_tail.SAMPLERS` entry of the library's noise (None: not characterised, a note
    says its tail is not counted); its tail figure is counted inside delta as every dpaudit trainer's is
    (:func:`dpaudit.accounting.noise_tail.split_delta`, refused when it alone reaches delta unless
    ``accept_noise_tail``).

    Raises:
        ValueError: the batches were sampled neither by Poisson sampling nor as fixed-size batches (the library's
            flagged ``non-poisson``): no claim is accounted for a sampler dpaudit does not account.
    """
    from dpaudit import accounting
    from dpaudit.accounting import noise_tail

    if run.sampling not in SAMPLING_WORDS:  # no claim for a sampler dpaudit does not account (not Poisson's instead)
        raise ValueError(
            f"{display}'s batches were {run.sampling}-sampled: dpaudit accounts Poisson or fixed-size sampling only, "
            "so no privacy claim is written for this run."
        )
    fixed = run.sampling == "fixed"
    segment = Segment(steps=run.updates, sampling_probability=run.sample_rate, noise_multiplier=run.noise_multiplier)
    tail = (
        None
        if noise_sampler is None
        else tail_figure(
            steps=run.updates,
            sample_rate=run.sample_rate,
            noise_multiplier=run.noise_multiplier,
            sampling=run.sampling,
            noise_sampler=noise_sampler,
        )
    )
    split = noise_tail.split_delta(delta, tail or 0.0, accept=accept_noise_tail)
    if fixed:
        assert run.batch_size is not None
        event = accounting.fixed_size_event(
            dataset_size=run.dataset_size,
            batch_size=run.batch_size,
            steps=run.updates,
            noise_multiplier=run.noise_multiplier,
        )
        accountant = "rdp"
    else:
        event = accounting.schedule_event([segment])
        accountant = "pld"
    epsilon = float(accounting.epsilon(event, split.accountant, accountant))  # type: ignore[arg-type]
    found = library_mismatches(run, name=display)
    library = {
        "name": run.library,
        "version": run.version,
        "accountant": run.accountant,
        "epsilon": run.library_epsilon if math.isfinite(run.library_epsilon) else None,
        "history": [list(row) for row in run.history],
        "sampling": run.library_sampling,
        **library_details,
        "agrees": not found,
        "mismatches": found,
    }
    said = [f"mismatch: {display}'s accountant does not account what ran: {'; '.join(found)}."] if found else []
    if tail is not None and tail > 0.0:
        said.append(
            f"noise tail: {display}'s noise sampler is {noise_sampler} (reach {noise_tail.sampler_reach(noise_sampler or ''):g} "
            f"sigma); its tail figure {format_up(tail, 2)} is counted inside delta here, and not by {display}'s own "
            f"accountant, whose epsilon is at delta {delta:g}."
        )
    if target_epsilon is not None and epsilon > target_epsilon:  # the target was met by the library's accounting only
        said.append(
            f"target: sigma was calibrated by {display}'s accountant for epsilon {target_epsilon:g}; dpaudit's "
            f"accounting of what ran gives {format_up(epsilon)}, above that target."
        )
    sampled = (
        f"fixed-size batches of {run.batch_size} sampled without replacement (q = {run.sample_rate:g})"
        if fixed
        else f"Poisson q = {run.sample_rate:g}"
    )
    words = ("replace-one", "RDP") if fixed else ("add/remove", "PLD")
    return PrivacyRecord(
        trainer=trainer,
        private=True,
        mechanism=mechanism,
        adjacency="replace_one" if fixed else "add_remove",
        sampling="without_replacement" if fixed else "poisson",
        accountant=accountant,
        event=accounting.event_to_json(event),
        epsilon=epsilon,
        delta=split.delta,
        accountant_delta=split.accountant,
        noise_tail_delta=tail,
        noise_tail=None if noise_sampler is None else noise_tail.noise_tail_entry(noise_sampler),
        target_epsilon=target_epsilon,
        clip_norm=run.clip_norm,
        sensitivity_factor=1.0,
        noise_multipliers=[run.noise_multiplier],
        noise_calibrated=target_epsilon is not None,
        steps=run.updates,
        planned_steps=run.updates,
        dataset_size=run.dataset_size,
        public_parameters=public_parameters
        or f"q = {run.sample_rate:g} over N = {run.dataset_size} rows; N is treated as public.",
        segments=[dict(segment.to_json(), expected_batch_size=run.sample_rate * run.dataset_size)],
        randomness=randomness,
        noise_seed_explicit=noise_seed_explicit,
        guarantee=(
            f"({format_up(epsilon)}, {format_up(split.delta, 2)})-DP for one example ({words[0]}), accounted by dpaudit "
            f"({words[1]}) from what ran: {run.updates} updates, {sampled}, sigma = {run.noise_multiplier:g}. "
            f"{display}'s own {run.accountant.upper()} accountant says epsilon {format_up(run.library_epsilon)}"
            + ("." if not found else " for a mechanism that did not run (see notes).")
        ),
        notes=said + notes,
        details={"library": library, **(extra or {})},
    )
