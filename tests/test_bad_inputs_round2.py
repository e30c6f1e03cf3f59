"""Bad inputs and faults of the second hardening round (Medium and Low items): each is a one-line error naming
the path or option, exit code 2, and nothing left behind (no output, no temporary file, no staging folder, no
lock, no folder made for the output).

Faults are injected in-process where a real one needs privileges: the tests run as root, and root ignores
permission bits (chmod 000 / 0555 stop nothing), so a read-only folder, an unreadable corpus (mode 000) and a
failing disk (EIO) are simulated by making the one system call raise the error the kernel would give. A
file-size limit is real: a child process sets ``RLIMIT_FSIZE`` (as ``ulimit -f``) before it runs dpaudit.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dpaudit.cli import cli
from dpaudit.claim import Claim

REPO_ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--corpus", "builtin:assistant", "--corpus-size", "60", "--frequencies", "1", "--per-frequency", "2"]


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def one_line_error(args: list[str], *needles: str, cwd: Path | None = None) -> str:
    """Run ``dpaudit ARGS`` in this process and return its one error line, checking exit code 2 and the needles."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, (result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _raise(code: int, filename: str | None = None):
    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), filename)
    return fail


# ------------------------------------------------------------------------------------------------
# An attack directory to report on: written by the product's own writer from minimal typed results
# (no model is trained), one canary.


def _results():
    from dpaudit.attacks.results import AttackResults, CanaryScore, DataInfo, ModelInfo

    return AttackResults(model=ModelInfo(path="m", kind="masked-lm", architecture="BertForMaskedLM"),
                         data=DataInfo(path="d", secret_format="digits:4", log2_space_size=13.3, canaries=1, controls=0,
                                       template="{name} has {secret}"),
                         claimed=Claim(known=False), attacks=(),
                         canaries=(CanaryScore(id="c0000", frequency=1, secret="1 2 3 4"),))


def _write_attack(out: Path) -> Path:
    from dpaudit.attacks.run import write_attack_dir

    return write_attack_dir(out, _results(), config={}, inputs={}, seed=0, overwrite=False, command=["dpaudit", "attack"])


@pytest.fixture(scope="module")
def attack_dir(tmp_path_factory) -> Path:
    return _write_attack(tmp_path_factory.mktemp("round2") / "attack")


# ------------------------------------------------------------------------------------------------
# Medium: disk full, file-size limit, read-only folder, --out under a file: one line, nothing left.


@pytest.mark.parametrize(("code", "reason"), [(errno.ENOSPC, "No space left on device"), (errno.EIO, "Input/output error")])
def test_report_write_failure_is_one_line_and_leaves_nothing(attack_dir, tmp_path, monkeypatch, code, reason):
    out = tmp_path / "pages" / "deep" / "page.html"
    monkeypatch.setattr(os, "fsync", _raise(code))  # the page's data never reaches the disk
    one_line_error(["report", str(attack_dir), "--out", str(out)], f"dpaudit report: cannot", f"{out}: {reason}")
    assert tree(tmp_path) == []  # no page, no temporary file, not even the folders made for it


@pytest.mark.parametrize(("code", "needles"), [
    (errno.EACCES, ["Permission denied", "fix its permissions"]),
    (errno.EROFS, ["Read-only file system", "choose a writable location"]),
])
def test_report_into_a_folder_it_may_not_write_is_one_line(attack_dir, tmp_path, monkeypatch, code, needles):
    """A read-only folder (EACCES) or file system (EROFS): creating the temporary file fails; the error names
    the page, not the temporary file."""
    import tempfile

    out = tmp_path / "page.html"
    monkeypatch.setattr(tempfile, "mkstemp", _raise(code, str(tmp_path / ".page.html.x1y2.tmp")))
    line = one_line_error(["report", str(attack_dir), "--out", str(out)], f"dpaudit report: cannot", str(out), *needles)
    assert ".tmp" not in line
    assert tree(tmp_path) == []


