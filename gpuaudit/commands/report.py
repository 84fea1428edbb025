"""`gpuaudit report`: the capacity review (report.html, report.md, report.json)."""

from __future__ import annotations

import sys
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from gpuaudit.audit import audit_cluster, load_policy
from gpuaudit.cli import load_config_or_exit, policy_options, split_names
from gpuaudit.commands.progress import Status
from gpuaudit.commands.sources import (
    cluster_options,
    load_snapshot,
    load_telemetry,
    split_source_options,
    telemetry_options,
)

HISTORY_NAME = "history.sqlite"


@click.command()
@cluster_options
@telemetry_options
@policy_options
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Folder for report.html, report.md and report.json (created when missing).",
)
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"SQLite run history to record this run in and chart the trend from "
    f"[default: config report.history, else OUT/{HISTORY_NAME}].",
)
@click.option("--no-record", is_flag=True, help="Read the history but do not add this run.")
@click.option("--period", help="Reporting month, e.g. 2026-11 [default: the snapshot's month].")
@click.option(
    "--gpu-hour-price",
    "prices",
    multiple=True,
    help="Price per GPU-hour: a number, or MODEL=PRICE per catalogue model (repeatable; "
    "overrides config report.gpu_hour_price).",
)
@click.option(
    "--time-slicing-replicas",
    type=click.IntRange(2, 64),
    help="Replicas per GPU in the time-slicing what-if [default: config, else 4].",
)
def report(
    config_path: Path | None,
    policy_dirs: tuple[Path, ...],
    include: str,
    exclude: str,
    out_dir: Path,
    history_path: Path | None,
    no_record: bool,
    period: str | None,
    prices: tuple[str, ...],
    time_slicing_replicas: int | None,
    **sources: Any,
) -> None:
    """Write the capacity review of a live cluster (or --snapshot FILE) to --out DIR."""
    from gpuaudit.report import history
    from gpuaudit.report.build import (
        analyse,
        assemble,
        cluster_name,
        run_summary,
        settings_from_config,
    )
    from gpuaudit.report.period import month, month_of
    from gpuaudit.report.render import write_report

    config = load_config_or_exit(config_path)
    try:
        settings = settings_from_config(
            config.report, price_overrides=prices, time_slicing_replicas=time_slicing_replicas
        )
        chosen = month(period) if period else None
    except ValueError as exc:
        click.echo(f"gpuaudit: {exc}", err=True)
        sys.exit(2)
    rules, rule_errors = load_policy(config, policy_dirs, split_names(include), split_names(exclude))
    cluster, telemetry = split_source_options(sources)
    snapshot = load_snapshot(**cluster)
    problem = load_telemetry(snapshot, config, **telemetry)
    status = Status()
    status(f"judging {len(snapshot['objects'].get('pods') or []):,} pods")
    result = audit_cluster(snapshot, config, rules, telemetry_problem=problem)
    result.errors[:0] = [*config.warnings, *rule_errors]

    settings = replace(settings, cluster_name=cluster_name(config.report, snapshot))
    status("building the capacity review")
    analysis = analyse(result.state, result.subjects, result, settings)
    configured = config.report.get("history")
    if history_path is None and configured:
        base = config.path.parent if config.path else Path.cwd()
        history_path = base / str(configured)
    database = history_path or out_dir / HISTORY_NAME
    try:
        if not no_record:
            history.record(database, run_summary(analysis, "report"))
        runs = history.runs(database, analysis.cluster)
    except history.HistoryError as exc:
        click.echo(f"gpuaudit: {exc}", err=True)
        sys.exit(2)
    document = assemble(
        analysis,
        runs=runs,
        period=chosen or month_of(analysis.collected_at),
        generated_at=datetime.now(timezone.utc),
        settings=settings,
        history=str(database),
    )
    document["method"]["absent_apis"] = list(snapshot.get("absent") or [])
    document["method"]["pods"] = {
        "in_snapshot": len(snapshot["objects"].get("pods") or []),
        "that_may_use_gpus": len(result.state.pods),
    }
    status("writing the report")
    try:
        written = write_report(document, out_dir)
    except OSError as exc:
        click.echo(f"gpuaudit: cannot write the report to {out_dir}: {exc}", err=True)
        sys.exit(2)
    status.clear()
    for error in result.errors:
        where = f"{error.file}:{error.line}" if error.line else error.file
        click.echo(f"gpuaudit: {error.level}: {where}: {error.message}", err=True)
    first = document["first_screen"]
    click.echo(
        f"wrote {', '.join(str(p) for p in written)}: {first['gpus']['total']:g} GPUs, "
        f"{first['gpus']['allocated']:g} allocated, {first['gpus']['active']:g} active, "
        f"{first['pending']['gpus']:g} pending; {first['gate']['headline'].lower()}",
        err=True,
    )
    sys.exit(2 if any(e.level == "error" for e in result.errors) else 0)
