"""stdout and stderr without the control sequences that input carries into
what gpuaudit prints.

Results, error and warning lines quote file names, object names, rule case
names and server messages; on a terminal (or a CI log that renders ANSI) an
escape sequence in one of them could clear the screen, retitle the window or
hide a line. Every renderer cleans the fields it places (gpuaudit/safetext.py);
this stream is the backstop for everything printed, and it only removes, so
text that is clean already passes unchanged. gpuaudit's own colours and status
line write to ``raw``, the stream underneath.
"""

from __future__ import annotations

from typing import Any, TextIO

from gpuaudit.safetext import clean


class CleanStream:
    def __init__(self, raw: TextIO) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        if not isinstance(text, str):  # a text stream, as click checks by writing b""
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.raw.write(clean(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)
