"""``dpaudit attack --shadow-config FILE.json`` reads its keys by the rules of ``dpaudit train --config``
(hardening): an unknown key is refused in one line naming the file and the key, where it used to be dropped
and the shadow models trained with that field's default."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.training.api import load_trainer


def test_unknown_shadow_config_key_is_refused(tiny_causal_dir, data_dir, tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"epochs": 2, "batch_sise": 16}), encoding="utf-8")
    before = recipe.read_bytes()
    out, cache = tmp_path / "out", tmp_path / "cache"
    result = CliRunner().invoke(
        cli,
        [
            "attack",
            "--model",
            str(tiny_causal_dir),
            "--data",
            str(data_dir),
            "--out",
            str(out),
            "--attacks",
            "shadow",
            "--shadow-trainer",
            "edp-sgd",
            "--shadow-config",
            str(recipe),
            "--shadow-cache",
            str(cache),
        ],
    )
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert f"--shadow-config {recipe}: unknown key 'batch_sise'; valid keys are " in result.output
    assert "batch_size" in result.output  # the valid keys are listed
    assert not out.exists() and not cache.exists() and recipe.read_bytes() == before


def test_shadow_config_keys_follow_train_config_rules(tmp_path):
    from dpaudit.attacks.shadow_models import shadow_config_fields

    trainer = load_trainer("edp-sgd")
    recipe = tmp_path / "r.json"
    # Dashes or underscores, a former name read as the current one (as in a train --config file).
    recipe.write_text(
        json.dumps({"batch-size": 16, "epochs": 2, "model": None, "trainer": "edp-sgd"}), encoding="utf-8"
    )
    assert shadow_config_fields(recipe, trainer) == {"batch_size": 16, "epochs": 2, "init_from": None}
    recipe.write_text(json.dumps({"batch-size": 16, "batch_size": 8}), encoding="utf-8")
    with pytest.raises(
        UserInputError,
        match=r"--shadow-config .*r\.json: keys 'batch-size' and 'batch_size' both set "
        r"batch_size; keep one\.",
    ):
        shadow_config_fields(recipe, trainer)


def test_train_config_and_shadow_config_refuse_an_unknown_key_alike(data_dir, tmp_path):
    from dpaudit.attacks.shadow_models import shadow_config_fields

    toml = tmp_path / "c.toml"
    toml.write_text("epochs = 2\nbatch_sise = 16\n", encoding="utf-8")
    out = tmp_path / "model"
    result = CliRunner().invoke(
        cli, ["train", "--trainer", "edp-sgd", "--data", str(data_dir), "--out", str(out), "--config", str(toml)]
    )
    assert result.exit_code == 2 and not out.exists(), result.output
    recipe = tmp_path / "c.json"
    recipe.write_text(json.dumps({"epochs": 2, "batch_sise": 16}), encoding="utf-8")
    with pytest.raises(UserInputError) as refused:
        shadow_config_fields(recipe, load_trainer("edp-sgd"))
    expected = result.output.strip().removeprefix("Error: ").replace(f"--config {toml}", f"--shadow-config {recipe}")
    assert str(refused.value) == expected
