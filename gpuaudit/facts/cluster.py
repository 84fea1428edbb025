"""Facts about live cluster state (pure functions over a ClusterState).

Targets: ``pod`` (every pod that holds or waits for GPUs, with its top owner,
status, why it pends, how many GPU nodes it may use, and telemetry), ``node``
(GPU nodes), ``claim`` (DRA ResourceClaims) and ``cluster`` (one document:
totals, sharing configuration, pending demand, queued work).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from gpuaudit.facts import Subject
from gpuaudit.facts import device_plugin as config_facts
from gpuaudit.facts.capacity import physical_gpus
from gpuaudit.facts.process import command_lines
from gpuaudit.facts.scheduling import (
    parse_failed_scheduling,
    selects_node,
    taint_text,
    untolerated_taints,
)
from gpuaudit.facts.workload import LONG_RUNNING_CLASSES, pod_facts, workload_purpose
from gpuaudit.kube.labels import HOSTNAME_LABEL
from gpuaudit.kube.shapes import as_list, as_map
from gpuaudit.kube.timestamps import parse_time
from gpuaudit.model import STUCK_REASONS, ClusterState, Node, Owner, PodState, Resource

KUEUE_GATE = "kueue.x-k8s.io/admission"


def subjects(state: ClusterState) -> Iterator[Subject]:
    telemetry = _telemetry_index(state.telemetry)
    gpu_nodes = [n for n in state.nodes if n.gpu_capacity]
    pod_facts_of = _PodFacts(gpu_nodes, state.collected_at, telemetry)
    held = Counter()
    for pod in state.pods:
        if pod.holds_gpus and pod.node:
            held[pod.node] += pod_facts_of.gpus(pod)
    gpu_pods = [p for p in state.pods if p.workload.requests_gpus]
    pods_known = "pods" not in state.unread
    pending_causes: Counter[str] = Counter()
    for pod in gpu_pods:
        if pod.phase in ("Succeeded", "Failed"):
            continue
        facts = pod_facts_of(pod)
        if facts["pending"]["pending"]:
            pending_causes[facts["pending"]["cause"]] += 1
        owner = pod.owner
        yield Subject(
            "pod",
            facts,
            Resource(owner.api_version, owner.kind, pod.namespace, owner.name, node=pod.node),
            None,
            {**pod.workload.annotations},
            scope="cluster",
        )
    for node in gpu_nodes:
        yield Subject(
            "node",
            node_facts(node, held.get(node.name, 0.0) if pods_known else None, telemetry),
            Resource("v1", "Node", "", node.name, node=node.name),
            None,
            scope="cluster",
        )
    for claim in state.claims:
        facts = claim_facts(claim, state.collected_at)
        yield Subject(
            "claim",
            facts,
            Resource("resource.k8s.io/v1", "ResourceClaim", facts["namespace"], facts["name"]),
            None,
            scope="cluster",
        )
    for doc in state.configs:
        for subject in config_facts.subjects(doc):
            # In a cluster the policy is judged as written: the nodes' own MIG
            # is GPA-SH-102's, and the time-slicing config it lacks still helps
            # the nodes without MIG.
            facts = subject.facts
            if "mig_by_node_label" in facts:
                facts = {**facts, "mig_by_node_label": False}
            yield Subject(subject.target, facts, subject.resource, None, scope="cluster")
    yield Subject(
        "cluster",
        cluster_facts(state, gpu_nodes, gpu_pods, pending_causes),
        Resource("", "Cluster", "", state.source),
        None,
        scope="cluster",
    )


# --- pods -------------------------------------------------------------------------


def _pod_gpus(pod: PodState) -> float:
    """Devices a pod holds in its resources' own units (a GPU, a MIG slice or a
    shared replica counts one), as node allocatable counts them; physical
    GPUs are facts/capacity.py's."""
    total = 0.0
    for t in pod.workload.templates:
        per_container = [sum(r.count or 0 for r in c.gpus if r.mode != "dra") for c in t.containers]
        init = [sum(r.count or 0 for r in c.gpus if r.mode != "dra") for c in t.init_containers]
        total += max(sum(per_container), max(init, default=0))
    return total


