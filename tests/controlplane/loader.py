"""Load a recorded cluster (tests/clusters/) into a real API server.

Objects are created as an admin through the API, top of each owner chain
first, with what the server sets itself taken out (uid, resourceVersion,
creationTimestamp, managedFields, a Job's generated selector, a pod's computed
priority). Status is then written through the status subresource, as a
kubelet or a controller would -- except for pods that are not bound to a node:
those are the real scheduler's to judge, and it writes their PodScheduled
condition and FailedScheduling events itself (the recorded FailedScheduling
events are therefore not loaded).

The ML custom resources gpuaudit reads (GPU Operator ClusterPolicy, Kueue
Workloads, KubeRay, Kubeflow training, KServe, LeaderWorkerSet, JobSet) are
installed as minimal CRDs: the right group, version, kind, plural and scope,
with a schema that keeps unknown fields (their operators are not running).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

from tests.controlplane.controlplane import ApiError, Kube

# (group, version, kind, plural, namespaced)
CRDS: tuple[tuple[str, str, str, str, bool], ...] = (
    ("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies", False),
    ("kueue.x-k8s.io", "v1beta2", "Workload", "workloads", True),
    ("ray.io", "v1", "RayCluster", "rayclusters", True),
    ("ray.io", "v1", "RayJob", "rayjobs", True),
    ("ray.io", "v1", "RayService", "rayservices", True),
    ("kubeflow.org", "v1", "PyTorchJob", "pytorchjobs", True),
    ("serving.kserve.io", "v1beta1", "InferenceService", "inferenceservices", True),
    ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "leaderworkersets", True),
    ("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", True),
)

# Recorded-cluster keys in creation order: owners before what they own.
ORDER = (
    "nodes",
    "clusterpolicies",
    "customresources",  # any custom resource whose CRD is installed (tests/controlplane/ml.py)
    "deployments",
    "statefulsets",
    "daemonsets",
    "cronjobs",
    "replicasets",
    "jobs",
    "configmaps",
    "secrets",
    "resourceslices",
    "resourceclaims",
    "kueueworkloads",
    "pods",
    "events",
)
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink")


def crd(group: str, version: str, kind: str, plural: str, namespaced: bool) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced" if namespaced else "Cluster",
            "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def install_crds(kube: Kube, crds: Iterable[tuple[str, str, str, str, bool]] = CRDS) -> None:
    names = []
    for spec in crds:
        obj = crd(*spec)
        names.append(obj["metadata"]["name"])
        kube.apply(obj)

    def established() -> bool:
        for name in names:
            got = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            conditions = (got.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return False
        return True

    kube.wait("CRDs established", established)
    # Discovery of a new group can lag its Established condition a little.
    for group, version, kind, _, _ in crds:
        kube.wait(f"{kind} discovery", lambda g=group, v=version, k=kind: _served(kube, f"{g}/{v}", k))


def _served(kube: Kube, api_version: str, kind: str) -> bool:
    kube.forget_discovery()
    try:
        kube.resource(api_version, kind)
    except (KeyError, ApiError):
        return False
    return True


def clean(obj: dict[str, Any]) -> dict[str, Any]:
    """A recorded object as a client would send it to create it."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    for key in _SERVER_SET:
        meta.pop(key, None)
    obj.pop("status", None)
    spec = obj.get("spec")
    if obj.get("kind") == "Job" and isinstance(spec, dict) and not spec.get("manualSelector"):
        spec.pop("selector", None)  # generated from the new uid by the server, with
        labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        for label in ("controller-uid", "batch.kubernetes.io/controller-uid"):  # these labels
            labels.pop(label, None)
    if obj.get("kind") == "Pod" and isinstance(spec, dict):
        spec.pop("priority", None)  # computed by the Priority admission plugin
        spec.pop("preemptionPolicy", None)
    return obj


def load(kube: Kube, cluster: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Create every object of ``cluster``; returns how many of each key."""
    namespaces = {
        obj["metadata"]["namespace"]
        for objs in cluster.values()
        for obj in objs
        if obj.get("metadata", {}).get("namespace")
    }
    for namespace in sorted(namespaces):
        kube.ensure_namespace(namespace)
    unknown = set(cluster) - set(ORDER)
    if unknown:
        raise ValueError(f"the loader does not know how to load {sorted(unknown)}")
    counts: dict[str, int] = {}
    for key in ORDER:
        created = 0
        for recorded in cluster.get(key, []):
            if key == "events" and recorded.get("reason") == "FailedScheduling":
                continue  # the real scheduler writes its own
            obj = clean(recorded)
            if key == "events":
                obj.pop("status", None)
            try:
                if key == "nodes":
                    kube.add_node(obj, recorded.get("status") or {})
                    created += 1
                    continue
                kube.create(obj)
            except ApiError as exc:
                raise AssertionError(f"creating {key} {recorded['metadata'].get('name')}: {exc}") from None
            created += 1
            status = recorded.get("status")
            if status and key != "events" and not (key == "pods" and not recorded["spec"].get("nodeName")):
                try:
                    kube.write_status(obj, status)
                except ApiError as exc:
                    raise AssertionError(
                        f"writing the status of {key} {recorded['metadata'].get('name')}: {exc}"
                    ) from None
        counts[key] = created
    return counts
