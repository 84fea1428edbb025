"""What a container holds of its GPU whatever it computes: LLM servers that
reserve most of the GPU memory for their KV cache at start, and stress tests
that keep the whole GPU busy on purpose. Neither may share a GPU whose memory
is not isolated (time-slicing, MPS, GKE time-sharing): the server's
reservation leaves a second tenant out of memory, the stress test starves it.
Pure: reads a container's image, command, args and env."""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from gpuaudit.model import Container


class Reservation(msgspec.Struct, frozen=True):
    engine: str  # vLLM, SGLang, TGI, NIM
    fraction: float  # of the GPU's memory it takes at start
    stated: str  # where the fraction comes from: the flag as written, or the engine's default

    def describe(self) -> str:
        return f"{self.engine} reserves {self.fraction:.0%} of the GPU memory at start ({self.stated})"


# engine: (how to recognise it in image or command words, the flag that sets
# the fraction, its default). Defaults: vLLM --gpu-memory-utilization 0.9;
# SGLang --mem-fraction-static about 0.88 (it varies with the GPU, 0.8 is its
# floor); TGI --cuda-memory-fraction 1.0; NIM runs vLLM or TensorRT-LLM at 0.9
# (NIM_GPU_MEMORY_UTILIZATION / its profiles).
_ENGINES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], float], ...] = (
    ("NIM", ("nvcr.io/nim/", "/nim/", "nvidia-nim-"), ("NIM_GPU_MEMORY_UTILIZATION",), 0.9),
    ("vLLM", ("vllm",), ("--gpu-memory-utilization", "--gpu_memory_utilization"), 0.9),
    ("SGLang", ("sglang",), ("--mem-fraction-static", "--mem_fraction_static"), 0.8),
    ("TGI", ("text-generation-inference", "text-generation-launcher"), ("--cuda-memory-fraction",), 1.0),
)
# Patterns as text: `re` compiles (and caches) them on first use, never on
# `gpuaudit check`'s start-up, which reads only memory_reservation.
_STRESS = r"(?<![a-z0-9])(gpu[-_]?burn|gpu_burn|dcgmproftester\d*|dcgm[-_]diag|stress[-_]?ng|gpu[-_]?stress)(?![a-z])"


def _words(container: Container) -> list[str]:
    return [w for w in (*container.command, *container.args) if isinstance(w, str)]


def _flag_value(words: Sequence[str], names: Sequence[str]) -> str | None:
    tokens = [t for w in words for t in w.split()]  # a shell line carries several flags in one word
    for i, token in enumerate(tokens):
        for name in names:
            if token.startswith(name + "="):
                return token.split("=", 1)[1]
            if token == name and i + 1 < len(tokens):
                return tokens[i + 1]
    return None


# Kinds whose pods always run one engine, whatever their container says:
# KServe's LLMInferenceService runs vLLM (llm-d's image).
ENGINE_OF_KIND = {"LLMInferenceService": "vllm"}


def memory_reservation(container: Container, runtime: str = "") -> Reservation | None:
    """The server's reservation, when the container runs one that reserves
    GPU memory up front. ``runtime``: a serving runtime's name (KServe), which
    names NIM where the image may not, or the engine its kind always runs
    (ENGINE_OF_KIND)."""
    words = _words(container)
    haystack = " ".join([container.image, runtime, *words]).lower()
    for engine, marks, flags, default in _ENGINES:
        if not any(m in haystack for m in marks):
            continue
        stated = _flag_value(words, flags)
        source = f"{flags[0]} {stated}" if stated else None
        for name in flags:
            if stated is None and name in container.env:
                stated, source = container.env[name], f"{name}={container.env[name]}"
        try:
            fraction = float(stated) if stated is not None else default
        except ValueError:
            fraction, source = default, None
        return Reservation(engine, fraction, source or f"{engine}'s default {default:g}")
    return None


def stress_test(container: Container) -> str | None:
    """The stress tool a container runs (gpu-burn, dcgmproftester...), if any."""
    found = re.search(_STRESS, " ".join([container.image, *_words(container)]).lower())
    return found.group(1) if found else None


# A NIM's ServingRuntime or image names its model and version:
# nvidia-nim-llama-3.1-8b-instruct-1.1.0, nvcr.io/nim/meta/llama-3.1-8b-instruct:1.1.0
_NIM_RUNTIME = r"nvidia-nim-(?P<model>[a-z0-9][a-z0-9.-]*?)-\d+\.\d+\.\d+$"
_NIM_IMAGE = r"nvcr\.io/nim/(?:[a-z0-9_.-]+/)?(?P<model>[a-z0-9][a-z0-9._-]*)(?::|@|$)"


def nim_model(name: str) -> str | None:
    """The model a NIM serves, from its runtime's name or its image."""
    text = name.strip().lower()
    found = re.search(_NIM_RUNTIME, text) or re.search(_NIM_IMAGE, text)
    return found.group("model") if found else None
