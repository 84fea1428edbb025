"""The capacity review: a cluster audit -> the analysis -> the run history ->
report.html, report.md and report.json in one folder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuaudit.files import inside
from gpuaudit.model import AuditResult, InputError
from gpuaudit.report import history
from gpuaudit.report.build import ReportSettings, analyse, assemble, cluster_name, run_summary
from gpuaudit.report.period import Period, month_of
from gpuaudit.report.render import report_paths, write_report
from gpuaudit.sources.user_config import Config

HISTORY_NAME = "history.sqlite"


def history_database(config: Config, history_path: Path | None, out_dir: Path) -> Path:
    """--history, else the config's report.history (relative to the config
    file), else history.sqlite in the output folder.

    A path the user gave is theirs to choose, symlinks and all. The default
    one is an output like the report's files: UnsafePathError when it (or
    SQLite's -wal, -shm or -journal file beside it) is a symlink that leads
    out of ``out_dir``."""
    configured = config.report.get("history")
    if history_path is None and configured:
        base = config.path.parent if config.path else Path.cwd()
        history_path = base / str(configured)
    if history_path is not None:
        return history_path
    for suffix in ("", "-wal", "-shm", "-journal"):
        inside(out_dir, HISTORY_NAME + suffix)
    return out_dir / HISTORY_NAME


def write_review(
    snapshot: Mapping[str, Any],
    result: AuditResult,
    config: Config,
    settings: ReportSettings,
    out_dir: Path,
    *,
    database: Path,
    record: bool,
    period: Period | None,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[list[Path], dict[str, Any]]:
    """Write the review of ``result`` (a cluster audit of ``snapshot``) to
    ``out_dir``, recording this run in the history unless ``record`` is False.

    The output paths are checked before the run is recorded, so a report that
    cannot be written there leaves the history as it was.

    Raises history.HistoryError when the history cannot be used,
    UnsafePathError or OSError (files.WriteError naming the file) when the
    report cannot be written."""
    settings = replace(settings, cluster_name=cluster_name(config.report, snapshot))
    report_paths(out_dir)
    history.check_location(database)
    progress("building the capacity review")
    analysis = analyse(result.state, result.subjects, result, settings)
    incomplete = result.state.unknown_gpus_note()
    if record and incomplete is not None:  # unknown, never zero: not a trend point
        result.errors.append(InputError(str(database), None, f"this run is not recorded: {incomplete}", "warning"))
    if record and incomplete is None:
        history.record(database, run_summary(analysis, "report"))
    problems: list[str] = []
    runs = history.runs(database, analysis.cluster, problems)
    warnings = [InputError(str(database), None, problem, level="warning") for problem in problems]
    result.errors.extend(warnings)
    document = assemble(
        analysis,
        runs=runs,
        period=period or month_of(analysis.collected_at),
        generated_at=datetime.now(timezone.utc),
        settings=settings,
        history=str(database),
    )
    document["method"]["errors"] = [*document["method"].get("errors", []), *(w.as_dict() for w in warnings)]
    document["method"]["absent_apis"] = list(snapshot.get("absent") or [])
    document["method"]["pods"] = {
        "in_snapshot": len(snapshot["objects"].get("pods") or []),
        "that_may_use_gpus": len(result.state.pods),
    }
    progress("writing the report")
    return write_report(document, out_dir), document
