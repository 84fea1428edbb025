"""The NVML sampler (against a scripted fake pynvml), PID -> pod mapping through
a fake /proc, and the aggregation of sample files into telemetry."""

from __future__ import annotations

import inspect
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaudit.durations import parse_duration
from gpuaudit.model.telemetry import TelemetryUnavailable
from gpuaudit.sources import nvml as sampler
from gpuaudit.sources.samples import aggregate_samples, load_pods_json, quantile
from tests import fake_pynvml as fake
from tests.fake_pynvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

GIB = 2**30
MIB = 2**20
UID_IDLE = "1b2c3d4e-0000-4a5b-8c9d-0123456789ab"
UID_BUSY = "5e6f7a8b-1111-4c2d-9e0f-abcdefabcdef"
UID_MIG = "9a8b7c6d-2222-4e3f-8a1b-fedcba987654"
CID = "0123456789abcdef" * 4
CID2 = "fedcba9876543210" * 4

# /proc/<pid>/cgroup as each runtime and cgroup driver writes it
LAYOUTS = {
    "systemd-v2-containerd-burstable": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{UID_IDLE.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
        UID_IDLE,
        CID,
    ),
    "systemd-v2-crio-guaranteed": (
        f"0::/kubepods.slice/kubepods-pod{UID_MIG.replace('-', '_')}.slice/crio-{CID}.scope\n",
        UID_MIG,
        CID,
    ),
    "systemd-v1-docker-besteffort": (
        f"12:pids:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{UID_BUSY.replace('-', '_')}.slice/docker-{CID}.scope\n"
        f"11:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{UID_BUSY.replace('-', '_')}.slice/docker-{CID}.scope\n"
        f"1:name=systemd:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{UID_BUSY.replace('-', '_')}.slice/docker-{CID}.scope\n",
        UID_BUSY,
        CID,
    ),
    "cgroupfs-v1": (
        f"11:memory:/kubepods/burstable/pod{UID_BUSY}/{CID}\n10:cpu,cpuacct:/kubepods/burstable/pod{UID_BUSY}/{CID}\n",
        UID_BUSY,
        CID,
    ),
    "cgroupfs-v2-guaranteed": (f"0::/kubepods/pod{UID_IDLE}/{CID}\n", UID_IDLE, CID),
    "cgroup-namespace-relative": (
        f"0::/../../kubepods-besteffort-pod{UID_MIG.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
        UID_MIG,
        CID,
    ),
    "kind-nested-in-docker": (f"0::/docker/{CID2}/kubepods/besteffort/pod{UID_IDLE}/{CID}\n", UID_IDLE, CID),
    "pod-cgroup-itself": (
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_IDLE.replace('-', '_')}.slice\n",
        UID_IDLE,
        None,
    ),
    "host-process": ("0::/user.slice/user-1000.slice/session-3.scope\n", None, None),
    "plain-docker": (f"0::/system.slice/docker-{CID}.scope\n", None, None),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_cgroup_layouts(tmp_path: Path, layout: str):
    text, uid, container = LAYOUTS[layout]
    assert sampler.pod_of_cgroup(text) == (uid, container)
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text(text)
    assert sampler.pod_of_pid(4242, str(tmp_path)) == (uid, container)


def test_vanished_process_has_no_pod(tmp_path: Path):
    assert sampler.pod_of_pid(999999, str(tmp_path)) == (None, None)


def _proc(tmp_path: Path, pids: dict[int, str]) -> str:
    root = tmp_path / "proc"
    for pid, uid in pids.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
            f"{uid.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
        )
    return str(root)


class FakeTime:
    """A monotonic clock that only moves when the sampler sleeps (or when a
    test says a tick took time)."""

    def __init__(self, tick_cost: float = 0.0):
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.tick_cost = tick_cost

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def wall(self) -> float:  # called once per tick
        stamp = 1_800_000_000 + self.now
        self.now += self.tick_cost
        return stamp


