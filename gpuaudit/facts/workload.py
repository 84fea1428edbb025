"""Facts about workloads, their pod templates and containers (pure functions).

Three targets come from one Workload: ``workload`` (the object as a whole),
``pod`` (each pod template) and ``container``. Every document repeats the
identity keys (kind, name, namespace, class) so a rule never has to look up.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec.structs

from gpuaudit import gpus
from gpuaudit.bundled import data_yaml
from gpuaudit.facts import Subject
from gpuaudit.facts import placement as site_placement
from gpuaudit.facts.activity import cuda_image, gpu_exporter, pod_activity, video_transcoder
from gpuaudit.facts.context import Context
from gpuaudit.facts.env_sources import with_config_map_env, with_controller_env
from gpuaudit.facts.gpu_names import unadvertised_shared, unknown_mig_profiles
from gpuaudit.facts.gpu_pools import never_published, sharing_pool
from gpuaudit.facts.instance_gpus import node_gpus
from gpuaudit.facts.lifecycle import lifecycle_facts
from gpuaudit.facts.process import CommandLine, command_lines, container_process_facts, pod_process_facts
from gpuaudit.facts.purpose import file_context, purpose_facts
from gpuaudit.facts.raw import pod_raw_facts, workload_raw_facts
from gpuaudit.facts.reservations import ENGINE_OF_KIND, memory_reservation
from gpuaudit.facts.scaling import scaling_facts
from gpuaudit.facts.scheduling import required_terms
from gpuaudit.facts.shared_memory import container_dev_shm, shared_memory_facts
from gpuaudit.kube import pointers
from gpuaudit.kube.labels import HOSTNAME_LABEL
from gpuaudit.kube.podspecs import plugin_named_gpu
from gpuaudit.kube.shapes import as_list
from gpuaudit.model import Container, GpuRequest, PodTemplate, Resource, Workload

LONG_RUNNING_CLASSES = ("service", "daemon")


def subjects(workload: Workload, context: Context | None = None) -> Iterator[Subject]:
    """All subjects of one workload: itself, then each pod template and container.
    ``context`` holds the site and what the rest of the input says."""
    if not workload.templates:
        return
    context = context or Context()
    doc = workload.document
    # The env completed first (from ConfigMaps, then the controller's): the
    # purpose and every fact read it.
    effective = [
        with_controller_env(workload, with_config_map_env(workload, t, context.config_maps))
        for t in (gpu_claims_only(workload, t, context) for t in workload.templates)
    ]
    lines_by_template = [command_lines(workload, t) for t in effective]
    base = {**_identity(workload), **workload_purpose(workload, lines_by_template, templates=effective)}
    base["file_context"] = file_context(doc.file, context.roots)
    templates = []
    for t, lines in zip(effective, lines_by_template, strict=True):
        templates.append((t, lines, pod_facts(workload, t, base, context, lines)))
    for t, _, pod in templates:  # a pod shape judged beside its siblings (a Ray head beside GPU workers)
        # A group scaled to zero (`replicas: 0`, a single-node test) runs no pod.
        pod["other_gpu_roles"] = [
            o["role"] for other, _, o in templates if o is not pod and o["gpu"]["requested"] and other.replicas != 0
        ]
        pod["driven_by"] = _driver_of(workload, pod, templates)
        if workload.group == "ray.io":
            pod["ray_num_gpus"] = _ray_num_gpus(workload, t)
    yield Subject(
        "workload",
        workload_facts(workload, base, [p for _, _, p in templates], context),
        Resource(doc.api_version, doc.kind, doc.namespace, doc.name),
        doc,
        workload.annotations,
    )
    for template, lines, pod in templates:
        annotations = {**template.annotations, **workload.annotations}
        yield Subject(
            "pod",
            pod,
            Resource(doc.api_version, doc.kind, doc.namespace, doc.name),
            doc,
            annotations,
        )
        holds_its_node = _holds_its_node(template)  # once per pod shape, not per container
        for c in (*template.init_containers, *template.containers):
            facts = container_facts(c, template, base, context.replicated_names, holds_its_node)
            facts.update(container_process_facts(c, lines[c.pointer]))
            facts.update(lines[c.pointer].activity)
            yield Subject(
                "container",
                facts,
                Resource(doc.api_version, doc.kind, doc.namespace, doc.name, c.name),
                doc,
                annotations,
            )


# Kinds whose worker pods a sibling role starts processes in: an MPIJob's
# launcher runs mpirun over ssh, a LeaderWorkerSet's leader over `kubectl
# exec` or ssh (Triton and TensorRT-LLM across nodes). A worker that only
# sleeps there waits for its leader, by design.
_DRIVEN_WORKER_KINDS = frozenset({"LeaderWorkerSet", "MPIJob"})
_IDLE_KINDS = ("idle", "idle_forever")


def _ray_num_gpus(workload: Workload, template: PodTemplate) -> float | None:
    """The GPUs a Ray group's pods offer Ray (`num-gpus` of its
    rayStartParams, beside its template); None when unset: Ray then offers
    every GPU the pod holds."""
    group = template.pointer.removesuffix("/template/spec")
    params = pointers.get(workload.document.obj, f"{group}/rayStartParams")
    value = params.get("num-gpus") if isinstance(params, Mapping) else None
    try:
        return float(value) if value is not None and not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _driver_of(
    workload: Workload, pod: Mapping[str, Any], templates: Sequence[tuple[PodTemplate, Mapping[str, Any], Any]]
) -> str | None:
    """The role of a sibling that starts processes in this pod shape's
    pods (an MPIJob's launcher, a LeaderWorkerSet's leader), when it runs
    something else than sleep; None elsewhere."""
    if workload.kind not in _DRIVEN_WORKER_KINDS:
        return None
    for t, lines, other in templates:
        if other is pod:
            continue
        kinds = [lines[c.pointer].activity.get("command_kind") for c in t.containers]
        if any(kind not in _IDLE_KINDS for kind in kinds):
            return str(other["role"])
    return None


def workload_purpose(
    w: Workload,
    lines_by_template: Sequence[Mapping[str, CommandLine]],
    *,
    templates: Sequence[PodTemplate] | None = None,
    workload_class: str | None = None,
    name: str | None = None,
    file: str | None = None,
) -> dict[str, Any]:
    """``purpose`` and ``purpose_evidence`` (facts/purpose.py), from the
    command lines already read for each template (of ``templates``, where the
    facts read them with their ConfigMap env); ``workload_class``, ``name``
    and ``file`` stand for the workload's own where it has none of its own
    (a live pod: its owner's class and name, no file)."""
    activities = {pointer: line.activity for lines in lines_by_template for pointer, line in lines.items()}
    long_running = (workload_class or w.workload_class) in LONG_RUNNING_CLASSES
    return purpose_facts(w, activities, long_running=long_running, templates=templates, name=name, file=file)


def _identity(w: Workload) -> dict[str, Any]:
    return {
        "apiVersion": w.document.api_version,
        "kind": w.kind,
        "name": w.name,
        "namespace": w.namespace,
        "class": w.workload_class,
        "long_running": w.workload_class in LONG_RUNNING_CLASSES,
    }


# --- GPU requests -----------------------------------------------------------


def gpu_claims_only(w: Workload, t: PodTemplate, context: Context) -> PodTemplate:
    """``t`` without the DRA claims the input shows to ask for no GPU (a QAT
    accelerator): a claim the input does not hold stays a GPU's."""
    drop = context.claims_without_gpus
    if not drop or not t.extra_gpus:
        return t
    kept = tuple(
        r for r in t.extra_gpus if not (r.mode == "dra" and (w.namespace, r.resource.removeprefix("claim/")) in drop)
    )
    return t if len(kept) == len(t.extra_gpus) else msgspec.structs.replace(t, extra_gpus=kept)


def requests_gpus(w: Workload, context: Context) -> bool:
    """Workload.requests_gpus, less the claims that ask for no GPU."""
    if not context.claims_without_gpus:
        return w.requests_gpus
    containers = (c for t in w.templates for c in (*t.containers, *t.init_containers))
    return any(c.gpus for c in containers) or any(gpu_claims_only(w, t, context).extra_gpus for t in w.templates)


def gpu_facts(requests: Sequence[GpuRequest]) -> dict[str, Any]:
    """Summary of GPU requests (a container's, or a whole pod's)."""
    # A DRA claim, or a share given as memory (KAI gpu-memory), counts no devices.
    counts = [r.count for r in requests if r.mode != "dra" and r.memory_mib is None]
    unknown = any(c is None for c in counts)
    whole = [r for r in requests if r.mode == "whole"]
    whole_count = sum(r.count or 0 for r in whole)
    return {
        "requested": bool(requests),
        "count": None if unknown else float(sum(c or 0 for c in counts)),
        "count_unknown": unknown,
        "whole": bool(whole),
        "whole_count": float(whole_count),
        "shared": any(r.mode in ("shared", "fraction", "mig") for r in requests),
        "plugin_named": bool(requests) and all(plugin_named_gpu(r.resource) for r in requests),
        "modes": sorted({r.mode for r in requests}),
        "resources": sorted({r.resource for r in requests}),
        "mig_profiles": sorted({r.profile for r in requests if r.profile}),
        "dra_claims": sum(1 for r in requests if r.mode == "dra"),
        "pointer": requests[0].pointer if requests else None,
    }


def _container_gpu(c: Container) -> dict[str, Any]:
    facts = gpu_facts(c.gpus)
    facts["in_requests"] = any(r.request is not None for r in c.gpus)
    facts["in_limits"] = any(r.limit is not None for r in c.gpus)
    facts["requests_equal_limits"] = all(r.request is None or r.limit is None or r.request == r.limit for r in c.gpus)
    facts["fractional_whole"] = any(
        r.mode == "whole" and r.count is not None and r.count != int(r.count) for r in c.gpus
    )
    facts["unknown_mig_profiles"] = unknown_mig_profiles(c.gpus)
    return facts


# --- containers -------------------------------------------------------------


def container_facts(
    c: Container,
    template: PodTemplate,
    base: Mapping[str, Any],
    replicated: frozenset[str] = frozenset(),
    holds_its_node: bool = False,
) -> dict[str, Any]:
    """``holds_its_node``: _holds_its_node(template)."""
    gpu = _container_gpu(c)
    # A slice is not a whole GPU: a shared, MIG or fractional resource (HAMi's
    # gpucores/gpumem beside nvidia.com/gpu), a pod-level fraction (Run:ai,
    # KAI), a node pool whose GPUs are shared or partitioned, or a name a
    # time-slicing config of the input replicates (``replicated``).
    gpu["slice"] = bool(c.gpus) and (
        gpu["shared"]
        or any(r.mode == "fraction" for r in template.extra_gpus)
        or _sharing_pool_of(template) is not None
        or any(r.resource in replicated for r in c.gpus)
    )
    count = gpu["count"]
    # Kubernetes copies a limit to an absent request; what a controller merges
    # the container over may set the request instead, so then it stays unknown.
    cpu_request = c.cpu_request if c.cpu_request is not None or c.merged_over else c.cpu_limit
    memory_request = c.memory_request if c.memory_request is not None or c.merged_over else c.memory_limit
    cpu_per_gpu = cpu_request / count if cpu_request is not None and count else None
    cpu_limit_per_gpu = c.cpu_limit / count if c.cpu_limit is not None and count else None
    return {
        **base,
        "role": template.role,
        "container": c.name,
        "init": c.init,
        "pointer": c.pointer,
        "resources_pointer": c.resources_pointer,
        "cpu_request_pointer": _cpu_pointer(c, "requests") if c.cpu_request is not None else _cpu_pointer(c, "limits"),
        "cpu_limit_pointer": _cpu_pointer(c, "limits"),
        "image": c.image,
        "args": list(c.command + c.args),
        "env": sorted(c.env),
        "visible_devices": c.env.get("NVIDIA_VISIBLE_DEVICES"),
        "gpu_exporter": gpu_exporter(c.image),
        "video_transcoder": video_transcoder(c.image),
        # A shared GPU has other tenants by design.
        "owns_gpu_node": holds_its_node and not gpu["slice"],
        "privileged": c.privileged,
        "privileged_pointer": f"{c.pointer}/securityContext/privileged" if c.privileged else None,
        "gpu": gpu,
        "merged_over": c.merged_over,
        "cpu_request": cpu_request,
        "cpu_limit": c.cpu_limit,
        "memory_request": memory_request,
        "memory_limit": c.memory_limit,
        "dev_shm": container_dev_shm(template, c),
        "cpu_per_gpu": cpu_per_gpu,
        "cpu_limit_per_gpu": cpu_limit_per_gpu,
    }


def _cpu_pointer(c: Container, section: str) -> str:
    """The pointer of ``section``.cpu of a container's resources, when set."""
    value = c.cpu_request if section == "requests" else c.cpu_limit
    return f"{c.resources_pointer}/{section}/cpu" if value is not None else c.resources_pointer


# --- pod templates ----------------------------------------------------------


def pod_facts(
    w: Workload,
    t: PodTemplate,
    base: Mapping[str, Any],
    context: Context | None = None,
    lines: Mapping[str, CommandLine] | None = None,
) -> dict[str, Any]:
    """``lines``: command_lines(w, t), when the caller has read them already."""
    context = context or Context()
    lines = lines or command_lines(w, t)
    main = [r for c in t.containers for r in c.gpus]
    init = [r for c in t.init_containers for r in c.gpus]
    gpu = gpu_facts([*main, *t.extra_gpus])
    gpu["init_requested"] = bool(init)
    gpu["replicated"] = any(r.resource in context.replicated_names for r in main)
    gpu.update(_request_checks(t, main, init, context))
    placement = placement_facts(t)
    placement.update(_site_placement(t, placement, gpu, context))
    activity = pod_activity(t, {c.pointer: lines[c.pointer].activity for c in t.containers})
    runtime = ENGINE_OF_KIND.get(w.kind, "")
    reserved = [r.fraction for c in t.containers if c.gpus and (r := memory_reservation(c, runtime)) is not None]
    activity["engine_reserves"] = max(reserved) if reserved else None
    exec_box = _exec_box(w, t, activity["gpu_command_kind"])  # its own command never ends, not restarted
    if activity["gpu_command_kind"] == "idle" and base["long_running"]:
        # A Deployment restarts a command that ends: `sleep 6000` there never stops.
        activity["gpu_command_kind"] = "idle_forever"
    # A bare Pod that serves, or sleeps without end, holds its GPUs as long as
    # a Deployment would: it is long-running whatever its kind.
    long_running = base["long_running"] or (
        w.workload_class == "pod" and activity["gpu_command_kind"] in ("server", "idle_forever")
    )
    facts = {
        **base,
        "long_running": long_running,
        **activity,
        "role": t.role,
        "replicas": t.replicas,
        "restart_policy": str(t.spec["restartPolicy"]) if t.spec.get("restartPolicy") is not None else None,
        "restart_policy_pointer": f"{t.pointer}/restartPolicy" if "restartPolicy" in t.spec else t.pointer,
        "pointer": t.pointer,
        "containers": len(t.containers),
        "gpu": gpu,
        "placement": placement,
        **pod_process_facts(w, t, placement, context, lines),
        **pod_raw_facts(w, t),
    }
    facts["shm"] = shared_memory_facts(w, t, gpu["count"], facts["dataloader_workers"], facts["parallelism"])
    facts["exec_box"] = exec_box
    facts["unrequested_gpu_runtime"] = _unrequested_gpu_runtime(t)
    facts["runtime_class_pointer"] = f"{t.pointer}/runtimeClassName" if "runtimeClassName" in t.spec else t.pointer
    if context.gpu_config_unread:
        facts["sharing_config_unread"] = True
    return facts


def _exec_box(w: Workload, t: PodTemplate, command_kind: str | None) -> bool:
    """One pod whose GPU containers sleep without end and that nobody probes
    for a server: a box people `kubectl exec` into and run their GPU work in
    (a dev container, a shell in a CUDA image). A probe on a port means a
    server was meant to start there, and never will; a sleep that ends and is
    restarted (`sleep 600` in a Deployment) is no shell anyone keeps."""
    if command_kind != "idle_forever" or w.workload_class not in ("pod", "service") or t.replicas not in (None, 1):
        return False
    return not any(c.probes_a_port for c in t.containers)


def _unrequested_gpu_runtime(t: PodTemplate) -> str | None:
    """The pod's runtimeClassName when it names NVIDIA's container runtime
    (the GPU Operator's nvidia, nvidia-cdi, nvidia-legacy) and runs an image
    built for an NVIDIA GPU, while none of its containers asks for a GPU or
    sets NVIDIA_VISIBLE_DEVICES (GPA-AL-007's): the runtime then exposes what
    the image's NVIDIA_VISIBLE_DEVICES names, all of the node's GPUs in a
    CUDA image (k8s-device-plugin issue 61). An image that says nothing of
    a GPU may never open one: not judged."""
    name = t.spec.get("runtimeClassName")
    if not isinstance(name, str) or not name.lower().startswith("nvidia"):
        return None
    containers = (*t.containers, *t.init_containers)
    if t.extra_gpus or any(c.gpus or "NVIDIA_VISIBLE_DEVICES" in c.env for c in containers):
        return None
    return name if any(cuda_image(c.image) for c in t.containers) else None


def _request_checks(
    t: PodTemplate, main: Sequence[GpuRequest], init: Sequence[GpuRequest], context: Context
) -> dict[str, Any]:
    """Names requested that do not exist, and GPUs initContainers hold."""
    init_counts = [sum(r.count or 0 for r in c.gpus) for c in t.init_containers if c.gpus]
    init_ptr = next((c.gpus[0].pointer for c in t.init_containers if c.gpus), None)
    main_count = float(sum(r.count or 0 for r in main if r.mode != "dra"))
    return {
        "unknown_mig_profiles": unknown_mig_profiles([*main, *init]),
        "unadvertised_shared": unadvertised_shared([*main, *init], context),
        "init_count": float(max(init_counts, default=0)),
        "main_count": main_count,
        "init_excess": max(0.0, float(max(init_counts, default=0)) - main_count),
        "init_pointer": init_ptr,
    }


def _site_placement(
    t: PodTemplate, placement: Mapping[str, Any], gpu: Mapping[str, Any], context: Context
) -> dict[str, Any]:
    site = context.site
    product = placement["gpu_product"]
    if product is not None:
        product["broader_class"] = site_placement.broader_class(product, site)
    return {
        "untolerated_gpu_taints": site_placement.untolerated_gpu_taints(
            placement["tolerations"], gpu["resources"], site
        ),
        "spread": site_placement.spread_facts(
            t.spec,
            t.labels,
            t.replicas,
            gpu["count"],
            placement["node_selector"],
            site,
            t.pointer,
        ),
    }


def _holds_its_node(t: PodTemplate) -> bool:
    """Whether the pod holds every GPU of the instance types it is pinned to:
    that node's only GPU tenant."""
    on_node = node_gpus(_node_selector(t), required_terms(t.spec))
    if on_node is None:
        return False
    return sum(r.count or 0 for c in t.containers for r in c.gpus if r.mode == "whole") >= on_node


def _sharing_pool_of(t: PodTemplate) -> dict[str, str] | None:
    return sharing_pool(_node_selector(t), required_terms(t.spec))


def _node_selector(t: PodTemplate) -> dict[str, str]:
    node_selector = t.spec.get("nodeSelector")
    return {str(k): str(v) for k, v in node_selector.items()} if isinstance(node_selector, Mapping) else {}


def placement_facts(t: PodTemplate) -> dict[str, Any]:
    spec = t.spec
    node_selector = _node_selector(t)
    terms = required_terms(spec)
    pinned_node, pinned_by, pinned_ptr = None, None, None
    if isinstance(spec.get("nodeName"), str) and spec["nodeName"]:
        pinned_node, pinned_by, pinned_ptr = spec["nodeName"], "nodeName", f"{t.pointer}/nodeName"
    elif HOSTNAME_LABEL in node_selector:
        pinned_node, pinned_by = node_selector[HOSTNAME_LABEL], "nodeSelector"
        pinned_ptr = f"{t.pointer}/nodeSelector/kubernetes.io~1hostname"
    else:
        hosts = _affinity_hosts(terms)
        if hosts is not None and len(hosts) == 1:
            pinned_node, pinned_by = hosts[0], "affinity"
            pinned_ptr = f"{t.pointer}/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    if pinned_node is not None and pinned_node.strip() in _UNSET_VALUES:
        # A chart's empty default (`kubernetes.io/hostname: {{ .Values.node }}`
        # rendered without a value): no node is named. A placeholder a script
        # fills in (${TRAIN_NODE}) still pins the pod to the one node it names.
        pinned_node, pinned_by, pinned_ptr = None, None, None
    product = _product_pin(node_selector, terms, t.pointer)
    tolerations = [
        {k: str(v) for k, v in tol.items() if k in ("key", "operator", "value", "effect")}
        for tol in as_list(spec.get("tolerations"))
        if isinstance(tol, Mapping)
    ]
    return {
        "pinned_node": pinned_node,
        "pinned_by": pinned_by,
        "pinned_pointer": pinned_ptr,
        "node_selector": node_selector,
        "required_terms": len(terms),
        "tolerations": tolerations,
        "gpu_product": product,
        "sharing_pool": sharing_pool(node_selector, terms),
        "node_hardware": _node_hardware(spec),
        "node_data": _node_data(spec),
    }


def _rollout(w: Workload, context: Context) -> dict[str, Any] | None:
    """How a Deployment replaces its pods: how many new ones a rolling update
    starts before old ones go (maxSurge, 25% of the replicas rounded up by
    default), and the claims its GPU pods mount that one node only may
    mount (the new pod must go to the old one's node). None for other kinds."""
    doc = w.document
    if (w.group, doc.kind) != ("apps", "Deployment") or not isinstance(doc.obj.get("spec"), Mapping):
        return None
    spec = doc.obj["spec"]
    strategy = spec.get("strategy") if isinstance(spec.get("strategy"), Mapping) else {}
    rolling = strategy.get("rollingUpdate") if isinstance(strategy.get("rollingUpdate"), Mapping) else {}
    replicas = spec.get("replicas", 1)
    if strategy.get("type") == "Recreate" or not isinstance(replicas, int) or isinstance(replicas, bool):
        surge = 0 if strategy.get("type") == "Recreate" else None
    else:
        surge = _surge(rolling.get("maxSurge", "25%"), replicas)
    claims = sorted(
        {
            str(v["persistentVolumeClaim"].get("claimName"))
            for t in w.templates
            if any(c.gpus for c in t.containers)
            for v in as_list(t.spec.get("volumes"))
            if isinstance(v, Mapping) and isinstance(v.get("persistentVolumeClaim"), Mapping)
            if (doc.namespace, str(v["persistentVolumeClaim"].get("claimName"))) in context.single_node_claims
        }
    )
    # The field that sets the surge, where one does (a kustomize patch may).
    pointer = (
        "/spec/strategy/rollingUpdate/maxSurge"
        if "maxSurge" in rolling
        else "/spec/strategy/type"
        if "type" in strategy
        else "/spec"
    )
    return {"surge": surge, "single_node_claims": claims, "pointer": pointer}


def _surge(value: Any, replicas: int) -> int | None:
    """Pods a rolling update adds at once: an int, or a percentage of the
    replicas rounded up (as the Deployment controller does); None when the
    value is unread (a placeholder)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return -(-int(value[:-1]) * replicas // 100)
    return None


def _node_hardware(spec: Mapping[str, Any]) -> str | None:
    """The first host device the pod mounts that is plugged into one machine
    (data/host_devices.yaml): the pod goes where it is."""
    prefixes = None
    for volume in as_list(spec.get("volumes")):
        host = volume.get("hostPath") if isinstance(volume, Mapping) else None
        path = host.get("path") if isinstance(host, Mapping) else None
        if isinstance(path, str) and path.startswith("/dev/"):
            if prefixes is None:  # read only for a pod that mounts a device: most mount none
                prefixes = tuple(data_yaml("host_devices.yaml")["prefixes"])
            if path.startswith(prefixes):
                return path
    return None


def _node_data(spec: Mapping[str, Any]) -> str | None:
    """The first hostPath directory the pod mounts that is data on that node's
    own disk, not one of its system paths (data/host_devices.yaml): the data
    is where the node is."""
    system = None
    for volume in as_list(spec.get("volumes")):
        host = volume.get("hostPath") if isinstance(volume, Mapping) else None
        path = host.get("path") if isinstance(host, Mapping) else None
        if not isinstance(path, str) or not path.startswith("/") or path.rstrip("/") == "":
            continue
        if system is None:  # read only for a pod that mounts a host path: most mount none
            system = tuple(data_yaml("host_devices.yaml")["system_paths"])
        normal = path.rstrip("/")
        if not any(normal == p or normal.startswith(p + "/") for p in system):
            return path
    return None


# What a rendered chart leaves where a value was expected (str() of YAML null).
_UNSET_VALUES = frozenset({"", "None", "null", "~"})


def _affinity_hosts(terms: list[Mapping[str, Any]]) -> list[str] | None:
    """Hostnames a pod is limited to when every term pins kubernetes.io/hostname."""
    if not terms:
        return None
    hosts: set[str] = set()
    for term in terms:
        found = None
        for expr in as_list(term.get("matchExpressions")):
            if (
                isinstance(expr, Mapping)
                and expr.get("key") == HOSTNAME_LABEL
                and expr.get("operator") == "In"
                and isinstance(expr.get("values"), list)
            ):
                found = [str(v) for v in expr["values"]]
        if found is None:
            return None
        hosts.update(found)
    return sorted(hosts)


def _product_pin(
    node_selector: Mapping[str, str], terms: list[Mapping[str, Any]], pointer: str
) -> dict[str, Any] | None:
    """The GPU model a pod is restricted to, by selector or required affinity."""
    for label in gpus.PRODUCT_LABELS:
        if label in node_selector:
            value = node_selector[label]
            model = gpus.lookup(value)
            return {
                "label": label,
                "values": [value],
                "by": "nodeSelector",
                "model": model.model if model else None,
                "memory_gib": model.memory_gib if model else None,
                "mig_capable": model.mig_capable if model else None,
                "pointer": f"{pointer}/nodeSelector/{label.replace('/', '~1')}",
                "never_published": never_published(label, [value]),
            }
    for i, term in enumerate(terms):
        for expr in as_list(term.get("matchExpressions")):
            if (
                isinstance(expr, Mapping)
                and expr.get("key") in gpus.PRODUCT_LABELS
                and expr.get("operator") == "In"
                and isinstance(expr.get("values"), list)
            ):
                values = [str(v) for v in expr["values"]]
                models = [gpus.lookup(v) for v in values]
                known = [m for m in models if m]
                return {
                    "label": str(expr["key"]),
                    "values": values,
                    "by": "affinity",
                    "model": known[0].model if len(known) == 1 else None,
                    "memory_gib": min(m.memory_gib for m in known) if known else None,
                    # Every product it allows must offer MIG for a MIG slice to be the advice.
                    "mig_capable": all(m.mig_capable for m in known) if len(known) == len(models) else None,
                    "never_published": never_published(str(expr["key"]), values),
                    "pointer": f"{pointer}/affinity/nodeAffinity/"
                    f"requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/{i}",
                }
    return None


# --- whole workload ---------------------------------------------------------


def workload_facts(
    w: Workload,
    base: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    context: Context | None = None,
) -> dict[str, Any]:
    context = context or Context()
    gpu_pods = [p for p in pods if p["gpu"]["requested"]]
    total: float | None = 0.0
    for pod in pods:
        per_pod = pod["gpu"]["count"]
        if per_pod is None or total is None:
            total = None
            continue
        total += per_pod * (pod["replicas"] if pod["replicas"] is not None else 1)
    return {
        **base,
        "pointer": "",
        "gpu": {
            "requested": any(p["gpu"]["requested"] for p in pods),
            "whole": any(p["gpu"]["whole"] for p in pods),
            "total": total,
            "replicated": bool(gpu_pods) and all(p["gpu"].get("replicated") for p in gpu_pods),
        },
        "pod_roles": [p["role"] for p in pods],
        # Every GPU pod only sleeps or prints nvidia-smi: a smoke test, a placeholder.
        "gpu_idle": bool(gpu_pods) and all(p["gpu_command_kind"] in ("idle", "idle_forever") for p in gpu_pods),
        "lifecycle": lifecycle_facts(w),
        "scaling": scaling_facts(w, context),
        "rollout": _rollout(w, context),
        **workload_raw_facts(w),
    }
