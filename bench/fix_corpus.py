"""How much of the shared corpus `gpuaudit fix` can patch, and why not the rest.

    .venv/bin/python bench/fix_corpus.py [CORPUS_MANIFESTS]

Plans fixes (no kustomize needed) two ways: one overlay over every manifest
(what `gpuaudit fix corpus/manifests` writes; objects with the same name in
two files cannot share an overlay, and one file's sharing config decides the
shared resource name for all), and one overlay per file (what a repository
of one application gets). Prints findings, findings patched, and the
findings left without a patch grouped by reason. Building and verifying the
whole-corpus overlay is tests/test_fix_corpus.py's job.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from pathlib import Path

from gpuaudit.pipelines.fix import Rechecker, read_fix_inputs, run_state
from gpuaudit.pipelines.policy import load_policy, locators_for
from gpuaudit.remediate.plan import Plan, Settings, plan_fixes
from gpuaudit.sources.manifests import iter_manifest_files
from gpuaudit.sources.user_config import Config

REASONS = [
    (r"no template for remediation '([\w-]+)'", r"no template yet: \1"),
    (r"rule (\S+) has no remediation", "the rule names no remediation"),
    (r"^scaling to zero", "declined: scale-to-zero needs a traffic trigger"),
    (r"^a smaller GPU count", "declined: right-sizing needs the server's parallelism args"),
    (r"advertise no \.shared name", "the input's sharing config keeps the plain nvidia.com/gpu name"),
    (r"is in both .* and ", "the same object name in two files (one overlay cannot tell them apart)"),
    (r"not valid YAML", "its file is not valid YAML"),
    (r"no metadata.name", "its file has an object with generateName only"),
    (r"not a Kubernetes object", "its file holds a non-Kubernetes document"),
    (r"uses \S+ GPUs in one pod", "multi-GPU container: a share of one GPU cannot replace it"),
    (r"GPU count is not a number", "the GPU count is a placeholder"),
    (r"only NVIDIA shares", "AMD GPUs: no known shared resource"),
    (r"LLMInferenceServiceConfig", "KServe LLMInferenceService: its config templates are not merged"),
    (r"gpuaudit does not merge a TrainJob", "Kubeflow TrainJob: its training runtime is not merged"),
    (r"a Ray worker's GPUs are Ray's pool", "Ray: a worker's GPUs are Ray's pool (replicas x parallelism)"),
    (r"KubeRay mounts", "Ray: KubeRay already mounts a /dev/shm the size of the memory limit"),
    (r"nothing advertises nvidia.com/gpu.shared", "nothing advertises the shared resource"),
    (r"Ray counts a pod's GPUs", "Ray: .shared or MIG would hide the GPUs from Ray"),
    (r"no evidence of the host memory", "memory request: no evidence to size it"),
    (r"(is not among the inputs|no ServingRuntime or ClusterServingRuntime among)", "KServe: serving runtime unknown"),
    (r"effective (CPU|memory|/dev/shm|GPU) \S+ goes down", "would lower the effective (runtime-merged) request"),
    (r"is its request too", "the CPU limit already sets the request"),
    (r"pause container", "a pause container (placeholder)"),
    (r"on GKE", "GKE: sharing is a node-pool setting"),
    (r"nothing partitions a GPU", "MIG: nothing offers the slice"),
    (r"hold the pod's only GPU request", "the initContainer holds the pod's only GPU"),
    (r"no compute telemetry", "MIG: no compute telemetry"),
    (r"measured fit: no two", "time-slicing: measured fit below 2"),
]


def reason_class(reason: str) -> str:
    for pattern, label in REASONS:
        match = re.search(pattern, reason)
        if match:
            return match.expand(label)
    return reason[:80]


def plan_for(paths: list[str], config: Config, rules) -> tuple[Plan, int]:
    inputs = read_fix_inputs(paths, config, rules)
    run = run_state(inputs, config)
    plan = plan_fixes(inputs.items, locators_for(config), Settings(), run, Rechecker(config, rules, inputs))
    return plan, len(inputs.findings)


def report(title: str, plans: list[tuple[Plan, int]], seconds: float) -> None:
    findings = sum(n for _, n in plans)
    fixed = sum(len(p.fixed_findings) for p, _ in plans)
    patches = sum(len(p.changes) for p, _ in plans)
    reasons = Counter(reason_class(s.reason) for p, _ in plans for s in p.skipped)
    by_remediation = Counter(c.remediation for p, _ in plans for c in p.changes)
    by_kind = Counter(c.target[1] for p, _ in plans for c in p.changes)
    print(f"\n## {title} ({seconds:.1f} s)\n")
    print(f"findings {findings}, patched {fixed} ({fixed / max(findings, 1):.0%}) by {patches} patches")
    print("\npatches by remediation:")
    for name, count in by_remediation.most_common():
        print(f"  {count:5d}  {name}")
    print("\npatches by object kind:")
    for name, count in by_kind.most_common():
        print(f"  {count:5d}  {name}")
    print("\nwithout a patch, by reason:")
    for reason, count in reasons.most_common():
        print(f"  {count:5d}  {reason}")


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[2] / "shared/corpus/manifests")
    config = Config()
    rules, _ = load_policy(config)
    start = time.perf_counter()
    whole = plan_for([str(root)], config, rules)
    report(f"one overlay for {root}", [whole], time.perf_counter() - start)
    start = time.perf_counter()
    per_file = [plan_for([str(f)], config, rules) for f in iter_manifest_files(root)]
    report("one overlay per file", per_file, time.perf_counter() - start)


if __name__ == "__main__":
    main()
