"""Placement remediations: hostname and product pins, GPU tolerations."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuaudit import gpus
from gpuaudit.facts import reservations
from gpuaudit.facts.model_size import heuristic, parameters_b
from gpuaudit.kube import pointers
from gpuaudit.kube.labels import HOSTNAME_LABEL
from gpuaudit.model import PodTemplate
from gpuaudit.remediate.planners.common import Context, Declined, Proposal, identity

# --- placement -----------------------------------------------------------------------


def _remaining_required(spec: Mapping[str, Any], drop: Callable[[Mapping[str, Any]], bool]) -> Any:
    """Required node affinity without the expressions ``drop`` matches: a
    mapping to write, or None when nothing is left (a term that loses all its
    expressions admits every node, and terms are ORed, so the whole
    requirement goes)."""
    required = pointers.get(spec, "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    kept_terms = []
    for term in terms:
        kept = {}
        for key in ("matchExpressions", "matchFields"):
            exprs = [e for e in term.get(key) or [] if not (key == "matchExpressions" and drop(e))]
            if exprs:
                kept[key] = exprs
        if not kept:
            return None
        kept_terms.append(kept)
    return {**copy.deepcopy(required), "nodeSelectorTerms": kept_terms}


def _preferred(label: str, values: Sequence[str], weight: int) -> list[dict[str, Any]]:
    return [
        {
            "weight": int(weight),
            "preference": {"matchExpressions": [{"key": label, "operator": "In", "values": list(values)}]},
        }
    ]


def drop_hostname_pin(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    placement = ctx.pod_facts.placement
    node, by = placement.pinned_node, placement.pinned_by
    if not node or by is None:
        return Declined("the facts name no hostname pin")
    spec_ptr = template.pointer
    keep = bool(ctx.params["prefer_former_node"])
    params = {
        **identity(ctx),
        "node": node,
        "spec_pointer": spec_ptr,
        "selector_pointer": f"{spec_ptr}/nodeSelector",
        "node_affinity_pointer": f"{spec_ptr}/affinity/nodeAffinity",
        "preferred": _preferred(HOSTNAME_LABEL, [node], ctx.params["weight"]) if keep else [],
    }
    variant = {"nodeName": "node-name", "nodeSelector": None, "affinity": "affinity"}[by]
    existing = pointers.get(template.spec, "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
    if by == "affinity":
        existing = _remaining_required(template.spec, lambda e: e.get("key") == HOSTNAME_LABEL)
    params["required"] = existing
    params["required_floor"] = []
    basis = f"Pinned to {node} by {by}." + (
        f" A preferred affinity (weight {ctx.params['weight']}) keeps it on {node} when that node has room."
        if keep
        else ""
    )
    floor = _pinned_node_floor(ctx, str(node))
    if isinstance(floor, Declined):
        return floor
    if floor is not None:
        expression, text = floor
        params["required"] = _with_floor(existing, expression)
        params["required_floor"] = [params["required"]]
        basis += f" {text}"
    return Proposal(variant, params, basis, "static", f"{spec_ptr}#hostname")


def _pinned_node_floor(ctx: Context, node: str) -> tuple[dict[str, Any], str] | Declined | None:
    """From a cluster: the GPU products the pods may move to once the pin is
    gone, those with the memory they need (the pinned node's GPU caps the
    need: they ran there). None without the cluster's nodes or a known GPU
    on the pinned node."""
    labels = next((n for n in ctx.run.gpu_node_labels if n.get(HOSTNAME_LABEL) == node), None)
    model = gpus.lookup(labels[PRODUCT_LABEL]) if labels and labels.get(PRODUCT_LABEL) else None
    if labels is None or model is None:
        return None
    floor = _memory_floor(ctx, model.memory_gib)
    if isinstance(floor, Declined):
        return floor
    floor_mib, source = floor
    values = sorted({str(n[PRODUCT_LABEL]) for n in ctx.run.gpu_node_labels if PRODUCT_LABEL in n})
    fitting = [v for v in values if (m := gpus.lookup(v)) is not None and m.memory_gib * 1024 >= floor_mib]
    expression = {"key": PRODUCT_LABEL, "operator": "In", "values": fitting}
    return expression, (
        f"Its pods keep a required {PRODUCT_LABEL} In {fitting}: GPUs of at least {floor_mib:,.0f} MiB, from "
        f"{source}, so without the pin it never lands on a smaller GPU ({node} has a {model.model})."
    )


MEMORY_LABEL = "nvidia.com/gpu.memory"  # GPU Feature Discovery: the GPU's memory, MiB
PRODUCT_LABEL = "nvidia.com/gpu.product"
# Without a known need the floor is the pinned GPU's nominal memory, less what
# GFD reports below the nominal figure (an 80 GB H100 says 81,559 MiB).
NOMINAL_SLACK = 0.95


def _memory_floor(ctx: Context, memory: float | None) -> tuple[float, str] | Declined:
    """The least GPU memory (MiB) the relaxed pods must keep, and where it
    comes from: the measured peak (with headroom), the model's size per GPU,
    or, when neither is known, the pinned GPU's own memory (``memory``, GiB)."""
    needs: list[tuple[float, str]] = []
    seen = ctx.run.evidence_for(ctx.document)
    peak = seen.telemetry.fb_used_max_mib if seen is not None and seen.telemetry is not None else None
    if isinstance(peak, (int, float)) and peak > 0:
        headroom = float(ctx.params.get("headroom", 0.2))
        needs.append((peak * (1 + headroom), f"its measured peak of {peak:,.0f} MiB + {headroom:.0%} headroom"))
    model = ctx.pod_facts.model
    need_gib, name, gpus = (model.need_gib, model.name, model.gpus) if model is not None else (None, None, None)
    if need_gib is None and ctx.template is not None:  # a NIM names its model in its image only
        for c in ctx.template.containers:
            nim = reservations.nim_model(c.image)
            if nim and (params := parameters_b(nim)):
                h = heuristic()
                need_gib = params * 1e9 * h.bytes_per_param["bfloat16"] / 2**30 * h.headroom
                name, gpus = nim, sum(r.count or 0 for r in c.gpus) or 1
    if isinstance(need_gib, (int, float)) and need_gib > 0:
        per_gpu = float(need_gib) / max(1.0, float(gpus or 1))
        needs.append((per_gpu * 1024, f"the size of its model {name} ({per_gpu:,.0f} GiB per GPU)"))
    if needs:
        need, source = max(needs)
        if memory and need > float(memory) * 1024 * NOMINAL_SLACK:
            # It ran on the pinned GPU: that GPU's memory is enough, whatever the estimate says.
            return float(memory) * 1024 * NOMINAL_SLACK, f"{source}, capped at the pinned GPU's {memory:g} GiB"
        return need, source
    if not memory:
        return Declined(
            "neither its peak GPU memory nor its model's size is known, nor the memory of the pinned GPU: "
            "relaxing the pin could put it on GPUs too small for it"
        )
    return (
        float(memory) * 1024 * NOMINAL_SLACK,
        f"the pinned GPU's memory ({memory:g} GiB): neither its peak memory nor its model's size is known",
    )


