"""One DP-options base for every trainer Config, one validator, one step adapter base.

Every registered trainer's Config inherits :class:`~dpaudit.training.dp_options.DpOptions`, declares none of its
fields again except the deliberate overrides listed here (a help that genuinely differs per trainer, each with a
comment saying why), and refuses the same bad values and combinations with the same words. Both step adapters
(jax-bert's and the torch trainers') derive from :class:`~dpaudit.training.plugin.ClippedSumStep` and state the
same clip norm, factor and sensitivity for the same clipping, private or not (docs/architecture.md, "Adding a
trainer").
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from types import SimpleNamespace

import pytest

from dpaudit.training import ClippedStep, ClippedSumStep
from dpaudit.training.api import available_trainers, load_trainer
from dpaudit.training.dp_options import DpOptions
from dpaudit.training.privacy_plan import plan_privacy

TRAINERS = sorted(available_trainers())
DP_FIELDS = [f.name for f in dataclasses.fields(DpOptions)]

#: The DpOptions fields a trainer Config (or a shared base of several) redeclares on purpose: the help says what
#: this trainer starts from or clips, which differs per trainer. The default never changes (tested below).
DELIBERATE_OVERRIDES: dict[str, set[str]] = {
    "JaxBertConfig": {"init_from"},  # BERT masked-LM directories; their architecture replaces --preset
    "TorchTrainConfig": {"init_from"},  # per --task: BERT masked LM / classifier, or any causal LM
    "EdpSgdConfig": {"clip_norm"},  # per example (dp-sgd) or per micro-batch with per-layer norms (edp-sgd, 2C)
    "RgpConfig": {"clip_norm"},  # each example's joint vector of carrier gradients
}


def _config_cls(name: str) -> type:
    return load_trainer(name).Config


#: The trainers with a non-private mode (rgp is always private: its Config has no ``non_private``).
WITH_NON_PRIVATE = [n for n in TRAINERS if "non_private" in {f.name for f in dataclasses.fields(_config_cls(n))}]


def _own_annotations(cls: type) -> set[str]:
    return set(cls.__dict__.get("__annotations__", {}))


@pytest.mark.parametrize("name", TRAINERS)
def test_every_trainer_config_is_a_frozen_keyword_only_dp_options(name):
    cls = _config_cls(name)
    assert issubclass(cls, DpOptions), cls
    params = cls.__dataclass_params__
    assert params.frozen and all(f.kw_only for f in dataclasses.fields(cls))
    assert set(DP_FIELDS) <= {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("name", TRAINERS)
def test_the_shared_fields_are_declared_once(name):
    """No class between the trainer's Config and DpOptions redeclares a DpOptions field, except a listed override,
    which keeps DpOptions' default and type, carries a help of its own and a comment saying why."""
    for cls in _config_cls(name).__mro__:
        if cls is DpOptions or not dataclasses.is_dataclass(cls) or not issubclass(cls, DpOptions):
            continue
        redeclared = _own_annotations(cls) & set(DP_FIELDS)
        allowed = DELIBERATE_OVERRIDES.get(cls.__name__, set())
        assert redeclared <= allowed, f"{cls.__qualname__} redeclares {sorted(redeclared - allowed)} of DpOptions"
        source = inspect.getsource(cls)
        base = {f.name: f for f in dataclasses.fields(DpOptions)}
        for name_ in redeclared:
            mine = cls.__dataclass_fields__[name_]
            assert mine.default == base[name_].default and mine.type == base[name_].type, (cls, name_)
            assert mine.metadata["help"] and mine.metadata["help"] != base[name_].metadata["help"], (cls, name_)
            lines = source.splitlines()
            at = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{name_}:"))
            assert lines[at - 1].strip().startswith("# Overrides DpOptions."), (cls, name_, lines[at - 1])


def test_every_listed_override_exists():
    """The list above is not stale: each override it names is declared where it says."""
    classes = {cls.__name__: cls for name in TRAINERS for cls in _config_cls(name).__mro__}
    for cls_name, names in DELIBERATE_OVERRIDES.items():
        if cls_name in classes:
            assert names <= _own_annotations(classes[cls_name]), cls_name


@pytest.mark.parametrize("name", TRAINERS)
def test_the_dp_options_come_last_in_the_help_in_their_declared_order(name):
    from dpaudit.cli.train import config_options

    names = [o.name for o in config_options(_config_cls(name)) if not o.hidden]
    assert names[-len(DP_FIELDS) :] == DP_FIELDS


