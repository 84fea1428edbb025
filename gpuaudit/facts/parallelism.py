"""How many GPUs a serving or training process says it will use.

Tensor, pipeline and data parallelism (vLLM, SGLang, TGI, TensorRT-LLM,
Megatron flags and their env equivalents) or a process count per node
(torchrun, DeepSpeed). A pod whose parallelism matches its GPU count needs
its GPUs whole (``--tensor-parallel-size=8`` on 8 GPUs is consistent); one
that uses fewer than it holds leaves the rest allocated and idle.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from gpuaudit.facts.cmdline import Token, flag, tokens
from gpuaudit.model import Container

# Command-line flags and env variables, by dimension. The first spelling
# found wins within a dimension (flags before env).
FLAGS: Mapping[str, tuple[str, ...]] = {
    "tensor": (
        "--tensor-parallel-size",
        "--tensor_parallel_size",
        "-tp",
        "--tp",
        "--tp-size",
        "--tp_size",
        "--num-shard",  # TGI
        "--num_shard",
        "--tensor-model-parallel-size",  # Megatron, NeMo
        "--tensor_model_parallel_size",
    ),
    "pipeline": (
        "--pipeline-parallel-size",
        "--pipeline_parallel_size",
        "-pp",
        "--pp",
        "--pp-size",
        "--pp_size",
        "--pipeline-model-parallel-size",
        "--pipeline_model_parallel_size",
    ),
    "data": (
        "--data-parallel-size",
        "--data_parallel_size",
        "-dp",
        "--dp",
        "--dp-size",
        "--dp_size",
    ),
    "processes": ("--nproc-per-node", "--nproc_per_node", "--num_gpus", "--num-gpus"),
}
ENV: Mapping[str, tuple[str, ...]] = {
    "tensor": (
        "NUM_SHARD",  # TGI
        "TENSOR_PARALLEL_SIZE",
        "TP_SIZE",
        "NIM_TENSOR_PARALLEL_SIZE",
        "TENSOR_PARALLELISM",
    ),
    "pipeline": ("PIPELINE_PARALLEL_SIZE", "PP_SIZE", "NIM_PIPELINE_PARALLEL_SIZE"),
    "data": ("DATA_PARALLEL_SIZE", "DP_SIZE"),
    "processes": ("NPROC_PER_NODE", "PET_NPROC_PER_NODE"),
}
# KServe's predictor workerSpec carries the sizes as fields (and a RayService's
# Serve config is read into the same fields, facts/process.py).
SPEC_FIELDS = {
    "tensor": "tensorParallelSize",
    "pipeline": "pipelineParallelSize",
    "data": "dataParallelSize",
}
# torchrun's --nproc-per-node may name "all GPUs" instead of a number.
_ALL_GPUS = ("gpu", "auto")
# How many nodes (pods) one group spans: vLLM's and SGLang's --nnodes (each
# pod a node-rank of it), torchrun's --nnodes.
NODE_FLAGS = ("--nnodes", "--num-nodes", "--num_nodes")
# Signs that the group spans pods in a number the command does not say: a
# Ray cluster started by hand (the engine's ranks placed over its nodes), an
# engine told to join one headless or over Ray.
_SPANS_PODS_FLAGS = ("--node-rank", "--node_rank", "--headless", "--distributed-executor-backend")
# Engines that run one model copy on one GPU unless told otherwise: vLLM's
# and SGLang's tensor, pipeline and data parallel sizes default to 1. (TGI
# shards over every GPU it sees, torchrun starts one process unless told:
# neither is here.) Read from the command, or from an image whose entrypoint
# is the engine when the container names no command.
_ONE_GPU_ENGINES = (("vLLM", ("vllm serve", "vllm.entrypoints")), ("SGLang", ("sglang.launch_server", "sglang serve")))
_ONE_GPU_ENGINE_IMAGES = (("vLLM", "vllm-openai"), ("SGLang", "lmsysorg/sglang"))
# What may say the sizes where the flags above are not read: a config file,
# a flag spelt otherwise (--data-parallel-size-local), a value left to the
# shell.
_SIZES_ELSEWHERE = (
    "--config",
    "--data-parallel",
    "--tensor-parallel",
    "--pipeline-parallel",
    "--enable-expert-parallel",
)


def container_parallelism(
    c: Container,
    words: list[Token] | None = None,
    spec: Mapping[str, Any] | None = None,
    env_index: Mapping[str, int | str] | None = None,
) -> dict[str, Any] | None:
    """Parallelism declared by one container (or its pod spec), compared with
    the GPUs it holds; None when nothing declares any."""
    words = tokens(c.command, c.args, c.env) if words is None else words
    sizes: dict[str, int | str | None] = {}
    pointer = None
    for dim in FLAGS:
        value, where = _declared(dim, c, words, spec or {}, env_index or {})
        if value is None:
            continue
        sizes[dim] = value
        pointer = pointer or where
    gpus = whole_gpus(c)
    default_of = None
    if not sizes:
        default_of = _one_gpu_engine(c, words) if gpus is not None and gpus > 1 else None
        if default_of is None:
            return None
        sizes["tensor"] = 1
        pointer = f"{c.pointer}/args" if c.args else f"{c.pointer}/command" if c.command else c.pointer
    facts: dict[str, Any] = {
        "tensor": _number(sizes.get("tensor")),
        "pipeline": _number(sizes.get("pipeline")),
        "data": _number(sizes.get("data")),
        "processes": _number(sizes.get("processes")),
        "total": None,
        "gpus": gpus,
        "matches_gpus": None,
        "unused_gpus": None,
        "processes_over_gpus": None,
        "split_over_gpus": None,
        "gpus_asked": None,
        "nodes": None,
        "pointer": pointer,
        "default_of": default_of,
        "said": _said(sizes, default_of),
    }
    if any(isinstance(v, str) and v not in _ALL_GPUS for v in sizes.values()):
        return facts  # a value we could not read ($(UNSET)): no verdict
    nodes = _nodes(words)
    facts["nodes"] = nodes if isinstance(nodes, int) else None
    if sizes.get("processes") in _ALL_GPUS:
        facts["matches_gpus"] = gpus is not None
        facts["unused_gpus"] = 0 if gpus is not None else None
        return facts
    if sizes.get("processes") is not None:
        total = int(sizes["processes"])  # type: ignore[arg-type]
    else:
        total = 1
        for dim in ("tensor", "pipeline", "data"):
            total *= int(sizes.get(dim) or 1)  # type: ignore[arg-type]
    facts["total"] = total
    if gpus is not None and gpus > 0:
        # torchrun's and DeepSpeed's count is per node, so per pod: more
        # processes than the pod's GPUs share them or fail on a device ordinal.
        processes = facts["processes"]
        facts["processes_over_gpus"] = int(processes - gpus) if processes is not None and processes > gpus else 0
        # One model split over more GPUs than the pod holds: right only when
        # the group spans several pods (LeaderWorkerSet, Ray, multi-node KServe).
        split = (facts["tensor"] or 1) * (facts["pipeline"] or 1)
        if isinstance(nodes, int) and nodes > 1:
            split = -(-split // nodes)  # each pod holds its node's share of the split
        facts["split_over_gpus"] = None if nodes == "spans" else (int(split - gpus) if split > gpus else 0)
        asked = processes if processes is not None else split
        facts["gpus_asked"] = asked
        # A group larger than the pod spans several pods (multi-node serving).
        facts["matches_gpus"] = total == gpus or (total > gpus and total % gpus == 0)
        facts["unused_gpus"] = gpus - total if total < gpus else 0
    return facts


def _one_gpu_engine(c: Container, words: list[Token]) -> str | None:
    """The engine that runs the container on one GPU because its command sets
    no parallelism, or None: it starts the engine once, on one pod, with
    nothing that could say the sizes another way."""
    texts = [w.text for w in words]
    if any("$" in t or t.startswith(_SIZES_ELSEWHERE) for t in texts) or _nodes(words) is not None:
        return None
    line = " ".join(texts)
    started = [(name, sum(line.count(m) for m in marks)) for name, marks in _ONE_GPU_ENGINES]
    found = [(name, n) for name, n in started if n]
    if not found and not c.command:
        found = [(name, 1) for name, image in _ONE_GPU_ENGINE_IMAGES if image in c.image]
    if len(found) != 1 or found[0][1] != 1:
        return None  # no such engine, or several started (one per GPU, by a script)
    return found[0][0]


def _said(sizes: Mapping[str, int | str | None], default_of: str | None) -> str:
    """The parallelism as the message says it."""
    if default_of is not None:
        return f"{default_of}'s default: no tensor, pipeline or data parallel size is set"
    return ", ".join(f"{dim} {value}" for dim, value in sizes.items() if value is not None)


def _nodes(words: list[Token]) -> int | str | None:
    """The nodes (pods) the command's group spans: a number (--nnodes 2), or
    "spans" when it joins a group across pods without saying how many (a
    Ray cluster, --node-rank from the pod's ordinal, --headless workers);
    None for one pod."""
    found = flag(words, NODE_FLAGS)
    if found is not None:
        count = _parse(found.text)
        if isinstance(count, int):
            return count if count > 1 else None
        return "spans"  # --nnodes $(NNODES): more than one, we cannot say how many
    texts = [w.text for w in words]
    if any(a == "ray" and b == "start" for a, b in itertools.pairwise(texts)):
        return "spans"
    if any(t.split("=", 1)[0] in _SPANS_PODS_FLAGS for t in texts):
        return "spans"
    return None


def _declared(
    dim: str,
    c: Container,
    words: list[Token],
    spec: Mapping[str, Any],
    env_index: Mapping[str, int | str],
) -> tuple[int | str | None, str | None]:
    found = flag(words, FLAGS[dim])
    if found is not None:
        return _parse(found.text), f"{c.pointer}/{found.field}/{found.index}"
    for name in ENV[dim]:
        if name in c.env and c.env[name] != "":
            where = f"{c.pointer}/env/{env_index[name]}" if name in env_index else c.pointer
            return _parse(c.env[name]), where
    field = SPEC_FIELDS.get(dim)
    if field and spec.get(field) is not None:
        return _parse(str(spec[field])), None
    return None, None


def _parse(text: str) -> int | str:
    text = text.strip().strip("\"'")
    return int(text) if text.isdigit() else text.lower()


def _number(value: int | str | None) -> int | None:
    return value if isinstance(value, int) else None


def whole_gpus(c: Container) -> float | None:
    counts = [r.count for r in c.gpus if r.mode == "whole"]
    if not counts or any(n is None for n in counts):
        return None
    return float(sum(n for n in counts if n is not None))