def test_report_out_under_a_file_is_refused_before_rendering(attack_dir, tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    out = tmp_path / "notes.txt" / "sub" / "page.html"
    one_line_error(["report", str(attack_dir), "--out", str(out)], f"--out {out}", f"{tmp_path / 'notes.txt'} is a file")
    assert tree(tmp_path) == ["notes.txt"]


def test_report_under_a_real_file_size_limit(attack_dir, tmp_path):
    """RLIMIT_FSIZE in a child process (SIGXFSZ ignored, as the shell's ulimit -f): the write gets EFBIG."""
    launcher = ("import resource, signal, sys, runpy; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
                "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); sys.argv = ['dpaudit', *sys.argv[1:]]; "
                "runpy.run_module('dpaudit', run_name='__main__')")
    out = tmp_path / "r" / "page.html"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, "-c", launcher, "report", str(attack_dir), "--out", str(out)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert len(lines) == 1 and f"cannot write {out}: File too large" in lines[0] and "ulimit -f" in lines[0], lines
    assert tree(tmp_path) == []


def test_attack_disk_full_leaves_no_directory_staging_or_lock(tmp_path, monkeypatch):
    """``dpaudit attack`` through its real lock, staged directory and writers; only the scoring is replaced
    (by the minimal results above), and the disk fills while scores/canaries.jsonl is written."""
    import dpaudit.attacks.run as run
    import dpaudit.rundir as rundir

    def fake_attack(model, data, attacks, *, out, overwrite, **_):
        write_attack_dir = run.write_attack_dir
        return write_attack_dir(out, _results(), config={}, inputs={}, seed=0, overwrite=overwrite, command=None)

    def full(record):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(run, "_attack", fake_attack)
    monkeypatch.setattr(rundir, "dumps_jsonl_line", full)
    out = tmp_path / "attack"
    one_line_error(["attack", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "d"), "--out", str(out)],
                   f"dpaudit attack: cannot write {out / 'scores' / 'canaries.jsonl'}: No space left on device",
                   "free disk space")
    assert tree(tmp_path) == []


def test_atomic_write_removes_its_temporary_file_and_new_folders(tmp_path, monkeypatch):
    from dpaudit.rundir import atomic_write_text

    monkeypatch.setattr(os, "fsync", _raise(errno.EFBIG))
    with pytest.raises(OSError) as info:
        atomic_write_text(tmp_path / "a" / "b" / "x.json", "{}")
    assert info.value.errno == errno.EFBIG and info.value.filename == str(tmp_path / "a" / "b" / "x.json")
    assert tree(tmp_path) == []


def test_demo_report_under_a_file_is_refused_before_any_stage(tmp_path, monkeypatch):
    pytest.importorskip("jax")
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    one_line_error(["demo", "--quick", "--out", "runs", "--report", "notes.txt/index.html"],
                   "--report notes.txt/index.html", "is a file, not a folder")
    assert tree(tmp_path) == ["notes.txt"]


def test_demo_into_a_read_only_folder_is_one_line(tmp_path, monkeypatch):
    """As root a chmod 0555 folder stops nothing: the demo's first write (its .demo state folder) is made to
    fail as it would for a user: EACCES."""
    pytest.importorskip("jax")
    pytest.importorskip("transformers")
    monkeypatch.chdir(tmp_path)
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(path).startswith(str(tmp_path / "ro")):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    one_line_error(["demo", "--quick", "--out", str(tmp_path / "ro" / "demo")], "dpaudit demo: cannot access",
                   str(tmp_path / "ro"), "Permission denied")
    assert tree(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# Medium: report on a results.json with wrong types, the manifest re-hashed to match.


@pytest.mark.parametrize(("field", "value", "needle"), [
    (("model",), 5, "field model must be an object, got 5"),
    (("data", "canaries"), "ten", 'field data.canaries must be an integer, got "ten"'),
    (("claimed_privacy", "private"), "no", "field claimed_privacy.private must be true or false"),
    (("attacks",), {"a": 1}, "field attacks must be a list"),
    (("warnings",), [3], "field warnings[0] must be a string, got 3"),
])
def test_report_on_results_with_wrong_types_names_the_field(attack_dir, tmp_path, field, value, needle):
    import shutil

    copy = Path(shutil.copytree(attack_dir, tmp_path / "copy"))
    results = json.loads((copy / "results.json").read_text())
    target = results
    for key in field[:-1]:
        target = target[key]
    target[field[-1]] = value
    (copy / "results.json").write_text(json.dumps(results))
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["outputs"]["results.json"] = hashlib.sha256((copy / "results.json").read_bytes()).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "page.html"
    one_line_error(["report", str(copy), "--out", str(out)], f"{copy / 'results.json'}: {needle}", "rerun dpaudit attack")
    assert not out.exists()


# ------------------------------------------------------------------------------------------------
# Medium: unreadable corpus (mode 000, simulated: root reads anything) and a read that fails (EIO).


def _corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"line {i} of a corpus\n" for i in range(60)), encoding="utf-8")
    return path


