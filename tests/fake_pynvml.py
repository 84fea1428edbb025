"""A stand-in for ``pynvml`` (nvidia-ml-py) with scripted GPUs, for tests on
machines without one.

``FakeNvml(gpus)`` has the functions gpuaudit calls, with the real names,
parameters and return shapes (structs with ``.gpu``/``.memory``, ``.total``/
``.used``/``.free``/``.reserved`` in bytes, processes with ``.pid`` and
``.usedGpuMemory`` that may be None, PCIe throughput in KB/s, GPM metrics in
percent), the constants it reads, and exceptions that behave like the real
ones: ``NVMLError(code)`` returns an instance of the matching subclass
(``NVMLError(3)`` is an ``NVMLError_NotSupported``) and ``NVMLError_NotFound()``
knows its own code. test_nvml.py checks all of this against the installed
pynvml. It can also stand in for the module: ``sys.modules["pynvml"] = fake``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

# -- constants (values as in nvml.h) -----------------------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlMemory_v2 = 0x02000028
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL = 5
NVML_GPM_METRIC_DRAM_BW_UTIL = 10
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_METRIC_MAX = 477
NOT_A_MIG_INSTANCE = 0xFFFFFFFF

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH: "Argument Version Mismatch",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


# -- exceptions ------------------------------------------------------------------
class NVMLError(Exception):
    """``NVMLError(code)`` picks the subclass registered for ``code``."""

    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}  # the registry, like the real one
    value: int

    def __new__(cls, value: int | None = None):
        if cls is NVMLError and value in NVMLError._by_code:
            cls = NVMLError._by_code[value]
        if value is None:
            value = getattr(cls, "code", NVML_ERROR_UNKNOWN)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int | None = None):
        super().__init__(self.value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _subclass(name: str, code: int) -> type[NVMLError]:
    cls = type(name, (NVMLError,), {"code": code})
    NVMLError._by_code[code] = cls
    return cls


NVMLError_Uninitialized = _subclass("NVMLError_Uninitialized", NVML_ERROR_UNINITIALIZED)
NVMLError_InvalidArgument = _subclass("NVMLError_InvalidArgument", NVML_ERROR_INVALID_ARGUMENT)
NVMLError_NotSupported = _subclass("NVMLError_NotSupported", NVML_ERROR_NOT_SUPPORTED)
NVMLError_NoPermission = _subclass("NVMLError_NoPermission", NVML_ERROR_NO_PERMISSION)
NVMLError_NotFound = _subclass("NVMLError_NotFound", NVML_ERROR_NOT_FOUND)
NVMLError_FunctionNotFound = _subclass("NVMLError_FunctionNotFound", NVML_ERROR_FUNCTION_NOT_FOUND)
NVMLError_GpuIsLost = _subclass("NVMLError_GpuIsLost", NVML_ERROR_GPU_IS_LOST)
NVMLError_Unknown = _subclass("NVMLError_Unknown", NVML_ERROR_UNKNOWN)


class NVMLLibraryMismatchError(Exception):
    """Raised (not an NVMLError) by unversioned calls on a mismatched driver."""


# -- structs ---------------------------------------------------------------------
@dataclass
class c_nvmlUtilization_t:
    gpu: int
    memory: int


@dataclass
class c_nvmlMemory_t:
    total: int
    free: int
    used: int


@dataclass
class c_nvmlMemory_v2_t:
    version: int
    total: int
    reserved: int
    free: int
    used: int


@dataclass
class nvmlFriendlyObject:
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = NOT_A_MIG_INSTANCE
    computeInstanceId: int = NOT_A_MIG_INSTANCE


@dataclass
class c_nvmlGpmSupport_t:
    version: int
    isSupportedDevice: int


@dataclass
class c_nvmlGpmMetric_t:
    metricId: int = 0
    nvmlReturn: int = NVML_SUCCESS
    value: float = 0.0


class c_nvmlGpmMetricsGet_t:
    """Filled by the caller (version, numMetrics, sample1, sample2,
    metrics[i].metricId), completed by nvmlGpmMetricsGet."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [c_nvmlGpmMetric_t() for _ in range(NVML_GPM_METRIC_MAX)]


