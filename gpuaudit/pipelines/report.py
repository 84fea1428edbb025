"""The capacity review: a cluster audit -> the analysis -> the run history ->
report.html, report.md and report.json in one folder."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from msgspec.structs import replace

from gpuaudit.files import inside
from gpuaudit.model import AuditResult, InputError
from gpuaudit.pipelines.fix import FixOptions, plan_fix
from gpuaudit.report import history
from gpuaudit.report.build import ReportSettings, analyse, assemble, cluster_name, run_summary
from gpuaudit.report.fleet import fleet
from gpuaudit.report.period import Period, month_of
from gpuaudit.report.render import report_paths, write_fleet, write_report
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


def fix_overlay(snapshot: Mapping[str, Any], result: AuditResult, config: Config) -> dict[str, Any]:
    """What `gpuaudit fix` would write for this cluster, as plain data for the
    what-if: each workload a patch moves to a MIG profile or a shared GPU (with
    the planner's VRAM need), and the time-slicing replicas the overlay's
    sharing config sets. The report counts only what these patches achieve."""
    try:
        plan, _ = plan_fix(FixOptions(), dict(snapshot), None, config, result.rules)
    except Exception as exc:
        return {
            "available": False,
            "problem": f"the fix plan could not be made: {exc}",
            "shares": [],
            "replicas": None,
            "rules": {},
            "sharing_rules": [],
        }
    shares = []
    sharing_rules: set[str] = set()
    # per rule: the patches the plan writes for its findings, and why it declines the others
    outcomes: dict[str, dict[str, Any]] = {}
    for change in plan.changes:
        for rule in change.rules:
            outcome = outcomes.setdefault(rule, {"patched": 0, "declined": 0, "reasons": []})
            outcome["patched"] += 1
            outcome.setdefault("targets", []).append(list(change.target[1:]))  # [kind, namespace, name]
            if change.remediation not in outcome.setdefault("remediations", []):
                outcome["remediations"].append(change.remediation)
    for skip in plan.skipped:
        outcome = outcomes.setdefault(skip.finding.rule, {"patched": 0, "declined": 0, "reasons": []})
        outcome["declined"] += 1
        res = skip.finding.resource
        outcome.setdefault("declines", []).append([res.kind, res.namespace, res.name, skip.reason])
        if skip.reason not in outcome["reasons"] and len(outcome["reasons"]) < 3:
            outcome["reasons"].append(skip.reason)
    replicas = None
    for change in plan.changes:
        proposal = change.proposal
        share = getattr(proposal, "share", None)
        if change.remediation == "enable-time-slicing":
            sharing_rules.update(change.rules)
            value = (proposal.params or {}).get("replicas")
            replicas = int(value) if isinstance(value, int) and value > 1 else replicas
        if share is None:
            continue
        if share.mig_profile is None:  # time-sliced: needs the sharing config's patch beside it
            for rule in change.rules:
                outcomes[rule]["time_sliced"] = True
        _, kind, namespace, name = change.target
        shares.append(
            {
                "namespace": namespace,
                "kind": kind,
                "name": name,
                "remediation": change.remediation,
                "rules": change.rules,
                "resource": share.resource,
                "mig_profile": share.mig_profile,
                "model": share.model.model if share.model is not None else None,
                "need_mib": share.need_mib,
                "confidence": proposal.confidence,
            }
        )
    # A time-sliced move and the sharing config go together: a command that
    # fixes either alone writes none of it (the config is sized only from the
    # measured moves beside it).
    moves = {rule for rule, outcome in outcomes.items() if outcome.get("time_sliced")}
    for rule, outcome in outcomes.items():
        if rule in moves:
            outcome["with_rules"] = sorted(sharing_rules - {rule})
        elif rule in sharing_rules and moves:
            outcome["with_rules"] = sorted(moves - {rule})
    return {
        "available": True,
        "problem": None,
        "shares": shares,
        "replicas": replicas,
        "rules": outcomes,
        "sharing_rules": sorted(sharing_rules),
    }


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
    name: str | None = None,
) -> tuple[list[Path], dict[str, Any]]:
    """Write the review of ``result`` (a cluster audit of ``snapshot``) to
    ``out_dir``, recording this run in the history unless ``record`` is False.

    The output paths are checked before the run is recorded, so a report that
    cannot be written there leaves the history as it was.

    Raises history.HistoryError when the history cannot be used,
    UnsafePathError or OSError (files.WriteError naming the file) when the
    report cannot be written."""
    settings = replace(settings, cluster_name=name or cluster_name(config.report, snapshot))
    report_paths(out_dir)
    history.check_location(database)
    progress("building the capacity review")
    progress("planning the fix overlay")
    analysis = analyse(result.state, result.subjects, result, settings, fix_overlay(snapshot, result, config))
    partial = analysis.document["partial"]
    incomplete = result.state.unknown_gpus_note() or (
        f"could not read {', '.join(partial['unread'])}" if partial["partial"] else None
    )
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


def _folder(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")[:60] or "cluster"
    folder, n = base, 2
    while folder in taken:
        folder, n = f"{base}-{n}", n + 1
    taken.add(folder)
    return folder


def write_fleet_review(
    clusters: Sequence[tuple[Mapping[str, Any], AuditResult]],
    config: Config,
    settings: ReportSettings,
    out_dir: Path,
    *,
    database: Path,
    record: bool,
    period: Period | None,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[list[Path], dict[str, Any]]:
    """One review per cluster (each in its own folder under ``out_dir``,
    each recorded in the history under its own name), and the fleet review
    in ``out_dir``: the clusters side by side, with totals that are their sums.

    A cluster is named by its snapshot (kubeconfig context, else API server):
    config ``report.cluster_name`` names one cluster, not a fleet. Two
    snapshots with one name are refused (ValueError): their runs would mix."""
    names = [cluster_name({}, snapshot) for snapshot, _ in clusters]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ValueError(
            f"several snapshots name the cluster {', '.join(doubled)}: a fleet review needs one per cluster"
        )
    report_paths(out_dir)
    taken: set[str] = set()
    written: list[Path] = []
    documents: list[tuple[dict[str, Any], str]] = []
    for (snapshot, result), name in zip(clusters, names, strict=True):
        folder = _folder(name, taken)
        progress(f"reviewing {name}")
        files, document = write_review(
            snapshot,
            result,
            config,
            settings,
            out_dir / folder,
            database=database,
            record=record,
            period=period,
            progress=progress,
            name=name,
        )
        written.extend(files)
        documents.append((document, folder))
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    document = fleet(documents, generated_at=stamp)
    return [*write_fleet(document, out_dir), *written], document
