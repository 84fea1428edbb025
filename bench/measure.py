"""Run a command as a child process and measure it: wall time and peak RSS.

Peak RSS comes from ``os.wait4`` on that one child (``ru_maxrss``: the largest
resident set of the child or of any descendant it waited for, not their sum),
so two measurements never mix. Each command runs once unmeasured first (it
fills the page cache and Python's bytecode cache, as on a developer's machine
after the first commit), then ``repeat`` times; the median is reported.

Commands that are compared run interleaved (A B C, A B C, ...), so a burst of
load from elsewhere on the machine hits all of them alike.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    wall_s: float
    peak_rss_mib: float
    returncode: int


@dataclass(frozen=True)
class Measurement:
    runs: tuple[Run, ...]

    @property
    def wall_s(self) -> float:
        return statistics.median(r.wall_s for r in self.runs)

    @property
    def peak_rss_mib(self) -> float:
        return statistics.median(r.peak_rss_mib for r in self.runs)

    @property
    def returncode(self) -> int:
        return self.runs[-1].returncode


def run_once(
    command: Sequence[str],
    *,
    stdout: Path | None = None,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 900.0,
) -> Run:
    """One run; stdout goes to ``stdout`` (or nowhere), stderr to ``stdout``.err."""
    out = open(stdout, "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115 - closed below
    err = open(f"{stdout}.err", "wb") if stdout else subprocess.DEVNULL  # noqa: SIM115
    try:
        started = time.perf_counter()
        proc = subprocess.Popen(
            list(command), stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=env
        )
        deadline = started + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.002)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    finally:
        for handle in (out, err):
            if handle is not subprocess.DEVNULL:
                handle.close()
    return Run(wall, usage.ru_maxrss / 1024, proc.returncode)


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    stdout: Path | None = None
    timeout_s: float = 900.0


def measure_interleaved(
    commands: Mapping[str, Command],
    *,
    repeat: int = 5,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Measurement]:
    """Each command once unmeasured, then ``repeat`` rounds of all of them."""
    runs: dict[str, list[Run]] = {name: [] for name in commands}
    for round_ in range(max(1, repeat) + 1):
        for name, c in commands.items():
            run = run_once(c.argv, stdout=c.stdout, cwd=cwd, env=env, timeout_s=c.timeout_s)
            if round_:
                runs[name].append(run)
    return {name: Measurement(tuple(r)) for name, r in runs.items()}
