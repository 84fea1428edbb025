"""A real Prometheus holding DCGM series, kube-state-metrics-shaped series of
a recorded cluster, and gpuaudit's recording rules evaluated by Prometheus
itself: ``promtool tsdb create-blocks-from rules`` runs each level's rules as
range queries against the server and writes their results as blocks, which
the restarted server then serves.

Helpers only (tests/test_monitoring.py, bench/monitoring.py use them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.prometheus_server import Family, PrometheusProcess, backfill, write_openmetrics

GPU = "nvidia.com/gpu"


def _gpus(resources: Mapping[str, Any] | None) -> float:
    resources = resources or {}
    for key in ("requests", "limits"):
        value = (resources.get(key) or {}).get(GPU)
        if value is not None:
            return float(value)
    return 0.0


def ksm_families(cluster: Mapping[str, Sequence[Mapping[str, Any]]], times: Sequence[float]) -> list[Family]:
    """The series kube-state-metrics exports for ``cluster``'s nodes and GPU
    pods, constant at each of ``times``: requests of nvidia_com_gpu per
    container (node "" while unbound), phase, unschedulable, allocatable,
    node labels (the GPU product allowed) and cordons."""
    requests, phases, unschedulable = [], [], []
    for pod in cluster.get("pods") or []:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        ns, name = meta.get("namespace", "default"), meta["name"]
        node = spec.get("nodeName") or ""
        gpu_containers = [(c["name"], _gpus(c.get("resources"))) for c in spec.get("containers") or []]
        if not any(g for _, g in gpu_containers):
            continue
        for container, gpus in gpu_containers:
            if gpus:
                labels = {
                    "namespace": ns,
                    "pod": name,
                    "uid": meta.get("uid", name),
                    "container": container,
                    "node": node,
                    "resource": "nvidia_com_gpu",
                    "unit": "integer",
                }
                requests.append((labels, [(t, gpus) for t in times]))
        phase = status.get("phase") or "Pending"
        for value in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            phases.append(
                (
                    {"namespace": ns, "pod": name, "uid": meta.get("uid", name), "phase": value},
                    [(t, 1.0 if value == phase else 0.0) for t in times],
                )
            )
        refused = any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
            for c in status.get("conditions") or []
        )
        if refused:
            unschedulable.append(
                ({"namespace": ns, "pod": name, "uid": meta.get("uid", name)}, [(t, 1.0) for t in times])
            )
    allocatable, node_labels, cordons = [], [], []
    for node in cluster.get("nodes") or []:
        name = node["metadata"]["name"]
        gpus = float((node.get("status") or {}).get("allocatable", {}).get(GPU) or 0)
        if gpus:
            allocatable.append(
                ({"node": name, "resource": "nvidia_com_gpu", "unit": "integer"}, [(t, gpus) for t in times])
            )
        product = (node["metadata"].get("labels") or {}).get("nvidia.com/gpu.product")
        labels = {"node": name, **({"label_nvidia_com_gpu_product": product} if product else {})}
        node_labels.append((labels, [(t, 1.0) for t in times]))
        cordoned = 1.0 if (node.get("spec") or {}).get("unschedulable") else 0.0
        cordons.append(({"node": name}, [(t, cordoned) for t in times]))
    return [
        Family("kube_pod_container_resource_requests", requests),
        Family("kube_pod_status_phase", phases),
        Family("kube_pod_status_unschedulable", unschedulable),
        Family("kube_node_status_allocatable", allocatable),
        Family("kube_node_labels", node_labels),
        Family("kube_node_spec_unschedulable", cordons),
    ]


def level_files(rules_file: Path, folder: Path) -> list[Path]:
    """One file per recording level (``gpuaudit-gpu``, then
    ``gpuaudit-availability``), alerts left out: promtool backfills a level
    from the series already there, never from rules of the same run."""
    groups = yaml.safe_load(rules_file.read_text())["groups"]
    out = []
    for group in groups:
        recording = [r for r in group["rules"] if "record" in r]
        if not recording:
            continue
        path = folder / f"{group['name']}.yaml"
        path.write_text(yaml.safe_dump({"groups": [{**group, "rules": recording}]}, sort_keys=False))
        out.append(path)
    return out


class RecordedPrometheus:
    """Raw series backfilled, then each level of rules backfilled by promtool
    from the running server over its own (start, end), the server restarted
    after each so the next level sees it."""

    def __init__(self, work: Path):
        self.work = work
        self.data = work / "tsdb"
        self.server: PrometheusProcess | None = None
        self.url = ""

    def load(self, families: Iterable[Family]) -> RecordedPrometheus:
        text = self.work / "series.om"
        write_openmetrics(text, families)
        backfill(text, self.data)
        text.unlink()
        return self._restart()

    def _restart(self) -> RecordedPrometheus:
        if self.server is not None:
            self.server.stop()
        self.server = PrometheusProcess(self.data, self.work)
        self.url = self.server.start()
        return self

    def record(self, rules: Path, start: float, end: float, interval_s: int) -> RecordedPrometheus:
        out = self.work / f"blocks-{rules.stem}"
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.run(
            [
                "promtool",
                "tsdb",
                "create-blocks-from",
                "rules",
                f"--url={self.url}",
                f"--start={int(start)}",
                f"--end={int(end)}",
                f"--eval-interval={interval_s}s",
                f"--output-dir={out}",
                str(rules),
            ],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"promtool rules backfill failed:\n{proc.stdout}\n{proc.stderr}")
        for block in out.iterdir():
            if block.is_dir():
                shutil.move(str(block), self.data / block.name)
        return self._restart()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        form = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"}).encode()
        with urllib.request.urlopen(f"{self.url}/api/v1/query", data=form, timeout=120) as resp:
            payload = json.loads(resp.read())
        assert payload["status"] == "success", payload
        return payload["data"]["result"]


# --- small data sets ------------------------------------------------------------

PENDING_POD = "train-waiting"


def pending_pod() -> dict:
    """A GPU pod the scheduler refused: pending GPUs in both the cluster and
    kube-state-metrics."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": PENDING_POD,
            "namespace": "research",
            "uid": "0000-pending",
            "creationTimestamp": "2026-11-28T08:00:00Z",
        },
        "spec": {
            "containers": [{"name": "main", "image": "trainer:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/18 nodes are available: 18 Insufficient nvidia.com/gpu.",
                }
            ],
        },
    }


