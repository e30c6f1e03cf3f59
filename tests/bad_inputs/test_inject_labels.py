"""``dpaudit inject`` warns when train.jsonl has a label that public.jsonl never has (hardening): a classifier's
label set comes from public.jsonl, so such rows were refused only at the private training, after the public
model had trained on the shorter set. Inject knows both splits: one warning line names the labels and
``--labels``."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dpaudit.cli import cli


def _csv(path, prefix, labels):
    path.write_text(
        "text,label\n" + "".join(f"{prefix} row {i},{label}\n" for i, label in enumerate(labels)), encoding="utf-8"
    )
    return path


def _inject(tmp_path, train_labels, public_labels):
    train = _csv(tmp_path / "train.csv", "train", train_labels)
    heldout = _csv(tmp_path / "heldout.csv", "heldout", ["a", "b"] * 20)
    public = _csv(tmp_path / "public.csv", "public", public_labels)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        cli,
        [
            "inject",
            "--train",
            str(train),
            "--heldout",
            str(heldout),
            "--public",
            str(public),
            "--out",
            str(out),
            "--seed",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    return result, json.loads((out / "manifest.json").read_text(encoding="utf-8"))


def test_train_labels_missing_from_public_are_named_with_the_labels_option(tmp_path):
    result, manifest = _inject(tmp_path, ["a", "b", "c", "zeta"] * 60, ["a", "b"] * 50)
    lines = [line for line in result.stderr.splitlines() if "never occur in public.jsonl" in line]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("warning: 2 label(s) of train.jsonl never occur in public.jsonl ('c', 'zeta')")
    assert "--labels" in lines[0]
    assert any("'c', 'zeta'" in w for w in manifest["warnings"])


def test_no_warning_when_public_has_every_train_label(tmp_path):
    result, manifest = _inject(tmp_path, ["a", "b"] * 120, ["a", "b", "c"] * 40)
    assert "never occur in public.jsonl" not in result.stderr
    assert not any("never occur in public.jsonl" in w for w in manifest.get("warnings", ()))
