"""Running the renderers (kubectl/kustomize, helm) as subprocesses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuaudit.safetext import one_line

if TYPE_CHECKING:
    import subprocess

TIMEOUT = 120  # seconds one render may take
MESSAGE_CHARS = 400  # of a tool's error, as an input error shows it


def run_tool(args: Sequence[str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run a renderer and capture its output; TimeoutError after ``timeout``
    s. subprocess is imported here: most `gpuaudit check` runs render
    nothing, and their start-up should not pay for it."""
    import subprocess

    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise TimeoutError(str(exc)) from None


def first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def error_message(stderr: str, limit: int = MESSAGE_CHARS) -> str:
    """What a tool said when it failed, as one line: from its first line that
    starts ``Error:`` (warnings before it left out; else from its first
    line), every line stripped and joined by one space, helm's ``Use --debug
    flag`` hint left out, terminal controls removed (``safetext.one_line``),
    cut to ``limit`` characters. Helm writes the cause on the lines after
    the first (``at <.Values.x>: nil pointer evaluating ...``); its first
    line alone often names only a template and a column."""
    lines = [line.strip() for line in stderr.splitlines()]
    lines = [line for line in lines if line and not line.startswith("Use --debug flag")]
    start = next((i for i, line in enumerate(lines) if line.startswith("Error:")), 0)
    text = one_line(" ".join(lines[start:]).removeprefix("Error:").strip())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
