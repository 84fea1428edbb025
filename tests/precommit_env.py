"""Running the real pre-commit framework from tests: its environment, and
whether it is installed at all."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

# pre-commit and gpuaudit are installed beside this interpreter; the venv
# need not be active (`.venv/bin/pytest` alone), so its folder goes first on PATH.
VENV_BIN = Path(sys.executable).parent


def precommit_env(home: Path) -> dict[str, str]:
    """The environment for ``pre-commit`` with its cache in ``home``; skips
    the test when pre-commit is not installed."""
    path = os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")])
    if shutil.which("pre-commit", path=path) is None:
        pytest.skip("pre-commit is not installed")
    return {**os.environ, "PATH": path, "PRE_COMMIT_HOME": str(home), "NO_COLOR": "1"}
