"""The model's privacy claim as the attacks and the report state it: recomputed from ``privacy.json``'s event.

``privacy.json`` is read once, into a :class:`~dpaudit.training.privacy_record.PrivacyRecord`
(:func:`dpaudit.scoring.source.read_privacy_record`); the epsilon shown beside an attack's lower bound
is :meth:`PrivacyRecord.recompute_epsilon` over the stored DpEvent (never the stored figure), and, when
N is treated as public, the replace-one epsilon recomputed from the same event by PLD.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from dpaudit.attacks.results import ClaimedPrivacy
from dpaudit.errors import UserInputError

if TYPE_CHECKING:
    from dpaudit.training.privacy_record import PrivacyRecord

__all__ = ["claim_conditions", "claimed_privacy", "model_claim", "opacus_claim", "options_claim", "opacus_history", "replace_one_epsilon"]


def replace_one_epsilon(record: PrivacyRecord) -> float | None:
    """Epsilon of the stored event under replace-one adjacency (PLD; None when non-private).

    What holds against an adversary who knows N: adding or removing the target changes N, replacing a
    row does not (see :func:`dpaudit.accounting.epsilon_replace_one`).
    """
    if record.event is None or record.delta is None:
        return None
    from dpaudit import accounting  # dp_accounting is heavy: only when asked

    # at the accountant's delta: the stated one holds the float noise sampler's tail figure besides
    return float(accounting.epsilon_replace_one(accounting.event_from_json(record.event), record.delta_parts().accountant))


#: A tail figure above this share of delta is named in the claim line (below it, it is negligible).
TAIL_SHOWN_ABOVE = 0.01


def claim_conditions(record: PrivacyRecord) -> tuple[str, ...]:
    """What a private run's epsilon holds only under, in the words of the claim line: a start declared private first
    (the epsilon does not cover what it learned), then a start not known to be public, an explicit noise seed, and a
    noise-sampler tail that is not negligible beside delta (it is inside delta, and said so)."""
    out = []
    start = record.init_from or {}
    if record.init_from is not None:
        where = start.get("path") or "the --init-from start"
        if start.get("accepted_private"):
            trained = start.get("trained_on") or "private data"
            out.append(f"it does NOT cover what the --init-from start {where} learned: that start trained on {trained}, "
                       "not public data only (declared with --accept-private-start)")
        elif start.get("public_data_only") is not True:
            out.append(f"it holds only if the --init-from start {where} was trained on public data only")
    if record.noise_seed_explicit:
        out.append("it holds only while the --noise-seed given to training stays secret")
    tail, delta = record.noise_tail_delta, record.delta
    if tail is not None and delta and tail > TAIL_SHOWN_ABOVE * delta:
        from dpaudit.figures import format_up

        out.append(f"its delta includes the float noise sampler's tail, {format_up(tail, 2)}")
    return tuple(out)


def claimed_privacy(record: PrivacyRecord | None, *, where: str = "privacy.json") -> ClaimedPrivacy:
    """The model's claim, with epsilon recomputed from the record's DpEvent (never copied).

    Args:
        record: the train run's privacy record; None for a bare model directory (the claim is unknown).
        where: the file, named in the one-line error when its event cannot be read.

    Raises:
        UserInputError: the stored event is not a DpEvent this dpaudit can account.
    """
    if record is None:
        return ClaimedPrivacy(known=False, guarantee="unknown: a bare model directory has no privacy.json.")
    if not record.private:
        return ClaimedPrivacy(known=True, private=False, guarantee=record.guarantee or "non-private: epsilon = inf.")
    if record.delta is None:
        raise UserInputError(f"{where}: a private run's record has no delta; rerun dpaudit train.")
    try:
        recomputed = record.recompute_epsilon()
        replace_one = replace_one_epsilon(record) if record.n_public and record.proven else None
    except (KeyError, TypeError, ValueError) as err:
        raise UserInputError(f"{where}: cannot read the DpEvent ({err}); rerun dpaudit train.") from None
    common = {"known": True, "private": True, "delta": float(record.delta), "accountant": record.accountant or "pld",
              "guarantee": record.guarantee, "sampling": record.sampling, "conditions": claim_conditions(record)}
    if not record.proven:  # shuffled fixed-size batches: the figure is as-if-Poisson, never a claim
        return ClaimedPrivacy(**common, epsilon=None, recorded_epsilon=None, epsilon_if_poisson=recomputed)
    return ClaimedPrivacy(**common, epsilon=recomputed, recorded_epsilon=record.epsilon, n_public=record.n_public,
                          epsilon_replace_one=replace_one, segments=tuple(dict(s) for s in record.segments) or None)


def opacus_history(path: str | os.PathLike[str]) -> list[tuple[float, float, int]]:
    """The ``history`` of an Opacus accountant's saved state: ``[(noise_multiplier, sample_rate, steps), ...]``.

    The file is ``json.dump(accountant.state_dict(), f)`` or ``torch.save(accountant.state_dict(), path)`` (read
    with ``weights_only=True``: plain numbers and lists only, never an arbitrary pickle).

    Raises:
        UserInputError: unreadable, or not an accountant's state.
    """
    import json

    where = f"--claimed-from-opacus {path}"
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        try:
            import torch

            state = torch.load(path, weights_only=True)
        except Exception as err:  # noqa: BLE001 - any unreadable file is one line
            raise UserInputError(f"{where}: neither JSON nor a torch-saved state dict ({type(err).__name__}); save it "
                                 "with json.dump(accountant.state_dict(), f).") from None
    except OSError as err:
        raise UserInputError(f"{where}: cannot read it ({err.strerror or err}).") from None
    except ValueError as err:
        raise UserInputError(f"{where}: not valid JSON ({err}).") from None
    history = state.get("history") if isinstance(state, dict) else None
    if not isinstance(history, (list, tuple)) or not history:
        raise UserInputError(f"{where}: no 'history' of (noise_multiplier, sample_rate, steps); pass the state_dict() "
                             "of an Opacus RDP, PRV or GDP accountant after training.")
    rows = []
    for i, row in enumerate(history):
        try:
            sigma, q, steps = row
            rows.append((float(sigma), float(q), int(steps)))
        except (TypeError, ValueError):
            raise UserInputError(f"{where}: history entry {i} is {row!r}, not (noise_multiplier, sample_rate, steps)."
                                 ) from None
    return rows


def opacus_claim(path: str | os.PathLike[str], delta: float) -> ClaimedPrivacy:
    """The claim of a model trained with Opacus, from its accountant's history: Poisson-sampled Gaussian steps
    (what Opacus's DP-SGD runs and its accountants assume: add/remove adjacency, one example's clipped gradient of
    norm at most C, noise std sigma C), accounted here by PLD at ``delta`` (not copied from Opacus)."""
    import dp_accounting

    from dpaudit import accounting
    from dpaudit.accounting.events import Segment
    from dpaudit.figures import format_up

    try:
        segments = [Segment(steps=steps, sampling_probability=q, noise_multiplier=sigma)
                    for sigma, q, steps in opacus_history(path)]
    except ValueError as err:
        raise UserInputError(f"--claimed-from-opacus {path}: {err}") from None
    event = dp_accounting.ComposedDpEvent([s.event() for s in segments])
    epsilon = float(accounting.epsilon(event, delta))
    steps = sum(s.steps for s in segments)
    return ClaimedPrivacy(known=True, private=True, epsilon=epsilon, recorded_epsilon=epsilon, delta=float(delta),
                          accountant="pld", sampling="poisson", segments=tuple(s.to_json() for s in segments),
                          guarantee=(f"({format_up(epsilon)}, {delta:g})-DP for one example (add/remove), accounted by dpaudit "
                                     f"(PLD) from the Opacus accountant's history in {path}: {steps} Poisson-sampled "
                                     "Gaussian steps. It holds if the training ran what that history says (per-example "
                                     "clipping, Poisson sampling, secret noise); dpaudit did not see the training."))


def model_claim(source: object, *, claimed_epsilon: float | None = None, claimed_delta: float | None = None,
                claimed_from_opacus: str | os.PathLike[str] | None = None) -> ClaimedPrivacy:
    """The claim of the audited model, the one path every attack and the results take: its ``privacy.json``
    (:func:`claimed_privacy`), or, for a model trained elsewhere (no ``privacy.json``), the claim its trainer
    states (``--claimed-epsilon E --claimed-delta D``), which the attacks test as given and dpaudit cannot verify.

    Raises:
        UserInputError: a stated claim for a model whose ``privacy.json`` already states one (two claims).
    """
    path = getattr(source, "path", "")
    record = getattr(source, "privacy", None)
    if claimed_from_opacus is not None:
        if record is not None:
            raise UserInputError(f"--claimed-from-opacus: --model {path} has a privacy.json that states its claim; "
                                 "remove --claimed-from-opacus (it is for a model trained elsewhere).")
        return opacus_claim(claimed_from_opacus, float(claimed_delta))
    if claimed_epsilon is None:
        return claimed_privacy(record, where=f"{path}/privacy.json")
    if record is not None:
        raise UserInputError(f"--claimed-epsilon: --model {path} has a privacy.json that states its claim; remove "
                             "--claimed-epsilon/--claimed-delta (they are for a model trained elsewhere).")
    return ClaimedPrivacy(known=True, private=True, epsilon=float(claimed_epsilon), recorded_epsilon=float(claimed_epsilon),
                          delta=float(claimed_delta), accountant="stated",
                          guarantee=(f"({claimed_epsilon:g}, {claimed_delta:g})-DP as stated with --claimed-epsilon/"
                                     "--claimed-delta for a model trained elsewhere; dpaudit did not account it (no "
                                     "privacy.json): the attacks test the claim as given."))


def options_claim(source: object, options: object) -> ClaimedPrivacy:
    """:func:`model_claim` with the claim options of an attack (``claimed_epsilon``, ``claimed_delta``,
    ``claimed_from_opacus``): the one way the attacks and the results read a model's claim."""
    return model_claim(source, claimed_epsilon=getattr(options, "claimed_epsilon", None),
                       claimed_delta=getattr(options, "claimed_delta", None),
                       claimed_from_opacus=getattr(options, "claimed_from_opacus", None))
