"""``dpaudit report --out`` and ``dpaudit demo --report`` never replace a file dpaudit did not write.

Before: both wrote the page over whatever was there, with no check and no ``--overwrite``: a user's CSV, the
attack directory's own ``results.json`` (the run then refused as changed), an inject directory's
``train.jsonl``. Now: a user's file, a link, and any path inside a run directory (whose manifest lists its
files by hash) are refused in one line, exit 2, the file untouched; a page dpaudit wrote (its generator tag) is
replaced only with ``--overwrite``, and the same page again is left as it is. The demo replaces only the page it
recorded writing itself, and refuses anything else before its first stage.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.claim import Claim
from dpaudit.cli import cli
from dpaudit.files.run_dirs import verify_run_dir


def _results(secret: str):
    from dpaudit.attacks.results import AttackResults, CanaryScore, DataInfo, ModelInfo

    return AttackResults(
        model=ModelInfo(path="m", kind="masked-lm", architecture="BertForMaskedLM"),
        data=DataInfo(
            path="d",
            secret_format="digits:4",
            log2_space_size=13.3,
            canaries=1,
            controls=0,
            template="{name} has {secret}",
        ),
        claimed=Claim(known=False),
        attacks=(),
        canaries=(CanaryScore(id="c0000", frequency=1, secret=secret),),
    )


def _attack_dir(out: Path, secret: str = "1 2 3 4") -> Path:
    """An attack directory written by the product's own writer from minimal results (no model)."""
    from dpaudit.stages.attack import write_attack_dir

    return write_attack_dir(
        out, _results(secret), config={}, inputs={}, seed=0, overwrite=False, command=["dpaudit", "attack"]
    )


@pytest.fixture(scope="module")
def attacks(tmp_path_factory) -> tuple[Path, Path]:
    """Two attack directories whose pages differ (read-only)."""
    root = tmp_path_factory.mktemp("overwrite")
    return _attack_dir(root / "a"), _attack_dir(root / "b", secret="9 8 7 6")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _report(*args: str):
    return CliRunner().invoke(cli, ["report", *map(str, args)])


# ------------------------------------------------------------------------------------------------
# dpaudit report --out


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_report_never_replaces_a_users_file(attacks, tmp_path, overwrite):
    users = tmp_path / "scores.csv"
    users.write_text("id,score\n1,0.5\n")
    before = _digest(users)
    _one_line_error(
        _report(attacks[0], "--out", users, *overwrite),
        f"--out {users}",
        "not a report page dpaudit wrote",
        "choose another path",
    )
    assert _digest(users) == before and sorted(p.name for p in tmp_path.iterdir()) == ["scores.csv"]


@pytest.mark.parametrize("target", ["results.json", "index.html", "manifest.json", "new-page.html"])
def test_report_never_writes_into_a_run_directory_even_with_overwrite(attacks, tmp_path, target):
    """The input attack directory's own files (results.json: the run would then be refused as changed), and a
    new file beside them (a file no manifest lists: --overwrite of that directory would then be refused)."""
    run = shutil.copytree(attacks[0], tmp_path / "attack")
    before = {p.name: _digest(p) for p in run.rglob("*") if p.is_file()}
    line = _one_line_error(
        _report(run, "--out", run / target, "--overwrite"),
        f"--out {run / target}",
        f"inside the dpaudit run directory {run.resolve()}",
    )
    assert ("a file its manifest lists" in line) == (target != "new-page.html")
    assert {p.name: _digest(p) for p in run.rglob("*") if p.is_file()} == before
    verify_run_dir(run, schema_prefix="dpaudit.attack/")  # still the run it was


def test_report_never_replaces_an_inject_directorys_train_jsonl(attacks, data_dir, tmp_path):
    data = shutil.copytree(data_dir, tmp_path / "data")
    before = _digest(data / "train.jsonl")
    _one_line_error(
        _report(attacks[0], "--out", data / "train.jsonl", "--overwrite"),
        f"--out {data / 'train.jsonl'}",
        "inside the dpaudit run directory",
    )
    assert _digest(data / "train.jsonl") == before
    verify_run_dir(data, schema_prefix="dpaudit.inject/")


