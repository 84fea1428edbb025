"""DRA claims in manifests (ResourceClaim, ResourceClaimTemplate): CEL
selectors that pin one device or one GPU product (gpu-domain.md §5)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from gpuaudit.facts import Subject
from gpuaudit.facts.purpose import file_context
from gpuaudit.kube import pointers
from gpuaudit.kube.shapes import as_list, as_map
from gpuaudit.model import Document, Resource
from gpuaudit.model.workload_builder import is_live_dump

CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
# An attribute that names one device, compared for equality. (Pattern
# texts, compiled on first use by re's cache: most inputs hold no claim.)
_DEVICE_PIN = (
    r"""(?:\.|\[\s*['"])(index|minor|uuid|UUID|parentUUID|pciBusID)(?:['"]\s*\])?\s*==\s*"""
    r"""|\bdevice\.name\s*=="""
)
_PRODUCT_PIN = r"""(?:\.|\[\s*['"])productName(?:['"]\s*\])?\s*==\s*"""


# A DRA device class that names a GPU: gpu.nvidia.com, mig.nvidia.com,
# vfio.gpu.nvidia.com, gpu.intel.com, gaudi.intel.com, an example driver's
# gpu.example.com. Not qat.intel.com (crypto), an IMEX channel
# (compute-domain-default-channel.nvidia.com), a NIC.
# (A pattern text, compiled on first use by re's cache: most runs meet no claim.)
_GPU_DEVICE_CLASS = r"(?i)(?:^|[.\-_])(?:v?gpus?|mig|gaudi\w*)(?:[.\-_]|$)"


def is_claim(doc: Document) -> bool:
    return doc.kind in CLAIM_KINDS and doc.api_version.startswith("resource.k8s.io/")


def asks_no_gpu(doc: Document) -> bool:
    """Whether the claim ``doc`` names a device class in every request, and
    none is a GPU's (a QAT accelerator, an IMEX channel): a pod that takes it
    holds no GPU. A request without a class says nothing: then False."""
    base = "/spec/spec" if doc.kind == "ResourceClaimTemplate" else "/spec"
    devices = as_map(as_map(pointers.get(doc.obj, base)).get("devices"))
    classes: list[object] = []
    for request in as_list(devices.get("requests")):
        request = as_map(request)
        # v1beta1 names the class on the request, v1 under `exactly`; each
        # `firstAvailable` alternative names its own.
        alternatives = as_list(request.get("firstAvailable"))
        if alternatives:
            classes += [as_map(a).get("deviceClassName") for a in alternatives]
        else:
            classes.append(request.get("deviceClassName") or as_map(request.get("exactly")).get("deviceClassName"))
    return bool(classes) and all(isinstance(c, str) and c and not re.search(_GPU_DEVICE_CLASS, c) for c in classes)


def subjects(doc: Document, roots: Sequence[str] = ()) -> Iterator[Subject]:
    """The claim of ``doc``; ``roots``: the folders named on the command line
    (its file_context)."""
    if not is_claim(doc):
        return
    if is_live_dump(doc.obj) and as_map(doc.obj.get("metadata")).get("ownerReferences"):
        # `kubectl get -o yaml` of a claim a controller made from a template
        # for a pod: nobody applies it, and its template is judged already.
        return
    base = "/spec/spec" if doc.kind == "ResourceClaimTemplate" else "/spec"
    spec = pointers.get(doc.obj, base)
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    requests = requests if isinstance(requests, list) else []
    pins = [pin for i, r in enumerate(requests) for pin in _pins(r, f"{base}/devices/requests/{i}")]
    facts = {
        "apiVersion": doc.api_version,
        "kind": doc.kind,
        "name": doc.name,
        "namespace": doc.namespace,
        "pointer": pins[0]["pointer"] if pins else base,
        "requests": len(requests),
        "selector_pins": pins,
        "file_context": file_context(doc.file, roots),
    }
    yield Subject("claim", facts, Resource(doc.api_version, doc.kind, doc.namespace, doc.name), doc)


def _pins(request: Any, pointer: str) -> Iterator[dict[str, Any]]:
    if not isinstance(request, Mapping):
        return
    name = str(request.get("name", ""))
    # v1beta1 puts selectors on the request; v1 under `exactly`; both allow
    # `firstAvailable` alternatives, and one alternative is not a pin.
    places = [(request, pointer)]
    if isinstance(request.get("exactly"), Mapping):
        places.append((request["exactly"], f"{pointer}/exactly"))
    for holder, where in places:
        for j, selector in enumerate(as_list(holder.get("selectors"))):
            cel = selector.get("cel") if isinstance(selector, Mapping) else None
            expression = cel.get("expression") if isinstance(cel, Mapping) else None
            if not isinstance(expression, str) or "||" in expression:
                continue
            kind = (
                "device"
                if re.search(_DEVICE_PIN, expression)
                else "product"
                if re.search(_PRODUCT_PIN, expression)
                else None
            )
            if kind:
                yield {
                    "request": name,
                    "pin": kind,
                    "expression": " ".join(expression.split()),
                    "pointer": f"{where}/selectors/{j}/cel/expression",
                }
