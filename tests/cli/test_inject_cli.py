"""`dpaudit inject` end to end through the CLI: outputs, reproducibility, modes, and bad input."""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.canaries.generate import normalize_tokens
from dpaudit.canaries.manifest import OUTPUT_FILES, SCHEMA, load_inject_run
from dpaudit.cli import cli
from dpaudit.files.run_dirs import read_jsonl, verify_run_dir

SMALL = ["--frequencies", "1,3,7", "--per-frequency", "4", "--holdout", "5"]


def invoke(*args: str):
    return CliRunner().invoke(cli, ["inject", *args], catch_exceptions=False)


def texts(path: Path) -> list[str]:
    return [r["text"] for r in read_jsonl(path)]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_line_error(result, *needles: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def builtin_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("inject") / "run"
    result = invoke("--corpus", "builtin:assistant", "--corpus-size", "1500", "--out", str(out), "--seed", "3", *SMALL)
    assert result.exit_code == 0, result.output
    return out


def test_run_directory_contents_and_counts(builtin_run):
    out = builtin_run
    manifest = verify_run_dir(out, schema_prefix="dpaudit.inject/")
    assert manifest["schema"] == SCHEMA and set(manifest["outputs"]) == set(OUTPUT_FILES)
    assert manifest["inputs"] == {
        "builtin:assistant": "dpaudit.corpus.assistant v1 (seed 3, 1500 utterances, 15 intents)"
    }
    run = load_inject_run(out)
    canaries = run.canaries
    assert len(canaries) == 3 * 4 + 5
    assert Counter(c.frequency for c in canaries) == {1: 4, 3: 4, 7: 4, 0: 5}
    assert len({c.secret for c in canaries}) == len(canaries)  # no collisions

    train = list(read_jsonl(out / "train.jsonl"))
    heldout, public = texts(out / "heldout.jsonl"), texts(out / "public.jsonl")
    counts = Counter(r["text"] for r in train)
    for c in canaries:
        assert counts[c.text] == c.frequency  # exact repetitions; controls absent
        assert c.text not in heldout and c.text not in public
    # Nothing marks a canary: every row has the same keys, canaries carry corpus labels.
    labels = {r["label"] for r in list(read_jsonl(out / "public.jsonl"))}
    assert all(set(r) == {"text", "label"} for r in train)
    assert {c.label for c in canaries} <= labels
    # Splits partition the corpus: 1500 = 1050 members + 150 heldout + 300 public.
    corpus_rows = [t for t in counts if t not in {c.text for c in canaries}]
    assert len(corpus_rows) == sum(counts[t] for t in corpus_rows) == 1050
    assert (len(heldout), len(public)) == (150, 300)
    assert not set(corpus_rows) & set(heldout) and not set(heldout) & set(public)
    assert len(train) == 1050 + 4 * (1 + 3 + 7) == manifest["counts"]["train_rows"]
    # Secrets never occur in the corpus (as token sequences).
    corpus_tokens = [" " + " ".join(normalize_tokens(t)) + " " for t in corpus_rows + heldout + public]
    assert not any(" " + c.secret + " " in t for c in canaries for t in corpus_tokens)
    assert manifest["secret_space"]["size"] == 10**10 and "public.jsonl" in manifest["tokenizer"]
    assert run.space.format == "digits:10"


def test_same_seed_gives_identical_bytes_and_other_seed_differs(builtin_run, tmp_path):
    again = tmp_path / "again"
    other = tmp_path / "other"
    assert (
        invoke(
            "--corpus", "builtin:assistant", "--corpus-size", "1500", "--out", str(again), "--seed", "3", *SMALL
        ).exit_code
        == 0
    )
    assert (
        invoke(
            "--corpus", "builtin:assistant", "--corpus-size", "1500", "--out", str(other), "--seed", "4", *SMALL
        ).exit_code
        == 0
    )

    def digest(run, name):
        return hashlib.sha256((run / name).read_bytes()).hexdigest()

    for name in OUTPUT_FILES:
        assert digest(builtin_run, name) == digest(again, name), name
        assert digest(builtin_run, name) != digest(other, name), name
    a, b = (json.loads((r / "manifest.json").read_text()) for r in (builtin_run, again))
    for m in (a, b):
        m.pop("command")
    assert a == b


def test_user_text_corpus_json_summary_and_tamper_detection(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"utterance number {i} for the test\n" for i in range(300)), encoding="utf-8")
    out = tmp_path / "run"
    result = invoke(
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--json",
        "--frequencies",
        "2,5",
        "--per-frequency",
        "3",
        "--heldout-size",
        "40",
        "--public-size",
        "60",
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["counts"] == {
        "corpus": 300,
        "members": 200,
        "heldout": 40,
        "public": 60,
        "train_rows": 200 + 3 * 7,
        "canaries": 9,
        "canaries_inserted": 6,
        "canaries_control": 3,
        "canary_insertions": 21,
        "canaries_by_frequency": {"2": 3, "5": 3, "0": 3},
        "secrets_rejected_in_corpus": 0,
        "canary_share": 21 / 221,
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"] == {str(corpus): hashlib.sha256(corpus.read_bytes()).hexdigest()}
    assert all(set(r) == {"text"} for r in read_jsonl(out / "train.jsonl"))
    assert all("label" not in c.to_record() for c in load_inject_run(out).canaries)
    with open(out / "train.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"text": "sneaked in"}\n')
    with pytest.raises(Exception, match="changed after it was written"):
        load_inject_run(out)


def test_heldout_and_public_rows_are_shuffled_so_every_prefix_is_a_uniform_sample(tmp_path):
    """A corpus sorted by label (as intent datasets often ship) must not give a trainer's evaluation,
    which reads the first heldout rows, or the per-layer clip scaling, which reads the first public
    rows, a single intent: the splits are written in a seeded random order."""
    corpus = tmp_path / "sorted.tsv"
    rows = [(f"utterance {i} of intent {k}", f"intent{k}") for k in range(5) for i in range(120)]  # sorted by label
    corpus.write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    out = tmp_path / "run"
    result = invoke(
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--frequencies",
        "1",
        "--per-frequency",
        "2",
        "--heldout-size",
        "100",
        "--public-size",
        "100",
    )
    assert result.exit_code == 0, result.output
    for name in ("heldout.jsonl", "public.jsonl"):
        split = list(read_jsonl(out / name))
        assert len({r["label"] for r in split[:20]}) >= 4, name  # in corpus order: 1 or 2 labels
        numbers = [int(r["text"].split()[1]) + 1000 * int(r["label"][-1]) for r in split]
        assert numbers != sorted(numbers), name
    again = tmp_path / "again"
    assert (
        invoke(
            "--corpus",
            str(corpus),
            "--out",
            str(again),
            "--frequencies",
            "1",
            "--per-frequency",
            "2",
            "--heldout-size",
            "100",
            "--public-size",
            "100",
        ).exit_code
        == 0
    )
    assert (again / "heldout.jsonl").read_bytes() == (out / "heldout.jsonl").read_bytes()  # the seed fixes the order


def test_coin_flip_mode(tmp_path):
    out = tmp_path / "run"
    result = invoke(
        "--corpus",
        "builtin:assistant",
        "--corpus-size",
        "400",
        "--out",
        str(out),
        "--coin-flip",
        "--frequencies",
        "2",
        "--per-frequency",
        "200",
    )
    assert result.exit_code == 0, result.output
    manifest = verify_run_dir(out)
    assert manifest["mode"] == "coin-flip" and manifest["config"]["schedule"]["coin_flip"] is True
    canaries = load_inject_run(out).canaries
    assert len(canaries) == 200 and {c.frequency for c in canaries} == {0, 2}
    assert 70 < sum(c.member for c in canaries) < 130  # fair coin, > 4 sd margin
    counts = Counter(texts(out / "train.jsonl"))
    assert all(counts[c.text] == (2 if c.member else 0) for c in canaries)


def test_words_format_with_public_word_list(tmp_path):
    out = tmp_path / "run"
    result = invoke(
        "--corpus",
        "builtin:assistant",
        "--corpus-size",
        "600",
        "--out",
        str(out),
        "--format",
        "words:3",
        "--word-list",
        "public",
        "--template",
        "the code word is {secret} ok",
        *SMALL,
    )
    assert result.exit_code == 0, result.output
    run = load_inject_run(out)
    words = run.manifest["secret_space"]["word_list"]["words"]
    public_words = {w for t in texts(out / "public.jsonl") for w in re.findall(r"[a-z]+", t.lower())}
    assert set(words) <= public_words and run.space.size == len(words) ** 3
    assert all(c.prefix == "the code word is " and c.suffix == " ok" for c in run.canaries)
    assert all(set(run.space.split(c.secret)) <= set(words) for c in run.canaries)


def test_phrase_format_uses_sentences_of_the_phrase_corpus(tmp_path):
    phrases = tmp_path / "phrases.txt"
    from dpaudit.inject_dir.secret_spaces import shipped_words

    words = shipped_words()
    sentences = [" ".join(words[(i * 37 + k * 101) % len(words)] for k in range(9)) for i in range(60)]
    phrases.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    out = tmp_path / "run"
    result = invoke(
        "--corpus",
        "builtin:assistant",
        "--corpus-size",
        "300",
        "--out",
        str(out),
        "--format",
        "phrases:3",
        "--phrase-corpus",
        str(phrases),
        "--frequencies",
        "1,2",
        "--per-frequency",
        "5",
        "--holdout",
        "5",
    )
    assert result.exit_code == 0, result.output
    run = load_inject_run(out)
    assert run.space is None and run.manifest["secret_space"]["kind"] == "phrases"
    assert all(c.text in sentences and len(c.secret.split()) == 3 for c in run.canaries)
    assert str(phrases) in run.manifest["inputs"]


def test_existing_output_is_refused_then_overwritten(builtin_run, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("user file")
    args = ["--corpus", "builtin:assistant", "--corpus-size", "200", "--out", str(out), *SMALL]
    one_line_error(invoke(*args), "--overwrite")
    assert tree(tmp_path) == ["run", "run/keep.txt"]
    # A folder holding a file dpaudit did not write is never replaced, not even with --overwrite.
    one_line_error(invoke(*args, "--overwrite"), "keep.txt")
    assert tree(tmp_path) == ["run", "run/keep.txt"]
    (out / "keep.txt").unlink()
    assert invoke(*args).exit_code == 0
    first = (out / "train.jsonl").read_bytes()
    # An earlier inject run (every file listed in its manifest) is replaced with --overwrite.
    assert invoke(*args, "--seed", "1", "--overwrite").exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTPUT_FILES, "manifest.json"])
    assert (out / "train.jsonl").read_bytes() != first


def test_help_ends_with_a_worked_example():
    result = CliRunner().invoke(cli, ["inject", "--help"])
    assert result.exit_code == 0
    assert result.output.strip().splitlines()[-1].strip().startswith("Example: dpaudit inject")


BAD_INPUTS = {
    "empty corpus": (lambda d: ["--corpus", _write(d / "empty.txt", "\n \n")], ["empty.txt", "no examples"]),
    "missing file": (lambda d: ["--corpus", str(d / "nope.txt")], ["nope.txt", "no such file"]),
    "undecodable bytes": (
        lambda d: ["--corpus", _write(d / "bad.txt", b"ok line\nbad \xff line\n")],
        ["bad.txt:2", "--encoding-errors replace"],
    ),
    "csv without text": (
        lambda d: ["--corpus", _write(d / "c.csv", "sentence\nhello\n")],
        ["c.csv:1", "no 'text' column"],
    ),
    "frequency zero": (
        lambda d: ["--corpus", _corpus(d), "--frequencies", "1,0"],
        ["--frequencies", "'0' is not a positive integer"],
    ),
    "frequency not integer": (lambda d: ["--corpus", _corpus(d), "--frequencies", "1,2.5"], ["--frequencies", "'2.5'"]),
    "template without secret": (
        lambda d: ["--corpus", _corpus(d), "--template", "my pin is"],
        ["--template", "{secret}"],
    ),
    "space too small": (
        lambda d: ["--corpus", _corpus(d), "--format", "digits:2", "--frequencies", "1", "--per-frequency", "500"],
        ["digits:2 has only 100 possible secrets but 1000"],
    ),
    "too many held out": (
        lambda d: ["--corpus", _corpus(d), "--heldout-size", "500"],
        ["500 held-out", "no training members"],
    ),
    "phrase corpus overlaps": (
        lambda d: [
            "--corpus",
            _corpus(d),
            "--format",
            "phrases",
            "--phrase-corpus",
            _write(d / "p.txt", "a fresh sentence with many words\nLine 7 of the corpus!\n"),
        ],
        ["--phrase-corpus line 2", "line 8", "disjoint"],
    ),
    "output is a file": (
        lambda d: ["--corpus", _corpus(d), "--out", _write(d / "out.txt", "x")],
        ["out.txt is a file"],
    ),
    "corpus size on a file": (
        lambda d: ["--corpus", _corpus(d), "--corpus-size", "10"],
        ["--corpus-size applies only"],
    ),
    "corpus size too large": (
        lambda d: ["--corpus", "builtin:assistant", "--corpus-size", "99999999"],
        ["--corpus-size 99999999", "at most"],
    ),
    "phrases without corpus": (lambda d: ["--corpus", _corpus(d), "--format", "phrases"], ["needs --phrase-corpus"]),
    "word list with digits": (
        lambda d: ["--corpus", _corpus(d), "--word-list", "public"],
        ["--word-list applies only"],
    ),
    "holdout with coin flip": (
        lambda d: ["--corpus", _corpus(d), "--coin-flip", "--holdout", "3", "--frequencies", "1"],
        ["--holdout", "--coin-flip"],
    ),
    "coin flip with two frequencies": (
        lambda d: ["--corpus", _corpus(d), "--coin-flip", "--frequencies", "1,2"],
        ["--coin-flip", "one value"],
    ),
}


def _write(path: Path, content) -> str:
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return str(path)


def _corpus(d: Path) -> str:
    return _write(d / "corpus.txt", "header line\n" + "".join(f"line {i} of the corpus\n" for i in range(1, 300)))


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_a_one_line_error_and_writes_nothing(tmp_path, case):
    make_args, needles = BAD_INPUTS[case]
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    args = make_args(inputs)
    if "--out" not in args:
        args += ["--out", str(tmp_path / "deep" / "run")]
    before = tree(tmp_path)
    one_line_error(invoke(*args, *([] if "--frequencies" in args else SMALL)), *needles)
    assert tree(tmp_path) == before


def test_encoding_errors_replace_accepts_the_file(tmp_path):
    corpus = _write(
        tmp_path / "bad.txt", b"".join(b"line %d \xff ok\n" % i for i in range(100))
    )  # canaries < 50% of train
    out = tmp_path / "run"
    assert invoke("--corpus", corpus, "--out", str(out), "--encoding-errors", "replace", *SMALL).exit_code == 0
    manifest = verify_run_dir(out)
    assert manifest["corpus"]["replaced_lines"] == 100
    assert any("\ufffd" in t for t in texts(out / "public.jsonl"))


def test_canary_labels_come_from_the_public_split_only(tmp_path):
    """A classifier's label set is the public split's (docs/privacy.md, "Nothing released is computed from private
    data"): a canary carrying a label that only private rows have would be refused at train time. Labels rare in the
    corpus and absent from public.jsonl are never drawn (proportional draws over the corpus gave them to about 4 of
    500 canaries)."""
    corpus = tmp_path / "c.tsv"
    rows = [(f"utterance {i} of intent {k}", f"intent{k}") for k in range(4) for i in range(150)]
    rows += [(f"rare utterance {i}", f"rare{i}") for i in range(12)]  # 12 one-row labels
    corpus.write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
    out = tmp_path / "run"
    result = invoke(
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--frequencies",
        "1",
        "--per-frequency",
        "500",
        "--holdout",
        "100",
        "--public-size",
        "100",
        "--force",
    )
    assert result.exit_code == 0, result.output
    public = {r["label"] for r in read_jsonl(out / "public.jsonl")}
    rare_private = {f"rare{i}" for i in range(12)} - public
    assert len(rare_private) >= 8  # the precondition: most rare labels are private only
    assert {c.label for c in load_inject_run(out).canaries} <= public
