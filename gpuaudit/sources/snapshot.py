"""Write and read snapshot files (the format: ``gpuaudit/data/snapshot.schema.json``).

A snapshot holds the cluster objects and telemetry aggregates that one audit
used, so that ``audit --snapshot FILE``, reports and tests can replay it
offline. Files ending in ``.gz`` are gzip-compressed (a 50,000-pod snapshot
shrinks about tenfold); reading detects gzip by its magic bytes, whatever the
name.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from gpuaudit.bundled import data_text
from gpuaudit.files import FileReadError, file_mode, read_bytes

__all__ = ["SNAPSHOT_VERSION", "SnapshotError", "keep_objects", "read_snapshot", "write_snapshot"]

SNAPSHOT_VERSION = 1
# The most JSON a snapshot may hold, compressed or not: checked before the file
# is read and again while a .gz inflates (a 2 MB gzip can inflate to 2 GB).
# A 50,000-pod snapshot is about 120 MB of JSON (bench/gen_cluster.py, 2.4 KB
# per pod with its share of nodes, events and owners); 1 GiB is eight times
# that, nearly three times what Kubernetes' own 150,000-pod limit would make,
# and parses in a few GB of memory. An environment variable rather than an option, because audit,
# report, fix and snapshot all read snapshots, often from a CronJob: one
# setting reaches them all, and nobody should need it.
MAX_SNAPSHOT_BYTES = 1 << 30
LIMIT_VARIABLE = "GPUAUDIT_MAX_SNAPSHOT_BYTES"


class SnapshotError(Exception):
    """A snapshot file that cannot be read or written, and what is wrong with it."""

    def __init__(self, path: Path | str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = str(path)
        self.message = message


def write_snapshot(snapshot: dict[str, Any], path: Path) -> None:
    """Write ``snapshot`` to ``path`` atomically (gzip when it ends in ``.gz``).

    The data goes to a temporary file in the same folder, which then replaces
    ``path`` in one step: a reader (or a crash) never sees half a snapshot, and
    an existing snapshot survives a failed write. The file gets the mode a
    plain ``open()`` would give it (0666 less the umask), like every file
    gpuaudit writes: a snapshot holds the cluster's pod specs, so keep it
    private with ``umask 077`` (or a private folder) where that matters.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        reason = exc.strerror or exc
        raise SnapshotError(path, f"cannot create a file in {folder}: {reason}") from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw:
            with contextlib.suppress(OSError):  # a file system without modes
                os.fchmod(raw.fileno(), file_mode())
            if path.name.endswith(".gz"):
                # mtime=0 keeps the bytes reproducible for the same snapshot;
                # level 6 is twice as fast as the default 9 for a few % more bytes.
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as zipped:
                    _dump(snapshot, zipped)
            else:
                _dump(snapshot, raw)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise SnapshotError(path, f"cannot write: {exc.strerror or exc}") from exc
        if isinstance(exc, (TypeError, ValueError)):
            raise SnapshotError(path, f"snapshot is not JSON-serializable: {exc}") from exc
        raise


def _dump(snapshot: dict[str, Any], stream: BinaryIO) -> None:
    """Stream the snapshot out, its objects a batch at a time.

    The cluster's objects, nearly all of a snapshot's bytes, are encoded by
    msgspec, several times faster than json's C encoder (bench/RESULTS.md;
    ``json.dump`` would use the pure-Python one). msgspec writes a
    number JSON cannot carry (NaN, an infinity: only a hostile server sends
    one, and only the standard library's lenient reader reads it) as null,
    rather than failing the whole snapshot. The rest (header, errors,
    telemetry) is gpuaudit's own and small: json writes it, and refuses
    such a number, which would be gpuaudit's bug. Objects go out in batches
    of about a MiB, so that one ``dumps`` of the whole snapshot never holds
    a second copy of it in memory. Compact separators: whitespace would be
    a fifth of a big snapshot.
    """

    def write_list(value: Any) -> None:
        if not isinstance(value, list):
            stream.write(_json_bytes(value))
            return
        batch, size = [b"["], 0
        for index, item in enumerate(value):
            if index:
                batch.append(b",")
            batch.append(_encode_object(item))
            size += len(batch[-1])
            if size >= _BATCH_BYTES:
                stream.write(b"".join(batch))
                batch, size = [], 0
        batch.append(b"]")
        stream.write(b"".join(batch))

    objects = snapshot.get("objects")
    stream.write(b"{")
    for index, (key, value) in enumerate(snapshot.items()):
        stream.write((b"," if index else b"") + _json_bytes(str(key)) + b":")
        if key == "objects" and isinstance(objects, dict):
            stream.write(b"{")
            for position, (name, items) in enumerate(objects.items()):
                stream.write((b"," if position else b"") + _json_bytes(str(name)) + b":")
                write_list(items)
            stream.write(b"}")
        else:
            stream.write(_json_bytes(value))
    stream.write(b"}")


