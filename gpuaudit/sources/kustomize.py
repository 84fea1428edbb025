"""Kustomize roots: rendered by the real tool, then read like any manifest,
with findings pointed back at the files that set each value.

`kubectl kustomize` (preferred) or `kustomize build`. The root is built
through a throw-away wrapper kustomization that asks for
`buildMetadata: [originAnnotations, transformerAnnotations]`: each rendered
object names the file it came from, whose lines it takes, and the
kustomizations whose patches changed it, whose patches then say which
fields they set (sources/patch_origins.py). Objects with no source file
(generators) point at the kustomization.

kustomize's load restrictor stays on: a kustomization that reads a file
outside its own folder (a generator's `files:`, a patch, a resource) is
refused, and the refusal is an input error naming that file. Lifting it
(`--load-restrictor LoadRestrictionsNone`) lets a pull request copy any file
of the machine it runs on into an object, and from there into logs and
reports, so only the user asks for it (``load_anywhere``:
`--kustomize-load-restrictor none`), never a file in the repository.

Helm charts are rendered by sources/helm.py.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit import files
from gpuaudit.files import FileReadError
from gpuaudit.model import Document, InputError
from gpuaudit.sources.manifests import ReadResult, read_file, read_text
from gpuaudit.sources.patch_origins import patch_origins
from gpuaudit.sources.render_cache import cached, render_key
from gpuaudit.sources.tools import TIMEOUT, error_message, run_tool
from gpuaudit.sources.units import display, kustomization_in

ORIGIN = "config.kubernetes.io/origin"
TRANSFORMATIONS = "alpha.config.kubernetes.io/transformations"
_LOAD_ANYWHERE = ("--load-restrictor", "LoadRestrictionsNone")
_MAX_KUSTOMIZATION_BYTES = 1024 * 1024  # a kustomization read to place a generated object
# kustomize's refusal: "security; file '/x/secret' is not in or below '/x/app'".
_REFUSED = re.compile(r"file '([^']*)' is not in or below '([^']*)'")


def kustomize_command() -> list[str] | None:
    """`kubectl kustomize` or `kustomize build`, whichever is on PATH (kubectl first)."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        return [kubectl, "kustomize"]
    kustomize = shutil.which("kustomize")
    if kustomize:
        return [kustomize, "build"]
    return None


def render_kustomization(
    directory: Path,
    command: Sequence[str],
    shown: str,
    *,
    load_anywhere: bool = False,
    reads: Sequence[Path] = (),
    enable_helm: bool = False,
) -> ReadResult:
    """Build ``directory``; ``shown`` is how the user named it (paths in
    findings keep the same style, relative or absolute). ``load_anywhere``:
    the user allows files outside the kustomization's folder. ``reads``: the
    files the build reads (sources/units.py), which key its render in the
    cache (sources/render_cache.py); none: no cache. ``enable_helm``: its
    helmCharts inflate charts the repository holds (sources/units.py found
    them there, so helm pulls nothing)."""
    if enable_helm:
        command = [*command, "--enable-helm"]
    rendered = ReadResult()
    kustomization = kustomization_in(directory) or directory / "kustomization.yaml"
    label = _display(kustomization, shown)
    with tempfile.TemporaryDirectory(prefix="gpuaudit-kustomize-") as tmp:
        wrapper = Path(tmp)
        (wrapper / "kustomization.yaml").write_text(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
            f"resources:\n- {os.path.relpath(directory.resolve(), wrapper)}\n"
            "buildMetadata: [originAnnotations, transformerAnnotations]\n"
        )
        # The output names files relative to the wrapper: its folder's depth is in the key.
        flags = ["kustomize", str(directory.resolve()), os.path.dirname(tmp), str(load_anywhere)]
        key = render_key(command, flags, directory, reads) if reads else None
        text, problem = _build(command, wrapper, load_anywhere, key)
        wrapper_used = text is not None
        if text is None and not isinstance(problem, OutsideFileError):
            # the wrapper itself may be refused: build the directory plainly
            text, problem = _build(command, directory, load_anywhere)
        if text is None:
            if isinstance(problem, OutsideFileError):  # its paths in the style the user wrote
                shown_file, shown_root = (_display(Path(p), shown) for p in (problem.file, problem.root))
                message = str(OutsideFileError(shown_file, shown_root))
            else:
                message = f"not rendered: kustomize build failed: {problem}"
            rendered.errors.append(InputError(label, None, message))
            return rendered
        raw = ReadResult()
        read_text(text, label, raw)
    rendered.errors.extend(raw.errors)
    sources: dict[Path, ReadResult] = {}
    patches: dict[Path, list] = {}
    for doc in raw.documents:
        origin = _origin(doc) if wrapper_used else None
        source = (wrapper / origin).resolve() if origin else None
        if source is not None and source.is_file():
            mapped, name = _map_to_source(doc, source, _display(source, shown), sources)
            transformed_by = [(wrapper / k).resolve() for k in _transformations(doc)] if wrapper_used else []
            if transformed_by:
                traced = patch_origins(doc.obj, name, transformed_by, lambda p: _display(p, shown), patches)
                mapped = msgspec.structs.replace(mapped, patched=traced)
            rendered.documents.append(mapped)
        else:
            generated = _generated_at(doc, wrapper) if wrapper_used else None
            if generated is not None:  # at the generator's key of the kustomization that made it
                rendered.documents.append(_without_origin(doc, _display(generated[0], shown), {}, generated[1]))
            else:
                rendered.documents.append(_without_origin(doc, label, lines={}, line=1))
    rendered.files += 1
    return rendered


