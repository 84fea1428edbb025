"""Run a command as a child process and measure it: wall time and peak RSS.

Peak RSS is the measured process's own ``ru_maxrss`` from ``wait4`` (the
largest resident set of it or of any descendant it waited for, not their
sum). On Linux a process starts out with the peak of the one that forked it,
and subprocess' vfork+exec hands it the benchmark runner's peak, which grows
as it generates inputs. So each run goes through a small launcher
(``python bench/measure.py STATS TIMEOUT -- ARGV``, a fresh small process)
that forks the command, times it from fork to exit and writes ``wall_s
maxrss_kib exit`` to STATS: the numbers are the command's alone. A command
that outlives TIMEOUT seconds is killed (exit -9).

Each command runs once unmeasured first (it fills the page cache and Python's
bytecode cache, as on a developer's machine after the first commit), then
``repeat`` times; the median is reported. Commands that are compared run
interleaved (A B C, A B C, ...), so a burst of load from elsewhere on the
machine hits all of them alike.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    wall_s: float
    peak_rss_mib: float
    returncode: int
    cpu_s: float = 0.0  # user + system, with the descendants it waited for


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
    def cpu_s(self) -> float:
        """CPU time: other work on a shared machine stretches it far less than wall time."""
        return statistics.median(r.cpu_s for r in self.runs)

    @property
    def returncode(self) -> int:
        return self.runs[-1].returncode


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    stdout: Path | None = None  # stderr goes to the same name + ".err"
    timeout_s: float = 900.0


def run_once(command: Command, *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> Run:
    out = open(command.stdout, "wb") if command.stdout else subprocess.DEVNULL  # noqa: SIM115
    err = open(f"{command.stdout}.err", "wb") if command.stdout else subprocess.DEVNULL  # noqa: SIM115
    fd, stats = tempfile.mkstemp(prefix="bench-stats-")
    os.close(fd)
    try:
        launcher = [sys.executable, __file__, stats, str(command.timeout_s), "--", *command.argv]
        subprocess.run(
            launcher, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
            check=False,
        )  # fmt: skip
        wall, rss_kib, code, *cpu = Path(stats).read_text().split()
    finally:
        os.unlink(stats)
        for handle in (out, err):
            if handle is not subprocess.DEVNULL:
                handle.close()
    return Run(float(wall), int(rss_kib) / 1024, int(code), float(cpu[0]) if cpu else 0.0)


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
        for name, command in commands.items():
            run = run_once(command, cwd=cwd, env=env)
            if round_:
                runs[name].append(run)
    return {name: Measurement(tuple(r)) for name, r in runs.items()}


def _launch(stats: str, timeout_s: float, argv: list[str]) -> int:
    """The launcher: fork, exec ``argv``, wait; write its numbers to ``stats``."""
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    signal.signal(signal.SIGALRM, lambda *_: os.kill(pid, signal.SIGKILL))
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    _, status, usage = os.wait4(pid, 0)  # retried after the alarm's kill (PEP 475)
    signal.setitimer(signal.ITIMER_REAL, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    Path(stats).write_text(f"{wall:.6f} {usage.ru_maxrss} {code} {cpu:.6f}\n")
    return 0


if __name__ == "__main__":
    sys.exit(_launch(sys.argv[1], float(sys.argv[2]), sys.argv[4:]))
