"""How much GPU memory a served or trained model needs, by a small heuristic.

The model is named on the command line (``--model``, ``--model-id``,
``vllm serve NAME``), in env (``MODEL_ID``...), in KServe's ``storageUri``
or in a pod label. Its parameter count comes from the name or from the
table in data/models.yaml, bytes per parameter from the dtype or
quantisation stated; see that file for the numbers and why they are what
they are. The result is an estimate for spotting *far* oversized requests
(gemma-2b on 8 x H100), not a sizing tool.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache, lru_cache
from typing import Any

import msgspec

from gpuaudit.bundled import data_yaml
from gpuaudit.facts.cmdline import Token, flag

MODEL_FLAGS = (
    "--model",
    "--model-id",
    "--model_id",
    "--model-path",
    "--model_path",
    "--model-name",
    "--model_name",
    "--model-repo",
)
MODEL_ENV = (
    "MODEL_ID",
    "MODEL_NAME",
    "MODEL",
    "HF_MODEL_ID",
    "MODEL_PATH",
    "NIM_MODEL_NAME",
    "LLM_MODEL",
    "MODEL_REPO",
)
MODEL_LABELS = ("ai.gke.io/model",)
DTYPE_FLAGS = ("--dtype", "--quantization", "--quantize", "--torch-dtype", "--torch_dtype")
DTYPE_ENV = ("QUANTIZE", "QUANTIZATION", "DTYPE", "TORCH_DTYPE")

# "70b", "1.5B", "500m", preceded by a separator and not followed by a letter.
_SIZE = re.compile(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)([bm])(?![a-z0-9])")
_EXPERTS = re.compile(r"(?<![a-z0-9.])(\d+)x(\d+(?:\.\d+)?)b(?![a-z0-9])")
# "17b-16e": the size names the active experts only, not the weights held.
_ACTIVE_ONLY = re.compile(r"\d+(?:\.\d+)?b-\d+e(?![a-z0-9])")
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*://")


class Heuristic(msgspec.Struct, frozen=True):
    headroom: float
    unknown_gpu_memory_gib: float
    bytes_per_param: Mapping[str, float]
    dtype_words: tuple[tuple[str, str], ...]
    known: tuple[tuple[_Pattern, float], ...]
    native_dtypes: tuple[tuple[_Pattern, str], ...]
    predictive_formats: frozenset[str]
    predictive_programs: frozenset[str]
    predictive_images: tuple[str, ...]
    llm_markers: tuple[str, ...]
    model_images: tuple[str, ...]
    notebook_images: tuple[str, ...]
    fraction_flags: tuple[str, ...]
    fraction_env: tuple[str, ...]
    fraction_fits_share: float


_REGEX_CHARS = set("\\.^$*+?{}[]|()")


class _Pattern:
    """A name pattern of models.yaml, compiled only for a name that holds
    its leading literal text (``deepseek-`` of ``^deepseek-(r1|v3)``): a run
    meets a few model names, and compiling the table's thirty patterns took
    longer than the rest of reading them."""

    __slots__ = ("hint", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.hint = _leading_literal(text)

    def search(self, name: str) -> bool:
        return self.hint in name and re.search(self.text, name) is not None


def _leading_literal(pattern: str) -> str:
    """The text every match of ``pattern`` holds at its start: what comes
    before the first special character, less a character a quantifier makes
    optional; "" for a pattern with an alternative at its top level."""
    depth = 0
    for char in pattern:
        depth += (char == "(") - (char == ")")
        if char == "|" and depth == 0:
            return ""
    body = pattern.removeprefix("^")
    literal = ""
    for char in body:
        if char in _REGEX_CHARS:
            return literal[:-1] if char in "?*{" else literal
        literal += char
    return literal


@cache
def heuristic() -> Heuristic:
    data = data_yaml("models.yaml")
    return Heuristic(
        headroom=float(data["headroom"]),
        unknown_gpu_memory_gib=float(data["unknown_gpu_memory_gib"]),
        bytes_per_param={k: float(v) for k, v in data["bytes_per_param"].items()},
        dtype_words=tuple((e["word"], e["dtype"]) for e in data["dtype_words"]),
        known=tuple((_Pattern(e["pattern"]), float(e["params_b"])) for e in data["known"]),
        native_dtypes=tuple((_Pattern(e["pattern"]), str(e["dtype"])) for e in data["known"] if e.get("dtype")),
        predictive_formats=frozenset(data["predictive_servers"]["model_formats"]),
        predictive_programs=frozenset(data["predictive_servers"]["programs"]),
        predictive_images=tuple(data["predictive_servers"]["images"]),
        llm_markers=tuple(data["predictive_servers"]["markers_llm"]),
        model_images=tuple(data["model_images"]),
        notebook_images=tuple(data["predictive_servers"]["notebook_images"]),
        fraction_flags=tuple(data["engine_memory_fraction"]["flags"]),
        fraction_env=tuple(data["engine_memory_fraction"]["env"]),
        fraction_fits_share=float(data["engine_memory_fraction"]["fits_share_at_most"]),
    )


class ModelRef(msgspec.Struct, frozen=True):
    name: str
    source: str  # args | env | storageUri | label
    pointer: str | None


def find_model(candidates: Iterable[ModelRef]) -> ModelRef | None:
    """The model a container loads: the first name that carries a size, else
    the first name at all. Several places may name it, and some only name
    the served endpoint (KServe's ``--model_name=llama3`` beside
    ``storageUri: hf://meta-llama/meta-llama-3-8b-instruct``)."""
    candidates = list(candidates)
    sized = next((c for c in candidates if parameters_b(c.name) is not None), None)
    return sized or (candidates[0] if candidates else None)


def model_candidates(
    words: Sequence[Token],
    env: Mapping[str, str],
    container_pointer: str,
    env_index: Mapping[str, int | str],
    raw_container: Mapping[str, Any],
    labels: Mapping[str, str],
    image: str = "",
) -> Iterator[ModelRef]:
    """Every name a container gives its model, in the order they are trusted."""
    for spelling in MODEL_FLAGS:
        found = flag(words, (spelling,))
        if found is not None and found.text:
            yield ModelRef(found.text, "args", f"{container_pointer}/{found.field}/{found.index}")
    # `vllm serve NAME`, or `serve NAME` as the args of a vLLM image whose
    # entrypoint is `vllm` (vllm/vllm-openai, nothing else on the command line)
    vllm_image = "vllm" in image.rsplit("/", 1)[-1]
    for i, word in enumerate(words[:-1]):
        if word.text == "serve" and (words[i - 1].text.endswith("vllm") if i > 0 else vllm_image):
            nxt = words[i + 1]
            if not nxt.text.startswith("-"):
                yield ModelRef(nxt.text, "args", f"{container_pointer}/{nxt.field}/{nxt.index}")
    for name in MODEL_ENV:
        if env.get(name):
            where = f"{container_pointer}/env/{env_index[name]}" if name in env_index else None
            yield ModelRef(env[name], "env", where)
    uri = raw_container.get("storageUri")
    if isinstance(uri, str) and uri:
        yield ModelRef(uri, "storageUri", f"{container_pointer}/storageUri")
    source = raw_container.get("modelSource")  # Gateway API inference extension
    if isinstance(source, Mapping) and isinstance(source.get("modelId"), str) and source["modelId"]:
        yield ModelRef(source["modelId"], "spec", f"{container_pointer}/modelSource/modelId")
    for label in MODEL_LABELS:
        if labels.get(label):
            yield ModelRef(labels[label], "label", None)
    named = image_model(image)
    if named:
        yield ModelRef(named, "image", f"{container_pointer}/image")


def image_model(image: str) -> str | None:
    """The model an image is built for, where its registry names images by
    model (NVIDIA NIM: nvcr.io/nim/meta/llama3-8b-instruct:1.0.0 serves
    meta/llama3-8b-instruct); data/models.yaml model_images."""
    lowered = image.lower()
    for prefix in heuristic().model_images:
        if lowered.startswith(prefix):
            rest = lowered[len(prefix) :].split("@", 1)[0].split(":", 1)[0]
            return rest or None
    return None


def find_dtype(words: Sequence[Token], env: Mapping[str, str], model: str) -> str:
    """The stated dtype or quantisation (a quantised model name counts too);
    else the dtype a known model ships in (DeepSeek-V3 in FP8), else bf16."""
    stated = [t.text for t in _all_flags(words, DTYPE_FLAGS)]
    stated += [env[n] for n in DTYPE_ENV if env.get(n)]
    stated.append(model)
    for text in stated:
        dtype = _dtype_of(text)
        if dtype:
            return dtype
    base = model.strip().lower().rstrip("/").rsplit("/", 1)[-1]
    native = (dtype for pattern, dtype in heuristic().native_dtypes if pattern.search(base))
    return next(native, "bfloat16")


def _all_flags(words: Sequence[Token], names: Sequence[str]) -> list[Token]:
    out = []
    for name in names:
        found = flag(words, (name,))
        if found is not None:
            out.append(found)
    return out


def _dtype_of(text: str) -> str | None:
    lowered = text.lower()
    for word, dtype in heuristic().dtype_words:
        if word in lowered:
            return dtype
    return None


@lru_cache(maxsize=1024)  # a repository names the same few models again and again
def parameters_b(model: str) -> float | None:
    """Billions of parameters, from the table or the name; None when unknown."""
    cleaned = _SCHEME.sub("", model.strip().lower()).rstrip("/")
    segments = [s for s in cleaned.split("/") if s]
    if not segments:
        return None
    base = segments[-1]
    for pattern, params in heuristic().known:
        if pattern.search(base):
            return params
    for segment in reversed(segments):  # a local path may hold the name higher up
        size = _size_in(segment)
        if size is not None:
            return size
    return None


def _size_in(segment: str) -> float | None:
    experts = _EXPERTS.search(segment)
    if experts:
        return float(experts.group(1)) * float(experts.group(2))
    if _ACTIVE_ONLY.search(segment):
        return None
    sizes = [(float(m.group(1)), m.group(2)) for m in _SIZE.finditer(segment)]
    billions = [n for n, unit in sizes if unit == "b"]
    if billions:
        return billions[0]
    millions = [n for n, unit in sizes if unit == "m"]
    return millions[0] / 1000 if millions else None


def model_facts(
    ref: ModelRef,
    dtype: str,
    gpus: float | None,
    gpu_memory_gib: float | None,
    gpu_memory_source: str,
) -> dict[str, Any]:
    h = heuristic()
    params = parameters_b(ref.name)
    bpp = h.bytes_per_param[dtype]
    per_gpu = gpu_memory_gib or h.unknown_gpu_memory_gib
    source = gpu_memory_source if gpu_memory_gib else "assumed"
    weights = params * 1e9 * bpp / 2**30 if params is not None else None
    need = weights * h.headroom if weights is not None else None
    needed = _tensor_parallel_size(need / per_gpu) if need is not None else None
    excess = int(gpus - needed) if gpus is not None and needed is not None else None
    return {
        "name": ref.name,
        "source": ref.source,
        "params_b": params,
        "dtype": dtype,
        "bytes_per_param": bpp,
        "weights_gib": round(weights, 1) if weights is not None else None,
        "need_gib": round(need, 1) if need is not None else None,
        "gpu_memory_gib": per_gpu,
        "gpu_memory_source": source,
        "gpus": gpus,
        "gpus_needed": needed,
        "excess_gpus": excess,
        # Two such models fit one GPU: sharing it (time-slicing, MPS, MIG) can help.
        "fits_half_gpu": need <= per_gpu / 2 if need is not None else None,
        # The weights alone, without any headroom, overflow the GPUs held: the
        # server cannot load. Only where the GPU's memory is known, not assumed.
        "weights_exceed_gpus": (
            weights > gpus * per_gpu if weights is not None and gpus and source != "assumed" else None
        ),
        "pointer": ref.pointer,
    }


def _tensor_parallel_size(gpus: float) -> int:
    """GPUs a model split by tensor parallelism can use: a power of two (the
    size must divide the attention heads), at least one."""
    return 1 << max(0, math.ceil(math.log2(max(gpus, 1.0))))


# Where a model's name is stated on purpose. A storageUri names a folder
# (gs://bucket/models/flowers) as often as a model, so a storageUri without a
# size does not make a predictive server's model "unknown".
_NAMING_SOURCES = ("args", "env", "label", "spec", "image")


def predictive_server(model_format: str | None, words: Sequence[str], image: str) -> str | None:
    """What serves a predictive (non-generative) model here, or None: a KServe
    predictive model format, or a predictive server's program or image with
    nothing that says it serves an LLM (data/models.yaml predictive_servers).
    An interactive notebook counts too: its use comes in bursts, whatever it
    loads, which is what sharing a GPU is for."""
    h = heuristic()
    if any(marker in image.lower() for marker in h.notebook_images):
        return f"an interactive notebook ({image})"
    if model_format and model_format.lower() in h.predictive_formats:
        return f"KServe model format {model_format.lower()}"
    text = " ".join([image, *words]).lower()
    if any(marker in text for marker in h.llm_markers):
        return None
    programs = {w.rsplit("/", 1)[-1] for w in words}
    program = next((p for p in sorted(h.predictive_programs) if p in programs), None)
    if program:
        return program
    image = image.lower()
    return next((i for i in h.predictive_images if i in image), None)


def engine_memory_fraction(words: Sequence[Token], env: Mapping[str, str]) -> tuple[float, str] | None:
    """The share of GPU memory a serving engine is told to take
    (``--gpu-memory-utilization 0.2``, ``--mem-frac 0.15``), and the flag."""
    h = heuristic()
    found = flag(words, h.fraction_flags)
    stated = [(found.text, "flag")] if found is not None else []
    stated += [(env[n], n) for n in h.fraction_env if env.get(n)]
    for text, where in stated:
        try:
            value = float(text)
        except ValueError:
            continue
        if 0 < value <= 1:
            return value, where
    return None


def model_scale(
    model: Mapping[str, Any] | None,
    named: ModelRef | None,
    server: str | None,
    memory_fraction: float | None = None,
) -> dict[str, Any]:
    """Whether the model a pod serves is known to leave room on its GPU:
    ``small`` (fits half a GPU, a predictive model, or an engine told to take
    a small share of the memory), ``large`` (needs more), ``unknown`` (no
    model named, or a name that carries no size). Only a small model makes
    sharing the GPU an advice worth giving."""
    if memory_fraction is not None and memory_fraction <= heuristic().fraction_fits_share:
        return {
            "scale": "small",
            "basis": f"the engine is told to take {memory_fraction:g} of the GPU's memory",
        }
    if model is not None:
        small = bool(model["fits_half_gpu"])
        return {
            "scale": "small" if small else "large",
            "basis": f"{model['name']}: about {model['need_gib']} GiB of {model['gpu_memory_gib']} GiB",
        }
    if named is not None and "$" in named.name:  # an unexpanded $(VAR) names nothing
        named = None
    if named is not None and named.source in _NAMING_SOURCES:
        return {"scale": "unknown", "basis": f"model unknown: {named.name} carries no size gpuaudit knows"}
    if server is not None:
        return {"scale": "small", "basis": f"a predictive model served by {server}"}
    if named is not None:
        return {"scale": "unknown", "basis": f"model unknown: {named.name} carries no size gpuaudit knows"}
    return {"scale": "unknown", "basis": "model unknown: no model is named where gpuaudit reads it"}
