"""`gpuaudit snapshot`: record what an audit uses, to replay it offline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuaudit.cli.options import read_config, stop
from gpuaudit.cli.source_options import cluster_options, read_cluster, telemetry_options
from gpuaudit.sources.snapshot import SnapshotError, write_snapshot

if TYPE_CHECKING:
    from gpuaudit.sources.cluster_read import ClusterSource
    from gpuaudit.sources.telemetry import TelemetryRequest


@click.command()
@click.option(
    "--output-file",
    "output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Snapshot file (.json, or .json.gz compressed).",
)
# Before --output-file (-o is a format in check and audit, as in kubectl):
# still read, no longer shown.
@click.option("-o", "--output", "legacy_output", type=click.Path(dir_okay=False, path_type=Path), hidden=True)
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path))
@cluster_options
@telemetry_options
def snapshot(
    output: Path | None,
    legacy_output: Path | None,
    config_path: Path | None,
    cluster: ClusterSource,
    telemetry: TelemetryRequest,
) -> int:
    """Collect cluster objects (and telemetry) read-only into one file (--output-file)."""
    output = output or legacy_output
    if output is None:
        raise click.UsageError("give the snapshot file: --output-file FILE")

    config = read_config(config_path)
    data, problem = read_cluster(config, cluster, telemetry)
    try:
        write_snapshot(data, output)
    except SnapshotError as exc:
        stop(str(exc))
    counts = ", ".join(f"{len(v)} {k}" for k, v in data["objects"].items() if v)
    click.echo(f"wrote {output}: {counts}", err=True)
    for error in data.get("errors") or []:
        click.echo(f"gpuaudit: could not read {error['resource']}: {error['message']}", err=True)
    for skipped in data.get("forbidden") or []:
        click.echo(
            f"gpuaudit: warning: could not read {skipped['resource']} (optional, forbidden): {skipped['note']}",
            err=True,
        )
    if problem:
        click.echo(f"gpuaudit: telemetry unavailable: {problem}", err=True)
    return 2 if data.get("errors") or problem else 0
