"""A classifier's label set comes from public information only (docs/privacy.md, "Nothing released is computed from private data").

The released ``model/config.json`` holds ``id2label`` and ``num_labels`` (the head's width) un-noised. They
used to be the union of every split's labels, ``train.jsonl`` included: one extra private row with a new
label changed the release, infinite epsilon for that neighbour. The tests train on two neighbouring inject
directories (the shared tiny ``data_dir`` and a copy with ONE extra train row of a new label) and compare
what is released; the attack side must encode labels with the model's own ``id2label``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.files.run_dirs import sha256_file
from dpaudit.inject_dir.reader import Canary, LabelSet, load_inject_run

pytest.importorskip("torch")

NEW = "order_pizza"
#: The smallest classify run: tiny preset, 96 rows at batch 64 = 2 sgd steps (:func:`_train` fixes the secret seed).
TINY = [
    "--trainer",
    "edp-sgd",
    "--mode",
    "sgd",
    "--task",
    "classify",
    "--preset",
    "tiny",
    "--vocab-size",
    "300",
    "--max-length",
    "16",
    "--epochs",
    "1",
    "--batch-size",
    "64",
    "--eval-examples",
    "24",
]


def _neighbour(data_dir: Path, out: Path, *, train: list[dict] = (), heldout: list[dict] = ()) -> Path:
    """A copy of ``data_dir`` with rows appended (and the manifest's hashes updated, as inject would write them)."""
    shutil.copytree(data_dir, out)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    for name, rows in (("train.jsonl", train), ("heldout.jsonl", heldout)):
        with open(out / name, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
        manifest["outputs"][name] = sha256_file(out / name)
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return out


def _train(data: Path, out: Path, *extra: str):
    return CliRunner().invoke(
        cli, ["train", *TINY, "--noise-seed", "1", "--data", str(data), "--out", str(out), *extra]
    )


@pytest.fixture(scope="module")
def plus_one(data_dir, tmp_path_factory) -> Path:
    """data_dir + ONE train row whose label no split of data_dir has."""
    return _neighbour(
        data_dir,
        tmp_path_factory.mktemp("labels") / "plus_one",
        train=[{"text": "order a large pizza with extra cheese", "label": NEW}],
    )


@pytest.fixture(scope="module")
def model_on_d(data_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("labels") / "model_d"
    result = _train(data_dir, out)
    assert result.exit_code == 0, result.output
    return out


def _public_labels(data_dir: Path) -> list[str]:
    return sorted({json.loads(line)["label"] for line in (data_dir / "public.jsonl").read_text().splitlines()})


def test_one_extra_train_row_with_a_new_label_leaves_config_json_unchanged(data_dir, plus_one, model_on_d, tmp_path):
    out = tmp_path / "model"
    result = _train(plus_one, out, "--unknown-label", "set_alarm")
    assert result.exit_code == 0, result.output
    released = json.loads((out / "model" / "config.json").read_text())
    assert released == json.loads((model_on_d / "model" / "config.json").read_text())  # the whole file, not just labels
    assert list(released["id2label"].values()) == _public_labels(data_dir) and len(released["id2label"]) == 15
    assert NEW not in (out / "model" / "config.json").read_text()
    details = json.loads((out / "privacy.json").read_text())["details"]
    assert details["labels_from"] == "public.jsonl" and details["num_labels"] == 15
    assert "mapped to 'set_alarm'" in details["unknown_labels"]
    assert json.loads((out / "manifest.json").read_text())["config"]["unknown_label"] == "set_alarm"


@pytest.mark.parametrize("trainer", ["edp-sgd", "rgp"])
def test_by_default_the_row_is_refused_in_one_line_before_anything_is_written(plus_one, tmp_path, trainer):
    out = tmp_path / "model"
    args = TINY if trainer == "edp-sgd" else ["--trainer", "rgp", *TINY[4:], "--noise-multiplier", "1"]  # no --mode
    result = CliRunner().invoke(cli, ["train", *args, "--data", str(plus_one), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    assert (
        f"{plus_one / 'train.jsonl'}:97: label '{NEW}' is not in the public label set (from public.jsonl); "
        "declare it with --labels or map unknown labels with --unknown-label NAME."
    ) in result.output
    assert not out.exists()


def test_declared_labels_are_the_head_in_their_order_and_unknown_heldout_rows_are_left_out(data_dir, tmp_path):
    data = _neighbour(
        data_dir,
        tmp_path / "data",
        train=[{"text": "order a large pizza", "label": NEW}],
        heldout=[{"text": "order some sushi", "label": "order_sushi"}],
    )
    declared = [NEW, *reversed(_public_labels(data_dir))]
    (tmp_path / "labels.txt").write_text("\n".join(declared) + "\n\n", encoding="utf-8")
    out = tmp_path / "model"
    result = _train(data, out, "--labels", f"@{tmp_path / 'labels.txt'}")
    assert result.exit_code == 0, result.output
    assert "1 heldout.jsonl and 0 public.jsonl rows have a label outside the label set" in result.output
    released = json.loads((out / "model" / "config.json").read_text())
    assert list(released["id2label"].values()) == declared and released["label2id"][NEW] == 0
    details = json.loads((out / "privacy.json").read_text())["details"]
    assert details["labels_from"] == "declared --labels" and details["num_labels"] == 16
    assert details["rows_left_out_for_unknown_labels"] == {"heldout": 1, "public": 0}
    assert json.loads((out / "manifest.json").read_text())["config"]["labels"] == declared  # the list, not the file


def test_attack_leaves_out_rows_whose_label_the_model_never_saw_and_says_so(model_on_d, plus_one, tmp_path):
    out = tmp_path / "attack"
    result = CliRunner().invoke(
        cli, ["attack", "--model", str(model_on_d), "--data", str(plus_one), "--out", str(out), "--attacks", "loss"]
    )
    assert result.exit_code == 0, result.output
    loss = next(a for a in json.loads((out / "results.json").read_text())["attacks"] if a["attack"] == "loss")
    note = "1 examples-task rows (1 of train.jsonl, 0 of heldout.jsonl) have a label the model never saw"
    assert any(note in w for w in loss["warnings"]) and note in result.output
    examples = next(t for t in loss["tasks"] if t["task"] == "examples")
    assert examples["info"]["unseen_labels_left_out"] == {"train_rows": 1, "heldout_rows": 0}
    # 97 train rows - 6 canary rows (inserted 1, 2 and 3 times) - the row of the new label
    assert examples["info"]["members_available"] == len(load_inject_run(plus_one).train_texts) - 6 - 1 == 90


def test_canary_task_maps_or_leaves_out_canaries_by_the_models_policy():
    from dpaudit.attacks.mia import canary_task

    def canary(i, frequency, label):
        return Canary(
            id=f"c{i}",
            prefix="p ",
            secret=str(i),
            suffix="",
            format="digits:1",
            frequency=frequency,
            member=frequency > 0,
            label=label,
        )

    run = SimpleNamespace(
        canaries=[canary(0, 1, "a"), canary(1, 0, "b"), canary(2, 0, "zz"), canary(3, 2, 7)], manifest={}
    )
    task = canary_task(run, label_set=LabelSet(names=("7", "a", "b"), source="test"))
    assert task.ids == ["c0", "c1", "c3"] and task.labels == [1, 2, 0] and task.info["unseen_labels_left_out"] == 1
    assert "1 canaries (1 of 4) have a label the model never saw" in task.warnings[0]
    mapped = canary_task(run, label_set=LabelSet(names=("7", "a", "b"), source="test", unknown="b"))
    assert mapped.labels == [1, 2, 2, 0] and not mapped.warnings
    notes: list[str] = []
    assert canary_task(run, label_set=LabelSet(names=("zz", "q"), source="test"), notes=notes) is None  # no member left
    assert "3 canaries (3 of 4)" in notes[0]


def test_labels_option_is_parsed_and_checked_in_the_config(tmp_path):
    from dpaudit.trainers.edp_sgd.config import EdpSgdConfig

    (tmp_path / "l.txt").write_text(" b \n\na\n", encoding="utf-8")
    assert EdpSgdConfig(mode="sgd", labels=f"@{tmp_path / 'l.txt'}").labels == ["b", "a"]
    assert EdpSgdConfig(mode="sgd", labels="x, y", unknown_label="y").to_dict()["labels"] == ["x", "y"]
    assert EdpSgdConfig(mode="sgd", labels=["x", "y"]).labels == ["x", "y"]  # a TOML list
    for kwargs, message in (
        (dict(labels="a,a,b"), "declares 'a' more than once"),
        (dict(labels="a"), "needs at least 2"),
        (dict(labels="a,,b"), "empty label name"),
        (dict(labels="a,b", unknown_label="c"), "--unknown-label 'c' is not in --labels"),
        (dict(labels="a,b", task="mlm"), "--labels applies to --task classify only"),
        (dict(unknown_label="a", task="mlm"), "--unknown-label applies to --task classify only"),
        (dict(labels=f"@{tmp_path / 'missing.txt'}"), "cannot read"),
    ):
        with pytest.raises(ValueError, match=message):
            EdpSgdConfig(mode="sgd", **kwargs)
