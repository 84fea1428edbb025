"""NVML sampler for GPU nodes without a DCGM exporter (``gpuaudit sample``).

Every ``interval`` seconds it writes one JSON line per GPU and per MIG
instance: utilisation, memory, PCIe throughput, GPM SM utilisation/occupancy,
tensor activity and DRAM bandwidth (Hopper and newer), and the compute processes with their
pod UID, read from ``/proc/<pid>/cgroup`` (the sampler needs ``hostPID`` to see
other pods' processes). Units are in the field names: ``_pct`` percent 0..100,
``_bytes``, ``_bytes_per_s``. A value NVML cannot give is ``null``; the
sampler keeps going.

The first line is a header ``{"kind": "header", ...}``; the rest are
``{"kind": "gpu", ...}``. gpuaudit.sources.samples turns the files into the
telemetry aggregate.

``pynvml`` (nvidia-ml-py) is imported only when sampling starts, so the rest of
gpuaudit never loads it; tests pass a fake as ``nvml``.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

import msgspec

FORMAT_VERSION = 1
# NVML reports PCIe throughput in KB/s; NVML counts memory in binary units
# (MiB, KiB), so a KB here is taken as 1024 bytes.
KIB = 1024

# The pod UID in a cgroup path: dashes under the cgroupfs driver
# (/kubepods/burstable/pod<uid>/<cid>), underscores under the systemd driver
# (kubepods-burstable-pod<uid_with_underscores>.slice).
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
# The container: cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope
# (systemd) or a bare <id> (cgroupfs).
_CONTAINER_ID = re.compile(r"(?:^|[-/])([0-9a-f]{64})(?:\.scope)?$")
_MIG_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+[a-z0-9]+)*)", re.IGNORECASE)


def pod_of_cgroup(text: str) -> tuple[str | None, str | None]:
    """(pod UID, container ID) from the contents of a ``/proc/<pid>/cgroup``
    file (cgroup v1 or v2, either cgroup driver), or Nones for a process that
    is not in a pod."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].strip().rstrip("/")
        found = _POD_UID.search(path)
        if not found:
            continue
        container = _CONTAINER_ID.search(path.rsplit("/", 1)[-1])
        return found.group(1).replace("_", "-"), container.group(1) if container else None
    return None, None


