"""`gpuaudit audit`: judge a live cluster (or a snapshot), with telemetry."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gpuaudit.audit import audit_cluster, load_policy
from gpuaudit.cli import emit, load_config_or_exit, output_options, policy_options, split_names
from gpuaudit.commands.sources import (
    cluster_options,
    load_snapshot,
    load_telemetry,
    telemetry_options,
)


@click.command()
@cluster_options
@telemetry_options
@policy_options
@output_options
def audit(
    snapshot_path: Path | None,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    request_timeout: float,
    deadline: float,
    config_path: Path | None,
    policy_dirs: tuple[Path, ...],
    include: str,
    exclude: str,
    formats: tuple[str, ...],
    output: Path | None,
    fail_on: str | None,
    **telemetry: Any,
) -> None:
    """Audit a live cluster read-only (or --snapshot FILE), with GPU telemetry
    from --prometheus or --samples when given."""
    config = load_config_or_exit(config_path)
    rules, rule_errors = load_policy(
        config, policy_dirs, split_names(include), split_names(exclude)
    )
    snapshot = load_snapshot(
        snapshot_path=snapshot_path,
        kubeconfig=kubeconfig,
        context=context,
        in_cluster=in_cluster,
        request_timeout=request_timeout,
        deadline=deadline,
    )
    problem = load_telemetry(snapshot, config, **telemetry)
    result = audit_cluster(snapshot, config, rules, telemetry_problem=problem)
    result.errors[:0] = [*config.warnings, *rule_errors]
    emit(result, formats, output)
    sys.exit(result.exit_code(fail_on or config.fail_on or "high"))