# (overrides, the refusal every trainer gives). {no_noise} is the trainer's NO_NOISE, {run} its private run's words.
BAD = [
    (
        {"noise_multiplier": 0.0},
        "--noise-multiplier must be between 1e-10 and 1e10, got 0.0 (below 1e-10 one step "
        "alone has epsilon above 1e19: no privacy; for no noise use {no_noise}).",
    ),
    (
        {"noise_multiplier": -1.0},
        "--noise-multiplier must be between 1e-10 and 1e10, got -1.0 (a noise multiplier is "
        "a standard deviation over a bound: never negative).",
    ),
    ({"noise_multiplier": math.nan}, "--noise-multiplier must be between 1e-10 and 1e10, got nan (not a number)."),
    (
        {"noise_multiplier": 1e11},
        "--noise-multiplier must be between 1e-10 and 1e10, got 100000000000.0 (above 1e10 "
        "the noise drowns every gradient and epsilon is ~0).",
    ),
    ({"noise_multiplier": None, "target_epsilon": 0.0}, "--target-epsilon must be > 0, got 0.0."),
    ({"noise_multiplier": None, "target_epsilon": math.inf}, "--target-epsilon must be > 0, got inf."),
    ({"delta": 1.0}, "--delta must be in (0, 1), got 1.0."),
    ({"delta": 0.0}, "--delta must be in (0, 1), got 0.0."),
    ({"clip_norm": 0.0}, "--clip-norm must be a finite number > 0, got 0.0."),
    ({"clip_norm": math.inf}, "--clip-norm must be a finite number > 0, got inf."),
    ({"dataset_size": 0}, "--dataset-size must be an integer >= 1, got 0."),
    ({"noise_seed": -1}, "--noise-seed must be an integer >= 0, got -1."),
    ({"init_from": " "}, "--init-from must be a directory path, got ' '."),
    ({"data_split": "private"}, "--data-split must be one of train, public, got 'private'."),
    (
        {"accept_noise_tail": "yes"},
        "--accept-noise-tail must be true or false (a boolean, not a string or number), got 'yes'.",
    ),
    ({"delta": "1e-5"}, "--delta must be a number (or left unset), got '1e-5'."),
    (
        {"noise_multiplier": None, "target_epsilon": None},
        "{run} needs --target-epsilon (calibrate the noise) or --noise-multiplier (for no noise use {no_noise}).",
    ),
]


@pytest.mark.parametrize("name", TRAINERS)
@pytest.mark.parametrize(("overrides", "message"), BAD, ids=[f"{sorted(o.items())}" for o, _ in BAD])
def test_the_validator_refuses_the_same_values_in_every_trainer(name, overrides, message):
    trainer = load_trainer(name)
    with pytest.raises(ValueError) as err:
        trainer.tiny_config(**overrides)
    probe = trainer.tiny_config()
    assert str(err.value) == message.format(no_noise=type(probe).NO_NOISE, run=probe.private_run_words())


@pytest.mark.parametrize("name", WITH_NON_PRIVATE)
@pytest.mark.parametrize(
    "given",
    [{"noise_multiplier": 1.0}, {"target_epsilon": 3.0}, {"delta": 1e-5}, {"noise_multiplier": 1.0, "delta": 1e-6}],
)
def test_a_run_without_noise_refuses_the_guarantee_options_in_every_trainer(name, given):
    """Where a trainer has a non-private mode (``--non-private``), the refusal of sigma, epsilon or delta is one."""
    cls = _config_cls(name)
    trainer = load_trainer(name)
    quiet = {"non_private": True, "noise_multiplier": None, "target_epsilon": None}
    assert not trainer.tiny_config(**quiet).private
    with pytest.raises(ValueError) as err:
        trainer.tiny_config(**{**quiet, **given})
    flags = ", ".join("--" + key.replace("_", "-") for key in given)
    assert str(err.value) == f"{cls.NO_NOISE} takes no {flags}: a non-private run has no (epsilon, delta) guarantee."


@pytest.mark.parametrize("name", TRAINERS)
def test_the_edges_every_trainer_accepts(name):
    trainer = load_trainer(name)
    assert trainer.tiny_config(noise_multiplier=1e10).noise_multiplier == 1e10
    assert trainer.tiny_config(noise_multiplier=1e-10, accept_noise_tail=True).noise_multiplier == 1e-10
    capped = trainer.tiny_config(noise_multiplier=1.0, target_epsilon=8.0, delta=0.5)  # both: the target is a cap
    assert (capped.target_epsilon, capped.delta) == (8.0, 0.5)
    assert trainer.tiny_config(noise_multiplier=None, target_epsilon=8.0, dataset_size=1, noise_seed=0).private
    assert trainer.tiny_config(clip_norm=1).clip_norm == 1.0 and isinstance(
        trainer.tiny_config(clip_norm=1).clip_norm, float
    )


