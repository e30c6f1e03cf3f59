"""Designed canaries (``dpaudit inject --design``): the spaces, the inject option, the manifest's
declared new tokens, the summary, and bad input."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from dpaudit.canaries.generate import normalize_tokens
from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import read_jsonl, verify_run_dir
from dpaudit.inject_dir.reader import load_inject_run
from dpaudit.inject_dir.secret_spaces import NewTokenSpace, new_token_space, parse_design, rare_words

SMALL = ["--corpus", "builtin:assistant", "--corpus-size", "400", "--seed", "2"]


def invoke(*args: str):
    return CliRunner().invoke(cli, ["inject", *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def new_token_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("designed") / "run"
    result = invoke(*SMALL, "--coin-flip", "--per-frequency", "60", "--design", "new-tokens", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out, result.output


def test_new_token_space_draws_tokens_no_two_canaries_share():
    space = new_token_space(5)
    draws = [d.secret for d, _ in zip(space.draws(np.random.default_rng(0)), range(300))]
    tokens = [space.units(s) for s in draws]
    assert all(len(t) == 1 and s == " ".join(t * 5) for s, t in zip(draws, tokens))  # one token, written 5 times
    assert len({t[0] for t in tokens}) == 300 and all(re.fullmatch("[a-z]{10}", t[0]) for t in tokens)
    several = NewTokenSpace(length=4, distinct=2)
    secret = next(several.draws(np.random.default_rng(1))).secret
    a, b = several.units(secret)
    assert secret.split() in ([a, b, a, b], [b, a, b, a]) and space.describe()["distinct_tokens"] == 1
    assert space.format == "new-tokens:5" and space.size == 26**10 and several.size == 26**10 * (26**10 - 1)
    with pytest.raises(ValueError, match="distinct"):
        NewTokenSpace(length=2, distinct=3)


def test_design_names_and_rare_words():
    assert parse_design("format") == ("format", None)
    assert parse_design("new-tokens") == ("new-tokens", 24) and parse_design("NEW-TOKENS:3") == ("new-tokens", 3)
    assert parse_design("rare-tokens") == ("rare-tokens", 4)
    for bad, needle in (
        ("nope", "unknown canary design"),
        ("new-tokens:0", "from 1 to 64"),
        ("rare-tokens:x", "from 1 to 64"),
        ("format:3", "takes its secret from --format"),
    ):
        with pytest.raises(UserInputError, match=needle):
            parse_design(bad)
    texts = ["the cat sat", "the cat ran", "the dog sat", "a zebra"]  # counts: the 3, cat 2, sat 2, dog/ran/zebra 1
    assert rare_words(texts, limit=3) == ["dog", "ran", "zebra"]


def test_new_token_canaries_declare_their_token_set_and_appear_nowhere_else(new_token_run):
    out, output = new_token_run
    manifest = verify_run_dir(out, schema_prefix="dpaudit.inject/")
    run = load_inject_run(out)
    canaries = run.canaries
    assert (
        len(canaries) == 60 and 0 < sum(c.member for c in canaries) < 60 and {c.frequency for c in canaries} <= {0, 1}
    )
    tokens = {c.secret.split()[0] for c in canaries}
    # The set of EVERY canary's token (members and non-members alike), sorted: the public design information.
    assert run.new_tokens == tuple(sorted(tokens)) and len(tokens) == 60
    assert manifest["config"]["design"] == "new-tokens:24" and manifest["config"]["format"] is None
    assert manifest["design"]["name"] == "new-tokens" and manifest["design"]["new_tokens"] == 60
    assert manifest["secret_space"]["kind"] == "new-tokens" and "new_tokens" in manifest["tokenizer"]
    assert all(
        c.text == c.secret == " ".join([c.secret.split()[0]] * 24) and c.format == "new-tokens:24" for c in canaries
    )
    # Each token occurs only in its own canary's rows: never in a corpus row of any split.
    rows = Counter()
    for name in ("train.jsonl", "heldout.jsonl", "public.jsonl"):
        for record in read_jsonl(out / name):
            rows.update(set(normalize_tokens(record["text"])) & tokens)
    assert rows == Counter({c.secret.split()[0]: 1 for c in canaries if c.member})
    # The summary states the share and shows a canary as it reads in train.jsonl.
    assert re.search(r"= \d+\.\d\d% canary rows", output)
    assert f"a canary reads {canaries[0].text!r}" in output and "fitting score: masked pseudo-log-likelihood" in output
    assert "New tokens: 60, declared in manifest.json" in output


def test_rare_token_and_default_designs(tmp_path):
    out = tmp_path / "rare"
    result = invoke(*SMALL, "--coin-flip", "--per-frequency", "30", "--design", "rare-tokens:3", "--out", str(out))
    assert result.exit_code == 0, result.output
    run = load_inject_run(out)
    public = Counter(w for t in run.public_texts for w in re.findall("[a-z]{2,}", t.lower()))
    alphabet = set(run.manifest["secret_space"]["word_list"]["words"])
    assert alphabet and max(public[w] for w in alphabet) <= min(public[w] for w in set(public) - alphabet)
    assert all(len(c.secret.split()) == 3 and set(c.secret.split()) <= alphabet for c in run.canaries)
    assert run.new_tokens == () and "new_tokens" not in run.manifest and run.space is None  # not a per-position space
    assert "Design rare-tokens: a canary reads" in result.output
    # --design format (the default) is today's inject, byte for byte.
    plain, default = tmp_path / "plain", tmp_path / "default"
    groups = ["--frequencies", "1,2", "--per-frequency", "3"]
    assert invoke(*SMALL, *groups, "--format", "digits:4", "--out", str(plain)).exit_code == 0
    assert invoke(*SMALL, *groups, "--design", "format", "--format", "digits:4", "--out", str(default)).exit_code == 0
    assert (plain / "train.jsonl").read_bytes() == (default / "train.jsonl").read_bytes()
    assert json.loads((plain / "manifest.json").read_text())["design"]["name"] == "format"


def test_a_manifest_with_bad_new_tokens_is_refused(new_token_run, tmp_path):
    from dpaudit.inject_dir.reader import InjectRun

    out, _ = new_token_run
    manifest = json.loads((out / "manifest.json").read_text())
    for bad in (["Upper"], ["same", "same"], "notalist", ["two words"]):
        with pytest.raises(UserInputError, match="new_tokens"):
            InjectRun(path=out, manifest={**manifest, "new_tokens": bad}).new_tokens  # noqa: B018 - reading it raises


BAD = {
    "unknown design": (["--design", "novel"], ["--design 'novel'", "unknown canary design"]),
    "format with a design": (
        ["--design", "new-tokens", "--format", "digits:4"],
        ["--format applies to --design format only"],
    ),
    "zero repetitions": (["--design", "new-tokens:0"], ["--design 'new-tokens:0'", "from 1 to 64"]),
    "count on format": (["--design", "format:2"], ["--design 'format:2'", "--format"]),
    "word list with a design": (
        ["--design", "rare-tokens", "--word-list", "public"],
        ["--word-list applies only to --design format"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_design_input_is_a_one_line_error_and_writes_nothing(tmp_path, case):
    args, needles = BAD[case]
    out = tmp_path / "deep" / "run"
    result = invoke(*SMALL, "--coin-flip", "--per-frequency", "10", *args, "--out", str(out))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and all(n in lines[0] for n in needles), result.output
    assert not (tmp_path / "deep").exists()


def test_the_declared_new_tokens_never_depend_on_a_private_row(tmp_path):
    """Neighbouring corpora (one private row's text replaced by one that contains a canary's new token, same row
    count, so the same split): the released token set (every trained model's vocabulary declares it) is identical."""
    from dpaudit.corpus.assistant import generate

    texts = [u["text"] for u in generate(300, seed=7)]
    base = tmp_path / "corpus.txt"
    base.write_text("\n".join(texts) + "\n", encoding="utf-8")
    args = [
        "--corpus",
        str(base),
        "--coin-flip",
        "--per-frequency",
        "20",
        "--design",
        "new-tokens",
        "--heldout-size",
        "30",
        "--public-size",
        "100",
        "--seed",
        "3",
    ]
    first = tmp_path / "a"
    assert invoke(*args, "--out", str(first)).exit_code == 0
    tokens = load_inject_run(first).new_tokens
    members = {row["text"] for row in read_jsonl(first / "train.jsonl")}
    victim = next(i for i, t in enumerate(texts) if t in members)  # a private training row
    texts[victim] = f"please remember {tokens[0]} for me"
    neighbour = tmp_path / "neighbour.txt"
    neighbour.write_text("\n".join(texts) + "\n", encoding="utf-8")
    second = tmp_path / "b"
    args[1] = str(neighbour)
    assert invoke(*args, "--out", str(second)).exit_code == 0
    assert load_inject_run(second).new_tokens == tokens
