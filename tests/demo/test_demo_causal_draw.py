"""The causal LMs' own inject directory is drawn disjoint from the masked LMs' by construction (``dpaudit inject
--exclude`` of all three of the masked directory's splits), and the full causal plan is the one ``dpaudit.demo.plan``'s
docstring describes.

Both directories come from ``builtin:assistant`` with one seed. Without the exclusion their rows overlapped: at the
full size 43 of the causal directory's 1,300 private rows were public rows of the masked directory (the rows the
causal recipe was chosen on) and 89 of the masked LMs' private rows were causal public rows (trained on without DP).
The control below shows the small size overlaps too, so the disjointness is the exclusion's work, not the seed's.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit import demo
from dpaudit.cli import cli
from dpaudit.corpus.near_duplicates import normalize
from dpaudit.demo.plan import EXCLUDED_SPLITS, FULL, build_plan

SPLITS = ("train", "heldout", "public")
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


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """The small plan's two inject stages, run for real, and the causal inject run once more without --exclude."""
    out = tmp_path_factory.mktemp("causal-draw")
    plan = build_plan(out, SMALL, seed=0, report=out / "report.html", classifiers=False, causal=True)
    stages = {s.name: s for s in plan.stages}
    for name in ("inject", "inject-causal"):
        _invoke(list(stages[name].args))
    args = list(stages["inject-causal"].args)
    for i in reversed([i for i, a in enumerate(args) if a == "--exclude"]):
        del args[i : i + 2]
    args[args.index("--out") + 1] = str(out / "data-causal-unexcluded")
    _invoke(args)
    return plan, out


def test_the_causal_directory_shares_no_row_with_the_masked_one(small):
    plan, out = small
    masked, causal, unexcluded = (_rows(out / d) for d in ("data", "data-causal", "data-causal-unexcluded"))
    private = {"masked": masked["train"] | masked["heldout"], "causal": causal["train"] | causal["heldout"]}
    assert not private["causal"] & masked["public"]  # the rows the causal recipe was chosen on stay public
    assert not private["masked"] & causal["public"]  # the public causal LM trains on no masked private row
    assert not (masked["public"] | private["masked"]) & (causal["public"] | private["causal"])  # none at all
    # the control: the same command without --exclude draws rows of the masked directory (the seed alone does not
    # keep them apart), and the excluded draw still has the sizes asked for
    assert (unexcluded["public"] | unexcluded["train"] | unexcluded["heldout"]) & (masked["public"] | private["masked"])
    assert {s: len(causal[s]) for s in ("heldout", "public")} == {"heldout": 40, "public": 2000}
    manifest = json.loads((out / "data-causal" / "manifest.json").read_text())
    assert set(EXCLUDED_SPLITS) == {Path(p).name for p in manifest["corpus"]["excluded"]["files"]}
    assert all(str(out / "data" / s) in manifest["inputs"] for s in EXCLUDED_SPLITS)  # sha256 of each, recorded
    # a rerun of the demo's command is recognized as done (the excluded files unchanged): nothing written
    stage = next(s for s in plan.stages if s.name == "inject-causal")
    assert "nothing was written" in CliRunner().invoke(cli, [a for a in stage.args if a != "--overwrite"]).output


def test_the_full_causal_plan_is_the_one_the_docstring_describes(tmp_path):
    plan = build_plan(tmp_path, FULL, seed=0, report=tmp_path / "r.html", classifiers=False, causal=True)
    names = [s.name for s in plan.stages]
    stages = {s.name: s for s in plan.stages}
    inject = stages["inject-causal"]
    assert names.index("inject") < names.index("inject-causal") and inject.inputs == (tmp_path / "data",)
    args = list(inject.args)
    excluded = [args[i + 1] for i, a in enumerate(args) if a == "--exclude"]
    assert excluded == [str(tmp_path / "data" / s) for s in ("train.jsonl", "heldout.jsonl", "public.jsonl")]
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
    assert "trained 3 epochs" in doc and "20 fine-tuning epochs" in doc and "--exclude" in doc


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
    both = dpaudit.inject(tmp_path / "both", exclude=[out / "data" / s for s in EXCLUDED_SPLITS], **common)
    rows = {name: set().union(*_rows(result.path).values()) for name, result in (("one", one), ("both", both))}
    assert not rows["one"] & masked["public"] and rows["one"] & (masked["train"] | masked["heldout"])
    assert not rows["both"] & set().union(*masked.values())
