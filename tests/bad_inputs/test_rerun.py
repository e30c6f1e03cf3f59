"""Rerunning a finished ``attack``, ``inject`` or ``audit-trainer`` with its own command returns its result.

Before: the same command on its own finished ``--out`` was refused ("exists and is not empty; pass
--overwrite"), unlike ``train`` and ``demo``, which return a finished run of the same command. Now each stage
compares the manifest's recorded config (and its inputs' content) with this command's: the same command prints
what it printed (stdout byte for byte, a note on stderr), exits 0 and touches nothing; another config on the same
``--out`` is refused as before unless ``--overwrite``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from tests.bad_inputs import audit_fake
from tests.conftest import TORCH_ARGS


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def tree(root: Path) -> dict[str, int]:
    """Every entry under ``root`` with its mtime: a rerun that rewrites anything changes it."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


def _refused_as_not_empty(result, out: Path) -> None:
    assert result.exit_code == 2, result.output
    assert f"Error: --out {out} exists and is not empty; pass --overwrite" in result.output, result.output


def test_inject_rerun_returns_the_finished_run(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "".join(f"please set an alarm for {h} in the morning number {i}\n" for i in range(40) for h in (6, 7)),
        encoding="utf-8",
    )
    out = tmp_path / "data"
    args = ["inject", "--corpus", corpus, "--frequencies", "1,2", "--per-frequency", "2", "--seed", "4", "--out", out]
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    before = tree(out)
    again = _invoke(*args)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout and "note: --out" in again.stderr and "nothing was written" in again.stderr
    assert tree(out) == before
    as_json = _invoke(*args, "--json")  # the summary as JSON, read back from the manifest
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)["counts"]["canaries"] == 2 * 2 + 2
    assert "already_done" not in as_json.stdout and tree(out) == before
    # Other options, or the same options on a corpus that changed: refused as before.
    _refused_as_not_empty(_invoke(*args[:-3], "5", "--out", out), out)
    corpus.write_text(corpus.read_text(encoding="utf-8") + "one more line\n", encoding="utf-8")
    _refused_as_not_empty(_invoke(*args), out)
    assert tree(out) == before


def test_attack_rerun_returns_the_finished_results(tiny_causal_dir, data_dir, tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "attack"
    args = ["attack", "--model", tiny_causal_dir, "--data", data_dir, "--attacks", "loss", "--out", out]
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    before = tree(out)
    again = _invoke(*args)
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout  # the same summary, notes and "wrote" line
    assert "note: --out" in again.stderr and "nothing was recomputed or written" in again.stderr
    assert tree(out) == before
    _refused_as_not_empty(_invoke(*args, "--seed", "1"), out)  # another config
    assert tree(out) == before


@pytest.fixture()
def fake(monkeypatch):
    return audit_fake.install(monkeypatch)


def test_audit_trainer_rerun_returns_the_finished_audit(fake, tmp_path):
    out = tmp_path / "audit"
    args = [
        "audit-trainer",
        "--trainer",
        audit_fake.NAME,
        "--canaries",
        "100",
        "--steps",
        "2",
        "--seed",
        "5",
        "--out",
        out,
    ]
    first = _invoke(*args)
    assert first.exit_code == 0, first.output
    assert fake.trained == ["run-0"]
    before = tree(out)
    again = _invoke(*args, "--workers", "1")  # how many run at once is no setting of the audit
    assert again.exit_code == 0, again.output
    assert again.stdout == first.stdout and "verdict:" in again.stdout
    assert "note: --out" in again.stderr and "nothing was run or written" in again.stderr
    assert fake.trained == ["run-0"] and tree(out) == before
    _refused_as_not_empty(_invoke(*args[:-2], "--confidence", "0.9", "--out", out), out)
    assert fake.trained == ["run-0"] and tree(out) == before


# ------------------------------------------------------------------------------------------------
# train: a finished run's own command returns it, every trainer, --data by another path (moved from
# tests/test_bad_inputs_runs.py).


def invoke(args: list[str]):
    return CliRunner().invoke(cli, [str(a) for a in args])


def assert_one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-3000:]
    errors = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and result.output.strip().splitlines()[-1] == errors[0], result.output[-3000:]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.mark.parametrize("trainer", list(TORCH_ARGS))
def test_rerun_of_a_finished_torch_run_returns_it_by_any_path_to_the_same_data(
    trainer, torch_runs, data_dir, tmp_path, monkeypatch
):
    out = tmp_path / "run"
    shutil.copytree(torch_runs[trainer], out)
    before = tree(out)
    copy = tmp_path / "elsewhere" / "data"  # the same files at another path, given relative
    shutil.copytree(data_dir, copy)
    monkeypatch.chdir(copy.parent)
    start = time.perf_counter()
    result = invoke(["train", "--trainer", trainer, "--data", "data", "--out", out, *TORCH_ARGS[trainer]])
    elapsed = time.perf_counter() - start
    assert result.exit_code == 0, result.output
    assert tree(out) == before  # nothing trained, nothing rewritten (no new metrics rows, same model file)
    manifest = json.loads((out / "manifest.json").read_text())
    assert f"trained {trainer} for {manifest['steps']} steps" in result.output
    assert elapsed < 10, elapsed  # setup only: ~0.3 s alone on the 2-core CPU; training the run took seconds
    # Other settings, or other data, are refused without touching it.
    other = invoke(
        ["train", "--trainer", trainer, "--data", "data", "--out", out, *TORCH_ARGS[trainer], "--epochs", "2"]
    )
    assert_one_line_error(other, f"--out {out} holds a finished run with different settings", "--epochs 1 -> 2")
    with open(copy / "heldout.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"text": "one more row", "label": "weather"}\n')
    changed = invoke(["train", "--trainer", trainer, "--data", "data", "--out", out, *TORCH_ARGS[trainer]])
    assert_one_line_error(changed, f"{Path('data') / 'heldout.jsonl'}")  # the inject hash check names the file
    assert tree(out) == before


def test_rerun_of_a_finished_jax_bert_run_returns_it_by_a_relative_path(
    noisy_canary_model, canary_data, tmp_path, monkeypatch
):
    """The shared session run (conftest ``noisy_canary_model``), rerun with its own settings through the API."""
    from dpaudit.trainers.jax_bert.config import JaxBertConfig
    from dpaudit.trainers.jax_bert.trainer import JaxBertTrainer

    out = tmp_path / "run"
    shutil.copytree(noisy_canary_model, out)
    manifest = json.loads((out / "manifest.json").read_text())
    fields = {f.name for f in dataclasses.fields(JaxBertConfig)}
    stored = {k: v for k, v in manifest["config"].items() if k in fields}
    config = JaxBertConfig(**{**stored, "noise_seed": 0})  # the secret seed is redacted in the manifest
    before = tree(out)
    monkeypatch.chdir(canary_data.parent)
    start = time.perf_counter()
    result = JaxBertTrainer().train(Path(canary_data.name), out, config, seed=manifest["seed"])
    assert time.perf_counter() - start < 10
    assert tree(out) == before
    assert (
        result.steps == manifest["steps"]
        and result.epsilon == json.loads((out / "privacy.json").read_text())["epsilon"]
    )