def _floor_expression(ctx: Context, label: str, pinned: Sequence[str], floor_mib: float) -> dict[str, Any] | Declined:
    """The requirement that keeps the relaxed pods on GPUs with at least
    ``floor_mib``: from a cluster, the values of the pin's own label whose GPU
    model (gpus.yaml) has that much memory; from manifests, GFD's memory
    label, when the pin is GFD's product label."""
    if ctx.run.gpu_node_labels:
        values = sorted({str(n[label]) for n in ctx.run.gpu_node_labels if label in n})
        fitting = []
        for value in values:
            model = gpus.lookup(value)
            if model is not None and model.memory_gib * 1024 >= floor_mib:
                fitting.append(value)
        if set(fitting) <= set(pinned):
            return Declined(
                f"no other GPU model among the cluster's nodes ({label}: {', '.join(values) or 'none'}) has the "
                f"{floor_mib:,.0f} MiB it needs: relaxing the pin gains no node it may safely use"
            )
        return {"key": label, "operator": "In", "values": fitting}
    if label == PRODUCT_LABEL:
        return {"key": MEMORY_LABEL, "operator": "Gt", "values": [str(int(floor_mib))]}
    return Declined(
        f"the pin is on {label}, whose values say nothing of GPU memory here: without the cluster's nodes "
        "(gpuaudit fix --snapshot FILE) no floor keeps it off GPUs smaller than it needs"
    )