class KustomizeError(RuntimeError):
    """kustomize refused to build, or could not run; the message says why,
    cut to a length a reader takes in (``tools.MESSAGE_CHARS``). ``detail``
    keeps all kustomize said: the file its load restrictor refused can sit
    at the end of a long chain of "accumulating resources" prefixes."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.detail = detail or message


class OutsideFileError(KustomizeError):
    """The kustomization reads a file outside its folder, and the user has
    not allowed that (kustomize's load restrictor refused it)."""

    def __init__(self, file: str, root: str) -> None:
        super().__init__(
            f"it reads {file}, outside its folder {root}; kustomize refuses files outside "
            "a kustomization's folder unless you allow them (--kustomize-load-restrictor none)"
        )
        self.file = file
        self.root = root


def is_package(path: Path) -> bool:
    return path.is_dir() and kustomization_in(path) is not None


def build(directory: Path, *, load_restrictor_none: bool = False, command: Sequence[str] | None = None) -> str:
    """The YAML kustomize builds from ``directory``."""
    base = command or kustomize_command()
    if base is None:
        raise KustomizeError("needs kubectl or kustomize on PATH")
    args = [*base, str(directory), *(_LOAD_ANYWHERE if load_restrictor_none else ())]
    try:
        proc = run_tool(args)
    except TimeoutError:
        raise KustomizeError(f"kustomize build of {directory} took over {TIMEOUT}s") from None
    except OSError as exc:
        raise KustomizeError(f"cannot run {args[0]}: {exc}") from None
    if proc.returncode != 0:
        said = " ".join(proc.stderr.split())
        raise KustomizeError(error_message(proc.stderr) or f"exit status {proc.returncode}", said)
    return proc.stdout


def build_package(
    directory: Path, command: Sequence[str] | None = None, *, load_anywhere: bool = False
) -> tuple[str, bool]:
    """Build a user's kustomize directory as kustomize's default restrictions
    allow. When it reads a file outside its folder: OutsideFileError, unless
    the user allows that (``load_anywhere``), then it is built without them.
    Returns the YAML and whether the restriction was lifted."""
    try:
        return build(directory, command=command), False
    except KustomizeError as exc:
        refused = _REFUSED.search(exc.detail)
        if refused is None and "is not in or below" not in exc.detail:
            raise
        if not load_anywhere:
            file, root = refused.groups() if refused else ("a file", str(directory))
            raise OutsideFileError(file, root) from None
    return build(directory, load_restrictor_none=True, command=command), True


def _build(
    command: Sequence[str], directory: Path, load_anywhere: bool, key: str | None = None
) -> tuple[str | None, KustomizeError | None]:
    try:
        return cached(key, lambda: build_package(directory, command, load_anywhere=load_anywhere)[0]), None
    except KustomizeError as exc:
        return None, exc


def _origin_annotation(doc: Document) -> dict[str, Any] | None:
    """kustomize's origin annotation of a rendered object, read."""
    meta = doc.obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    text = annotations.get(ORIGIN) if isinstance(annotations, dict) else None
    if not isinstance(text, str):
        return None
    try:
        origin = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return origin if isinstance(origin, dict) else None


def _origin(doc: Document) -> str | None:
    origin = _origin_annotation(doc)
    if origin is None or origin.get("repo") or not origin.get("path"):
        return None  # remote resources have no local file to point at
    return str(origin["path"])


# The key of a kustomization that holds each builtin generator's entries.
_GENERATOR_KEYS = {
    "HelmChartInflationGenerator": ("helmCharts", "helmChartInflationGenerator"),
    "ConfigMapGenerator": ("configMapGenerator",),
    "SecretGenerator": ("secretGenerator",),
}


def _generated_at(doc: Document, wrapper: Path) -> tuple[Path, int] | None:
    """Where a generated object was configured (its origin's configuredIn:
    a chart kustomize inflated, a generated ConfigMap): the kustomization
    file and the line of its generator's key, or None."""
    origin = _origin_annotation(doc)
    if origin is None or not isinstance(origin.get("configuredIn"), str):
        return None
    file = (wrapper / origin["configuredIn"]).resolve()
    if not file.is_file():
        return None
    by = origin.get("configuredBy")
    keys = _GENERATOR_KEYS.get(by.get("kind") if isinstance(by, dict) else None, ())
    try:
        lines = files.read_text(file, limit=_MAX_KUSTOMIZATION_BYTES, what="kustomization").splitlines()
    except FileReadError:
        return file, 1
    line = next((i for i, text in enumerate(lines, 1) if text.split(":", 1)[0] in keys), 1)
    return file, line


def _transformations(doc: Document) -> list[str]:
    """The kustomization files whose patches changed ``doc``, in the order
    they ran (kustomize's transformerAnnotations), each once."""
    meta = doc.obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    text = annotations.get(TRANSFORMATIONS) if isinstance(annotations, dict) else None
    if not isinstance(text, str):
        return []
    try:
        entries = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    out: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("configuredIn"), str):
            continue
        by = entry.get("configuredBy") if isinstance(entry.get("configuredBy"), dict) else {}
        if str(by.get("kind", "")).startswith("Patch") and entry["configuredIn"] not in out:
            out.append(entry["configuredIn"])
    return out


