"""Running the renderers (kubectl/kustomize, helm) as subprocesses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

TIMEOUT = 120  # seconds one render may take


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
