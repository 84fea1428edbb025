"""What a container's command says it does with the GPUs it holds.

Three answers matter to the rules: it runs nothing that uses a GPU (``sleep``,
``nvidia-smi``, the ``pause`` image: a smoke test or a placeholder), it does
so without end (``sleep infinity``: the GPUs stay allocated until someone
deletes the pod), or it serves until stopped (a model server in a bare Pod or
a Job holds its GPUs as long as a Deployment would). Anything else is
``None``: the container may well compute, and the application rules judge it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from gpuaudit.bundled import data_yaml
from gpuaudit.facts.cmdline import expand
from gpuaudit.model import Container, PodTemplate

# Programs that never touch a GPU's compute (nvidia-smi only reads it).
_IDLE_PROGRAMS = frozenset(
    {
        "sleep",
        "true",
        ":",
        "echo",
        "printf",
        "nvidia-smi",
        "tail",
        "cat",
        "env",
        "printenv",
        "ls",
        "date",
        "hostname",
        "exit",
        "wait",
        "pause",
        "trap",
        "export",
        "unset",
        # What a smoke script prints about the machine it landed on.
        "uname",
        "whoami",
        "id",
        "pwd",
        "nproc",
        "uptime",
        "free",
        "df",
        "lscpu",
    }
)
# CUDA samples that finish in milliseconds: run once, a device check, not
# work; run in an endless loop (a time-slicing demo), GPU work without pause.
_CUDA_SAMPLES = frozenset({"vectoradd", "vectoradd_hip", "devicequery", "bandwidthtest"})
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
# Words that only shape a shell script (`while true; do sleep 30; done`).
_SHELL_KEYWORDS = frozenset({"do", "done", "then", "fi", "else", "exec", "set", "{", "}", "(", ")"})
_SEGMENT_SPLIT = re.compile(r"&&|\|\||[;|\n&()]")  # a subshell's ( ) too
# A pause image runs nothing (registry.k8s.io/pause, gcr.io/google_containers/pause-amd64).
_PAUSE_IMAGE = re.compile(r"(?:^|/)pause(?:-[a-z0-9]+)?(?::|@|$)")
# Images whose entrypoint uses no GPU: a web server that runs until stopped,
# or a CUDA sample that checks the device and exits (vectoradd, nbody --benchmark).
_NO_GPU_SERVER_IMAGES = re.compile(r"(?:^|/)(?:nginx|nginx-slim|nginx-unprivileged|httpd)(?::|@|$)")
_SMOKE_TEST_IMAGES = re.compile(r"(?:^|/)cuda-sample:|(?:^|/)cuda-vector-add(?::|@|$)")
# Images named after the program they run with the args given (perf-tests' sleep).
_PROGRAM_IMAGES = re.compile(r"(?:^|/)(sleep|busybox|alpine)(?::|@|$)")
# Model servers, by what their command line or image says. A server runs until stopped.
_SERVER_COMMANDS = (
    "vllm serve",
    "vllm.entrypoints",
    "text-generation-launcher",
    "tritonserver",
    "sglang.launch_server",
    "sglang serve",
    "tensorflow_model_server",
    "torchserve",
    "trtllm-serve",
    "lmdeploy serve",
    "ollama serve",
    "llama-server",
    "python -m http.server",
)
_SERVER_IMAGES = ("vllm-openai", "text-generation-inference", "ollama/ollama", "lmsysorg/sglang", "llama.cpp:server")


def container_activity(c: Container) -> dict[str, Any]:
    """``command_kind``: idle | idle_forever | server | gpu_test | download |
    None, and the command shown in messages (``sleep infinity``). gpu_test: a
    GPU test program that loads no model (a CUDA sample in an endless loop, a
    stress test such as gpu-burn): real GPU work, not idle, and no model
    server. download: it only fetches weights or data (hf download, aws s3
    cp): no GPU use at all while it holds one."""
    image = c.image.lower()
    if not c.command:
        if _PAUSE_IMAGE.search(image):
            return {"command_kind": "idle_forever", "command_text": "the pause image"}
        if _NO_GPU_SERVER_IMAGES.search(image):
            return {"command_kind": "idle_forever", "command_text": f"{c.image} (a web server that uses no GPU)"}
        if _SMOKE_TEST_IMAGES.search(image):
            return {"command_kind": "idle", "command_text": f"{c.image} (a CUDA sample that exits)"}
        if any(marker in image for marker in _SERVER_IMAGES) and not c.args:
            return {"command_kind": "server", "command_text": None}
    if saturates_gpus(c):
        return {"command_kind": "gpu_test", "command_text": None}
    script = _script(c)
    program = _PROGRAM_IMAGES.search(image)
    if not c.command and program and program.group(1) == "sleep":
        script = " ".join(["sleep", script]).strip()
    if not script:
        return {"command_kind": None, "command_text": None}
    lowered = " ".join(script.lower().split())
    if any(marker in lowered for marker in _SERVER_COMMANDS):
        return {"command_kind": "server", "command_text": None}
    segments = [s.split() for s in _SEGMENT_SPLIT.split(script)]
    segments = [_strip_keywords(s) for s in segments]
    segments = [s for s in segments if s]
    if segments and _downloads_only(segments, lowered):
        return {"command_kind": "download", "command_text": _shown(" ".join(script.split()))}
    if not segments or not all(_idle(s) for s in segments):
        return {"command_kind": None, "command_text": None}
    loops = _loops_forever(lowered)
    if loops and any(posixpath.basename(s[0]).lower() in _CUDA_SAMPLES for s in segments):
        return {"command_kind": "gpu_test", "command_text": _shown(" ".join(script.split()))}
    forever = loops or any(_waits_forever(s) for s in segments)
    shown = _shown(" ".join(script.split()))
    return {"command_kind": "idle_forever" if forever else "idle", "command_text": shown}


@cache
def _saturating() -> frozenset[str]:
    return frozenset(str(p).lower() for p in data_yaml("gpu_programs.yaml")["saturating"])


def saturates_gpus(c: Container) -> bool:
    """Whether the container runs a stress or burn-in test (gpu-burn,
    dcgmproftester: data/gpu_programs.yaml), a program that exists to load
    whole GPUs: a predicate a pod's purpose can later be built on."""
    tools = _saturating()
    if _repository_name(c.image) in tools:
        return True
    script = _script(c).lower()
    words = {posixpath.basename(w) for w in re.split(r"[\s;|&()'\"]+", script) if w}
    return not tools.isdisjoint(words)


