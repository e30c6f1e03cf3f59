"""The core's one reader of inject run directories (``dpaudit.inject_dir.reader``): verification, required files,
texts and labels, canaries, and the input identity a train manifest records."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import read_jsonl, sha256_file
from dpaudit.inject_dir.reader import (
    CANARIES,
    HELDOUT,
    PUBLIC,
    REQUIRED_FILES,
    SPLITS,
    TRAIN,
    Canary,
    label_order,
    load_inject_run,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def labelled_run(tmp_path_factory):
    """A classification corpus whose labels mix integers and strings, first seen out of canonical order."""
    root = tmp_path_factory.mktemp("labelled")
    labels = ["b", 10, "a", 2]
    corpus = root / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"text": f"utterance {i} about topic {i % 7}", "label": labels[i % 4]}) + "\n"
            for i in range(200)
        ),
        encoding="utf-8",
    )
    out = root / "run"
    result = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            str(corpus),
            "--out",
            str(out),
            "--frequencies",
            "1,2",
            "--per-frequency",
            "2",
            "--holdout",
            "2",
            "--seed",
            "1",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return out


def test_reads_splits_labels_and_canaries_as_written(labelled_run):
    run = load_inject_run(labelled_run)
    assert run.labelled
    assert run.all_labels == [2, 10, "a", "b"]  # integers ascending, then strings: ids never depend on corpus order
    for name in SPLITS:
        rows = list(read_jsonl(labelled_run / name))
        split = run.split(name)
        assert split.texts == [r["text"] for r in rows] and split.labels == [r["label"] for r in rows]
    assert run.train_texts == run.split(TRAIN).texts and run.public_texts == run.split(PUBLIC).texts
    assert run.heldout_texts == run.split(HELDOUT).texts
    canaries = run.canaries
    assert [c.frequency for c in canaries] == [1, 1, 2, 2, 0, 0]
    assert all(isinstance(c, Canary) and c.member == (c.frequency > 0) and c.label in run.all_labels for c in canaries)
    train = run.train_texts
    assert all(train.count(c.text) == c.frequency for c in canaries)  # inserted exactly f times, controls never
    assert run.space.format == "digits:10"


def test_inputs_and_identity_are_the_recorded_hashes(labelled_run):
    run = load_inject_run(labelled_run)
    manifest = json.loads((labelled_run / "manifest.json").read_text(encoding="utf-8"))
    expected = {str(labelled_run / name): manifest["outputs"][name] for name in SPLITS}
    expected[str(labelled_run / "manifest.json")] = sha256_file(labelled_run / "manifest.json")
    assert run.inputs == expected and all(v == sha256_file(k) for k, v in expected.items())
    pairs = sorted((Path(k).name, v) for k, v in expected.items())
    assert run.identity == hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


def test_canary_is_one_record_shared_by_the_writing_side():
    from dpaudit.canaries.generate import Canary as WriterCanary
    from dpaudit.canaries.manifest import load_inject_run as writer_loader

    assert WriterCanary is Canary and writer_loader is load_inject_run
    canary = Canary(id="c0", prefix="my pin is ", secret="1 2", suffix="", format="digits:2", frequency=3, member=True)
    assert Canary.from_record(canary.to_record()) == canary and canary.text == "my pin is 1 2"
    with pytest.raises(ValueError, match="member must be True exactly when frequency > 0"):
        Canary(id="c1", prefix="", secret="1", suffix="", format="digits:1", frequency=0, member=True)
    assert label_order([3, "x", 1, "a", 3]) == [1, 3, "a", "x"]


@pytest.mark.parametrize("name", REQUIRED_FILES)
def test_every_required_file_must_be_listed_in_the_manifest(labelled_run, tmp_path, name):
    copy = tmp_path / "run"
    shutil.copytree(labelled_run, copy)
    manifest = json.loads((copy / "manifest.json").read_text(encoding="utf-8"))
    del manifest["outputs"][name]
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with open(copy / name, "a", encoding="utf-8") as handle:  # an edit the hash check can no longer see
        handle.write('{"text": "sneaked in"}\n')
    with pytest.raises(UserInputError, match=f"does not list {name} among its outputs"):
        load_inject_run(copy)


def test_edited_split_and_damaged_outputs_are_refused(labelled_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(labelled_run, copy)
    with open(copy / CANARIES, "a", encoding="utf-8") as handle:
        handle.write("\n")
    with pytest.raises(UserInputError, match="canaries.jsonl was changed after it was written"):
        load_inject_run(copy)
    manifest = json.loads((labelled_run / "manifest.json").read_text(encoding="utf-8"))
    manifest["outputs"] = sorted(manifest["outputs"])
    shutil.copy(labelled_run / CANARIES, copy / CANARIES)
    (copy / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(UserInputError, match="'outputs' must map each file name to its sha256, got list"):
        load_inject_run(copy)


def test_importing_the_reader_loads_neither_jax_nor_torch():
    code = (
        "import sys, dpaudit.inject_dir.reader, dpaudit.files.run_dirs; "
        "bad = sorted(m for m in ('jax', 'torch', 'flax', 'transformers') if m in sys.modules); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
