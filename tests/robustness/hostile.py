"""Hostile inputs shared by the robustness tests: the seeds they start from,
the values they inject, and hypothesis strategies that mutate real
Kubernetes-shaped documents at any depth.

Random JSON alone rarely reaches ``spec.template.spec.containers[0].resources``;
mutating real manifests (every rule's cases, the examples, a recorded
cluster) does, so wrong types land on exactly the fields the facts read.
The field names injected are harvested from the code that reads them, so the
vocabulary follows the facts as they grow.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

from gpuaudit.sources.cluster import OBJECT_KEYS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gpuaudit"
SMALL_CLUSTER = ROOT / "tests" / "clusters" / "small.json"

# Values that have broken parsers and formatters elsewhere: placeholders,
# overflowing and non-finite numbers, markup, escapes, path tricks.
NASTY_STRINGS = (
    "",
    " ",
    "$GPU_PER_NODE",
    "${GPUS}",
    "null",
    "~",
    "1e400",
    "-1e400",
    "1e308Ei",
    "-1e300",
    "1e-300",
    "NaN",
    "-5",
    "0.5",
    "500m",
    "16Gi",
    "two",
    "In",
    "Memory",
    "/dev/shm",
    "NoSchedule",
    "True",
    "Pending",
    "Running",
    "CrashLoopBackOff",
    "kubernetes.io/hostname",
    "nvidia.com/gpu",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/gpu.shared",
    "../../x",
    "/etc/passwd",
    "<script>alert(1)</script>",
    "a<b>&c\"'",
    "{{ 7 * 7 }}",
    "{% raw %}",
    "\x1b[31mred\x1b[0m",
    "\x1b]0;title\x07",
    "line\nbreak\r\n",
    "tab\there",
    "nul\x00byte",
    "\u202eevil",
    "\ufeffbom",
    "]]><!--",
    "%0A::error::x",
    "::warning file=x::y",
    "*",
    "x" * 300,
)
NASTY_NUMBERS = (
    0,
    1,
    -1,
    8,
    2**63,
    -(2**63),
    10**30,
    0.5,
    -0.0,
    1e-300,
    -1e300,
    1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
)

# GPU and resource names the facts treat specially.
RESOURCE_NAMES = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-3g.40gb",
    "nvidia.com/mig-7g.80gb.shared",
    "nvidia.com/gpumem",
    "amd.com/gpu",
    "gpu.intel.com/i915",
    "cpu",
    "memory",
)


@cache
def field_names() -> tuple[str, ...]:
    """Keys the facts and the model read, found in their source and in the
    pod-spec locator table."""
    names: set[str] = set(RESOURCE_NAMES)
    sources = sorted((PACKAGE / "model").glob("*.py")) + sorted((PACKAGE / "kube").glob("*.py"))
    sources += sorted((PACKAGE / "facts").glob("*.py"))
    for path in sources:
        text = path.read_text()
        names.update(re.findall(r"""\.get\(\s*["']([^"'\s]{1,60})["']""", text))
        names.update(re.findall(r"""\[\s*["']([A-Za-z][\w./-]{0,60})["']\s*\]""", text))
    table = yaml.safe_load((PACKAGE / "data" / "podspecs.yaml").read_text())
    for entry in table:
        for locator in entry["pods"]:
            for value in locator.values():
                for pointer in value if isinstance(value, list) else [value]:
                    if isinstance(pointer, str):
                        names.update(t for t in pointer.split("/") if t and t != "*")
    return tuple(sorted(names))


@cache
def manifest_seeds() -> tuple[dict[str, Any], ...]:
    """Every object in the rules' cases and the examples: the real shapes of
    every supported kind."""
    seeds: list[dict[str, Any]] = []
    for path in sorted((ROOT / "policies").rglob("*.cases.yaml")):
        for case in yaml.safe_load(path.read_text()) or []:
            text = case.get("manifest") if isinstance(case, dict) else None
            if isinstance(text, str):
                seeds.extend(d for d in yaml.safe_load_all(text) if isinstance(d, dict))
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        seeds.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict))
    seeds.extend(generated_manifests())
    return tuple(seeds)


@cache
def generated_manifests() -> tuple[dict[str, Any], ...]:
    """One workload of every kind the benchmark generator knows (Kubeflow,
    Ray, KServe, LeaderWorkerSet, JobSet, Volcano, Argo, Trainer...), with the
    fields real files carry: kinds the rules' cases do not all show."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_manifests", ROOT / "bench" / "gen_manifests.py")
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    objects = []
    for kind, (build, _) in sorted(generator.KINDS.items()):
        objects.extend(build(generator.Gen(8), f"seed-{kind.lower()}", "fuzz"))
    return tuple(objects)


@cache
def cluster_seed() -> dict[str, Any]:
    """A snapshot of the recorded small cluster, with telemetry rows for its
    GPU pods, as `gpuaudit audit --snapshot` would read it."""
    recorded = json.loads(SMALL_CLUSTER.read_text())
    objects = {key: recorded.get(key, []) for key in OBJECT_KEYS}
    for items in objects.values():
        for obj in items:
            obj.get("metadata", {}).pop("managedFields", None)
    rows = []
    for i, pod in enumerate(objects["pods"][:6]):
        meta = pod["metadata"]
        rows.append(
            {
                "node": pod.get("spec", {}).get("nodeName"),
                "gpu": str(i),
                "uuid": f"GPU-{i}",
                "model": "NVIDIA A100-SXM4-80GB",
                "mig_profile": None,
                "mig_id": None,
                "namespace": meta.get("namespace"),
                "pod": meta["name"],
                "container": None,
                "coverage": 0.9,
                "compute_mean": 0.03,
                "compute_p95": 0.1,
                "compute_max": 0.2,
                "fb_used_mean_mib": 60000.0,
                "fb_used_max_mib": 70000.0,
                "fb_total_mib": 81920.0,
                "resident_fraction": 0.95,
                "resident_idle_fraction": 0.9,
                "pcie_tx_mean_bps": 1e6,
                "pcie_rx_mean_bps": 1e6,
                "nvlink_mean_bps": None,
                "occupancy_mean": None,
                "tensor_active_mean": None,
                "extra": {},
            }
        )
    from gpuaudit.model.telemetry import rollup_pods

    telemetry = {
        "version": 1,
        "source": "prometheus",
        "endpoint": "http://prometheus:9090",
        "window": {
            "start": "2026-01-01T00:00:00Z",
            "end": "2026-01-08T00:00:00Z",
            "seconds": 604800,
            "step_seconds": 300,
        },
        "signals": {"compute": "DCGM_FI_PROF_SM_ACTIVE"},
        "params": {"idle_compute": 0.1},
        "queries": 12,
        "pods": rollup_pods(rows),
        "gpus": rows,
        "errors": [],
    }
    return {
        "version": 1,
        "kind": "gpuaudit-snapshot",
        "collected_at": "2026-01-08T00:00:00Z",
        "cluster": {"server": "https://cluster.example", "context": "fuzz"},
        "objects": objects,
        "absent": [],
        "errors": [],
        "telemetry": telemetry,
    }


# --- strategies ---------------------------------------------------------------------


def scalars(surrogates: bool = False) -> st.SearchStrategy[Any]:
    """A hostile leaf value. JSON (snapshots) can carry lone surrogates; YAML cannot."""
    alphabet = st.characters(codec="utf-8") if not surrogates else st.characters()
    return st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(NASTY_NUMBERS),
        st.sampled_from(NASTY_STRINGS),
        st.integers(),
        st.floats(),
        st.text(alphabet, max_size=20),
        st.sampled_from(field_names()),
    )


def values(surrogates: bool = False) -> st.SearchStrategy[Any]:
    """A hostile value: a leaf, or a small list or mapping of them (keys are
    field names the facts read, so nested wrong shapes look plausible)."""
    keys = st.one_of(st.sampled_from(field_names()), st.text(max_size=8))

    def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4)

    return st.recursive(scalars(surrogates), containers, max_leaves=8)


def _slots(node: Any) -> Iterator[tuple[Any, Any]]:
    """(container, key) for every value inside ``node``, depth first."""
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                yield current, key
                stack.append(value)
        elif isinstance(current, list):
            for index, value in enumerate(current):
                yield current, index
                stack.append(value)


def mutate(data: st.DataObject, obj: Any, *, surrogates: bool = False, max_edits: int = 6) -> Any:
    """Apply a few random edits to a deep copy of ``obj``: replace a value at
    any depth with a hostile one, delete it, add a known field with a hostile
    value, wrap it in a list or a mapping, or turn it into text."""
    obj = copy.deepcopy(obj)
    for _ in range(data.draw(st.integers(1, max_edits), label="edits")):
        slots = list(_slots(obj))
        if not slots:
            break
        parent, key = slots[data.draw(st.integers(0, len(slots) - 1), label="where")]
        edit = data.draw(st.sampled_from(["replace", "delete", "add", "wrap", "stringify"]))
        if edit == "replace":
            parent[key] = data.draw(values(surrogates), label="value")
        elif edit == "delete":
            del parent[key]
        elif edit == "add":
            target = parent[key]
            if isinstance(target, dict):
                name = data.draw(st.sampled_from(field_names()), label="field")
                target[name] = data.draw(values(surrogates), label="value")
            elif isinstance(target, list):
                target.append(data.draw(values(surrogates), label="item"))
        elif edit == "wrap":
            as_list = data.draw(st.booleans(), label="as list")
            parent[key] = [parent[key]] if as_list else {"value": parent[key]}
        else:
            parent[key] = json.dumps(parent[key], default=str)
    return obj


@st.composite
def hostile_manifests(draw: st.DrawFn) -> list[Any]:
    """One to three objects: real manifests, mutated; sometimes wrapped in a
    (nested) List, sometimes not a mapping at all."""
    data = draw(st.data())
    seeds = manifest_seeds()
    objects = []
    for _ in range(draw(st.integers(1, 3))):
        seed = seeds[draw(st.integers(0, len(seeds) - 1), label="seed")]
        objects.append(mutate(data, seed))
    shape = draw(st.sampled_from(["plain", "plain", "list", "nested-list", "junk"]))
    if shape == "list":
        return [{"apiVersion": "v1", "kind": "List", "items": objects}]
    if shape == "nested-list":
        inner = {"apiVersion": "v1", "kind": "PodList", "items": objects[1:]}
        return [{"apiVersion": "v1", "kind": "List", "items": [objects[0], inner]}]
    if shape == "junk":
        return [*objects, draw(values())]
    return objects


@st.composite
def hostile_snapshots(draw: st.DrawFn) -> dict[str, Any]:
    """The recorded cluster's snapshot with a few of its objects, its
    telemetry or its top level mutated (lone surrogates included: JSON allows them)."""
    data = draw(st.data())
    snapshot = copy.deepcopy(cluster_seed())
    for _ in range(draw(st.integers(1, 4), label="targets")):
        # An earlier edit of the top level may have removed or replaced "objects".
        objects = snapshot.get("objects")
        kinds = list(objects) if isinstance(objects, dict) else []
        where = draw(st.sampled_from([*kinds, "telemetry", "snapshot"]))
        if where == "snapshot":
            snapshot = mutate(data, snapshot, surrogates=True, max_edits=1)
            continue
        if where == "telemetry":
            if isinstance(snapshot.get("telemetry"), dict):
                snapshot["telemetry"] = mutate(data, snapshot["telemetry"], surrogates=True)
            continue
        items = objects.get(where) if isinstance(objects, dict) else None
        if not isinstance(items, list) or not items:
            continue
        index = draw(st.integers(0, len(items) - 1), label="object")
        items[index] = mutate(data, items[index], surrogates=True)
    return snapshot


# A GPU pod pinned to one node, the manifest the robustness tests put next to bad input.
PINNED = """\
apiVersion: v1
kind: Pod
metadata: {name: pinned, namespace: ml}
spec:
  nodeName: gpu-node-1
  containers:
  - name: cuda
    resources:
      requests: {cpu: "4", memory: 8Gi}
      limits: {nvidia.com/gpu: 1}
"""


# A site rule of container facts whose violation a test writes (its lines
# are indented under `violation:`), numbered to keep several apart.
SITE_RULE_WITH = """\
id: SITE-{n:03d}
title: Site rule {n}
category: application
severity: low
scope: [manifest]
target: container
violation:
{violation}
message: "{{{{ container }}}} is judged"
docs: Explains why this rule matters in at least twenty characters.
"""


def site_rule(n: int, violation: str) -> str:
    return SITE_RULE_WITH.format(n=n, violation="\n".join("  " + line for line in violation.splitlines()))
