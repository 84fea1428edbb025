"""Files in and out: every file gpuaudit reads goes through one careful
reader, and every output file is written atomically, never outside the
directory given.

Reading. A repository or a command line may name anything: a FIFO or a
device (``/dev/zero``, ``/dev/stdin``) that would block or never end, a
sparse file of gigabytes, a file that grows while it is read, bytes that are
not UTF-8. :func:`open_regular` refuses all of it before a byte is read:

- the path is ``stat``-ed first, so a device is normally never even opened;
- it is then opened with ``O_NONBLOCK`` (opening a FIFO never waits for a
  writer) and ``O_NOCTTY``, and the *opened descriptor* is ``fstat``-ed, so a
  regular file swapped for a FIFO in between cannot fool the first check;
- anything but a regular file is refused, and so is a file larger than the
  caller's limit; at most ``limit + 1`` bytes are ever read, so a file that
  grows meanwhile is refused too.

:func:`read_bytes` and :func:`read_text` are built on it; :func:`iter_lines`
streams a large line-oriented file with a bound on each line. Every refusal
is a :class:`FileReadError` whose ``problem`` says what is wrong (and
``line`` where, for text that is not UTF-8); callers turn it into their own
error (ConfigError, RuleError, SnapshotError, ...). The limits are the
callers': each kind of file has its own, far above any real file of that
kind.

Where a file may lead. A repository is untrusted: a pull request can add a
rule file that is a symlink to the runner's ``~/.git-credentials``, or set
``policies: [/etc]`` in its ``.gpuaudit.yaml``. Every file a repository can
name (rule and cases files, the config, a baseline, Helm values files and
chart files, kustomize inputs) is therefore read under one rule,
:func:`confined`: the path, with every symlink along it followed, must stay
inside one of its *roots*, else :class:`OutsideRootError` says so (naming the
path, never its content). The roots are:

- **the repository** (:func:`repository_root`): the nearest folder at or
  above the working directory that holds ``.git`` (a folder, or the file a
  worktree or submodule has), else the working directory itself. The
  repository chooses nothing above its checkout, and the working directory
  is chosen by whoever runs gpuaudit;
- **a folder named on the command line** outside that repository
  (:func:`command_line_roots`): the user chose it, so what lies inside it is
  theirs; a link in it may still not lead out of it.

A file about to be read goes through :func:`confined_file`, which refuses
what is no regular file first (a FIFO, a link to ``/dev/zero``), as the
reader would. A path a repository's config names (``policies:``) is checked
against the config's roots, so an absolute path or a ``..`` that leaves the repository
is refused; only the command line reaches outside. No error message quotes
more of a file's content than :func:`excerpt` gives: a short, escaped piece.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

# Content hashes (the rule pack's cache key and entries, parsed bundled data):
# 256-bit BLAKE2b, the builtin one. It hashes three times as fast as the
# builtin SHA-256, and hashlib would load OpenSSL (2% of a pre-commit run).
try:
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - a Python built without it
    from hashlib import blake2b

_GZIP_MAGIC = b"\x1f\x8b"
_CHUNK = 1 << 20  # bytes inflated per step: bounds what a gzip bomb makes before it is seen


class UnsafePathError(ValueError):
    pass


class FileReadError(ValueError):
    """A file the reader refused: ``problem`` without the path, ``line`` where known."""

    def __init__(self, path: Path | str, problem: str, line: int | None = None) -> None:
        super().__init__(f"{path}:{line}: {problem}" if line else f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem
        self.line = line


class OutsideRootError(FileReadError):
    """A path that leads (through a symlink, ``..`` or as an absolute path)
    outside the folders it may be read from: never read."""


# --- where a file may lead ------------------------------------------------------


def repository_root(cwd: Path | None = None) -> Path:
    """The repository gpuaudit runs in, resolved: the nearest folder at or
    above the working directory (``cwd``) holding ``.git`` (a folder, or the
    file of a worktree or submodule), else the working directory itself."""
    start = Path(os.path.abspath(cwd if cwd is not None else os.getcwd()))
    for folder in (start, *start.parents):
        if os.path.lexists(folder / ".git"):
            return folder.resolve()
    return start.resolve()


def _git_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None


def source_root(named: Sequence[str] = ()) -> Path:
    """The repository that output names files relative to (SARIF's
    %SRCROOT%), as written, not resolved: the one the working directory is
    in (the nearest folder above it holding ``.git``); outside one, the
    repository of the first of the ``named`` files in one; else the working
    directory."""
    here = Path(os.path.abspath(Path.cwd()))
    root = _git_root(here)
    for file in named if root is None else ():
        if file and file != "<stdin>":
            root = _git_root(Path(os.path.abspath(here / file)).parent)
            if root is not None:
                break
    return root or here


def _lexically_inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def command_line_roots(named: Path, *, cwd: Path | None = None) -> tuple[Path, ...]:
    """Where files found through ``named``, a path the user gave on the
    command line (a folder of rules, a config, a baseline, a values file),
    may lead: the repository (:func:`repository_root`) when ``named`` lies in
    it as written (its links not followed: a link the repository planted
    does not make its target the user's choice); otherwise the folder the
    user named (a file's folder), which is theirs."""
    repo = repository_root(cwd)
    base = Path(os.path.realpath(cwd if cwd is not None else os.getcwd()))
    written = Path(os.path.normpath(base / named))
    if _lexically_inside(written, repo):
        return (repo,)
    folder = written if os.path.isdir(written) else written.parent
    return (folder.resolve(),)


def confined(path: Path, roots: Sequence[Path], *, what: str) -> Path:
    """``path`` resolved (every symlink along it followed, ``..`` folded) when
    that stays inside one of ``roots`` (each resolved too); otherwise an
    :class:`OutsideRootError` naming ``path`` as given and saying it leads
    outside. ``what`` names the kind of file in the message ("rule file",
    "values file"). Nothing is opened: a path that does not exist is
    resolved as far as it can be (the reader then says it is missing)."""
    try:
        target = Path(os.path.realpath(path))
        resolved = [Path(os.path.realpath(root)) for root in roots]
    except (OSError, ValueError) as exc:  # a link loop; a NUL byte
        raise OutsideRootError(path, f"{what} cannot be resolved ({exc}); not read") from None
    if any(_lexically_inside(target, root) for root in resolved):
        return target
    where = " or ".join(str(root) for root in resolved) or "the folders allowed"
    raise OutsideRootError(
        path,
        f"{what} leads outside {where} (to {target}); not read (a repository names only its own "
        "files; one elsewhere can be named on the command line)",
    )


def confined_file(path: Path, roots: Sequence[Path], *, what: str) -> Path:
    """:func:`confined` for a file about to be read. What is there and is no
    regular file (a FIFO, a link to ``/dev/zero`` or ``/dev/stdin``) is
    refused first, as the reader would refuse it (``not a regular file, not
    read``), wherever it leads: such a file keeps the one message every file
    option gives it, and it is never opened either way."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a loop: confined() or the reader says so
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise FileReadError(path, "not a regular file, not read")
    return confined(path, roots, what=what)


EXCERPT_CHARS = 60


def excerpt(value: object, limit: int = EXCERPT_CHARS) -> str:
    """A short, escaped piece of a value read from a file, for an error
    message: its ``repr`` (control characters, bidi overrides and newlines
    escaped) cut to about ``limit`` characters, with how much was left out.
    An error must never quote a file whole: the file may not be what it says
    (a secret behind a link), and the message goes to logs and code scanning."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 1]}\u2026 ({len(text):,} characters)"


_QUOTED = r"'(?:[^'\\\n]|\\.){%d,}'|\"(?:[^\"\\\n]|\\.){%d,}\""


def bounded_quotes(message: str, limit: int = EXCERPT_CHARS, total: int = 400) -> str:
    """``message`` (a library's error, such as jsonschema's ``'…' is not of
    type 'object'``) with every quoted literal longer than ``limit`` cut as
    :func:`excerpt` cuts it, and the whole at most ``total`` characters."""
    import re  # a message to bound is an error: rare

    def cut(match: re.Match[str]) -> str:
        text = match.group(0)
        return f"{text[: limit - 1]}\u2026{text[-1]} ({len(text):,} characters)"

    message = re.sub(_QUOTED % (limit, limit), cut, message[: total * 50])
    if len(message) > total:
        message = f"{message[: total - 1]}\u2026"
    return message


def too_big(path: Path | str, size: str, limit: int, what: str = "file", hint: str = "") -> FileReadError:
    """The one wording of an oversized input (``size``: "1,024 bytes" or
    "more than 1,024 bytes"); ``hint`` says how to raise a configurable limit."""
    return FileReadError(path, f"{what} is {size}; the limit is {limit:,} bytes{hint}")


@contextlib.contextmanager
def open_regular(path: Path | str, *, limit: int, what: str = "file", hint: str = "") -> Iterator[BinaryIO]:
    """The regular file at ``path``, opened for binary reading, at most
    ``limit`` bytes long when opened (the caller reads at most ``limit + 1``
    bytes: the file may grow). Raises FileReadError otherwise."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # never open a device or a FIFO
            raise FileReadError(path, "not a regular file, not read")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise FileReadError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)  # the file actually opened, whatever the path names now
        if not stat.S_ISREG(info.st_mode):
            raise FileReadError(path, "not a regular file, not read")
        if info.st_size > limit:
            raise too_big(path, f"{info.st_size:,} bytes", limit, what, hint)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_bytes(path: Path | str, *, limit: int, what: str = "file", hint: str = "", gunzip: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    ``gunzip``: a file starting with gzip's magic bytes is inflated, and the
    limit then bounds the inflated bytes too (a small file can inflate a
    thousandfold), checked as they are made."""
    try:
        with open_regular(path, limit=limit, what=what, hint=hint) as handle:
            if gunzip and handle.peek(2)[:2] == _GZIP_MAGIC:  # type: ignore[attr-defined]
                return _inflate(path, handle, limit, what, hint)
            raw = handle.read(limit + 1)
    except OSError as exc:
        raise FileReadError(path, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise too_big(path, f"more than {limit:,} bytes", limit, what, hint)
    return raw


def _inflate(path: Path | str, handle: BinaryIO, limit: int, what: str, hint: str) -> bytes:
    out = bytearray()
    try:
        import gzip  # only snapshots are compressed: `check` never needs it

        with gzip.GzipFile(fileobj=handle, mode="rb") as zipped:
            while chunk := zipped.read(min(_CHUNK, limit + 1 - len(out))):
                out += chunk
                if len(out) > limit:
                    raise FileReadError(
                        path, f"{what} inflates to more than {limit:,} bytes; the limit is {limit:,} bytes{hint}"
                    )
    except (OSError, EOFError, zlib.error) as exc:
        raise FileReadError(path, f"corrupt gzip data: {exc}") from None
    return bytes(out)


def decode_text(raw: bytes, path: Path | str) -> str:
    """``raw`` as UTF-8 text (a leading byte-order mark dropped); otherwise a
    FileReadError naming the line of the first bad byte."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise FileReadError(path, "not valid UTF-8 text", line) from None


def read_text(path: Path | str, *, limit: int, what: str = "file") -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes."""
    return decode_text(read_bytes(path, limit=limit, what=what), path)


def iter_lines(path: Path | str, *, limit: int, line_limit: int, what: str = "file") -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of each line of the regular file ``path``, read
    as they are used: a file of ``limit`` bytes is never held whole. A line
    longer than ``line_limit`` bytes, or more than ``limit`` bytes in all
    (the file grew), ends the iteration with a FileReadError; the lines
    before it have been yielded."""
    total = 0
    try:
        with open_regular(path, limit=limit, what=what) as handle:
            number = 0
            while line := handle.readline(line_limit + 1):
                number += 1
                total += len(line)
                if total > limit:
                    raise too_big(path, f"more than {limit:,} bytes", limit, what)
                if len(line) > line_limit and not line.endswith(b"\n"):
                    raise FileReadError(path, f"line longer than {line_limit:,} bytes; the rest is not read", number)
                yield number, line
    except OSError as exc:
        raise FileReadError(path, f"cannot read: {exc.strerror or exc}") from None


class WriteError(OSError):
    """A file could not be written: ``str()`` names it and says why."""

    def __str__(self) -> str:
        return f"cannot write {self.filename}: {self.strerror}"


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write via a temporary file in the same directory and rename it into
    place, so a crash never leaves half a file behind. The file gets the mode
    a plain ``open()`` would give it (0666 less the umask: 0644 under umask
    022), not the temporary file's 0600. Raises WriteError naming ``path``.

    A device or a FIFO already at ``path`` (``--output-file /dev/null``,
    ``/dev/stdout``) is written to, never renamed over: replacing it would
    turn /dev/null into a regular file for the whole machine."""
    path = Path(path)
    with contextlib.suppress(OSError):
        mode = os.stat(path).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
            _write_through(path, data)
            return
    try:
        make_folders(path.parent)
    except WriteError as exc:
        raise WriteError(exc.errno, exc.strerror, str(path)) from exc
    import tempfile  # here: a check that writes no file never needs it (nor shutil, which it imports)

    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise WriteError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    try:
        with os.fdopen(fd, "wb") as handle:
            with contextlib.suppress(OSError):  # a file system without modes
                os.fchmod(handle.fileno(), file_mode())
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise WriteError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def _write_through(path: Path, data: str | bytes) -> None:
    try:
        with open(path, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    except OSError as exc:
        raise WriteError(exc.errno, exc.strerror or str(exc), str(path)) from exc


def file_mode() -> int:
    """0666 less the process's umask: the mode ``open()`` creates files with.
    (The umask can only be read by setting it: briefly to 077, the safe side.)"""
    umask = os.umask(0o077)
    os.umask(umask)
    return 0o666 & ~umask


def make_folders(folder: Path) -> list[Path]:
    """``mkdir -p folder``: the folders it made, outermost first. Raises
    WriteError when a part of the path is a file, or a folder cannot be made."""
    wanted = Path(folder)
    missing = check_folder(wanted)
    made: list[Path] = []
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            if not path.is_dir():
                raise WriteError(errno.ENOTDIR, f"{path} is not a folder", str(wanted)) from None
            continue  # made meanwhile by someone else
        except OSError as exc:
            reason = f"cannot make the folder {path}: {exc.strerror or exc}"
            raise WriteError(exc.errno, reason, str(wanted)) from exc
        made.append(path)
    return made


def check_folder(folder: Path) -> list[Path]:
    """The parts of ``folder`` that do not exist yet, outermost last; WriteError
    when a part of it is a file (``somefile/out``), so nothing can be written there."""
    wanted = folder = Path(folder)
    missing: list[Path] = []
    while not folder.is_dir() and folder != folder.parent:
        if folder.exists() or folder.is_symlink():
            raise WriteError(errno.ENOTDIR, f"{folder} is not a folder", str(wanted))
        missing.append(folder)
        folder = folder.parent
    return missing


def inside(directory: Path, relative: str) -> Path:
    """``directory/relative``, refusing anything that would land outside it
    (``../x``, absolute paths, symlinks pointing out)."""
    root = directory.resolve()
    target = (root / relative).resolve()
    if target != root and root not in target.parents:
        raise UnsafePathError(f"{relative!r} would be written outside {directory}")
    return target


def content_hash(data: bytes) -> str:
    """``data``'s 256-bit BLAKE2b, as hex."""
    return blake2b(data, digest_size=32).hexdigest()


def cache_dir() -> Path | None:
    """``$XDG_CACHE_HOME/gpuaudit`` (an absolute XDG_CACHE_HOME only, as the
    XDG spec says), else ``~/.cache/gpuaudit``; None when there is no home.
    The rule pack (engine/rule_cache.py) and renders (sources/render_cache.py)
    are kept there."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = os.path.expanduser("~")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base, "gpuaudit")
