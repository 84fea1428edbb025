"""What the processes in a pod say about their GPUs: parallelism, the model
they load and its size, DataLoader workers. Read from command lines and env
(facts/cmdline.py), so ``--model=$(MODEL_ID)`` is the model MODEL_ID names."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import msgspec

from gpuaudit.facts.activity import container_activity
from gpuaudit.facts.cmdline import Token, Words, flag, tokens
from gpuaudit.facts.context import Context
from gpuaudit.facts.device_plugin import parse_config_text
from gpuaudit.facts.model_size import (
    ModelRef,
    engine_memory_fraction,
    find_dtype,
    find_model,
    model_candidates,
    model_facts,
    model_scale,
    predictive_server,
)
from gpuaudit.facts.parallelism import container_parallelism, whole_gpus
from gpuaudit.kube import pointers
from gpuaudit.model import Container, PodTemplate, Workload
from gpuaudit.model.serving_runtimes import FRAMEWORK_KEYS

DATALOADER_FLAGS = (
    "--num_workers",
    "--num-workers",
    "--dataloader_num_workers",
    "--dataloader-num-workers",
)
DATALOADER_ENV = ("DATALOADER_NUM_WORKERS", "NUM_WORKERS")

# Engine flags that keep part of the weights in host memory (vLLM, SGLang,
# DeepSpeed-MII, TGI's quantised offload): the GPUs need not hold them all.
_OFFLOAD_FLAGS = ("--cpu-offload", "--offload", "--cpu_offload")


class CommandLine(msgspec.Struct, frozen=True):
    """What one container's command line and env say, read once for both
    the pod's facts and the container's."""

    words: Words
    env_index: Mapping[str, int | str]  # env variable -> its pointer segment under the container's env (_env_index)
    parallelism: Mapping[str, Any] | None
    activity: Mapping[str, Any]  # facts/activity.py: what the command does with the GPUs


def command_lines(w: Workload, t: PodTemplate) -> dict[str, CommandLine]:
    """The command line of each container of ``t``, by its pointer."""
    spec = _parallel_spec(w, t)
    lines = {}
    for c in (*t.init_containers, *t.containers):
        words = tokens(c.command, c.args, c.env)
        env_index = _env_index(w, c)
        lines[c.pointer] = CommandLine(
            words, env_index, container_parallelism(c, words, spec, env_index), container_activity(c)
        )
    return lines


def container_process_facts(c: Container, line: CommandLine) -> dict[str, Any]:
    visible = line.env_index.get("NVIDIA_VISIBLE_DEVICES")
    return {
        "parallelism": line.parallelism,
        "visible_devices_pointer": f"{c.pointer}/env/{visible}" if visible is not None else None,
    }


def pod_process_facts(
    w: Workload,
    t: PodTemplate,
    placement: Mapping[str, Any],
    context: Context,
    lines: Mapping[str, CommandLine],
) -> dict[str, Any]:
    """``lines``: command_lines(w, t)."""
    parallelism = None
    model = None
    named: ModelRef | None = None
    server: str | None = None
    fraction: float | None = None
    workers: int | None = None
    for c in t.containers:
        line = lines[c.pointer]
        workers = _max(workers, _dataloader_workers(line.words, c.env))
        if not c.gpus:
            continue
        parallelism = parallelism or line.parallelism
        if model is None:
            model, ref = _model(w, t, c, line, placement, context)
            named = named or ref
        server = server or predictive_server(_model_format(w, c), [tok.text for tok in line.words], c.image)
        stated = engine_memory_fraction(line.words, c.env)
        if stated is not None:
            fraction = stated[0] if fraction is None else max(fraction, stated[0])
    return {
        "parallelism": parallelism,
        "model": model,
        "model_scale": model_scale(model, named, server, fraction),
        "engine_memory_fraction": fraction,
        "dataloader_workers": workers,
    }


def _model_format(w: Workload, c: Container) -> str | None:
    """The model format a KServe predictor names (``model.modelFormat.name``,
    or the older per-framework key the container sits under)."""
    if w.kind != "InferenceService" or not c.pointer.startswith("/spec/predictor/"):
        return None
    raw = pointers.get(w.document.obj, c.pointer)
    fmt = raw.get("modelFormat") if isinstance(raw, Mapping) else None
    if isinstance(fmt, Mapping) and isinstance(fmt.get("name"), str):
        return fmt["name"]
    key = c.pointer.rsplit("/", 1)[-1]
    return key if key in FRAMEWORK_KEYS else None


def _model(
    w: Workload,
    t: PodTemplate,
    c: Container,
    line: CommandLine,
    placement: Mapping[str, Any],
    context: Context,
) -> tuple[dict[str, Any] | None, ModelRef | None]:
    """The model's size facts (None when its size is unknown), and the name
    found for it (None when none is)."""
    words, env_index, parallelism = line.words, line.env_index, line.parallelism
    raw = pointers.get(w.document.obj, c.pointer)
    ref = find_model(
        model_candidates(words, c.env, c.pointer, env_index, raw if isinstance(raw, Mapping) else {}, t.labels, c.image)
    )
    if ref is None:
        ref = _workload_model(w)
    if ref is None:
        return None, None
    gpus = whole_gpus(c)
    if parallelism and parallelism.get("total") and gpus and parallelism["total"] > gpus:
        gpus = None  # one model across several pods: this pod's share is not the model's need
    elif parallelism and (parallelism.get("data") or 1) > 1 and gpus:
        gpus = gpus / parallelism["data"]  # GPUs per copy of the model
    product = placement.get("gpu_product") or {}
    if product.get("memory_gib"):
        memory, source = float(product["memory_gib"]), "selector"
    elif context.site.gpu_memory_gib:
        memory, source = float(context.site.gpu_memory_gib), "site"
    else:
        memory, source = None, "assumed"
    facts = model_facts(ref, find_dtype(words, c.env, ref.name), gpus, memory, source)
    if any(w.text.startswith(_OFFLOAD_FLAGS) for w in words):
        facts["weights_exceed_gpus"] = None  # weights offloaded to host memory need not fit the GPUs
    return (facts if facts["params_b"] is not None else None), ref


def _workload_model(w: Workload) -> ModelRef | None:
    """LLMInferenceService names its model once for all its pods; a
    RayService in its Serve config."""
    uri = pointers.get(w.document.obj, "/spec/model/uri")
    if w.kind == "LLMInferenceService" and isinstance(uri, str) and uri:
        return ModelRef(uri, "spec", "/spec/model/uri")
    if w.kind == "RayService":
        models = _serve_config_values(w, _SERVE_MODEL_KEYS)
        names = {v for v in models if "/" in v}
        if len(names) == 1:
            return ModelRef(names.pop(), "spec", "/spec/serveConfigV2")
    return None


def _dataloader_workers(words: list[Token], env: Mapping[str, str]) -> int | None:
    found = flag(words, DATALOADER_FLAGS)
    text = found.text if found is not None else next((env[n] for n in DATALOADER_ENV if env.get(n)), None)
    return int(text) if text is not None and text.isdigit() else None


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _parallel_spec(w: Workload, t: PodTemplate) -> Mapping[str, Any]:
    """KServe keeps tensorParallelSize on the predictor's workerSpec (and the
    worker template is that workerSpec); a RayService in its Serve config
    (engine_kwargs, or env_vars such as TENSOR_PARALLELISM)."""
    worker = t.spec.get("workerSpec")
    spec = {**(worker if isinstance(worker, Mapping) else {}), **t.spec}
    if w.kind == "RayService":
        found = {}
        for field, keys in _SERVE_PARALLEL_KEYS.items():
            values = set(_serve_config_values(w, keys))
            if len(values) == 1:  # several models with different sizes: no single answer
                found[field] = values.pop()
        if "dataParallelSize" not in found:
            # An autoscaled deployment always runs min_replicas copies, each on
            # GPUs of its own: what the pod's GPUs hold at the least.
            least = set(_serve_config_values(w, ("min_replicas",)))
            if len(least) == 1:
                found["dataParallelSize"] = least.pop()
        # Replicas alone say nothing of how many GPUs each uses (a custom app
        # may spread one model over all it sees): only with a tensor size,
        # which Ray Serve LLM apps default to 1.
        serve_llm = any(v.startswith("ray.serve.llm") for v in _serve_config_values(w, ("import_path",)))
        if serve_llm:
            found.setdefault("tensorParallelSize", "1")
        if "tensorParallelSize" in found:
            spec.update(found)
    return spec


_SERVE_PARALLEL_KEYS = {
    "tensorParallelSize": ("tensor_parallel_size", "TENSOR_PARALLELISM", "TENSOR_PARALLEL_SIZE"),
    "pipelineParallelSize": ("pipeline_parallel_size", "PIPELINE_PARALLELISM"),
    # Fixed Serve replicas of the model are data parallelism: each holds its
    # own GPUs (an autoscaled one's min_replicas, below, when none is fixed).
    "dataParallelSize": ("num_replicas",),
}
_SERVE_MODEL_KEYS = ("model_source", "model_id", "MODEL_ID")


def _serve_config_values(w: Workload, keys: tuple[str, ...]) -> list[str]:
    """Scalar values of ``keys`` anywhere in a RayService's serveConfigV2 (a YAML string)."""
    text = pointers.get(w.document.obj, "/spec/serveConfigV2")
    return list(_values_in(text, keys)) if isinstance(text, str) else []


@lru_cache(maxsize=1024)
def _values_in(text: str, keys: tuple[str, ...]) -> tuple[str, ...]:
    config = parse_config_text(text)
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key in keys and isinstance(value, (str, int)) and not isinstance(value, bool):
                    found.append(str(value))
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(config)
    return tuple(found)


def _env_index(w: Workload, c: Container) -> dict[str, int | str]:
    """Each env variable's segment of the pointer under the container's
    `env`: its index in a pod's list, its escaped name in a chart's values
    map (app-template's `env: {KEY: value}`)."""
    env = pointers.get(w.document.obj, f"{c.pointer}/env")
    if isinstance(env, Mapping):
        return {str(name): pointers.escape(str(name)) for name in env}
    if not isinstance(env, list):
        return {}
    return {
        str(item["name"]): i for i, item in enumerate(env) if isinstance(item, Mapping) and item.get("name") is not None
    }