@cache
def _cuda_images() -> tuple[frozenset[str], tuple[str, ...]]:
    data = data_yaml("gpu_programs.yaml")["cuda_images"]
    return frozenset(str(w).lower() for w in data["words"]), tuple(str(r).lower() for r in data["registries"])


def cuda_image(image: str) -> bool:
    """Whether the image reference says it is built to run on an NVIDIA GPU
    (data/gpu_programs.yaml cuda_images)."""
    words, registries = _cuda_images()
    reference = image.lower().split("@", 1)[0]
    if reference.startswith(tuple(f"{r}/" for r in registries)):
        return True
    return not words.isdisjoint(re.split(r"[/:._-]+", reference))


@cache
def _exporters() -> frozenset[str]:
    return frozenset(str(p).lower() for p in data_yaml("gpu_programs.yaml")["exporters"])


def gpu_exporter(image: str) -> bool:
    """Whether the image is a GPU metrics exporter (data/gpu_programs.yaml
    exporters: dcgm-exporter, nvidia_gpu_exporter), which reads every GPU of
    its node and needs none allocated."""
    return _repository_name(image) in _exporters()


@cache
def _media_servers() -> frozenset[str]:
    return frozenset(str(p).lower() for p in data_yaml("gpu_programs.yaml")["media_servers"])


def video_transcoder(image: str) -> bool:
    """Whether the image is a media server or transcoder (data/gpu_programs.yaml
    media_servers: Jellyfin, Plex, Tdarr), which gives its GPU video work."""
    return _repository_name(image) in _media_servers()


def _repository_name(image: str) -> str:
    """The last path segment of an image's repository, lower-cased:
    `dcgm-exporter` of nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5-3.4.1-ubuntu22.04."""
    repository = image.lower().split("@", 1)[0]
    return repository.rsplit("/", 1)[-1].split(":", 1)[0]


@cache
def _kv_transfer() -> tuple[str, ...]:
    return tuple(str(p).lower() for p in data_yaml("gpu_programs.yaml")["kv_transfer"])


def moves_kv_cache(c: Container) -> bool:
    """Whether the container serves one role of a server split into prefill
    and decode (data/gpu_programs.yaml kv_transfer): its GPUs are owned by
    design, the KV cache moving between the roles' GPUs."""
    script = _script(c).lower()
    return any(flag in script for flag in _kv_transfer())


