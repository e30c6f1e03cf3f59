"""Run directories: atomic staging, manifests and hash verification."""

from __future__ import annotations

import json
import os

import pytest

from dpaudit.common.errors import UserInputError
from dpaudit.files.run_dirs import (
    build_manifest,
    file_hashes,
    read_jsonl,
    staged_directory,
    verify_run_dir,
    write_jsonl,
    write_manifest,
)


def _make_run(out, *, overwrite=False):
    with staged_directory(out, overwrite=overwrite) as stage:
        write_jsonl(stage / "a.jsonl", [{"text": "hello"}, {"text": "wörld"}])
        write_manifest(
            stage,
            build_manifest(
                schema="dpaudit.test/1",
                config={"k": 1},
                seed=3,
                inputs={},
                outputs=file_hashes(stage, ["a.jsonl"]),
                command=["x"],
            ),
        )
    return out


def test_staged_directory_appears_only_when_complete(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        with staged_directory(out, overwrite=False) as stage:
            (stage / "partial.txt").write_text("half")
            raise RuntimeError("boom")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []  # no staging leftovers either


def test_manifest_round_trip_and_tamper_detection(tmp_path):
    out = _make_run(tmp_path / "run")
    manifest = verify_run_dir(out, schema_prefix="dpaudit.test/")
    assert manifest["seed"] == 3 and manifest["config"] == {"k": 1}
    assert [r["text"] for r in read_jsonl(out / "a.jsonl")] == ["hello", "wörld"]
    with pytest.raises(UserInputError, match="expected dpaudit.inject/"):
        verify_run_dir(out, schema_prefix="dpaudit.inject/")
    (out / "a.jsonl").write_text('{"text": "edited"}\n')
    with pytest.raises(UserInputError, match="changed after it was written"):
        verify_run_dir(out)


def test_refuses_nonempty_or_file_outputs(tmp_path):
    out = _make_run(tmp_path / "run")
    with pytest.raises(UserInputError, match="--overwrite"):
        _make_run(out)
    _make_run(out, overwrite=True)
    assert json.loads((out / "manifest.json").read_text())["schema"] == "dpaudit.test/1"
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(UserInputError, match="is a file"):
        _make_run(afile)


def test_bad_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"text": "ok"}\n{not json}\n')
    with pytest.raises(UserInputError, match=r"x.jsonl:2"):
        list(read_jsonl(path))


def test_outputs_get_umask_modes_not_private_temp_modes(tmp_path):
    import os
    import stat

    mask = os.umask(0o022)
    os.umask(mask)
    out = _make_run(tmp_path / "run")
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((out / "manifest.json").stat().st_mode) == 0o666 & ~mask


def test_run_dir_lock_nests_cleans_up_and_removes_stale_staging(tmp_path):
    from dpaudit.files.run_dirs import lock_path, run_dir_lock

    out = tmp_path / "new" / "deeper" / "run"
    with run_dir_lock(out, stage="test") as path:
        assert path == lock_path(out) == tmp_path / "new" / "deeper" / ".run.lock"
        pid, host, stage = path.read_text().split()
        assert int(pid) == os.getpid() and stage == "test"
        with run_dir_lock(out, stage="test"):  # the same process may re-enter (nested stages)
            assert path.exists()
        assert path.exists()
    assert not (tmp_path / "new").exists()  # lock file and the folders the lock created are gone

    stale = [tmp_path / ".run.staging-abc123", tmp_path / ".run.old-xyz"]
    other = tmp_path / ".runner.staging-abc123"  # another target's staging: not ours to remove
    for folder in (*stale, other):
        folder.mkdir()
        (folder / "train.jsonl").write_text("{}\n")
    _make_run(tmp_path / "run")  # unlocked helper: the leftovers stay
    assert all(folder.exists() for folder in stale)
    with run_dir_lock(tmp_path / "run", stage="test"):
        assert not any(folder.exists() for folder in stale) and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".runner.staging-abc123", "run"]


def test_current_directory_is_refused_as_an_output(tmp_path, monkeypatch):
    (tmp_path / "keep.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    for out in (".", tmp_path, tmp_path.parent):
        with pytest.raises(UserInputError, match="is the current directory"):
            _make_run(out, overwrite=True)
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_a_stale_lock_is_removed_and_a_held_one_is_not(tmp_path):
    """A lock file no process holds (a worker killed mid-run) is removed; one a live holder has locked stays."""
    import fcntl
    import os

    from dpaudit.files.run_dirs import lock_path, remove_stale_lock, run_dir_lock

    out = tmp_path / "run"
    stale = lock_path(out)
    stale.write_text("12345 elsewhere train\n")  # left behind: nobody holds it
    assert remove_stale_lock(out) and not stale.exists()
    assert not remove_stale_lock(out)  # nothing to remove
    with run_dir_lock(out, stage="train"):  # held by this process's own lock: never removed under it
        assert not remove_stale_lock(out) and stale.exists()
    assert not stale.exists()
    stale.write_text("")
    fd = os.open(stale, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another holder (its own open file description)
        assert not remove_stale_lock(out) and stale.exists()
    finally:
        os.close(fd)
    assert remove_stale_lock(out) and not stale.exists()
