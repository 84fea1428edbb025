"""Options and loading shared by the commands that read a live cluster or a
snapshot, and GPU telemetry (audit, snapshot, report, fix).

The sources are imported where they are used: a run from a snapshot file
never loads the Kubernetes client, and one without --prometheus no HTTP code."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gpuaudit.cli.options import option_group, stop
from gpuaudit.durations import parse_duration
from gpuaudit.files import FileReadError, read_bytes, read_text
from gpuaudit.sources.user_config import Config

if TYPE_CHECKING:
    from gpuaudit.sources.snapshot import Transform

# A bearer token (a service-account JWT) is 1-2 KiB; a CA bundle (the whole
# Mozilla set) about 220 KiB.
MAX_TOKEN_BYTES = 64 * 1024
MAX_CA_BYTES = 16 * 1024 * 1024


def seconds_option(value: str, option: str) -> int:
    try:
        seconds = round(parse_duration(value))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None
    if seconds <= 0:
        raise click.BadParameter(f"{value!r} is not a positive duration", param_hint=option)
    return seconds


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


cluster_options = option_group(
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


telemetry_options = option_group(
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


scope_options = option_group(
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

# Snapshot lists of namespaced objects that --namespace narrows (nodes,
# ClusterPolicies, ResourceSlices and the device-plugin ConfigMaps describe
# the cluster: they stay whole).
NAMESPACED_KEYS = ("pods", "events", "replicasets", "jobs", "workloads", "resourceclaims", "kueueworkloads")


def namespaces_option(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(n.strip() for v in values for n in v.split(",") if n.strip())


_SET_TERM = re.compile(
    r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(==|=|!=)\s*([A-Za-z0-9_.-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$"
)


def label_matcher(selector: str) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over labels for kubectl's selector syntax (equality- and
    set-based); a BadParameter naming the term it cannot read."""
    terms: list[tuple[str, str, str, frozenset[str]]] = []
    for raw in re.split(r",(?![^(]*\))", selector):
        if not raw.strip():
            continue
        m = _SET_TERM.match(raw)
        if m is None or (m[1] and (m[3] or m[5])):
            raise click.BadParameter(f"cannot read the selector term {raw.strip()!r}", param_hint="--selector")
        negated, key, op, value, set_op, values = m.groups()
        if negated:
            terms.append((key, "!", "", frozenset()))
        elif op:
            terms.append((key, "!=" if op == "!=" else "=", value, frozenset()))
        elif set_op:
            terms.append((key, set_op, "", frozenset(v.strip() for v in values.split(",") if v.strip())))
        else:
            terms.append((key, "exists", "", frozenset()))

    def matches(labels: Mapping[str, Any]) -> bool:
        for key, op, value, values in terms:
            present = key in labels
            have = str(labels.get(key)) if present else None
            ok = {
                "!": not present,
                "exists": present,
                "=": have == value,
                "!=": have != value,
                "in": have in values,
                "notin": have not in values,
            }[op]
            if not ok:
                return False
        return True

    return matches


def narrow_snapshot(snapshot: dict[str, Any], namespaces: Sequence[str], pod_selector: str | None) -> None:
    """Keep the namespaced objects in ``namespaces`` and the pods that match
    ``pod_selector`` (in place). The API server filtered a live cluster's pod
    list already; a snapshot file is filtered here alike."""
    objects = snapshot.get("objects") or {}
    if namespaces:
        wanted = set(namespaces)
        for key in NAMESPACED_KEYS:
            items = objects.get(key)
            if isinstance(items, list):
                objects[key] = [
                    o
                    for o in items
                    if isinstance(o, dict) and ((o.get("metadata") or {}).get("namespace") or "default") in wanted
                ]
    if pod_selector:
        matches = label_matcher(pod_selector)
        pods = objects.get("pods")
        if isinstance(pods, list):
            objects["pods"] = [
                p for p in pods if isinstance(p, dict) and matches((p.get("metadata") or {}).get("labels") or {})
            ]


CLUSTER_PARAMS = (
    "kubeconfig",
    "context",
    "in_cluster",
    "request_timeout",
    "page_size",
    "deadline",
    "max_response_bytes",
    "max_list_bytes",
)
TELEMETRY_PARAMS = (
    "prometheus_url",
    "window",
    "step",
    "until",
    "prometheus_token_file",
    "prometheus_user",
    "prometheus_ca",
    "prometheus_header",
    "sample_files",
)


def snapshot_files(options: dict[str, Any]) -> list[Path]:
    """The --snapshot files asked for, a folder read as the snapshots in it."""
    files: list[Path] = []
    for path in options.get("snapshot_paths") or ():
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
            if not found:
                stop(f"{path}: no snapshot (*.json, *.json.gz) in this folder")
            files += found
        else:
            files.append(path)
    return files


