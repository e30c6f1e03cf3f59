"""``dpaudit attack`` end to end on the shared tiny run: the known answers, the attack directory,
and every bad input refused with a one-line error, exit code 2 and nothing written."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.canaries.manifest import load_inject_run
from dpaudit.cli import cli
from dpaudit.files.run_dirs import read_jsonl, verify_run_dir

LOG2_R = math.log2(10**4)


def _attack(*args: str):
    return CliRunner().invoke(cli, ["attack", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def attacked(canary_model, canary_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("attack") / "out"
    result = _attack("--model", str(canary_model), "--data", str(canary_data), "--out", str(out), "--batch-size", "5")
    assert result.exit_code == 0, result.output
    return out, result


def _brute_rank(table: np.ndarray, secret: list[int]) -> tuple[int, int]:
    """(strictly better + 1, better-or-tied + 1) over all 10^4 candidates, by enumeration."""
    target = sum(table[i, s] for i, s in enumerate(secret))
    scores = np.array([sum(table[i, s] for i, s in enumerate(c)) for c in itertools.product(range(10), repeat=4)])
    return 1 + int(np.sum(scores > target + 1e-9)), int(np.sum(scores >= target - 1e-9))


def test_non_private_model_memorizes_the_100x_canaries(attacked):
    out, result = attacked
    results = json.loads((out / "results.json").read_text())
    exposure = {r["frequency"]: r for r in results["attacks"][0]["rows"]}
    recon = {r["frequency"]: r for r in results["attacks"][1]["rows"]}
    assert results["attacks"][0]["attack"] == "exposure" and set(exposure) == {0, 100}
    # Controls rank like random secrets (exposure ~1 bit); 100x canaries near the top of 10^4 candidates.
    assert exposure[0]["n"] == 8 and exposure[100]["n"] == 4
    assert exposure[0]["mean"] < 3.0, exposure
    assert exposure[100]["mean"] > exposure[0]["mean"] + 6.0, exposure
    assert exposure[100]["vs_controls"]["p_value"] < 0.01
    assert recon[100]["exact_matches"] >= 1 and recon[0]["exact_matches"] == 0, recon
    assert recon[100]["normalized_edit_distance_mean"] < recon[0]["normalized_edit_distance_mean"]
    assert results["claimed_privacy"] == {
        **results["claimed_privacy"],
        "known": True,
        "private": False,
        "epsilon": None,
    }
    assert "group privacy" in results["group_privacy"]
    assert results["warnings"] == []  # every canary has its own {name} key
    assert "exposure" in result.output and "reconstruction" in result.output


def test_exposure_is_exact_and_rank_one_gives_log2_r(attacked, canary_model, canary_data):
    from dpaudit import scoring

    out, _ = attacked
    rows = {r["id"]: r for r in read_jsonl(out / "scores" / "canaries.jsonl")}
    run = load_inject_run(canary_data)
    tables = scoring.load(canary_model, progress=False).masked_log_probs(run.canaries, run.space)
    for canary, table in zip(run.canaries, tables):
        row = rows[canary.id]
        low, high = _brute_rank(table, run.space.index_of(canary.secret))
        assert (row["rank_low"], row["rank_high"]) == (low, high)
        assert row["exposure_high"] == pytest.approx(LOG2_R - math.log2(low), abs=1e-12)
        fill = " ".join(str(d) for d in table.argmax(-1))
        assert row["fill"] == fill and row["exact"] == (fill == canary.secret)
    first = [r for r in rows.values() if r["exact"]]
    assert first, "no canary was reconstructed exactly"
    for r in first:  # the top-1 fill is the secret: rank 1, exposure log2|R| exactly
        assert r["rank_low"] == 1 and r["exposure_high"] == LOG2_R and r["top_k_rank"] == 1


def test_attack_directory_is_verified_and_reads_back(attacked, canary_model):
    from dpaudit.attacks.run import read_attack_dir

    out, _ = attacked
    manifest = verify_run_dir(out, schema_prefix="dpaudit.attack/")
    assert manifest["schema"] == "dpaudit.attack/1"
    assert set(manifest["outputs"]) == {"results.json", "scores/canaries.jsonl", "scores/canaries.csv", "index.html"}
    assert any(k.endswith("model.safetensors") for k in manifest["inputs"])
    assert any(k.endswith("canaries.jsonl") for k in manifest["inputs"])
    results = read_attack_dir(out)
    assert len(results.canaries) == 12 and results["exposure"].parameters.log2_space_size == pytest.approx(LOG2_R)


def test_attack_writes_the_report(attacked, tmp_path):
    """index.html is the page `dpaudit report` renders from the directory, with the real run's telemetry."""
    out, _ = attacked
    page = (out / "index.html").read_text(encoding="utf-8")
    for section in ("verdict", "memorization", "mia", "training", "canaries", "provenance"):
        assert f'<section id="{section}">' in page
    assert "training telemetry" in page and "No training telemetry" not in page  # metrics.jsonl found via the inputs
    assert "No membership-inference attack was run" in page
    again = tmp_path / "again.html"
    result = CliRunner().invoke(cli, ["report", str(out), "--out", str(again)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert again.read_bytes() == (out / "index.html").read_bytes()


def test_python_api_matches_the_command(attacked, canary_model, canary_data):
    import dpaudit

    out, _ = attacked
    results = dpaudit.attack(canary_model, canary_data, attacks=["exposure"], batch_size=7, progress=False)
    on_disk = {r["id"]: r for r in read_jsonl(out / "scores" / "canaries.jsonl")}
    for score in results.canaries:
        assert (score.rank_low, score.rank_high) == (on_disk[score.id]["rank_low"], on_disk[score.id]["rank_high"])
        assert score.fill is None  # reconstruction was not asked for
    assert [a.attack for a in results.attacks] == ["exposure"]


def test_partial_reveal(canary_model, canary_data, tmp_path):
    out = tmp_path / "reveal"
    result = _attack(
        "--model",
        str(canary_model),
        "--data",
        str(canary_data),
        "--out",
        str(out),
        "--reveal",
        "2",
        "--top-k",
        "3",
        "--json",
    )
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)
    assert results["attacks"][0]["parameters"]["log2_space_size"] == pytest.approx(2 * math.log2(10))
    rows = list(read_jsonl(out / "scores" / "canaries.jsonl"))
    assert all(r["reveal"] == 2 and len(r["fill"].split()) == 2 for r in rows)
    assert all(r["rank_high"] <= 100 for r in rows)


def test_shared_context_is_warned(canary_model, tmp_path):
    data, out = tmp_path / "shared", tmp_path / "out"
    inject = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "60",
            "--format",
            "digits:4",
            "--frequencies",
            "1",
            "--per-frequency",
            "3",
            "--template",
            "my account number is {secret}",
            "--out",
            str(data),
        ],
        catch_exceptions=False,
    )
    assert inject.exit_code == 0, inject.output
    result = _attack(
        "--model", str(canary_model), "--data", str(data), "--out", str(out), "--attacks", "reconstruction"
    )
    assert result.exit_code == 0, result.output
    assert "share their unmasked context" in result.stderr
    warnings = json.loads((out / "results.json").read_text())["warnings"]
    assert len(warnings) == 1 and "6 of 6 canaries" in warnings[0]


