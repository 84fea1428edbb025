"""Generate a many-findings repository: N small GPU Deployments and
StatefulSets, each with at least three findings.

bench/gen_manifests.py models a tidy repository (long files, few findings);
this one stresses what each finding costs (matching every rule, rendering
its message, evidence and location). Every file is one workload of 20 to 30
lines that requests whole GPUs and has some of: GPU requests without a CPU
or memory request to go with them, a single-process launcher on several
GPUs, CUDA_VISIBLE_DEVICES set by hand, a hostname pin, no /dev/shm, a
service with no way to scale down. ``bench/run.py`` checks that the
findings are there (at least three per file on average).

The same ``--seed`` and ``--files`` always give byte-identical files.

    python bench/gen_findings.py OUT_DIR --files 1000 [--seed 8]
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

TEAMS = ("research", "inference", "platform", "vision", "speech", "llm")
IMAGES = (
    "nvcr.io/nvidia/pytorch:24.08-py3",
    "vllm/vllm-openai:v0.6.3",
    "ghcr.io/huggingface/text-generation-inference:2.3.1",
    "nvcr.io/nvidia/tritonserver:24.08-py3",
)
MODELS = (
    "meta-llama/Llama-3.1-8B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "Qwen/Qwen2.5-14B-Instruct",
    "google/gemma-2-9b-it",
)


def workload(r: random.Random, serial: int) -> str:
    kind = "Deployment" if r.random() < 0.6 else "StatefulSet"
    name = f"{r.choice(('llm', 'embed', 'train', 'rerank', 'asr'))}-{serial}"
    gpus = r.choice((2, 4, 8))
    lines = [
        "apiVersion: apps/v1",
        f"kind: {kind}",
        "metadata:",
        f"  name: {name}",
        f"  namespace: {r.choice(TEAMS)}",
        "spec:",
    ]
    if kind == "StatefulSet":
        lines.append(f"  serviceName: {name}")
    lines += [
        f"  replicas: {r.choice((1, 2, 3))}",
        "  selector:",
        f"    matchLabels: {{app: {name}}}",
        "  template:",
        "    metadata:",
        f"      labels: {{app: {name}}}",
        "    spec:",
    ]
    if r.random() < 0.4:
        lines.append(f"      nodeSelector: {{kubernetes.io/hostname: gpu-node-{r.randrange(64)}}}")
    lines += ["      containers:", "      - name: main", f"        image: {r.choice(IMAGES)}"]
    if r.random() < 0.5:
        lines.append(f'        args: ["--model", "{r.choice(MODELS)}"]')
    else:
        lines.append('        command: ["torchrun", "--nproc_per_node=1", "train.py"]')
    if r.random() < 0.4:
        devices = ",".join(str(i) for i in range(gpus))
        lines += ["        env:", f'        - {{name: CUDA_VISIBLE_DEVICES, value: "{devices}"}}']
    cpu = r.choice(('cpu: "1", ', 'cpu: "2", ', ""))
    if r.random() < 0.5:
        lines += [
            "        resources:",
            f"          requests: {{{cpu}nvidia.com/gpu: {gpus}}}",
            f"          limits: {{nvidia.com/gpu: {gpus}}}",
        ]
    else:
        lines += ["        resources:", f"          limits: {{{cpu}nvidia.com/gpu: {gpus}}}"]
    return "\n".join(lines) + "\n"


def generate(out: Path, files: int, seed: int = 8) -> list[Path]:
    """Write ``files`` manifests under ``out`` (one folder per team), in order."""
    r = random.Random(seed)
    written = []
    for serial in range(files):
        text = workload(r, serial)
        team = text.split("namespace: ", 1)[1].split("\n", 1)[0]
        path = out / team / f"{serial:05d}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--files", type=int, default=1000)
    p.add_argument("--seed", type=int, default=8)
    args = p.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    generate(args.out, args.files, args.seed)


if __name__ == "__main__":
    main()
