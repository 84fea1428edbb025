"""Manifests several test modules audit, and fact documents they plan from."""

from __future__ import annotations

from gpuaudit.facts.types import NodeFacts

# A GPU pod pinned to one node by nodeName: a high-severity finding (GPA-PL-001) at line 7.
PINNED = """\
apiVersion: v1
kind: Pod
metadata:
  name: pinned
  namespace: ml
spec:
  nodeName: gpu-node-1
  containers:
  - name: cuda
    resources:
      requests: {cpu: "4", memory: 16Gi}
      limits: {nvidia.com/gpu: 1}
"""


def node_facts(
    name: str, *, model: str | None = None, product: str | None = None, mig_capable: bool = False
) -> NodeFacts:
    """A GPU node's facts: one GPU, nothing else known of it."""
    return NodeFacts(
        name=name,
        pointer="",
        product=product,
        model=model,
        gpus=1,
        gpu_resources={},
        allocated=None,
        free=None,
        mig_capable=mig_capable,
        mig_enabled=False,
        mig_config=None,
        sharing_strategy=None,
        replicas=None,
        unschedulable=False,
        taints=[],
    )