def test_report_replaces_a_page_it_wrote_only_with_overwrite(attacks, tmp_path):
    page = tmp_path / "reports" / "page.html"
    assert _report(attacks[0], "--out", page).exit_code == 0
    first = _digest(page)
    # the same command again: the same page is there, nothing is written
    stat = page.stat()
    again = _report(attacks[0], "--out", page)
    assert again.exit_code == 0 and "up to date" in again.output, again.output
    assert page.stat().st_ino == stat.st_ino and page.stat().st_mtime_ns == stat.st_mtime_ns
    # another page over it: refused without --overwrite, replaced with it
    _one_line_error(_report(attacks[1], "--out", page), f"--out {page}", "pass --overwrite")
    assert _digest(page) == first
    replaced = _report(attacks[1], "--out", page, "--overwrite")
    assert replaced.exit_code == 0 and "wrote" in replaced.output, replaced.output
    assert _digest(page) != first
    assert sorted(p.name for p in page.parent.iterdir()) == ["page.html"]  # no temporary file left


def test_report_never_replaces_a_link(attacks, tmp_path):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    link = tmp_path / "page.html"
    link.symlink_to(target)
    _one_line_error(_report(attacks[0], "--out", link, "--overwrite"), f"--out {link}", "symbolic link")
    assert link.is_symlink() and target.read_text() == "mine\n"


# ------------------------------------------------------------------------------------------------
# dpaudit demo --report: checked before the first stage; only the demo's own page is replaced


@pytest.fixture()
def no_stages(monkeypatch):
    """The demo's stages never run here: reaching them means a refusal came too late."""
    pytest.importorskip("jax")
    pytest.importorskip("transformers")
    import dpaudit.demo.stages as stages

    def refuse(*args, **kwargs):
        raise AssertionError("the demo started its stages before refusing --report")

    monkeypatch.setattr(stages, "run_stages", refuse)


def test_demo_refuses_a_users_file_as_report_before_any_stage(tmp_path, monkeypatch, no_stages):
    monkeypatch.chdir(tmp_path)
    users = tmp_path / "summary.html"
    users.write_text("<html>my notes</html>\n")
    result = CliRunner().invoke(cli, ["demo", "--quick", "--out", "runs/demo", "--report", "summary.html"])
    _one_line_error(result, "--report summary.html", "not a report page dpaudit wrote")
    assert users.read_text() == "<html>my notes</html>\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.html"]


def test_demo_refuses_a_report_inside_its_own_run_directories(tmp_path, monkeypatch, no_stages):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["demo", "--quick", "--out", "runs/demo", "--report", "runs/demo/data/index.html"])
    _one_line_error(result, "--report runs/demo/data/index.html", "inside the demo's run directory")
    assert not (tmp_path / "runs" / "demo" / "data").exists()


def test_demo_replaces_only_the_page_it_recorded_writing(attacks, tmp_path):
    """The demo records each page it writes (sha256, in its state folder); the next demo replaces that page and no
    other: a report page of another command, or its own page edited since, is refused."""
    from dpaudit.cli.demo import _check_report, _record_page
    from dpaudit.common.errors import UserInputError

    state = tmp_path / "demo" / ".demo"
    state.mkdir(parents=True)
    page = tmp_path / "reports" / "index.html"
    assert _check_report(page, state) is False  # nothing there yet
    assert _report(attacks[0], "--out", page).exit_code == 0
    with pytest.raises(UserInputError, match="holds a report page this demo did not write"):
        _check_report(page, state)  # a page of `dpaudit report`, not the demo's
    _record_page(page, state)
    assert _check_report(page, state) is True  # the demo's own page: replaced by the next demo
    page.write_text(page.read_text() + "<!-- edited -->")
    with pytest.raises(UserInputError, match="did not write"):
        _check_report(page, state)


# ------------------------------------------------------------------------------------------------
# Never a folder dpaudit did not write (moved from tests/test_bad_inputs_runs.py): the demo refuses a non-empty
# --out that is not its own earlier run, and every --overwrite (inject, attack, the demo's stages) removes only
# what a manifest lists.


