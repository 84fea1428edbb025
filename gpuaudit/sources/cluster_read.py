"""The cluster a command audits (audit, snapshot, report, fix): a snapshot
file or the live API server (read-only), narrowed to a scope, with its GPU
telemetry joined.

The Kubernetes client is imported where it is used: a run from a snapshot
file never loads it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from gpuaudit.sources.scope import Scope, label_matcher, narrow_snapshot
from gpuaudit.sources.telemetry import TelemetryRequest, load_telemetry
from gpuaudit.sources.user_config import Config

if TYPE_CHECKING:
    from gpuaudit.sources.snapshot import Transform

Progress = Callable[[str, int], None]


class ClusterReadError(Exception):
    """The cluster cannot be read (a snapshot file, the API server): the
    command ends with this message."""


class ClusterSource(msgspec.Struct, frozen=True):
    """Which cluster to read and how: ``snapshot_paths`` (files or folders
    of them), else the API server through a kubeconfig or the pod's
    service account, within these bounds."""

    snapshot_paths: tuple[Path, ...] = ()
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    request_timeout: float = 30.0  # seconds per request (Prometheus' too)
    page_size: int = 500
    deadline: float = 300.0  # seconds for the whole collection (Prometheus' too)
    max_response_bytes: int | None = None  # None: the source's own bound
    max_list_bytes: int | None = None

    def snapshot_files(self) -> list[Path]:
        """The snapshot files asked for, a folder read as the snapshots in it."""
        files: list[Path] = []
        for path in self.snapshot_paths:
            if path.is_dir():
                found = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith((".json", ".json.gz")))
                if not found:
                    raise ClusterReadError(f"{path}: no snapshot (*.json, *.json.gz) in this folder")
                files += found
            else:
                files.append(path)
        return files


def read_cluster(
    config: Config,
    source: ClusterSource,
    telemetry: TelemetryRequest,
    scope: Scope | None = None,
    *,
    snapshot_path: Path | None = None,
    each: Transform | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The snapshot ``source`` names, narrowed to ``scope``, with the
    telemetry ``telemetry`` asks for; and why telemetry could not be read,
    if it could not. ``snapshot_path``: one of several snapshot files (a
    fleet); otherwise the one file of ``source``, or the live cluster.
    ``each``: what to keep of each object read (load_snapshot); ``progress``:
    called as the live cluster's lists are read."""
    if snapshot_path is None:
        files = source.snapshot_files()
        if len(files) > 1:
            raise ClusterReadError("several snapshots make a fleet review: only `gpuaudit report` reads more than one")
        snapshot_path = files[0] if files else None
    scope = scope or Scope()
    if scope.pod_selector:
        label_matcher(scope.pod_selector)  # a usage error before any request
    snapshot = load_snapshot(snapshot_path, source, scope.pod_selector, each=each, progress=progress)
    if scope.narrows:
        narrow_snapshot(snapshot, scope)
    problem = load_telemetry(
        snapshot,
        config,
        telemetry,
        # --request-timeout and --deadline bound Prometheus as they bound the API server.
        request_timeout=source.request_timeout,
        deadline=source.deadline,
    )
    return snapshot, problem


def load_snapshot(
    snapshot_path: Path | None,
    source: ClusterSource | None = None,
    pod_selector: str | None = None,
    *,
    each: Transform | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """A snapshot from a file, or collected now from the cluster (read-only).
    ``each(key, obj)``: what to keep of each object of the list ``key``, as
    it is read (an audit's ``cluster_builder.kept_for_audit``); None keeps
    them whole, as a snapshot written from them must."""
    source = source or ClusterSource()
    if snapshot_path is not None:
        from gpuaudit.sources.snapshot import SnapshotError, read_snapshot

        try:
            return read_snapshot(snapshot_path, each=each)
        except SnapshotError as exc:
            raise ClusterReadError(str(exc)) from None
    from gpuaudit.sources.cluster import MAX_LIST_BYTES, MAX_RESPONSE_BYTES, ClusterSourceError, collect

    try:
        return collect(
            kubeconfig=source.kubeconfig,
            context=source.context,
            in_cluster=source.in_cluster,
            request_timeout=source.request_timeout,
            deadline=source.deadline,
            page_size=source.page_size,
            progress=progress,
            each=each,
            pod_selector=pod_selector or None,
            max_response_bytes=source.max_response_bytes or MAX_RESPONSE_BYTES,
            max_list_bytes=source.max_list_bytes or MAX_LIST_BYTES,
        )
    except ClusterSourceError as exc:
        raise ClusterReadError(str(exc)) from None
