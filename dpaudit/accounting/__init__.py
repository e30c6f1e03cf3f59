"""Privacy accounting for every mechanism dpaudit trains with, built on ``dp_accounting``.

A package shaped like dp_accounting and jax_privacy, one job per module, its public API re-exported
here: :mod:`.events` (mechanisms as DpEvents, segments, schedules, sensitivity factors),
:mod:`.guarantees` (the default delta and group privacy), :mod:`.serialization` (DpEvents to and
from JSON), :mod:`.pld` (the fast whole-grid PLD and its caches), :mod:`.accountants` (epsilon and delta
by PLD or RDP), :mod:`.tan` (Sander et al.'s eps_TAN) and :mod:`.calibration` (noise, steps and
batch size for a target), and :mod:`.ledger` (what a run actually spent, step by step, against its
budget).

A privacy claim is a ``DpEvent`` (never a bare float): the trainers build one per run, ``privacy.json``
stores it (:func:`event_to_json`), and every epsilon printed anywhere is recomputed from it by
:func:`epsilon`. The privacy-loss mathematics is ``dp_accounting``'s (see "Speed" for the one
vectorized restatement, checked bit for bit against the library).

Mechanisms (the honest-accounting rules):

- per-example DP-SGD: ``steps`` Poisson-subsampled Gaussian steps, add/remove-one adjacency
  (:func:`dpsgd_event`);
- batch-size schedules (Anil et al. 2021) and per-epoch noise schedules (eDP-SGD's linear and
  exponential decay): a ``ComposedDpEvent`` of one ``SelfComposedDpEvent`` per segment
  (:func:`schedule_event`, :func:`batch_schedule_segments`, :func:`noise_schedule_segments`);
- micro-batch clipping: one example moves one clipped micro-batch gradient by up to 2C, so the
  step adds noise of std sigma x 2C unless the micro-batch size is 1
  (:func:`microbatch_sensitivity_factor`); sigma, the noise multiplier, is always ``dp_accounting``'s:
  std over the bound on one unit's contribution (:class:`Segment`; std / C has its own name,
  :attr:`Segment.noise_std_over_clip`); per-layer clip norms combine as sqrt(sum C_l^2)
  (:func:`combined_clip_norm`);
- fixed-size batches sampled without replacement, for users who insist: replace-one adjacency
  (sensitivity twice the unit's bound, so the event carries sigma / 2), RDP only, and labelled as such
  (:func:`fixed_size_event`, :data:`FIXED_SIZE_LABEL`);
- replace-one adjacency for Poisson-sampled runs, the guarantee that holds when N is public
  (:func:`epsilon_replace_one`), and the floating-point noise sampler's bounded reach, whose tail
  figure for the run is counted inside delta (:mod:`.noise_tail`: the accountant's delta is the stated
  delta minus that figure, and calibration searches with it);
- delta defaults well below 1/N (:func:`default_delta`) and a canary repeated f times is covered
  only by group privacy (:func:`group_privacy`).

Speed: one PLD evaluation of a 20K-step run at the default discretization costs seconds, most of it
building the single-step privacy loss distribution in a Python loop over ~160K grid points. That
loop is restated here as numpy array operations (:class:`_VectorizedGaussianPrivacyLoss`; the optimistic
privacy-buckets walk the white-box bounds read their epsilon from, :func:`optimistic_subsampled_gaussian_pld`, reuses
it, and so does the replace-one step, :func:`replace_one_gaussian_pld`), and tests check that the distributions they
yield are bit-identical to the library's. Two more of its loops are
restated for the audits only, each checked bit for bit: the composition's truncation range
(:func:`self_compose`: the white-box bounds' optimistic PLDs and the claim curves of :func:`privacy_profile`) and the walk that reads epsilon at delta (:func:`epsilon_for_delta`, also the extent of a
claim curve's grid); a claim's own epsilon is composed and read by the library. :func:`epsilon` composes the same ``dp_accounting`` objects as
``PLDAccountant`` (bit-identical results) and caches single steps,
self-composed segments and composed prefixes, and memoizes results. :func:`calibrate_noise` and
the reverse searches walk a ladder of accountants, cheap to exact (RDP on a few orders, PLD at a
coarse discretization, then the accountant of record), so that the accountant of record is called
about once.

References:
  Anil et al. 2021, "Large-Scale Differentially Private BERT", section 3.
  Sander et al. 2023, "TAN Without a Burn: Scaling Laws of DP-SGD", section 3.
  McMahan et al. 2018 / TF Privacy ``used_microbatching``: sensitivity 2C for micro-batches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use (below)
    from dpaudit.accounting.accountants import (
        ACCOUNTANTS,
        Accountant,
        delta_for_epsilon,
        epsilon,
        epsilon_replace_one,
    )
    from dpaudit.accounting.calibration import (
        calibrate_noise,
        max_batch_size,
        max_steps,
    )
    from dpaudit.accounting.events import (
        FIXED_SIZE_LABEL,
        REPLACE_ONE_FACTOR,
        Segment,
        batch_schedule_segments,
        combined_clip_norm,
        dpsgd_event,
        exponential_decay_sigmas,
        fixed_size_event,
        is_fixed_size,
        linear_decay_sigmas,
        microbatch_sensitivity_factor,
        noise_schedule_segments,
        parse_batch_schedule,
        schedule_event,
        segments_of_event,
        sliced_microbatch_sensitivity_factor,
    )
    from dpaudit.accounting.guarantees import (
        DEFAULT_DELTA_RULE,
        GROUP_PRIVACY_BOUND,
        default_delta,
        delta_warning,
        group_privacy,
    )
    from dpaudit.accounting.ledger import BudgetExceededError, PrivacyLedger
    from dpaudit.accounting.noise_tail import (
        BM96_REACH,
        RETIRED_MIN_REACH,
        RETIRED_SAMPLERS,
        DeltaSplit,
        event_tail_figure,
        noise_tail_entry,
        sampler_reach,
        split_delta,
        tail_figure,
    )
    from dpaudit.accounting.noise_tail import (
        SAMPLERS as NOISE_SAMPLERS,
    )
    from dpaudit.accounting.pld import (
        PLD_DISCRETIZATION,
        PLD_MAX_GRID_POINTS,
        PLD_MIN_DELTA,
        PldGridTooLargeError,
        clear_caches,
        epsilon_for_delta,
        optimistic_subsampled_gaussian_pld,
        privacy_profile,
        replace_one_gaussian_pld,
        self_compose,
        subsampled_gaussian_pld,
    )
    from dpaudit.accounting.serialization import (
        event_from_json,
        event_to_json,
    )
    from dpaudit.accounting.tan import (
        SIMULATION_LABEL,
        TAN_VALID_ABOVE,
        TanReport,
        TanSimulation,
        TanValidityWarning,
        tan_epsilon,
        tan_eta,
        tan_eta_segments,
        tan_report,
        tan_simulate,
    )

_EXPORTS: dict[str, tuple[str, str]] = {  # name -> (module of this package, its name there)
    "calibrate_noise": ("calibration", "calibrate_noise"),
    "max_batch_size": ("calibration", "max_batch_size"),
    "max_steps": ("calibration", "max_steps"),
    "ACCOUNTANTS": ("accountants", "ACCOUNTANTS"),
    "Accountant": ("accountants", "Accountant"),
    "delta_for_epsilon": ("accountants", "delta_for_epsilon"),
    "epsilon": ("accountants", "epsilon"),
    "epsilon_replace_one": ("accountants", "epsilon_replace_one"),
    "FIXED_SIZE_LABEL": ("events", "FIXED_SIZE_LABEL"),
    "REPLACE_ONE_FACTOR": ("events", "REPLACE_ONE_FACTOR"),
    "Segment": ("events", "Segment"),
    "batch_schedule_segments": ("events", "batch_schedule_segments"),
    "combined_clip_norm": ("events", "combined_clip_norm"),
    "dpsgd_event": ("events", "dpsgd_event"),
    "exponential_decay_sigmas": ("events", "exponential_decay_sigmas"),
    "fixed_size_event": ("events", "fixed_size_event"),
    "is_fixed_size": ("events", "is_fixed_size"),
    "segments_of_event": ("events", "segments_of_event"),
    "linear_decay_sigmas": ("events", "linear_decay_sigmas"),
    "microbatch_sensitivity_factor": ("events", "microbatch_sensitivity_factor"),
    "noise_schedule_segments": ("events", "noise_schedule_segments"),
    "parse_batch_schedule": ("events", "parse_batch_schedule"),
    "schedule_event": ("events", "schedule_event"),
    "sliced_microbatch_sensitivity_factor": ("events", "sliced_microbatch_sensitivity_factor"),
    "DEFAULT_DELTA_RULE": ("guarantees", "DEFAULT_DELTA_RULE"),
    "GROUP_PRIVACY_BOUND": ("guarantees", "GROUP_PRIVACY_BOUND"),
    "default_delta": ("guarantees", "default_delta"),
    "delta_warning": ("guarantees", "delta_warning"),
    "group_privacy": ("guarantees", "group_privacy"),
    "BudgetExceededError": ("ledger", "BudgetExceededError"),
    "PrivacyLedger": ("ledger", "PrivacyLedger"),
    "BM96_REACH": ("noise_tail", "BM96_REACH"),
    "RETIRED_MIN_REACH": ("noise_tail", "RETIRED_MIN_REACH"),
    "RETIRED_SAMPLERS": ("noise_tail", "RETIRED_SAMPLERS"),
    "DeltaSplit": ("noise_tail", "DeltaSplit"),
    "event_tail_figure": ("noise_tail", "event_tail_figure"),
    "noise_tail_entry": ("noise_tail", "noise_tail_entry"),
    "sampler_reach": ("noise_tail", "sampler_reach"),
    "split_delta": ("noise_tail", "split_delta"),
    "tail_figure": ("noise_tail", "tail_figure"),
    "NOISE_SAMPLERS": ("noise_tail", "SAMPLERS"),
    "PLD_DISCRETIZATION": ("pld", "PLD_DISCRETIZATION"),
    "PLD_MAX_GRID_POINTS": ("pld", "PLD_MAX_GRID_POINTS"),
    "PLD_MIN_DELTA": ("pld", "PLD_MIN_DELTA"),
    "PldGridTooLargeError": ("pld", "PldGridTooLargeError"),
    "clear_caches": ("pld", "clear_caches"),
    "epsilon_for_delta": ("pld", "epsilon_for_delta"),
    "optimistic_subsampled_gaussian_pld": ("pld", "optimistic_subsampled_gaussian_pld"),
    "privacy_profile": ("pld", "privacy_profile"),
    "replace_one_gaussian_pld": ("pld", "replace_one_gaussian_pld"),
    "self_compose": ("pld", "self_compose"),
    "subsampled_gaussian_pld": ("pld", "subsampled_gaussian_pld"),
    "event_from_json": ("serialization", "event_from_json"),
    "event_to_json": ("serialization", "event_to_json"),
    "SIMULATION_LABEL": ("tan", "SIMULATION_LABEL"),
    "TAN_VALID_ABOVE": ("tan", "TAN_VALID_ABOVE"),
    "TanReport": ("tan", "TanReport"),
    "TanSimulation": ("tan", "TanSimulation"),
    "TanValidityWarning": ("tan", "TanValidityWarning"),
    "tan_epsilon": ("tan", "tan_epsilon"),
    "tan_eta": ("tan", "tan_eta"),
    "tan_eta_segments": ("tan", "tan_eta_segments"),
    "tan_report": ("tan", "tan_report"),
    "tan_simulate": ("tan", "tan_simulate"),
}

__all__ = [
    "BudgetExceededError",
    "PrivacyLedger",
    "ACCOUNTANTS",
    "Accountant",
    "DEFAULT_DELTA_RULE",
    "FIXED_SIZE_LABEL",
    "GROUP_PRIVACY_BOUND",
    "REPLACE_ONE_FACTOR",
    "PLD_DISCRETIZATION",
    "PLD_MAX_GRID_POINTS",
    "PLD_MIN_DELTA",
    "PldGridTooLargeError",
    "privacy_profile",
    "replace_one_gaussian_pld",
    "SIMULATION_LABEL",
    "Segment",
    "TAN_VALID_ABOVE",
    "TanReport",
    "TanSimulation",
    "TanValidityWarning",
    "batch_schedule_segments",
    "calibrate_noise",
    "clear_caches",
    "combined_clip_norm",
    "default_delta",
    "delta_for_epsilon",
    "delta_warning",
    "dpsgd_event",
    "epsilon",
    "epsilon_for_delta",
    "epsilon_replace_one",
    "event_from_json",
    "event_to_json",
    "exponential_decay_sigmas",
    "fixed_size_event",
    "group_privacy",
    "is_fixed_size",
    "segments_of_event",
    "linear_decay_sigmas",
    "max_batch_size",
    "max_steps",
    "microbatch_sensitivity_factor",
    "optimistic_subsampled_gaussian_pld",
    "NOISE_SAMPLERS",
    "BM96_REACH",
    "DeltaSplit",
    "RETIRED_MIN_REACH",
    "RETIRED_SAMPLERS",
    "event_tail_figure",
    "noise_schedule_segments",
    "noise_tail_entry",
    "sampler_reach",
    "split_delta",
    "tail_figure",
    "parse_batch_schedule",
    "schedule_event",
    "self_compose",
    "sliced_microbatch_sensitivity_factor",
    "subsampled_gaussian_pld",
    "tan_epsilon",
    "tan_eta",
    "tan_eta_segments",
    "tan_report",
    "tan_simulate",
]


def __getattr__(name: str) -> object:
    """The public names, imported on first use (PEP 562): importing one module of this package (a Segment for a
    claim, say) does not import dp_accounting and scipy with the rest of it."""
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attribute)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
