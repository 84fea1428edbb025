"""stderr without the control sequences that input carries into messages.

Error and warning lines quote file names, object names and server messages;
on a terminal (or a CI log that renders ANSI) an escape sequence in one of
them could clear the screen, retitle the window or hide a line. gpuaudit's
own status line writes to ``raw``, the stream underneath.
"""

from __future__ import annotations

from typing import Any, TextIO

from gpuaudit.output.text import clean


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
