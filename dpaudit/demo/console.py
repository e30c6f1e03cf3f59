"""The demo's compact terminal: each stage's full output in a log file, the terminal keeps what a newcomer reads.

``dpaudit demo`` runs eleven or more ``dpaudit`` commands; each prints its own caveats (the public-N paragraph, the
group-privacy bound, the noise-seed warning), so the same paragraphs came back once per stage. Without
``--verbose`` a stage's standard output goes to ``<out>/.demo/logs/<stage>.log`` (nothing is lost: the same text
``--verbose`` prints), and of its standard error the terminal keeps the progress bar (frames ending in a carriage
return) and each distinct warning the first time the command sees it, in full; a warning seen before is named on the
stage's closing line instead (:class:`Caveats`). The demo's own closing lines use the same :class:`Caveats`: each
caveat once per command, in full the first time, by its name after.
"""

from __future__ import annotations

import io
from typing import TextIO

__all__ = ["Caveats", "StageStderr", "warning_name"]

WARNING = "warning: "


def warning_name(text: str) -> str:
    """A warning's short name: its first clause ("--noise-seed is below 2^64 (at most 64 bits of entropy)")."""
    body = text.removeprefix(WARNING).strip()
    for sep in (": ", ". ", "; "):
        if sep in body:
            body = body.split(sep, 1)[0]
            break
    return body if len(body) <= 72 else body[:71].rstrip() + "…"


class Caveats:
    """Each caveat once per command: :meth:`say` gives its full text the first time, its name after."""

    def __init__(self) -> None:
        self._said: dict[str, int] = {}

    def seen(self, name: str) -> bool:
        return name in self._said

    def say(self, name: str, text: str) -> str | None:
        """``text`` the first time ``name`` is said, None after (the caller names it instead)."""
        self._said[name] = self._said.get(name, 0) + 1
        return text if self._said[name] == 1 else None


class StageStderr(io.TextIOBase):
    """A stage's standard error in the compact terminal: everything to ``log``; progress-bar frames to ``terminal``;
    a warning line to ``terminal`` the first time ``caveats`` meets it (its name is added to :attr:`repeated` after);
    any other line (notes, per-audit details) to the log only. ``warnings`` False: warnings to the log only too (an
    attack's are about its audits, which the demo's closing summary reads from the results instead)."""

    def __init__(self, log: TextIO, terminal: TextIO, caveats: Caveats, *, warnings: bool = True) -> None:
        super().__init__()
        self._log, self._terminal, self._caveats = log, terminal, caveats
        self._warnings = warnings
        self._pending = ""
        self.repeated: list[str] = []

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:  # a bar draws as it would on the terminal itself
        return bool(getattr(self._terminal, "isatty", lambda: False)())

    def write(self, text: str) -> int:
        self._log.write(text)
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            frames, _, last = line.rpartition("\r")
            if frames:  # a bar's frames, then a line after them
                self._terminal.write(frames + "\r")
            if last.startswith(WARNING) and self._warnings:
                name = warning_name(last)
                if self._caveats.say("warning " + name, last) is not None:
                    self._terminal.write(last + "\n")
                elif name not in self.repeated:
                    self.repeated.append(name)
        if "\r" in self._pending:  # bar frames are drawn now, not at the end of a line that never comes
            frames, _, self._pending = self._pending.rpartition("\r")
            self._terminal.write(frames + "\r")
        return len(text)

    def flush(self) -> None:
        self._log.flush()
        self._terminal.flush()

    def close_line(self) -> None:
        """What is left unterminated (the last frame of a bar): to the log only, and the terminal's line cleared."""
        if self._pending:
            self._pending = ""
            self._terminal.write("\r")
