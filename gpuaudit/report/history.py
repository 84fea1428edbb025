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

import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class RunSummary:
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
    detail: Mapping[str, Any] = field(default_factory=dict)  # e.g. findings by category


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


def _connect(path: Path) -> sqlite3.Connection:
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE below).
        connection = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None)
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


def runs(path: Path, cluster: str) -> list[RunSummary]:
    """Every recorded run of ``cluster``, oldest first (none when no database)."""
    if not Path(path).exists():
        return []
    with _open(path) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(
            "SELECT * FROM runs WHERE cluster = ? ORDER BY collected_at, id", (cluster,)
        ).fetchall()
    return [
        RunSummary(
            cluster=row["cluster"],
            collected_at=_parse(row["collected_at"]),
            command=row["command"],
            gpus={key: row[f"gpus_{key}"] for key in COUNTS},
            pending_pods=row["pending_pods"] or 0,
            pending_gpus=row["pending_gpus"] or 0.0,
            coverage=row["coverage"],
            idle_cost_per_hour=row["idle_cost_per_hour"],
            allocated_cost_per_hour=row["allocated_cost_per_hour"],
            findings=row["findings"] or 0,
            detail=json.loads(row["detail"] or "{}"),
        )
        for row in rows
    ]
