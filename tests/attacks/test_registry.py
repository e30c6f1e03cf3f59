"""Contract over every registered attack, and how attack names are resolved."""

from __future__ import annotations

import pytest

from dpaudit.attacks import results
from dpaudit.attacks.base import Attack
from dpaudit.attacks.registry import AttackOptions, attack_class, available_attacks, resolve_attacks
from dpaudit.common.errors import UserInputError

ATTACKS = sorted(available_attacks())


@pytest.mark.parametrize("name", ATTACKS)
def test_every_registered_attack_follows_the_contract(name):
    cls = attack_class(name)
    assert isinstance(cls(), Attack)
    assert cls.name == name
    assert cls.model_kinds and cls.model_kinds <= {"masked-lm", "classifier", "causal-lm"}
    assert name in results._RESULT_TYPES, f"{name}: register its result class with results.register_result"
    assert cls.__doc__ and cls.__module__.startswith("dpaudit.attacks.")


def test_names_are_resolved_in_order_and_all_expands_by_model_kind():
    from dpaudit.attacks.registry import registered_classes

    assert [c.name for c in resolve_attacks(["reconstruction", "exposure", "exposure"], "masked-lm")] == [
        "reconstruction",
        "exposure",
    ]
    assert [c.name for c in resolve_attacks(["all"], "masked-lm")] == [
        c.name for c in registered_classes() if "masked-lm" in c.model_kinds
    ]
    with pytest.raises(UserInputError, match="not an attack"):
        resolve_attacks(["nope"], "masked-lm")
    with pytest.raises(UserInputError, match="needs a causal LM or masked LM, but the model is a classifier"):
        resolve_attacks(["exposure"], "classifier")
    with pytest.raises(UserInputError, match="empty"):
        resolve_attacks([" "], "masked-lm")


def test_a_causal_target_gets_extraction_in_place_of_reconstruction():
    from dpaudit.attacks.registry import DEFAULT_ATTACKS, default_attacks

    assert default_attacks(DEFAULT_ATTACKS, coin_flip=False, model_kind="causal-lm") == ["exposure", "extraction"]
    # coin-flip canaries: the one-run audit, as for a masked LM
    assert default_attacks(DEFAULT_ATTACKS, coin_flip=True, model_kind="causal-lm") == [
        "exposure",
        "extraction",
        "canary",
    ]
    assert default_attacks(DEFAULT_ATTACKS, coin_flip=False, model_kind="masked-lm") == list(DEFAULT_ATTACKS)
    assert [c.name for c in resolve_attacks(["exposure", "extraction"], "causal-lm")] == ["exposure", "extraction"]
    with pytest.raises(UserInputError, match="use --attacks extraction"):
        resolve_attacks(["reconstruction"], "causal-lm")
    with pytest.raises(UserInputError, match="needs a causal LM.*use --attacks reconstruction"):
        resolve_attacks(["extraction"], "masked-lm")


def test_options_are_validated():
    with pytest.raises(ValueError, match="batch_size"):
        AttackOptions(batch_size=0)
    with pytest.raises(ValueError, match="level"):
        AttackOptions(level=1.0)
