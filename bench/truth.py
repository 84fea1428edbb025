"""Precision per rule and per category against the truth set, and GPU
workloads recognised against GPU-requesting objects counted independently.

    python bench/truth.py            # the tables, in Markdown

The independent count reads every YAML document of the corpus with PyYAML
alone and counts objects where any `requests`/`limits` mapping names a
GPU-like resource (nvidia.com/*gpu*, nvidia.com/mig-*, amd.com/gpu,
gpu.intel.com/*, habana.ai/*, <vendor>/gpu, <vendor>/vgpu), a KAI GPU
annotation, or a pod-level resourceClaims list: none of gpuaudit's tables.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.truth.truth import CORPUS, HERE, load_labels, resolve, run_check, score, table  # noqa: E402

_GPUISH = re.compile(r"gpu|mig-|habana\.ai/|gaudi", re.IGNORECASE)
_CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
_NOT_GPU = re.compile(r"gpumem|gpucores|gpu-memory|gpu\.sharing|gpu-product", re.IGNORECASE)


def _requests_gpu(node: Any, depth: int = 0) -> bool:
    if depth > 30:
        return False
    if isinstance(node, dict):
        for key, value in node.items():
            if (
                key in ("requests", "limits")
                and isinstance(value, dict)
                and any(_GPUISH.search(str(k)) and not _NOT_GPU.search(str(k)) and "/" in str(k) for k in value)
            ):
                return True
            if key == "resourceClaims" and isinstance(value, list) and value:
                return True
            if key == "annotations" and isinstance(value, dict) and ("gpu-fraction" in value or "gpu-memory" in value):
                return True
            if _requests_gpu(value, depth + 1):
                return True
    elif isinstance(node, list):
        return any(_requests_gpu(item, depth + 1) for item in node)
    return False


def _documents(path: Path) -> Iterator[tuple[str, str, str]]:
    try:
        docs = list(yaml.safe_load_all(path.read_text(errors="replace")))
    except yaml.YAMLError:
        return
    for doc in docs:
        if isinstance(doc, dict) and "kind" in doc and _requests_gpu(doc.get("spec", doc)):
            meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
            yield (str(path), str(doc["kind"]), str(meta.get("name") or meta.get("generateName") or ""))


def gpu_objects(folders: list[Path]) -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".yaml", ".yml") and path.is_file():
                found.update(_documents(path))
    return found


def recognised(folders: list[Path]) -> set[tuple[str, str, str]]:
    from gpuaudit.model.workload_builder import build_workloads
    from gpuaudit.sources.manifests import read_paths

    workloads, _ = build_workloads(read_paths([str(f) for f in folders]).documents)
    return {(str(Path(w.document.file).resolve()), w.kind, w.name) for w in workloads if w.requests_gpus}


def main() -> int:
    labels = load_labels()
    files = sorted({resolve(label.file) for label in labels} | set((HERE / "manifests").glob("*.yaml")))
    print("## Precision against the truth set (tests/truth/labels.yaml)\n")
    print(table(score(labels, run_check(files)["findings"])))
    folders = [CORPUS / "manifests", CORPUS / "md_extracts"]
    if all(f.is_dir() for f in folders):
        counted = {(str(Path(p).resolve()), k, n) for p, k, n in gpu_objects(folders)}
        claims = {c for c in counted if c[1] in _CLAIM_KINDS}
        independent = counted - claims
        ours = recognised(folders)
        print("\n## GPU-requesting objects in ../shared/corpus (manifests + md_extracts)\n")
        print(f"- counted independently (PyYAML, any GPU-like resource): {len(counted)}")
        print(f"  - of which DRA claims and claim templates (audited as claims, not workloads): {len(claims)}")
        print(f"  - workloads: {len(independent)}")
        print(f"- recognised by gpuaudit as GPU workloads: {len(ours)}")
        differences = (("only counted independently", independent - ours), ("only recognised", ours - independent))
        for label, items in differences:
            for path, kind, name in sorted(items):
                print(f"  - {label}: {Path(path).name} {kind}/{name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
