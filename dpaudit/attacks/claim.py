"""Which claim an attack run tests: the model's own ``privacy.json``, or one stated for a model trained elsewhere.

The claim itself is :class:`dpaudit.claim.Claim` (its epsilon recomputed from ``privacy.json``'s DpEvent, never the
stored figure); this module only chooses its source from the attack's options and refuses two claims at once.
"""

from __future__ import annotations

import os

from dpaudit.claim import Claim, claim_of_record, opacus_claim, stated_claim
from dpaudit.common.errors import UserInputError

__all__ = ["model_claim", "options_claim"]


def model_claim(
    source: object,
    *,
    claimed_epsilon: float | None = None,
    claimed_delta: float | None = None,
    claimed_from_opacus: str | os.PathLike[str] | None = None,
) -> Claim:
    """The claim of the audited model, the one path every attack and the results take: its ``privacy.json``
    (:func:`dpaudit.claim.claim_of_record`), or, for a model trained elsewhere (no ``privacy.json``), the claim its
    trainer states (``--claimed-epsilon E --claimed-delta D``, tested as given) or its Opacus accountant's history
    (``--claimed-from-opacus``, accounted here).

    Raises:
        UserInputError: a stated claim for a model whose ``privacy.json`` already states one (two claims).
    """
    path = getattr(source, "path", "")
    record = getattr(source, "privacy", None)
    if claimed_from_opacus is not None:
        if record is not None:
            raise UserInputError(
                f"--claimed-from-opacus: --model {path} has a privacy.json that states its claim; "
                "remove --claimed-from-opacus (it is for a model trained elsewhere)."
            )
        assert claimed_delta is not None  # RunOptions refuses --claimed-from-opacus without --claimed-delta
        return opacus_claim(claimed_from_opacus, float(claimed_delta))
    if claimed_epsilon is None:
        return claim_of_record(record, where=f"{path}/privacy.json")
    if record is not None:
        raise UserInputError(
            f"--claimed-epsilon: --model {path} has a privacy.json that states its claim; remove "
            "--claimed-epsilon/--claimed-delta (they are for a model trained elsewhere)."
        )
    assert claimed_delta is not None  # RunOptions refuses --claimed-epsilon without --claimed-delta
    return stated_claim(float(claimed_epsilon), float(claimed_delta))


def options_claim(source: object, options: object) -> Claim:
    """:func:`model_claim` with the claim options of an attack (``claimed_epsilon``, ``claimed_delta``,
    ``claimed_from_opacus``): the one way the attacks and the results read a model's claim."""
    return model_claim(
        source,
        claimed_epsilon=getattr(options, "claimed_epsilon", None),
        claimed_delta=getattr(options, "claimed_delta", None),
        claimed_from_opacus=getattr(options, "claimed_from_opacus", None),
    )