def _refused(result, out, match):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and match in lines[0], result.output
    assert not out.exists()


def test_changed_data_directory_is_refused(canary_model, canary_data, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    shutil.copytree(canary_data, data)
    with open(data / "canaries.jsonl", "a", encoding="utf-8") as handle:
        handle.write("\n")
    _refused(_attack("--model", str(canary_model), "--data", str(data), "--out", str(out)), out, "was changed")


def test_out_that_is_a_file_is_refused(canary_model, canary_data, tmp_path):
    out = tmp_path / "file"
    out.write_text("x")
    result = _attack("--model", str(canary_model), "--data", str(canary_data), "--out", str(out))
    assert result.exit_code == 2 and "is a file" in result.output and out.read_text() == "x"


def test_classifier_given_to_masked_lm_attack_is_refused(classifier_model, canary_data, tmp_path):
    out = tmp_path / "out"
    _refused(
        _attack(
            "--model", str(classifier_model), "--data", str(canary_data), "--out", str(out), "--attacks", "exposure"
        ),
        out,
        "needs a causal LM or masked LM",
    )


@pytest.mark.parametrize(
    "damage, match", [("pickle", "pickle"), ("tokenizer", "no tokenizer"), ("weights", "no model.safetensors")]
)
def test_bad_model_directories_are_refused(bare_model, canary_data, tmp_path, damage, match):
    out = tmp_path / "out"
    if damage == "pickle":
        (bare_model / "model.safetensors").rename(bare_model / "pytorch_model.bin")
    elif damage == "tokenizer":
        (bare_model / "tokenizer.json").unlink()
    else:
        (bare_model / "model.safetensors").unlink()
    _refused(_attack("--model", str(bare_model), "--data", str(canary_data), "--out", str(out)), out, match)


def test_tokenizer_splitting_the_digits_is_refused(bare_model, canary_data, tmp_path):
    from tokenizers import Tokenizer, normalizers

    out = tmp_path / "out"
    tok = Tokenizer.from_file(str(bare_model / "tokenizer.json"))
    tok.normalizer = normalizers.Sequence([tok.normalizer, normalizers.Replace("7", "77")])
    tok.save(str(bare_model / "tokenizer.json"))
    _refused(_attack("--model", str(bare_model), "--data", str(canary_data), "--out", str(out)), out, ": its secret")


def test_attack_command_never_imports_jax(canary_model, canary_data, tmp_path):
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom dpaudit.cli import cli\n"
        f"r = CliRunner().invoke(cli, ['attack', '--model', {str(canary_model)!r}, '--data', {str(canary_data)!r}, "
        f"'--out', {str(tmp_path / 'o')!r}, '--attacks', 'reconstruction'])\n"
        "assert r.exit_code == 0, r.output\nprint(sorted(m for m in ('jax', 'flax', 'optax') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_phrase_canaries_are_reconstructed_over_the_vocabulary(canary_model, tmp_path):
    phrases = tmp_path / "phrases.txt"
    phrases.write_text(
        "the quick brown fox jumps over the lazy dog\nshe sells sea shells by the sea shore today\n"
        "an apple a day keeps the doctor away now\nall that glitters is not gold my friend\n"
    )
    data, out = tmp_path / "data", tmp_path / "out"
    inject = CliRunner().invoke(
        cli,
        [
            "inject",
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "60",
            "--format",
            "phrases",
            "--phrase-corpus",
            str(phrases),
            "--frequencies",
            "1",
            "--per-frequency",
            "2",
            "--out",
            str(data),
        ],
        catch_exceptions=False,
    )
    assert inject.exit_code == 0, inject.output
    result = _attack("--model", str(canary_model), "--data", str(data), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "exposure was not computed" in result.stderr

    def strict(name):  # NaN or Infinity would make results.json unreadable elsewhere
        raise ValueError(name)

    results = json.loads((out / "results.json").read_text(), parse_constant=strict)
    assert results["attacks"][0]["rows"] == [] and results["attacks"][1]["parameters"]["top_k"] is None
    rows = list(read_jsonl(out / "scores" / "canaries.jsonl"))
    assert len(rows) == 4 and all(r["fill"] and not r["fill"].startswith("##") for r in rows)
    for r in rows:
        assert r["normalized_edit_distance"] == pytest.approx(r["edit_distance"] / len(r["secret"].split()))  # per word
