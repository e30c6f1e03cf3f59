"""The white-box audit through a DP library's real gradient path (non-cooperative canaries).

A trainer that hands its step to a library (:class:`dpaudit.training.gradient_path.GradientPathHost`: Opacus) hosts
canaries as ordinary training inputs whose per-example gradient, computed and clipped by the library itself, is C
along a direction reserved for them (``docs/auditing.md``, "Canaries through the real gradient path"). Each run gives
the noisy clipped sum of every update on those coordinates; the analysis is the one of :mod:`.analysis` with two
differences, both needed because the library, not dpaudit, states the claim:

- the claim under test is the LIBRARY's (:func:`library_claim`: its accountant's history and its epsilon, from
  ``privacy.json``'s ``details.library``), while each canary is scored under the mechanism that ran (dpaudit's
  accounting of it, the record's own event: one noisy observation per optimizer update). A library that accounts
  another mechanism than it runs (steps counted per micro-step, another sampling rate) is then tested on its own
  words. Any score keeps the bounds valid (they test guesses, not scores), so the choice costs only power;
- the score adds, to the likelihood ratio, a test of the noise's independence across updates (:func:`path_scores`):
  a canary whose observations differ from one update to the next by exactly 0 or the clip norm saw the SAME noise
  each time (noise drawn once and reused), which the likelihood ratio of independent noise cannot see (reused noise
  only makes its sum noisier). Under fresh Gaussian noise the test never fires (probability below 1e-9 per canary).

Fixed-size batches (sampling without replacement) are claimed under replace-one adjacency. Their canaries are signed
(:func:`signed_gains`): every canary is a training row, and the auditor's coin chooses its gradient, +C or -C along its
direction: the two datasets differ in one row replaced by another, the claimed adjacency. Each step's observation is
then (1 - q) N(0, s^2) + q N(+-C, s^2), and the score is the likelihood ratio of + against -
(:func:`signed_scores`). This pair is at least as private as the library's claim (fixed-size steps accounted as
Poisson-subsampled Gaussian steps of sigma / 2: replace-one doubles the sensitivity): per step its trade-off curve
lies above the claim's symmetrised curve, so the audit of a correct run stays valid; it is also the strongest pair
whose gradients are clipped to C on a direction no other row touches (the worst case, a shift of 2C from a common
base, needs every other row to push -C along the canary's direction). See ``docs/auditing.md``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.audit.roc import roc_curve
from dpaudit.claim import Claim, claim_of_record, read_privacy_record
from dpaudit.claim.record import PrivacyRecord
from dpaudit.common.errors import UserInputError
from dpaudit.training.gradient_canaries import UNIT_EXAMPLE
from dpaudit.training.gradient_path import PATH_GRADIENT, GradientPathHost
from dpaudit.whitebox.analysis import (
    Analysis,
    ViewScores,
    _any_mechanism,
    _ceilings,
    curve_rejected,
    planned_gauss_bound,
    planned_order_bounds,
)
from dpaudit.whitebox.bounds import (
    Bound,
    multi_run_bounds,
    multi_run_family,
    one_run_bounds,
    one_run_family,
)
from dpaudit.whitebox.harness import RunEvidence
from dpaudit.whitebox.layout import CANARY_GAIN, CanaryLayout
from dpaudit.whitebox.plan import (
    planned_guesses,
    planned_one_run,
    planned_pooled,
)
from dpaudit.whitebox.scores import all_iterates_scores, last_iterate_scores

__all__ = [
    "LATTICE_BONUS",
    "PathRun",
    "analyse_path",
    "audit_gradient_path",
    "library_claim",
    "path_adjacency",
    "path_scores",
    "signed_gains",
    "signed_scores",
]

#: The adjacency of a run's claim (``privacy.json``'s ``adjacency``) that the signed canaries test.
REPLACE_ONE = "replace_one"
ADD_REMOVE = "add_remove"

#: Added to a canary's score when its observations sit on the lattice {z, z + C} (reused noise): above any
#: likelihood ratio of a few updates, finite so that sorting and ties behave.
LATTICE_BONUS = 1e9
#: The lattice test's tolerance, in clip norms (float32 arithmetic in the library: about 1e-7 relative).
LATTICE_TOLERANCE = 1e-3


@dataclasses.dataclass(frozen=True)
class PathRun:
    """One audited run through the gradient path: the evidence (claim: the library's) and the claim of what ran."""

    evidence: RunEvidence
    ran: Claim
    record: PrivacyRecord
    #: Signed canaries (replace-one): a member's gradient is +C along its direction, a non-member's -C.
    signed: bool = False
    #: The (q_t, noise std_t) the canaries are scored under, when ``ran`` states no Poisson segments (fixed-size
    #: batches); None: ``ran.per_step()``.
    steps: tuple[np.ndarray, np.ndarray] | None = None

    def scoring(self) -> tuple[np.ndarray, np.ndarray]:
        """(q_t, noise std_t on the clipped sum) of the mechanism that ran, every update."""
        return self.steps if self.steps is not None else self.ran.per_step()


def library_claim(record: PrivacyRecord, *, where: str = "privacy.json") -> Claim:
    """The claim the library itself makes for a run (``details.library``: its accountant's history of (sigma, q,
    steps) and its epsilon at the record's delta), as the audit tests it: Poisson-subsampled Gaussian steps."""
    from dpaudit.accounting.segment import Segment
    from dpaudit.common.figures import format_up

    library = record.details.get("library") if isinstance(record.details, dict) else None
    if not isinstance(library, dict) or not library.get("history") or record.delta is None:
        raise UserInputError(f"{where}: no details.library history: the run was not trained through a DP library.")
    try:
        segments = tuple(
            Segment(steps=int(t), sampling_probability=float(q), noise_multiplier=float(s))
            for s, q, t in library["history"]
        )
        epsilon = float(library["epsilon"])
    except (TypeError, ValueError, KeyError) as err:  # a null epsilon: the library's accountant stated none
        raise UserInputError(f"{where}: details.library is damaged ({err}); train the run again.") from None
    name, accountant = str(library.get("name", "library")), str(library.get("accountant", "?"))
    return Claim(
        known=True,
        private=True,
        source="opacus" if name == "opacus" else "stated",
        epsilon=epsilon,
        recorded_epsilon=epsilon,
        delta=float(record.delta),
        accountant=f"{name}-{accountant}",
        clip_norm=float(record.clip_norm or 1.0),
        sampling="poisson",
        segments=segments,
        trainer=record.trainer,
        guarantee=(
            f"({format_up(epsilon)}, {record.delta:g})-DP as {name} {library.get('version', '')} states it (its "
            f"{accountant.upper()} accountant over {sum(s.steps for s in segments)} Poisson-sampled Gaussian steps)."
        ),
    )


def lattice_hits(observations: np.ndarray, shift: float) -> np.ndarray:
    """(m,) whether each canary's observations take exactly two values C apart (within float tolerance), with both
    values seen: the signature of one noise draw reused across updates."""
    y = np.asarray(observations, dtype=np.float64)
    if y.shape[0] < 2:
        return np.zeros(y.shape[1], dtype=bool)
    d = y - y.min(axis=0, keepdims=True)
    tol = LATTICE_TOLERANCE * shift
    low, high = np.abs(d) <= tol, np.abs(d - shift) <= tol
    return np.all(low | high, axis=0) & np.any(high, axis=0)


def path_scores(
    observations: np.ndarray, layout: CanaryLayout, q: np.ndarray, std: np.ndarray, shift: float
) -> np.ndarray:
    """The likelihood ratio of each canary's observations under the mechanism that ran, plus :data:`LATTICE_BONUS`
    where :func:`lattice_hits` fires."""
    scores = all_iterates_scores(observations, layout, q, std, shift)
    return scores + LATTICE_BONUS * lattice_hits(observations, shift)


def signed_scores(observations: np.ndarray, q: np.ndarray, std: np.ndarray, shift: float) -> np.ndarray:
    """The log-likelihood ratio of each signed canary's T observations ((T, m)): its gradient +``shift`` (a member)
    against -``shift``, each step sampled with probability q_t under noise std_t."""
    y = np.asarray(observations, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)[:, None]
    s = np.maximum(np.asarray(std, dtype=np.float64), 1e-300)[:, None]
    if y.ndim != 2 or y.shape[0] != q.shape[0]:
        raise ValueError(f"observations must be (steps={q.shape[0]}, canaries), got {y.shape}.")
    base = np.log1p(-np.minimum(q, 1.0 - 1e-16)) - 0.5 * (y / s) ** 2
    with np.errstate(divide="ignore"):
        log_q = np.log(q)
    plus = np.logaddexp(base, log_q - 0.5 * ((y - shift) / s) ** 2)
    minus = np.logaddexp(base, log_q - 0.5 * ((y + shift) / s) ** 2)
    return np.asarray((plus - minus).sum(axis=0))


def signed_gains(member: np.ndarray, gain: float = CANARY_GAIN) -> np.ndarray:
    """The canaries' gains under replace-one: +``gain`` for a member, -``gain`` for a non-member (both train)."""
    return np.where(np.asarray(member, dtype=bool), gain, -gain)


def path_adjacency(host: object, config: Any) -> str:
    """The adjacency ``host`` will claim for ``config`` (its ``gradient_path_adjacency(config)`` where it has one:
    replace-one for fixed-size batches), :data:`ADD_REMOVE` otherwise."""
    ask = getattr(host, "gradient_path_adjacency", None)
    found = str(ask(config)) if callable(ask) else ADD_REMOVE
    if found not in (ADD_REMOVE, REPLACE_ONE):
        raise ValueError(
            f"the trainer claims adjacency {found!r}; the gradient-path audit tests add_remove or replace_one."
        )
    return found


def analyse_path(
    runs: Sequence[PathRun], *, confidence: float = 0.95, full: bool = True, min_scale: float | None = None
) -> Analysis:
    """Scores (under what ran) and bounds (against the library's claim) of every run; the verdict as in
    :func:`dpaudit.whitebox.analysis.analyse`: the larger of the planned one-run test and the planned pooled test
    (:mod:`dpaudit.whitebox.plan`), each at half the risk.

    ``min_scale`` (with ``full=False``): the f-DP recursion's and the Clopper-Pearson points' search stops at that
    scale of the claim (the order statistics' stops at half the noise); 1.0 gives the verdict (whether the claim's own
    curve is rejected: :attr:`Analysis.mechanism_refuted`) without the figure of a far smaller scale, whose accounting
    is the slow part of a broken library's audit (the power tests use it), and no ceilings."""
    if not runs:
        raise ValueError("no runs to analyse.")
    claim = runs[0].evidence.claim
    for run in runs[1:]:
        if run.evidence.claim.mechanism_key() != claim.mechanism_key():
            raise ValueError("the runs made different claims: pooling them would test no single mechanism.")
    level = 1 - (1 - confidence) / 2
    members: dict[str, list[np.ndarray]] = {"all_iterates": [], "last_iterate": []}
    nonmembers: dict[str, list[np.ndarray]] = {"all_iterates": [], "last_iterate": []}
    for run in runs:
        ev = run.evidence
        q, std = run.scoring()
        if run.signed:
            lattice = LATTICE_BONUS * lattice_hits(ev.observations, run.ran.clip_norm)
            score = signed_scores(ev.observations, q, std, run.ran.clip_norm) + lattice
        else:
            score = path_scores(ev.observations, ev.layout, q, std, run.ran.clip_norm)
        views = {"all_iterates": score}
        if full:
            views["last_iterate"] = last_iterate_scores(ev.final)
        for view, s in views.items():
            members[view].append(s[ev.layout.member])
            nonmembers[view].append(s[~ev.layout.member])
    scores = {view: ViewScores(tuple(members[view]), tuple(nonmembers[view])) for view in members if members[view]}
    # The verdict's two tests are planned as the cooperative audit's are (:func:`dpaudit.whitebox.analysis.analyse`),
    # from the library's claim, m and R alone, before any score is seen: the one-run test (order statistics, the f-DP
    # recursion or the Gaussian pair: :func:`~dpaudit.whitebox.plan.planned_one_run`) and the pooled one (order
    # statistics over the R x m canaries or the Clopper-Pearson points: :func:`~dpaudit.whitebox.plan.planned_pooled`).
    m0, alpha = runs[0].evidence.layout.size, 1 - level
    plans = [planned_guesses(claim, UNIT_EXAMPLE, 0, run.evidence.layout.size, alpha) for run in runs]
    method = planned_one_run(claim, UNIT_EXAMPLE, 0, m0, alpha)
    pooled_method = planned_pooled(claim, UNIT_EXAMPLE, 0, m0, len(runs), alpha) if len(runs) > 1 else "claim_family"
    first = scores["all_iterates"]
    total = sum(run.evidence.layout.size for run in runs)

    def order(view: str, member: np.ndarray, nonmember: np.ndarray, m: int) -> dict[str, Bound]:
        return planned_order_bounds(claim, runs[0].evidence.layout, m, view, member, nonmember, level)

    def gauss(run: PathRun) -> dict[str, Bound]:
        bound = planned_gauss_bound(claim, "all_iterates", first.member[0], first.nonmember[0], run.evidence, level)
        return {"gauss_pair": bound}

    verdict_one: dict[str, Bound] = {}
    if method == "order_stats":
        verdict_one = order("all_iterates", first.member[0], first.nonmember[0], m0)
    elif method == "gauss_pair":
        verdict_one = gauss(runs[0])
    verdict_pooled = order("all_iterates", *first.pooled(), total) if pooled_method == "order_stats" else {}
    if full:
        one_run = {
            view: [
                one_run_bounds(m, n, claim, confidence=level, planned=plan if view == "all_iterates" else None)
                for m, n, plan in zip(vs.member, vs.nonmember, plans)
            ]
            for view, vs in scores.items()
        }
        pooled = {view: multi_run_bounds(*vs.pooled(), claim, confidence=level) for view, vs in scores.items()}
        for view, vs in scores.items():  # the order statistics beside them, as the cooperative audit shows them
            for i, (m, n) in enumerate(zip(vs.member, vs.nonmember)):
                found = verdict_one if view == "all_iterates" and i == 0 and method == "order_stats" else {}
                one_run[view][i]["order_stats"] = (found or order(view, m, n, m.size + n.size))["order_stats"]
            if len(runs) > 1:
                found = verdict_pooled if view == "all_iterates" else order(view, *vs.pooled(), total)
                pooled[view]["order_stats"] = found["order_stats"]
        if method == "gauss_pair":
            one_run["all_iterates"][0]["gauss_pair"] = verdict_one["gauss_pair"]
    else:
        one_run = {
            "all_iterates": [
                {method: verdict_one[method]}
                if verdict_one
                else {
                    "claim_family": one_run_family(
                        first.member[0],
                        first.nonmember[0],
                        claim,
                        confidence=level,
                        planned=plans[0],
                        min_scale=min_scale,
                    )
                }
            ]
        }
        pooled = {
            "all_iterates": {"order_stats": verdict_pooled["order_stats"]}
            if verdict_pooled
            else {"claim_family": multi_run_family(*first.pooled(), claim, confidence=level, min_scale=min_scale)}
        }
    auc = {view: float(roc_curve(*vs.pooled()).auc()) for view, vs in scores.items()}
    sizes = [(m.size, n.size) for m, n in zip(first.member, first.nonmember)]
    # The ceilings (a perfect attack at these sizes) are reported beside the bounds; a verdict-only analysis
    # (``min_scale``) reports none: each costs a search of the claim's scales at this run's member count.
    ceilings = (
        {}
        if min_scale is not None
        else _ceilings(
            claim, sizes, plans[0], level, one_run["all_iterates"][0][method], pooled["all_iterates"][pooled_method]
        )
    )
    analysis = Analysis(
        claim=claim,
        confidence=confidence,
        scores=scores,
        one_run=one_run,
        pooled=pooled,
        auc=auc,
        ceilings=ceilings,
        one_run_method=method,
        pooled_method=pooled_method,
    )
    kind, primary = analysis.primary
    assert claim.epsilon is not None
    if curve_rejected(primary, claim.epsilon) and min_scale is None:  # the printed figure must hold for any mechanism
        bound = _any_mechanism(
            kind,
            (first.member[0], first.nonmember[0]),
            first.pooled(),
            claim,
            level,
            verdict_one if method == "order_stats" else None,
            verdict_pooled or None,
        )
        analysis = dataclasses.replace(analysis, any_mechanism=bound)
    return analysis


def run_coins(seed: int | None, runs: int) -> list[np.random.Generator]:
    """Each run's own coin generator, a child of the auditor's seed sequence (never the trainer's randomness)."""
    return [np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(runs)]


def audit_gradient_path(
    host: GradientPathHost,
    data_dir: Path | None,
    config: Any,
    *,
    canaries: int = 1000,
    runs: int = 1,
    confidence: float = 0.95,
    seed: int | None = None,
    workdir: Path | None = None,
    full: bool = True,
    progress: Callable[[int, int], None] | None = None,
    min_scale: float | None = None,
) -> tuple[Analysis, list[PathRun]]:
    """``runs`` trainings of ``host`` with ``canaries`` fair-coin canaries through the real gradient path each, and
    their analysis (:func:`analyse_path`). The runs train in ``workdir`` (a temporary folder when None, removed).
    A host that claims replace-one for ``config`` (:func:`path_adjacency`) gets signed canaries (:func:`signed_gains`)."""
    if canaries < 2:
        raise ValueError(f"an audit needs at least 2 canaries, got {canaries}.")
    signed = path_adjacency(host, config) == REPLACE_ONE
    own = workdir is None
    base = Path(tempfile.mkdtemp(prefix="dpaudit-gradient-path-")) if workdir is None else Path(workdir)
    try:
        base.mkdir(parents=True, exist_ok=True)
        done: list[PathRun] = []
        for r, rng in enumerate(run_coins(seed, runs)):
            member = rng.integers(0, 2, size=canaries).astype(bool)
            layout = CanaryLayout(member=member, unit=UNIT_EXAMPLE)
            out = base / f"run-{r}"
            shutil.rmtree(out, ignore_errors=True)
            gains = signed_gains(member) if signed else np.where(member, CANARY_GAIN, 0.0)
            observations, final = host.train_with_gradient_canaries(data_dir, out, config, gains=gains, seed=0)
            record = read_privacy_record(out / "privacy.json")
            if (record.adjacency == REPLACE_ONE) != signed:
                raise RuntimeError(
                    f"the trainer said its claim would be {'replace-one' if signed else 'add/remove'}; its "
                    f"privacy.json says {record.adjacency}: the canaries test another adjacency than the claim's."
                )
            ran = claim_of_record(record)
            steps = None if ran.segments else _record_steps(record)
            claim = library_claim(record, where=str(out / "privacy.json"))
            observations = np.asarray(observations, dtype=np.float64)
            updates = ran.steps if steps is None else steps[0].size
            if observations.shape != (updates, canaries):
                raise RuntimeError(
                    f"the trainer observed {observations.shape} canary updates; {updates} updates of {canaries} "
                    "canaries ran."
                )
            evidence = RunEvidence(
                layout=layout, claim=claim, observations=observations, final=np.asarray(final, dtype=np.float64)
            )
            done.append(PathRun(evidence=evidence, ran=ran, record=record, signed=signed, steps=steps))
            if progress is not None:
                progress(r + 1, runs)
        return analyse_path(done, confidence=confidence, full=full, min_scale=min_scale), done
    finally:
        if own:
            shutil.rmtree(base, ignore_errors=True)


def _record_steps(record: PrivacyRecord) -> tuple[np.ndarray, np.ndarray]:
    """(q_t, noise std_t) of every update from the record's stated segments (fixed-size batches: q = B / N each
    update, noise sigma C on the clipped sum), where its event is not Poisson-subsampled Gaussian steps."""
    from dpaudit.accounting.segment import Segment

    clip = float(record.clip_norm or 1.0)
    q: list[np.ndarray] = []
    std: list[np.ndarray] = []
    for raw in record.segments:
        seg = Segment.from_json({k: v for k, v in dict(raw).items() if k != "expected_batch_size"})
        q.append(np.full(seg.steps, seg.sampling_probability))
        std.append(np.full(seg.steps, seg.noise_multiplier * clip))
    if not q:
        raise RuntimeError("privacy.json states no segments: the updates that ran are unknown.")
    return np.concatenate(q), np.concatenate(std)


def path_settings(runs: Sequence[PathRun]) -> dict[str, Any]:
    """What ``whitebox.json`` says about the path and the two claims (written into its ``settings``)."""
    record = runs[0].record
    found = record.details.get("library") if isinstance(record.details, dict) else None
    library: dict[str, Any] = dict(found) if isinstance(found, dict) else {}
    ran = runs[0].ran
    return {
        "canary_path": PATH_GRADIENT,
        "canary_signs": "signed (+C or -C: replace-one)" if runs[0].signed else "present or zeroed (add/remove)",
        "canary_paths": {PATH_GRADIENT: sum(run.evidence.layout.size for run in runs)},
        "library": library.get("name"),
        "library_version": library.get("version"),
        "library_claim": {
            "accountant": library.get("accountant"),
            "epsilon": library.get("epsilon"),
            "history": library.get("history"),
        },
        "dpaudit_claim": {"accountant": ran.accountant, "epsilon": ran.epsilon, "steps": ran.steps},
        "claims_agree": bool(library.get("agrees", True)),
        "mismatches": list(library.get("mismatches") or []),
    }