def test_unreadable_corpus_is_one_line(tmp_path, monkeypatch):
    import dpaudit.corpus.readers as readers

    corpus = _corpus(tmp_path)
    monkeypatch.setattr(readers, "open", _raise(errno.EACCES, str(corpus)), raising=False)
    out = tmp_path / "out"
    one_line_error(["inject", "--corpus", str(corpus), "--out", str(out), "--frequencies", "1", "--per-frequency", "1"],
                   f"--corpus {corpus}: cannot read it (Permission denied)", "chmod u+r")
    assert tree(tmp_path) == ["corpus.txt"]


def test_corpus_whose_read_fails_is_one_line_naming_the_line(tmp_path, monkeypatch):
    import io

    import dpaudit.corpus.readers as readers

    corpus = _corpus(tmp_path)

    class FailingDisk(io.BytesIO):
        def readline(self, *args):
            if self.tell() > 40:  # three 19-byte lines read
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            return super().readline(*args)

    monkeypatch.setattr(readers, "open", lambda path, mode="r": FailingDisk(Path(path).read_bytes()), raising=False)
    out = tmp_path / "out"
    one_line_error(["inject", "--corpus", str(corpus), "--out", str(out), "--frequencies", "1", "--per-frequency", "1"],
                   f"--corpus {corpus} (after line 3): cannot read it (Input/output error)", "healthy disk")
    assert tree(tmp_path) == ["corpus.txt"]


# ------------------------------------------------------------------------------------------------
# Medium: numbers. Low: --frequencies ''.

NUMBER_CASES = [
    ("unicode superscript", ["inject", *SMALL, "--frequencies", "\u00b2"],
     ["--frequencies '\u00b2'", "not a positive integer in the digits 0-9"]),
    ("arabic-indic digit", ["inject", *SMALL, "--frequencies", "\u0661"], ["--frequencies", "digits 0-9"]),
    ("empty frequencies", ["inject", *SMALL, "--frequencies", ""], ["--frequencies is empty"]),
    ("empty item", ["inject", *SMALL, "--frequencies", "1,,2"], ["--frequencies '1,,2'", "an empty item"]),
    ("frequency 1e9", ["inject", *SMALL, "--frequencies", "1000000000", "--force"],
     ["--frequencies '1000000000'", "1,000,000,000 is above the limit of 1,000,000"]),
    ("total insertions", ["inject", *SMALL, "--frequencies", "1000000", "--per-frequency", "101", "--force"],
     ["101,000,000 canary rows", "limit of 100,000,000"]),
    ("format digits superscript", ["inject", *SMALL, "--format", "digits:\u00b2"], ["--format", "an integer from 1 to 64"]),
    ("heldout nan", ["inject", *SMALL, "--heldout-fraction", "nan"],
     ["--heldout-fraction must be a finite number, got nan", "not a number", "[0, 1)"]),
    ("public inf", ["inject", *SMALL, "--public-fraction", "inf"], ["--public-fraction", "got inf", "infinite"]),
    ("attack fpr nan", ["attack", "--model", "m", "--data", "d", "--out", "o", "--fpr", "nan"],
     ["--fpr must be a finite number, got nan", "not a number"]),
    ("account sigma 1e-9", ["account", "-N", "1000", "-B", "10", "-S", "10", "--noise-multiplier", "1e-9"],
     ["noise multiplier 1e-09 is too small for it", "use the RDP accountant"]),
    ("account N 1e30", ["account", "-N", "1" + "0" * 30, "-B", "10", "-S", "10", "--noise-multiplier", "1"],
     ["--dataset-size/-N", "above the limit of 1,000,000,000,000"]),
    ("account microbatch > batch", ["account", "-N", "1000", "-B", "10", "-S", "10", "--noise-multiplier", "1",
                                    "--microbatch-size", "32"],
     ["--microbatch-size 32 is larger than the (expected) batch size 10"]),
    ("account microbatch > q N", ["account", "-N", "1000", "-q", "0.01", "-S", "10", "--noise-multiplier", "1",
                                  "--microbatch-size", "32"], ["--microbatch-size 32"]),
]


@pytest.mark.parametrize(("args", "needles"), [c[1:] for c in NUMBER_CASES], ids=[c[0] for c in NUMBER_CASES])
def test_bad_number_is_one_line_and_writes_nothing(tmp_path, monkeypatch, args, needles):
    monkeypatch.chdir(tmp_path)
    one_line_error([*args, "--out", "out"] if args[0] == "inject" else args, *needles)
    assert tree(tmp_path) == []


