"""The causal LMs' own inject directory is an independent draw (a seed of its own, ``causal_inject_seed``) with
``dpaudit inject --exclude`` of the masked LMs' ``public.jsonl`` only, and the full causal plan is the one
``dpaudit.demo.plan``'s docstring describes.

Why only the public split: the rows the causal recipe was chosen on (the masked public ones) must not be causal private
rows, but a directory drawn with ``--exclude`` is a function of the excluded rows, and the public causal LM trained on
it without DP is released: excluding the masked private rows would make it depend on them. Independent draws share
rows only by the grammar's chance, which depends on neither experiment's membership. ``inject`` refuses an inject
directory's private split as ``--exclude``.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit import demo
from dpaudit.cli import cli
from dpaudit.common.errors import UserInputError
from dpaudit.corpus.near_duplicates import normalize
from dpaudit.demo.plan import EXCLUDED_SPLITS, FULL, build_plan, causal_inject_seed
from dpaudit.training.config_types import SEED_MAX

SPLITS = ("train", "heldout", "public")
FILES = ("train.jsonl", "heldout.jsonl", "public.jsonl", "canaries.jsonl")
#: The full causal recipe with far fewer rows and canaries (the same plan otherwise).
SMALL = dataclasses.replace(
    FULL,
    corpus_size=300,
    public_size=2000,
    frequencies=(1, 10),
    per_frequency=2,
    causal_corpus_size=230,
    causal_heldout_size=40,
    causal_per_frequency=1,
)


def _invoke(args: list[str]) -> str:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    return result.output


def _rows(directory: Path) -> dict[str, set[str]]:
    return {
        split: {normalize(json.loads(line)["text"]) for line in (directory / f"{split}.jsonl").open(encoding="utf-8")}
        for split in SPLITS
    }


def _option(args: list[str] | tuple[str, ...], name: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args) if a == name]


def _with(args: list[str], out: Path, *, exclude: list[str]) -> list[str]:
    """``args`` writing to ``out``, with ``exclude`` as its --exclude files."""
    args = list(args)
    for i in reversed([i for i, a in enumerate(args) if a == "--exclude"]):
        del args[i : i + 2]
    args[args.index("--out") + 1] = str(out)
    return [*args, *(a for f in exclude for a in ("--exclude", f))]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small plan's two inject stages, run for real; the causal inject once more without --exclude, and once
    against a copy of the masked directory whose private splits were replaced."""
    out = tmp_path_factory.mktemp("causal-draw")
    plan = build_plan(out, SMALL, seed=0, report=out / "report.html", classifiers=False, causal=True)
    stages = {s.name: s for s in plan.stages}
    for name in ("inject", "inject-causal"):
        _invoke(list(stages[name].args))
    args = list(stages["inject-causal"].args)
    _invoke(_with(args, out / "data-causal-unexcluded", exclude=[]))
    altered = out / "data-altered"
    shutil.copytree(out / "data", altered)
    for split in ("train.jsonl", "heldout.jsonl"):  # other private rows: the first one, repeated
        first = (altered / split).read_text(encoding="utf-8").splitlines(keepends=True)[0]
        (altered / split).write_text(first * 7, encoding="utf-8")
    (altered / "manifest.json").unlink()  # now a folder of plain files, which --exclude may read
    _invoke(_with(args, out / "data-causal-altered", exclude=[str(altered / "public.jsonl")]))
    return plan, out


def test_the_causal_private_rows_are_no_masked_public_row(small):
    plan, out = small
    masked, causal, unexcluded = (_rows(out / d) for d in ("data", "data-causal", "data-causal-unexcluded"))
    private = {"masked": masked["train"] | masked["heldout"], "causal": causal["train"] | causal["heldout"]}
    assert not private["causal"] & masked["public"]  # the rows the causal recipe was chosen on stay public
    assert not masked["public"] & causal["public"]  # --exclude keeps them out of every causal split
    # the control: the same command without --exclude draws a masked public row into the causal private ones
    assert (unexcluded["train"] | unexcluded["heldout"]) & masked["public"]
    # the masked private rows are not excluded: a causal public row may equal one by the grammar's chance (5 here)
    assert private["masked"] & causal["public"] == private["masked"] & unexcluded["public"] != set()
    assert {s: len(causal[s]) for s in ("heldout", "public")} == {"heldout": 40, "public": 2000}
    manifest = json.loads((out / "data-causal" / "manifest.json").read_text())
    assert [Path(p).name for p in manifest["corpus"]["excluded"]["files"]] == ["public.jsonl"]
    assert str(out / "data" / "public.jsonl") in manifest["inputs"]  # its sha256, recorded
    assert not any(str(out / "data" / s) in manifest["inputs"] for s in ("train.jsonl", "heldout.jsonl"))
    # a rerun of the demo's command is recognized as done (the excluded file unchanged): nothing written
    stage = next(s for s in plan.stages if s.name == "inject-causal")
    assert "nothing was written" in CliRunner().invoke(cli, [a for a in stage.args if a != "--overwrite"]).output


