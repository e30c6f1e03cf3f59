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


def test_a_training_bar_says_it_compiles_until_a_few_steps_ran() -> None:
    """The first step compiles (minutes on a loaded CPU): no time estimate from it, "compiling the DP step" instead,
    then the usual rate and time estimate."""
    import io
    import time

    from tqdm import tqdm

    from dpaudit.common.progress import WARMUP_STEPS, end_warmup, warmup_format

    stream = io.StringIO()
    bar = tqdm(
        total=1000,
        desc="jax-bert",
        unit="step",
        file=stream,
        mininterval=0,
        bar_format=warmup_format("compiling the DP step"),
    )
    time.sleep(0.3)  # the compile
    for run in range(1, WARMUP_STEPS + 21):
        bar.update(1)
        end_warmup(bar, run)
        time.sleep(0.001)
    bar.refresh()
    frames = stream.getvalue().split("\r")
    warm = [f for f in frames if "compiling the DP step" in f]
    assert warm and all("<" not in f and "step/s" not in f for f in warm)  # no estimate, no rate while compiling
    last = frames[-1]
    assert "compiling" not in last and "step/s" in last and "<" in last  # then the rate and the time estimate