def read_cluster(
    config: Config,
    options: dict[str, Any],
    snapshot_path: Path | None = None,
    each: Transform | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The snapshot that cluster_options and telemetry_options ask for (narrowed
    by scope_options when given), with its telemetry; and why telemetry could
    not be read, if it could not. ``snapshot_path``: one of several --snapshot
    files (a fleet); otherwise the one --snapshot, or the live cluster.
    ``each``: what to keep of each object read (load_snapshot)."""
    if snapshot_path is None:
        files = snapshot_files(options)
        if len(files) > 1:
            stop("several snapshots make a fleet review: only `gpuaudit report` reads more than one")
        snapshot_path = files[0] if files else None
    namespaces = namespaces_option(options.get("namespaces") or ())
    pod_selector = options.get("pod_selector") or None
    if pod_selector:
        label_matcher(pod_selector)  # a usage error before any request
    snapshot = load_snapshot(
        snapshot_path=snapshot_path,
        each=each,
        **{k: options[k] for k in CLUSTER_PARAMS if k in options},
        **({"pod_selector": pod_selector} if pod_selector else {}),
    )
    if namespaces or pod_selector:
        narrow_snapshot(snapshot, namespaces, pod_selector)
    problem = load_telemetry(
        snapshot,
        config,
        **{k: options[k] for k in TELEMETRY_PARAMS if k in options},
        # --request-timeout and --deadline bound Prometheus as they bound the API server.
        request_timeout=options.get("request_timeout"),
        deadline=options.get("deadline"),
    )
    return snapshot, problem


def _progress(resource: str, count: int) -> None:
    click.echo(f"\r  reading {resource}: {count:,}   ", err=True, nl=False)


def load_snapshot(
    *,
    snapshot_path: Path | None,
    kubeconfig: str | None,
    context: str | None,
    in_cluster: bool,
    request_timeout: float,
    deadline: float,
    page_size: int = 500,
    pod_selector: str | None = None,
    each: Transform | None = None,
    max_response_bytes: int | None = None,
    max_list_bytes: int | None = None,
) -> dict[str, Any]:
    """A snapshot from a file, or collected now from the cluster (read-only).
    ``each(key, obj)``: what to keep of each object of the list ``key``, as
    it is read (an audit's ``cluster_builder.kept_for_audit``); None keeps
    them whole, as a snapshot written from them must."""
    if snapshot_path is not None:
        from gpuaudit.sources.snapshot import SnapshotError, read_snapshot

        try:
            return read_snapshot(snapshot_path, each=each)
        except SnapshotError as exc:
            stop(str(exc))
    from gpuaudit.sources.cluster import ClusterSourceError, collect

    try:
        snapshot = collect(
            kubeconfig=kubeconfig,
            context=context,
            in_cluster=in_cluster,
            request_timeout=request_timeout,
            deadline=deadline,
            page_size=page_size,
            progress=_progress if sys.stderr.isatty() else None,
            each=each,
            **({"pod_selector": pod_selector} if pod_selector else {}),
            **({"max_response_bytes": max_response_bytes} if max_response_bytes else {}),
            **({"max_list_bytes": max_list_bytes} if max_list_bytes else {}),
        )
    except ClusterSourceError as exc:
        stop(str(exc))
    if sys.stderr.isatty():
        click.echo("", err=True)
    return snapshot


def _pods_by_uid(snapshot: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Pod UID -> (namespace, name) of the snapshot's pods: a sampler on a node
    (the DaemonSet in deploy/) records only the UID from each process's cgroup."""
    out: dict[str, tuple[str, str]] = {}
    for pod in (snapshot.get("objects") or {}).get("pods") or []:
        meta = pod.get("metadata") or {}
        if meta.get("uid") and meta.get("name"):
            out[str(meta["uid"])] = (str(meta.get("namespace") or "default"), str(meta["name"]))
    return out


def load_telemetry(
    snapshot: dict[str, Any],
    config: Config,
    *,
    prometheus_url: str | None,
    window: str,
    step: str,
    until: datetime | None,
    prometheus_token_file: str | None,
    prometheus_user: str | None,
    prometheus_ca: str | None,
    prometheus_header: Sequence[str],
    sample_files: Sequence[Path],
    request_timeout: float | None = None,
    deadline: float | None = None,
) -> str | None:
    """Put telemetry aggregates into ``snapshot['telemetry']`` when asked for.
    ``request_timeout`` and ``deadline`` (wall-clock seconds per query and for
    all of them) default to the Prometheus source's own.

    Returns why telemetry could not be read (the audit goes on without it), or None.
    """
    import os

    from gpuaudit.model.telemetry import TelemetryUnavailable

    settings = config.telemetry
    url = prometheus_url or settings.get("prometheus")
    if sample_files:
        from gpuaudit.sources.samples import aggregate_samples

        try:
            snapshot["telemetry"] = aggregate_samples(
                list(sample_files), params=settings.get("params"), pods_by_uid=_pods_by_uid(snapshot)
            )
        except (OSError, ValueError, TelemetryUnavailable) as exc:
            return f"cannot use samples: {exc}"
        return None
    if not url:
        return None
    from gpuaudit.sources.prometheus import query_telemetry
    from gpuaudit.sources.promql import QueryConfigError

    headers = dict(h.split("=", 1) for h in prometheus_header if "=" in h)
    token = None
    try:
        if prometheus_token_file:
            token = read_text(prometheus_token_file, limit=MAX_TOKEN_BYTES, what="token file").strip()
        if prometheus_ca:  # the TLS library opens it by name: refuse a FIFO or device first
            read_bytes(prometheus_ca, limit=MAX_CA_BYTES, what="CA bundle")
    except FileReadError as exc:
        return f"cannot query Prometheus: {exc}"
    password = os.environ.get("GPUAUDIT_PROMETHEUS_PASSWORD", "")
    try:
        snapshot["telemetry"] = query_telemetry(
            url,
            window_seconds=seconds_option(window, "--window"),
            step_seconds=seconds_option(step, "--step"),
            end=until.replace(tzinfo=timezone.utc) if until else None,
            params=settings.get("params"),
            queries=settings.get("queries"),
            bearer_token=token,
            basic_auth=(prometheus_user, password) if prometheus_user else None,
            ca_bundle=prometheus_ca,
            headers=headers,
            **({"timeout": request_timeout} if request_timeout is not None else {}),
            deadline=deadline,
        )
    except QueryConfigError as exc:  # the site's query override is wrong: a usage error
        stop(f"telemetry.queries in config: {exc}")
    except TelemetryUnavailable as exc:
        return str(exc)
    return None
