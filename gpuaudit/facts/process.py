"""What the processes in a pod say about their GPUs: parallelism, the model
they load and its size, DataLoader workers. Read from command lines and env
(facts/cmdline.py), so ``--model=$(MODEL_ID)`` is the model MODEL_ID names."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuaudit.facts.cmdline import Token, flag, tokens
from gpuaudit.facts.context import Context
from gpuaudit.facts.model_size import find_dtype, find_model, model_facts
from gpuaudit.facts.parallelism import container_parallelism
from gpuaudit.model import Container, PodTemplate, Workload
from gpuaudit.workloads import resolve

DATALOADER_FLAGS = (
    "--num_workers",
    "--num-workers",
    "--dataloader_num_workers",
    "--dataloader-num-workers",
)
DATALOADER_ENV = ("DATALOADER_NUM_WORKERS", "NUM_WORKERS")


def container_process_facts(w: Workload, t: PodTemplate, c: Container) -> dict[str, Any]:
    words = tokens(c.command, c.args, c.env)
    env_index = _env_index(w, c)
    visible = env_index.get("NVIDIA_VISIBLE_DEVICES")
    return {
        "parallelism": container_parallelism(c, words, _parallel_spec(t), env_index),
        "visible_devices_pointer": f"{c.pointer}/env/{visible}" if visible is not None else None,
    }


def pod_process_facts(
    w: Workload, t: PodTemplate, placement: Mapping[str, Any], context: Context
) -> dict[str, Any]:
    parallelism = None
    model = None
    workers: int | None = None
    for c in t.containers:
        words = tokens(c.command, c.args, c.env)
        workers = _max(workers, _dataloader_workers(words, c.env))
        if not c.gpus:
            continue
        env_index = _env_index(w, c)
        mine = container_parallelism(c, words, _parallel_spec(t), env_index)
        parallelism = parallelism or mine
        if model is None:
            model = _model(w, t, c, words, env_index, placement, context, mine)
    return {"parallelism": parallelism, "model": model, "dataloader_workers": workers}


def _model(
    w: Workload,
    t: PodTemplate,
    c: Container,
    words: list[Token],
    env_index: Mapping[str, int],
    placement: Mapping[str, Any],
    context: Context,
    parallelism: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    raw = resolve(w.document.obj, c.pointer)
    ref = find_model(
        words, c.env, c.pointer, env_index, raw if isinstance(raw, Mapping) else {}, t.labels
    )
    if ref is None:
        ref = _workload_model(w)
    if ref is None:
        return None
    whole = [r.count for r in c.gpus if r.mode == "whole"]
    gpus = float(sum(whole)) if whole and None not in whole else None  # type: ignore[arg-type]
    if parallelism and parallelism.get("total") and gpus and parallelism["total"] > gpus:
        gpus = None  # one model across several pods: this pod's share is not the model's need
    product = placement.get("gpu_product") or {}
    if product.get("memory_gib"):
        memory, source = float(product["memory_gib"]), "selector"
    elif context.site.gpu_memory_gib:
        memory, source = float(context.site.gpu_memory_gib), "site"
    else:
        memory, source = None, "assumed"
    facts = model_facts(ref, find_dtype(words, c.env, ref.name), gpus, memory, source)
    return facts if facts["params_b"] is not None else None


def _workload_model(w: Workload):
    """LLMInferenceService names its model once for all its pods."""
    from gpuaudit.facts.model_size import ModelRef

    uri = resolve(w.document.obj, "/spec/model/uri")
    if w.kind == "LLMInferenceService" and isinstance(uri, str) and uri:
        return ModelRef(uri, "spec", "/spec/model/uri")
    return None


def _dataloader_workers(words: list[Token], env: Mapping[str, str]) -> int | None:
    found = flag(words, DATALOADER_FLAGS)
    text = (
        found.text
        if found is not None
        else next((env[n] for n in DATALOADER_ENV if env.get(n)), None)
    )
    return int(text) if text is not None and text.isdigit() else None


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def _parallel_spec(t: PodTemplate) -> Mapping[str, Any]:
    """KServe keeps tensorParallelSize on the predictor's workerSpec (and the
    worker template is that workerSpec)."""
    worker = t.spec.get("workerSpec")
    return {**(worker if isinstance(worker, Mapping) else {}), **t.spec}


def _env_index(w: Workload, c: Container) -> dict[str, int]:
    env = resolve(w.document.obj, f"{c.pointer}/env")
    if not isinstance(env, list):
        return {}
    return {
        str(item["name"]): i
        for i, item in enumerate(env)
        if isinstance(item, Mapping) and item.get("name") is not None
    }
