"""Progress bars that also show in a log file.

On a terminal a bar is tqdm's, redrawn in place and cleared when done. Off a terminal (a CI log, ``nohup``,
``2> file``) tqdm would print nothing by default; here it prints a plain line every :data:`LOG_INTERVAL_S` seconds,
and only for work that lasts longer than that, so short steps (and tests) print nothing while a long scoring pass
on a loaded machine still says where it is.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TypeVar

T = TypeVar("T")

#: Seconds between lines (and before the first) when stderr is not a terminal.
LOG_INTERVAL_S = 15.0


def _options() -> dict[str, Any]:
    tty = sys.stderr.isatty()
    return (
        {"leave": False}
        if tty
        else {"leave": True, "mininterval": LOG_INTERVAL_S, "delay": LOG_INTERVAL_S, "ascii": True}
    )


def progress_bar(
    iterable: Iterable[T], *, desc: str, unit: str, enabled: bool = True, total: int | None = None
) -> Iterable[T]:
    """``iterable`` wrapped in a bar on stderr (nothing when ``enabled`` is False)."""
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, unit=unit, total=total, file=sys.stderr, disable=not enabled, **_options())


def progress_counter(*, total: int | None, desc: str, unit: str, enabled: bool = True) -> Any:
    """A bar advanced by hand (``bar.update(k)``; a context manager), shown as :func:`progress_bar` shows its bars:
    for work that hands over its items in blocks (rows written a block at a time)."""
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not enabled, **_options())


#: Steps a training bar runs before it shows a rate and a time estimate: the first step compiles the step function
#: (75-109 s for the demo's DP step on 2 cores), so a rate from it reads hours for a run of minutes.
WARMUP_STEPS = 10


def warmup_format(what: str) -> str:
    """The bar's format while its first :data:`WARMUP_STEPS` run: steps and elapsed time, and what it is doing in place
    of a meaningless time estimate ("compiling the DP step")."""
    return (
        "{desc}: {n_fmt}/{total_fmt} [{elapsed}, " + what + "; a time estimate after " + str(WARMUP_STEPS) + " steps]"
    )


def end_warmup(bar: Any, steps_run: int) -> None:
    """Give ``bar`` (made with :func:`warmup_format`) its usual rate and time estimate once :data:`WARMUP_STEPS` steps
    ran in this process, timed from then on (the compile time left out of its rate; its elapsed time restarts)."""
    if steps_run == WARMUP_STEPS and getattr(bar, "bar_format", None) is not None:
        bar.bar_format = None
        if hasattr(bar, "start_t") and hasattr(bar, "_time"):
            bar.start_t, bar.last_print_n = bar._time(), bar.n
            bar.initial = bar.n
