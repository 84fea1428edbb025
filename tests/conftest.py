from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Fixtures shared across modules: the stand-in API server and the real Prometheus.
pytest_plugins = ["tests.apiserver", "tests.conftest_telemetry", "tests.http_capture"]

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


@pytest.fixture
def run_cli(tmp_path):
    """Run the installed `gpuaudit` as a user would: a real process."""

    def run(*args: str, stdin: str | None = None, cwd: Path | None = None, env: dict | None = None):
        exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
        return subprocess.run(
            [exe, *args],
            input=stdin,
            capture_output=True,
            text=True,
            cwd=cwd or tmp_path,
            env={**os.environ, **(env or {})},
            timeout=120,
        )

    return run


def shared_or_skip(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not present")
    return path
