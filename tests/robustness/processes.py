"""Running the installed `gpuaudit` against hostile files, so that a
regression fails instead of hanging the suite.

Every run has a timeout, and its stdin is a pipe whose writer stays open and
never writes: a command that read `/dev/stdin` (or a FIFO) would wait
forever, exactly as it would under a CI runner, and the timeout turns that
into a failure. An optional address-space limit shows that a file is refused
before it is read, not read and then found too big.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
GIB = 1024**3


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float

    def report(self) -> dict[str, Any]:
        """The JSON report on stdout."""
        return json.loads(self.stdout)


def gpuaudit(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    timeout: float = 60,
    memory: int | None = None,
) -> Run:
    """Run `gpuaudit ARGS` in ``cwd``; fails the test on a timeout or a traceback.
    ``memory``: an address-space limit in bytes."""
    exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
    read_end, write_end = os.pipe()  # the writer stays open: reading stdin would block

    def limit() -> None:
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    start = time.monotonic()
    try:
        proc = subprocess.run(
            [exe, *args],
            stdin=read_end,
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**os.environ, "NO_COLOR": "1", **(env or {})},
            timeout=timeout,
            preexec_fn=limit,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    seconds = time.monotonic() - start
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr
    return Run(proc.returncode, proc.stdout, proc.stderr, seconds)


def sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that takes no disk space (what `truncate -s` makes)."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def link(path: Path, target: str) -> Path:
    path.symlink_to(target)
    return path


def on_a_terminal(args: list[str], cwd: Path, *, stream: str, env: dict[str, str] | None = None) -> bytes:
    """What a command writes to ``stream`` ("stdout" or "stderr") when that
    stream is a terminal (a pty): click strips colour codes for pipes only,
    so a pipe would hide escape sequences."""
    import pty
    import select

    leader, follower = pty.openpty()
    streams = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, stream: follower}
    try:
        subprocess.run(
            [str(Path(sys.executable).with_name("gpuaudit")), *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            timeout=120,
            **streams,
        )
        os.close(follower)
        follower = -1
        chunks = []
        while select.select([leader], [], [], 1)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child side is closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)


# A site rule the hostile-config tests put in a policies folder.
SITE_RULE = """\
id: SITE-001
title: Site rule
category: application
severity: low
scope: [manifest]
target: container
violation:
  properties: {cpu_request: {type: number, maximum: 100}}
  required: [cpu_request]
message: "{{ container }} asks for {{ cpu_request }} CPU"
docs: Explains why this rule matters in at least twenty characters.
"""