def _hours(since: datetime | None, now: datetime) -> float | None:
    return round((now - since).total_seconds() / 3600, 3) if since else None


class _PodFacts:
    """The fact document of each live pod of one cluster.

    Replicas of one workload share their ``templates`` object (the builder
    makes each distinct pod content once: model/cluster_builder.PodWorkloads),
    and what a pod's facts take from its template and owner -- the template's
    pod_facts, its GPUs, the GPU nodes it may use -- is the same for all of
    them: it is computed once per templates object, owner and namespace, and
    each pod adds its own state. FailedScheduling messages repeat too, and are parsed
    once each. The shared parts are plain data that rules and reports only
    read."""

    def __init__(
        self,
        gpu_nodes: Sequence[Node],
        now: datetime,
        telemetry: Mapping[tuple[str, str], Mapping[str, Any]],
    ) -> None:
        self.now = now
        self.telemetry = telemetry
        self.gpu_node_count = len(gpu_nodes)
        self.eligibility = _Eligibility(gpu_nodes)
        # Keyed by the id of a pod's templates: the ClusterState, which holds
        # every pod, outlives this object, so no id is reused meanwhile.
        self._gpus: dict[int, float] = {}
        self._shared: dict[tuple[int, Owner, str], tuple[dict[str, Any], list[str]]] = {}
        self._scheduler_messages: dict[str, dict[str, Any]] = {}

    def gpus(self, pod: PodState) -> float:
        """Devices the pod holds in its resources' own units (_pod_gpus)."""
        key = id(pod.workload.templates)
        if key not in self._gpus:
            self._gpus[key] = _pod_gpus(pod)
        return self._gpus[key]

    def _template_facts(self, pod: PodState) -> tuple[dict[str, Any], list[str]]:
        """pod_facts of the pod's template, with its eligible GPU nodes, and
        the taints that keep it off the others; shared by its replicas."""
        key = (id(pod.workload.templates), pod.owner, pod.namespace)
        if key in self._shared:
            return self._shared[key]
        workload = pod.workload
        template = workload.templates[0]
        owner = pod.owner
        base = {
            "apiVersion": owner.api_version,
            "kind": owner.kind,
            "name": owner.name,
            "namespace": workload.namespace,
            "class": owner.workload_class,
            "long_running": owner.workload_class in LONG_RUNNING_CLASSES,
        }
        lines = command_lines(workload, template)
        # A live pod is judged as what its owner is for: named by the owner, read from no file.
        base.update(workload_purpose(workload, [lines], workload_class=owner.workload_class, name=owner.name, file=""))
        facts = pod_facts(workload, template, base, lines=lines)
        eligible, blocking_taints = self.eligibility.of(template.spec, template.containers)
        facts["placement"]["eligible_gpu_nodes"] = eligible
        facts["placement"]["gpu_nodes"] = self.gpu_node_count
        facts["placement"]["untolerated_taints"] = blocking_taints
        self._shared[key] = facts, blocking_taints
        return facts, blocking_taints

    def _failed_scheduling(self, message: str) -> dict[str, Any]:
        if message not in self._scheduler_messages:
            self._scheduler_messages[message] = parse_failed_scheduling(message)
        return self._scheduler_messages[message]

    def __call__(self, pod: PodState) -> dict[str, Any]:
        """The pod's fact document: its template's facts, and its own state."""
        workload = pod.workload
        shared, blocking_taints = self._template_facts(pod)
        stuck = next((r for r in pod.waiting_reasons if r in STUCK_REASONS), None)
        pending = pod.phase == "Pending" and not pod.node
        parsed = self._failed_scheduling(pod.failed_scheduling) if pending and pod.failed_scheduling else None
        scheduler_cause = parsed["cause"] if parsed else None
        eligible = shared["placement"]["eligible_gpu_nodes"]
        cause, disagreement = (
            pending_cause(pod.scheduling_gates, scheduler_cause, eligible) if pending else (None, None)
        )
        own_spec = workload.document.obj.get("spec")
        return {
            **shared,
            # The raw spec is the pod's own: replicas share a model that leaves
            # out the one field they always differ in (their token volume's name).
            **({"spec": own_spec} if "spec" in shared and isinstance(own_spec, Mapping) else {}),
            "role": workload.name,  # messages name the pod where a manifest names the template
            "pod": workload.name,
            "node": pod.node,
            "phase": pod.phase,
            "holds_gpus": pod.holds_gpus,
            "gpus_held": self.gpus(pod) if pod.holds_gpus else 0.0,
            "status": {
                "waiting_reasons": list(pod.waiting_reasons),
                "stuck_reason": stuck,
                "restarts": pod.restarts,
                "ready": pod.ready,
                "not_ready_hours": _hours(pod.not_ready_since, self.now),
                "age_hours": _hours(pod.start_time, self.now),
            },
            "pending": {
                "pending": pending,
                "cause": cause,
                "scheduler_cause": scheduler_cause,
                "disagreement": disagreement,
                "message": pod.failed_scheduling if pending else None,
                "summary": _pending_summary(pod.failed_scheduling, disagreement) if pending else None,
                "reasons": parsed["reasons"] if parsed else [],
                "untolerated_taints": blocking_taints if pending else [],
                "gates": list(pod.scheduling_gates),
            },
            "telemetry": self.telemetry.get((workload.namespace, workload.name)),
        }