def _run(
    nvml: FakeNvml, proc_root: str, *, ticks: int = 5, interval: float = 1.0, clock: FakeTime | None = None, pods=None
) -> list[dict]:
    clock = clock or FakeTime()
    out = io.StringIO()
    sampler.sample(
        interval=interval,
        duration=ticks * interval,
        out=out,
        proc_root=proc_root,
        clock=clock.clock,
        sleep=clock.sleep,
        wall_clock=clock.wall,
        nvml=nvml,
        node="gpu-node-1",
        pods_by_uid=pods,
    )
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _two_gpus() -> FakeNvml:
    idle = FakeGpu(
        "NVIDIA A100-SXM4-80GB",
        "GPU-aaaaaaaa-0000-0000-0000-000000000000",
        total_bytes=80 * GIB,
        used_bytes=30 * GIB,
        reserved_bytes=512 * MIB,
        util=(0, 0),
        pcie_kbps=(10, 20),
        processes=[FakeProcess(1234, 30 * GIB)],
        mig=[],
    )
    busy = FakeGpu(
        "NVIDIA H100 80GB HBM3",
        "GPU-bbbbbbbb-0000-0000-0000-000000000000",
        total_bytes=80 * GIB,
        used_bytes=20 * GIB,
        util=(97, 60),
        pcie_kbps=(2048, 4096),
        processes=[FakeProcess(2345, 20 * GIB)],
        mig=[],
        gpm={
            fake.NVML_GPM_METRIC_SM_UTIL: 90.0,
            fake.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0,
            fake.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 30.0,
            fake.NVML_GPM_METRIC_DRAM_BW_UTIL: 70.0,
        },
    )
    return FakeNvml([idle, busy])


def test_sampler_writes_one_record_per_gpu_and_tick(tmp_path: Path):
    nvml = _two_gpus()
    clock = FakeTime()
    proc = _proc(tmp_path, {1234: UID_IDLE, 2345: UID_BUSY})
    lines = _run(nvml, proc, clock=clock, pods={UID_IDLE: ("genai", "sd-serving-000")})
    header, records = lines[0], lines[1:]
    assert header["kind"] == "header" and header["interval_s"] == 1.0
    assert header["gpus"] == 2 and header["driver_version"] == "550.54.15"
    assert len(records) == 10 and {r["kind"] for r in records} == {"gpu"}
    assert clock.sleeps == [1.0] * 4  # on schedule: ticks at 0, 1, 2, 3, 4 s
    assert nvml.initialized == 0 and not nvml.live_samples  # shut down, GPM samples freed

    idle = [r for r in records if r["gpu"] == "0"]
    first = idle[0]
    assert first["uuid"] == "GPU-aaaaaaaa-0000-0000-0000-000000000000"
    assert first["model"] == "NVIDIA A100-SXM4-80GB" and first["node"] == "gpu-node-1"
    assert first["mig_enabled"] is False and first["mig_id"] is None
    assert first["util_gpu_pct"] == 0 and first["util_memory_pct"] == 0
    assert first["fb_used_bytes"] == 30 * GIB and first["fb_total_bytes"] == 80 * GIB
    assert first["fb_reserved_bytes"] == 512 * MIB
    assert first["fb_free_bytes"] == 80 * GIB - 30 * GIB - 512 * MIB
    assert first["pcie_tx_bytes_per_s"] == 10 * 1024 and first["pcie_rx_bytes_per_s"] == 20 * 1024
    assert first["sm_util_pct"] is None  # no GPM before Hopper
    assert first["processes"] == [
        {
            "pid": 1234,
            "used_bytes": 30 * GIB,
            "pod_uid": UID_IDLE,
            "container_id": CID,
            "namespace": "genai",
            "pod": "sd-serving-000",
        }
    ]
    assert first["errors"] == []
    assert [r["ts"] for r in idle] == [1_800_001_000.0 + k for k in range(5)]

    busy = [r for r in records if r["gpu"] == "1"]
    assert busy[0]["sm_util_pct"] is None  # GPM needs two samples
    assert [r["sm_util_pct"] for r in busy[1:]] == [90.0] * 4
    assert busy[1]["sm_occupancy_pct"] == 40.0 and busy[1]["tensor_util_pct"] == 30.0
    assert busy[1]["dram_bw_util_pct"] == 70.0 and first["dram_bw_util_pct"] is None
    assert busy[1]["processes"][0]["pod_uid"] == UID_BUSY
    assert busy[1]["processes"][0]["pod"] is None  # no name for that UID