_OBJECT_ENCODER = msgspec.json.Encoder()
_BATCH_BYTES = 1 << 20


def _encode_object(value: Any) -> bytes:
    try:
        return _OBJECT_ENCODER.encode(value)
    except TypeError:  # a key that is not a string or number (True, None): json writes it as text
        return _json_bytes(value)


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


# What to keep of one object of the list ``objects[key]``: each(key, obj).
Transform = Callable[[str, Any], Any]


def read_snapshot(path: Path, *, each: Transform | None = None) -> dict[str, Any]:
    """The snapshot in ``path``, validated against the schema.

    ``each(key, obj)`` returns what to keep of each object of the list
    ``objects[key]``, called as the object is decoded, so that the objects of
    a large cluster are never all held whole (client-go's informers take a
    transform for the same reason).

    Raises :class:`SnapshotError` naming the file and what is wrong: unreadable,
    not gzip/JSON (with line and column), an unknown version, or the first
    schema violation with its JSON path.
    """
    path = Path(path)
    limit = snapshot_limit(path)
    hint = f" (set {LIMIT_VARIABLE} to raise it)"
    try:
        raw = read_bytes(path, limit=limit, what="snapshot", hint=hint, gunzip=True)
    except FileReadError as exc:
        raise SnapshotError(path, exc.problem) from None
    except MemoryError:
        raise SnapshotError(path, "not enough memory to read it; give gpuaudit more memory") from None
    size, out_of_memory = len(raw), False
    try:
        data = _decode(raw, each)
    except MemoryError:
        # Said once the except block is left: its traceback holds what was decoded so far.
        out_of_memory = True
    except json.JSONDecodeError as exc:
        raise SnapshotError(path, f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    except UnicodeDecodeError as exc:
        raise SnapshotError(path, f"not UTF-8 text: {exc}") from exc
    except ValueError as exc:  # a number past Python's 4,300-digit integer limit
        raise SnapshotError(path, f"not valid JSON: {str(exc).split(';')[0]}") from None
    except RecursionError:
        raise SnapshotError(path, "not valid JSON: nested too deep to parse") from None
    del raw
    if out_of_memory:
        raise SnapshotError(
            path,
            f"not enough memory to read its {size:,} bytes of JSON: the objects take several times "
            "their bytes (1,000,000 pods in 588 MB took 4 GiB); give gpuaudit more memory",
        )
    try:
        validate_snapshot(data, path)
    except RecursionError:
        raise SnapshotError(path, "nested too deep to validate") from None
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("server"), str):  # written before it was cleaned
        cluster["server"] = without_credentials(cluster["server"])
    return data


def without_credentials(url: str) -> str:
    """``url`` without the ``user:password@`` a kubeconfig's server URL may
    carry: the server names the cluster in findings, reports and snapshots."""
    if "@" not in url:
        return url
    from urllib.parse import urlsplit, urlunsplit  # here: only a URL with user info needs it

    try:
        parts = urlsplit(url)
    except ValueError:
        return url.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _decode(raw: bytes, each: Transform | None) -> Any:
    """The snapshot's JSON, each object of its lists passed through ``each``.

    The lists' objects are decoded one at a time from their slices of
    ``raw`` (``msgspec.Raw``: no copy), each then given to ``each``. A file
    of another shape, or that msgspec refuses, is decoded whole (and its
    objects then passed through ``each``): the schema, or json.loads with the
    error's place, then says what is wrong.
    """
    if each is None:
        return loads_json(raw)
    try:
        top = msgspec.json.decode(raw, type=dict[str, msgspec.Raw])
        lists = msgspec.json.decode(top["objects"], type=dict[str, list[msgspec.Raw]]) if "objects" in top else None
    except ValueError:
        lists = None
    if lists is None:
        data = loads_json(raw)
        keep_objects(data, each)
        return data
    rest = {key: loads_json(value) for key, value in top.items() if key != "objects"}
    objects: dict[str, list[Any]] = {}
    for key, items in lists.items():
        kept = objects[key] = []
        for item in items:
            try:
                obj = loads_json(item)
            except ValueError:  # raised again by the whole file, with its place in it
                return loads_json(raw)
            kept.append(each(key, obj))
    return {key: objects if key == "objects" else rest[key] for key in top}