def test_the_causal_draw_does_not_depend_on_the_masked_private_rows(small):
    plan, out = small
    inject = next(s for s in plan.stages if s.name == "inject-causal")
    assert _option(inject.args, "--exclude") == [str(out / "data" / "public.jsonl")]  # no private split named
    # the masked train.jsonl and heldout.jsonl replaced: the causal directory's files are byte-identical
    for name in FILES:
        assert (out / "data-causal" / name).read_bytes() == (out / "data-causal-altered" / name).read_bytes(), name


def test_the_causal_seed_is_its_own(small):
    plan, _ = small
    stages = {s.name: s for s in plan.stages}
    masked, causal = (_option(stages[n].args, "--seed") for n in ("inject", "inject-causal"))
    assert masked == ["0"] and causal == [str(causal_inject_seed(0))] and causal != masked
    seeds = [0, 1, 2, 12345, SEED_MAX]
    derived = [causal_inject_seed(s) for s in seeds]
    assert all(0 <= d <= SEED_MAX for d in derived) and not set(derived) & set(seeds)
    assert len(set(derived)) == len(seeds) and derived == [causal_inject_seed(s) for s in seeds]  # a fixed rule


def test_the_full_causal_plan_is_the_one_the_docstring_describes(tmp_path):
    plan = build_plan(tmp_path, FULL, seed=0, report=tmp_path / "r.html", classifiers=False, causal=True)
    names = [s.name for s in plan.stages]
    stages = {s.name: s for s in plan.stages}
    inject = stages["inject-causal"]
    assert names.index("inject") < names.index("inject-causal") and inject.inputs == (tmp_path / "data",)
    assert EXCLUDED_SPLITS == ("public.jsonl",)
    assert _option(inject.args, "--exclude") == [str(tmp_path / "data" / "public.jsonl")]
    args = list(inject.args)
    option = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    assert (option["--corpus-size"], option["--heldout-size"], option["--public-size"]) == ("1300", "400", "20000")
    assert (option["--per-frequency"], option["--frequencies"], option["--out"]) == (
        "5",
        "1,10,100",
        str(tmp_path / "data-causal"),
    )
    public, nonprivate = stages["train-clm-public"].args, stages["train-clm-nonprivate"].args
    assert public[public.index("--data") + 1] == str(tmp_path / "data-causal")
    assert public[public.index("--epochs") + 1] == "3" and nonprivate[nonprivate.index("--epochs") + 1] == "20"
    assert nonprivate[nonprivate.index("--init-from") + 1] == str(tmp_path / "model-clm-public")
    doc = " ".join(demo.plan.__doc__.split())
    members, canary_rows = 1300 - 400, 5 * (1 + 10 + 100)
    assert f"{members} members beside {canary_rows} canary rows, 400 held-out rows, 20,000 public rows" in doc
    assert "trained 3 epochs" in doc and "20 fine-tuning epochs" in doc
    assert "causal_inject_seed" in doc and "``--exclude`` of their ``public.jsonl`` only" in doc


@pytest.mark.parametrize("split", ["train.jsonl", "heldout.jsonl", "canaries.jsonl"])
def test_a_private_split_of_an_inject_directory_is_refused(small, tmp_path, monkeypatch, split):
    _, out = small
    monkeypatch.chdir(tmp_path)
    args = ["inject", "--corpus", "builtin:assistant", "--corpus-size", "200", "--out", "out", "--frequencies", "1"]
    result = CliRunner().invoke(cli, [*args, "--exclude", str(out / "data" / split)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"--exclude {out / 'data' / split} is a private split" in lines[0], result.output
    assert "public.jsonl" in lines[0] and "--seed" in lines[0]  # the hint
    assert not Path("out").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--exclude", "missing.jsonl"], "--exclude"),
        (["--corpus", "corpus.txt", "--exclude", "corpus.txt"], "--exclude applies to --corpus builtin:assistant"),
    ],
)
def test_bad_exclude_is_one_line_exit_2(tmp_path, monkeypatch, extra, message):
    monkeypatch.chdir(tmp_path)
    Path("corpus.txt").write_text("".join(f"row {i}\n" for i in range(50)), encoding="utf-8")
    corpus = [] if "--corpus" in extra else ["--corpus", "builtin:assistant", "--corpus-size", "200"]
    result = CliRunner().invoke(cli, ["inject", *corpus, *extra, "--out", "out", "--frequencies", "1"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], result.output
    assert not Path("out").exists()


def test_the_python_api_takes_one_path_or_several(small, tmp_path):
    import dpaudit

    _, out = small
    masked = _rows(out / "data")
    common = dict(corpus="builtin:assistant", corpus_size=200, public_size=2000, heldout_size=40, frequencies="1")
    one = dpaudit.inject(tmp_path / "one", exclude=out / "data" / "public.jsonl", **common)
    plain = out / "data-altered"  # no manifest beside its files: plain files, which may be excluded
    both = dpaudit.inject(tmp_path / "both", exclude=[plain / "public.jsonl", plain / "train.jsonl"], **common)
    rows = {name: set().union(*_rows(result.path).values()) for name, result in (("one", one), ("both", both))}
    assert not rows["one"] & masked["public"]
    assert not rows["both"] & set().union(*_rows(plain).values())
    with pytest.raises(UserInputError, match="is a private split"):
        dpaudit.inject(tmp_path / "refused", exclude=[out / "data" / "train.jsonl"], **common)
    assert not (tmp_path / "refused").exists()
