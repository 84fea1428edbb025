"""Manifests several test modules audit."""

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