@pytest.mark.parametrize("name", TRAINERS)
def test_an_older_checkpoint_config_upgrades_through_the_base(name):
    """The ClassVars stay each trainer's: renamed fields, fields added since, the redacted seed."""
    config = load_trainer(name).tiny_config(noise_seed=5)
    stored = config.to_dict()
    assert stored["noise_seed"] == "<given: secret>"
    old = {key: value for key, value in stored.items() if key not in type(config).ADDED_FIELDS} | {"noise_seed": 5}
    old = {({v: k for k, v in type(config).RENAMED_FIELDS.items()}).get(key, key): value for key, value in old.items()}
    assert type(config).upgrade_stored(old) == stored
    assert config.mismatches(old) == []
    assert "keep_checkpoints" in type(config).RUN_ONLY_FIELDS


# -- the step adapters ----------------------------------------------------------------------------------------


def _jax_step(sensitivity: float | None):
    pytest.importorskip("jax")
    from dpaudit.trainers.jax_bert.trainer import _Step

    return _Step(SimpleNamespace(fns=SimpleNamespace(step=SimpleNamespace(sensitivity=sensitivity))))


def _torch_step(clipper):
    pytest.importorskip("torch")
    from dpaudit.trainers.torch_common.loop import TorchStep

    return TorchStep(SimpleNamespace(clipper=clipper))


def _figures(step) -> tuple:
    return step.clip_norm, step.sensitivity_factor, step.sensitivity


def test_the_step_adapters_agree_on_the_sensitivity_of_per_example_clipping():
    import torch

    from dpaudit.trainers.torch_common.clipping.per_example import PerExampleClipper

    clipper = PerExampleClipper(torch.nn.Linear(3, 2), lambda *a: None, clip_norm=0.7, physical_batch=4)
    steps = [_jax_step(0.7), _torch_step(clipper)]
    for step in steps:
        assert isinstance(step, ClippedSumStep) and isinstance(step, ClippedStep) and step.private
    assert _figures(steps[0]) == _figures(steps[1]) == (0.7, 1.0, 0.7)


def test_a_micro_batch_clipper_states_twice_its_clip_norm():
    import torch

    from dpaudit.trainers.torch_common.clipping.microbatch import MicrobatchClipper

    model = torch.nn.Linear(3, 2)
    clipper = MicrobatchClipper(model, lambda *a: None, layer_clip_norms=[0.6, 0.8], param_groups=[0, 1])
    assert _figures(_torch_step(clipper)) == (pytest.approx(1.0), 2.0, pytest.approx(2.0))


def test_the_step_adapters_agree_on_a_non_private_run():
    """No clipping: no clip norm and NO sensitivity (None, not 0: an unclipped sum has no bound), factor 1. The plan
    accounts nothing for either, and the record of a non-private run states no clip norm or sensitivity."""
    steps = [_jax_step(None), _torch_step(None)]
    assert _figures(steps[0]) == _figures(steps[1]) == (None, 1.0, None)
    assert not any(step.private for step in steps)
    for step in steps:
        plan = plan_privacy(
            dataset_size=100,
            stages=[(5, 10)],
            non_private=True,
            noise_multiplier=None,
            target_epsilon=None,
            delta=None,
            sensitivity_factor=step.sensitivity_factor,
        )
        assert not plan.private and not plan.sigmas


def test_the_step_base_refuses_figures_that_disagree():
    class Step(ClippedSumStep):
        def __call__(self, step, indices, sigma, expected_batch):
            return None

    assert _figures(Step(clip_norm=0.5, sensitivity_factor=2)) == (0.5, 2.0, 1.0)
    with pytest.raises(ValueError, match="is not sensitivity_factor x clip_norm"):
        Step(clip_norm=0.5, sensitivity_factor=2, sensitivity=0.5)
    with pytest.raises(ValueError, match="no sensitivity"):
        Step(clip_norm=None, sensitivity=1.0)
    for bad in ({"clip_norm": math.inf}, {"clip_norm": 0.0}, {"clip_norm": 1.0, "sensitivity_factor": 0.5}):
        with pytest.raises(ValueError):
            Step(**bad)
    with pytest.raises(TypeError):
        ClippedSumStep(clip_norm=1.0)  # abstract: a step must say what it runs
