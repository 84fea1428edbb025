"""Record a cluster audit's summary in the run history (`audit --history DB`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from gpuaudit.model import AuditResult
from gpuaudit.report import history
from gpuaudit.report.build import analyse, cluster_name, run_summary, settings_from_config
from gpuaudit.sources.user_config import Config


def record_audit(path: Path, result: AuditResult, config: Config, snapshot: Mapping[str, Any]) -> None:
    """Add this audit's counts to the history at ``path``.

    Raises history.HistoryError when the database cannot be used, and
    ValueError for an invalid price in config or when a node's GPUs are
    unknown (its totals are incomplete).
    """
    if result.state is None:
        raise ValueError("only a cluster audit has counts to record")
    incomplete = result.state.unknown_gpus_note()
    if incomplete is None and result.state.unread:
        incomplete = f"could not read {', '.join(sorted(result.state.unread))}: a partial run is not a trend point"
    if incomplete is not None:
        raise ValueError(incomplete)
    settings = replace(settings_from_config(config.report), cluster_name=cluster_name(config.report, snapshot))
    analysis = analyse(result.state, result.subjects, result, settings)
    history.record(path, run_summary(analysis, "audit"))