def pending_cause(gates: Sequence[str], scheduler_cause: str | None, eligible: int) -> tuple[str, str | None]:
    """Why a Pending pod waits, and where the scheduler's last word and the
    pod's eligibility disagree. Eligibility is structural: when no GPU node
    matches the pod's selectors, affinity, tolerations and GPU shape, more free
    GPUs would not place it, whatever the last FailedScheduling said."""
    if KUEUE_GATE in gates:
        return "quota", None
    if gates:
        return "gated", None
    if eligible == 0:
        if scheduler_cause in (None, "unknown", "placement"):
            return "placement", None
        return "placement", (
            f"the scheduler's message points to {scheduler_cause}, but no GPU node matches the pod's "
            "selectors, affinity, tolerations and GPU count: freeing GPUs would not place it"
        )
    if scheduler_cause == "placement":
        return "placement", (
            f"the scheduler found no matching node, but {eligible} GPU node(s) match the pod's selectors, "
            "affinity and tolerations as gpuaudit reads them: check the scheduler's message"
        )
    return scheduler_cause or "unknown", None


def _pending_summary(message: str | None, disagreement: str | None) -> str:
    text = message or "no FailedScheduling event recorded"
    return f"{text} ({disagreement})" if disagreement else text


class _Eligibility:
    """How many GPU nodes a pod shape may run on: selectors, required
    affinity, taints and GPU capacity. Cached by the pod's placement signature,
    since every replica of a workload asks the same question; and nodes that
    differ only in their name are judged once, with their count as weight
    (a fleet has few node shapes and thousands of nodes)."""

    def __init__(self, gpu_nodes: Sequence[Node]) -> None:
        self.nodes = [n for n in gpu_nodes if not n.unschedulable]
        shapes: dict[str, tuple[Node, int]] = {}
        for node in self.nodes:
            labels = {k: v for k, v in node.labels.items() if k != HOSTNAME_LABEL}
            key = json.dumps([labels, node.taints, node.gpu_allocatable], sort_keys=True, default=str)
            first, count = shapes.get(key, (node, 0))
            shapes[key] = (first, count + 1)
        self.shapes = list(shapes.values())
        self.by_hostname: dict[str, list[Node]] = {}
        for node in self.nodes:
            if HOSTNAME_LABEL in node.labels:
                self.by_hostname.setdefault(node.labels[HOSTNAME_LABEL], []).append(node)
        self.cache: dict[str, tuple[int, list[str]]] = {}

    def of(self, spec: Mapping[str, Any], containers: Sequence[Any]) -> tuple[int, list[str]]:
        needs: Counter[str] = Counter()
        for c in containers:
            for r in c.gpus:
                if r.mode != "dra" and r.count:
                    needs[r.resource] += r.count
        placement = [
            spec.get("nodeName"),
            spec.get("nodeSelector"),
            as_map(spec.get("affinity")).get("nodeAffinity"),
            spec.get("tolerations"),
        ]
        # repr tells apart every JSON value, and costs a fraction of json.dumps;
        # fields written in another order make a second entry, never a wrong one.
        key = repr([*placement, sorted(needs.items())])
        if key not in self.cache:
            self.cache[key] = self._count(spec, needs, self._candidates(placement[0], placement[1], key))
        return self.cache[key]

    def _candidates(self, node_name: Any, selector: Any, key: str) -> Sequence[tuple[Node, int]]:
        """The nodes to judge, each with its weight. A pod that names nodes
        (nodeName, hostname label, metadata.name field) must be judged node by
        node; any other, shape by shape. A node name or a hostname selector
        admits no other node (facts/scheduling.selects_node), so only the
        nodes it names are judged."""
        if isinstance(node_name, str) and node_name:
            return [(n, 1) for n in self.nodes if n.name == node_name]
        if isinstance(selector, Mapping) and HOSTNAME_LABEL in selector:
            return [(n, 1) for n in self.by_hostname.get(str(selector[HOSTNAME_LABEL]), ())]
        if HOSTNAME_LABEL in key or "metadata.name" in key:
            return [(n, 1) for n in self.nodes]
        return self.shapes

    @staticmethod
    def _count(
        spec: Mapping[str, Any], needs: Mapping[str, float], candidates: Sequence[tuple[Node, int]]
    ) -> tuple[int, list[str]]:
        tolerations = [t for t in as_list(spec.get("tolerations")) if isinstance(t, Mapping)]
        eligible = 0
        blocking: set[str] = set()
        for node, weight in candidates:
            if not selects_node(spec, node.name, node.labels):
                continue
            if any(node.gpu_allocatable.get(res, 0.0) < count for res, count in needs.items()):
                continue
            taints = untolerated_taints(tolerations, node.taints)
            if taints:
                blocking.update(taint_text(t) for t in taints)
                continue
            eligible += weight
        return eligible, sorted(blocking)


