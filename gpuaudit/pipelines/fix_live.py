"""Live state for `gpuaudit fix --snapshot FILE`: evidence per workload to size
manifest fixes, and the cluster's own objects as an overlay base (cleaned of
status and server-managed fields, and of what may be a credential: the base
is written into a folder meant for a commit). Pure: works on a snapshot
already read."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec
import msgspec.structs

from gpuaudit.engine.rules import Rule
from gpuaudit.facts import cluster as cluster_facts
from gpuaudit.facts.context import Site, build_context
from gpuaudit.facts.model_size import DTYPE_ENV, MODEL_ENV
from gpuaudit.facts.parallelism import ENV as PARALLELISM_ENV
from gpuaudit.facts.process import DATALOADER_ENV
from gpuaudit.facts.types import NodeFacts, PodFacts
from gpuaudit.kube.owners import OwnerKey
from gpuaudit.kube.podspecs import KindLocator, builtin_locators, group_of
from gpuaudit.kube.shapes import as_map, object_id
from gpuaudit.model import Document, Finding
from gpuaudit.model.cluster_builder import build_cluster_state
from gpuaudit.model.workload_builder import build_workloads
from gpuaudit.remediate.evidence import Evidence, from_cluster
from gpuaudit.remediate.overlay import dump
from gpuaudit.remediate.owner_findings import OwnerIndex, on_owner, unique
from gpuaudit.remediate.plan import Source
from gpuaudit.remediate.planners.declined import enable_mig_reason
from gpuaudit.remediate.verify import finding_key
from gpuaudit.safetext import one_line
from gpuaudit.sources.manifests import ReadResult, read_text

# Fields the API server writes: not part of what anyone applies.
SERVER_FIELDS = ("managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "selfLink")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def cleaned(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as someone would apply it: no status, no server-written metadata."""
    out = copy.deepcopy(dict(obj))
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_FIELDS:
            meta.pop(key, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop(LAST_APPLIED, None)
            if not annotations:
                del meta["annotations"]
    return out


# The env variables whose values the audit reads (the model, its dtype, the
# parallelism, DataLoader workers, the GPUs a container picks itself): the
# only env values a live base keeps, and only when they look like no
# credential. Any other value is left out, the variable still named.
READ_ENV = frozenset(
    {
        *MODEL_ENV,
        *DTYPE_ENV,
        *(name for names in PARALLELISM_ENV.values() for name in names),
        *DATALOADER_ENV,
        "NVIDIA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
    }
)
# A flag or variable name names a credential when one of its words (split at
# "-", "_", "." and case changes) is one of these, or two neighbours are a
# pair below; unless its last word says it names where the credential is.
CREDENTIAL_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "pwd", "passphrase", "credential", "credentials", "apikey", "auth"}
)
CREDENTIAL_PAIRS = frozenset({("api", "key"), ("access", "key"), ("secret", "key"), ("private", "key")})
CREDENTIAL_REFERENCE_WORDS = frozenset({"file", "path", "dir", "ref", "name", "env", "mount"})
# Values in the shape of a known credential, wherever they appear.
CREDENTIAL_VALUES = re.compile(
    r"""
      \bhf_[A-Za-z0-9]{20,}                          # Hugging Face
    | \bgh[pousr]_[A-Za-z0-9]{20,} | \bgithub_pat_\w{20,}  # GitHub
    | \bglpat-[\w-]{20,}                             # GitLab
    | \bxox[abposr]-[A-Za-z0-9-]{8,}                 # Slack
    | \bsk-[\w-]{20,}                                # OpenAI and alike
    | \b(?:AKIA|ASIA)[0-9A-Z]{16}\b                  # AWS access key id
    | \beyJ[\w-]{8,}\.eyJ[\w-]{8,}\.                 # a JWT (service-account tokens)
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----
    | \b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@       # a URL with user:password
    | \b(?:Bearer|Basic)\s+[\w.~+/=-]{6,}             # an Authorization header
    """,
    re.X,
)
# A flag and what follows it in the same word list: --name=value, --name value.
_FLAG = re.compile(r"(?<![\w-])--?([A-Za-z][\w.-]*)(?:=|\s+)(?=\S)")
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
_ENV_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def credential_name(name: str) -> bool:
    """Whether a flag or variable name names a credential (HF_TOKEN,
    --api-key, dbPassword), not a file or path holding one."""
    words = [w.lower() for w in _WORD.findall(name)]
    if not words or words[-1] in CREDENTIAL_REFERENCE_WORDS:
        return False
    return any(w in CREDENTIAL_WORDS for w in words) or any(pair in CREDENTIAL_PAIRS for pair in pairwise(words))


