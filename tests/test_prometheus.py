"""gpuaudit.sources.prometheus against a real Prometheus (Debian package),
backfilled by promtool with dcgm-exporter-shaped series: the GenTD26 trace and
small synthetic sets for label variants, MIG, fallbacks, gaps and scale; plus
stdlib HTTP stubs in front of it for failures."""

from __future__ import annotations

import csv
import io
import json
import math
import tarfile
import time
import uuid
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path

import pytest

from gpuaudit.sources import promql
from gpuaudit.sources.prometheus import TelemetryUnavailable, query_telemetry
from tests import genai_trace as genai
from tests.prometheus_server import Family, Reply, StubServer, free_port, write_openmetrics

RESIDENT_FB_MIB = 1024
IDLE_COMPUTE = 0.05
VERDICT = 0.5  # resident-idle: at least half of the pod's samples


# --- (a) the GenTD26 trace: PromQL against plain Python on the CSV ----------


def _csv_rows(name: str):
    with tarfile.open(genai.DATA_DIR / name, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".csv"))
        yield from csv.DictReader(io.TextIOWrapper(tar.extractfile(member), encoding="utf-8"))


def _quantile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (quantile_over_time's rule)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _per_sample_truth(step: float) -> dict[str, dict]:
    """Per pod, sample by sample from the CSV files, with no notion of a
    lookback: a sample is a (timestamp, value) row, a gap is a gap. Shares are
    exact fractions of the pod's samples (resident-idle over the timestamps
    where both files have a sample); coverage is the pod's duty-cycle samples
    over the trace steps from its first to its last one."""
    util: dict[str, dict[float, float]] = {}
    fb: dict[str, dict[float, float]] = {}
    for row in _csv_rows(genai.DUTY):
        util.setdefault(row["container_ip"], {})[float(row["timestamp_anon"])] = float(row["value"])
    for row in _csv_rows(genai.MEMORY):
        fb.setdefault(row["container_ip"], {})[float(row["timestamp_anon"])] = float(row["value"]) / 2**20
    out = {}
    for i, ip in enumerate(sorted(util)):
        u, m = util[ip], fb.get(ip, {})
        both = sorted(set(u) & set(m))
        idle = sum(1 for t in both if m[t] > RESIDENT_FB_MIB and u[t] / 100 < IDLE_COMPUTE)
        first, last = min(u), max(u)
        ratios = [v / 100 for v in u.values()]
        out[f"sd-serving-{i:03d}"] = {
            "samples": len(u),
            "joint_samples": len(both),
            "span_seconds": last - first,
            "coverage": Fraction(len(u), round((last - first) / step) + 1),
            "resident_fraction": (Fraction(sum(1 for v in m.values() if v > RESIDENT_FB_MIB), len(m)) if m else None),
            "resident_idle_fraction": Fraction(idle, len(both)) if both else None,
            "compute_mean": sum(ratios) / len(ratios),
            "compute_p95": _quantile(ratios, 0.95),
        }
    return out


def _verdict(value: float | None) -> bool:
    # the same rule on both sides; the epsilon absorbs Prometheus' running
    # mean (a share of exactly 1/2 may come back as 0.49999999999999994)
    return value is not None and value >= VERDICT - 1e-9


def test_genai_real_samples_match_a_per_sample_count(genai_prometheus):
    """Every share counts real samples only: Prometheus' lookback would repeat
    the last value into the trace's gaps (45% of some pods' minutes are
    missing, mostly after idle samples)."""
    trace = genai_prometheus.trace
    step = int(trace.step)  # 57 s: subquery steps land on the samples
    window = genai_prometheus.window_seconds()
    got = query_telemetry(
        genai_prometheus.url,
        window_seconds=window,
        end=genai_prometheus.end,
        step_seconds=step,
        params={"resident_fb_mib": RESIDENT_FB_MIB, "idle_compute": IDLE_COMPUTE},
    )
    assert got["errors"] == []
    assert got["signals"]["compute"] == "DCGM_FI_DEV_GPU_UTIL"
    assert got["signals"]["memory"] == "DCGM_FI_DEV_FB_USED"
    pods = {p["pod"]: p for p in got["pods"]}
    assert len(pods) == 143 and len(got["gpus"]) == 143

    truth = _per_sample_truth(trace.step)
    assert set(truth) == set(pods)
    for name, want in truth.items():
        pod = pods[name]
        assert pod["samples"] == want["samples"], name
        assert pod["last_seen"] - pod["first_seen"] == pytest.approx(want["span_seconds"]), name
        for key in ("resident_fraction", "resident_idle_fraction", "coverage"):
            assert pod[key] == pytest.approx(float(want[key]), abs=1e-9), (name, key)
        for key in ("compute_mean", "compute_p95"):
            assert pod[key] == pytest.approx(want[key], rel=1e-9, abs=1e-12), (name, key)
        assert pod["namespace"] == "genai" and pod["container"] == "main"
        index = int(name.rsplit("-", 1)[1])
        assert pod["node"] == f"genai-node-{index // 8:02d}" and pod["gpus"] == 1
        assert pod["fb_total_mib"] == pytest.approx(81920)

    # Recorded: 139 of 143 pods are resident at under 5% compute in at least
    # half their samples; 121 of them also average under 10% compute.
    idle = sorted(n for n, w in truth.items() if _verdict(w["resident_idle_fraction"]))
    assert len(idle) == 139
    assert sum(1 for n in idle if truth[n]["compute_mean"] < 0.1) == 121


def test_genai_pod_lives_are_judged_inside_a_longer_window(genai_prometheus):
    """A 7-day window around a 23-hour trace: coverage is over each pod's own
    life, so it is the same as with a window that just holds the trace."""
    trace = genai_prometheus.trace
    step = int(trace.step)
    got = query_telemetry(genai_prometheus.url, window_seconds=7 * 86400, end=genai_prometheus.end, step_seconds=step)
    assert got["errors"] == []
    truth = _per_sample_truth(trace.step)
    pods = {p["pod"]: p for p in got["pods"]}
    assert {n: pods[n]["samples"] for n in truth} == {n: w["samples"] for n, w in truth.items()}
    for name, want in truth.items():
        assert pods[name]["coverage"] == pytest.approx(float(want["coverage"]), abs=1e-9), name


# --- (b) synthetic series -----------------------------------------------------

STEP = 60
WINDOW = 3600


def _uuid(name: str) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, name)}"


