"""A folder replaced whole: what `gpuaudit fix` needs to swap an overlay in,
so that an interruption leaves the old folder or the new one, never a mix.

The new folder is written beside its target (``new_folder_beside``: the same
file system, so a rename moves it), what the old one held that is not
replaced is carried over (``carry``), and the two are exchanged
(``exchange``: one atomic ``renameat2`` where Linux offers it, else two
renames with the stop signals held, ``signals_held``). While the new folder
is written, SIGTERM and SIGHUP raise in the writer (``stopped_cleanly``), so
that it removes what it made before the process ends by that signal.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from gpuaudit.files import WriteError


def undo(created: Sequence[Path]) -> None:
    for path in reversed(created):
        try:
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        except OSError:
            pass  # a folder someone else wrote into meanwhile stays


# Signals that end a run: while a folder is written they raise _Stopped,
# so that the half-written new folder is removed before the process ends
# by the same signal; during the swap itself they wait.
_STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")


class _Stopped(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def stopped_cleanly() -> Iterator[None]:
    """SIGTERM and SIGHUP (where their default would kill the process at
    once) raise _Stopped in the block; the block cleans up and, once it is
    left, the process ends by that signal as it would have."""
    import signal
    import threading

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():

        def stop(signum: int, _frame: Any) -> None:
            raise _Stopped(signum)

        for name in ("SIGTERM", "SIGHUP"):
            number = getattr(signal, name, None)
            if number is not None and signal.getsignal(number) is signal.SIG_DFL:
                previous[number] = signal.signal(number, stop)
    try:
        yield
    except _Stopped as stopped:
        for number, handler in previous.items():
            signal.signal(number, handler)
        previous.clear()
        os.kill(os.getpid(), stopped.signum)
        raise SystemExit(128 + stopped.signum) from None  # if the signal did not end it
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """The stop signals wait until the block is done (a swap is two renames)."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {getattr(signal, n) for n in _STOP_SIGNALS if hasattr(signal, n)}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def new_folder_beside(target: Path) -> Path:
    """An empty folder next to ``target`` (same file system: a rename
    swaps them), with the mode ``target`` has (or a new folder's)."""
    import secrets
    import stat

    for _ in range(100):
        folder = target.parent / f".{target.name}.gpuaudit-{secrets.token_hex(4)}"
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise WriteError(exc.errno, f"cannot make a folder beside it: {exc.strerror or exc}", str(target)) from exc
        with contextlib.suppress(OSError):
            os.chmod(folder, stat.S_IMODE(os.stat(target).st_mode))
        return folder
    raise WriteError(errno.EEXIST, "cannot make a folder beside it", str(target))


def carry(old: Path, new: Path, replaced: set[Path], own_folders: tuple[str, ...] = ()) -> None:
    """Everything in ``old`` that is not ``replaced``, into ``new`` (an empty
    folder too, unless it lies in ``own_folders``, the replaced content's):
    hard links (a copy where a link cannot be made), symlinks as symlinks.
    What the new overlay wrote wins; a folder is made only for what it holds
    (and for a folder that was empty)."""
    import stat

    for root, folders, files in os.walk(old):
        here = Path(root)
        rel = here.relative_to(old)
        there = new / rel
        if there.exists() and not there.is_dir():
            folders[:] = []
            continue  # the new overlay has a file where this folder was
        if not folders and not files and not there.exists() and not str(rel).startswith(own_folders):
            there.mkdir(parents=True)  # an empty folder of the user's
        for name in files + [f for f in folders if (here / f).is_symlink()]:
            source = here / name
            if source in replaced:
                continue
            destination = there / name
            if destination.exists() or destination.is_symlink():
                continue
            if not there.is_dir():
                _make_like(old, new, rel)
            try:
                os.link(source, destination, follow_symlinks=False)
            except OSError:
                shutil.copy2(source, destination, follow_symlinks=False)
        folders[:] = [f for f in folders if not (here / f).is_symlink()]
        if there.is_dir():
            with contextlib.suppress(OSError):
                os.chmod(there, stat.S_IMODE(os.stat(here).st_mode))


def _make_like(old: Path, new: Path, rel: Path) -> None:
    """``new/rel`` and the folders above it, each with its ``old`` twin's mode."""
    import stat

    missing = []
    folder = rel
    while folder != Path(".") and not (new / folder).is_dir():
        missing.append(folder)
        folder = folder.parent
    for part in reversed(missing):
        (new / part).mkdir()
        with contextlib.suppress(OSError):
            os.chmod(new / part, stat.S_IMODE(os.stat(old / part).st_mode))


def exchange(new: Path, target: Path) -> Path | None:
    """Put ``new`` where ``target`` is; the old folder's new path (to remove),
    or None when there was none. One atomic exchange where the kernel offers
    it (Linux renameat2), else two renames (with the stop signals held)."""
    if not target.exists():
        os.rename(new, target)
        return None
    if _rename_exchange(new, target):
        return new
    aside = new_folder_beside(target)
    os.rename(target, aside / "old")
    try:
        os.rename(new, target)
    except BaseException:
        os.rename(aside / "old", target)
        shutil.rmtree(aside, ignore_errors=True)
        raise
    return aside


def _rename_exchange(a: Path, b: Path) -> bool:
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    call.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    at_fdcwd, rename_exchange = -100, 2
    return call(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0
