"""Read many manifest files on all cores, with the same result as reading
them one by one.

Parsing YAML is most of what `gpuaudit check` does on a large repository, and
each file parses on its own. So the file list is cut into contiguous slices;
forked workers read all but the first while this process reads the first,
and each worker sends back what it read (plain dicts, lists and strings, the
same objects read_file builds) with ``marshal``, which is several times
quicker than pickle for such data. Results are appended in slice order, so
documents and errors come out in exactly the serial order.

Only on Linux (fork is safe and cheap there), only from a single-threaded
process (forking threads can deadlock), and only for enough files to repay a
worker. A worker that fails for any reason has its slice read here instead.
"""

from __future__ import annotations

import marshal
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from gpuaudit.model import Document, InputError

Reader = Callable[[Path, Any], None]  # read_file(path, result)


def workers_for(files: int, min_per_worker: int) -> int:
    """How many processes should read ``files`` files (1: read them here)."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return 1
    if "threading" in sys.modules and sys.modules["threading"].active_count() > 1:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, files // min_per_worker))


def read_in_parallel(
    files: Sequence[Path],
    result: Any,
    read_file: Reader,
    new_result: Callable[[], Any],
    min_per_worker: int,
) -> bool:
    """Read ``files`` into ``result`` across processes, at least
    ``min_per_worker`` files each; False when one process should do it (the
    caller then reads them itself)."""
    count = workers_for(len(files), min_per_worker)
    if count < 2:
        return False
    size = -(-len(files) // count)
    slices = [files[i : i + size] for i in range(0, len(files), size)]
    children = [_spawn(part, read_file, new_result) for part in slices[1:]]
    for path in slices[0]:
        read_file(path, result)
    for part, child in zip(slices[1:], children, strict=True):
        data = _collect(child)
        if data is None:  # no worker, or it failed: read its slice here
            for path in part:
                read_file(path, result)
            continue
        _unpack(marshal.loads(data), result)
    return True


def _collect(child: tuple[int, int] | None) -> bytes | None:
    """What a worker sent, once it exited cleanly; None otherwise."""
    if child is None:
        return None
    pid, pipe = child
    with os.fdopen(pipe, "rb") as reader:
        data = reader.read()
    _, status = os.waitpid(pid, 0)
    return data if os.waitstatus_to_exitcode(status) == 0 and data else None


def _spawn(
    part: Sequence[Path], read_file: Reader, new_result: Callable[[], Any]
) -> tuple[int, int] | None:
    """A worker reading ``part``: (pid, read end of its pipe), or None when
    none can be started (process or file limits)."""
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    if pid:
        os.close(write_end)
        return pid, read_end
    # The worker: never returns, never runs the parent's exit handlers or
    # flushes its buffers (os._exit).
    code = 1
    try:
        os.close(read_end)
        mine = new_result()
        for path in part:
            read_file(path, mine)
        data = marshal.dumps(_pack(mine))
        with os.fdopen(write_end, "wb") as writer:
            writer.write(data)
        code = 0
    finally:
        os._exit(code)


# What a worker's ReadResult holds, field by field: counts are added, lists
# (of these dataclasses) extended. A field of any other shape makes the worker
# fail, and its slice is read here: new fields are never silently dropped.
_ITEM_TYPES = {cls.__name__: cls for cls in (Document, InputError)}


def _pack(result: Any) -> dict[str, Any]:
    packed: dict[str, Any] = {}
    for f in fields(result):
        value = getattr(result, f.name)
        if isinstance(value, int):
            packed[f.name] = value
        elif isinstance(value, list):
            packed[f.name] = [_pack_item(item) for item in value]
        else:
            raise TypeError(f"cannot send ReadResult.{f.name} between processes")
    return packed


def _pack_item(item: Any) -> tuple[str, dict[str, Any]]:
    name = type(item).__name__
    if _ITEM_TYPES.get(name) is not type(item):
        raise TypeError(f"cannot send a {name} between processes")
    return name, {f.name: getattr(item, f.name) for f in fields(item)}


def _unpack(packed: dict[str, Any], result: Any) -> None:
    for name, value in packed.items():
        if isinstance(value, int):
            setattr(result, name, getattr(result, name) + value)
        else:
            getattr(result, name).extend(_ITEM_TYPES[kind](**attrs) for kind, attrs in value)