def tree(root: Path) -> dict[str, int]:
    """Every entry under ``root`` with its mtime: a rerun that trains or rewrites anything changes it."""
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


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


def _small_corpus(path: Path) -> Path:
    path.write_text("".join(f"line {i} of the small test corpus\n" for i in range(300)), encoding="utf-8")
    return path


def test_demo_refuses_an_out_that_is_not_its_own_and_deletes_nothing(tmp_path):
    out = tmp_path / "o"
    (out / "data").mkdir(parents=True)
    (out / "data" / "myfile.txt").write_text("the user's own file\n")
    before = tree(tmp_path)
    result = invoke(["demo", "--quick", "--out", out, "--report", tmp_path / "r" / "index.html"])
    assert_one_line_error(result, f"--out {out} exists, is not empty and is not an earlier dpaudit demo run")
    assert tree(tmp_path) == before
    assert (out / "data" / "myfile.txt").read_text() == "the user's own file\n"


def test_a_demo_stage_never_removes_a_folder_holding_a_users_file(tmp_path):
    """An earlier demo run whose data/ the user added a file to: a changed command (another size) would
    replace data/; it refuses instead, and keeps everything."""
    from dpaudit.common.errors import UserInputError
    from dpaudit.demo.plan import Stage
    from dpaudit.demo.stages import run_stages

    def inject(size: int) -> Stage:
        data = tmp_path / "data"
        return Stage(
            name="inject",
            title="inject",
            output=data,
            schema_prefix="dpaudit.inject/",
            args=(
                "inject",
                "--corpus",
                "builtin:assistant",
                "--corpus-size",
                str(size),
                "--out",
                str(data),
                "--frequencies",
                "1",
                "--per-frequency",
                "2",
                "--overwrite",
            ),
        )

    def run(stage):
        cli.main(args=list(stage.args), prog_name="dpaudit", standalone_mode=False)

    run_stages([inject(150)], state=tmp_path / ".demo", run=run, echo=lambda _: None)
    (tmp_path / "data" / "notes.txt").write_text("mine\n")
    before = tree(tmp_path)
    with pytest.raises(UserInputError, match="notes.txt, which no dpaudit manifest lists"):
        run_stages([inject(160)], state=tmp_path / ".demo", run=run, echo=lambda _: None)
    assert tree(tmp_path) == before


@pytest.mark.parametrize("command", ["inject", "attack"])
def test_overwrite_replaces_only_what_a_manifest_lists(command, tmp_path, data_dir, torch_runs):
    out = tmp_path / "out"
    out.mkdir()
    if command == "attack":  # an earlier attack directory the user put a file into
        args = ["attack", "--model", torch_runs["edp-sgd"], "--data", data_dir, "--out", out, "--attacks", "loss"]
        first = invoke([*args[:5], "--out", tmp_path / "first", "--attacks", "loss"])
        assert first.exit_code == 0, first.output
        shutil.rmtree(out)
        shutil.copytree(tmp_path / "first", out)
        shutil.rmtree(tmp_path / "first")
    else:
        args = [
            "inject",
            "--corpus",
            _small_corpus(tmp_path / "c.txt"),
            "--out",
            out,
            "--frequencies",
            "1",
            "--per-frequency",
            "2",
        ]
        (out / "train.jsonl").write_text('{"text": "my own rows"}\n')  # a folder with no manifest at all
    (out / "mine.txt").write_text("keep me\n")
    before = tree(tmp_path)
    result = invoke([*args, "--overwrite"])
    assert_one_line_error(result, f"--out {out} holds", "which no dpaudit manifest lists", "move your files away")
    assert tree(tmp_path) == before


def test_overwrite_still_replaces_a_run_directory_dpaudit_wrote(tmp_path):
    corpus = _small_corpus(tmp_path / "c.txt")
    args = ["inject", "--corpus", corpus, "--out", tmp_path / "out", "--frequencies", "1", "--per-frequency", "2"]
    assert invoke(args).exit_code == 0
    result = invoke([*args, "--seed", "1", "--overwrite"])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["seed"] == 1