def activity_families(end: float, minutes: int = 180) -> list[Family]:
    """Every DCGM signal the activity row shows, for three pods on one node."""
    times = [end - (minutes - i) * 60 for i in range(minutes + 1)]
    pods = {"idle": 0.0, "busy": 0.8, "loader": 0.2}

    def series(value_of):
        for i, (pod, busy) in enumerate(pods.items()):
            labels = {
                "gpu": str(i),
                "UUID": f"GPU-{i:04d}",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": "dgx-0",
                "namespace": "ml",
                "pod": pod,
                "container": "main",
            }
            yield labels, [(t, value_of(pod, busy, j)) for j, t in enumerate(times)]

    def ratio(pod, busy, j):
        return busy

    def fb(pod, busy, j):
        return 40000.0

    def pcie(pod, busy, j):
        return 3e9 if pod == "loader" else 1e7

    return [
        Family("DCGM_FI_PROF_GR_ENGINE_ACTIVE", list(series(ratio))),
        Family("DCGM_FI_PROF_SM_ACTIVE", list(series(ratio))),
        Family("DCGM_FI_PROF_SM_OCCUPANCY", list(series(lambda p, b, j: b / 2))),
        Family("DCGM_FI_DEV_GPU_UTIL", list(series(lambda p, b, j: b * 100))),
        Family("DCGM_FI_DEV_FB_USED", list(series(fb))),
        Family("DCGM_FI_DEV_FB_FREE", list(series(lambda p, b, j: 80000 - 40000.0))),
        Family("DCGM_FI_PROF_PCIE_TX_BYTES", list(series(pcie))),
        Family("DCGM_FI_PROF_PCIE_RX_BYTES", list(series(pcie))),
        Family("DCGM_FI_PROF_NVLINK_TX_BYTES", list(series(lambda p, b, j: 1e8))),
        Family("DCGM_FI_PROF_NVLINK_RX_BYTES", list(series(lambda p, b, j: 1e8))),
        # what the report server's /metrics says of the pending pod (gpuaudit_pending_gpus
        # of output/openmetrics.py, as a ServiceMonitor scrapes it)
        Family(
            "gpuaudit_pending_gpus",
            [({"namespace": "ml", "cause": "allocation", "job": "gpuaudit-report-server"}, [(t, 2.0) for t in times])],
        ),
    ]


def activity_cluster() -> dict:
    node = {
        "metadata": {"name": "dgx-0", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "spec": {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }
    pods = []
    for pod in ("idle", "busy", "loader"):
        pods.append(
            {
                "metadata": {"name": pod, "namespace": "ml"},
                "spec": {
                    "nodeName": "dgx-0",
                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
                },
                "status": {"phase": "Running"},
            }
        )
    pending = pending_pod()
    pending["metadata"]["namespace"] = "ml"
    return {"nodes": [node], "pods": [*pods, pending]}