def _with_floor(required: Any, expression: Mapping[str, Any]) -> dict[str, Any]:
    """``required`` node affinity with the floor in every term (terms are ORed)."""
    terms = (required or {}).get("nodeSelectorTerms") or [{}]
    out = []
    for term in terms:
        term = copy.deepcopy(dict(term))
        term["matchExpressions"] = [
            e for e in term.get("matchExpressions") or [] if e.get("key") != expression["key"]
        ] + [dict(expression)]
        out.append(term)
    return {**copy.deepcopy(dict(required or {})), "nodeSelectorTerms": out}


def prefer_product_affinity(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    facts = ctx.pod_facts
    product = facts.placement.gpu_product
    if product is None or not product.label or not product.values:
        return Declined("the facts name no required GPU product selector")
    label, values, by = product.label, product.values, product.by
    pending = facts.pending.untolerated_taints if facts.pending is not None else []
    taints = list(facts.placement.untolerated_taints or []) or list(pending)
    if taints:
        shown = ", ".join(taints)
        return Declined(
            f"what keeps it off the GPU nodes its {label} selector admits is the taint {shown}, which it does "
            f"not tolerate, not the product pin: relaxing the pin would move it onto other, possibly smaller, "
            f"GPUs. If it belongs on those nodes, add a toleration for {shown} (ask the owner of that pool)"
        )
    floor = _memory_floor(ctx, product.memory_gib)
    if isinstance(floor, Declined):
        return floor
    floor_mib, floor_source = floor
    expression = _floor_expression(ctx, label, [str(v) for v in values], floor_mib)
    if isinstance(expression, Declined):
        return expression
    spec_ptr = template.pointer
    existing = pointers.get(template.spec, "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution")
    if by == "affinity":
        existing = _remaining_required(template.spec, lambda e: e.get("key") == label)
    params = {
        **identity(ctx),
        "label": label,
        "values": list(values),
        "spec_pointer": spec_ptr,
        "selector_pointer": f"{spec_ptr}/nodeSelector",
        "node_affinity_pointer": f"{spec_ptr}/affinity/nodeAffinity",
        "preferred": _preferred(label, values, ctx.params["weight"]),
        "required": _with_floor(existing, expression),
        "kept": expression,
        "floor_mib": int(floor_mib),
        "floor_gib": int(floor_mib // 1024),
    }
    memory = product.memory_gib
    kept = f"{expression['key']} {expression['operator']} {expression['values']}"
    params["effect_text"] = (
        f"The pods prefer nodes with {label} in {list(values)} but can run on other GPU nodes when those are "
        f"full, instead of waiting; only on nodes with {kept} (GPUs of at least {floor_mib:,.0f} MiB), so never "
        "on GPUs smaller than it needs."
    )
    params["risk_text"] = (
        "On another GPU model the workload may run slower, and software built for one architecture may not run "
        f"on another. The memory floor comes from {floor_source}."
    )
    basis = (
        f"Required {label} in {list(values)} becomes a preference (weight {ctx.params['weight']}); the pods keep "
        f"a required {kept}: GPUs of at least {floor_mib:,.0f} MiB, from {floor_source}."
        + (f" The pinned GPU has {memory:g} GiB." if memory else "")
    )
    variant = None if by == "nodeSelector" else "affinity"
    confidence = "measured" if "measured" in floor_source else "static"
    return Proposal(variant, params, basis, confidence, f"{spec_ptr}#product")


def _toleration_for(taint: Mapping[str, Any]) -> dict[str, Any]:
    toleration: dict[str, Any] = {"key": str(taint["key"])}
    if taint.get("value") not in (None, ""):
        toleration.update(operator="Equal", value=str(taint["value"]))
    else:
        toleration["operator"] = "Exists"
    if taint.get("effect"):
        toleration["effect"] = str(taint["effect"])
    return toleration


def tolerated(tolerations: Sequence[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (Kubernetes' rules)."""
    for t in tolerations:
        if t.get("effect") and taint.get("effect") and t["effect"] != taint["effect"]:
            continue
        if not t.get("key"):
            if t.get("operator") == "Exists":
                return True
            continue
        if t["key"] != taint.get("key"):
            continue
        if t.get("operator") == "Exists" or str(t.get("value", "")) == str(taint.get("value") or ""):
            return True
    return False


def add_gpu_toleration(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    taints = ctx.params.get("gpu_taints") or []
    existing = [t for t in template.spec.get("tolerations") or [] if isinstance(t, Mapping)]
    missing = [_toleration_for(t) for t in taints if not tolerated(existing, t)]
    if not missing:
        return Declined("the pod already tolerates the site's GPU taints")
    shown = ", ".join(
        f"{t['key']}{'=' + str(t['value']) if t.get('value') else ''}:{t.get('effect', '*')}" for t in taints
    )
    params = {**identity(ctx), "spec_pointer": template.pointer, "tolerations": missing}
    basis = f"GPU node taints: {shown} (site setting gpu_taints)."
    return Proposal(None, params, basis, "static", f"{template.pointer}#tolerations")


def select_gpu_class(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    product = ctx.pod_facts.placement.gpu_product
    wanted = product.broader_class.name if product is not None and product.broader_class is not None else None
    classes = [c for c in ctx.params.get("gpu_classes") or [] if isinstance(c, Mapping)]
    found = next((c for c in classes if c.get("name") == wanted), None)
    if product is None or not product.label or found is None:
        return Declined("the site declares no GPU class for this product pin")
    label, by = product.label, product.by
    selector = {str(k): str(v) for k, v in (found.get("selector") or {}).items()}
    if not selector:
        return Declined(f"GPU class {wanted} has no selector")
    changes = [{"key": k, "value": v} for k, v in selector.items()]
    if by == "nodeSelector" and label not in selector:
        changes.append({"key": label, "value": None})
    spec_ptr = template.pointer
    params = {
        **identity(ctx),
        "label": label,
        "values": list(product.values),
        "class_name": wanted,
        "products": list(found.get("products") or []),
        "selector_pointer": f"{spec_ptr}/nodeSelector",
        "node_affinity_pointer": f"{spec_ptr}/affinity/nodeAffinity",
        "selector_changes": changes,
    }
    variant = None
    if by == "affinity":
        variant = "affinity"
        params["required"] = _remaining_required(template.spec, lambda e: e.get("key") == label)
    shown = ", ".join(f"{k}={v}" for k, v in selector.items())
    basis = (
        f"The site's GPU class {wanted} ({shown}) holds {', '.join(params['products'])}; "
        f"the pin on {label} in {params['values']} is replaced by that class (site setting "
        "gpu_classes)."
    )
    return Proposal(variant, params, basis, "static", f"{spec_ptr}#product")


def prefer_spread(ctx: Context, template: PodTemplate) -> Proposal | Declined:
    spread = ctx.pod_facts.placement.spread
    if spread is None or spread.pointer is None:
        return Declined("the facts name no required spread")
    where, by = spread.pointer, spread.by
    params = {**identity(ctx), "pointer": where, "per_node": spread.max_pods_per_node}
    basis = (
        f"{by} allows {spread.max_pods_per_node} pod(s) per node: "
        f"{spread.nodes_demanded} GPU nodes demanded where "
        f"{spread.nodes_needed} would do ({spread.gpus_per_node} GPUs per node, "
        f"from {spread.gpus_per_node_source})."
    )
    if by == "topologySpreadConstraints":
        return Proposal("topology-spread", params, basis, "static", f"{where}#spread")
    parent, _, index = where.rpartition("/")
    terms = pointers.get(ctx.document.obj, parent)
    if not isinstance(terms, list) or not index.isdigit() or int(index) >= len(terms):
        return Declined("the anti-affinity term is no longer where the facts found it")
    term = terms[int(index)]
    rest = [t for i, t in enumerate(terms) if i != int(index)]
    params.update(
        anti_affinity_pointer=parent.rpartition("/")[0],
        required=rest or None,
        preferred=[{"weight": int(ctx.params["weight"]), "podAffinityTerm": term}],
    )
    return Proposal(None, params, basis, "static", f"{where}#spread")