# -- scripted hardware -------------------------------------------------------------
@dataclass
class FakeProcess:
    pid: int
    used_bytes: int | None  # None: NVML cannot tell (usedGpuMemory None)


@dataclass
class FakeMig:
    """A MIG instance. NVML gives MIG handles no utilization rates."""

    profile: str  # e.g. "1g.10gb"
    gpu_instance_id: int
    uuid: str
    total_bytes: int
    used_bytes: int
    processes: list[FakeProcess] = field(default_factory=list)
    gpm: dict[int, float] | None = None  # metric id -> percent, via nvmlGpmMigSampleGet


@dataclass
class FakeGpu:
    name: str
    uuid: str
    total_bytes: int
    used_bytes: int
    reserved_bytes: int = 0
    util: tuple[int, int] | None = (0, 0)  # (gpu %, memory %); None: NotSupported
    pcie_kbps: tuple[int, int] | None = (0, 0)  # (tx, rx) KB/s; None: NotSupported
    processes: list[FakeProcess] = field(default_factory=list)
    mig: list[FakeMig] | None = None  # None: MIG not supported; []: capable, disabled
    gpm: dict[int, float] | None = None  # None: GPM not supported (pre-Hopper)
    memory_v2: bool = True  # False: an old driver without nvmlDeviceGetMemoryInfo_v2
    # function name -> NVML error code it raises on this device
    failing: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Handle:
    index: int
    mig_slot: int | None = None


@dataclass
class _GpmSample:
    serial: int
    handle: _Handle | None = None
    gpu_instance_id: int | None = None
    taken: int | None = None  # which nvmlGpmSampleGet filled it


