"""One status line on stderr for the long steps of a command (judging 50,000
pods, building the capacity review), shown on a terminal only: in CI, in a
pipe or in a CronJob's log, stderr is not a TTY and nothing is written."""

from __future__ import annotations

import sys
from typing import TextIO

_CLEAR_LINE = "\r\x1b[K"


class Status:
    def __init__(self, stream: TextIO | None = None) -> None:
        # Beneath the stream that cleans messages (output/terminal.py): the
        # status line's own control sequences must reach the terminal.
        stderr = getattr(sys.stderr, "raw", sys.stderr)
        self._stream = stream if stream is not None else stderr
        self._enabled = self._stream.isatty()
        self._shown = False

    def __call__(self, text: str) -> None:
        """Replace the status line with ``text``."""
        if self._enabled:
            self._stream.write(f"{_CLEAR_LINE}  {text}…")
            self._stream.flush()
            self._shown = True

    def clear(self) -> None:
        """Remove the status line, before the command prints its result."""
        if self._shown:
            self._stream.write(_CLEAR_LINE)
            self._stream.flush()
            self._shown = False
