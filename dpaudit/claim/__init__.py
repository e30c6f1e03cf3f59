"""The privacy claim: ``privacy.json``'s contract and the one :class:`Claim` type every reader uses.

- :mod:`.record`: :class:`PrivacyRecord`, the one typed, versioned ``privacy.json`` (written by the trainer kit,
  read back with :func:`read_privacy_record`);
- :mod:`.claim`: :class:`Claim`, what a model claims (from a record, stated for a model trained elsewhere, or unknown),
  with its epsilon recomputed from the stored event and its mechanism checked against the file's sigmas;
- :mod:`.opacus`: the claim of a model trained with Opacus, from its accountant's history.

This package sits above :mod:`dpaudit.audit` (a claim that states its mechanism offers the audit's trade-off curves)
and below the trainer kit, the attacks, the headline, the white-box audit and the report, which all read claims
through it.
"""

from dpaudit.claim.claim import (
    Claim,
    claim_conditions,
    claim_of_record,
    replace_one_epsilon,
    stated_claim,
    unknown_claim,
)
from dpaudit.claim.opacus import opacus_claim, opacus_history
from dpaudit.claim.record import PrivacyRecord, read_privacy_record

__all__ = [
    "Claim",
    "PrivacyRecord",
    "claim_conditions",
    "claim_of_record",
    "opacus_claim",
    "opacus_history",
    "read_privacy_record",
    "replace_one_epsilon",
    "stated_claim",
    "unknown_claim",
]