class FakeNvml:
    """The fake module. ``calls`` counts calls by function name; ``live_samples``
    holds GPM samples allocated and not yet freed."""

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_InvalidArgument = NVMLError_InvalidArgument
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_Unknown = NVMLError_Unknown
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    c_nvmlGpmMetricsGet_t = c_nvmlGpmMetricsGet_t

    def __init__(self, gpus: Sequence[FakeGpu], driver: str = "550.54.15"):
        self.gpus = list(gpus)
        self.driver = driver
        self.initialized = 0
        self.calls: dict[str, int] = {}
        self.live_samples: set[int] = set()
        self._serial = itertools.count(1)
        self._gpm_reads = itertools.count(1)
        for name, value in globals().items():  # the constants, as module attributes
            if name.startswith(("NVML_", "nvmlMemory_")):
                setattr(self, name, value)

    # -- plumbing ------------------------------------------------------------------
    def _enter(self, fn: str, handle: _Handle | None = None) -> None:
        self.calls[fn] = self.calls.get(fn, 0) + 1
        if not self.initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if handle is not None:
            code = self._gpu(handle).failing.get(fn)
            if code is not None:
                raise NVMLError(code)

    def _gpu(self, handle: _Handle) -> FakeGpu:
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle.index]

    def _mig(self, handle: _Handle) -> FakeMig | None:
        if handle.mig_slot is None:
            return None
        return (self._gpu(handle).mig or [])[handle.mig_slot]

    # -- the API ---------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] = self.calls.get("nvmlInit", 0) + 1
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        mig = self._mig(handle)
        return mig.uuid if mig else self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        self._enter("nvmlDeviceGetName", handle)
        gpu, mig = self._gpu(handle), self._mig(handle)
        return f"{gpu.name} MIG {mig.profile}" if mig else gpu.name

    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", device)
        gpu = self._gpu(device)
        if gpu.mig is None or device.mig_slot is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        mode = NVML_DEVICE_MIG_ENABLE if gpu.mig else NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: _Handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", device)
        if self._gpu(device).mig is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: _Handle, index: int) -> _Handle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", device)
        instances = self._gpu(device).mig
        if instances is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < 7:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(instances):
            raise NVMLError(NVML_ERROR_NOT_FOUND)  # an empty slot
        return _Handle(device.index, index)

    def nvmlDeviceGetGpuInstanceId(self, device: _Handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", device)
        mig = self._mig(device)
        if mig is None:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return mig.gpu_instance_id

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> c_nvmlUtilization_t:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        gpu = self._gpu(handle)
        if handle.mig_slot is not None or gpu.util is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return c_nvmlUtilization_t(*gpu.util)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None):
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        gpu, mig = self._gpu(handle), self._mig(handle)
        total, used, reserved = (
            (mig.total_bytes, mig.used_bytes, 0) if mig else (gpu.total_bytes, gpu.used_bytes, gpu.reserved_bytes)
        )
        if not version:
            # v1 counts the driver's reservation as used
            return c_nvmlMemory_t(total, total - used - reserved, used + reserved)
        if not gpu.memory_v2:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        if version != nvmlMemory_v2:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return c_nvmlMemory_v2_t(version, total, reserved, total - used - reserved, used)

    def nvmlDeviceGetPcieThroughput(self, device: _Handle, counter: int) -> int:
        self._enter("nvmlDeviceGetPcieThroughput", device)
        gpu = self._gpu(device)
        if device.mig_slot is not None or gpu.pcie_kbps is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if counter not in (NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.pcie_kbps[counter]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[nvmlFriendlyObject]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", handle)
        gpu, mig = self._gpu(handle), self._mig(handle)
        if mig is not None:
            return [nvmlFriendlyObject(p.pid, p.used_bytes, mig.gpu_instance_id, 0) for p in mig.processes]
        return [nvmlFriendlyObject(p.pid, p.used_bytes) for p in gpu.processes]

    def nvmlGpmQueryDeviceSupport(self, device: _Handle) -> c_nvmlGpmSupport_t:
        self._enter("nvmlGpmQueryDeviceSupport", device)
        return c_nvmlGpmSupport_t(1, int(self._gpu(device).gpm is not None))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self._enter("nvmlGpmSampleAlloc")
        sample = _GpmSample(next(self._serial))
        self.live_samples.add(sample.serial)
        return sample

    def nvmlGpmSampleFree(self, gpmSample: _GpmSample) -> None:
        self._enter("nvmlGpmSampleFree")
        if gpmSample.serial not in self.live_samples:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)  # double free
        self.live_samples.discard(gpmSample.serial)

    def nvmlGpmSampleGet(self, device: _Handle, gpmSample: _GpmSample) -> _GpmSample:
        self._enter("nvmlGpmSampleGet", device)
        if self._gpu(device).gpm is None or device.mig_slot is not None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        gpmSample.handle, gpmSample.gpu_instance_id = device, None
        gpmSample.taken = next(self._gpm_reads)
        return gpmSample

    def nvmlGpmMigSampleGet(self, device: _Handle, gpuInstanceId: int, gpmSample: _GpmSample) -> _GpmSample:
        self._enter("nvmlGpmMigSampleGet", device)
        gpu = self._gpu(device)
        if gpu.gpm is None or not any(m.gpu_instance_id == gpuInstanceId for m in gpu.mig or []):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        gpmSample.handle, gpmSample.gpu_instance_id = device, gpuInstanceId
        gpmSample.taken = next(self._gpm_reads)
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        self._enter("nvmlGpmMetricsGet")
        one, two = metricsGet.sample1, metricsGet.sample2
        if (
            metricsGet.version != NVML_GPM_METRICS_GET_VERSION
            or not isinstance(one, _GpmSample)
            or not isinstance(two, _GpmSample)
            or one.taken is None
            or two.taken is None
            or not one.taken < two.taken
            or (one.handle, one.gpu_instance_id) != (two.handle, two.gpu_instance_id)
            or {one.serial, two.serial} - self.live_samples
        ):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._gpu(two.handle)
        values = gpu.gpm or {}
        if two.gpu_instance_id is not None:
            values = next(m.gpm or {} for m in gpu.mig or [] if m.gpu_instance_id == two.gpu_instance_id)
        for metric in metricsGet.metrics[: metricsGet.numMetrics]:
            if metric.metricId in values:
                metric.value, metric.nvmlReturn = values[metric.metricId], NVML_SUCCESS
            else:
                metric.value, metric.nvmlReturn = 0.0, NVML_ERROR_NOT_SUPPORTED
        return metricsGet
