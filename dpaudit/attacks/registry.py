"""Attack registry: name -> attack class, imported only when that attack runs.

Adding an attack is one module under :mod:`dpaudit.attacks` and one line here. ``"all"`` expands to
every registered attack that supports the model's kind. The defaults gain the canary attack's one-run
audit on coin-flip canaries (:func:`default_attacks`). Any membership attack brings the blind baseline
(:data:`BLIND_BASELINE`, Das et al. 2024) along, last, unless ``blind=False``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence

from dpaudit.attacks.base import Attack
from dpaudit.errors import UserInputError

#: name -> "module:Class".
ATTACKS: dict[str, str] = {
    "exposure": "dpaudit.attacks.exposure:ExposureAttack",
    "reconstruction": "dpaudit.attacks.reconstruction:ReconstructionAttack",
    "extraction": "dpaudit.attacks.extraction:ExtractionAttack",
    "loss": "dpaudit.attacks.loss:LossAttack",
    "shadow": "dpaudit.attacks.shokri:ShadowAttack",
    "ref": "dpaudit.attacks.ref:RefAttack",
    "lira": "dpaudit.attacks.lira:LiraAttack",
    "rmia": "dpaudit.attacks.rmia:RmiaAttack",
    "canary": "dpaudit.attacks.canary:CanaryAttack",
    "blind": "dpaudit.attacks.blind:BlindAttack",
    "zlib": "dpaudit.attacks.causal_mia:ZlibAttack",
    "min-k": "dpaudit.attacks.causal_mia:MinKAttack",
    "min-k++": "dpaudit.attacks.causal_mia:MinKPlusPlusAttack",
}
#: The baseline that never queries the model, run beside every attack of :data:`MEMBERSHIP_ATTACKS`.
BLIND_BASELINE = "blind"
#: The attacks that score the membership tasks (members = train rows, non-members = heldout rows) from the model.
MEMBERSHIP_ATTACKS: frozenset[str] = frozenset({"loss", "shadow", "ref", "lira", "rmia", "zlib", "min-k", "min-k++"})
DEFAULT_ATTACKS: tuple[str, ...] = ("exposure", "reconstruction")
#: The defaults for a causal LM: its secrets are extracted from their prefix (nothing is masked).
CAUSAL_DEFAULT_ATTACKS: tuple[str, ...] = ("exposure", "extraction")
#: The model kinds (:mod:`dpaudit.scoring.source`) in words, for messages.
_KIND_WORDS = {"masked-lm": "masked LM", "causal-lm": "causal LM", "classifier": "classifier"}
#: Added to the defaults for a masked or causal LM whose canaries are coin-flip ones: the one-run audit.
ONE_RUN_ATTACK = "canary"


def default_attacks(names: Sequence[str], *, coin_flip: bool, model_kind: str) -> list[str]:
    """``names``, plus :data:`ONE_RUN_ATTACK` when they are the defaults and the run can be audited in one run
    (coin-flip canaries, a masked or causal LM): ``dpaudit attack`` then reports the one-run bounds without being
    asked. For a causal LM the defaults are :data:`CAUSAL_DEFAULT_ATTACKS` (extraction in place of reconstruction)."""
    names = [n.strip() for n in names if n.strip()]
    if tuple(names) == DEFAULT_ATTACKS and model_kind == "causal-lm":  # scoring.CAUSAL_LM: reconstruction's counterpart
        names = list(CAUSAL_DEFAULT_ATTACKS)
        return [*names, ONE_RUN_ATTACK] if coin_flip else names
    if tuple(names) == DEFAULT_ATTACKS and coin_flip and model_kind in attack_class(ONE_RUN_ATTACK).model_kinds:
        return [*names, ONE_RUN_ATTACK]
    return names


def attack_class(name: str) -> type[Attack]:
    """Import the attack registered as ``name``."""
    if name not in ATTACKS:
        raise UserInputError(f"--attacks {name!r} is not an attack; choose from: {', '.join(sorted(ATTACKS))}, all.")
    module, attribute = ATTACKS[name].split(":")
    return getattr(importlib.import_module(module), attribute)


def resolve_attacks(names: Iterable[str], model_kind: str, *, model: str = "the model", blind: bool = True
                    ) -> list[type[Attack]]:
    """Attack classes for ``names`` (``"all"`` = every attack supporting ``model_kind``), in order; with ``blind``,
    the blind baseline last when a membership attack is among them (and it is not already).

    Raises:
        UserInputError: an unknown name, or an attack that does not support the model's kind.
    """
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise UserInputError("--attacks is empty; name at least one attack, e.g. --attacks exposure,reconstruction.")
    out: list[type[Attack]] = []
    for name in names:
        if name == "all":
            classes = [attack_class(n) for n in ATTACKS]
            out.extend(c for c in classes if model_kind in c.model_kinds and c not in out)
            continue
        cls = attack_class(name)
        if name == "reconstruction" and model_kind == "causal-lm":
            raise UserInputError(f"--attacks reconstruction fills a masked secret, and {model} is a causal-lm with no mask; "
                                 "use --attacks extraction (the secret decoded from its prefix, greedy and beam).")
        if name == "extraction" and model_kind == "masked-lm":
            raise UserInputError(f"--attacks extraction decodes a secret from its prefix, which needs a causal LM, and "
                                 f"{model} is a masked LM; use --attacks reconstruction (the masked secret filled in: "
                                 "extraction's counterpart for a masked LM).")
        if model_kind not in cls.model_kinds:
            needs = " or ".join(_KIND_WORDS.get(kind, kind) for kind in sorted(cls.model_kinds))
            fitting = [n for n in ATTACKS if n != BLIND_BASELINE and model_kind in attack_class(n).model_kinds]
            raise UserInputError(f"--attacks {name} needs a {needs}, but {model} is a "
                                 f"{_KIND_WORDS.get(model_kind, model_kind)}; pass a {needs}, or choose an attack for "
                                 f"it: {', '.join(fitting)}.")
        if cls not in out:
            out.append(cls)
    if not out:
        raise UserInputError(f"--attacks all: no registered attack supports a {model_kind} model.")
    if blind and any(c.name in MEMBERSHIP_ATTACKS for c in out) and all(c.name != BLIND_BASELINE for c in out):
        out.append(attack_class(BLIND_BASELINE))
    return out