def test_aggregate_finds_the_resident_idle_pod(tmp_path: Path):
    nvml = _two_gpus()
    lines = _run(nvml, _proc(tmp_path, {1234: UID_IDLE, 2345: UID_BUSY}))
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = aggregate_samples([path], pods_by_uid={UID_IDLE: ("genai", "sd-serving-000"), UID_BUSY: ("train", "bert-0")})
    assert got["source"] == "nvml" and got["queries"] == 0 and got["errors"] == []
    assert got["window"]["seconds"] == 4 and got["window"]["step_seconds"] == 1.0
    assert got["signals"]["compute"] == "nvml.gpm.sm_util|nvml.utilization.gpu"
    assert got["signals"]["occupancy"] == "nvml.gpm.sm_occupancy"
    pods = {(p["namespace"], p["pod"]): p for p in got["pods"]}
    idle = pods[("genai", "sd-serving-000")]
    assert idle["resident_idle_fraction"] == 1.0 and idle["resident_fraction"] == 1.0
    assert idle["compute_mean"] == 0.0 and idle["fb_used_mean_mib"] == 30 * 1024
    assert idle["fb_total_mib"] == 80 * 1024 and idle["coverage"] == 1.0
    assert idle["pcie_tx_mean_bps"] == 10 * 1024 and idle["gpus"] == 1
    assert idle["pod_uid"] == UID_IDLE and idle["node"] == "gpu-node-1"
    busy = pods[("train", "bert-0")]
    assert busy["resident_idle_fraction"] == 0.0 and busy["resident_fraction"] == 1.0
    assert busy["compute_mean"] == pytest.approx(0.9)  # GPM SM util, not the 97% busy time
    assert busy["occupancy_mean"] == pytest.approx(0.4)
    assert busy["tensor_active_mean"] == pytest.approx(0.3)
    assert busy["dram_active_mean"] == pytest.approx(0.7) and idle["dram_active_mean"] is None
    assert got["signals"]["dram"] == "nvml.gpm.dram_bw_util"
    assert len(got["gpus"]) == 2
    json.dumps(got, allow_nan=False)


def test_mig_instances_are_sampled_and_aggregated(tmp_path: Path):
    gpu = FakeGpu(
        "NVIDIA A100-SXM4-80GB",
        "GPU-cccccccc-0000-0000-0000-000000000000",
        total_bytes=80 * GIB,
        used_bytes=6 * GIB,
        util=(0, 0),
        gpm={fake.NVML_GPM_METRIC_SM_UTIL: 50.0},
        mig=[
            FakeMig(
                "1g.10gb",
                7,
                "MIG-11111111-0000-0000-0000-000000000000",
                10 * GIB,
                6 * GIB,
                [FakeProcess(3456, 6 * GIB)],
                gpm={fake.NVML_GPM_METRIC_SM_UTIL: 1.0},
            ),
            FakeMig("3g.40gb", 2, "MIG-22222222-0000-0000-0000-000000000000", 40 * GIB, 0),
        ],
    )
    nvml = FakeNvml([gpu])
    lines = _run(nvml, _proc(tmp_path, {3456: UID_MIG}), ticks=4)
    records = lines[1:]
    assert len(records) == 4 * 3  # the GPU and its two instances
    parent = [r for r in records if r["mig_id"] is None]
    small = [r for r in records if r["mig_id"] == "7"]
    big = [r for r in records if r["mig_id"] == "2"]
    assert parent[0]["mig_enabled"] is True
    assert small[0]["mig_profile"] == "1g.10gb" and big[0]["mig_profile"] == "3g.40gb"
    assert small[0]["uuid"].startswith("MIG-1111") and small[0]["gpu"] == "0"
    assert small[0]["parent_uuid"] == gpu.uuid
    assert small[0]["util_gpu_pct"] is None and small[0]["pcie_tx_bytes_per_s"] is None
    assert small[0]["errors"] == []  # NotSupported is normal for MIG handles
    assert small[0]["fb_used_bytes"] == 6 * GIB and small[0]["fb_total_bytes"] == 10 * GIB
    assert [r["sm_util_pct"] for r in small] == [None, 1.0, 1.0, 1.0]  # per-instance GPM
    assert small[1]["processes"][0]["pod_uid"] == UID_MIG
    assert nvml.calls.get("nvmlGpmMigSampleGet") and not nvml.live_samples

    path = tmp_path / "mig.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = aggregate_samples([path], pods_by_uid={UID_MIG: ("ml", "notebook")})
    assert {(g["mig_id"], g["pod"]) for g in got["gpus"]} == {("7", "notebook"), ("2", None)}
    pod = got["pods"][0]
    assert (pod["namespace"], pod["pod"], pod["mig_profile"]) == ("ml", "notebook", "1g.10gb")
    assert pod["compute_mean"] == pytest.approx(0.01)
    assert pod["resident_idle_fraction"] == 1.0  # three ticks with both signals, all idle
    assert pod["fb_total_mib"] == 10 * 1024


