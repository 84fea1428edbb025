"""Kubernetes objects -> Workloads, through the pod-spec locator table.

The table (data/podspecs.yaml, extendable in config) says where each kind
keeps its pod specs; this module only walks it. Values that are not what the
field needs (a ``$PLACEHOLDER`` GPU count, ``null``, "two") become InputErrors
on that field's line, never a crash or a silent zero.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from msgspec.structs import replace

from gpuaudit.kube import pointers
from gpuaudit.kube.podspecs import (
    FRACTION_ANNOTATIONS,
    GPU_RESOURCE,
    MEMORY_SHARE_ANNOTATIONS,
    MIG_RESOURCE,
    SHARE_MODIFIERS,
    KindLocator,
    Locator,
    builtin_locators,
    group_of,
    plugin_named_gpu,
)
from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.model.objects import Document, InputError
from gpuaudit.model.workload import Container, GpuRequest, PodTemplate, Workload

# Replica counts are int32 fields in every kind the table knows (Kubernetes
# refuses "3", 1.5 and 2^31 there); 1.0 passes, as it does through kubectl.
MAX_INT32 = 2**31 - 1
# What YAML 1.1 would read as a base-60 number (1:20 = 80); the loader keeps it
# text, as Kubernetes' YAML does (kube/yaml_lines.py).
_BASE_60 = re.compile(r"[-+]?\d[\d_]*(?::[0-5]?\d)+(?:\.\d*)?")
# What a value left for another tool to fill looks like: $POD_MEMORY_LIMIT,
# ${CPU}, <cpu>, {{ cpu }}, %CPU%, or a name in capitals. Text: compiled on
# first use, by an input error only, never on a clean check's start-up.
_PLACEHOLDER_MARKS = r"[$<>{}%]|^[A-Z][A-Z0-9_]+$"
# A JVM memory size as Spark reads it (spark.executor.memory): a whole number
# with an optional k, m, g, t or p (and b); no unit means MiB.
_JVM_SIZE = r"(\d+)([kmgtp])?b?"  # compiled on first use: Spark sizes only
_JVM_UNITS = "kmgtp"
PATCH_BASE = "the base this patch is applied to (a container without an image, read without its base)"


# API groups of policy engines and admission: a GPU request in their objects
# is a pattern a policy matches or a value it writes (Kyverno's
# `nvidia.com/gpu: "?*"`), never a pod's.
_POLICY_GROUPS = frozenset(
    {
        "kyverno.io",
        "json.kyverno.io",
        "templates.gatekeeper.sh",
        "constraints.gatekeeper.sh",
        "mutations.gatekeeper.sh",
        "policies.kubewarden.io",
        "admissionregistration.k8s.io",
        "wgpolicyk8s.io",
    }
)
# Kinds that describe pods and run none: the core PodTemplate is read by no
# built-in controller; a ProvisioningRequest sizes the nodes it asks for by
# one, and the Job that then runs there has a template of its own.
_NO_PODS = frozenset({("", "PodTemplate")})


def build_workloads(
    documents: Iterable[Document], locators: Mapping[tuple[str, str], KindLocator] | None = None
) -> tuple[list[Workload], list[InputError]]:
    table = builtin_locators() if locators is None else locators
    workloads: list[Workload] = []
    errors: list[InputError] = []
    for doc in documents:
        group = group_of(doc.api_version)
        kl = table.get((group, doc.kind))
        builder = _TemplateBuilder(doc, errors)
        templates = tuple(t for loc in kl.pods for t in builder.templates(loc)) if kl else ()
        unread = (
            not any(c.gpus for t in templates for c in (*t.containers, *t.init_containers))
            and group not in _POLICY_GROUPS
            and (group, doc.kind) not in _NO_PODS
        )
        keys = _resource_keys(doc) if unread else ()
        if unread and (keys is None or any(GPU_RESOURCE.match(key) for key in keys)):
            # A kind the table does not know, or a known kind in a shape its
            # locators miss (a new API version): a GPU request is never silent.
            found = _discovered_locators(doc.obj)
            # What a guess misreads (a benchmark's config whose "resources"
            # hold ranges, not quantities) is no input error of the object:
            # said as warnings, and only when the guess is audited.
            misread: list[InputError] = []
            discovered = tuple(t for loc in found for t in _TemplateBuilder(doc, misread).templates(loc))
            # `nvidia.com/gpu: 0` (a chart's CPU-only setting) asks for none.
            if any(c.gpus for t in discovered for c in (*t.containers, *t.init_containers)):
                templates = tuple(replace(t, discovered=True) for t in discovered)
                errors += [replace(e, level="warning") for e in misread]
                where = found[0].at or "/"
                if "/values" in where:  # a HelmRelease's or an Argo CD Application's values for its chart
                    why = f"{doc.kind} ({group or 'core'}) is no workload itself"
                    then = (
                        "audited from there as the pods its chart likely renders from these values (the chart "
                        "itself is not rendered here: to audit it exactly, check the chart with these values)"
                    )
                else:
                    why = (
                        f"{doc.kind} ({group or 'core'}) is not in the pod-spec table"
                        if kl is None
                        else f"{doc.kind} ({doc.api_version}) has a shape the pod-spec table does not expect"
                    )
                    then = (
                        "audited from there as a workload of its kind; add a locator under podspecs: in "
                        ".gpuaudit.yaml (see gpuaudit/data/podspecs.yaml) to audit it exactly"
                    )
                message = f"{why}, but holds a container that requests GPUs at {where}: {then}"
                errors.append(InputError(doc.file, doc.line_of(where), message, "warning", ("of this kind", why)))
        elif unread and kl is None and keys and "gpu" in keys:
            own = _own_gpu_field(doc)
            if own is not None:
                kind = f"{doc.kind} ({group or 'core'})"
                message = (
                    f"{kind} asks for GPUs in a field of its own at {own}: not audited (gpuaudit reads a GPU "
                    "request by its resource name, such as nvidia.com/gpu, and this kind names it its own way)"
                )
                errors.append(InputError(doc.file, doc.line_of(own), message, "warning", ("of this kind", kind)))
        workloads.append(Workload(doc, group, kl.workload_class if kl else "other", templates))
    return workloads, errors


def _own_gpu_field(doc: Document) -> str | None:
    """Where a kind the table does not know asks for GPUs in a resources
    field of its own (Dynamo's `resources.limits.gpu: "8"`), a count above
    zero; None when it does not. Read from the pointers the reader kept."""
    for pointer in doc.lines:
        if pointer.endswith(("/limits/gpu", "/requests/gpu")):
            value = pointers.get(doc.obj, pointer)
            try:
                if float(value) > 0:
                    return pointer
            except (TypeError, ValueError):
                continue
    return None


class WorkloadMemo:
    """build_workloads of one document, remembered by what it holds: `fix`
    plans in passes (remediate/plan.py) and asks again and again about the
    same objects (each original, each object as a change left it), most of
    which a later pass leaves as they were. An object's content is its
    pickle: key order, types and shared parts included, so the same bytes
    build the same workloads. The workloads share the dicts of the object
    first built: objects asked about must not be changed in place."""

    def __init__(self) -> None:
        self.asked = 0  # documents asked about
        self.built = 0  # of them, those built (not remembered)
        self._known: dict[tuple[Any, ...], tuple[Any, tuple[list[Workload], list[InputError]]]] = {}

    def build(
        self, doc: Document, locators: Mapping[tuple[str, str], KindLocator]
    ) -> tuple[list[Workload], list[InputError]]:
        self.asked += 1
        try:
            content = pickle.dumps(doc.obj, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            content = None
        if content is None or doc.patched:
            self.built += 1
            return build_workloads([doc], locators)
        # The line map and the table are kept with the entry: their ids stay theirs.
        key = (content, doc.file, doc.line, doc.base, id(doc.lines) if doc.lines else None, id(locators))
        entry = self._known.get(key)
        if entry is None:
            self.built += 1
            entry = self._known[key] = ((doc.lines, locators), build_workloads([doc], locators))
        workloads, errors = entry[1]
        return list(workloads), list(errors)


def is_live_dump(obj: Mapping[str, Any]) -> bool:
    """Whether a manifest is a dump of a live object (``kubectl get -o
    yaml``): it carries the server's ``metadata.uid`` and ``resourceVersion``
    and a ``status``, which nobody writes by hand."""
    meta = obj.get("metadata")
    return (
        isinstance(meta, Mapping)
        and bool(meta.get("uid"))
        and meta.get("resourceVersion") is not None
        and isinstance(obj.get("status"), Mapping)
    )


# --- kinds the table does not know ------------------------------------------

_CONTAINER_LISTS = ("containers", "initContainers")
_NOT_SPEC = frozenset({"metadata", "status"})
_MAX_DEPTH = 12  # operator CRDs nest pod templates a few levels deep, never dozens


# A `requests`/`limits` key among the pointers the reader recorded for a document.
_RESOURCE_KEY = r"(?m)/(?:requests|limits)/([^/\n]+)$"  # compiled on first use: unread kinds only


def _probes_a_port(c: Mapping[str, Any]) -> bool:
    return any(
        isinstance(c.get(probe), Mapping) and any(k in c[probe] for k in ("httpGet", "tcpSocket", "grpc"))
        for probe in ("readinessProbe", "livenessProbe", "startupProbe")
    )


def _resource_keys(doc: Document) -> list[str] | None:
    """The resource names ``doc`` asks for anywhere (under `requests` or
    `limits`), from the pointers the reader already recorded: most objects
    without a GPU container name none, and are spared the walk of the whole
    object (check's hot path). None for a document read without its
    pointers: it is walked."""
    if not doc.lines:
        return None
    return [key.replace("~1", "/").replace("~0", "~") for key in re.findall(_RESOURCE_KEY, "\n".join(doc.lines))]


def _discovered_locators(obj: Mapping[str, Any]) -> list[Locator]:
    """Where an unknown kind keeps containers that request GPUs: a
    ``containers`` list beside its pod spec fields, or a container-like
    mapping (a ``resources`` block naming a GPU resource, as an operator's
    ``spec.resources`` does). Never silence for a GPU request."""
    found: list[Locator] = []

    def requests_gpu(resources_: Any) -> bool:
        if not isinstance(resources_, Mapping):
            return False
        return any(
            isinstance(section, Mapping) and any(GPU_RESOURCE.match(str(k)) for k in section)
            for section in (resources_.get("requests"), resources_.get("limits"))
        )

    def walk(node: Any, ptr: str, depth: int) -> None:
        if depth > _MAX_DEPTH or not isinstance(node, Mapping):
            return
        lists = [node.get(k) for k in _CONTAINER_LISTS if isinstance(node.get(k), list)]
        if any(isinstance(c, Mapping) and requests_gpu(c.get("resources")) for items in lists for c in items):
            role = ptr.rsplit("/", 1)[-1] or "main"
            found.append(_locator(at=ptr, spec="", role=role))
            return
        if requests_gpu(node.get("resources")) and depth > 0:
            role = ptr.rsplit("/", 1)[-1]
            if role in ("values", "spec"):  # a chart's values (or a spec) are the container: named as the object
                meta = obj.get("metadata")
                role = str(meta.get("name") or "main") if isinstance(meta, Mapping) else "main"
            found.append(_locator(at=ptr, resources_only="resources", role=role or "main"))
            return
        for key, value in node.items():
            if depth == 0 and key in _NOT_SPEC:
                continue
            child = f"{ptr}/{pointers.escape(str(key))}"
            if isinstance(value, Mapping):
                walk(value, child, depth + 1)
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    walk(item, f"{child}/{i}", depth + 1)

    walk(obj, "", 0)
    return found


def _locator(at: str, role: str, spec: str | None = None, resources_only: str | None = None) -> Locator:
    return Locator(
        at=at,
        spec=spec,
        metadata=None,
        role=role,
        role_field=None,
        replicas=(),
        inline_containers=(),
        container_lists=(),
        resources_only=resources_only,
    )


# --- building templates ----------------------------------------------------


class _TemplateBuilder:
    def __init__(self, doc: Document, errors: list[InputError]) -> None:
        self.doc = doc
        self.errors = errors

    def error(self, pointer: str, message: str) -> None:
        self.errors.append(InputError(self.doc.file, self.doc.line_of(pointer), message))

    def templates(self, loc: Locator) -> Iterator[PodTemplate]:
        obj = self.doc.obj
        for at, key, node in pointers.expand(obj, loc.at):
            if not isinstance(node, Mapping):
                continue
            role = loc.role or key or "main"
            if loc.role_field:
                named = pointers.get(node, "/" + loc.role_field)
                role = str(named) if named is not None else role
            replicas = self._replicas(obj, at, loc.replicas)
            meta = pointers.get(obj, pointers.join_relative(at, loc.metadata)) if loc.metadata is not None else None
            meta = meta if isinstance(meta, Mapping) else {}
            labels = _str_map(meta.get("labels"))
            annotations = _str_map(meta.get("annotations"))
            if loc.spark_pod:
                yield self._spark_pod(node, at, role, replicas)
                continue
            if loc.resources_only is not None:
                template = self._resources_only(node, at, loc.resources_only, role, replicas)
                if loc.merged_over:
                    merged = tuple(replace(c, merged_over=loc.merged_over) for c in template.containers)
                    template = replace(template, containers=merged)
                yield template
                continue
            if loc.spec is None:
                continue
            spec_ptr = pointers.join_relative(at, loc.spec)
            spec = pointers.get(obj, spec_ptr)
            if not isinstance(spec, Mapping):
                if not any(rel.startswith("/") for rel in loc.inline_containers):
                    continue
                spec = {}  # a kind whose main container stands beside an optional pod template (Slinky's NodeSet)
            if spec_ptr == "/spec" and "nodeName" in spec and is_live_dump(obj):
                # The scheduler wrote nodeName when it bound this pod: in a dump
                # of live state it is where the pod ran, not a pin (as a
                # cluster audit reads it, cluster_builder._unbound).
                spec = {k: v for k, v in spec.items() if k != "nodeName"}
            containers = list(self._containers(spec, spec_ptr, "containers", init=False))
            if loc.merged_over and not loc.inline_containers:
                containers = [replace(c, merged_over=loc.merged_over) for c in containers]
            # A container without an image cannot run: the object is a patch
            # (a kustomize patch read without its base), and what it leaves
            # unset comes from the base. Rendered, nothing comes later: a patch
            # named a container its base does not have, and kustomize added it.
            for c in containers:
                if not c.image and not c.merged_over and self.doc.rendered:
                    # the patch that added it, where one did: found by a field it sets
                    file, line = self.doc.place_of(c.gpus[0].pointer if c.gpus else c.pointer)
                    self.errors.append(
                        InputError(
                            file,
                            line,
                            f"container {c.name} of {self.doc.kind} {self.doc.name} has no image once rendered: a "
                            "patch names a container its base does not have (or a chart value is unset); the API "
                            "server refuses the object",
                            "warning",
                        )
                    )
            containers = [
                replace(c, merged_over=PATCH_BASE) if not c.image and not c.merged_over else c for c in containers
            ]
            for rel in loc.inline_containers:
                absolute = rel.startswith("/")
                inline = pointers.get(obj, rel) if absolute else spec.get(rel)
                if isinstance(inline, Mapping):
                    name = rel.rsplit("/", 1)[-1]
                    where = rel if absolute else f"{spec_ptr}/{rel}"
                    container = self._container(inline, where, name, init=False)
                    containers.append(replace(container, merged_over=loc.merged_over))
            for rel in loc.container_lists:
                containers.extend(self._containers(spec, pointers.join_relative(spec_ptr, rel), None, init=False))
            inits = tuple(self._containers(spec, spec_ptr, "initContainers", init=True))
            # A native sidecar (an initContainer with restartPolicy: Always)
            # starts before the app containers and runs for the pod's whole
            # life: it is an app container in all but where it is written.
            containers.extend(c for c in inits if not c.init)
            inits = tuple(c for c in inits if c.init)
            if not containers and not inits:
                continue
            extra = tuple(self._pod_level_gpus(spec, spec_ptr, annotations, meta, at, loc))
            yield PodTemplate(
                role=role,
                pointer=spec_ptr,
                replicas=replicas,
                containers=tuple(containers),
                init_containers=inits,
                spec=spec,
                labels=labels,
                annotations=annotations,
                extra_gpus=extra,
            )

    def _replicas(self, obj: Any, at: str, fields: tuple[str, ...]) -> int | None:
        total = 1
        for rel in fields:
            ptr = pointers.join_relative(at, rel)
            value = pointers.get(obj, ptr)
            if value is None:
                continue
            problem = _int32_problem(value)
            if problem is not None:
                field = ptr.rsplit("/", 1)[-1]
                self.error(ptr, f"{field}: {problem}; Kubernetes expects a whole number from 0 to {MAX_INT32:,}")
                return None
            total *= int(value)
        return total

    def _containers(self, spec: Mapping[str, Any], spec_ptr: str, field: str | None, init: bool) -> Iterator[Container]:
        if field is None:  # spec_ptr already names the list
            items = pointers.get(self.doc.obj, spec_ptr)
            list_ptr = spec_ptr
        else:
            items = spec.get(field)
            list_ptr = f"{spec_ptr}/{field}"
        if not isinstance(items, list):
            return
        for i, item in enumerate(items):
            if isinstance(item, Mapping):
                yield self._container(item, f"{list_ptr}/{i}", str(i), init)

    def _container(self, c: Mapping[str, Any], ptr: str, fallback: str, init: bool) -> Container:
        name = c.get("name")
        res_ptr = f"{ptr}/resources"
        resources_ = c.get("resources")
        resources_ = resources_ if isinstance(resources_, Mapping) else {}
        return Container(
            name=str(name) if name is not None else fallback,
            pointer=ptr,
            init=init and c.get("restartPolicy") != "Always",
            image=str(c.get("image") or ""),
            command=_str_list(c.get("command")),
            args=_str_list(c.get("args")),
            env=_env(c.get("env")),
            volume_mounts=_mounts(c.get("volumeMounts")),
            privileged=_privileged(c.get("securityContext")),
            probes_a_port=_probes_a_port(c),
            **self._resource_fields(resources_, res_ptr),
        )

    def _resources_only(
        self, node: Mapping[str, Any], at: str, rel: str, role: str, replicas: int | None
    ) -> PodTemplate:
        res = node.get(rel)
        res = res if isinstance(res, Mapping) else {}
        res_ptr = pointers.join_relative(at, rel)
        container = Container(
            name=role,
            pointer=at,
            init=False,
            image=_image(node.get("image")),
            command=_str_list(node.get("command")),
            args=_str_list(node.get("args")),
            env=_env(node.get("env")),
            volume_mounts={},
            **self._resource_fields(res, res_ptr),
        )
        return PodTemplate(role, at, replicas, (container,), (), {}, {}, {})

    def _spark_pod(self, node: Mapping[str, Any], at: str, role: str, replicas: int | None) -> PodTemplate:
        """A Spark operator driver or executor: its SparkPodSpec holds the pod's
        placement fields as a PodSpec does, and its one Spark container as
        fields of its own. Spark always sets the container's CPU and memory:
        what the manifest leaves out is Spark's default (one core, 1 GiB), and
        the memory is a lower bound (Spark adds an overhead it computes)."""
        obj = self.doc.obj
        spec = {k: v for k, v in node.items() if k in ("nodeSelector", "affinity", "tolerations", "schedulerName")}
        cpu_request = self._spark_cores(node, at, "coreRequest") or self._spark_cores(node, at, "cores") or 1.0
        memory = self._spark_memory(node, at)
        main = Container(
            name=f"spark-kubernetes-{role}",
            pointer=at,
            init=False,
            image=_image(node.get("image") or pointers.get(obj, "/spec/image")),
            command=(),
            args=(),
            env=_env(node.get("env")),
            volume_mounts=_mounts(node.get("volumeMounts")),
            gpus=tuple(self._spark_gpus(node, at, role)),
            cpu_request=cpu_request,
            cpu_limit=self._spark_cores(node, at, "coreLimit"),
            memory_request=memory,
            memory_limit=memory,
            resources_pointer=at,
        )
        sidecars = tuple(self._containers(node, at, "sidecars", init=False))
        inits = tuple(self._containers(node, at, "initContainers", init=True))
        return PodTemplate(
            role=role,
            pointer=at,
            replicas=replicas,
            containers=(main, *sidecars, *(c for c in inits if not c.init)),
            init_containers=tuple(c for c in inits if c.init),
            spec=spec,
            labels=_str_map(node.get("labels")),
            annotations=_str_map(node.get("annotations")),
        )

    def _spark_cores(self, node: Mapping[str, Any], at: str, field: str) -> float | None:
        if node.get(field) is None:
            return None
        try:
            return parse_quantity(node[field])
        except QuantityError as exc:
            self.error(f"{at}/{field}", f"{field}: {exc}")
            return None

    def _spark_memory(self, node: Mapping[str, Any], at: str) -> float | None:
        """Bytes of a Spark ``memory`` (a JVM size: 512m, 4g; MiB without a
        unit), Spark's 1 GiB default when it is left out."""
        value = node.get("memory", "1g")
        match = re.fullmatch(_JVM_SIZE, str(value).strip().lower())
        if match is None:
            self.error(f"{at}/memory", f"memory: {value!r} is not a JVM size such as 512m or 4g")
            return None
        return float(match.group(1)) * 1024 ** (_JVM_UNITS.index(match.group(2) or "m") + 1)

    def _spark_gpus(self, node: Mapping[str, Any], at: str, role: str) -> Iterator[GpuRequest]:
        """The GPU of a Spark pod: the operator's ``gpu: {name, quantity}``, or
        Spark's own resource scheduling (``spark.<role>.resource.gpu.amount``
        with its ``.vendor``, which Spark on Kubernetes asks for as the
        resource ``<vendor>/gpu``)."""
        gpu = node.get("gpu")
        if isinstance(gpu, Mapping) and gpu.get("name"):
            name, ptr, value = str(gpu["name"]), f"{at}/gpu/quantity", gpu.get("quantity")
        else:
            conf = pointers.get(self.doc.obj, "/spec/sparkConf")
            conf = conf if isinstance(conf, Mapping) else {}
            key = f"spark.{role}.resource.gpu.amount"
            vendor = conf.get(f"spark.{role}.resource.gpu.vendor")
            if key not in conf or not vendor:
                return
            name, ptr, value = f"{vendor}/gpu", f"/spec/sparkConf/{pointers.escape(key)}", conf[key]
        if not GPU_RESOURCE.match(name):
            return
        try:
            count = parse_quantity(value) if value is not None else 1.0
        except QuantityError as exc:
            field = ptr.rsplit("/", 1)[-1]
            self.error(ptr, f"{field}: {value!r} is not a GPU count ({exc}); this request cannot be judged")
            count = None
        mig = MIG_RESOURCE.match(name)
        yield GpuRequest(
            resource=name,
            mode="mig" if mig else "whole",
            request=None,
            limit=count,
            pointer=ptr,
            profile=mig.group(1) if mig else None,
        )

    def _resource_fields(self, resources_: Mapping[str, Any], res_ptr: str) -> dict[str, Any]:
        """A container's GPUs, CPU and memory from its ``resources`` at ``res_ptr``."""
        return {
            "gpus": tuple(self._gpus(resources_, res_ptr)),
            "cpu_request": self._quantity(resources_, res_ptr, "requests", "cpu"),
            "cpu_limit": self._quantity(resources_, res_ptr, "limits", "cpu"),
            "memory_request": self._quantity(resources_, res_ptr, "requests", "memory"),
            "memory_limit": self._quantity(resources_, res_ptr, "limits", "memory"),
            "resources_pointer": res_ptr,
        }

    def _quantity(self, resources_: Mapping[str, Any], res_ptr: str, section: str, name: str) -> float | None:
        values = resources_.get(section)
        # `cpu: null` (a chart's way to drop a default) is no value: unset.
        # (A null GPU count stays an error: a GPU count is never guessed.)
        if not isinstance(values, Mapping) or values.get(name) is None:
            return None
        value = values[name]
        try:
            return parse_quantity(value)
        except QuantityError as exc:
            ptr = f"{res_ptr}/{section}/{pointers.escape(name)}"
            placeholder = isinstance(value, str) and re.search(_PLACEHOLDER_MARKS, value)
            self.error(ptr, f"{section}.{name}: {exc}" + (" (a placeholder left unrendered?)" if placeholder else ""))
            return None

    def _gpus(self, resources_: Mapping[str, Any], res_ptr: str) -> Iterator[GpuRequest]:
        requests = resources_.get("requests")
        limits = resources_.get("limits")
        requests = requests if isinstance(requests, Mapping) else {}
        limits = limits if isinstance(limits, Mapping) else {}
        modified = any(m in requests or m in limits for m in SHARE_MODIFIERS)
        for name in dict.fromkeys([*limits, *requests]):
            name = str(name)
            if not GPU_RESOURCE.match(name):
                continue
            request = self._gpu_count(requests, res_ptr, "requests", name)
            limit = self._gpu_count(limits, res_ptr, "limits", name)
            if (limit if limit is not None else request) == 0:
                continue  # `nvidia.com/gpu: "0"` (a chart's CPU-only setting) asks for no device
            mig = MIG_RESOURCE.match(name)
            if mig:
                mode, profile = "mig", mig.group(1)
            elif name.endswith(".shared") or modified or plugin_named_gpu(name):
                mode, profile = "shared", None
            else:
                mode, profile = "whole", None
            section = "limits" if name in limits else "requests"
            yield GpuRequest(
                resource=name,
                mode=mode,
                request=request,
                limit=limit,
                pointer=f"{res_ptr}/{section}/{pointers.escape(name)}",
                profile=profile,
            )

    def _gpu_count(self, section_values: Mapping[str, Any], res_ptr: str, section: str, name: str) -> float | None:
        if name not in section_values:
            return None
        value = section_values[name]
        try:
            return parse_quantity(value)
        except QuantityError as exc:
            ptr = f"{res_ptr}/{section}/{pointers.escape(name)}"
            # A number out of range says so; text is most often a placeholder.
            if isinstance(value, (int, float)) or "is not" not in str(exc):
                why = f"{exc}, not a GPU count"
            elif isinstance(value, str) and _BASE_60.fullmatch(value.strip()):
                why = f"{value!r} is text, not a GPU count (YAML 1.1 would read base 60; Kubernetes reads text)"
            else:
                why = f"{value!r} is not a GPU count (a placeholder left unrendered?)"
            self.error(ptr, f"{section}.{name}: {why}; this request cannot be judged")
            return None

    def _pod_level_gpus(
        self,
        spec: Mapping[str, Any],
        spec_ptr: str,
        annotations: Mapping[str, str],
        meta: Mapping[str, Any],
        at: str,
        loc: Locator,
    ) -> Iterator[GpuRequest]:
        claims = spec.get("resourceClaims")
        if isinstance(claims, list):
            for i, claim in enumerate(claims):
                if not isinstance(claim, Mapping):
                    continue
                source = claim.get("resourceClaimTemplateName") or claim.get("resourceClaimName")
                if source is None and isinstance(claim.get("source"), Mapping):  # pre-1.31 shape
                    src = claim["source"]
                    source = src.get("resourceClaimTemplateName") or src.get("resourceClaimName")
                yield GpuRequest(
                    resource=f"claim/{source or claim.get('name', i)}",
                    mode="dra",
                    request=None,
                    limit=None,
                    pointer=f"{spec_ptr}/resourceClaims/{i}",
                )
        for key in (*FRACTION_ANNOTATIONS, *MEMORY_SHARE_ANNOTATIONS):
            if key not in annotations:
                continue
            as_memory = key in MEMORY_SHARE_ANNOTATIONS
            ann_ptr = pointers.join_relative(at, f"{loc.metadata}/annotations/{key}") if loc.metadata else at
            try:
                amount = parse_quantity(annotations[key])
            except QuantityError as exc:
                self.error(ann_ptr, f"annotation {key}: {exc}" + (" (MiB of one GPU's memory)" if as_memory else ""))
                amount = None
            if as_memory:
                yield GpuRequest(key, "fraction", None, None, ann_ptr, memory_mib=amount)
            else:
                yield GpuRequest(key, "fraction", amount, amount, ann_ptr)


def _int32_problem(value: Any) -> str | None:
    """Why ``value`` is no replica count (an int32 >= 0), or None."""
    if isinstance(value, str):
        shown = repr(value) if len(value) <= 40 else repr(value[:37]) + "..."
        return f"{shown} is text, not a count"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        shown = repr(value) if isinstance(value, bool) else type(value).__name__
        return f"{shown} is not a number"
    if isinstance(value, float) and not value.is_integer():
        return f"{value!r} is not a whole number"
    if value < 0:
        return f"{value!r} is negative"
    if value > MAX_INT32:
        return f"{value!r:.40} is out of range"
    return None


def _image(value: Any) -> str:
    """An image as text; operators write it as a mapping too (NIMService's
    ``image: {repository, tag}``)."""
    if isinstance(value, Mapping):
        repository, tag = value.get("repository"), value.get("tag")
        if not isinstance(repository, str) or not repository:
            return ""
        return f"{repository}:{tag}" if isinstance(tag, (str, int, float)) and str(tag) else repository
    return str(value or "")


def _str_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): "" if v is None else str(v) for k, v in value.items()}


def _str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if v is not None)
    if isinstance(value, str):
        return (value,)
    return ()


def _env(value: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(value, Mapping):  # a chart's values (app-template): KEY: value, or KEY: {value: ...}
        for name, v in value.items():
            v = v.get("value") if isinstance(v, Mapping) else v
            out[str(name)] = "" if v is None or isinstance(v, (Mapping, list)) else str(v)
        return out
    if isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item.get("name") is not None:
                v = item.get("value")
                out[str(item["name"])] = "" if v is None else str(v)
    return out


def _mounts(value: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item.get("name") is not None:
                out[str(item["name"])] = str(item.get("mountPath") or "")
    return out


def _privileged(security_context: Any) -> bool:
    return isinstance(security_context, Mapping) and security_context.get("privileged") is True
