"""`gpuaudit report`: the capacity review (report.html, report.md, report.json)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuaudit.cli.options import (
    OutputSpec,
    fail_with,
    formats_callback,
    input_errors_code,
    output_targets,
    policy_options,
    publish_options,
    read_config,
    stop,
    write_outputs,
)
from gpuaudit.cli.progress import Status
from gpuaudit.cli.source_options import cluster_options, read_cluster, snapshot_files, telemetry_options
from gpuaudit.files import UnsafePathError, WriteError
from gpuaudit.model.cluster_builder import kept_for_audit
from gpuaudit.pipelines.audit import audit_cluster
from gpuaudit.pipelines.publish import Targets, metrics_context, publish
from gpuaudit.pipelines.report import history_database, write_fleet_review, write_review
from gpuaudit.report.build import settings_from_config
from gpuaudit.report.history import HistoryError
from gpuaudit.report.period import month

if TYPE_CHECKING:
    from gpuaudit.pipelines.policy import PolicyOptions
    from gpuaudit.sources.cluster_read import ClusterSource
    from gpuaudit.sources.telemetry import TelemetryRequest


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
    help="SQLite run history to record this run in and chart the trend from "
    "[default: config report.history, else OUT/history.sqlite].",
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
@click.option(
    "-o",
    "--output",
    "output_formats",
    multiple=True,
    metavar="FORMAT[=FILE]",
    callback=formats_callback,
    help="Also write the audit behind the review in this format (as `audit -o`), to stdout or FILE "
    "(repeatable), e.g. openmetrics=OUT/metrics.txt.",
)
@publish_options
def report(
    cluster: ClusterSource,
    telemetry: TelemetryRequest,
    policy: PolicyOptions,
    out_dir: Path,
    history_path: Path | None,
    no_record: bool,
    period: str | None,
    prices: tuple[str, ...],
    time_slicing_replicas: int | None,
    output_formats: tuple[str, ...],
    publishing: Targets,
) -> int:
    """Write the capacity review of a live cluster (or --snapshot FILE) to --out DIR.

    Several --snapshot files (or a folder of them) make a fleet review: one
    review per cluster in its own folder, and the fleet's side by side."""
    clock = time.monotonic()
    targets = output_targets(output_formats, None)  # usage errors before the run
    config = read_config(policy.config_path)
    try:
        settings = settings_from_config(
            config.report, price_overrides=prices, time_slicing_replicas=time_slicing_replicas
        )
        chosen = month(period) if period else None
    except ValueError as exc:
        stop(str(exc))
    rules, rule_errors = policy.load(config)
    files = snapshot_files(cluster)
    if len(files) > 1:
        if targets or publishing.any:
            stop("-o, --pushgateway and --webhook-url apply to one cluster's review, not to a fleet review")
        if telemetry.given:
            stop(
                "a fleet review reads the telemetry inside each snapshot; --prometheus and --samples name one cluster's"
            )

        def read(path: Path) -> tuple[dict[str, Any], str | None]:
            return read_cluster(config, cluster, telemetry, snapshot_path=path, each=kept_for_audit)

        return _fleet(files, read, config, rules, rule_errors, settings, out_dir, history_path, no_record, chosen)
    snapshot, problem = read_cluster(config, cluster, telemetry, each=kept_for_audit)
    status = Status()
    status(f"judging {len(snapshot['objects'].get('pods') or []):,} pods")
    result = audit_cluster(snapshot, config, rules, telemetry_problem=problem)
    result.errors[:0] = rule_errors
    written, document = _writing(
        out_dir,
        lambda: write_review(
            snapshot,
            result,
            config,
            settings,
            out_dir,
            database=history_database(config, history_path, out_dir),
            record=not no_record,
            period=chosen,
            progress=status,
        ),
    )
    status.clear()
    _print_errors(result.errors)
    first = document["first_screen"]

    def shown(value: Any) -> str:
        return "unknown" if value is None else f"{value:g}"

    click.echo(
        f"wrote {', '.join(str(p) for p in written)}: {shown(first['gpus']['total'])} GPUs, "
        f"{shown(first['gpus']['allocated'])} allocated, {shown(first['gpus']['active'])} active, "
        f"{shown(first['pending']['gpus'])} pending ({shown(first['pending']['hardware_gpus'])} for lack of GPUs), "
        f"{shown(first['whatif']['achievable'])} freed by the fix overlay; {first['gate']['headline'].lower()}"
        + ("; partial input, not recorded" if document.get("partial") else ""),
        err=True,
    )
    failed = _outputs(result, document, targets, publishing, clock, output_formats)
    fail_with(failed)
    return input_errors_code(result.errors)


def _outputs(
    result: Any,
    document: dict[str, Any],
    targets: list[tuple[str, Path | None]],
    publishing: Targets,
    clock: float,
    output_formats: tuple[str, ...],
) -> list[str]:
    """The formats asked for with -o, then the Pushgateway and the webhook
    (last: one that is down loses nothing else). What failed, as messages."""
    if not targets and not publishing.any:
        return []
    from gpuaudit.output.openmetrics import partial, render_text

    context: dict[str, Any] = {}
    if publishing.pushgateway or any(name == "openmetrics" for name, _ in targets):
        context = metrics_context(result, finished_at=time.time(), duration=time.monotonic() - clock)
    failed = write_outputs(result, OutputSpec(formats=output_formats), context) if targets else []
    text = render_text(result, **context) if publishing.pushgateway else None
    partial_run = bool(document.get("partial")) or partial(result)
    return failed + publish(
        publishing, result, command="report", metrics_text=text, review=document, partial=partial_run
    )


def _fleet(
    files: list[Path],
    read: Callable[[Path], tuple[dict[str, Any], str | None]],
    config: Any,
    rules: Any,
    rule_errors: list[Any],
    settings: Any,
    out_dir: Path,
    history_path: Path | None,
    no_record: bool,
    chosen: Any,
) -> int:
    """The fleet review of several snapshots (each read by ``read``): each audited alone, then reviewed together."""
    status = Status()
    clusters = []
    errors = list(rule_errors)
    for path in files:
        snapshot, problem = read(path)
        status(f"judging {path.name}")
        result = audit_cluster(snapshot, config, rules, telemetry_problem=problem)
        errors += result.errors
        clusters.append((snapshot, result))
    written, _ = _writing(
        out_dir,
        lambda: write_fleet_review(
            clusters,
            config,
            settings,
            out_dir,
            database=history_database(config, history_path, out_dir),
            record=not no_record,
            period=chosen,
            progress=status,
        ),
        refused=(ValueError,),  # two snapshots of one cluster
    )
    status.clear()
    _print_errors(errors)
    click.echo(f"wrote {len(written)} files: a fleet review of {len(clusters)} clusters in {out_dir}", err=True)
    return input_errors_code(errors)


Written = tuple[list[Path], dict[str, Any]]


def _writing(out_dir: Path, write: Callable[[], Written], refused: tuple[type[Exception], ...] = ()) -> Written:
    """Run ``write``; what stops it (an unusable history, an unsafe path, a
    file that cannot be written, and ``refused``) ends the run with one line."""
    try:
        return write()
    except (HistoryError, UnsafePathError, *refused) as exc:
        stop(str(exc))
    except OSError as exc:  # files.WriteError names the file
        stop(str(exc) if isinstance(exc, WriteError) else f"cannot write the report to {out_dir}: {exc}")


def _print_errors(errors: list[Any]) -> None:
    for error in errors:
        where = f"{error.file}:{error.line}" if error.line else error.file
        click.echo(f"gpuaudit: {error.level}: {where}: {error.message}", err=True)
