"""Run history in SQLite: one summary row per audited snapshot, for the trend.

``audit --history DB`` and ``report`` record a run; the report reads a
cluster's runs back to chart earlier periods and to integrate GPU-hours over
the period. The schema is versioned with ``PRAGMA user_version`` and migrated
forward in a transaction; a database written by a newer gpuaudit is refused
rather than misread.

Concurrent writers (a CronJob's audit and a report at the same time, two
clusters writing one file) are safe: WAL journaling, a busy timeout, and
every write inside ``BEGIN IMMEDIATE`` so a writer waits for the lock instead
of failing half-way. A snapshot recorded twice (the same cluster and
collection time) replaces its earlier row, so re-running a report does not
weigh a snapshot double in the trend.
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec

from gpuaudit.files import WriteError, check_folder, file_mode, make_folders

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 60.0
COUNTS = ("total", "allocated", "active", "resident_idle", "idle", "no_data", "free")

# version -> statements that take a database from the previous version to it.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            cluster TEXT NOT NULL,
            collected_at TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            command TEXT NOT NULL,
            gpus_total REAL, gpus_allocated REAL, gpus_active REAL,
            gpus_resident_idle REAL, gpus_idle REAL, gpus_no_data REAL, gpus_free REAL,
            pending_pods INTEGER, pending_gpus REAL,
            coverage REAL,
            idle_cost_per_hour REAL, allocated_cost_per_hour REAL,
            findings INTEGER,
            detail TEXT NOT NULL DEFAULT '{}',
            UNIQUE (cluster, collected_at)
        )
        """,
        "CREATE INDEX runs_by_time ON runs (cluster, collected_at)",
    ),
}


class HistoryError(Exception):
    pass