def test_not_supported_fields_are_null_and_other_errors_recorded(tmp_path: Path):
    old = FakeGpu(
        "Tesla T4",
        "GPU-dddddddd-0000-0000-0000-000000000000",
        total_bytes=16 * GIB,
        used_bytes=2 * GIB,
        reserved_bytes=256 * MIB,
        util=None,
        pcie_kbps=None,
        memory_v2=False,
        processes=[FakeProcess(4321, None)],
    )
    broken = FakeGpu(
        "NVIDIA L4",
        "GPU-eeeeeeee-0000-0000-0000-000000000000",
        total_bytes=24 * GIB,
        used_bytes=GIB,
        util=(5, 1),
        failing={
            "nvmlDeviceGetComputeRunningProcesses": fake.NVML_ERROR_NO_PERMISSION,
            "nvmlDeviceGetUUID": fake.NVML_ERROR_NOT_FOUND,
            "nvmlDeviceGetPcieThroughput": fake.NVML_ERROR_GPU_IS_LOST,
        },
    )
    nvml = FakeNvml([old, broken])
    lines = _run(nvml, _proc(tmp_path, {4321: UID_IDLE}), ticks=3)
    t4 = [r for r in lines[1:] if r["gpu"] == "0"]
    assert all(r["util_gpu_pct"] is None and r["util_memory_pct"] is None for r in t4)
    assert all(r["pcie_tx_bytes_per_s"] is None for r in t4)
    # no v2 memory call on this driver: v1, whose "used" includes the reservation
    assert t4[0]["fb_reserved_bytes"] is None and t4[0]["fb_used_bytes"] == 2 * GIB + 256 * MIB
    assert t4[0]["processes"][0]["used_bytes"] is None
    assert t4[0]["mig_enabled"] is None  # MIG not supported
    assert all(r["errors"] == [] for r in t4)
    l4 = [r for r in lines[1:] if r["gpu"] == "1"]
    assert l4[0]["uuid"] is None and l4[0]["processes"] is None
    assert l4[0]["util_gpu_pct"] == 5  # the rest still read
    assert "processes: Insufficient Permissions" in l4[0]["errors"]
    assert "pcie_tx_bytes_per_s: GPU is lost" in l4[0]["errors"]
    assert len(l4) == 3  # kept going

    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = aggregate_samples([path])
    row = next(g for g in got["gpus"] if g["gpu"] == "0")
    assert row["compute_mean"] is None and row["resident_idle_fraction"] is None  # not "idle"
    assert row["resident_fraction"] == 1.0  # the device's memory stands in for the process's
    assert row["pod"] is None and row["pod_uid"] == UID_IDLE  # UID without a name


def test_missed_ticks_are_skipped_not_bunched(tmp_path: Path):
    clock = FakeTime(tick_cost=2.5)  # each tick takes 2.5 intervals
    nvml = FakeNvml([FakeGpu("X", "GPU-x", total_bytes=GIB, used_bytes=0)])
    lines = _run(nvml, str(tmp_path), ticks=5, clock=clock)
    assert len(lines) - 1 == 3  # ticks 0, 2 and 4 ran; 1 and 3 were too late


def test_nvml_init_failure_is_a_clear_error():
    class NoDriver(FakeNvml):
        def nvmlInit(self) -> None:
            raise fake.NVMLError(9)

    with pytest.raises(sampler.NvmlUnavailable, match="NVML could not start"):
        sampler.sample(interval=1, duration=1, out=io.StringIO(), nvml=NoDriver([]))


