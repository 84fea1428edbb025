"""Turn NVML sample files (JSON lines from gpuaudit.sources.nvml) into the same
telemetry aggregate the Prometheus source produces (``source: "nvml"``).

A GPU row is one device (GPU or MIG instance) while one pod had processes on
it; ticks with no pod process form the device's ``pod: null`` row. A pod's
VRAM is the memory of its own processes when NVML reports it, else the
device's. Compute is the device's (NVML has no per-pod SM activity), so pods
sharing a GPU each see the whole GPU's activity.

Compute, in order of preference: GPM SM utilisation (Hopper and newer, the
closest to DCGM's SM_ACTIVE), else NVML's utilization.gpu ("a kernel was
running", like DCGM_FI_DEV_GPU_UTIL). Both are percent, reported here as a
ratio 0..1. A MIG-enabled GPU's own records are skipped: its instances carry
the data.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpuaudit.files import FileReadError, iter_lines, read_bytes
from gpuaudit.model import telemetry
from gpuaudit.model.telemetry import TelemetryUnavailable

DEFAULT_PARAMS = {"resident_fb_mib": 1024, "idle_compute": 0.05}
# A record is about 700 bytes: a week of 8 GPUs with 7 MIG instances each,
# sampled every 10 s, is 3.9 million records, 2.7 GB. A sample file is read
# line by line, so its size bounds the time spent, not the memory; one line
# is one record, far below 1 MiB.
MAX_SAMPLES_BYTES = 4 << 30
MAX_SAMPLE_LINE_BYTES = 1 << 20
# kubelet's /pods on a node is a few MB; a cluster's PodList of 50,000 pods
# about 150 MB with managedFields (bench/gen_cluster.py).
MAX_PODS_BYTES = 1 << 30
MAX_PROBLEMS_PER_FILE = 10  # then one line says how many more
# Plausible values: a time between 1970 and 9999 (what datetime can hold), a
# sampling interval between 1 ms and a day.
MAX_TIMESTAMP = 253402300799.0
INTERVAL_RANGE = (0.001, 86400.0)
_IDENTITY = ("node", "gpu", "uuid", "mig_id", "model", "mig_profile", "parent_uuid")
_MEASUREMENTS = (
    "util_gpu_pct",
    "util_memory_pct",
    "sm_util_pct",
    "sm_occupancy_pct",
    "tensor_util_pct",
    "dram_bw_util_pct",
    "fb_used_bytes",
    "fb_free_bytes",
    "fb_total_bytes",
    "fb_reserved_bytes",
    "pcie_tx_bytes_per_s",
    "pcie_rx_bytes_per_s",
)
MIB = 2**20
_COMPUTE_SOURCES = (("sm_util_pct", "nvml.gpm.sm_util"), ("util_gpu_pct", "nvml.utilization.gpu"))


def load_pods_json(path: Path) -> dict[str, tuple[str, str]]:
    """Pod UID -> (namespace, name) from a kubelet ``/pods`` response or any
    PodList (``{"items": [...]}``), a list of pods, or a plain mapping
    ``{uid: "namespace/name"}`` / ``{uid: [namespace, name]}``."""
    try:
        data = json.loads(read_bytes(path, limit=MAX_PODS_BYTES, what="pods file"))
    except FileReadError:
        raise
    except ValueError as exc:  # invalid JSON or UTF-8, or an integer of 4,300+ digits
        raise ValueError(f"{path}: not valid JSON: {str(exc).split(';')[0]}") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON: nested too deep to parse") from None
    items = data.get("items") if isinstance(data, dict) and "items" in data else data
    out: dict[str, tuple[str, str]] = {}
    if isinstance(items, list):
        for pod in items:
            meta = pod.get("metadata") if isinstance(pod, dict) else None
            if isinstance(meta, dict) and meta.get("uid") and meta.get("name"):
                out[str(meta["uid"])] = (str(meta.get("namespace") or "default"), str(meta["name"]))
        return out
    if isinstance(items, dict):
        for uid, value in items.items():
            if isinstance(value, str) and "/" in value:
                namespace, name = value.split("/", 1)
            elif isinstance(value, (list, tuple)) and len(value) == 2:
                namespace, name = value
            else:
                raise ValueError(f"{path}: pod {uid!r} is neither 'namespace/name' nor a pair")
            out[str(uid)] = (str(namespace), str(name))
        return out
    raise ValueError(f"{path}: expected a PodList, a list of pods or a uid mapping")


def quantile(q: float, values: Sequence[float]) -> float | None:
    """Linear interpolation between closest ranks, as PromQL's quantile_over_time."""
    if not values:
        return None
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    weight = rank - low
    return ordered[low] * (1 - weight) + ordered[high] * weight


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _read(paths: Sequence[Path], errors: list[dict[str, str]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    headers: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    for path in paths:
        _read_file(path, errors, headers, records)
    return headers, records


def _read_file(
    path: Path, errors: list[dict[str, str]], headers: list[dict[str, Any]], records: list[dict[str, Any]]
) -> None:
    """One sample file, line by line: what cannot be used is an error naming
    file and line (the first MAX_PROBLEMS_PER_FILE of them), never a crash."""
    problems = 0

    def problem(number: int | None, message: str, query: str = "parse") -> None:
        nonlocal problems
        problems += 1
        if problems <= MAX_PROBLEMS_PER_FILE:
            where = f"{path}:{number}" if number else str(path)
            # A line left out costs one sample, and the rest is read: a
            # warning. A file that cannot be read on loses what follows: the
            # audit is partial.
            level = "error" if query == "read" else "warning"
            errors.append({"endpoint": where, "query": query, "message": message, "level": level})

    try:
        for number, line in iter_lines(
            path, limit=MAX_SAMPLES_BYTES, line_limit=MAX_SAMPLE_LINE_BYTES, what="sample file"
        ):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                # a sampler killed mid-line leaves a torn last line; keep the rest
                problem(number, f"not JSON: {str(exc).split(';')[0]}")
                continue
            except RecursionError:
                problem(number, "not JSON: nested too deep to parse")
                continue
            if not isinstance(record, dict):
                continue
            if record.get("kind") == "header":
                headers.append(record)
            elif record.get("kind") == "gpu":
                cleaned, wrong = _clean_record(record)
                if wrong:
                    problem(number, wrong, "sample")
                if cleaned is not None:
                    records.append(cleaned)
    except FileReadError as exc:
        problem(exc.line, exc.problem, "read")
    if problems > MAX_PROBLEMS_PER_FILE:
        errors.append(
            {
                "endpoint": str(path),
                "query": "parse",
                "level": "warning",
                "message": f"{problems - MAX_PROBLEMS_PER_FILE} more lines with problems",
            }
        )


def _number(value: Any, low: float, high: float) -> float | None:
    """``value`` when it is a real number between low and high, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value) if isinstance(value, float) or abs(value) < 2**63 else math.inf
    return number if math.isfinite(number) and low <= number <= high else None


def _clean_record(record: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """A GPU record whose values have the types the aggregation computes
    with, and what was wrong: a record without a plausible time or with an
    identity that is not text is dropped; a measurement of the wrong type or
    out of range reads as missing (null), as NVML's own gaps do."""
    ts = _number(record.get("ts"), 0.0, MAX_TIMESTAMP)
    if ts is None:
        return None, f"ts {_show(record.get('ts'))} is not a time in seconds; record skipped"
    out: dict[str, Any] = {"kind": "gpu", "ts": ts}
    for key in _IDENTITY:
        value = record.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if value is not None and not isinstance(value, str):
            return None, f"{key} {_show(value)} is not text; record skipped"
        out[key] = value
    wrong = []
    mig = record.get("mig_enabled")
    out["mig_enabled"] = mig if isinstance(mig, bool) else None
    for key in _MEASUREMENTS:
        value = record.get(key)
        out[key] = _number(value, 0.0, telemetry.MAX_MEASUREMENT)
        if value is not None and out[key] is None:
            wrong.append(f"{key} {_show(value)}")
    processes = record.get("processes")
    if processes is not None and not isinstance(processes, list):
        wrong.append(f"processes {_show(processes)}")
        processes = None
    out["processes"] = (
        None if processes is None else [p for p in (_clean_process(proc, wrong) for proc in processes) if p is not None]
    )
    if wrong:
        return out, f"read as missing: {', '.join(wrong[:5])}" + (" ..." if len(wrong) > 5 else "")
    return out, None


def _clean_process(proc: Any, wrong: list[str]) -> dict[str, Any] | None:
    if not isinstance(proc, dict):
        wrong.append(f"process {_show(proc)}")
        return None
    out = {}
    for key in ("pod_uid", "namespace", "pod"):
        value = proc.get(key)
        if value is not None and not isinstance(value, str):
            wrong.append(f"process {key} {_show(value)}")
            return None
        out[key] = value
    used = proc.get("used_bytes")
    out["used_bytes"] = _number(used, 0.0, telemetry.MAX_MEASUREMENT)
    if used is not None and out["used_bytes"] is None:
        wrong.append(f"process used_bytes {_show(used)}")
    return out


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _interval(headers: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]) -> float:
    declared = [number for h in headers if (number := _number(h.get("interval_s"), *INTERVAL_RANGE)) is not None]
    if declared:
        return float(min(declared))
    stamps = sorted({r["ts"] for r in records})
    gaps = sorted(b - a for a, b in itertools.pairwise(stamps) if b > a)
    return max(gaps[len(gaps) // 2], INTERVAL_RANGE[0]) if gaps else 1.0


def _pods_on(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Pod UID -> {used_bytes, namespace, pod} for this tick's processes in pods."""
    pods: dict[str, dict[str, Any]] = {}
    for proc in record.get("processes") or []:
        uid = proc.get("pod_uid")
        if not uid:
            continue
        entry = pods.setdefault(uid, {"used_bytes": 0, "namespace": proc.get("namespace"), "pod": proc.get("pod")})
        used = proc.get("used_bytes")
        # one process without a reading makes the pod's sum unknown
        entry["used_bytes"] = None if used is None or entry["used_bytes"] is None else entry["used_bytes"] + used
    return pods


def aggregate_samples(
    paths: Sequence[Path],
    *,
    params: Mapping[str, Any] | None = None,
    pods_by_uid: Mapping[str, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """The telemetry aggregate (see gpuaudit.sources.telemetry) of NVML sample
    files. Raises TelemetryUnavailable when no sample could be read."""
    merged = {**DEFAULT_PARAMS, **(params or {})}
    resident_mib = float(merged["resident_fb_mib"])
    idle = float(merged["idle_compute"])
    errors: list[dict[str, str]] = []
    headers, records = _read([Path(p) for p in paths], errors)
    if not records:
        reason = errors[0]["message"] if errors else "no GPU samples"
        raise TelemetryUnavailable(f"NVML samples {', '.join(map(str, paths))}: {reason}")
    interval = _interval(headers, records)
    start, end = min(r["ts"] for r in records), max(r["ts"] for r in records)

    # One compute source per device, so its samples are comparable: GPM where
    # the device ever reported it (its first tick has no GPM delta yet).
    source: dict[tuple[Any, ...], tuple[int, str, str]] = {}
    for rec in records:
        device = (rec.get("node"), rec.get("gpu"), rec.get("uuid"), rec.get("mig_id"))
        for rank, (key, name) in enumerate(_COMPUTE_SOURCES):
            if rec.get(key) is not None:
                if device not in source or rank < source[device][0]:
                    source[device] = (rank, key, name)
                break

    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    compute_used: set[str] = set()
    for rec in records:
        if rec.get("mig_enabled") and rec.get("mig_id") is None:
            continue
        device = (rec.get("node"), rec.get("gpu"), rec.get("uuid"), rec.get("mig_id"))
        compute = None
        if device in source:
            _, key, name = source[device]
            compute_used.add(name)
            compute = rec[key] / 100 if rec.get(key) is not None else None
        device_used = rec.get("fb_used_bytes")
        holders = _pods_on(rec) or {None: {"used_bytes": device_used}}
        for uid, holder in holders.items():
            key = (rec.get("node"), rec.get("gpu"), rec.get("uuid"), rec.get("mig_id"), uid)
            row = rows.setdefault(
                key,
                {
                    "rec": rec,
                    "holder": holder,
                    "ts": set(),
                    "compute": [],
                    "fb": [],
                    "total": [],
                    "both": [],
                    "tx": [],
                    "rx": [],
                    "occ": [],
                    "tensor": [],
                    "dram": [],
                },
            )
            used = holder["used_bytes"] if holder["used_bytes"] is not None else device_used
            fb = used / MIB if used is not None else None
            row["ts"].add(rec["ts"])
            for name, value in (
                ("compute", compute),
                ("fb", fb),
                ("tx", rec.get("pcie_tx_bytes_per_s")),
                ("rx", rec.get("pcie_rx_bytes_per_s")),
            ):
                if value is not None:
                    row[name].append(float(value))
            if rec.get("fb_total_bytes") is not None:
                row["total"].append(rec["fb_total_bytes"] / MIB)
            if fb is not None and compute is not None:
                row["both"].append((fb, compute))
            if rec.get("sm_occupancy_pct") is not None:
                row["occ"].append(rec["sm_occupancy_pct"] / 100)
            if rec.get("tensor_util_pct") is not None:
                row["tensor"].append(rec["tensor_util_pct"] / 100)
            if rec.get("dram_bw_util_pct") is not None:
                row["dram"].append(rec["dram_bw_util_pct"] / 100)

    gpu_rows = []
    for (node, gpu, uuid, mig_id, uid), row in rows.items():
        first, holder = row["rec"], row["holder"]
        namespace, pod = holder.get("namespace"), holder.get("pod")
        if uid and pods_by_uid and uid in pods_by_uid:
            namespace, pod = pods_by_uid[uid]
        fb, both = row["fb"], row["both"]
        metrics = {
            "compute_mean": _mean(row["compute"]),
            "compute_p95": quantile(0.95, row["compute"]),
            "compute_max": max(row["compute"], default=None),
            "fb_used_mean_mib": _mean(fb),
            "fb_used_max_mib": max(fb, default=None),
            "fb_total_mib": _mean(row["total"]),
            "resident_fraction": (sum(v > resident_mib for v in fb) / len(fb)) if fb else None,
            "resident_idle_fraction": (sum(f > resident_mib and c < idle for f, c in both) / len(both))
            if both
            else None,
            "pcie_tx_mean_bps": _mean(row["tx"]),
            "pcie_rx_mean_bps": _mean(row["rx"]),
            "occupancy_mean": _mean(row["occ"]),
            "tensor_active_mean": _mean(row["tensor"]),
            "dram_active_mean": _mean(row["dram"]),
            # over the row's own life in the samples (first to last tick), as
            # the Prometheus source measures it
            "coverage": min(1.0, len(row["ts"]) / (round((max(row["ts"]) - min(row["ts"])) / interval) + 1)),
            "samples": len(row["ts"]),
            "first_seen": min(row["ts"]),
            "last_seen": max(row["ts"]),
        }
        identity = {
            "node": node,
            "gpu": gpu,
            "uuid": uuid,
            "model": first.get("model"),
            "mig_profile": first.get("mig_profile"),
            "mig_id": mig_id,
            "namespace": namespace if pod else None,
            "pod": pod,
            "container": None,
            "pod_uid": uid,
        }
        gpu_rows.append(telemetry.gpu_row(identity, metrics))

    def used(*keys: str) -> bool:
        return any(r.get(k) is not None for r in records for k in keys)

    signals = {
        "compute": "|".join(n for _, n in _COMPUTE_SOURCES if n in compute_used) or None,
        "memory": "nvml.memory.used" if used("fb_used_bytes") else None,
        "pcie": "nvml.pcie_throughput" if used("pcie_tx_bytes_per_s") else None,
        "occupancy": "nvml.gpm.sm_occupancy" if used("sm_occupancy_pct") else None,
        "tensor": "nvml.gpm.any_tensor_util" if used("tensor_util_pct") else None,
        "dram": "nvml.gpm.dram_bw_util" if used("dram_bw_util_pct") else None,
        "nvlink": None,
    }
    window = telemetry.window(
        datetime.fromtimestamp(start, tz=timezone.utc), datetime.fromtimestamp(end, tz=timezone.utc), interval
    )
    return telemetry.result(
        source="nvml",
        endpoint=", ".join(str(p) for p in paths),
        window=window,
        signals=signals,
        params=merged,
        queries=0,
        gpu_rows=gpu_rows,
        errors=errors,
    )