def looks_like_credential(text: str) -> bool:
    """Whether one command-line word, or an env value, holds a credential: a
    value in a known credential's shape, or a credential flag with its value
    (``--hf-token=...``, ``--password x`` inside a shell line)."""
    if CREDENTIAL_VALUES.search(text):
        return True
    return any(credential_name(m.group(1)) for m in _FLAG.finditer(text))


def _holds_credential(words: list[Any]) -> bool:
    texts = [str(w) for w in words]
    if any(looks_like_credential(t) for t in texts):
        return True
    # --hf-token VALUE: the flag alone, its value the next word
    return any(t.startswith("-") and "=" not in t and credential_name(t.lstrip("-")) for t in texts[:-1])


def redacted(obj: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``obj`` as a live base may be written: every env list (a container's,
    a ClusterPolicy component's) keeps its variables' names and references
    but a value only for what the audit reads (READ_ENV, or named as
    ``$(VAR)`` in the command line) and only when it looks like no
    credential; a command or args list holding a credential is left out
    whole (an atomic list: the cluster keeps its own under a server-side
    apply). Lists keep their items, so patches still point at the same
    indices. Returns the copy and what was left out, as lines that name
    variables and containers, never values."""
    out = copy.deepcopy(dict(obj))
    notes: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            owner = one_line(str(node.get("name") or "")) if isinstance(node.get("name"), str) else ""
            words = [w for key in ("command", "args") if isinstance(node.get(key), list) for w in node[key]]
            referenced = {m for w in words for m in _ENV_REFERENCE.findall(str(w))}
            for key in ("command", "args"):
                value = node.get(key)
                if isinstance(value, list) and _holds_credential(value):
                    del node[key]
                    notes.append(f"the {key} of {owner or 'a container'} (it holds a credential)")
            env = node.get("env")
            if isinstance(env, list):
                dropped = []
                for item in env:
                    if not isinstance(item, dict) or "value" not in item:
                        continue
                    name, value = str(item.get("name") or ""), str(item.get("value"))
                    keep = (name in READ_ENV or name in referenced) and not (
                        credential_name(name) or looks_like_credential(value)
                    )
                    if not keep:
                        del item["value"]
                        dropped.append(one_line(name))
                if dropped:
                    notes.append(f"env values of {owner or 'a container'}: {', '.join(sorted(set(dropped)))}")
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    return out, notes


def evidence(snapshot: Mapping[str, Any]) -> dict[OwnerKey, Evidence]:
    """Per top owner: peak GPU memory of its pods and the GPU models they ran on."""

    state = build_cluster_state(snapshot)
    models = {n.name: n.model for n in state.nodes}
    return from_cluster(cluster_facts.subjects(state), models)


def telemetry_window(snapshot: Mapping[str, Any]) -> str | None:
    """The snapshot's telemetry window as REVIEW.md names it ("7 days to
    2026-11-27T09:00:00Z"), or None when it holds no telemetry."""
    telemetry = snapshot.get("telemetry")
    if not isinstance(telemetry, Mapping) or not (telemetry.get("gpus") or telemetry.get("pods")):
        return None
    window = as_map(telemetry.get("window"))
    seconds = window.get("seconds")
    span = (
        f"{seconds / 86400:g} days"
        if isinstance(seconds, (int, float)) and seconds >= 86400
        else (f"{seconds / 3600:g} h" if isinstance(seconds, (int, float)) else "its window")
    )
    end = window.get("end") or window.get("until")
    return f"{span}{f' to {end}' if end else ''}"


def config_maps(snapshot: Mapping[str, Any]) -> list[Document]:
    """Every ConfigMap the snapshot holds, as documents: the cluster's
    sharing configs, whether or not a finding names them."""
    objects = snapshot.get("objects") or {}
    return [
        Document({"apiVersion": "v1", "kind": "ConfigMap", **obj}, "snapshot ConfigMap", 1)
        for obj in objects.get("configmaps") or []
        if isinstance(obj, Mapping)
    ]


def gpu_node_labels(snapshot: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
    """The labels of the snapshot's nodes that advertise GPUs."""
    out = []
    for node in (snapshot.get("objects") or {}).get("nodes") or []:
        status = node.get("status") or {}
        resources = {**(status.get("capacity") or {}), **(status.get("allocatable") or {})}
        if any(str(k).startswith("nvidia.com/") for k in resources):
            labels = (node.get("metadata") or {}).get("labels") or {}
            out.append({str(k): str(v) for k, v in labels.items()})
    return tuple(out)


# Snapshot lists whose objects an overlay may patch, and what they are. Pods,
# ReplicaSets and Jobs are owned by something else or have immutable pod
# templates; the workloads at the top of their owner chains are in
# "workloads" (snapshots recorded since gpuaudit reads them), kind included.
PATCHABLE = {"configmaps": ("v1", "ConfigMap"), "clusterpolicies": ("nvidia.com/v1", "ClusterPolicy")}

ObjectKey = tuple[str, str, str, str]  # group, kind, namespace, name


def _patchable(snapshot: Mapping[str, Any]) -> dict[ObjectKey, dict[str, Any]]:
    found = {}
    objects = snapshot.get("objects") or {}
    for key, (api_version, kind) in PATCHABLE.items():
        for obj in objects.get(key) or []:
            meta = obj.get("metadata") or {}
            found[(group_of(api_version), kind, meta.get("namespace") or "", meta.get("name") or "")] = {
                "apiVersion": api_version,
                "kind": kind,
                **obj,
            }
    for obj in objects.get("workloads") or []:
        meta = obj.get("metadata") or {}
        group = group_of(str(obj.get("apiVersion") or ""))
        found[(group, str(obj.get("kind") or ""), meta.get("namespace") or "", meta.get("name") or "")] = obj
    return found


class _Base(msgspec.Struct, frozen=True):
    """One cleaned object as the overlay's base file, read back with its lines."""

    document: Document
    source: Source


def _base(obj: Mapping[str, Any], label: str) -> _Base:
    clean, left_out = redacted(cleaned(obj))
    kind, meta = str(clean.get("kind")), clean.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    where = f"{namespace + '/' if namespace else ''}{name}"
    header = f"# {kind} {name} as read from {label}, without status.\n"
    if left_out:
        header += (
            "# Left out, so that no credential reaches this file (docs/robustness.md): "
            + "; ".join(left_out)
            + ".\n# Apply with `kubectl apply --server-side`: the cluster keeps what is left out "
            "(a client-side apply could remove it).\n"
        )
    content = header + dump(clean)
    read = ReadResult()
    read_text(content, f"{label} {kind}/{name}", read)
    document = read.documents[0] if read.documents else Document(clean, f"{label} {kind}/{name}", 1)
    source = Source(
        f"{label}: {kind} {where}",
        Path(f"cluster-{kind}-{namespace}-{name}".lower()),
        "generated",
        (object_id(document.obj),),
        content=content,
    )
    return _Base(document, source)


def live_items(
    findings: Sequence[Finding],
    snapshot: Mapping[str, Any],
    label: str,
    rules: Sequence[Rule] = (),
    locators: Mapping[tuple[str, str], KindLocator] | None = None,
    site: Site | None = None,
) -> list[tuple[Finding, Source]]:
    """Findings of a cluster audit, each with the source a patch would target:
    the cleaned object for those the snapshot holds (GPU configs; for
    findings on pods, the workload at the top of their owner chain, the
    finding judged again on it), and for the rest a source that says why
    there is no base to patch."""
    objects = _patchable(snapshot)
    bases: dict[ObjectKey, _Base] = {key: _base(obj, label) for key, obj in objects.items()}

    locators = builtin_locators() if locators is None else locators
    index = OwnerIndex(snapshot.get("objects") or {})
    # What the rest of the cluster says (advertised `.shared` names, requests
    # per resource), as a manifest audit of every base would see it.
    documents = [b.document for b in bases.values()]
    workloads, _ = build_workloads(documents, locators)
    # Not the replicas a time-slicing ConfigMap names: in a cluster they apply
    # to the nodes labelled for it, and the audit judged each pod on its node.
    context = msgspec.structs.replace(
        build_context(site or Site(), documents, workloads), replicated_names=frozenset(), replicated_by=frozenset()
    )
    by_id = {rule.id: rule for rule in rules}

    items = []
    node_peaks: dict[str, float] | None = None
    for finding in findings:
        subject = finding.subject
        r = finding.resource
        where = f"{r.kind} {r.namespace + '/' if r.namespace else ''}{r.name}"
        on_pod = subject is not None and subject.target == "pod" and subject.document is None
        pod = index.pod(r.namespace or "", subject.facts_as(PodFacts).pod or "") if on_pod else None
        if pod is not None:
            top = index.top(pod, where)
            if top.key is None or top.key not in objects:
                reason = top.reason or f"the snapshot does not hold {where}"
                items.append((finding, _unpatchable(label, reason)))
                continue
            found = bases[top.key]
            moved = on_owner(finding, by_id.get(finding.rule), found.document, pod, locators, context)
            if isinstance(moved, str):
                items.append((finding, _unpatchable(label, moved)))
            else:
                items.append((moved, found.source))
            continue
        key = (group_of(r.api_version), r.kind, r.namespace or "", r.name)
        if r.kind == "Node":
            if (finding.remediation or {}).get("id") == "enable-mig" and subject is not None:
                if node_peaks is None:
                    node_peaks = _node_peaks(snapshot)
                problem = enable_mig_reason(subject.facts_as(NodeFacts), node_peaks.get(r.name))
            else:
                problem = (
                    f"{where} is a Node: the kubelet owns it and an overlay does not patch it; the "
                    "change is a node label or the GPU Operator's config (see the rule's docs)"
                )
            items.append((finding, _unpatchable(label, problem)))
            continue
        if subject is None or key not in objects or r.kind not in {k for _, k in PATCHABLE.values()}:
            problem = (
                f"a snapshot holds the workloads that own pods and GPU configs, not a {r.kind} an "
                f"overlay could patch: run gpuaudit fix on the manifests of {where} with "
                "--snapshot FILE, and this evidence sizes the patch"
            )
            items.append((finding, _unpatchable(label, problem)))
            continue
        found = bases[key]
        finding = msgspec.structs.replace(finding, subject=msgspec.structs.replace(subject, document=found.document))
        items.append((finding, found.source))
    return unique(items, finding_key)


def _node_peaks(snapshot: Mapping[str, Any]) -> dict[str, float]:
    """Per node, the largest GPU memory a pod used over the telemetry window (MiB)."""
    telemetry = as_map(snapshot.get("telemetry"))
    peaks: dict[str, float] = {}
    for row in telemetry.get("gpus") or []:
        value, node = row.get("fb_used_max_mib"), row.get("node")
        if row.get("pod") and node and isinstance(value, (int, float)):
            peaks[str(node)] = max(peaks.get(str(node), 0.0), float(value))
    return peaks


def _unpatchable(label: str, problem: str) -> Source:
    return Source(label, Path(label), "generated", (), problem)
