"""Writing output files: atomically, and never outside the directory given."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class UnsafePathError(ValueError):
    pass


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write via a temporary file in the same directory and rename it into
    place, so a crash never leaves half a file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def inside(directory: Path, relative: str) -> Path:
    """``directory/relative``, refusing anything that would land outside it
    (``../x``, absolute paths, symlinks pointing out)."""
    root = directory.resolve()
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise UnsafePathError(f"{relative!r} would be written outside {directory}")
    return target
