"""`dpaudit inject --public-size` beyond `--corpus-size`: the built-in corpus generates the extra
public utterances, disjoint from the private rows and from every canary; a user's file gets a one-line error;
every existing option combination writes the bytes it wrote before."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.canaries.insert import SplitSpec, public_beyond, split_counts
from dpaudit.canaries.manifest import OUTPUT_FILES, load_inject_run
from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import read_jsonl, verify_run_dir

SMALL = ["--frequencies", "1,5", "--per-frequency", "3", "--holdout", "3"]
#: 300 utterances: 30 held out, so any public size >= 270 leaves no member and is generated beside them.
BEYOND = ["--corpus", "builtin:assistant", "--corpus-size", "300", "--heldout-size", "30", "--public-size", "1200"]
DATA_FILES = ("train.jsonl", "heldout.jsonl", "public.jsonl", "canaries.jsonl")


def invoke(*args: str):
    return CliRunner().invoke(cli, ["inject", *args], catch_exceptions=False)


def texts(path: Path) -> list[str]:
    return [r["text"] for r in read_jsonl(path)]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def beyond(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("beyond") / "run"
    result = invoke(*BEYOND, "--out", str(out), "--seed", "4", *SMALL)
    assert result.exit_code == 0, result.output
    assert "1200 utterances generated beyond --corpus-size 300" in result.output
    return out


def test_sizes_and_manifest(beyond):
    manifest = verify_run_dir(beyond, schema_prefix="dpaudit.inject/")
    counts = manifest["counts"]
    assert (counts["members"], counts["heldout"], counts["public"], counts["public_generated"]) == (270, 30, 1200, 1200)
    assert counts["corpus"] == 1500 and counts["train_rows"] == 270 + 3 * (1 + 5)
    assert len(texts(beyond / "public.jsonl")) == 1200 and len(texts(beyond / "heldout.jsonl")) == 30
    assert manifest["inputs"] == {
        "builtin:assistant": "dpaudit.corpus.assistant v1 (seed 4, 300 utterances and 1200 more "
        "beside them, 15 intents)"
    }
    assert manifest["config"]["corpus_size"] == 300 and manifest["splits"]["public_size"] == 1200
    labels = {r["label"] for r in read_jsonl(beyond / "public.jsonl")}
    assert len(labels) == 15  # every intent is public: a classifier's label set comes from public.jsonl


def test_public_rows_share_no_text_with_private_rows_or_canaries(beyond):
    public = texts(beyond / "public.jsonl")
    private = set(texts(beyond / "train.jsonl")) | set(texts(beyond / "heldout.jsonl"))
    assert len(set(public)) == len(public)
    assert not set(public) & private
    canaries = load_inject_run(beyond).canaries
    assert canaries and not {c.text for c in canaries} & set(public)
    joined = "\n".join(public)
    assert not any(c.secret in joined for c in canaries)  # no canary's secret (inserted or control) either


def test_private_part_is_the_corpus_split_as_with_public_size_zero(beyond, tmp_path):
    zero = tmp_path / "zero"
    args = [a if a != "1200" else "0" for a in BEYOND]
    assert invoke(*args, "--out", str(zero), "--seed", "4", *SMALL).exit_code == 0
    assert (beyond / "heldout.jsonl").read_bytes() == (zero / "heldout.jsonl").read_bytes()
    canary_texts = {c.text for c in load_inject_run(zero).canaries}
    members = [t for t in texts(zero / "train.jsonl") if t not in canary_texts]
    assert sorted(t for t in texts(beyond / "train.jsonl") if t not in canary_texts) == sorted(members)


def test_new_token_canaries_never_reach_the_generated_public_rows(tmp_path):
    out = tmp_path / "run"
    result = invoke(*BEYOND, "--out", str(out), "--coin-flip", "--per-frequency", "20", "--design", "new-tokens:4")
    assert result.exit_code == 0, result.output
    run = load_inject_run(out)
    words = {w for t in texts(out / "public.jsonl") for w in t.split()}
    assert run.new_tokens and not set(run.new_tokens) & words
    assert not {c.text for c in run.canaries} & set(texts(out / "public.jsonl"))


def test_same_seed_same_bytes(beyond, tmp_path):
    again = tmp_path / "again"
    assert invoke(*BEYOND, "--out", str(again), "--seed", "4", *SMALL).exit_code == 0
    for name in DATA_FILES:
        assert (again / name).read_bytes() == (beyond / name).read_bytes(), name
    first, second = (json.loads((d / "manifest.json").read_text()) for d in (beyond, again))
    assert first["outputs"] == second["outputs"] and set(first["outputs"]) == set(OUTPUT_FILES)
    other = tmp_path / "other"
    assert invoke(*BEYOND, "--out", str(other), "--seed", "5", *SMALL).exit_code == 0
    assert (other / "public.jsonl").read_bytes() != (beyond / "public.jsonl").read_bytes()


# Files written before the public split could go beyond the corpus (same options, same seed): unchanged bytes.
GOLDEN_BUILTIN = {
    "canaries.jsonl": "d7c233f90463b031f8ed649b3aa17a322d976c82299eac082260dd25c80a91c6",
    "heldout.jsonl": "a452906fc7b527dcfb352fbc799fd71ee312c390aa80f6202d7a6f6ef1e72b88",
    "public.jsonl": "12e6a5f7666ced3b2ad1f8b3c6a941f42f74843476cb15ffca31e21c7649fda9",
    "train.jsonl": "607a90cd491a07b6af0e30e477753ffb24d878df4f99859003f3d965b465a236",
}
GOLDEN_FILE = {
    "canaries.jsonl": "6e0c8382b9c4d05f787ab4cd56f08fc0196c3249150f8f4ac485ba90ccc09319",
    "heldout.jsonl": "71ba24c6211e3186f9e821bd0f0c28c1c1b2108cab5aff6234f675f40d7cb782",
    "public.jsonl": "342baa3ee85e5f4b83fca37632dc7cfe6e8591ee20e55fee3879018961a9a401",
    "train.jsonl": "850a6b4c37471f4b372875c76f97f5b417485485c382441a1865681af2bba35b",
}


def _labelled_corpus(path: Path) -> Path:
    path.write_text(
        "text\tlabel\n" + "".join(f"utterance {i} about thing {k}\tintent{k}\n" for k in range(4) for i in range(150)),
        encoding="utf-8",
    )
    return path


def test_existing_option_combinations_write_the_bytes_they_wrote_before(tmp_path):
    out = tmp_path / "builtin"
    assert (
        invoke(
            "--corpus",
            "builtin:assistant",
            "--corpus-size",
            "600",
            "--out",
            str(out),
            "--heldout-size",
            "50",
            "--public-size",
            "200",
            "--per-frequency",
            "2",
            "--frequencies",
            "1,5",
            "--seed",
            "3",
        ).exit_code
        == 0
    )
    assert {name: sha(out / name) for name in GOLDEN_BUILTIN} == GOLDEN_BUILTIN
    assert "public_generated" not in json.loads((out / "manifest.json").read_text())["counts"]
    out = tmp_path / "file"
    corpus = _labelled_corpus(tmp_path / "corpus.tsv")
    assert (
        invoke(
            "--corpus",
            str(corpus),
            "--out",
            str(out),
            "--heldout-size",
            "100",
            "--public-size",
            "100",
            "--per-frequency",
            "2",
            "--frequencies",
            "1,2",
        ).exit_code
        == 0
    )
    assert {name: sha(out / name) for name in GOLDEN_FILE} == GOLDEN_FILE


def test_a_users_corpus_gets_a_one_line_error_and_nothing_written(tmp_path):
    corpus = _labelled_corpus(tmp_path / "corpus.tsv")
    out = tmp_path / "deep" / "run"
    result = invoke("--corpus", str(corpus), "--out", str(out), "--heldout-size", "100", "--public-size", "500", *SMALL)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --public-size 500:"), result.output
    assert "at most 499" in lines[0] and "builtin:assistant" in lines[0]
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["corpus.tsv"]


def test_too_many_generated_public_rows_is_a_one_line_error(tmp_path):
    out = tmp_path / "run"
    result = invoke(
        "--corpus", "builtin:assistant", "--corpus-size", "300", "--public-size", "99999999", "--out", str(out), *SMALL
    )
    assert result.exit_code == 2 and "--public-size 99999999" in result.output and "at most" in result.output
    assert not out.exists()


def test_public_beyond_only_for_an_absolute_public_size_that_leaves_no_member():
    assert public_beyond(300, SplitSpec(heldout_size=30, public_size=269)) == 0  # one member left: fits
    assert split_counts(300, SplitSpec(heldout_size=30, public_size=269)).members == 1
    assert public_beyond(300, SplitSpec(heldout_size=30, public_size=270)) == 270
    assert public_beyond(300, SplitSpec(heldout_size=300, public_size=5000)) == 0  # the held-out rows leave none
    assert public_beyond(300, SplitSpec(heldout_fraction=0.5, public_fraction=0.6)) == 0  # fractions are of the corpus
    with pytest.raises(UserInputError, match="--public-size 270: .* at most 269"):
        split_counts(300, SplitSpec(heldout_size=30, public_size=270))
