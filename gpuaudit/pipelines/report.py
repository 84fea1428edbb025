"""The capacity review: a cluster audit -> the analysis -> the run history ->
report.html, report.md and report.json in one folder."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuaudit.model import AuditResult
from gpuaudit.report import history
from gpuaudit.report.build import ReportSettings, analyse, assemble, cluster_name, run_summary
from gpuaudit.report.period import Period, month_of
from gpuaudit.report.render import write_report
from gpuaudit.sources.user_config import Config

HISTORY_NAME = "history.sqlite"


def history_database(config: Config, history_path: Path | None, out_dir: Path) -> Path:
    """--history, else the config's report.history (relative to the config
    file), else history.sqlite in the output folder."""
    configured = config.report.get("history")
    if history_path is None and configured:
        base = config.path.parent if config.path else Path.cwd()
        history_path = base / str(configured)
    return history_path or out_dir / HISTORY_NAME


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

    Raises history.HistoryError when the history cannot be used, OSError
    when the report cannot be written."""
    settings = replace(settings, cluster_name=cluster_name(config.report, snapshot))
    progress("building the capacity review")
    analysis = analyse(result.state, result.subjects, result, settings)
    if record:
        history.record(database, run_summary(analysis, "report"))
    runs = history.runs(database, analysis.cluster)
    document = assemble(
        analysis,
        runs=runs,
        period=period or month_of(analysis.collected_at),
        generated_at=datetime.now(timezone.utc),
        settings=settings,
        history=str(database),
    )
    document["method"]["absent_apis"] = list(snapshot.get("absent") or [])
    document["method"]["pods"] = {
        "in_snapshot": len(snapshot["objects"].get("pods") or []),
        "that_may_use_gpus": len(result.state.pods),
    }
    progress("writing the report")
    return write_report(document, out_dir), document
