"""The model's privacy claim as the attacks and the report state it: recomputed from ``privacy.json``'s event.

``privacy.json`` is read once, into a :class:`~dpaudit.training.privacy_record.PrivacyRecord`
(:func:`dpaudit.scoring.source.read_privacy_record`); the epsilon shown beside an attack's lower bound
is :meth:`PrivacyRecord.recompute_epsilon` over the stored DpEvent (never the stored figure), and, when
N is treated as public, the replace-one epsilon recomputed from the same event by PLD.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit.attacks.results import ClaimedPrivacy
from dpaudit.errors import UserInputError

if TYPE_CHECKING:
    from dpaudit.training.privacy_record import PrivacyRecord

__all__ = ["claimed_privacy", "model_claim", "replace_one_epsilon"]


def replace_one_epsilon(record: PrivacyRecord) -> float | None:
    """Epsilon of the stored event under replace-one adjacency (PLD; None when non-private).

    What holds against an adversary who knows N: adding or removing the target changes N, replacing a
    row does not (see :func:`dpaudit.accounting.epsilon_replace_one`).
    """
    if record.event is None or record.delta is None:
        return None
    from dpaudit import accounting  # dp_accounting is heavy: only when asked

    return float(accounting.epsilon_replace_one(accounting.event_from_json(record.event), record.delta))


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
              "guarantee": record.guarantee, "sampling": record.sampling}
    if not record.proven:  # shuffled fixed-size batches: the figure is as-if-Poisson, never a claim
        return ClaimedPrivacy(**common, epsilon=None, recorded_epsilon=None, epsilon_if_poisson=recomputed)
    return ClaimedPrivacy(**common, epsilon=recomputed, recorded_epsilon=record.epsilon, n_public=record.n_public,
                          epsilon_replace_one=replace_one)


def model_claim(source: object, *, claimed_epsilon: float | None = None, claimed_delta: float | None = None
                ) -> ClaimedPrivacy:
    """The claim of the audited model, the one path every attack and the results take: its ``privacy.json``
    (:func:`claimed_privacy`), or, for a model trained elsewhere (no ``privacy.json``), the claim its trainer
    states (``--claimed-epsilon E --claimed-delta D``), which the attacks test as given and dpaudit cannot verify.

    Raises:
        UserInputError: a stated claim for a model whose ``privacy.json`` already states one (two claims).
    """
    path = getattr(source, "path", "")
    record = getattr(source, "privacy", None)
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