@cache
def _download_table() -> tuple[Mapping[str, str | None], tuple[str, ...], frozenset[str]]:
    data = data_yaml("gpu_programs.yaml")["download"]
    return (
        {str(k): (str(v) if v is not None else None) for k, v in data["programs"].items()},
        tuple(data["python_calls"]),
        frozenset(data["housekeeping"]),
    )


def _downloads_only(segments: Sequence[Sequence[str]], script: str) -> bool:
    """Every command fetches weights or data (hf download, aws s3 cp, a
    python -c calling snapshot_download) or tidies up around it, and at
    least one fetches: data/gpu_programs.yaml download."""
    programs, python_calls, housekeeping = _download_table()
    fetched = False
    for words in segments:
        program = posixpath.basename(words[0]).lower()
        if program in programs:
            needed = programs[program]
            if needed is not None and needed not in (w.lower() for w in words[1:]):
                return False
            fetched = True
        elif program.startswith("python") and "-c" in words:
            if not any(call in script for call in python_calls):
                return False
            fetched = True
            break  # the code after -c is python, not shell commands
        elif program not in housekeeping:
            return False
    return fetched


def pod_activity(t: PodTemplate, containers: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What the GPU-holding containers of a pod run, judged together:
    idle only when every one of them is; a server when any one is.
    ``containers``: container_activity by container pointer."""
    holders = [c for c in t.containers if c.gpus]
    saturating = {
        "saturates_gpus": any(saturates_gpus(c) for c in holders),
        "kv_transfer": any(moves_kv_cache(c) for c in holders),
    }
    kinds = [containers[c.pointer] for c in holders]
    if not kinds:
        return {"gpu_command_kind": None, "gpu_command_text": None, **saturating}
    if any(k["command_kind"] == "server" for k in kinds):
        return {"gpu_command_kind": "server", "gpu_command_text": None, **saturating}
    if all(k["command_kind"] == "download" for k in kinds):
        return {"gpu_command_kind": "download", "gpu_command_text": kinds[0]["command_text"], **saturating}
    if all(k["command_kind"] == "gpu_test" for k in kinds):
        return {"gpu_command_kind": "gpu_test", "gpu_command_text": kinds[0]["command_text"], **saturating}
    if all(k["command_kind"] in ("idle", "idle_forever") for k in kinds):
        forever = any(k["command_kind"] == "idle_forever" for k in kinds)
        text = next(k["command_text"] for k in kinds if k["command_text"])
        return {"gpu_command_kind": "idle_forever" if forever else "idle", "gpu_command_text": text, **saturating}
    return {"gpu_command_kind": None, "gpu_command_text": None, **saturating}


def _script(c: Container) -> str:
    """The command line as one text; the script itself for ``sh -c '...'``."""
    words = [expand(w, c.env) for w in (*c.command, *c.args)]
    if len(words) >= 3 and posixpath.basename(words[0]) in _SHELLS and words[1] in ("-c", "-ec", "-xc", "-exc", "-lc"):
        rest = words[2:]
        if rest and rest[0] == "--":  # `sh -c -- "script"`
            rest = rest[1:]
        return " ".join(rest).strip()
    return " ".join(words).strip()


def command_script(c: Container) -> str:
    """A container's command line as one text (a shell script's own text for
    ``sh -c '...'``), with ``$(VAR)`` expanded from its env."""
    return _script(c)


def _strip_keywords(words: Sequence[str]) -> list[str]:
    out = list(words)
    # A quote or `$` left over where a `$(...)` was cut out of a string
    # (`echo "Node: $(uname -n)"`) is no program.
    while out and (out[0] in _SHELL_KEYWORDS or out[0] in ("while", "until") or not out[0].strip("\"'$`")):
        out = out[1:]
    return out


def _idle(words: Sequence[str]) -> bool:
    program = posixpath.basename(words[0]).lower()
    if program == "tail":
        return "/dev/null" in words
    return program in _IDLE_PROGRAMS or program in _CUDA_SAMPLES or program in ("true", "false")


def _waits_forever(words: Sequence[str]) -> bool:
    program = posixpath.basename(words[0])
    if program == "sleep":
        return any(w in ("infinity", "inf") for w in words[1:]) or any(_seconds(w) >= 86_400 for w in words[1:])
    if program == "tail":
        return "-f" in words and "/dev/null" in words
    return program == "pause"


def _loops_forever(script: str) -> bool:
    return bool(re.search(r"\bwhile\s+(?:true|:|\[\s*1\s*\])", script))


def _seconds(word: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", word)
    if not match:
        return 0.0
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def _shown(script: str) -> str:
    return script if len(script) <= 60 else script[:57] + "..."
