"""Renders (kustomize, helm) kept between runs, keyed by what they read.

A unit's render depends on its files' content, the tool that renders it
and the flags it runs with; the key is a 256-bit BLAKE2b of those (each
file by its path relative to the unit and its bytes; the tool by its real
path, size and modification time). A pre-commit run over a tree of 150
kustomizations then renders only what a change touched.

Entries live in ``<cache folder>/renders/`` (``files.cache_dir``): one file
per key, written whole through a temporary file and a rename, so runs side
by side never see half an entry; one read that fails is a miss. What is
cached is the tool's output, which is read and judged like a fresh render.
``GPUAUDIT_NO_CACHE`` turns it off. Entries unused for ``_KEEP_DAYS`` are
removed when a new one is written.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from gpuaudit.files import FileReadError, blake2b, cache_dir, read_bytes, write_atomic

_KEEP_DAYS = 14
_MAX_ENTRY_BYTES = 64 * 1024 * 1024
_MAX_INPUT_BYTES = 16 * 1024 * 1024


def render_key(tool: Sequence[str], flags: Sequence[str], base: Path, files: Iterable[Path]) -> str | None:
    """The key of a render of ``files`` (read relative to ``base``) by
    ``tool`` with ``flags``; None when a file cannot be read (then the render
    runs and says what is wrong)."""
    digest = blake2b(digest_size=32)
    for part in tool:
        digest.update(part.encode() + b"\0")
        with contextlib.suppress(OSError):
            if os.path.isabs(part):
                status = os.stat(part)
                digest.update(f"{os.path.realpath(part)} {status.st_size} {status.st_mtime_ns}\0".encode())
    for flag in flags:
        digest.update(flag.encode() + b"\1")
    for file in sorted(set(files)):
        try:
            content = read_bytes(file, limit=_MAX_INPUT_BYTES)
        except FileReadError:
            return None
        digest.update(os.path.relpath(file, base).encode() + b"\2")
        digest.update(len(content).to_bytes(8, "little") + content)
    return digest.hexdigest()


def cached(key: str | None, render: Callable[[], str]) -> str:
    """``render()``'s output, from the cache when it holds ``key``. A render
    that raises is not cached."""
    folder = _folder()
    if folder is None or key is None:
        return render()
    entry = folder / key
    try:
        text = read_bytes(entry, limit=_MAX_ENTRY_BYTES).decode("utf-8")
    except (FileReadError, UnicodeDecodeError):
        pass
    else:
        with contextlib.suppress(OSError):
            os.utime(entry)  # used: kept by the pruning below
        return text
    text = render()
    with contextlib.suppress(OSError):
        write_atomic(entry, text)
        _prune(folder)
    return text


def _folder() -> Path | None:
    if os.environ.get("GPUAUDIT_NO_CACHE"):
        return None
    base = cache_dir()
    return base / "renders" if base is not None else None


def _prune(folder: Path) -> None:
    horizon = time.time() - _KEEP_DAYS * 86400
    for entry in os.scandir(folder):
        with contextlib.suppress(OSError):
            if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < horizon:
                os.unlink(entry.path)
