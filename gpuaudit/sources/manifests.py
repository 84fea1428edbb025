"""Read Kubernetes manifests from files, directories and stdin.

Every object keeps its file, the line where it starts and a map from JSON
pointer to line, so a finding can point at the exact field. Bad input never
stops the reading of other files: it becomes an InputError with file:line.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit.files import FileReadError, decode_text, read_bytes, too_big
from gpuaudit.kube.yaml_lines import PYTHON_TAG_PREFIX, LineBuilder, LineLoader, YamlLimitError
from gpuaudit.model import Document, InputError

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 16 * 1024 * 1024
# Folders no manifest of the repository's own lives in: version control,
# dependencies, caches and editors' state. Other hidden folders are walked
# (.kubernetes/, .deploy/ hold manifests; .github/ CI fixtures).
SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".terraform",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".cache",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".idea",
        ".vscode",
        ".direnv",
        ".ipynb_checkpoints",  # Jupyter's autosaved copies of files beside them (round 18: a finding said twice)
    }
)

# Helm's template actions start with '.', '$', '-' or a keyword/function;
# Argo's `{{inputs.parameters.x}}` and `{{workflow.name}}` do not.
_HELM_ACTION = re.compile(
    r"\{\{-?\s*(?:\.|\$|-|/\*|(?:if|else|end|range|with|include|template|define|"
    r"toYaml|tpl|printf|default|quote|required|lookup|fail|block)\b)"
)
# An action that starts a value unquoted (`replicas: {{ replicas }}`, a
# Jinja or Go template of any tool, whatever its action names): YAML reads
# it as a mapping, so no tool means it as YAML; the file is a template.
# (A pattern text, compiled on first use: only for a file that holds `{{`.)
_VALUE_ACTION = r"(?m)(?::|^[ \t]*-)[ \t]+\{\{"
# Jinja's statements on a line of their own (`{% if %}`, `{% for %}`) make a
# template of another tool too. (A pattern text, compiled on first use: only
# for a file that holds `{%`.)
_JINJA_STATEMENT = r"(?m)^[ \t]*\{%-?\s*(?:if|for|set|macro|include|import|block|extends|raw)\b"
# What only a Helm chart's template names: its built-in objects and the
# functions Helm adds; and an action that starts a value unquoted (YAML
# reads `name: {{ .Name }}` as a mapping). `{{ }}` that is none of these, in
# a file that parses as YAML, is text for another tool inside a value (a
# Prometheus alert's "{{ $labels.pod }}", NFD's `labelsTemplate`), read as
# the value it is. (A pattern text, compiled on first use: most files hold
# no action.)
_HELM_ONLY = (
    r"\{\{[^}]*(?:\.(?:Values|Release|Chart|Capabilities|Files|Template)\b"
    r"|\b(?:include|toYaml|tpl|required|lookup|fail)\b)"
    r"|(?m:(?::|^[ \t]*-)[ \t]+\{\{)"
)

# KServe fills `{{.Name}}`, `{{.Namespace}}`, `{{.Labels.x}}`, `{{.Annotations.x}}`
# in a serving runtime's or an InferenceService's args from the
# InferenceService at run time: text, not Helm (Helm's top-level objects are
# .Values, .Release, .Chart, ...). Only in files that hold one of those kinds.
# At a line's start, or nested (an OpenShift Template's objects, a List's items).
# (Pattern texts, compiled on first use by re's cache: most files hold neither kind.)
_KSERVE_RUNTIME = r"(?m)^[ \t]*(?:-[ \t]+)?kind:\s*[\"']?(?:(?:Cluster)?ServingRuntime|InferenceService)\b"
_KSERVE_PLACEHOLDER = r"\{\{-?\s*(?:index\s+)?\.(?:Name|Namespace|Labels|Annotations)\b[^{}]*\}\}"


_APPWRAPPER_GROUP = "workload.codeflare.dev/"
# An OpenShift Template's parameters, as `oc process` puts them in: `${NAME}`
# inside a string, `${{NAME}}` as a whole value of its own YAML type.
# (A pattern text, compiled on first use by re's cache: most runs meet no Template.)
_TEMPLATE_PARAMETER = r"\$\{(\{)?([A-Za-z0-9_]+)\}(?(1)\})"
HELM_TEMPLATE = "template with {{ }} actions (Helm or another tool)"
# Kinds whose fields hold templates another tool expands (a chart's values,
# an ApplicationSet's generators' parameters, an Argo Workflow's own
# `{{tasks.x.outputs...}}` and the kubectl --template in its scripts), not
# Helm actions of the file.
_TEMPLATE_CARRIERS = frozenset(
    {
        "HelmRelease",
        "Application",
        "ApplicationSet",
        "HelmChart",
        "HelmChartConfig",
        "Workflow",
        "WorkflowTemplate",
        "ClusterWorkflowTemplate",
        "CronWorkflow",
    }
)
# A YAML comment on the line before a match: '#' at the line's start or after
# a space, with no quote after it (a '#' inside a quoted value is no comment).
# (Pattern texts, compiled on first use by re's cache: most runs meet none.)
_COMMENT_BEFORE = r"(?m)(?:^|(?<=[ \t]))#[^'\"]*$"


def _helm_action(text: str) -> re.Match[str] | None:
    """The first Helm template action (or any action that starts a value
    unquoted) in ``text`` outside YAML comments (a plain manifest may show in
    a comment how a chart would write a value), KServe's run-time
    placeholders in serving runtime files aside; or the first Jinja
    statement, when it comes before."""
    placeholders: list[tuple[int, int]] = []
    if ("ServingRuntime" in text or "InferenceService" in text) and re.search(_KSERVE_RUNTIME, text):  # a quick look
        placeholders = [m.span() for m in re.finditer(_KSERVE_PLACEHOLDER, text)]
    found = None
    actions = _HELM_ACTION.finditer(text)
    if "{{" in text:
        actions = iter(sorted((*actions, *re.finditer(_VALUE_ACTION, text)), key=lambda m: m.start()))
    for match in actions:
        line_start = text.rfind("\n", 0, match.start()) + 1
        if re.search(_COMMENT_BEFORE, text[line_start : match.start()]):
            continue
        if not any(start <= match.start() < end for start, end in placeholders):
            found = match
            break
    jinja = re.search(_JINJA_STATEMENT, text) if "{%" in text else None
    if jinja is not None and (found is None or jinja.start() < found.start()):
        return jinja
    return found


# A Kubernetes object names its apiVersion and kind as keys: in YAML at the
# start of a line (or of a list item), in JSON (or flow YAML) after '{' or
# ','. A file that names neither is likely no manifest at all. Bytes: the
# look needs no decoding, so a file that does not decode is looked at too.
_KUBERNETES_KEY = re.compile(rb"""(?m)(?:^[ \t]*(?:-[ \t]+)?|[{,][ \t\r\n]*)["']?(?:apiVersion|kind)["']?[ \t]*:""")


def names_kubernetes_keys(raw: bytes) -> bool:
    """Whether ``raw`` names an ``apiVersion`` or ``kind`` key anywhere: a
    cheap textual look, no parsing."""
    return _KUBERNETES_KEY.search(raw) is not None


class ReadResult(msgspec.Struct):
    documents: list[Document] = msgspec.field(default_factory=list)
    errors: list[InputError] = msgspec.field(default_factory=list)
    files: int = 0
    # Top-level mappings that are not Kubernetes objects (a bare device-plugin
    # or mig-parted config, a values file): kept for the facts that read them.
    bare: list[Document] = msgspec.field(default_factory=list)


def read_paths(paths: Iterable[str], stdin_text: str | None = None) -> ReadResult:
    """Read every manifest under ``paths`` ('-' is stdin)."""
    result = ReadResult()
    for path in paths:
        if path == "-":
            result.files += 1
            stdin = getattr(sys.stdin, "buffer", None)
            if stdin_text is not None or stdin is None:
                text = stdin_text if stdin_text is not None else sys.stdin.read()
                _read_text(text, "<stdin>", result)
            else:  # bytes, so stdin gets the same limit and checks as a file
                _read_bytes(stdin.read(MAX_FILE_BYTES + 1), "<stdin>", result)
            continue
        p = Path(path)
        if p.is_dir():
            for file in iter_manifest_files(p):
                read_file(file, result, found=True)
        elif p.exists():
            read_file(p, result)
        else:
            result.errors.append(InputError(path, None, "no such file or directory"))
    return result


def read_each(paths: Iterable[str]) -> list[tuple[str, ReadResult]]:
    """What read_paths reads under ``paths`` (files and folders, no stdin),
    file by file: each file's name and what it holds, in read_paths' order
    (a path that does not exist is left out; a file named twice is read once)."""
    read: dict[str, ReadResult] = {}
    out: list[tuple[str, ReadResult]] = []
    for path in paths:
        p = Path(path)
        for file in iter_manifest_files(p) if p.is_dir() else [p] if p.exists() else []:
            name = str(file)
            if name not in read:
                read[name] = ReadResult()
                read_file(file, read[name], found=p.is_dir())
            out.append((name, read[name]))
    return out


def iter_manifest_files(root: Path) -> Iterator[Path]:
    """Manifest files under ``root`` in a stable order; follows directory
    symlinks once (a symlink loop is visited a single time)."""
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(MANIFEST_SUFFIXES):
                yield Path(dirpath, name)


def read_file(path: Path, result: ReadResult, *, found: bool = False) -> None:
    """Read the manifests of the file ``path`` into ``result``. ``found``:
    the file was found by walking a folder, not named by the user. Such a
    file that does not read and names no apiVersion or kind is likely no
    manifest at all (a tsconfig.json with comments, a log of JSON lines, an
    mkdocs.yml with Python tags): its problems are warnings, so they do not
    make the audit of the rest exit 2. A file the user named, or one that
    looks like a manifest, keeps its errors."""
    name = str(path)
    result.files += 1
    data = found and path.suffix == ".json"
    try:  # regular files only (a FIFO would block the run forever), bounded
        raw = read_bytes(path, limit=MAX_FILE_BYTES)
    except FileReadError as exc:
        # A JSON file that large found on the walk is data (a tokenizer's
        # vocabulary, a model's index), never a manifest.
        result.errors.append(InputError(name, exc.line, exc.problem, level="warning" if data else "error"))
        return
    if data and _json_data(raw):
        return
    if not found:
        _read_bytes(raw, name, result)
        return
    part = ReadResult()
    _read_bytes(raw, name, part)
    if not names_kubernetes_keys(raw):
        # Another tool's template (a Taskfile, an Ansible play, a goreleaser
        # config) found on the walk: no object however it renders.
        part.errors = [e for e in part.errors if not e.message.startswith(HELM_TEMPLATE)]
    if any(e.level == "error" for e in part.errors) and not names_kubernetes_keys(raw):
        read = bool(part.documents or part.bare)  # else the problem stopped the read: nothing came of the file
        part.errors = [_likely_no_manifest(e, read) for e in part.errors]
    result.documents += part.documents
    result.errors += part.errors
    result.bare += part.bare


def _json_data(raw: bytes) -> bool:
    """Whether a JSON file is data rather than a manifest: it parses as
    JSON, and its top level is no object naming both apiVersion and kind (a
    manifest in JSON names them there; a tokenizer's vocabulary holds
    "kind" as a word, a package.json names neither). JSON that does not
    parse (tsconfig.json's comments) is read as before."""
    try:
        top = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return False
    return not (isinstance(top, dict) and "apiVersion" in top and "kind" in top)


def _likely_no_manifest(error: InputError, read: bool) -> InputError:
    if error.level != "error":
        return error
    problem = error.message if read else f"not read: {error.message}"
    return msgspec.structs.replace(
        error,
        message=f"{problem}; it names no apiVersion or kind, so it is likely not a Kubernetes manifest",
        level="warning",
    )


def _read_bytes(raw: bytes, name: str, result: ReadResult) -> None:
    try:
        if len(raw) > MAX_FILE_BYTES:  # stdin: read with the same bound as a file
            raise too_big(name, f"more than {MAX_FILE_BYTES:,} bytes", MAX_FILE_BYTES)
        if b"\0" in raw[:8192]:
            raise FileReadError(name, "binary file, not a manifest")
        text = decode_text(raw, name)
    except FileReadError as exc:
        result.errors.append(InputError(name, exc.line, exc.problem))
        return
    _read_text(text, name, result)


def read_text(text: str, name: str, result: ReadResult) -> None:
    """Read manifests rendered by kustomize or helm from ``text``, as if from
    the file ``name``. Rendered output is YAML: a `{{` left in it is a value
    (an Argo or KServe template), not an unrendered Helm action."""
    _read_text(text, name, result, rendered=True)


def _read_text(text: str, name: str, result: ReadResult, rendered: bool = False) -> None:
    helm = None if rendered else _helm_action(text)
    if helm:
        # A values or config file (no apiVersion or kind), or objects that
        # carry a chart's values (a Flux HelmRelease, an Argo CD
        # Application), whose strings hold actions for the chart's `tpl` or
        # the controller's own templating (`"{{ .Release.Name }}-x"`), or
        # objects whose `{{ }}` names nothing of Helm's (_HELM_ONLY: a
        # Prometheus alert's text): not a template. Read as the YAML it is,
        # when it parses as YAML.
        part = ReadResult()
        _parse(text, name, part)
        # No documents at all is no carrier: `all` of nothing is true.
        carriers = bool(part.documents) and all(d.kind in _TEMPLATE_CARRIERS for d in part.documents)
        other_tools = bool(part.documents) and text.startswith("{{", helm.start()) and not re.search(_HELM_ONLY, text)
        # YAML whose top level holds no mapping (an Ansible playbook's list
        # of plays, its `{{ }}` quoted as Ansible needs): no object, nothing
        # to render, whatever its tasks' `definition:`s name.
        no_mapping = not part.documents and not part.bare
        if not part.errors and (carriers or other_tools or no_mapping or not names_kubernetes_keys(text.encode())):
            result.documents += part.documents
            result.bare += part.bare
            return
    if helm:
        line = text.count("\n", 0, helm.start()) + 1
        result.errors.append(
            InputError(
                name,
                line,
                f"{HELM_TEMPLATE}: not auditable until rendered (a chart's template: use --helm-chart; "
                "another tool's: render it and check the output)",
                level="warning",
                group=("files like it", HELM_TEMPLATE),
            )
        )
        return
    _parse(text, name, result)


def _parse(text: str, name: str, result: ReadResult) -> None:
    for _ in range(_MAX_ANCHOR_RENAMES):
        part = ReadResult()
        try:
            for node in yaml.compose_all(text, Loader=LineLoader):
                if node is not None:
                    _add_document(node, name, part)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            if (exc.context or "").startswith("found duplicate anchor") and exc.problem_mark is not None:
                # YAML 1.2 lets a later anchor replace an earlier one of the
                # same name (Go's YAML, so kustomize and helm, read it so);
                # PyYAML refuses: name the later one apart and read again.
                text = _renamed_anchor(text, exc.problem_mark.index)
                continue
            line = mark.line + 1 if mark is not None else None
            problem = exc.problem or str(exc).splitlines()[0]
            part.errors.append(InputError(name, line, f"invalid YAML: {problem}"))
        except yaml.YAMLError as exc:
            part.errors.append(InputError(name, None, f"invalid YAML: {exc}"))
        except RecursionError:
            part.errors.append(InputError(name, None, "nesting too deep to parse"))
        break
    else:
        part.errors.append(InputError(name, None, f"invalid YAML: more than {_MAX_ANCHOR_RENAMES} anchors redefined"))
    result.documents += part.documents
    result.errors += part.errors
    result.bare += part.bare


_MAX_ANCHOR_RENAMES = 64
_ANCHOR_NAME = r"&([^\s,\[\]{}]+)"


def _renamed_anchor(text: str, at: int) -> str:
    """``text`` with the anchor defined at ``at`` (``&port``) and the aliases
    to it up to the anchor's next definition (``*port``) renamed apart."""
    found = re.compile(_ANCHOR_NAME).match(text, at)
    if found is None:
        return text
    anchor = found.group(1)
    fresh = f"{anchor}__{at}"
    end = text.find(f"&{anchor}", found.end())
    end = len(text) if end < 0 else end
    alias = re.compile(rf"\*{re.escape(anchor)}(?![^\s,\[\]{{}}])")
    middle = alias.sub(f"*{fresh}", text[found.end() : end])
    return f"{text[:at]}&{fresh}{middle}{text[end:]}"


def _add_document(node: yaml.Node, name: str, result: ReadResult) -> None:
    builder = LineBuilder()
    try:
        obj = builder.build(node, "", 0)
    except YamlLimitError as exc:
        result.errors.append(InputError(name, node.start_mark.line + 1, str(exc)))
        return
    for key, line, same in builder.duplicates:
        if same:  # a label written twice alike: harmless wherever it is read
            result.errors.append(InputError(name, line, f"duplicate key {key!r} with the same value", "warning"))
            continue
        # An error: which value counts depends on the reader (this audit and
        # most YAML readers keep the last; kubectl's strict validation may
        # refuse the object).
        result.errors.append(
            InputError(
                name, line, f"duplicate key {key!r} with another value: read as the last one, which readers may not"
            )
        )
    # A Python tag is never constructed; it is no Kubernetes YAML either: say so.
    whole = node.tag.startswith(PYTHON_TAG_PREFIX)
    for tag, line in builder.python_tags:
        shown = "!!" + tag.removeprefix("tag:yaml.org,2002:")
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        what = (
            "this document is not audited"
            if whole and line == node.start_mark.line + 1
            else "not constructed; the value is read as plain data"
        )
        result.errors.append(InputError(name, line, f"YAML tag {shown} asks for a Python object: {what}"))
    if whole:
        return
    start = node.start_mark.line + 1
    _add_object(obj, name, start, builder.lines, "", result)


def _add_object(obj: Any, name: str, line: int, lines: dict[str, int], base: str, result: ReadResult) -> None:
    if not isinstance(obj, dict):
        return
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    if not isinstance(kind, str) or not isinstance(api_version, str):
        if not base:  # not a Kubernetes object (values files, configs): no workload
            result.bare.append(Document(obj=obj, file=name, line=line, lines=lines))
        return
    if kind.endswith("List") and isinstance(obj.get("items"), list):
        for i, item in enumerate(obj["items"]):
            ptr = f"{base}/items/{i}"
            _add_object(item, name, lines.get(ptr, line), lines, ptr, result)
        return
    if kind == "AppWrapper" and api_version.startswith(_APPWRAPPER_GROUP):
        # CodeFlare's AppWrapper holds whole objects (a PyTorchJob, a
        # RayCluster) in spec.components[].template and creates them as
        # written: each is judged as the object it is, as a List's items.
        components = (obj.get("spec") or {}).get("components") if isinstance(obj.get("spec"), dict) else None
        for i, component in enumerate(components if isinstance(components, list) else []):
            if isinstance(component, dict):
                ptr = f"{base}/spec/components/{i}/template"
                _add_object(component.get("template"), name, lines.get(ptr, line), lines, ptr, result)
        return
    if kind == "Template" and (api_version.startswith("template.openshift.io/") or api_version == "v1"):
        # An OpenShift Template (how OpenShift AI ships serving runtimes):
        # its objects, with the parameters' defaults put in as `oc process`
        # would; a parameter without one stays as written (a GPU count left
        # `${GPUS}` is said to be a placeholder).
        defaults = {
            str(p["name"]): str(p["value"])
            for p in obj.get("parameters") or []
            if isinstance(p, dict) and p.get("name") and p.get("value") is not None
        }
        objects = obj.get("objects")
        for i, item in enumerate(objects if isinstance(objects, list) else []):
            ptr = f"{base}/objects/{i}"
            item = _with_parameters(item, defaults) if defaults else item
            _add_object(item, name, lines.get(ptr, line), lines, ptr, result)
        return
    result.documents.append(Document(obj=obj, file=name, line=line, lines=lines, base=base))


def _with_parameters(value: Any, defaults: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _with_parameters(v, defaults) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_parameters(v, defaults) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = re.fullmatch(_TEMPLATE_PARAMETER, value)
    if whole and whole.group(1) and whole.group(2) in defaults:
        text = defaults[whole.group(2)]
        try:  # `${{NAME}}`: the default read as YAML, a scalar only (a number, a boolean)
            scalar = yaml.safe_load(text) if len(text) <= 64 else text
        except yaml.YAMLError:
            scalar = text
        return scalar if isinstance(scalar, (int, float, bool, str)) else text

    def put_in(m: re.Match[str]) -> str:  # inside a string only `${NAME}`, as text
        return m.group(0) if m.group(1) else defaults.get(m.group(2), m.group(0))

    return re.sub(_TEMPLATE_PARAMETER, put_in, value)