# --- nodes, claims, cluster -------------------------------------------------------


def _mig_enabled(node: Node) -> bool:
    if any(r.startswith("nvidia.com/mig-") for r in node.gpu_capacity):
        return True
    config = node.labels.get("nvidia.com/mig.config")
    return bool(config and config != "all-disabled") or "-MIG-" in (node.product or "")


def node_facts(
    node: Node, allocated: float | None, telemetry: Mapping[tuple[str, str], Mapping[str, Any]]
) -> dict[str, Any]:
    """``allocated``: None when the pods could not be read."""
    capable_label = node.labels.get("nvidia.com/mig.capable")
    mig_capable = capable_label == "true" if capable_label else bool(node.model and node.model.mig_capable)
    strategy = node.labels.get("nvidia.com/gpu.sharing-strategy") or node.labels.get(
        "cloud.google.com/gke-gpu-sharing-strategy"
    )
    replicas = node.labels.get("nvidia.com/gpu.replicas")
    return {
        "name": node.name,
        "pointer": "",
        "product": node.product,
        "model": node.model.model if node.model else None,
        "gpus": node.gpus,
        "gpu_resources": dict(node.gpu_capacity),
        "allocated": allocated,
        "free": None if allocated is None else max(sum(node.gpu_allocatable.values()) - allocated, 0.0),
        "mig_capable": mig_capable,
        "mig_enabled": _mig_enabled(node),
        "mig_config": node.labels.get("nvidia.com/mig.config"),
        "sharing_strategy": strategy if strategy and strategy != "none" else None,
        "replicas": int(replicas) if replicas and replicas.isdigit() else None,
        "unschedulable": node.unschedulable,
        "taints": [taint_text(t) for t in node.taints],
    }


