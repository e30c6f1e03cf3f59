"""dpaudit.training.config_types.check_types: one typed validation for every trainer's Config, whatever the source."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from dpaudit.training.config_types import ConfigTypeError, check_types, option_name


@dataclass(frozen=True, kw_only=True)
class Example:
    sampling: Literal["poisson", "shuffle"] = "poisson"
    steps: int = 10
    learning_rate: float = 1e-3
    name: str = "run"
    non_private: bool = False
    delta: float | None = None
    batch_schedule: str | None = None
    sizes: tuple[int, ...] = (1, 2)
    pair: tuple[int, str] = (1, "a")
    either: int | float = 1

    def __post_init__(self) -> None:
        check_types(self)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sampling": "bogus"}, "--sampling must be one of poisson, shuffle, got 'bogus'."),
        ({"steps": 2.5}, "--steps must be an integer, got 2.5 (float)."),
        ({"steps": True}, "--steps must be an integer, got True (bool)."),
        ({"learning_rate": "fast"}, "--learning-rate must be a number, got 'fast'."),
        ({"learning_rate": False}, "--learning-rate must be a number, got False (bool)."),
        ({"name": 5}, "--name must be a string, got 5 (int)."),
        (
            {"non_private": "false"},
            "--non-private must be true or false (a boolean, not a string or number), got 'false'.",
        ),
        ({"non_private": 0}, "--non-private must be true or false (a boolean, not a string or number), got 0 (int)."),
        ({"delta": "1e-5"}, "--delta must be a number (or left unset), got '1e-5'."),
        ({"batch_schedule": 5}, "--batch-schedule must be a string (or left unset), got 5 (int)."),
        ({"sizes": [1, "2"]}, "--sizes must be a list whose items are each an integer, got [1, '2'] (list)."),
        ({"sizes": "12"}, "--sizes must be a list whose items are each an integer, got '12'."),
        ({"pair": (1, 2)}, "--pair must be a list of 2 items: an integer; a string, got (1, 2) (tuple)."),
        ({"either": "1"}, "--either must be an integer or a number, got '1'."),
    ],
)
def test_bad_values_name_the_option_and_what_it_takes(kwargs, message):
    with pytest.raises(ConfigTypeError) as err:
        Example(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)
    (field,) = kwargs
    assert err.value.field == field and str(err.value) == f"{option_name(field)} {err.value.reason}"
    assert isinstance(err.value, ValueError)  # callers that catch ValueError keep working


def test_good_values_pass_and_ints_become_floats_on_the_frozen_instance():
    config = Example(sampling="shuffle", steps=3, learning_rate=1, delta=0, sizes=[3, 4], either=2)
    assert config.learning_rate == 1.0 and type(config.learning_rate) is float
    assert config.delta == 0.0 and type(config.delta) is float
    assert config.sizes == (3, 4) and type(config.sizes) is tuple  # the annotated container
    assert config.either == 2 and type(config.either) is int  # an exact member wins over conversion
    assert Example(delta=None, batch_schedule=None).delta is None


def test_unsupported_annotations_and_non_dataclasses_are_programming_errors():
    @dataclass(frozen=True)
    class Odd:
        mapping: dict[str, int]

        def __post_init__(self) -> None:
            check_types(self)

    with pytest.raises(TypeError, match="cannot check the annotation"):
        Odd(mapping={"a": 1})
    with pytest.raises(TypeError, match="dataclass instance"):
        check_types(Example)


def test_jax_bert_config_checks_types_first():
    from dpaudit.trainers.jax_bert.config import JaxBertConfig

    # Accepted before: trained with shuffled batches under a Poisson label / without privacy.
    with pytest.raises(ConfigTypeError, match="--sampling must be one of poisson, shuffle, got 'bogus'"):
        JaxBertConfig(noise_multiplier=1.0, sampling="bogus")
    with pytest.raises(ConfigTypeError, match="--non-private must be true or false"):
        JaxBertConfig(non_private="false")
    with pytest.raises(ConfigTypeError, match="--preset must be one of tiny, mini, small, base, large"):
        JaxBertConfig(noise_multiplier=1.0, preset="huge")
    config = JaxBertConfig(noise_multiplier=1, learning_rate=1)
    assert type(config.noise_multiplier) is float and type(config.learning_rate) is float
    assert config.to_dict()["noise_multiplier"] == 1.0
