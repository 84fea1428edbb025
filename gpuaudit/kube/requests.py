"""What a pod asks the scheduler for in CPU and memory, as the scheduler
counts it (NodeResourcesFit): the containers' requests added up, or the
largest init container's when that is more (init containers run one at a
time, before the others), with restartable init containers (sidecars) added
to the containers that run, plus the pod overhead of its RuntimeClass."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from gpuaudit.kube.quantity import QuantityError, parse_quantity
from gpuaudit.kube.shapes import as_list, as_map

RESOURCES = ("cpu", "memory")


def _amount(value: Any) -> float:
    """A requested amount; a value that is not a quantity counts as nothing
    (the API server would not have admitted it)."""
    try:
        return parse_quantity(value)
    except QuantityError:
        return 0.0


# A cluster's pods ask for a few dozen distinct amounts ("500m", "16Gi"):
# each string is parsed once (every bound pod is counted, 50,000 on a large cluster).
_amount_of_text = lru_cache(maxsize=4096)(_amount)


def _amounts(values: Any) -> tuple[float, float]:
    """(CPU cores, memory bytes) in a requests map."""
    values = as_map(values)
    out = [0.0, 0.0]
    for i, name in enumerate(RESOURCES):
        if name in values:
            value = values[name]
            out[i] = _amount_of_text(value) if value.__class__ is str else _amount(value)
    return out[0], out[1]


def _requests(container: Any) -> tuple[float, float]:
    return _amounts(as_map(as_map(container).get("resources")).get("requests"))


def pod_requests(spec: Mapping[str, Any]) -> tuple[float, float]:
    """(CPU cores, memory bytes) the scheduler reserves for a pod of ``spec``."""
    cpu = memory = 0.0
    for container in as_list(spec.get("containers")):
        amounts = _requests(container)
        cpu += amounts[0]
        memory += amounts[1]
    if "initContainers" not in spec and "overhead" not in spec:  # most pods: the containers alone
        return cpu, memory
    peak = [0.0, 0.0]
    sidecars = [0.0, 0.0]
    for container in as_list(spec.get("initContainers")):
        amounts = _requests(container)
        if as_map(container).get("restartPolicy") == "Always":  # a sidecar: it keeps running
            for i, amount in enumerate(amounts):
                sidecars[i] += amount
        else:  # runs beside the sidecars started before it
            for i, amount in enumerate(amounts):
                peak[i] = max(peak[i], sidecars[i] + amount)
    overhead = _amounts(spec.get("overhead"))
    running = (cpu, memory)
    cpu, memory = (max(running[i] + sidecars[i], peak[i]) + overhead[i] for i in range(2))
    return cpu, memory
