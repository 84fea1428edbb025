"""Audit a large input on all cores, with the same result as auditing it in
one process.

Reading, modelling and judging each file is independent, except for one
thing: some facts need to know what the rest of the input holds (the
context: device-plugin configs, autoscalers, which GPU resources the
workloads request). So the work runs in two phases over contiguous shards
of the input. Forked workers take all shards but the first, this process
the first:

1. ``first(shard)`` reads and models the shard, giving a state that stays
   where it was made and a small *part* (the shard's context) that is sent
   to this process;
2. ``combine(parts)`` merges the parts, in shard order, into what every
   shard needs (the whole input's context), sent to each worker;
3. ``second(state, shared)`` judges the shard; its (small) result comes
   back. Results are returned in shard order.

Parts, the shared value and results travel as pickles over pipes, one frame
each way per phase. Only on Linux (fork is safe and cheap there), only from
a single-threaded process (forking threads can deadlock). A worker that
fails for any reason has its shard done here instead: failures cost time,
never results.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

First = Callable[[Sequence[Any]], tuple[Any, Any]]  # shard -> (state, part)
Combine = Callable[[list[Any]], Any]  # parts in shard order -> shared
Second = Callable[[Any, Any], Any]  # (state, shared) -> result

_LENGTH = 8  # bytes of a frame's length prefix


def workers_for(items: int, min_per_worker: int) -> int:
    """How many processes should share ``items`` items (1: do them here)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return 1
    if "threading" in sys.modules and sys.modules["threading"].active_count() > 1:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, items // min_per_worker))


def contiguous_shards(
    items: Sequence[Any], parts: int, weight: Callable[[Any], float] | None = None
) -> list[Sequence[Any]]:
    """``items`` cut into at most ``parts`` contiguous, non-empty shards of
    about equal total ``weight`` (the work an item costs; else 1 each)."""
    weights = [max(0.0, weight(item)) if weight else 1.0 for item in items]
    total = sum(weights) or 1.0
    shards: list[Sequence[Any]] = []
    start, done = 0, 0.0
    for i, w in enumerate(weights[:-1]):  # the last item always ends the last shard
        done += w
        if len(shards) < parts - 1 and done >= total * (len(shards) + 1) / parts:
            shards.append(items[start : i + 1])
            start = i + 1
    shards.append(items[start:])
    return shards


def run_sharded(
    items: Sequence[Any],
    processes: int,
    first: First,
    combine: Combine,
    second: Second,
    weight: Callable[[Any], float] | None = None,
) -> list[Any]:
    """``second``'s result for each of ``processes`` contiguous shards of
    ``items`` (of about equal ``weight``: contiguous_shards), in order (see
    the module's docstring)."""
    if processes < 2 or len(items) < 2:
        state, part = first(items)
        return [second(state, combine([part]))]
    shards = contiguous_shards(items, processes, weight)
    workers = [None, *(_Worker.start(shard, first, second) for shard in shards[1:])]
    states: dict[int, Any] = {}  # of the shards whose first phase ran here

    def here(i: int) -> Any:  # a shard's state, its first phase run here if need be
        if i not in states:
            states[i] = first(shards[i])[0]
        return states[i]

    def drop(i: int) -> None:
        workers[i].stop()  # type: ignore[union-attr]
        workers[i] = None

    try:
        states[0], part = first(shards[0])
        parts = [part]
        for i, worker in enumerate(workers[1:], 1):
            received, part = worker.receive() if worker else (False, None)
            if not received:
                if worker:
                    drop(i)
                states[i], part = first(shards[i])
            parts.append(part)
        shared = combine(parts)
        try:
            frame = _frame(shared)
        except Exception:  # it cannot be pickled: the workers' shards are done here
            frame = None
        for i, worker in enumerate(workers):
            if worker and (frame is None or not worker.send(frame)):
                drop(i)
        results = [second(states[0], shared)]
        for i, worker in enumerate(workers[1:], 1):
            received, result = worker.receive() if worker else (False, None)
            if not received:
                if worker:
                    drop(i)
                result = second(here(i), shared)
            results.append(result)
        return results
    finally:
        for worker in workers:
            if worker:
                worker.stop()


class _Worker:
    """A forked process doing one shard, and the two pipes to talk to it."""

    def __init__(self, pid: int, up: int, down: int) -> None:
        self.pid, self.up, self.down = pid, up, down

    @classmethod
    def start(cls, shard: Sequence[Any], first: First, second: Second) -> _Worker | None:
        """None when none can be started (process or file limits)."""
        pipes: list[int] = []
        try:
            pipes += os.pipe()  # up: worker -> this process
            pipes += os.pipe()  # down: this process -> worker
            pid = os.fork()
        except OSError:
            for fd in pipes:
                os.close(fd)
            return None
        up_read, up_write, down_read, down_write = pipes
        if pid:
            os.close(up_write)
            os.close(down_read)
            return cls(pid, up_read, down_write)
        # The worker: never returns, never runs the parent's exit handlers or
        # flushes its buffers (os._exit). When this process goes away, the
        # worker's read gets end-of-file and it exits.
        code = 1
        try:
            os.close(up_read)
            os.close(down_write)
            state, part = first(shard)
            _write(up_write, _frame(part))
            shared = _read_frame(down_read)
            _write(up_write, _frame(second(state, shared)))
            code = 0
        finally:
            os._exit(code)

    def receive(self) -> tuple[bool, Any]:
        """(True, the worker's next frame), or (False, None) when it failed."""
        try:
            return True, _read_frame(self.up)
        except (OSError, EOFError, _pickle().UnpicklingError):
            return False, None

    def send(self, frame: bytes) -> bool:
        try:
            _write(self.down, frame)
        except OSError:  # the worker is gone (EPIPE)
            return False
        return True

    def stop(self) -> None:
        """Close the pipes and reap the process (done, failed or stuck)."""
        if self.pid:
            for fd in (self.up, self.down):
                os.close(fd)
            try:
                os.kill(self.pid, 9)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0


def _pickle() -> Any:
    """pickle, imported when a worker is used (small inputs never need it)."""
    import pickle

    return pickle


def _frame(value: Any) -> bytes:
    pickle = _pickle()
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    return len(data).to_bytes(_LENGTH, "little") + data


def _write(fd: int, frame: bytes) -> None:
    view = memoryview(frame)
    while view:
        view = view[os.write(fd, view) :]


def _read_frame(fd: int) -> Any:
    length = int.from_bytes(_read_exactly(fd, _LENGTH), "little")
    return _pickle().loads(_read_exactly(fd, length))


def _read_exactly(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the worker closed its pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
