"""Record a cluster audit's summary in the run history (`audit --history DB`)."""

from __future__ import annotations

from pathlib import Path

from gpuaudit.audit import AuditResult
from gpuaudit.config import Config
from gpuaudit.report import history
from gpuaudit.report.build import analyse, run_summary, settings_from_config


def record_audit(path: Path, result: AuditResult, config: Config) -> None:
    """Add this audit's counts to the history at ``path``.

    Raises history.HistoryError when the database cannot be used, and
    ValueError for an invalid price in config.
    """
    if result.state is None:
        raise ValueError("only a cluster audit has counts to record")
    settings = settings_from_config(config.report)
    analysis = analyse(result.state, result.subjects, result, settings)
    history.record(path, run_summary(analysis, "audit"))
