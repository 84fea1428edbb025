"""The capacity review's "achievable" what-if, replayed on the real scheduler.

A scenario is a snapshot (nodes, running pods, pending pods, the workloads
that own them and their telemetry). :func:`claim` runs ``gpuaudit report`` on
it (the claim: ``whatif.achievable``) and ``gpuaudit fix`` (the overlay, built
with ``kubectl kustomize``). :func:`replay` then loads the cluster *after* the
overlay into a real API server and lets the real kube-scheduler place the
pods the overlay changes:

- the pods of every workload the overlay patches are made from the patched
  pod template (no controller manager runs: a ReplicaSet would do this) and
  left for the scheduler to place;
- the device plugin's sharing config is per node (the node label
  ``nvidia.com/device-plugin.config=shared`` the review names as a manual
  step): a labelled node advertises each of its GPUs as ``replicas``
  ``nvidia.com/gpu.shared`` and no whole ``nvidia.com/gpu`` any more
  (``renameByDefault``), written through the status subresource as the
  device plugin's kubelet would. Per GPU model, the fewest GPUs whose
  replicas hold every moved pod are labelled (the choice most favourable to
  the claim), preferring the nodes those pods already run on and then those
  with fewest whole-GPU pods, which are displaced (drained) and rescheduled
  (pods without GPUs stay);
- every other bound pod stays where it is;
- then the pending pods are created, and the scheduler binds what fits.

What the scheduler did is read back from the API server: whole GPUs free
(allocatable minus requests of bound pods, on nodes that still advertise
them) before and after, and which pending pods bound.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import shutil
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.controlplane.controlplane import ApiError, Kube
from tests.controlplane.loader import clean

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
PRODUCT = "nvidia.com/gpu.product"
CONFIG_LABEL = "nvidia.com/device-plugin.config"

# The scheduler packs (NodeResourcesFit MostAllocated on GPUs): the what-if
# counts GPUs freed by packing, and the default LeastAllocated would spread.
PACKING_SCHEDULER = {
    "profiles": [
        {
            "schedulerName": "default-scheduler",
            "pluginConfig": [
                {
                    "name": "NodeResourcesFit",
                    "args": {
                        "scoringStrategy": {
                            "type": "MostAllocated",
                            "resources": [
                                {"name": GPU, "weight": 5},
                                {"name": SHARED, "weight": 5},
                                {"name": "cpu", "weight": 1},
                                {"name": "memory", "weight": 1},
                            ],
                        }
                    },
                }
            ],
        }
    ]
}


# -- scenario building blocks ----------------------------------------------------------


CLUSTER_POLICY = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "cluster-policy"},
    "spec": {"mig": {"strategy": "single"}, "devicePlugin": {"enabled": True}},
}
STARTED = "2026-11-20T09:00:00Z"


def gpu_node(name: str, gpus: int, product: str, memory_mib: int, *, cpu: str = "64", memory: str = "512Gi") -> dict:
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "nvidia.com/gpu.present": "true",
        PRODUCT: product,
        "nvidia.com/gpu.memory": str(memory_mib),
        "nvidia.com/gpu.count": str(gpus),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/mig.capable": "false",
    }
    capacity = {"cpu": cpu, "memory": memory, "pods": "110", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": STARTED}
            ],
        },
    }


def pod_template(app: str, gpus: int = 1, *, cpu: str = "4", memory: str = "16Gi") -> dict:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": f"registry.example/ml/{app}:1.0",
                    "resources": {
                        "requests": {"cpu": cpu, "memory": memory, GPU: str(gpus)},
                        "limits": {"memory": memory, GPU: str(gpus)},
                    },
                }
            ],
            "restartPolicy": "Always",
        },
    }


def deployment(namespace: str, name: str, replicas: int, template: dict) -> tuple[dict, dict]:
    """A Deployment and its ReplicaSet (``NAME-rs``)."""
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-deploy-{namespace}-{name}"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name}-rs",
            "namespace": namespace,
            "uid": f"uid-rs-{namespace}-{name}",
            "labels": {"app": name},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": name,
                    "uid": dep["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
        "status": {"replicas": replicas, "readyReplicas": replicas},
    }
    return dep, rs


def job(namespace: str, name: str, template: dict) -> dict:
    template = copy.deepcopy(template)
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-job-{namespace}-{name}"},
        "spec": {"template": template, "backoffLimit": 0},
    }


def pod_of(owner: dict, name: str, node: str | None) -> dict:
    """A pod of ``owner`` (a ReplicaSet or a Job): Running on ``node``, or
    Pending and unbound when ``node`` is None."""
    template = owner["spec"]["template"]
    spec = copy.deepcopy(template["spec"])
    status: dict[str, Any] = {"phase": "Pending"}
    if node:
        spec["nodeName"] = node
        status = {
            "phase": "Running",
            "startTime": STARTED,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": STARTED},
                {"type": "Ready", "status": "True", "lastTransitionTime": STARTED},
            ],
        }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": owner["metadata"]["namespace"],
            "uid": f"uid-pod-{owner['metadata']['namespace']}-{name}",
            "creationTimestamp": STARTED,
            "labels": dict((template.get("metadata") or {}).get("labels") or {}),
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": status,
    }


def usage(pod: dict, *, fb_max_mib: float, mean: float, p95: float, fb_total_mib: float, model: str) -> dict:
    """One telemetry row (the shape the Prometheus source writes) for a pod
    holding one GPU over a 7-day window."""
    return {
        "namespace": pod["metadata"]["namespace"],
        "pod": pod["metadata"]["name"],
        "container": "main",
        "node": pod["spec"].get("nodeName"),
        "gpu": "0",
        "uuid": f"GPU-{pod['metadata']['uid']}",
        "model": model,
        "mig_profile": None,
        "mig_id": None,
        "gpus": 1,
        "compute_mean": mean,
        "compute_p95": p95,
        "compute_max": min(1.0, p95 * 1.5),
        "fb_used_mean_mib": fb_max_mib * 0.8,
        "fb_used_max_mib": fb_max_mib,
        "fb_total_mib": fb_total_mib,
        "resident_fraction": 1.0,
        "resident_idle_fraction": 0.0,
        "pcie_tx_mean_bps": None,
        "pcie_rx_mean_bps": None,
        "nvlink_mean_bps": None,
        "occupancy_mean": None,
        "tensor_active_mean": None,
        "dram_active_mean": None,
        "coverage": 0.98,
        "samples": None,
        "first_seen": None,
        "last_seen": None,
        "extra": {},
    }


def snapshot(objects: Mapping[str, list[dict]], telemetry: Iterable[dict], *, name: str) -> dict:
    rows = list(telemetry)
    keys = (
        "nodes", "pods", "events", "replicasets", "jobs", "configmaps", "clusterpolicies",
        "resourceclaims", "resourceslices", "kueueworkloads", "workloads",
    )  # fmt: skip
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": "2026-11-27T09:00:00Z",
        "cluster": {"server": f"https://{name}.example:6443", "context": name},
        "objects": {key: list(objects.get(key) or []) for key in keys},
        "absent": ["resource.k8s.io/v1"],
        "errors": [],
        "telemetry": {
            "version": 1,
            "source": "prometheus",
            "endpoint": "http://prometheus.monitoring.svc:9090",
            "window": {
                "start": "2026-11-20T09:00:00Z",
                "end": "2026-11-27T09:00:00Z",
                "seconds": 604800,
                "step_seconds": 60,
            },
            "signals": {
                "compute": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "occupancy": None,
                "tensor": None,
                "dram": None,
                "memory": "DCGM_FI_DEV_FB_USED",
                "pcie": None,
                "nvlink": None,
            },
            "params": {"resident_fb_mib": 1024, "idle_compute": 0.05},
            "queries": 10,
            "pods": [{k: v for k, v in r.items() if k not in ("gpu", "uuid", "model", "mig_id")} for r in rows],
            "gpus": [{k: v for k, v in r.items() if k != "gpus"} for r in rows],
        },
    }


# -- the claim and the overlay -----------------------------------------------------------


@dataclass
class Claim:
    achievable: dict[str, Any]  # report.json whatif.achievable
    first_screen: Any  # report.json first_screen.whatif.achievable
    patched: list[dict]  # the objects the overlay patches, as kustomize builds them
    replicas: int | None  # time-slicing replicas of the overlay's sharing config

    def freed(self, model: str) -> int:
        return sum(e["freed"] for e in self.achievable["by_model"] if e["model"] == model)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


def claim(snap: dict, workdir: Path, gpuaudit_exe: str, kubectl_exe: str) -> Claim:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "snapshot.json"
    path.write_text(json.dumps(snap))
    review = workdir / "review"
    done = _run([gpuaudit_exe, "report", "--snapshot", str(path), "--out", str(review), "--no-record"], workdir)
    assert (review / "report.json").is_file(), done.stderr[-3000:]
    document = json.loads((review / "report.json").read_text())
    overlay = workdir / "overlay"
    fixed = _run([gpuaudit_exe, "fix", "--snapshot", str(path), "--out", str(overlay)], workdir)
    assert fixed.returncode in (0, 1), fixed.stderr[-3000:]
    built = _run([kubectl_exe, "kustomize", str(overlay)], workdir)
    assert built.returncode == 0, built.stderr[-3000:]
    objects = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    replicas = None
    for obj in objects:
        if obj.get("kind") == "ConfigMap":
            for text in (obj.get("data") or {}).values():
                config = yaml.safe_load(text) or {}
                for res in ((config.get("sharing") or {}).get("timeSlicing") or {}).get("resources") or []:
                    replicas = int(res["replicas"])
    return Claim(document["whatif"]["achievable"], document["first_screen"]["whatif"]["achievable"], objects, replicas)


# -- the replay ----------------------------------------------------------------------------


def _gpu_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for c in spec.get("containers") or []:
        for key, value in ((c.get("resources") or {}).get("requests") or {}).items():
            if key.startswith("nvidia.com/"):
                out[key] += int(value)
    return dict(out)


def _template_of(pod: dict, snap: dict, patched: Mapping[tuple[str, str, str], dict]) -> dict | None:
    """The patched pod template of the workload that owns ``pod``, if the
    overlay patches it."""
    namespace = pod["metadata"]["namespace"]
    for ref in pod["metadata"].get("ownerReferences") or []:
        names = [(ref["kind"], ref["name"])]
        if ref["kind"] == "ReplicaSet":
            for rs in snap["objects"]["replicasets"]:
                if rs["metadata"]["name"] == ref["name"] and rs["metadata"].get("namespace") == namespace:
                    names += [(o["kind"], o["name"]) for o in rs["metadata"].get("ownerReferences") or []]
            names.append(("Deployment", ref["name"].rsplit("-", 1)[0]))
        for kind, name in names:
            obj = patched.get((namespace, kind, name))
            if obj is not None:
                return obj["spec"]["template"]
    return None


@dataclass
class Replay:
    model_of: dict[str, str]  # node -> GPU model (product label)
    shared_nodes: list[str]
    free_before: dict[str, int]  # model -> whole GPUs free on schedulable nodes, before
    free_after: dict[str, int] = field(default_factory=dict)  # after the moves, before the pending pods
    idle_behind_sharing: dict[str, int] = field(default_factory=dict)  # GPUs of shared nodes no replica needs
    moved: int = 0
    unplaced: list[str] = field(default_factory=list)  # moved or displaced pods the scheduler could not place
    pending_bound: list[str] = field(default_factory=list)
    pending_left: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)

    def freed(self, model: str) -> int:
        return self.free_after.get(model, 0) - self.free_before.get(model, 0)


def _free_whole(nodes: Iterable[dict], pods: Iterable[dict]) -> dict[str, int]:
    """Whole GPUs free per model on schedulable nodes: allocatable minus what bound pods request."""
    held: dict[str, int] = defaultdict(int)
    for p in pods:
        if p["spec"].get("nodeName") and p["status"].get("phase") in ("Running", "Pending", None):
            held[p["spec"]["nodeName"]] += _gpu_requests(p["spec"]).get(GPU, 0)
    free: dict[str, int] = defaultdict(int)
    for n in nodes:
        gpus = int((n.get("status") or {}).get("allocatable", {}).get(GPU, 0) or 0)
        model = n["metadata"].get("labels", {}).get(PRODUCT)
        if gpus and model and not n["spec"].get("unschedulable"):
            free[model] += gpus - held[n["metadata"]["name"]]
    return dict(free)


def _quantity(value: Any) -> float:
    """cpu in cores, memory in MiB (enough of the quantity grammar for these tests)."""
    text = str(value)
    units = {"m": 1e-3, "Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0, "Ti": 1024.0**2}
    for suffix, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def _requests(spec: Mapping[str, Any]) -> tuple[float, float]:
    cpu = memory = 0.0
    for c in spec.get("containers") or []:
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += _quantity(req.get("cpu", 0))
        memory += _quantity(req.get("memory", 0))
    return cpu, memory


def choose_shared_nodes(
    nodes: list[dict],
    moved_on: Mapping[str, int],
    whole_on: Mapping[str, int],
    need: int,
    replicas: int,
    fits: Callable[[list[str]], bool] = lambda _: True,
) -> list[str]:
    """Nodes whose GPUs, shared ``replicas`` ways, hold ``need`` moved pods:
    among those for which ``fits`` (a first-fit check of GPUs, CPU and memory:
    the moved pods on these nodes, the whole-GPU pods they displace on the
    others), the fewest GPUs, then the nodes hosting most moved pods, then
    those with fewest whole-GPU pods. When none fits (up to one node more than
    the fewest that hold the replicas), the fewest GPUs."""
    named = [(n["metadata"]["name"], int(n["status"]["allocatable"].get(GPU, 0))) for n in nodes]
    named = [(name, g) for name, g in named if g]
    best: tuple | None = None
    smallest = 1  # the fewest nodes that could hold the replicas
    for k in range(1, len(named) + 1):
        for combo in itertools.combinations(named, k):
            gpus = sum(g for _, g in combo)
            if gpus * replicas < need:
                continue
            names = [n for n, _ in combo]
            key = (
                not fits(names),
                gpus,
                -sum(moved_on.get(n, 0) for n in names),
                sum(whole_on.get(n, 0) for n in names),
            )
            if best is None or key < best[0]:
                best = (key, names)
        if best is not None and (not best[0][0] or k >= smallest + 1):
            break  # more nodes would only share more GPUs (and the search grows fast)
        if best is None:
            smallest = k + 1
    assert best is not None, f"{need} moved pods do not fit in every GPU shared {replicas} ways"
    return best[1]


def _bound_or_judged(kube: Kube, namespace_names: Iterable[tuple[str, str]]) -> dict[str, dict]:
    out = {}
    for namespace, name in namespace_names:
        got = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        out[f"{namespace}/{name}"] = got
    return out


def _settled(pod: dict) -> bool:
    if pod["spec"].get("nodeName"):
        return True
    return any(  # Unschedulable, or SchedulingGated (a Kueue gate)
        c["type"] == "PodScheduled" and c["status"] == "False"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _create_pods(kube: Kube, pods: list[dict], timeout: float) -> dict[str, dict]:
    for p in pods:
        obj = clean(p)
        try:
            kube.create(obj)
        except ApiError as exc:
            raise AssertionError(f"creating pod {p['metadata']['name']}: {exc}") from None
        if p["spec"].get("nodeName") and p.get("status"):
            kube.write_status(obj, p["status"])
    keys = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods if not p["spec"].get("nodeName")]

    def settled() -> dict[str, dict] | None:
        got = _bound_or_judged(kube, keys)
        return got if all(_settled(p) for p in got.values()) else None

    return kube.wait("the scheduler to judge every pod", settled, timeout=timeout) if keys else {}


def replay(kube: Kube, snap: dict, claim_: Claim, *, timeout: float = 120.0) -> Replay:
    objects = snap["objects"]
    nodes = [n for n in objects["nodes"]]
    model_of = {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(PRODUCT) for n in nodes}
    patched = {
        (o["metadata"].get("namespace", ""), o["kind"], o["metadata"]["name"]): o
        for o in claim_.patched
        if isinstance((o.get("spec") or {}).get("template"), dict)
    }
    running = [p for p in objects["pods"] if p["spec"].get("nodeName") and p["status"].get("phase") == "Running"]
    pending = [p for p in objects["pods"] if not p["spec"].get("nodeName") and p["status"].get("phase") == "Pending"]
    result = Replay(model_of, [], _free_whole(nodes, running))

    # Pods the overlay changes: their workload's patched template.
    moved: list[tuple[dict, str]] = []  # (the pod from the patched template, the node it ran on)
    kept: list[dict] = []
    for p in running:
        template = _template_of(p, snap, patched)
        if template is None or _gpu_requests(template["spec"]) == _gpu_requests(p["spec"]):
            kept.append(p)
            continue
        new = copy.deepcopy(p)
        new["spec"] = copy.deepcopy(template["spec"])
        new["status"] = {}
        moved.append((new, p["spec"]["nodeName"]))
        result.moved += 1

    # Label the nodes for the sharing config, per GPU model.
    shared: set[str] = set()
    if moved:
        replicas = claim_.replicas
        assert replicas, "the overlay moves pods to a shared GPU but writes no time-slicing replicas"
        by_model: dict[str, list[str]] = defaultdict(list)
        for _, node in moved:
            by_model[model_of[node]].append(node)
        for model, hosts in by_model.items():
            moved_on = defaultdict(int)
            for h in hosts:
                moved_on[h] += 1
            whole_on: dict[str, int] = defaultdict(int)
            for p in kept:
                if model_of.get(p["spec"]["nodeName"]) == model and _gpu_requests(p["spec"]).get(GPU):
                    whole_on[p["spec"]["nodeName"]] += 1
            pool = [n for n in nodes if model_of[n["metadata"]["name"]] == model and not n["spec"].get("unschedulable")]
            room = {}  # CPU and memory a node has left, without the pods that move or lose their GPUs
            for n in pool:
                name = n["metadata"]["name"]
                cpu, memory = (_quantity(n["status"]["allocatable"].get(k, 0)) for k in ("cpu", "memory"))
                for p in kept:
                    if p["spec"]["nodeName"] == name:
                        c, m = _requests(p["spec"])
                        cpu, memory = cpu - c, memory - m
                room[name] = (cpu, memory)
            movers = [_requests(p["spec"]) for p, node in moved if model_of[node] == model]

            def fits(names: list[str], pool=pool, room=room, movers=movers, model=model) -> bool:
                """First fit, largest first, by GPUs (or replicas), CPU and memory: the
                moved pods on the shared nodes, the whole-GPU pods they displace on the others."""
                inside = set(names)
                free: dict[str, list[float]] = {}
                for n in pool:
                    name = n["metadata"]["name"]
                    gpus = int(n["status"]["allocatable"].get(GPU, 0))
                    slots = gpus * replicas if name in inside else gpus
                    free[name] = [slots, room[name][0], room[name][1]]
                displaced = []
                for p in kept:
                    node = p["spec"]["nodeName"]
                    whole = _gpu_requests(p["spec"]).get(GPU, 0)
                    if node in free and whole:
                        if node in inside:  # it leaves: its CPU and memory come back
                            free[node][1] += _requests(p["spec"])[0]
                            free[node][2] += _requests(p["spec"])[1]
                            displaced.append((whole, *_requests(p["spec"])))
                        else:
                            free[node][0] -= whole
                for group, targets in (
                    ([(1, c, m) for c, m in movers], inside),
                    (displaced, set(free) - inside),
                ):
                    for need in sorted(group, key=lambda x: (-x[1], -x[2])):
                        node = next((t for t in sorted(targets) if all(free[t][i] >= need[i] for i in range(3))), None)
                        if node is None:
                            return False
                        free[node] = [free[node][i] - need[i] for i in range(3)]
                return True

            shared.update(choose_shared_nodes(pool, moved_on, whole_on, len(hosts), replicas, fits))
    result.shared_nodes = sorted(shared)

    # The nodes, as their device plugin advertises them after the overlay.
    after_nodes = []
    for n in nodes:
        n = copy.deepcopy(n)
        if n["metadata"]["name"] in shared:
            gpus = int(n["status"]["allocatable"][GPU])
            n["metadata"]["labels"][CONFIG_LABEL] = "shared"
            for section in ("capacity", "allocatable"):
                n["status"][section][GPU] = "0"
                n["status"][section][SHARED] = str(gpus * int(claim_.replicas or 1))
        after_nodes.append(n)
        obj = clean(n)
        kube.add_node(obj, n["status"])

    # A pod holding whole GPUs on a node that now shares them loses them: it
    # is drained and rescheduled. Pods without GPUs stay where they are.
    def loses_gpus(p: dict) -> bool:
        return p["spec"]["nodeName"] in shared and bool(_gpu_requests(p["spec"]).get(GPU))

    stay = [p for p in kept if not loses_gpus(p)]
    displaced = []
    for p in kept:
        if loses_gpus(p):
            d = copy.deepcopy(p)
            d["spec"].pop("nodeName")
            d["status"] = {}
            displaced.append(d)
    namespaces = {p["metadata"]["namespace"] for p in objects["pods"]}
    for ns in sorted(namespaces):
        kube.ensure_namespace(ns)
    _create_pods(kube, stay, timeout)
    judged = _create_pods(kube, [p for p, _ in moved] + displaced, timeout)
    result.unplaced = sorted(k for k, p in judged.items() if not p["spec"].get("nodeName"))
    for key in result.unplaced:
        cond = next(c for c in judged[key]["status"]["conditions"] if c["type"] == "PodScheduled")
        result.messages[key] = cond.get("message") or cond.get("reason", "")
    bound = [*stay, *judged.values()]
    result.free_after = _free_whole(after_nodes, [p for p in bound if p["spec"].get("nodeName")])
    # GPUs of shared nodes that no shared replica needs (ceil(replicas used / replicas per GPU)).
    used: dict[str, int] = defaultdict(int)
    for p in judged.values():
        if p["spec"].get("nodeName"):
            used[p["spec"]["nodeName"]] += _gpu_requests(p["spec"]).get(SHARED, 0)
    for n in after_nodes:
        name = n["metadata"]["name"]
        if name in shared:
            gpus = int(n["status"]["allocatable"][SHARED]) // int(claim_.replicas or 1)
            result.idle_behind_sharing[model_of[name]] = (
                result.idle_behind_sharing.get(model_of[name], 0)
                + gpus
                - math.ceil(used[name] / int(claim_.replicas or 1))
            )

    # The pending pods: what binds now.
    waiting = []
    for p in pending:
        w = copy.deepcopy(p)
        w["status"] = {}
        waiting.append(w)
    judged = _create_pods(kube, waiting, timeout)
    for key, p in sorted(judged.items()):
        if p["spec"].get("nodeName"):
            result.pending_bound.append(key)
        else:
            result.pending_left.append(key)
            cond = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
            result.messages[key] = cond.get("message") or cond.get("reason", "")
    return result


def clear(kube: Kube, snap: dict) -> None:
    """Delete the scenario's pods and nodes (no kubelet: a grace period of 0 removes them at once)."""
    for p in snap["objects"]["pods"]:
        kube.delete(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": p["metadata"]["name"], "namespace": p["metadata"]["namespace"]},
            }
        )
    for n in snap["objects"]["nodes"]:
        kube.delete({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n["metadata"]["name"]}})

    def gone() -> bool:
        return not kube.list("v1", "Pod") and not kube.list("v1", "Node")

    kube.wait("the scenario's pods and nodes to go", gone, timeout=60)


def tools() -> tuple[str, str]:
    import sys

    from tests.controlplane.controlplane import ROOT

    gpuaudit = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
    kubectl = shutil.which("kubectl", path=str(ROOT / ".tools" / "bin")) or shutil.which("kubectl") or "kubectl"
    return gpuaudit, kubectl
