"""Precision per rule and per category against the truth set, the same over
every finding on ../shared/corpus, and GPU workloads recognised against
GPU-requesting objects counted independently.

    python bench/truth.py                      # the tables, in Markdown
    python bench/truth.py --gpuaudit OTHER     # judge another build (e.g. main's) by these labels

The independent count reads every YAML document of the corpus with PyYAML
alone and counts objects where any `requests`/`limits` mapping names a
GPU-like resource (nvidia.com/*gpu*, nvidia.com/mig-*, amd.com/gpu,
gpu.intel.com/*, habana.ai/*, <vendor>/gpu, <vendor>/vgpu), a KAI GPU
annotation, or a pod-level resourceClaims list: none of gpuaudit's tables.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.truth.truth import (  # noqa: E402
    CORPUS,
    HERE,
    load_labels,
    resolve,
    run_check,
    score,
    table,
    wrong_share,
)

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpuaudit", help="the gpuaudit executable whose findings are judged (default: this tree's)")
    args = parser.parse_args(argv)
    labels = load_labels()
    files = sorted({resolve(label.file) for label in labels} | set((HERE / "manifests").glob("*.yaml")))
    print("## Precision against the truth set (tests/truth/labels.yaml)\n")
    scores = score(labels, run_check(files, gpuaudit=args.gpuaudit)["findings"])
    print(table(scores))
    print(f"\n{wrong_share(scores)}")
    folders = [CORPUS / "manifests", CORPUS / "md_extracts"]
    if all(f.is_dir() for f in folders):
        # Every finding on the corpus, judged by its labels (one not labelled counts as wrong).
        corpus_labels = [label for label in labels if label.file.startswith("corpus/")]
        scores = score(corpus_labels, run_check(folders, gpuaudit=args.gpuaudit)["findings"])
        print("\n## Every finding on ../shared/corpus (manifests + md_extracts)\n")
        print(table(scores))
        print(f"\n{wrong_share(scores)}")
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
