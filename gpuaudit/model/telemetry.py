"""The telemetry aggregate both telemetry sources produce (Prometheus, NVML samples).

One dict, versioned, JSON-ready (no NaN, no infinities)::

    {"version": 1, "source": "prometheus" | "nvml", "endpoint": ..., "window": {...},
     "signals": {...}, "params": {...}, "queries": N,
     "pods": [...], "gpus": [...], "errors": [...]}

A *GPU row* is one GPU (or MIG instance) while one pod held it; a GPU that
served three pods over the window has three rows (and a ``pod: null`` row for
the time nobody held it, when the exporter reports that). A *pod row* rolls up
the GPU rows of one (namespace, pod, container).

Missing data is ``None``, never 0: a rule must be able to say "insufficient
data" instead of "idle".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

VERSION = 1

# Metric keys of every GPU and pod row, and how a pod's GPU rows combine into
# its pod row. "sum": the pod holds all of it (VRAM, bytes moved); "mean": a
# share or ratio per GPU; "max": the busiest GPU decides (a p95 of one GPU is
# not a p95 of the pod, but the busiest GPU's p95 is the conservative bound).
ROLLUP: dict[str, str] = {
    "compute_mean": "mean",
    "compute_p95": "max",
    "compute_max": "max",
    "fb_used_mean_mib": "sum",
    "fb_used_max_mib": "sum",
    "fb_total_mib": "sum",
    "resident_fraction": "mean",
    "resident_idle_fraction": "mean",
    "pcie_tx_mean_bps": "sum",
    "pcie_rx_mean_bps": "sum",
    "nvlink_mean_bps": "sum",
    "occupancy_mean": "mean",
    "tensor_active_mean": "mean",
    "dram_active_mean": "mean",
    "coverage": "mean",
    # Real samples judged (of the compute signal, at most one per step): the
    # least-covered GPU speaks for the pod. first_seen/last_seen: epoch
    # seconds of the first and last such sample in the window, the span the
    # pod's values describe; coverage is the share of that span's steps with
    # a sample, not of the window.
    "samples": "min",
    "first_seen": "min",
    "last_seen": "max",
}
METRIC_KEYS: tuple[str, ...] = tuple(ROLLUP)
SIGNAL_NAMES: tuple[str, ...] = ("compute", "occupancy", "tensor", "dram", "memory", "pcie", "nvlink")
# Identity of a GPU row, in output order.
GPU_KEYS: tuple[str, ...] = (
    "node",
    "gpu",
    "uuid",
    "model",
    "mig_profile",
    "mig_id",
    "namespace",
    "pod",
    "container",
)


class TelemetryUnavailable(RuntimeError):
    """Nothing at all could be read; ``str(exc)`` is the reason to show next to
    every telemetry rule reported as "skipped: insufficient data"."""


def clean(value: Any) -> float | None:
    """A finite float, or None for anything missing, NaN or infinite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def iso(moment: datetime) -> str:
    """ISO-8601 in UTC with a Z, to the second."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def window(start: datetime, end: datetime, step_seconds: float) -> dict[str, Any]:
    return {
        "start": iso(start),
        "end": iso(end),
        "seconds": round((end - start).total_seconds()),
        "step_seconds": step_seconds,
    }


def combine(op: str, values: Iterable[float | None]) -> float | None:
    """Combine values with ``op`` (mean|max|min|sum), ignoring missing ones.
    None when every value is missing."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    if op == "mean":
        return sum(present) / len(present)
    if op == "max":
        return max(present)
    if op == "min":
        return min(present)
    if op == "sum":
        return sum(present)
    raise ValueError(f"unknown combine operation {op!r}")


def gpu_row(
    identity: Mapping[str, Any], metrics: Mapping[str, float | None], extra: Mapping[str, float | None] | None = None
) -> dict[str, Any]:
    """A GPU row with every identity and metric key present (missing ones None)."""
    row: dict[str, Any] = {key: identity.get(key) for key in GPU_KEYS}
    for key, value in identity.items():  # source-specific identity, e.g. pod_uid
        row.setdefault(key, value)
    for key in METRIC_KEYS:
        row[key] = clean(metrics.get(key))
    row["extra"] = {name: clean(value) for name, value in (extra or {}).items()}
    return row


def rollup_pods(
    gpu_rows: Iterable[Mapping[str, Any]], extra_rollup: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """One row per (namespace, pod, container) from the GPU rows that name a pod.

    ``extra_rollup`` says how each site-defined value combines (default mean).
    """
    groups: dict[tuple[str, str, str | None], list[Mapping[str, Any]]] = {}
    for row in gpu_rows:
        if row.get("pod") is None:
            continue
        key = (row.get("namespace") or "", row["pod"], row.get("container"))
        groups.setdefault(key, []).append(row)
    pods = []
    for (namespace, pod, container), rows in sorted(
        groups.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or "")
    ):
        profiles = sorted({r["mig_profile"] for r in rows if r.get("mig_profile")})
        nodes = [r["node"] for r in rows if r.get("node")]
        out: dict[str, Any] = {
            "namespace": namespace or None,
            "pod": pod,
            "container": container,
            "node": nodes[0] if nodes else None,
            # distinct devices: a pod that moved between GPUs mid-window has a
            # row per device it held
            "gpus": len(
                {
                    (r.get("node"), r.get("uuid") or r.get("gpu"), r.get("mig_id"))
                    for r in rows
                    if r.get("uuid") or r.get("gpu")
                }
            ),
        }
        for key in METRIC_KEYS:
            out[key] = combine(ROLLUP[key], (r.get(key) for r in rows))
        out["mig_profile"] = ",".join(profiles) if profiles else None
        extra_names = sorted({name for r in rows for name in (r.get("extra") or {})})
        out["extra"] = {
            name: combine((extra_rollup or {}).get(name, "mean"), ((r.get("extra") or {}).get(name) for r in rows))
            for name in extra_names
        }
        uids = sorted({r["pod_uid"] for r in rows if r.get("pod_uid")})
        if uids:
            out["pod_uid"] = uids[0]
        pods.append(out)
    return pods


