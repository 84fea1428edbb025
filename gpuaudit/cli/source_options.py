"""The options of the commands that read a live cluster or a snapshot, and
GPU telemetry (audit, snapshot, report, fix), and their reading, with what
stops it said as the CLI says it (sources/cluster_read.py does the work)."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuaudit.cli.options import OptionGroup, stop
from gpuaudit.sources import cluster_read
from gpuaudit.sources.cluster_read import ClusterReadError, ClusterSource
from gpuaudit.sources.scope import Scope, SelectorError
from gpuaudit.sources.telemetry import OptionError, TelemetryRequest
from gpuaudit.sources.user_config import Config

if TYPE_CHECKING:
    from gpuaudit.sources.snapshot import Transform

_SIZE = re.compile(r"^\s*(\d+)\s*(Ki|Mi|Gi|Ti|k|M|G|T)?i?B?\s*$")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def bytes_option(ctx: click.Context, param: click.Parameter, value: str | int | None) -> int | None:
    """A size in bytes: a number, or one with a unit as Kubernetes writes it
    (256Mi, 2Gi, 500M)."""
    if value is None or isinstance(value, int):
        return value
    m = _SIZE.match(value)
    if m is None or int(m[1]) * _UNITS[m[2]] < 1024:
        raise click.BadParameter(f"{value!r} is not a size of at least 1Ki (e.g. 256Mi, 2Gi)")
    return int(m[1]) * _UNITS[m[2]]


cluster_options = OptionGroup(
    "cluster",
    ClusterSource,
    click.option(
        "--snapshot",
        "snapshot_paths",
        multiple=True,
        type=click.Path(exists=True, path_type=Path),
        help="Audit this snapshot file instead of a live cluster (`gpuaudit report`: repeatable, "
        "or a folder of snapshots, for a fleet review).",
    ),
    click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False),
        help="kubeconfig file (default: $KUBECONFIG).",
    ),
    click.option("--context", help="kubeconfig context."),
    click.option("--in-cluster", is_flag=True, help="Use the pod's service account."),
    click.option(
        "--request-timeout",
        type=float,
        default=30.0,
        show_default=True,
        help="Seconds per API request.",
    ),
    click.option(
        "--page-size",
        type=click.IntRange(1, 10000),
        default=500,
        show_default=True,
        help="Objects per list request.",
    ),
    click.option(
        "--deadline",
        type=float,
        default=300.0,
        show_default=True,
        help="Seconds for the whole collection.",
    ),
    click.option(
        "--max-response-bytes",
        default="256Mi",
        show_default=True,
        callback=bytes_option,
        metavar="SIZE",
        help="The most one API answer may take; a larger one is not read (that list is reported "
        "missing: a partial audit).",
    ),
    click.option(
        "--max-list-bytes",
        default="1Gi",
        show_default=True,
        callback=bytes_option,
        metavar="SIZE",
        help="The most all the API answers of one collection may take together; past it, the list "
        "being read and those after it are reported missing (a partial audit).",
    ),
)


telemetry_options = OptionGroup(
    "telemetry",
    TelemetryRequest,
    click.option(
        "--prometheus",
        "prometheus_url",
        help="Prometheus-compatible URL with DCGM exporter series.",
    ),
    click.option("--window", default="7d", show_default=True, help="Telemetry window (e.g. 24h, 7d)."),
    click.option("--step", default="60s", show_default=True, help="Resolution of the telemetry aggregation."),
    click.option(
        "--until",
        type=click.DateTime(["%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%d"]),
        help="End of the telemetry window, UTC (default: now).",
    ),
    click.option(
        "--prometheus-token-file",
        type=click.Path(exists=True, dir_okay=False),
        help="File holding a bearer token for Prometheus.",
    ),
    click.option(
        "--prometheus-user",
        help="Basic-auth user (password from $GPUAUDIT_PROMETHEUS_PASSWORD).",
    ),
    click.option("--prometheus-ca", type=click.Path(exists=True, dir_okay=False), help="CA bundle."),
    click.option("--prometheus-header", multiple=True, help="Extra header NAME=VALUE (repeatable)."),
    click.option(
        "--samples",
        "sample_files",
        multiple=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="NVML samples written by `gpuaudit sample` (repeatable).",
    ),
)


scope_options = OptionGroup(
    "scope",
    Scope.from_options,
    click.option(
        "-n",
        "--namespace",
        "namespaces",
        multiple=True,
        metavar="NAMESPACE[,...]",
        help="Only pods and namespaced workloads in these namespaces (repeatable or comma-separated). "
        "Nodes are still read whole, so capacity stays the cluster's.",
    ),
    click.option(
        "-l",
        "--selector",
        "pod_selector",
        metavar="SELECTOR",
        help="Only pods matching this label selector, as in kubectl (app=x,tier!=web,env in (a,b)); "
        "the API server filters the pod list.",
    ),
)


class _Progress:
    """The count of objects read so far, on one line of a terminal's stderr."""

    shown = False

    def __call__(self, resource: str, count: int) -> None:
        self.shown = True
        click.echo(f"\r  reading {resource}: {count:,}   ", err=True, nl=False)

    def end(self) -> None:
        if self.shown:
            click.echo("", err=True)
            self.shown = False


@contextlib.contextmanager
def reading(progress: _Progress | None = None) -> Iterator[None]:
    """What stops reading a cluster or its telemetry, said as the CLI says
    it (after the progress line ends): a usage error for an option it cannot
    read, exit 2 for a cluster or a config it cannot use."""
    from gpuaudit.sources.promql import QueryConfigError

    try:
        try:
            yield
        finally:
            if progress is not None:
                progress.end()
    except ClusterReadError as exc:
        stop(str(exc))
    except SelectorError as exc:
        raise click.BadParameter(str(exc), param_hint="--selector") from None
    except OptionError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.option) from None
    except QueryConfigError as exc:  # the site's query override is wrong: a usage error
        stop(f"telemetry.queries in config: {exc}")


def read_cluster(
    config: Config,
    cluster: ClusterSource,
    telemetry: TelemetryRequest,
    scope: Scope | None = None,
    *,
    snapshot_path: Path | None = None,
    each: Transform | None = None,
) -> tuple[dict[str, Any], str | None]:
    """sources.cluster_read.read_cluster, with a live cluster's progress on
    a terminal, and what stops it said (:func:`reading`)."""
    progress = _Progress() if sys.stderr.isatty() else None
    with reading(progress):
        return cluster_read.read_cluster(
            config, cluster, telemetry, scope, snapshot_path=snapshot_path, each=each, progress=progress
        )


def snapshot_files(cluster: ClusterSource) -> list[Path]:
    """The snapshot files ``cluster`` names (a folder: the snapshots in it)."""
    try:
        return cluster.snapshot_files()
    except ClusterReadError as exc:
        stop(str(exc))