def keep_objects(snapshot: Any, each: Transform) -> None:
    """Pass every object of ``snapshot``'s lists through ``each``, in place:
    what read_snapshot and collect do as they read, for a snapshot held whole
    (one written before it is audited, a file read whole)."""
    objects = snapshot.get("objects") if isinstance(snapshot, dict) else None
    if isinstance(objects, dict):
        for key, items in objects.items():
            if isinstance(items, list):
                items[:] = [each(key, obj) for obj in items]


def snapshot_limit(path: Path | str = "<snapshot>") -> int:
    """MAX_SNAPSHOT_BYTES, or the number of bytes $GPUAUDIT_MAX_SNAPSHOT_BYTES gives."""
    value = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not value:
        return MAX_SNAPSHOT_BYTES
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit <= 0:
        raise SnapshotError(path, f"{LIMIT_VARIABLE}={value!r} is not a positive number of bytes")
    return limit


# One decoder for every read. msgspec shares the short dict keys it has met,
# across calls: the objects of a cluster repeat theirs.
_DECODER = msgspec.json.Decoder()


def loads_json(raw: bytes | str | msgspec.Raw) -> Any:
    """JSON from a cluster (an API response, a snapshot): decoded by msgspec,
    about twice as fast as json.loads (bench/RESULTS.md). What msgspec
    refuses goes to json.loads, which reads more than RFC 8259 (NaN and
    Infinity, lone surrogates, integers past 64 bits, UTF-16 and UTF-32) and
    says where text that is not JSON goes wrong (json.JSONDecodeError)."""
    try:
        return _DECODER.decode(raw)
    except ValueError:  # msgspec.DecodeError is one
        return json.loads(bytes(memoryview(raw)) if isinstance(raw, msgspec.Raw) else raw)


def validate_snapshot(data: Any, path: Path | str = "<snapshot>") -> None:
    """Raise :class:`SnapshotError` unless ``data`` is a valid version-1 snapshot."""
    if isinstance(data, dict) and data.get("kind") == "gpuaudit-snapshot":
        version = data.get("version")
        if isinstance(version, int) and version > SNAPSHOT_VERSION:
            raise SnapshotError(
                path,
                f"snapshot version {version} is newer than this gpuaudit reads "
                f"(version {SNAPSHOT_VERSION}); upgrade gpuaudit",
            )
    import fastjsonschema

    try:
        _fast_validator()(data)
    except fastjsonschema.JsonSchemaException:
        raise SnapshotError(path, _explain(data)) from None


@lru_cache(maxsize=1)
def _schema() -> dict[str, Any]:
    text = data_text("snapshot.schema.json")
    return json.loads(text)


@lru_cache(maxsize=1)
def _fast_validator() -> Any:
    import fastjsonschema

    return fastjsonschema.compile(_schema())


def _explain(data: Any) -> str:
    """The most relevant schema violation, worded by ``jsonschema``.

    fastjsonschema is many times faster on a 50,000-pod snapshot, so it runs
    first; its messages are terse, so the slow validator runs only to explain
    a file already known to be bad.
    """
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    schema = _schema()
    validator = validator_for(schema)(schema)
    error = best_match(validator.iter_errors(data))
    if error is None:  # the validators disagree; say what we can
        return "does not match the snapshot schema"
    where = error.json_path if error.path else "the top level"
    return f"invalid snapshot at {where}: {error.message}"
