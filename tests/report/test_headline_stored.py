"""One headline everywhere: the terminal, the page and a user's script read the same figure from results.json.

Before, the headline was recomputed wherever it was printed, and results.json held only each audit's own uncorrected
bound: on real text the terminal and the page said "epsilon >= 3.29 ... against the claimed mechanism's trade-off
curve" while results.json's epsilon_lower_bound for that task was 1.378 and 3.29 appeared nowhere in it.
"""

from __future__ import annotations

import json
from pathlib import Path

from dpaudit.attacks.run import read_attack_dir
from dpaudit.common.figures import format_down
from dpaudit.files.run_dirs import sha256_file
from dpaudit.stages.attack import write_attack_dir
from dpaudit.verdict.headline import HEADLINE_SCHEMA, headline_of
from tests.report.conftest import make_attack_dir


def test_results_json_carries_the_headline_every_reader_prints(tmp_path: Path) -> None:
    from dpaudit.cli.attack import _summary

    source = read_attack_dir(make_attack_dir(tmp_path, "src"))
    results = source.with_headline()
    out = write_attack_dir(
        tmp_path / "attack",
        results,
        config={"attacks": []},
        inputs={},
        seed=0,
        overwrite=False,
        command=["dpaudit", "attack"],
    )
    stored = json.loads((out / "results.json").read_text(encoding="utf-8"))["headline"]
    head = results.headline
    assert stored["schema"] == HEADLINE_SCHEMA and stored["text"] == head.text()
    assert stored["epsilon_lower_bound"] == head.best.epsilon and stored["kind"] == head.best.kind
    assert stored["label"] == head.best.kind_label and stored["confidence"] == 0.95
    assert stored["chosen_from"] and stored["source"] == head.best.name and stored["ceiling"] == head.ceiling
    again = read_attack_dir(out)
    assert headline_of(again).text() == stored["text"]
    assert head.text() in _summary(again)  # the terminal's line
    page = (out / "index.html").read_text(encoding="utf-8")
    assert format_down(head.best.epsilon) in page


def test_readers_take_the_stored_headline_not_a_recomputation(tmp_path: Path) -> None:
    """An edited stored figure (manifest re-hashed) is what the page and the terminal show: they read, not recompute."""
    from dpaudit.cli.attack import _summary

    results = read_attack_dir(make_attack_dir(tmp_path, "src")).with_headline()
    out = write_attack_dir(
        tmp_path / "attack",
        results,
        config={"attacks": []},
        inputs={},
        seed=0,
        overwrite=False,
        command=["dpaudit", "attack"],
    )
    obj = json.loads((out / "results.json").read_text(encoding="utf-8"))
    best = obj["headline"]["best"]
    obj["headline"]["bounds"][best]["bound"]["epsilon"] = 1.23456
    (out / "results.json").write_text(json.dumps(obj), encoding="utf-8")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    manifest["outputs"]["results.json"] = sha256_file(out / "results.json")
    (out / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    again = read_attack_dir(out)
    if not again.headline.best.curve_refuted:
        assert headline_of(again).best.epsilon == 1.23456 and "epsilon >= 1.23 " in _summary(again)