def _map_to_source(doc: Document, source: Path, shown: str, cache: dict[Path, ReadResult]) -> tuple[Document, str]:
    """The rendered object, with the line map of the same object in its
    source file, and the name it has there (before a prefix or suffix)."""
    if source not in cache:
        cache[source] = ReadResult()
        read_file(source, cache[source])
    candidates = [d for d in cache[source].documents if d.kind == doc.kind]
    match = next((d for d in candidates if d.name == doc.name), None)
    if match is None:  # a name prefix or suffix was added: the original is inside it
        named = [d for d in candidates if d.name and d.name in doc.name]
        match = named[0] if len(named) == 1 else candidates[0] if len(candidates) == 1 else None
    if match is None:
        return _without_origin(doc, shown, lines={}, line=1), doc.name
    return _without_origin(doc, shown, lines=match.lines, line=match.line, base=match.base), match.name


def _without_origin(doc: Document, file: str, lines: dict[str, int] | object, line: int, base: str = "") -> Document:
    obj = dict(doc.obj)
    meta = dict(obj.get("metadata") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in (ORIGIN, TRANSFORMATIONS)}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    obj["metadata"] = meta
    return Document(obj=obj, file=file, line=line, lines=lines, base=base, rendered=True)  # type: ignore[arg-type]


def _display(path: Path, shown: str) -> str:
    """``path`` (resolved: kustomize names files through the wrapper) in the
    style the user named the root."""
    return display(path.resolve(), shown)