def sort_gpu_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    def key(row: Mapping[str, Any]) -> tuple[str, ...]:
        return tuple(str(row.get(k) or "") for k in ("node", "gpu", "mig_id", "namespace", "pod", "container", "uuid"))

    return sorted(rows, key=key)


def result(
    *,
    source: str,
    endpoint: str,
    window: Mapping[str, Any],
    signals: Mapping[str, str | None],
    params: Mapping[str, Any],
    queries: int,
    gpu_rows: Iterable[dict[str, Any]],
    errors: Iterable[Mapping[str, str]],
    pod_only_rows: Iterable[dict[str, Any]] = (),
    extra_rollup: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Assemble the aggregate dict (see the module docstring). ``pod_only_rows``
    name a pod but no device (a site query that aggregated the GPU labels
    away): they feed the pod rows only."""
    gpus = sort_gpu_rows(gpu_rows)
    return {
        "version": VERSION,
        "source": source,
        "endpoint": endpoint,
        "window": dict(window),
        "signals": {name: signals.get(name) for name in SIGNAL_NAMES}
        | {k: v for k, v in signals.items() if k not in SIGNAL_NAMES},
        "params": dict(params),
        "queries": queries,
        "pods": rollup_pods([*gpus, *pod_only_rows], extra_rollup),
        "gpus": gpus,
        "errors": [dict(e) for e in errors],
    }


# --- read back from a snapshot file -------------------------------------------------

_ROW_IDENTITY = (*GPU_KEYS, "pod_uid")
MAX_MEASUREMENT = 1e15


def _scalar(value: Any) -> Any:
    """A JSON scalar a rule or a report can compare and print: finite numbers,
    text, booleans, None; anything else (lists, mappings, NaN) is None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return clean(value)
    return value if isinstance(value, (str, bool)) or value is None else None


def _identity(value: Any) -> str | None:
    """A row's node, pod, uuid... as text (a hashable key), or None."""
    if value is None or isinstance(value, (bool, list, dict, float)):
        return None
    return str(value)


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    out = {str(key): _scalar(value) for key, value in row.items()}
    for key in _ROW_IDENTITY:
        if key in row:
            out[key] = _identity(row[key])
    for key in (*METRIC_KEYS, "gpus"):
        if key in row:
            out[key] = _measurement(row[key])
    extra = row.get("extra")
    out["extra"] = {str(k): _measurement(v) for k, v in extra.items()} if isinstance(extra, Mapping) else {}
    return out


def _measurement(value: Any) -> float | None:
    """A finite measurement of a plausible size (bytes per second, MiB, GPUs
    and fractions are all far below 1e15), so facts that multiply a few of
    them stay finite."""
    number = clean(value)
    return number if number is not None and abs(number) <= MAX_MEASUREMENT else None


def normalized(aggregate: Any) -> dict[str, Any] | None:
    """The aggregate as read back from a snapshot file, made safe to compute
    on. The sources write it well-formed; a file may have been edited or
    damaged, and its rows must not crash an audit or a report: every row
    becomes a mapping of scalars, metrics finite numbers or None, keys text."""
    if not isinstance(aggregate, Mapping):
        return None
    out = {str(key): value for key, value in aggregate.items()}
    window = aggregate.get("window")
    window = window if isinstance(window, Mapping) else {}
    out["window"] = {str(key): _scalar(value) for key, value in window.items()}
    for key in ("seconds", "step_seconds"):
        if key in window:
            out["window"][key] = _measurement(window[key])
    signals = aggregate.get("signals")
    out["signals"] = (
        {str(k): v if isinstance(v, str) else None for k, v in signals.items()} if isinstance(signals, Mapping) else {}
    )
    params = aggregate.get("params")
    out["params"] = {str(k): _scalar(v) for k, v in params.items()} if isinstance(params, Mapping) else {}
    for key in ("source", "endpoint"):
        out[key] = _identity(aggregate.get(key))
    queries = aggregate.get("queries")
    out["queries"] = queries if isinstance(queries, int) and not isinstance(queries, bool) else None
    for key in ("gpus", "pods"):
        if key in aggregate:  # present (even empty) means telemetry was read
            rows = aggregate[key]
            out[key] = [_row(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []
    errors = aggregate.get("errors")
    out["errors"] = (
        [{str(k): str(v) for k, v in e.items()} for e in errors if isinstance(e, Mapping)]
        if isinstance(errors, list)
        else []
    )
    return out