def test_account_tiny_sigma_is_accounted_by_rdp():
    result = CliRunner().invoke(cli, ["account", "-N", "1000", "-B", "10", "-S", "10", "--noise-multiplier", "1e-9",
                                      "--accountant", "rdp", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["epsilon"]["rdp"] > 1e15  # no noise to speak of: enormous, not an error


def test_train_with_a_noise_multiplier_too_small_to_account_is_one_line(data_dir, tmp_path):
    """dp_accounting's PLD overflowed (OverflowError) for sigma 1e-9 before the grid-size check could refuse it."""
    out = tmp_path / "model"
    one_line_error(["train", "--trainer", "jax-bert", "--data", str(data_dir), "--out", str(out), "--noise-multiplier",
                    "1e-9", "--steps", "2", "--batch-size", "16", "--max-length", "16", "--vocab-size", "128",
                    "--physical-batch", "8"], "noise multiplier 1e-09 is too small for it")
    assert tree(tmp_path) == []


def test_jax_bert_max_length_above_the_position_table_is_refused(data_dir, tmp_path):
    out = tmp_path / "model"
    one_line_error(["train", "--trainer", "jax-bert", "--data", str(data_dir), "--out", str(out), "--noise-multiplier", "1",
                    "--max-length", "100000"], "--max-length must be <= 512", "position table", "got 100000")
    assert tree(tmp_path) == []


# ------------------------------------------------------------------------------------------------
# Low: templates. Unknown placeholders, stray braces, format-string escapes and no context are refused;
# a context shared by every canary is warned about (and kept in the manifest).

TEMPLATE_CASES = [
    ("unknown placeholder", "{nmae}'s account number is {secret}", ["unknown placeholder {nmae}"]),
    ("stray brace", "{name's account number is {secret}", ["a stray brace"]),
    ("closing brace", "{name}'s pin} is {secret}", ["a stray brace"]),
    ("format escape", "{name} has {{secret}}", ["doubled braces"]),
    ("secret alone", "{secret}", ["gives digits:N canaries no context"]),
]


@pytest.mark.parametrize(("template", "needles"), [c[1:] for c in TEMPLATE_CASES], ids=[c[0] for c in TEMPLATE_CASES])
def test_bad_template_is_one_line_and_writes_nothing(tmp_path, template, needles):
    out = tmp_path / "out"
    one_line_error(["inject", *SMALL, "--out", str(out), "--template", template], f"--template {template!r}", *needles)
    assert tree(tmp_path) == []


def test_shared_context_template_is_warned_and_recorded(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["inject", *SMALL, "--out", str(out), "--template", "my pin is {secret}"])
    assert result.exit_code == 0, result.output
    assert "warning: --template 'my pin is {secret}' has no {name}: all 4 canaries share the context" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert "mixture of their secrets" in manifest["warnings"][0]


def test_literal_braces_and_phrase_template_are_kept():
    from dpaudit.canaries.generate import check_context, parse_template

    assert parse_template("pin {secret} {not a field}") == ("pin ", " {not a field}")
    check_context("{secret}", kind="phrases")  # a phrase keeps its own sentence around it


# ------------------------------------------------------------------------------------------------
# Low: canaries whose secret training cut off (max_length): the warning says what their numbers mean.


def test_truncation_warning_counts_cut_secrets_and_says_what_their_numbers_mean():
    from dpaudit.attacks.run import truncation_warning
    from dpaudit.inject_run import Canary

    def tokenizer(texts):  # one token per word, plus [CLS] and [SEP], as the trainers encode rows
        return {"input_ids": [[0] * (len(t.split()) + 2) for t in texts]}

    def canary(i, prefix, secret, suffix, frequency):
        return Canary(id=f"c{i}", prefix=prefix, secret=secret, suffix=suffix,
                      frequency=frequency, member=frequency > 0, format="digits:4")

    canaries = [canary(0, "a b ", "1 2 3 4", " and a long suffix after it", 5),  # only the suffix is cut: fine
                canary(1, "a b c d ", "1 2 3 4", "", 10),                       # secret ends at token 10 > 8
                canary(2, "a ", "1 2 3 4", "", 0)]
    manifest = {"config": {"max_length": 8}}
    warning = truncation_warning(tokenizer, canaries, manifest)
    assert warning.startswith("1 of 3 canaries (inserted 10 times, e.g. c1) end their secret beyond the max_length 8")
    assert "read like never-inserted controls" in warning and "not evidence of privacy" in warning
    assert "--max-length 10" in warning
    assert truncation_warning(tokenizer, canaries[:1], manifest) is None