def test_pynvml_is_imported_lazily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    code = (
        "import sys, gpuaudit.sources.nvml, gpuaudit.sources.samples, "
        "gpuaudit.sources.prometheus; print('pynvml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    nvml = _two_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    clock = FakeTime()
    out_io = io.StringIO()
    sampler.sample(interval=1, duration=2, out=out_io, clock=clock.clock, sleep=clock.sleep, proc_root=str(tmp_path))
    assert len(out_io.getvalue().splitlines()) == 1 + 2 * 2
    assert nvml.calls["nvmlInit"] == 1


def test_sample_command_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`gpuaudit sample` writes samples; `--aggregate` turns them into telemetry."""
    from click.testing import CliRunner

    from gpuaudit.cli.sample import sample as sample_command

    monkeypatch.setitem(sys.modules, "pynvml", _two_gpus())
    pods = tmp_path / "pods.json"
    pods.write_text(
        json.dumps(
            {
                "kind": "PodList",
                "items": [{"metadata": {"uid": UID_IDLE, "namespace": "genai", "name": "sd-serving-007"}}],
            }
        )
    )
    out = tmp_path / "s.jsonl"
    proc = _proc(tmp_path, {1234: UID_IDLE, 2345: UID_BUSY})
    runner = CliRunner()
    args = ["--interval", "10ms", "--duration", "30ms", "-o", str(out), "--proc-root", proc]
    result = runner.invoke(sample_command, [*args, "--pods", str(pods)])
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 1 + 3 * 2
    result = runner.invoke(sample_command, ["--aggregate", str(out), "--pods", str(pods)])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert [(p["namespace"], p["pod"]) for p in got["pods"]] == [("genai", "sd-serving-007")]
    assert got["pods"][0]["resident_idle_fraction"] == 1.0
    assert runner.invoke(sample_command, ["--interval", "soon", "--duration", "1s"]).exit_code == 2


def test_coverage_of_a_pod_that_left_halfway(tmp_path: Path):
    base = {
        "kind": "gpu",
        "node": "n",
        "gpu": "0",
        "uuid": "GPU-1",
        "model": "m",
        "mig_enabled": False,
        "mig_profile": None,
        "mig_id": None,
        "util_gpu_pct": 0,
        "fb_used_bytes": 8 * GIB,
        "fb_total_bytes": 16 * GIB,
    }
    proc = {"pid": 1, "used_bytes": 8 * GIB, "pod_uid": UID_IDLE, "namespace": "a", "pod": "b"}
    lines = [{"kind": "header", "interval_s": 10}]
    lines += [{**base, "ts": 100 + 10 * k, "processes": [proc] if k < 5 else []} for k in range(10)]
    path = tmp_path / "half.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"kind": "gpu", "ts"')
    got = aggregate_samples([path])
    # coverage is over each row's own life: the pod held the GPU for the first
    # half, with a sample at every tick; the free GPU for the second half
    pod = _only(got["pods"])
    assert pod["coverage"] == 1 and pod["samples"] == 5
    assert (pod["first_seen"], pod["last_seen"]) == (100, 140)
    free = [g for g in got["gpus"] if g["pod_uid"] is None]
    assert _only(free)["coverage"] == 1 and _only(free)["samples"] == 5
    assert [e["query"] for e in got["errors"]] == ["parse"]  # the torn last line
    assert got["errors"][0]["endpoint"].endswith("half.jsonl:12")


def _only(items):
    assert len(items) == 1
    return items[0]


def test_no_samples_is_unavailable(tmp_path: Path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"kind": "header", "interval_s": 1}\n')
    with pytest.raises(TelemetryUnavailable, match="no GPU samples"):
        aggregate_samples([empty])
    with pytest.raises(TelemetryUnavailable, match=r"missing\.jsonl"):
        aggregate_samples([tmp_path / "missing.jsonl"])


def test_load_pods_json_formats(tmp_path: Path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"items": [{"metadata": {"uid": "u1", "namespace": "ns", "name": "a"}}]}))
    assert load_pods_json(path) == {"u1": ("ns", "a")}
    path.write_text(json.dumps([{"metadata": {"uid": "u2", "name": "b"}}]))
    assert load_pods_json(path) == {"u2": ("default", "b")}
    path.write_text(json.dumps({"u3": "ns/c", "u4": ["ns", "d"]}))
    assert load_pods_json(path) == {"u3": ("ns", "c"), "u4": ("ns", "d")}
    path.write_text(json.dumps({"u5": 7}))
    with pytest.raises(ValueError, match="u5"):
        load_pods_json(path)


def test_quantile_interpolates_like_promql():
    assert quantile(0.95, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) == pytest.approx(9.5)
    assert quantile(0.5, [4, 1]) == 2.5
    assert quantile(0.95, []) is None


@pytest.mark.parametrize(
    "text,seconds", [("1s", 1), ("500ms", 0.5), ("2m", 120), ("1h", 3600), ("90", 90), ("1.5s", 1.5)]
)
def test_parse_duration(text: str, seconds: float):
    assert parse_duration(text) == seconds


# --- the fake against the real pynvml ------------------------------------------


def test_fake_matches_installed_pynvml():
    real = pytest.importorskip("pynvml")
    nvml = FakeNvml([])
    api = [name for name in dir(FakeNvml) if name.startswith("nvml") and callable(getattr(FakeNvml, name))]
    assert len(api) >= 20
    for name in api:
        want = list(inspect.signature(getattr(real, name)).parameters)
        got = list(inspect.signature(getattr(nvml, name)).parameters)
        assert got == want, name
    for name in dir(fake):
        if name.startswith(("NVML_", "nvmlMemory_")) and hasattr(real, name):
            assert getattr(fake, name) == getattr(real, name), name
    assert {"NVML_GPM_METRIC_ANY_TENSOR_UTIL", "NVML_PCIE_UTIL_TX_BYTES"} <= set(dir(real))
    for code, cls in fake.NVMLError._by_code.items():
        real_error = real.NVMLError(code)
        fake_error = fake.NVMLError(code)
        assert type(fake_error).__name__ == type(real_error).__name__ == cls.__name__
        assert isinstance(fake_error, fake.NVMLError) and fake_error.value == code
        assert getattr(real, cls.__name__)().value == cls().value == code
        if code in real.NVMLError._errcode_to_string:
            assert str(fake_error) == str(real_error)
    for struct, fields in (
        (real.c_nvmlUtilization_t, {"gpu", "memory"}),
        (real.c_nvmlMemory_v2_t, {"total", "reserved", "free", "used"}),
        (real.c_nvmlProcessInfo_v3_t, {"pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"}),
        (real.c_nvmlGpmSupport_t, {"isSupportedDevice"}),
        (real.c_nvmlGpmMetric_t, {"metricId", "nvmlReturn", "value"}),
    ):
        assert fields <= {f[0] for f in struct._fields_}, struct
    assert issubclass(real.NVMLLibraryMismatchError, Exception)
    assert not issubclass(real.NVMLLibraryMismatchError, real.NVMLError)


def test_gpm_request_builds_the_real_ctypes_struct():
    real = pytest.importorskip("pynvml")
    first, second = real.c_nvmlGpmSample_t(), real.c_nvmlGpmSample_t()
    request = sampler.gpm_request(
        real, first, second, [real.NVML_GPM_METRIC_SM_UTIL, real.NVML_GPM_METRIC_SM_OCCUPANCY]
    )
    assert request.version == real.NVML_GPM_METRICS_GET_VERSION and request.numMetrics == 2
    assert [request.metrics[i].metricId for i in range(2)] == [2, 3]


def test_idle_threshold_is_strict(tmp_path: Path):
    """Compute exactly at idle_compute is not idle (the PromQL uses ``<`` too)."""
    base = {
        "kind": "gpu",
        "node": "n",
        "gpu": "0",
        "uuid": "GPU-1",
        "mig_id": None,
        "fb_used_bytes": 8 * GIB,
        "processes": [],
    }
    path = tmp_path / "edge.jsonl"
    path.write_text(
        "".join(json.dumps({**base, "ts": t, "util_gpu_pct": u}) + "\n" for t, u in ((0, 5), (1, 4), (2, 5), (3, 0)))
    )
    row = _only(aggregate_samples([path])["gpus"])
    assert row["resident_idle_fraction"] == 0.5
    assert row["compute_p95"] == pytest.approx(0.05)