def pod_of_pid(pid: int, proc_root: str = "/proc") -> tuple[str | None, str | None]:
    """(pod UID, container ID) of a host PID; Nones when the process is gone or
    invisible (no hostPID) or not in a pod."""
    try:
        text = (Path(proc_root) / str(pid) / "cgroup").read_text("utf-8", "replace")
    except OSError:
        return None, None
    return pod_of_cgroup(text)


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (no driver, no GPU, no nvidia-ml-py)."""


def _import_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailable("NVML sampling needs nvidia-ml-py (module pynvml)") from exc
    return pynvml


class _Device(msgspec.Struct):
    """What does not change while sampling: identity, MIG layout, GPM support."""

    handle: Any
    index: int
    uuid: str | None
    model: str | None
    mig_enabled: bool | None = None
    parent: _Device | None = None
    mig_id: int | None = None
    mig_profile: str | None = None
    gpm: bool = False
    memory_v2: bool = True
    gpm_sample: Any = None  # the previous GPM sample, for the next tick's delta
    children: list[_Device] = msgspec.field(default_factory=list)


class _Sampler:
    def __init__(self, nvml: Any, *, node: str, proc_root: str, pods_by_uid: Mapping[str, tuple[str, str]] | None):
        self.nvml = nvml
        self.node = node
        self.proc_root = proc_root
        self.pods_by_uid = pods_by_uid or {}
        # Only "this device/field has no such thing" is normal; other NVML
        # errors (permissions, a lost GPU) are written into the record.
        self.quiet = (nvml.NVMLError_NotSupported, nvml.NVMLError_NotFound)
        # Unversioned calls on a mismatched driver raise this, not an NVMLError.
        self.caught = (nvml.NVMLError, getattr(nvml, "NVMLLibraryMismatchError", nvml.NVMLError))
        self.devices = self._discover()

    # -- calls ------------------------------------------------------------
    def _call(self, errors: list[str] | None, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except self.caught as exc:
            if errors is not None and not isinstance(exc, self.quiet):
                errors.append(f"{what}: {exc}")
            return None

    @staticmethod
    def _text(value: Any) -> str | None:
        if value is None:
            return None
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    def _discover(self) -> list[_Device]:
        nvml = self.nvml
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            dev = _Device(
                handle,
                index,
                self._text(self._call(None, "uuid", nvml.nvmlDeviceGetUUID, handle)),
                self._text(self._call(None, "name", nvml.nvmlDeviceGetName, handle)),
            )
            mode = self._call(None, "mig mode", nvml.nvmlDeviceGetMigMode, handle)
            dev.mig_enabled = None if mode is None else mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
            support = self._call(None, "gpm", nvml.nvmlGpmQueryDeviceSupport, handle)
            dev.gpm = bool(support is not None and support.isSupportedDevice)
            if dev.mig_enabled:
                count = self._call(None, "mig count", nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
                for slot in range(count):
                    mig = self._call(None, "mig handle", nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
                    if mig is None:  # an empty slot raises NotFound
                        continue
                    name = self._text(self._call(None, "mig name", nvml.nvmlDeviceGetName, mig))
                    profile = _MIG_PROFILE.search(name or "")
                    child = _Device(
                        mig,
                        index,
                        self._text(self._call(None, "mig uuid", nvml.nvmlDeviceGetUUID, mig)),
                        dev.model,
                        mig_enabled=None,
                        parent=dev,
                        mig_id=self._call(None, "gpu instance", nvml.nvmlDeviceGetGpuInstanceId, mig),
                        mig_profile=profile.group(1) if profile else None,
                        gpm=dev.gpm,
                    )
                    dev.children.append(child)
            devices.append(dev)
        return devices

    def close(self) -> None:
        for dev in self._all():
            if dev.gpm_sample is not None:
                self._call(None, "gpm free", self.nvml.nvmlGpmSampleFree, dev.gpm_sample)
                dev.gpm_sample = None

    def _all(self) -> list[_Device]:
        return [d for dev in self.devices for d in (dev, *dev.children)]

    # -- one tick -----------------------------------------------------------
    def tick(self, ts: float) -> list[dict[str, Any]]:
        return [self._record(dev, ts) for dev in self._all()]

    def _record(self, dev: _Device, ts: float) -> dict[str, Any]:
        nvml, h = self.nvml, dev.handle
        errors: list[str] = []
        rec: dict[str, Any] = {
            "kind": "gpu",
            "ts": ts,
            "node": self.node,
            "gpu": str(dev.index),
            "uuid": dev.uuid,
            "model": dev.model,
            "mig_enabled": dev.mig_enabled,
            "mig_profile": dev.mig_profile,
            "mig_id": None if dev.mig_id is None else str(dev.mig_id),
            "parent_uuid": dev.parent.uuid if dev.parent else None,
        }
        util = self._call(errors, "utilization", nvml.nvmlDeviceGetUtilizationRates, h)
        rec["util_gpu_pct"] = util.gpu if util is not None else None
        rec["util_memory_pct"] = util.memory if util is not None else None
        rec.update(self._memory(dev, errors))
        for key, counter in (
            ("pcie_tx_bytes_per_s", nvml.NVML_PCIE_UTIL_TX_BYTES),
            ("pcie_rx_bytes_per_s", nvml.NVML_PCIE_UTIL_RX_BYTES),
        ):
            kbps = self._call(errors, key, nvml.nvmlDeviceGetPcieThroughput, h, counter)
            rec[key] = kbps * KIB if kbps is not None else None
        rec.update(self._gpm(dev, errors))
        procs = self._call(errors, "processes", nvml.nvmlDeviceGetComputeRunningProcesses, h)
        rec["processes"] = None if procs is None else [self._process(p) for p in procs]
        rec["errors"] = errors
        return rec

    def _memory(self, dev: _Device, errors: list[str]) -> dict[str, Any]:
        nvml = self.nvml
        info = None
        if dev.memory_v2:
            # v2 separates the driver's reservation from "used"; older drivers
            # lack it (FunctionNotFound, version mismatch): fall back to v1 for good.
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(dev.handle, version=nvml.nvmlMemory_v2)
            except nvml.NVMLError:
                dev.memory_v2 = False
        if info is None:
            info = self._call(errors, "memory", nvml.nvmlDeviceGetMemoryInfo, dev.handle)
        if info is None:
            return dict.fromkeys(("fb_used_bytes", "fb_free_bytes", "fb_total_bytes", "fb_reserved_bytes"))
        return {
            "fb_used_bytes": info.used,
            "fb_free_bytes": info.free,
            "fb_total_bytes": info.total,
            "fb_reserved_bytes": getattr(info, "reserved", None),
        }

    def _gpm(self, dev: _Device, errors: list[str]) -> dict[str, Any]:
        """SM utilisation, occupancy, tensor activity and DRAM bandwidth between
        this tick's GPM sample and the previous one (the first tick has none)."""
        nvml = self.nvml
        out: dict[str, Any] = dict.fromkeys(("sm_util_pct", "sm_occupancy_pct", "tensor_util_pct", "dram_bw_util_pct"))
        if not dev.gpm:
            return out
        sample = self._call(errors, "gpm alloc", nvml.nvmlGpmSampleAlloc)
        if sample is None:
            return out
        if dev.parent is None:
            got = self._call(errors, "gpm sample", nvml.nvmlGpmSampleGet, dev.handle, sample)
        else:
            got = self._call(errors, "gpm sample", nvml.nvmlGpmMigSampleGet, dev.parent.handle, dev.mig_id, sample)
        if got is None:
            self._call(None, "gpm free", nvml.nvmlGpmSampleFree, sample)
            return out
        previous, dev.gpm_sample = dev.gpm_sample, sample
        if previous is None:
            return out
        metrics = (
            ("sm_util_pct", nvml.NVML_GPM_METRIC_SM_UTIL),
            ("sm_occupancy_pct", nvml.NVML_GPM_METRIC_SM_OCCUPANCY),
            ("tensor_util_pct", nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL),
            ("dram_bw_util_pct", nvml.NVML_GPM_METRIC_DRAM_BW_UTIL),
        )
        request = gpm_request(nvml, previous, sample, [m for _, m in metrics])
        done = self._call(errors, "gpm metrics", nvml.nvmlGpmMetricsGet, request)
        self._call(None, "gpm free", nvml.nvmlGpmSampleFree, previous)
        if done is not None:
            for i, (key, _) in enumerate(metrics):
                if request.metrics[i].nvmlReturn == nvml.NVML_SUCCESS:
                    out[key] = float(request.metrics[i].value)
        return out

    def _process(self, proc: Any) -> dict[str, Any]:
        uid, container_id = pod_of_pid(proc.pid, self.proc_root)
        namespace, pod = self.pods_by_uid.get(uid, (None, None)) if uid else (None, None)
        return {
            "pid": proc.pid,
            "used_bytes": proc.usedGpuMemory,
            "pod_uid": uid,
            "container_id": container_id,
            "namespace": namespace,
            "pod": pod,
        }