def claim_facts(claim: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    meta = as_map(claim.get("metadata"))
    status = as_map(claim.get("status"))
    allocation = status.get("allocation") if isinstance(status.get("allocation"), Mapping) else None
    results = as_list(as_map(as_map(allocation).get("devices")).get("results"))
    return {
        "name": str(meta.get("name", "")),
        "namespace": str(meta.get("namespace", "")),
        "pointer": "",
        "allocated": allocation is not None,
        "reserved": bool(status.get("reservedFor")),
        "devices": [str(r.get("device")) for r in results if isinstance(r, Mapping)],
        "age_hours": _hours(parse_time(meta.get("creationTimestamp")), now),
    }


def cluster_facts(
    state: ClusterState,
    gpu_nodes: Sequence[Node],
    gpu_pods: Sequence[PodState],
    pending_causes: Mapping[str, int],
) -> dict[str, Any]:
    """Totals, with the causes the pending pods' facts give (so the summary and
    the pending findings agree). What depends on a list the collector could not
    read is None (unknown), and ``partial`` names those lists."""
    by_name = {n.name: n for n in gpu_nodes}
    # Physical GPUs, as the capacity review counts them (a MIG slice is its
    # share of a GPU), so that both give the same total.
    allocated = sum(physical_gpus(p, by_name[p.node])[0] for p in gpu_pods if p.holds_gpus and p.node in by_name)
    configs = [s.facts for doc in state.configs for s in config_facts.subjects(doc)]
    nodes_by_strategy = Counter((n.labels.get("nvidia.com/gpu.sharing-strategy") or "none") for n in gpu_nodes)
    mig_nodes = sum(1 for n in gpu_nodes if _mig_enabled(n))
    # Node labels (set by GPU feature discovery) say what is in effect; a
    # config nobody references changes nothing.
    active = sum(v for k, v in nodes_by_strategy.items() if k != "none") + mig_nodes
    pending = [p for p in gpu_pods if p.phase == "Pending" and not p.node]
    single_gpu_services = sum(
        1
        for p in gpu_pods
        if p.holds_gpus
        and p.owner.workload_class in LONG_RUNNING_CLASSES
        and _pod_gpus(p) == 1
        and not any(r.mode != "whole" for t in p.workload.templates for c in t.containers for r in c.gpus)
    )
    kueue = [kueue_pending(w) for w in state.kueue_workloads]
    kueue = [k for k in kueue if k is not None]
    nodes_known = "nodes" not in state.unread
    pods_known = "pods" not in state.unread
    return {
        "name": state.source,
        "pointer": "",
        "partial": sorted(state.unread),
        "gpu_nodes": len(gpu_nodes) if nodes_known else None,
        "gpus_total": sum(n.gpus for n in gpu_nodes) if nodes_known else None,
        "gpus_allocated": round(allocated, 2) if pods_known and nodes_known else None,
        "sharing": {
            "active_nodes": active,
            "time_slicing_nodes": nodes_by_strategy.get("time-slicing", 0),
            "mps_nodes": nodes_by_strategy.get("mps", 0),
            "mig_nodes": mig_nodes,
            "configs_with_sharing": sum(
                1 for c in configs if c.get("configures_sharing") and c.get("config_type") == "device-plugin"
            ),
        },
        "shareable_pods": single_gpu_services if pods_known else None,
        "pending_gpu_pods": len(pending) if pods_known else None,
        "pending_by_cause": dict(sorted(pending_causes.items())) if pods_known else None,
        "kueue_pending": len(kueue),
        "kueue_examples": kueue[:5],
    }


def kueue_pending(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Kueue Workload that waits for quota, with the reason Kueue gives."""
    conditions = {
        c.get("type"): c
        for c in as_list(as_map(workload.get("status")).get("conditions"))
        if isinstance(c, Mapping) and isinstance(c.get("type"), str)
    }
    if conditions.get("Admitted", {}).get("status") == "True":
        return None
    if conditions.get("Finished", {}).get("status") == "True":
        return None
    meta = as_map(workload.get("metadata"))
    reason = conditions.get("QuotaReserved", {})
    queue = as_map(workload.get("spec")).get("queueName")
    message = reason.get("message")
    return {
        "namespace": str(meta.get("namespace", "")),
        "name": str(meta.get("name", "")),
        "queue": queue if isinstance(queue, str) else None,
        "message": message if isinstance(message, str) else None,
    }


# --- telemetry ---------------------------------------------------------------------


def _telemetry_index(telemetry: Mapping[str, Any] | None) -> dict[tuple[str, str], dict[str, Any]]:
    """Pod-level telemetry facts keyed by (namespace, pod); several container
    rows of one pod are combined the way the source combines GPU rows."""
    if not telemetry:
        return {}
    from gpuaudit.model.telemetry import rollup_pods

    window = telemetry.get("window") or {}
    signal = (telemetry.get("signals") or {}).get("compute")
    rows = rollup_pods([{**r, "container": None} for r in telemetry.get("gpus") or []])
    if not rows:  # pod rows without device rows (site queries): take them as they are
        rows = [r for r in telemetry.get("pods") or [] if r.get("container") is None]
    index = {}
    seconds = window.get("seconds")
    for row in rows:
        facts = {key: row.get(key) for key in _TELEMETRY_KEYS}
        facts["signal"] = signal
        facts["signal_name"] = signal_name(signal)
        facts["window_seconds"] = seconds
        # The span the values describe: the pod's life inside the window, from
        # its first to its last sample (the whole window when the source does
        # not say, e.g. NVML samples).
        first, last = row.get("first_seen"), row.get("last_seen")
        span = last - first if first is not None and last is not None and last >= first else seconds
        facts["span_hours"] = round(span / 3600, 2) if span is not None else None
        compute = row.get("compute_mean")
        # Capacity held but not used: GPUs x hours with data x the share of
        # that time the GPU did not compute.
        facts["idle_gpu_hours"] = (
            round(row["gpus"] * span / 3600 * (row.get("coverage") or 0) * (1 - compute), 2)
            if row.get("gpus") and span and compute is not None
            else None
        )
        tx, rx = row.get("pcie_tx_mean_bps"), row.get("pcie_rx_mean_bps")
        facts["pcie_mean_bps"] = tx + rx if tx is not None and rx is not None else None
        extra = dict(row.get("extra") or {})
        facts["extra"] = extra
        facts["demand_evidence"] = _demand_evidence(extra)
        if row.get("pod") is not None:
            index[(row.get("namespace") or "", row["pod"])] = facts
    return index


def signal_name(metric: str | None) -> str | None:
    """The compute signal as people name it: DCGM_FI_PROF_GR_ENGINE_ACTIVE ->
    GR_ENGINE_ACTIVE, DCGM_FI_DEV_GPU_UTIL -> GPU_UTIL; other names as they are."""
    if not metric:
        return None
    for prefix in ("DCGM_FI_PROF_", "DCGM_FI_DEV_"):
        if metric.startswith(prefix):
            return metric[len(prefix) :]
    return metric


DEMAND_PREFIX = "demand_"


def _demand_evidence(extra: Mapping[str, Any]) -> bool | None:
    """Whether the work had demand waiting, from the site's signals named
    ``demand_*`` (a request rate or queue length, a busy CPU share, a
    data-loader wait): true when any is above 0, false when all are 0, null
    when the site collects none. GPU metrics alone cannot tell a GPU starved
    by its input from one idle for lack of requests."""
    values = [v for k, v in extra.items() if k.startswith(DEMAND_PREFIX) and isinstance(v, (int, float))]
    if not values:
        return None
    return any(v > 0 for v in values)


_TELEMETRY_KEYS = (
    "coverage",
    "samples",
    "gpus",
    "compute_mean",
    "compute_p95",
    "compute_max",
    "fb_used_mean_mib",
    "fb_used_max_mib",
    "fb_total_mib",
    "resident_fraction",
    "resident_idle_fraction",
    "pcie_tx_mean_bps",
    "pcie_rx_mean_bps",
    "nvlink_mean_bps",
    "occupancy_mean",
    "tensor_active_mean",
    "dram_active_mean",
)
