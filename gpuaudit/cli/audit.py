"""`gpuaudit audit`: judge a live cluster (or a snapshot), with telemetry."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec

from gpuaudit.cli.options import (
    OutputSpec,
    exit_code,
    fail_with,
    output_options,
    output_targets,
    policy_options,
    publish_options,
    read_config,
    stop,
    write_outputs,
)
from gpuaudit.cli.progress import Status
from gpuaudit.cli.source_options import cluster_options, read_cluster, scope_options, telemetry_options
from gpuaudit.model.cluster_builder import kept_for_audit
from gpuaudit.pipelines.audit import audit_cluster
from gpuaudit.pipelines.publish import Targets, metrics_context, publish
from gpuaudit.pipelines.record import record_audit
from gpuaudit.report.history import HistoryError
from gpuaudit.sources.snapshot import SnapshotError, keep_objects, write_snapshot

if TYPE_CHECKING:
    from gpuaudit.pipelines.policy import PolicyOptions
    from gpuaudit.sources.cluster_read import ClusterSource
    from gpuaudit.sources.scope import Scope
    from gpuaudit.sources.telemetry import TelemetryRequest


@click.command()
@cluster_options
@scope_options
@telemetry_options
@policy_options
@output_options
@publish_options
@click.option(
    "--save-snapshot",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the snapshot this audit used (replay it with --snapshot).",
)
@click.option(
    "--history",
    "history_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Record this run's GPU counts in a SQLite history (for `gpuaudit report`'s trend).",
)
def audit(
    cluster: ClusterSource,
    scope: Scope,
    telemetry: TelemetryRequest,
    policy: PolicyOptions,
    output: OutputSpec,
    publishing: Targets,
    save_snapshot: Path | None,
    history_path: Path | None,
) -> int:
    """Audit a live cluster read-only (or --snapshot FILE), with GPU telemetry
    from --prometheus or --samples when given; -n/-l narrow it to namespaces
    and a pod label selector."""
    clock = time.monotonic()
    targets = output_targets(output.formats, output.output_file)  # usage errors before the run
    config = read_config(policy.config_path)
    rules, rule_errors = policy.load(config)
    # A snapshot to save is read whole, and written so; the audit then keeps
    # of its objects what it keeps of any, so that their memory goes to the
    # model (50,000 pods: a peak of 654 MiB, 695 MiB with them all whole).
    snapshot, problem = read_cluster(config, cluster, telemetry, scope, each=None if save_snapshot else kept_for_audit)
    if save_snapshot is not None:
        try:
            write_snapshot(snapshot, save_snapshot)
        except SnapshotError as exc:
            stop(str(exc))
        keep_objects(snapshot, kept_for_audit)
    status = Status()
    status(f"judging {len(snapshot['objects'].get('pods') or []):,} pods")
    result = audit_cluster(snapshot, config, rules, telemetry_problem=problem)
    result.errors[:0] = rule_errors
    status.clear()
    threshold = output.fail_on or config.fail_on or "high"
    context = {}
    if publishing.pushgateway or any(name == "openmetrics" for name, _ in targets):
        context = metrics_context(result, finished_at=time.time(), duration=time.monotonic() - clock)
    failed = write_outputs(result, msgspec.structs.replace(output, fail_on=threshold), context)
    if history_path is not None:
        try:
            record_audit(history_path, result, config, snapshot)
        except (HistoryError, ValueError) as exc:
            failed.append(f"history not recorded: {exc}")
    # Sent last, once every file is written: a webhook that is down loses nothing else.
    failed += _publish(publishing, result, context, config, snapshot)
    fail_with(failed)
    return exit_code(result, threshold)


def _publish(targets: Targets, result: Any, context: dict[str, Any], config: Any, snapshot: dict) -> list[str]:
    if not targets.any:
        return []
    from gpuaudit.output.openmetrics import partial, render_text
    from gpuaudit.report.build import cluster_name  # the name the review gives the cluster

    cluster = cluster_name(config.report, snapshot)
    text = render_text(result, **context) if targets.pushgateway else None
    return publish(targets, result, command="audit", metrics_text=text, cluster=cluster, partial=partial(result))