def _steps(end: int, count: int = 61, every: int = STEP):
    return [end - WINDOW + k * every for k in range(count)]


class Synthetic:
    """Windows three hours apart, each ending at a multiple of 60 s; the probe
    at each window's end sees only that window's metrics."""

    def __init__(self, now: float):
        base = int(now // 3600) * 3600 - 3600
        self.variants_end = base  # label variants, MIG, gaps, NaN; no SM_ACTIVE
        self.util_only_end = base - 3 * 3600  # only GPU_UTIL (percent)
        self.sm_end = base - 6 * 3600  # SM_ACTIVE and the fallbacks all present
        self.big_end = base - 9 * 3600  # 5,000 pods
        self.small_end = base - 12 * 3600  # 143 pods, same metrics
        self.families: dict[str, list] = {}

    def add(self, metric: str, labels: dict[str, str], samples) -> None:
        self.families.setdefault(metric, []).append((labels, list(samples)))

    def gpu(
        self,
        end: int,
        labels: dict[str, str],
        times,
        *,
        compute=None,
        fb=None,
        free=None,
        reserved=None,
        util=None,
        sm=None,
        pcie=None,
        dram=None,
    ) -> None:
        for metric, value in (
            ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", compute),
            ("DCGM_FI_DEV_FB_USED", fb),
            ("DCGM_FI_DEV_FB_FREE", free),
            ("DCGM_FI_DEV_FB_RESERVED", reserved),
            ("DCGM_FI_DEV_GPU_UTIL", util),
            ("DCGM_FI_PROF_SM_ACTIVE", sm),
            ("DCGM_FI_PROF_PCIE_TX_BYTES", pcie),
            ("DCGM_FI_PROF_PCIE_RX_BYTES", pcie),
            ("DCGM_FI_PROF_DRAM_ACTIVE", dram),
        ):
            if value is not None:
                self.add(metric, labels, ((t, value(k) if callable(value) else value) for k, t in enumerate(times)))

    def as_families(self) -> list[Family]:
        return [Family(name, series) for name, series in sorted(self.families.items())]


def _bulk(syn: Synthetic, end: int, namespace: str, count: int) -> None:
    for i in range(count):
        labels = {
            "gpu": str(i % 8),
            "UUID": _uuid(f"{namespace}/{i}"),
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": f"{namespace}-node-{i // 8}",
            "namespace": namespace,
            "pod": f"{namespace}-{i:04d}",
            "container": "main",
        }
        syn.gpu(end, labels, [end - 120, end - 60, end], util=float(i % 100), fb=float(1000 + i), free=float(80000 - i))


def _build_synthetic(now: float) -> Synthetic:
    syn = Synthetic(now)
    end = syn.variants_end
    full = _steps(end)
    base = {
        "modelName": "NVIDIA A100-SXM4-80GB",
        "Hostname": "mig-node",
        "gpu": "0",
        "UUID": _uuid("mig-gpu"),
        "namespace": "ml",
        "container": "c",
    }
    # Two MIG instances on one GPU.
    syn.gpu(
        end,
        {**base, "GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "1", "pod": "mig-idle"},
        full,
        compute=0.01,
        fb=5000.0,
        free=4700.0,
        reserved=300.0,
    )
    syn.gpu(
        end,
        {**base, "GPU_I_PROFILE": "3g.40gb", "GPU_I_ID": "2", "pod": "mig-busy"},
        full,
        compute=0.8,
        fb=30000.0,
        free=9000.0,
        reserved=1000.0,
    )
    # Behind a ServiceMonitor with honorLabels: false, new `hostname` label.
    exporter = {
        "pod": "nvidia-dcgm-exporter-x7k2p",
        "namespace": "gpu-operator",
        "container": "nvidia-dcgm-exporter",
        "hostname": "node-b",
        "modelName": "NVIDIA H100 80GB HBM3",
    }
    syn.gpu(
        end,
        {
            **exporter,
            "gpu": "1",
            "UUID": _uuid("b1"),
            "exported_pod": "train-0",
            "exported_namespace": "research",
            "exported_container": "trainer",
        },
        full,
        compute=lambda k: 0.4 if k % 2 else 0.6,
        fb=30000.0,
        free=51920.0,
        pcie=lambda k: 1e6 * (k % 3),
        dram=lambda k: 0.7 if k % 2 else 0.5,
    )
    # A GPU no pod holds: only the exporter's own labels.
    syn.gpu(end, {**exporter, "gpu": "2", "UUID": _uuid("b2")}, full, compute=0.0, fb=0.0, free=81920.0)
    node_c = {"Hostname": "node-c", "modelName": "NVIDIA L4", "namespace": "ml", "container": "c"}
    # A 20-minute gap; a series that stops halfway; NaN and +Inf samples.
    gappy = [t for k, t in enumerate(full) if not 20 <= k < 40]
    syn.gpu(
        end, {**node_c, "gpu": "0", "UUID": _uuid("c0"), "pod": "gappy"}, gappy, compute=0.02, fb=2000.0, free=20000.0
    )
    syn.gpu(
        end,
        {**node_c, "gpu": "1", "UUID": _uuid("c1"), "pod": "halfway"},
        full[:31],
        compute=0.02,
        fb=2000.0,
        free=20000.0,
    )
    syn.gpu(
        end,
        {**node_c, "gpu": "2", "UUID": _uuid("c2"), "pod": "nanny"},
        full,
        compute=lambda k: math.nan if k % 10 == 0 else 0.3,
        fb=3000.0,
        free=19000.0,
        pcie=lambda k: math.inf if k == 5 else 1000.0,
    )
    # The same GPU scraped by two jobs: one row, not two.
    for instance in ("10.0.0.1:9400", "10.0.0.2:9400"):
        syn.gpu(
            end,
            {**node_c, "gpu": "3", "UUID": _uuid("c3"), "pod": "twice", "instance": instance},
            full,
            compute=0.5,
            fb=4000.0,
            free=18000.0,
        )

    end = syn.util_only_end
    only = {"Hostname": "old-node", "modelName": "Tesla V100-SXM2-32GB", "namespace": "legacy", "container": "c"}
    syn.gpu(
        end,
        {**only, "gpu": "0", "UUID": _uuid("o0"), "pod": "idle-v100"},
        _steps(end),
        util=3.0,
        fb=2048.0,
        free=30720.0,
    )
    syn.gpu(
        end,
        {**only, "gpu": "1", "UUID": _uuid("o1"), "pod": "busy-v100"},
        _steps(end),
        util=50.0,
        fb=2048.0,
        free=30720.0,
    )

    end = syn.sm_end
    syn.gpu(
        end,
        {
            "Hostname": "h-node",
            "gpu": "0",
            "UUID": _uuid("h0"),
            "namespace": "ml",
            "pod": "sm-pod",
            "container": "c",
            "modelName": "NVIDIA H100 80GB HBM3",
        },
        _steps(end),
        sm=0.2,
        compute=0.9,
        util=100.0,
        fb=9000.0,
        free=72000.0,
    )

    _bulk(syn, syn.big_end, "bulk", 5000)
    _bulk(syn, syn.small_end, "small", 143)
    return syn


@pytest.fixture(scope="module")
def synthetic(prometheus_factory):
    syn = _build_synthetic(time.time())
    return prometheus_factory(syn.as_families(), "synthetic"), syn


def _at(end: int) -> datetime:
    return datetime.fromtimestamp(end, tz=timezone.utc)


def _query(url: str, end: int, **kw):
    kw.setdefault("window_seconds", WINDOW)
    kw.setdefault("step_seconds", STEP)
    return query_telemetry(url, end=_at(end), **kw)


def _pod(result, namespace, name):
    found = [p for p in result["pods"] if p["namespace"] == namespace and p["pod"] == name]
    assert len(found) == 1, (namespace, name, [(p["namespace"], p["pod"]) for p in result["pods"]])
    return found[0]


def test_label_variants_mig_fallback_gaps_nan(synthetic):
    url, syn = synthetic
    got = _query(url, syn.variants_end)
    assert got["errors"] == []
    # SM_ACTIVE is absent: the fallback is recorded.
    assert got["signals"]["compute"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert got["signals"]["pcie"] == "DCGM_FI_PROF_PCIE_TX_BYTES"
    assert got["signals"]["dram"] == "DCGM_FI_PROF_DRAM_ACTIVE"
    assert got["signals"]["nvlink"] is None and got["signals"]["tensor"] is None
    assert got["window"]["seconds"] == WINDOW and got["window"]["step_seconds"] == STEP
    assert got["params"]["resident_fb_mib"] == 1024
    json.dumps(got, allow_nan=False)  # NaN/Inf never reach the output

    idle = _pod(got, "ml", "mig-idle")
    assert idle["mig_profile"] == "1g.10gb" and idle["node"] == "mig-node"
    assert idle["compute_mean"] == pytest.approx(0.01)
    assert idle["fb_total_mib"] == pytest.approx(10000)  # used + free + reserved
    assert idle["resident_idle_fraction"] == pytest.approx(1.0)
    busy = _pod(got, "ml", "mig-busy")
    assert busy["mig_profile"] == "3g.40gb" and busy["resident_idle_fraction"] == 0
    assert busy["resident_fraction"] == 1
    mig_rows = [g for g in got["gpus"] if g["node"] == "mig-node"]
    assert sorted((g["mig_id"], g["pod"]) for g in mig_rows) == [("1", "mig-idle"), ("2", "mig-busy")]

    # exported_* labels name the workload; the exporter's own pod is not a workload.
    train = _pod(got, "research", "train-0")
    assert train["container"] == "trainer" and train["node"] == "node-b"
    assert train["compute_mean"] == pytest.approx(0.5, abs=0.01)
    assert train["compute_max"] == pytest.approx(0.6)
    assert train["fb_total_mib"] == pytest.approx(81920)  # no FB_RESERVED series: counts as 0
    assert train["pcie_tx_mean_bps"] == pytest.approx(1e6 * 60 / 61)  # 20x 0, 21x 1e6, 20x 2e6
    assert train["pcie_rx_mean_bps"] == pytest.approx(1e6 * 60 / 61)
    assert train["dram_active_mean"] == pytest.approx((31 * 0.5 + 30 * 0.7) / 61)  # even steps 0.5
    assert _pod(got, "ml", "mig-idle")["dram_active_mean"] is None  # no series: no value, not 0
    assert not any(p["pod"].startswith("nvidia-dcgm-exporter") for p in got["pods"])
    free_gpu = [g for g in got["gpus"] if g["uuid"] == _uuid("b2")]
    assert len(free_gpu) == 1 and free_gpu[0]["pod"] is None and free_gpu[0]["node"] == "node-b"

    # Coverage: real samples / steps of the pod's own life in the window; the
    # lookback fills no gap (it would carry each value 5 minutes).
    gappy = _pod(got, "ml", "gappy")
    assert gappy["coverage"] == pytest.approx((20 + 21) / 61) and gappy["samples"] == 41
    halfway = _pod(got, "ml", "halfway")  # stopped halfway: judged on the half it lived
    assert halfway["coverage"] == 1 and halfway["samples"] == 31
    full = _steps(syn.variants_end)
    assert (halfway["first_seen"], halfway["last_seen"]) == (full[0], full[30])
    assert _pod(got, "ml", "mig-idle")["coverage"] == 1

    # NaN/Inf are missing values, never 0 and never NaN.
    nanny = _pod(got, "ml", "nanny")
    assert nanny["compute_mean"] is None
    assert nanny["compute_max"] == pytest.approx(0.3)
    assert nanny["pcie_tx_mean_bps"] is None
    assert nanny["fb_used_mean_mib"] == pytest.approx(3000)

    twice = [g for g in got["gpus"] if g["pod"] == "twice"]
    assert len(twice) == 1 and twice[0]["coverage"] == 1
    assert _pod(got, "ml", "twice")["gpus"] == 1


def test_only_gpu_util_is_divided_by_100(synthetic):
    url, syn = synthetic
    got = _query(url, syn.util_only_end)
    assert got["signals"]["compute"] == "DCGM_FI_DEV_GPU_UTIL"
    idle = _pod(got, "legacy", "idle-v100")
    assert idle["compute_mean"] == pytest.approx(0.03)
    assert idle["compute_p95"] == pytest.approx(0.03)
    assert idle["resident_idle_fraction"] == 1
    busy = _pod(got, "legacy", "busy-v100")
    assert busy["compute_max"] == pytest.approx(0.5) and busy["resident_idle_fraction"] == 0
    assert busy["resident_fraction"] == 1


def test_sm_active_preferred_when_present(synthetic):
    url, syn = synthetic
    got = _query(url, syn.sm_end)
    assert got["signals"]["compute"] == "DCGM_FI_PROF_SM_ACTIVE"
    assert _pod(got, "ml", "sm-pod")["compute_mean"] == pytest.approx(0.2)


def test_no_gpu_metrics_in_window_is_unavailable(synthetic):
    url, syn = synthetic
    with pytest.raises(TelemetryUnavailable, match="none of the GPU metrics"):
        _query(url, syn.variants_end + 5 * 86400)


def test_site_override_adds_a_signal_and_params_win(synthetic):
    url, syn = synthetic
    override = {
        "signals": {
            "busy_minutes": {
                "candidates": [{"metric": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}],
                "fields": {
                    "busy_steps": {
                        "promql": "count_over_time((${busy_minutes} > ${threshold})[${range}:${step}])",
                        "merge": "sum",
                        "rollup": "sum",
                    }
                },
            },
            "nvlink": None,
        },
        "params": {"threshold": 0.45},
    }
    got = _query(url, syn.variants_end, queries=override, params={"resident_fb_mib": 10000})
    assert got["signals"]["busy_minutes"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert got["params"]["threshold"] == 0.45 and got["params"]["resident_fb_mib"] == 10000
    assert _pod(got, "ml", "mig-busy")["extra"] == {"busy_steps": 61}
    assert _pod(got, "research", "train-0")["extra"] == {"busy_steps": 31}  # k even: 0.6
    assert _pod(got, "ml", "mig-idle")["extra"] == {"busy_steps": None}
    assert _pod(got, "ml", "mig-idle")["resident_fraction"] == 0  # 5000 MiB < 10000


def test_override_with_unknown_placeholder_is_rejected():
    with pytest.raises(promql.QueryConfigError, match="unknown placeholders"):
        promql.load_queries({"signals": {"compute": {"fields": {"x": "rate(${nope}[5m])"}}}})


# --- (c) query count does not depend on the number of pods --------------------


def test_query_count_same_for_143_and_5000_pods(synthetic, request):
    url, syn = synthetic
    small = _query(url, syn.small_end)
    big = _query(url, syn.big_end)
    assert len(small["pods"]) == 143 and len(big["pods"]) == 5000
    assert small["errors"] == [] and big["errors"] == []
    assert small["queries"] == big["queries"] == 12  # 1 probe + 6 compute + 5 memory fields
    pod = _pod(big, "bulk", "bulk-4321")
    assert pod["compute_mean"] == pytest.approx(0.21) and pod["fb_used_max_mib"] == 5321
    # The GenTD26 trace has the same metrics, so the same queries.
    if genai.available():
        real = request.getfixturevalue("genai_prometheus")
        got = query_telemetry(real.url, window_seconds=real.window_seconds(), end=real.end, step_seconds=57)
        assert got["queries"] == big["queries"]


def test_pods_filter_is_chunked_and_exact(synthetic):
    url, syn = synthetic
    wanted = [("bulk", f"bulk-{i:04d}") for i in range(0, 5000, 37)] + [("other", "bulk-0001")]
    # A small byte budget forces several chunks, each within it.
    with StubServer(lambda req: None, upstream=url) as stub:
        got = _query(stub.url, syn.big_end, pods=wanted, params={"max_post_bytes": 12000})
    assert max(len(r.body) for r in stub.requests) <= 12000
    assert max(len(r.body) for r in stub.requests) > 6000  # and not needlessly small
    names = {(p["namespace"], p["pod"]) for p in got["pods"]}
    assert names == {w for w in wanted if w[0] == "bulk"}
    chunks = (got["queries"] - 1) // 11
    assert got["queries"] == 1 + 11 * chunks and 1 < chunks <= 8
    # Too many chunks: one unfiltered pass, filtered here, same answer.
    fallback = _query(url, syn.big_end, pods=wanted, params={"max_post_bytes": 2000})
    assert fallback["queries"] == 12
    assert {(p["namespace"], p["pod"]) for p in fallback["pods"]} == names
    assert fallback["pods"] == got["pods"]


def test_empty_pods_filter_reads_nothing_more(synthetic):
    url, syn = synthetic
    got = _query(url, syn.big_end, pods=[])
    assert got["pods"] == [] and got["gpus"] == [] and got["queries"] == 1


def test_partial_response_warnings_are_recorded(synthetic):
    url, syn = synthetic

    def partial(req):
        if "quantile_over_time" not in req.query:
            return None
        return Reply(
            200,
            json.dumps(
                {
                    "status": "success",
                    "warnings": ["store 2 unreachable"],
                    "data": {"resultType": "vector", "result": []},
                }
            ).encode(),
        )

    with StubServer(partial, upstream=url) as stub:
        got = _query(stub.url, syn.util_only_end)
    assert got["errors"] == [{"endpoint": stub.url, "query": "compute_p95", "message": "warning: store 2 unreachable"}]
    assert _pod(got, "legacy", "idle-v100")["compute_p95"] is None


def test_large_subqueries_are_sharded_by_uuid(synthetic):
    url, syn = synthetic
    whole = _query(url, syn.big_end)
    # 5,000 series x 61 steps > 100,000 points: the 5 subquery fields split 4 ways.
    sharded = _query(url, syn.big_end, params={"max_points_per_query": 100_000})
    assert sharded["queries"] == whole["queries"] + 5 * 3
    assert sharded["pods"] == whole["pods"]


# --- (d) failures -----------------------------------------------------------


def test_prometheus_down_is_unavailable():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TelemetryUnavailable, match="cannot connect"):
        query_telemetry(url, window_seconds=3600, timeout=2)


def test_http_500_and_status_error_are_recorded(synthetic):
    url, syn = synthetic

    def handler(req):
        if "quantile_over_time" in req.query:
            return Reply(500, b"upstream exploded")
        if "max_over_time(DCGM" in req.query:
            return Reply(
                422,
                json.dumps(
                    {
                        "status": "error",
                        "errorType": "execution",
                        "error": "query processing would load too many samples into memory",
                    }
                ).encode(),
            )
        if "avg_over_time(DCGM_FI_DEV_FB_USED" in req.query and "FREE" not in req.query:
            return Reply(200, b'{"status":"error","errorType":"timeout","error":"slow"}')
        return None

    with StubServer(handler, upstream=url) as stub:
        got = _query(stub.url, syn.util_only_end)
    failed = {e["query"]: e["message"] for e in got["errors"]}
    assert set(failed) == {"compute_p95", "compute_max", "fb_used_max_mib", "fb_used_mean_mib"}
    assert failed["compute_p95"].startswith("HTTP 500") and "exploded" in failed["compute_p95"]
    assert "too many samples" in failed["compute_max"]
    assert failed["fb_used_mean_mib"] == "timeout: slow"
    assert all(e["endpoint"] == stub.url for e in got["errors"])
    pod = _pod(got, "legacy", "idle-v100")
    assert pod["compute_p95"] is None and pod["fb_used_max_mib"] is None  # missing, not 0
    assert pod["compute_mean"] == pytest.approx(0.03) and pod["resident_idle_fraction"] == 1


def test_every_query_failing_is_unavailable(synthetic):
    url, syn = synthetic

    def handler(req):
        return None if "count(last_over_time(" in req.query else Reply(503, b"overloaded")

    with StubServer(handler, upstream=url) as stub, pytest.raises(TelemetryUnavailable, match="HTTP 503"):
        _query(stub.url, syn.util_only_end)


def test_slow_server_times_out_in_bounded_time(synthetic):
    url, syn = synthetic
    with StubServer(lambda req: Reply(200, b"{}", delay=5.0)) as stub:
        started = time.monotonic()
        with pytest.raises(TelemetryUnavailable, match="timed out"):
            _query(stub.url, syn.util_only_end, timeout=0.3)
        assert time.monotonic() - started < 2

    # Only one field is slow: it is an error, the rest is read.
    def slow_quantile(req):
        return Reply(200, b"{}", delay=5.0) if "quantile_over_time" in req.query else None

    with StubServer(slow_quantile, upstream=url) as stub:
        started = time.monotonic()
        got = _query(stub.url, syn.util_only_end, timeout=1.0)
        assert time.monotonic() - started < 4
    assert [e["query"] for e in got["errors"]] == ["compute_p95"]
    assert "timed out" in got["errors"][0]["message"]
    assert _pod(got, "legacy", "busy-v100")["compute_mean"] == pytest.approx(0.5)


def test_repeated_timeouts_stop_sending(synthetic):
    url, syn = synthetic

    def slow_fields(req):
        return None if "count(last_over_time(" in req.query else Reply(200, b"{}", delay=5.0)

    with StubServer(slow_fields, upstream=url) as stub:
        started = time.monotonic()
        with pytest.raises(TelemetryUnavailable, match="timed out"):
            _query(stub.url, syn.util_only_end, timeout=0.3)
        assert time.monotonic() - started < 2.5
        assert len(stub.requests) == 3  # the probe, then two timeouts in a row


def test_auth_headers_and_get_fallback(synthetic):
    url, syn = synthetic

    def no_post(req):
        return Reply(405, b"method not allowed") if req.method == "POST" else None

    with StubServer(no_post, upstream=url) as stub:
        got = _query(stub.url, syn.util_only_end, bearer_token="s3cret", headers={"X-Scope-OrgID": "tenant-a"})
    assert got["errors"] == [] and len(got["pods"]) == 2
    gets = [r for r in stub.requests if r.method == "GET"]
    assert len(gets) == 12 and len(stub.requests) == 13  # one refused POST, then GET only
    assert all(r.headers["Authorization"] == "Bearer s3cret" for r in stub.requests)
    assert all(r.headers["X-Scope-OrgID"] == "tenant-a" for r in stub.requests)
    assert got["queries"] == 13

    with StubServer(lambda req: None, upstream=url) as stub:
        _query(stub.url, syn.util_only_end, basic_auth=("alice", "pw"))
    assert stub.requests[0].headers["Authorization"] == "Basic YWxpY2U6cHc="


def test_request_too_large_splits_the_chunk(synthetic):
    url, syn = synthetic
    wanted = [("bulk", f"bulk-{i:04d}") for i in range(40)]

    def limit(req):
        return Reply(431, b"") if len(req.body) > 3000 else None

    with StubServer(limit, upstream=url) as stub:
        got = _query(stub.url, syn.big_end, pods=wanted)
    assert got["errors"] == []
    assert {p["pod"] for p in got["pods"]} == {p for _, p in wanted}
    assert any(r.body and len(r.body) > 3000 for r in stub.requests)  # it did hit the limit


def test_window_is_reported_in_utc(synthetic):
    url, syn = synthetic
    got = _query(url, syn.util_only_end)
    assert got["window"]["end"] == _at(syn.util_only_end).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert got["endpoint"] == url and got["source"] == "prometheus" and got["version"] == 1


def test_redacts_credentials_in_endpoint():
    port = free_port()
    with pytest.raises(TelemetryUnavailable) as exc:
        query_telemetry(f"http://user:pw@127.0.0.1:{port}", window_seconds=60, timeout=1)
    assert "pw" not in str(exc.value) and f"127.0.0.1:{port}" in str(exc.value)


def test_openmetrics_writer_format(tmp_path: Path):
    series = [({"a": 'q"x'}, [(2, 1.5), (1, math.nan)])]
    n = write_openmetrics(tmp_path / "x.om", [Family("m", series)])
    assert n == 2
    assert (tmp_path / "x.om").read_text().splitlines() == [
        "# TYPE m gauge",
        'm{a="q\\"x"} NaN 1',
        'm{a="q\\"x"} 1.5 2',
        "# EOF",
    ]
