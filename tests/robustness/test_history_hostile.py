"""The report's output paths and its history database, when what is there is
hostile: a symlink planted in `--out` (for the history database, SQLite's
files beside it, or a report file), a folder or file where the other belongs,
and history rows tampered with (text where a number belongs, NULLs, a blob,
non-finite and absurd numbers, times that are no time).

Paths are checked before anything is written: a report that cannot be
written leaves the history as it was. A bad row is left out of the trend
with a warning naming it; the report is still written.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "demo-snapshot.json.gz"
CLUSTER = "demo"  # the demo snapshot's cluster name


def gpuaudit(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def report(cwd: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    proc = gpuaudit("report", "--snapshot", str(DEMO), *extra, cwd=cwd)
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return proc


def rows(database: Path) -> int:
    with sqlite3.connect(database) as db:
        return db.execute("SELECT count(*) FROM runs").fetchone()[0]


# --- the default history database is an output: it stays inside --out ---------------------


@pytest.mark.parametrize("planted", ["history.sqlite", "history.sqlite-wal", "history.sqlite-shm"])
@pytest.mark.parametrize("target", ["missing", "existing"])
def test_a_symlink_planted_for_the_default_history_is_not_followed_out(tmp_path, planted, target):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim = elsewhere / "victim"
    if target == "existing":
        victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / planted).symlink_to(victim)

    proc = report(tmp_path, "--out", "out")

    assert proc.returncode == 2
    assert f"'{planted}' would be written outside out" in proc.stderr
    assert [p.name for p in elsewhere.iterdir()] == (["victim"] if target == "existing" else [])
    if target == "existing":
        assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in out.iterdir()) == [planted]  # no report, no database


def test_a_history_path_given_explicitly_is_the_users_choice(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "history.sqlite").symlink_to(shared / "history.sqlite")
    proc = report(tmp_path, "--out", "out", "--history", "out/history.sqlite")
    assert proc.returncode == 0, proc.stderr
    assert rows(shared / "history.sqlite") == 1


def test_a_symlink_inside_out_is_followed(tmp_path):
    out = tmp_path / "out"
    (out / "db").mkdir(parents=True)
    (out / "history.sqlite").symlink_to(out / "db" / "runs.sqlite")
    proc = report(tmp_path, "--out", "out")
    assert proc.returncode == 0, proc.stderr
    assert rows(out / "db" / "runs.sqlite") == 1


# --- report files: checked before the run is recorded ----------------------------------------


@pytest.mark.parametrize("name", ["report.html", "report.md", "report.json"])
def test_a_symlinked_report_file_is_refused_before_the_history_is_touched(tmp_path, name):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(elsewhere / "page")
    history = tmp_path / "history.sqlite"

    proc = report(tmp_path, "--out", "out", "--history", str(history))

    assert proc.returncode == 2
    assert f"'{name}' would be written outside out" in proc.stderr
    assert list(elsewhere.iterdir()) == []
    assert not history.exists()  # the run was not recorded
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_a_folder_where_a_report_file_belongs_is_refused_before_recording(tmp_path):
    (tmp_path / "out" / "report.md").mkdir(parents=True)
    proc = report(tmp_path, "--out", "out")
    assert proc.returncode == 2
    assert "out/report.md is a folder: the report cannot be written there" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.md"]


@pytest.mark.parametrize(
    "history",
    ["somefile/history.sqlite", "somefile/deeper/history.sqlite", "folder"],
)
def test_a_history_path_that_cannot_be_a_database_is_named(tmp_path, history):
    (tmp_path / "somefile").write_text("keep\n")
    (tmp_path / "folder").mkdir()
    proc = report(tmp_path, "--out", "out", "--history", history)
    assert proc.returncode == 2
    if history == "folder":  # click's own check of --history
        assert "Invalid value for '--history': File 'folder' is a directory" in proc.stderr
    else:
        assert f"gpuaudit: {history}: cannot open the history database: somefile is not a folder" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing written
    assert (tmp_path / "somefile").read_text() == "keep\n"

    audit = gpuaudit("audit", "--snapshot", str(DEMO), "--format", "json", "--history", history, cwd=tmp_path)
    assert "Traceback" not in audit.stderr and "internal error" not in audit.stderr, audit.stderr
    assert audit.returncode == 2
    assert "cannot open the history database" in audit.stderr or "is a directory" in audit.stderr


def test_a_history_file_that_is_no_database_is_named(tmp_path):
    (tmp_path / "history.sqlite").write_bytes(b"\x00not sqlite\xff" * 100)
    proc = report(tmp_path, "--out", "out", "--history", "history.sqlite")
    assert proc.returncode == 2 and "history.sqlite" in proc.stderr and "database" in proc.stderr


# --- tampered rows ------------------------------------------------------------------------------

# (column, value) written over a good row; each makes the row unusable.
BAD_VALUES = [
    ("gpus_total", "lots"),
    ("gpus_allocated", b"\x00\x01"),
    ("gpus_idle", -3.0),
    ("gpus_active", 1e300),
    ("gpus_total", float("-inf")),
    ("pending_pods", "x"),
    ("pending_pods", 2.5),
    ("findings", "many"),
    ("coverage", "\x1b[31mred"),
    ("idle_cost_per_hour", "1e400"),
    ("collected_at", "not a time"),
    ("collected_at", None),
    ("collected_at", 12.5),
    ("collected_at", "9999-12-31T23:59:59Z"),
    ("cluster", None),
    ("command", None),
    ("command", b"audit"),
    ("detail", "{not json"),
    ("detail", "[1, 2]"),
    ("detail", "[" * 100000),
    ("detail", 5),
]


def _loosened(database: Path) -> None:
    """Rebuild the runs table without its NOT NULL constraints, as anyone who
    can write the file can."""
    with sqlite3.connect(database, isolation_level=None) as db:
        (create,) = db.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()
        db.execute("ALTER TABLE runs RENAME TO old_runs")
        db.execute(create.replace("NOT NULL", ""))
        db.execute("INSERT INTO runs SELECT * FROM old_runs")
        db.execute("DROP TABLE old_runs")


def _tampered_history(tmp_path: Path) -> tuple[Path, list[int]]:
    """A real history with two good runs, and one bad row per BAD_VALUES entry."""
    database = tmp_path / "history.sqlite"
    proc = report(tmp_path, "--out", "first", "--history", str(database))
    assert proc.returncode == 0, proc.stderr
    _loosened(database)
    bad_ids = []
    with sqlite3.connect(database, isolation_level=None) as db:
        db.row_factory = sqlite3.Row
        good = dict(db.execute("SELECT * FROM runs").fetchone())
        good.pop("id")
        columns = ", ".join(good)
        marks = ", ".join(f":{c}" for c in good)
        db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", {**good, "collected_at": "2026-10-05T00:00:00Z"})
        for month, (column, value) in enumerate(BAD_VALUES):
            row = {**good, "collected_at": f"2025-{1 + month % 12:02d}-{1 + month // 12:02d}T00:00:00Z"}
            row[column] = value
            cursor = db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", row)
            bad_ids.append(cursor.lastrowid)
    return database, bad_ids


def test_tampered_history_rows_are_left_out_with_a_warning(tmp_path):
    database, bad_ids = _tampered_history(tmp_path)

    proc = report(tmp_path, "--out", "out", "--history", str(database), "--no-record")

    assert proc.returncode == 0, proc.stderr
    [warning] = [line for line in proc.stderr.splitlines() if "left out of the trend" in line]
    expected_skipped = len(bad_ids) - 1  # cluster NULL: the row is not this cluster's, not read at all
    assert f"gpuaudit: warning: {database}: {expected_skipped} history row(s) of 'demo'" in warning
    assert "\x1b" not in proc.stderr
    document = json.loads((tmp_path / "out" / "report.json").read_text())  # strict JSON
    assert [t["period"] for t in document["trend"]] == ["2026-10", "2026-11"]  # the good runs only
    assert any("left out of the trend" in e["message"] for e in document["method"]["errors"])
    for name in ("report.html", "report.md"):
        assert (tmp_path / "out" / name).stat().st_size > 0


@pytest.mark.parametrize(("column", "value"), BAD_VALUES, ids=[f"{c}={v!r:.20}" for c, v in BAD_VALUES])
def test_each_bad_value_alone_is_named(tmp_path, column, value):
    history = pytest.importorskip("gpuaudit.report.history")
    database, _ = _tampered_history(tmp_path)
    with sqlite3.connect(database, isolation_level=None) as db:
        db.execute("DELETE FROM runs WHERE collected_at LIKE '2025-%' OR collected_at IS NULL OR cluster IS NULL")
        db.execute("DELETE FROM runs WHERE typeof(collected_at) != 'text' OR collected_at NOT LIKE '2026-%'")
        db.execute(f"UPDATE runs SET {column} = ? WHERE collected_at = '2026-10-05T00:00:00Z'", (value,))
    problems: list[str] = []
    runs = history.runs(database, CLUSTER, problems)
    if column == "cluster":  # no longer this cluster's row
        assert len(runs) == 1 and problems == []
        return
    assert len(runs) == 1, problems  # the good run of 2026-11 is kept
    [problem] = problems
    assert "1 history row(s) of 'demo' left out of the trend: row " in problem
    assert column in problem


def test_history_written_by_gpuaudit_reads_back_without_warnings(tmp_path):
    database = tmp_path / "history.sqlite"
    for _ in range(2):
        proc = report(tmp_path, "--out", "out", "--history", str(database))
        assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    assert rows(database) == 1  # the same snapshot twice replaces its row
    assert os.access(database, os.R_OK)
