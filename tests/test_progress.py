"""Progress bars also show off a terminal (a log file), but only for work that lasts."""

from __future__ import annotations

import io
import sys

from dpaudit.common import progress


class _Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_off_a_terminal_a_long_loop_prints_plain_lines_and_a_short_one_nothing(monkeypatch):
    clock = iter(range(0, 10_000, 10))  # each tick of tqdm's clock: 10 s later
    log = _Log()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.setattr("tqdm.std.time", lambda: next(clock))
    assert list(progress.progress_bar(range(3), desc="short", unit="row", enabled=False)) == [0, 1, 2]
    assert log.getvalue() == ""  # disabled: nothing
    list(progress.progress_bar(range(20), desc="scoring", unit="batch"))
    text = log.getvalue()
    assert "scoring" in text and "20/20" in text and "\x1b" not in text  # a plain, finished line in the log


def test_off_a_terminal_a_quick_loop_prints_nothing(monkeypatch):
    log = _Log()
    monkeypatch.setattr(sys, "stderr", log)
    list(progress.progress_bar(range(50), desc="scoring", unit="batch"))
    assert log.getvalue() == ""  # done before LOG_INTERVAL_S: tests and short steps stay quiet