class RunSummary(msgspec.Struct, frozen=True):
    cluster: str
    collected_at: datetime
    command: str
    gpus: Mapping[str, float | None]
    pending_pods: int = 0
    pending_gpus: float = 0.0
    coverage: float | None = None
    idle_cost_per_hour: float | None = None
    allocated_cost_per_hour: float | None = None
    findings: int = 0
    detail: Mapping[str, Any] = msgspec.field(default_factory=dict)  # e.g. findings by category


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _use_wal(connection: sqlite3.Connection) -> None:
    """Switch to WAL journaling. Changing the journal mode takes an exclusive
    lock without waiting on the busy timeout, so two runs creating the same
    database at once retry here until the timeout is spent."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.01
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.5)


def check_location(path: Path) -> None:
    """HistoryError unless a database can be opened at ``path``: not a folder,
    and no part of the path above it a file (``somefile/history.sqlite``)."""
    path = Path(path)
    try:
        check_folder(path.parent)
    except WriteError as exc:
        raise HistoryError(f"{path}: cannot open the history database: {exc.strerror}") from exc
    if path.is_dir():
        raise HistoryError(f"{path}: cannot open the history database: it is a folder")


def _connect(path: Path) -> sqlite3.Connection:
    path = Path(path)
    check_location(path)
    try:
        make_folders(path.parent)
    except WriteError as exc:
        raise HistoryError(f"{path}: cannot open the history database: {exc.strerror}") from exc
    new = not path.exists()
    try:
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below).
        connection = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
        if new:  # SQLite creates it 0644 at most, less the umask: give it the mode of every other output
            with contextlib.suppress(OSError):
                path.chmod(file_mode())
        connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        _use_wal(connection)
    except sqlite3.DatabaseError as exc:
        raise HistoryError(f"{path}: cannot open the history database: {exc}") from exc
    return connection


@contextmanager
def _write(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _migrate(connection: sqlite3.Connection, path: Path) -> None:
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"{path}: history schema version {version} is newer than this gpuaudit reads "
            f"(version {SCHEMA_VERSION}); upgrade gpuaudit"
        )
    if version == SCHEMA_VERSION:
        return
    with _write(connection):
        # Another writer may have migrated while we waited for the lock.
        (version,) = connection.execute("PRAGMA user_version").fetchone()
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {target}")


@contextmanager
def _open(path: Path) -> Iterator[sqlite3.Connection]:
    with closing(_connect(path)) as connection:
        try:
            _migrate(connection, path)
            yield connection
        except sqlite3.DatabaseError as exc:
            raise HistoryError(f"{path}: {exc}") from exc


def record(path: Path, run: RunSummary, *, now: datetime | None = None) -> None:
    """Add ``run`` to the history at ``path`` (created when missing)."""
    values = {
        "cluster": run.cluster,
        "collected_at": _iso(run.collected_at),
        "recorded_at": _iso(now or datetime.now(timezone.utc)),
        "command": run.command,
        **{f"gpus_{key}": run.gpus.get(key) for key in COUNTS},
        "pending_pods": run.pending_pods,
        "pending_gpus": run.pending_gpus,
        "coverage": run.coverage,
        "idle_cost_per_hour": run.idle_cost_per_hour,
        "allocated_cost_per_hour": run.allocated_cost_per_hour,
        "findings": run.findings,
        "detail": json.dumps(dict(run.detail), sort_keys=True, allow_nan=False),
    }
    columns = ", ".join(values)
    marks = ", ".join(f":{k}" for k in values)
    updates = ", ".join(f"{k} = excluded.{k}" for k in values if k not in ("cluster", "collected_at"))
    with _open(path) as connection, _write(connection):
        connection.execute(
            f"INSERT INTO runs ({columns}) VALUES ({marks}) "
            f"ON CONFLICT (cluster, collected_at) DO UPDATE SET {updates}",
            values,
        )


def runs(path: Path, cluster: str, problems: list[str] | None = None) -> list[RunSummary]:
    """Every recorded run of ``cluster``, oldest first (none when no database).

    Rows are read defensively (the file may have been edited): a row with a
    value of the wrong type, a non-finite or implausible number, or a time
    that is no time is left out, and one line in ``problems`` says so
    (the caller names the database)."""
    if not Path(path).exists():
        return []
    with _open(path) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(
            "SELECT * FROM runs WHERE cluster = ? ORDER BY collected_at, id", (cluster,)
        ).fetchall()
    summaries: list[RunSummary] = []
    skipped: list[str] = []
    for row in rows:
        try:
            summaries.append(_summary(row))
        except (ValueError, TypeError, KeyError, IndexError, RecursionError) as exc:
            skipped.append(f"row {_row_id(row)}: {exc}")
    if skipped and problems is not None:
        shown = "; ".join(skipped[:3]) + (f"; and {len(skipped) - 3} more" if len(skipped) > 3 else "")
        problems.append(f"{len(skipped)} history row(s) of {cluster!r} left out of the trend: {shown}")
    summaries.sort(key=lambda r: r.collected_at)
    return summaries


# A count or price beyond this is no measurement (and would overflow the
# GPU-hour sums into infinity).
_PLAUSIBLE = 1e12


def _summary(row: sqlite3.Row) -> RunSummary:
    """A RunSummary from a row, or ValueError/TypeError naming the bad column."""
    return RunSummary(
        cluster=_text(row, "cluster"),
        collected_at=_time(row, "collected_at"),
        command=_text(row, "command"),
        gpus={key: _number(row, f"gpus_{key}") for key in COUNTS},
        pending_pods=int(_number(row, "pending_pods", integer=True) or 0),
        pending_gpus=_number(row, "pending_gpus") or 0.0,
        coverage=_number(row, "coverage"),
        idle_cost_per_hour=_number(row, "idle_cost_per_hour"),
        allocated_cost_per_hour=_number(row, "allocated_cost_per_hour"),
        findings=int(_number(row, "findings", integer=True) or 0),
        detail=_detail(row),
    )


def _row_id(row: sqlite3.Row) -> str:
    try:
        return repr(row["id"])
    except (KeyError, IndexError):
        return "?"


def _text(row: sqlite3.Row, column: str) -> str:
    value = row[column]
    if not isinstance(value, str):
        raise TypeError(f"{column} is {_shown(value)}, not text")
    return value


def _time(row: sqlite3.Row, column: str) -> datetime:
    text = _text(row, column)
    try:
        moment = _parse(text)
    except ValueError:
        raise ValueError(f"{column} {_shown(text)} is not a time") from None
    if moment.tzinfo is None:  # gpuaudit writes UTC with a Z; read a bare time as UTC
        moment = moment.replace(tzinfo=timezone.utc)
    if not 1970 <= moment.year <= 9000:
        raise ValueError(f"{column} {_shown(text)} is not a plausible time")
    return moment


def _number(row: sqlite3.Row, column: str, *, integer: bool = False) -> float | None:
    """A count, share or price: None (unknown), else finite, 0 or more, and
    plausible. SQLite stores what it is given, so text or a blob may sit here."""
    value = row[column]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{column} is {_shown(value)}, not a number")
    if integer and not isinstance(value, int):
        raise TypeError(f"{column} is {_shown(value)}, not a whole number")
    if not math.isfinite(value) or not 0 <= value <= _PLAUSIBLE:
        raise ValueError(f"{column} is {_shown(value)}, not a plausible value")
    return value if integer else float(value)


def _detail(row: sqlite3.Row) -> dict[str, Any]:
    text = row["detail"]
    if text is None:
        return {}
    if not isinstance(text, str):
        raise TypeError(f"detail is {_shown(text)}, not JSON text")
    try:
        detail = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError("detail is not JSON (or nested too deep)") from None
    if not isinstance(detail, dict):
        raise TypeError(f"detail is {_shown(detail)}, not a JSON object")
    return detail


def _shown(value: object) -> str:
    """A value for a message: its type, and a short repr of text and numbers."""
    if value is None:
        return "NULL"
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return "a blob" if isinstance(value, bytes) else f"a {type(value).__name__}"