def gpm_request(nvml: Any, first: Any, second: Any, metric_ids: list[int]) -> Any:
    """The ``c_nvmlGpmMetricsGet_t`` asking for ``metric_ids`` between two samples."""
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metric_ids)
    request.sample1 = first
    request.sample2 = second
    for i, metric_id in enumerate(metric_ids):
        request.metrics[i].metricId = metric_id
    return request


def sample(
    *,
    interval: float,
    duration: float,
    out: TextIO,
    proc_root: str = "/proc",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    nvml: Any = None,
    wall_clock: Callable[[], float] = time.time,
    node: str | None = None,
    pods_by_uid: Mapping[str, tuple[str, str]] | None = None,
) -> int:
    """Sample every ``interval`` seconds for ``duration`` seconds into ``out``
    (JSON lines). Returns the number of ticks written. A tick that could not
    start within one interval of its time (a stalled host) is skipped, not
    bunched up. Raises NvmlUnavailable when NVML cannot start."""
    if interval <= 0 or duration <= 0:
        raise ValueError("interval and duration must be positive")
    nvml = nvml if nvml is not None else _import_pynvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not start: {exc}") from None
    sampler = None
    try:
        sampler = _Sampler(nvml, node=node or socket.gethostname(), proc_root=proc_root, pods_by_uid=pods_by_uid)
        driver = None
        get_driver = getattr(nvml, "nvmlSystemGetDriverVersion", None)
        if get_driver is not None:
            driver = _Sampler._text(sampler._call(None, "driver", get_driver))
        header = {
            "kind": "header",
            "version": FORMAT_VERSION,
            "ts": wall_clock(),
            "node": sampler.node,
            "interval_s": interval,
            "duration_s": duration,
            "driver_version": driver,
            "gpus": len(sampler.devices),
        }
        out.write(json.dumps(header) + "\n")
        start = clock()
        written = 0
        ticks = max(1, round(duration / interval))
        for k in range(ticks):
            due = start + k * interval
            now = clock()
            if now > due + interval:
                continue
            if now < due:
                sleep(due - now)
            for record in sampler.tick(wall_clock()):
                out.write(json.dumps(record) + "\n")
            out.flush()
            written += 1
        return written
    finally:
        if sampler is not None:
            sampler.close()
        nvml.nvmlShutdown()
