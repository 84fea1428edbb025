"""The type check of the fact types and their readers ([tool.mypy] in
pyproject.toml, the modules it lists): clean, and it catches a reader that
names a fact the types do not declare (a renamed fact)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

REPORT = ROOT / "gpuaudit" / "report"


def _mypy(tmp_path: Path, *files: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mypy is not installed (the test extra installs it)")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "cache"),
            *files,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT)},  # this tree's gpuaudit, whatever is installed
        timeout=120,
    )


def test_the_fact_types_and_their_readers_type_check(tmp_path):
    result = _mypy(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


@pytest.mark.parametrize(
    ("reader", "read", "renamed", "message"),
    [
        ("holders.py", "facts.pending.pending", "facts.pending.is_pending", '"Pending" has no attribute "is_pending"'),
        # the what-if reads a pod's telemetry as the Telemetry type (Holder.observed)
        ("whatif.py", "t.fb_used_max_mib", "t.fb_used_peak_mib", '"Telemetry" has no attribute "fb_used_peak_mib"'),
    ],
)
def test_a_renamed_fact_is_caught(tmp_path, reader, read, renamed, message):
    source = (REPORT / reader).read_text(encoding="utf-8")
    assert read in source, f"the reader this test edits no longer reads {read}"
    edited = tmp_path / reader
    edited.write_text(source.replace(read, renamed), encoding="utf-8")
    result = _mypy(tmp_path, str(edited))
    assert result.returncode == 1, result.stdout + result.stderr
    assert message in result.stdout, result.stdout
