"""Status lines on long commands: on a terminal's stderr only, never in a pipe
(CI, CronJob logs), and never mixed into the result on stdout."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
GPUAUDIT = str(Path(sys.executable).with_name("gpuaudit"))


def run(args: list[str], *, tty: bool, cwd: Path) -> tuple[int, str, str]:
    """Run gpuaudit with stderr on a pseudo-terminal (tty) or a pipe; stdout is a pipe."""
    if not tty:
        proc = subprocess.run([GPUAUDIT, *args], capture_output=True, text=True, cwd=cwd, timeout=300)
        return proc.returncode, proc.stdout, proc.stderr
    master, slave = pty.openpty()
    with subprocess.Popen([GPUAUDIT, *args], stdout=subprocess.PIPE, stderr=slave, cwd=cwd) as proc:
        os.close(slave)
        stdout = proc.stdout.read() if proc.stdout else b""
        terminal = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            terminal += chunk
        code = proc.wait(timeout=300)
    os.close(master)
    return code, stdout.decode(), terminal.decode(errors="replace")


@pytest.fixture
def demo() -> Path:
    if not DEMO.exists():
        pytest.skip("examples/demo-snapshot.json.gz is not present")
    return DEMO


def test_report_shows_its_steps_on_a_terminal_only(demo, tmp_path):
    args = ["report", "--snapshot", str(demo), "--no-record"]
    code, _, terminal = run([*args, "--out", "a"], tty=True, cwd=tmp_path)
    assert code == 0, terminal
    for step in ("judging", "building the capacity review", "writing the report"):
        assert step in terminal
    # the status line is cleared before the summary line is printed
    assert terminal.rstrip().splitlines()[-1].lstrip("\r\x1b[K").startswith("wrote ")

    code, _, piped = run([*args, "--out", "b"], tty=False, cwd=tmp_path)
    assert code == 0
    assert "judging" not in piped and "\x1b" not in piped
    assert piped.startswith("wrote ")


def test_audit_status_never_reaches_stdout(demo, tmp_path):
    args = ["audit", "--snapshot", str(demo), "--format", "json"]
    code, stdout, terminal = run(args, tty=True, cwd=tmp_path)
    assert code == 1
    assert "judging" in terminal and "pods" in terminal
    _, piped_stdout, piped_stderr = run(args, tty=False, cwd=tmp_path)
    assert stdout == piped_stdout  # the result is the same, byte for byte
    assert "judging" not in piped_stderr
