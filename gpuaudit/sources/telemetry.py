"""GPU telemetry joined to a snapshot: NVML samples (`gpuaudit sample`) or
Prometheus' DCGM series, aggregated per pod and GPU into
``snapshot['telemetry']``.

The readers are imported where they are used: a run without --prometheus
or --samples loads no HTTP code."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import msgspec

from gpuaudit.durations import whole_seconds
from gpuaudit.files import FileReadError, read_bytes, read_text
from gpuaudit.sources.user_config import Config

# A bearer token (a service-account JWT) is 1-2 KiB; a CA bundle (the whole
# Mozilla set) about 220 KiB.
MAX_TOKEN_BYTES = 64 * 1024
MAX_CA_BYTES = 16 * 1024 * 1024


class OptionError(ValueError):
    """An option of the request that cannot be read: ``option`` names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


class TelemetryRequest(msgspec.Struct, frozen=True):
    """Where to read telemetry from, as the command line asks: samples files
    first, else Prometheus (``prometheus_url``, else the config's)."""

    prometheus_url: str | None = None
    window: str = "7d"
    step: str = "60s"
    until: datetime | None = None  # the window's end, UTC (None: now)
    prometheus_token_file: str | None = None
    prometheus_user: str | None = None  # the password from $GPUAUDIT_PROMETHEUS_PASSWORD
    prometheus_ca: str | None = None
    prometheus_header: tuple[str, ...] = ()  # NAME=VALUE
    sample_files: tuple[Path, ...] = ()

    @property
    def given(self) -> bool:
        """Whether the command line names a telemetry source (the config may name Prometheus too)."""
        return bool(self.prometheus_url or self.sample_files)


def _seconds(value: str, option: str) -> int:
    try:
        return whole_seconds(value)
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None


def _pods_by_uid(snapshot: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
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
    request: TelemetryRequest,
    *,
    request_timeout: float | None = None,
    deadline: float | None = None,
) -> str | None:
    """Put telemetry aggregates into ``snapshot['telemetry']`` when asked for.
    ``request_timeout`` and ``deadline`` (wall-clock seconds per query and for
    all of them) default to the Prometheus source's own.

    Returns why telemetry could not be read (the audit goes on without it),
    or None. Raises OptionError for a window or step it cannot read, and
    promql.QueryConfigError for the config's query override."""
    from gpuaudit.model.telemetry import TelemetryUnavailable

    settings = config.telemetry
    url = request.prometheus_url or settings.get("prometheus")
    if request.sample_files:
        from gpuaudit.sources.samples import aggregate_samples

        try:
            snapshot["telemetry"] = aggregate_samples(
                list(request.sample_files), params=settings.get("params"), pods_by_uid=_pods_by_uid(snapshot)
            )
        except (OSError, ValueError, TelemetryUnavailable) as exc:
            return f"cannot use samples: {exc}"
        return None
    if not url:
        return None
    from gpuaudit.sources.prometheus import query_telemetry

    headers = dict(h.split("=", 1) for h in request.prometheus_header if "=" in h)
    token = None
    try:
        if request.prometheus_token_file:
            token = read_text(request.prometheus_token_file, limit=MAX_TOKEN_BYTES, what="token file").strip()
        if request.prometheus_ca:  # the TLS library opens it by name: refuse a FIFO or device first
            read_bytes(request.prometheus_ca, limit=MAX_CA_BYTES, what="CA bundle")
    except FileReadError as exc:
        return f"cannot query Prometheus: {exc}"
    password = os.environ.get("GPUAUDIT_PROMETHEUS_PASSWORD", "")
    try:
        snapshot["telemetry"] = query_telemetry(
            url,
            window_seconds=_seconds(request.window, "--window"),
            step_seconds=_seconds(request.step, "--step"),
            end=request.until.replace(tzinfo=timezone.utc) if request.until else None,
            params=settings.get("params"),
            queries=settings.get("queries"),
            bearer_token=token,
            basic_auth=(request.prometheus_user, password) if request.prometheus_user else None,
            ca_bundle=request.prometheus_ca,
            headers=headers,
            **({"timeout": request_timeout} if request_timeout is not None else {}),
            deadline=deadline,
        )
    except TelemetryUnavailable as exc:
        return str(exc)
    return None
