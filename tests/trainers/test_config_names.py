"""One name per setting across trainers, the old jax-bert names still read, and no config releases the noise seed.

jax-bert's ``micro_batch``/``clipping`` are the torch trainers' ``physical_batch``/``clip_engine``: the
old options and --config keys keep working with a one-line deprecation warning, and a run checkpointed
under the old names (its identity holding ``noise_seed`` as a number, as before) resumes.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.cli.train import build_config
from dpaudit.training.api import load_trainer
from dpaudit.training.noise_source import REDACTED
from dpaudit.training.train_dir import check_resume

SECRET = 987_654_321_123


@pytest.mark.parametrize("name", ["jax-bert", "edp-sgd", "rgp"])
def test_no_config_to_dict_carries_the_noise_seed(name):
    config = load_trainer(name).tiny_config(noise_seed=SECRET)
    stored = config.to_dict()
    assert stored["noise_seed"] == REDACTED
    assert str(SECRET) not in json.dumps(stored)
    assert load_trainer(name).tiny_config(noise_seed=None).to_dict()["noise_seed"] is None


def test_memory_knob_and_clip_engine_have_one_name_in_every_trainer():
    for name in ("jax-bert", "edp-sgd", "rgp"):
        fields = load_trainer(name).tiny_config().to_dict()
        assert "physical_batch" in fields and "micro_batch" not in fields and "clipping" not in fields, name
    assert "clip_engine" in load_trainer("jax-bert").tiny_config().to_dict()


def test_old_jax_bert_options_and_config_keys_still_set_the_renamed_fields(tmp_path, capsys):
    trainer = load_trainer("jax-bert")
    config = build_config(trainer, {"micro_batch": 4, "clipping": "vmap", "non_private": True}, None, None)
    assert (config.physical_batch, config.clip_engine) == (4, "vmap")
    err = capsys.readouterr().err
    assert "--micro-batch is deprecated" in err and "use --physical-batch" in err
    assert "--clipping is deprecated" in err and "use --clip-engine" in err

    toml = tmp_path / "old.toml"
    toml.write_text('micro_batch = 2\nclipping = "vmap"\nnon_private = true\n')
    config = build_config(trainer, {}, None, toml)
    assert (config.physical_batch, config.clip_engine) == (2, "vmap")
    assert f"--config {toml}: key 'micro_batch' is deprecated" in capsys.readouterr().err


def test_old_and_new_option_together_is_one_line_error_and_the_old_one_is_hidden(tmp_path):
    runner = CliRunner()
    help_text = runner.invoke(cli, ["train", "--trainer", "jax-bert", "--help"]).output
    assert "--physical-batch" in help_text and "--clip-engine" in help_text
    assert not re.search(r"^\s+(--micro-batch|--clipping)\b", help_text, re.MULTILINE)  # hidden (named in the help)
    result = runner.invoke(
        cli,
        [
            "train",
            "--trainer",
            "jax-bert",
            "--data",
            str(tmp_path),
            "--out",
            str(tmp_path / "m"),
            "--non-private",
            "--micro-batch",
            "8",
            "--physical-batch",
            "8",
        ],
    )
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "Error: --micro-batch and --physical-batch are the same setting; keep --physical-batch."
    ]
    assert not (tmp_path / "m").exists()


def test_a_checkpoint_written_before_the_rename_resumes(tmp_path):
    from dpaudit.trainers.jax_bert import checkpoint as ckpt
    from dpaudit.trainers.jax_bert.config import JaxBertConfig

    config = load_trainer("jax-bert").tiny_config(noise_seed=SECRET, clip_engine="vmap")
    current = {"trainer": "jax-bert", "config": config.to_dict(), "seed": 0, "data": {"train": "abc"}}
    # What the identity of an older checkpoint held: the old field names and the seed itself.
    old_names = {new: old for old, new in JaxBertConfig.RENAMED_FIELDS.items()}
    old_config = {old_names.get(k, k): v for k, v in config.to_dict().items()} | {"noise_seed": SECRET}
    folder = tmp_path / "step_00000003"
    folder.mkdir()
    (folder / ckpt.STATE_NAME).write_text(json.dumps({"identity": {**current, "config": old_config}}))
    stored = ckpt.read_state(folder)["identity"]
    assert stored == current
    check_resume(out=tmp_path, checkpoint=folder, trainer="jax-bert", stored=stored, current=current)
    assert config.mismatches(old_config) == []
    assert config.mismatches({**old_config, "micro_batch": 4}) == ["physical_batch"]
