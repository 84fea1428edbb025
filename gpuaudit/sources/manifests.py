"""Read Kubernetes manifests from files, directories and stdin.

Every object keeps its file, the line where it starts and a map from JSON
pointer to line, so a finding can point at the exact field. Bad input never
stops the reading of other files: it becomes an InputError with file:line.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from gpuaudit.model import Document, InputError

try:  # libyaml's parser is several times faster; fall back where it is missing.
    _BaseLoader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _BaseLoader = yaml.SafeLoader


class _Loader(_BaseLoader):  # type: ignore[misc, valid-type]
    """The safe loader, made cheaper where libyaml calls back into Python for
    every node; safe loaders have no path resolvers, so the results are exact.

    - ``resolve``: each distinct plain scalar's tag is resolved once.
      Manifests repeat the same few hundred (``name``, ``image``, ``true``,
      ``1``), and resolving runs Python regexes. Other nodes get the default
      tag of their kind, which is all the base method does for them.
    - ``descend_resolver``/``ascend_resolver`` only serve path resolvers, so
      they do nothing here; builtins that do nothing (``{}.get(node, index)``,
      ``tuple()``; the composer ignores what they return) cost far less than
      Python methods: a fifth of composing time.
    """

    _plain_tags: ClassVar[dict[str, str]] = {}
    _default_tags: ClassVar[dict[type, str]] = {
        yaml.ScalarNode: _BaseLoader.DEFAULT_SCALAR_TAG,
        yaml.SequenceNode: _BaseLoader.DEFAULT_SEQUENCE_TAG,
        yaml.MappingNode: _BaseLoader.DEFAULT_MAPPING_TAG,
    }
    descend_resolver = {}.get
    ascend_resolver = tuple

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode or not implicit[0]:
            return self._default_tags[kind]
        tag = self._plain_tags.get(value)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if len(self._plain_tags) < 100_000:  # bounded: inputs can be huge
                self._plain_tags[value] = tag
        return tag


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_NODES_PER_DOCUMENT = 1_000_000  # after alias expansion: stops "billion laughs"
MAX_DEPTH = 200
_SKIP_DIRS = {".git", ".hg", ".svn", "node_modules", "__pycache__", ".terraform"}

# Helm's template actions start with '.', '$', '-' or a keyword/function;
# Argo's `{{inputs.parameters.x}}` and `{{workflow.name}}` do not.
_HELM_ACTION = re.compile(
    r"\{\{-?\s*(?:\.|\$|-|/\*|(?:if|else|end|range|with|include|template|define|"
    r"toYaml|tpl|printf|default|quote|required|lookup|fail|block)\b)"
)


class ManifestLimitError(ValueError):
    pass


@dataclass
class ReadResult:
    documents: list[Document] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)
    files: int = 0
    # Top-level mappings that are not Kubernetes objects (a bare device-plugin
    # or mig-parted config, a values file): kept for the facts that read them.
    bare: list[Document] = field(default_factory=list)


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
                read_file(file, result)
        elif p.exists():
            read_file(p, result)
        else:
            result.errors.append(InputError(path, None, "no such file or directory"))
    return result


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
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(MANIFEST_SUFFIXES):
                yield Path(dirpath, name)


def read_file(path: Path, result: ReadResult) -> None:
    name = str(path)
    result.files += 1
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):  # a FIFO would block the run forever
            result.errors.append(InputError(name, None, "not a regular file, not read"))
            return
        if info.st_size > MAX_FILE_BYTES:
            result.errors.append(_too_big(name, f"{info.st_size:,} bytes"))
            return
        with path.open("rb") as handle:  # bounded: the file may grow meanwhile
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        result.errors.append(InputError(name, None, f"cannot read: {exc.strerror or exc}"))
        return
    _read_bytes(raw, name, result)


def _too_big(name: str, size: str) -> InputError:
    return InputError(name, None, f"file is {size}; the limit is {MAX_FILE_BYTES:,} bytes")


def _read_bytes(raw: bytes, name: str, result: ReadResult) -> None:
    if len(raw) > MAX_FILE_BYTES:
        result.errors.append(_too_big(name, f"more than {MAX_FILE_BYTES:,} bytes"))
        return
    if b"\0" in raw[:8192]:
        result.errors.append(InputError(name, None, "binary file, not a manifest"))
        return
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        result.errors.append(InputError(name, line, "not valid UTF-8 text"))
        return
    _read_text(text, name, result)


def read_text(text: str, name: str, result: ReadResult) -> None:
    """Read manifests rendered by kustomize or helm from ``text``, as if from
    the file ``name``. Rendered output is YAML: a `{{` left in it is a value
    (an Argo or KServe template), not an unrendered Helm action."""
    _read_text(text, name, result, rendered=True)


def _read_text(text: str, name: str, result: ReadResult, rendered: bool = False) -> None:
    helm = None if rendered else _HELM_ACTION.search(text)
    if helm:
        line = text.count("\n", 0, helm.start()) + 1
        result.errors.append(
            InputError(
                name,
                line,
                "Helm template: not auditable until rendered (run `helm template` "
                "and audit its output, or use --helm-chart)",
                level="warning",
            )
        )
        return
    try:
        for node in yaml.compose_all(text, Loader=_Loader):
            if node is None:
                continue
            _add_document(node, name, result)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or str(exc).splitlines()[0]
        result.errors.append(InputError(name, line, f"invalid YAML: {problem}"))
    except yaml.YAMLError as exc:
        result.errors.append(InputError(name, None, f"invalid YAML: {exc}"))
    except RecursionError:
        result.errors.append(InputError(name, None, "nesting too deep to parse"))


def _add_document(node: yaml.Node, name: str, result: ReadResult) -> None:
    builder = _Builder()
    try:
        obj = builder.build(node, "", 0)
    except ManifestLimitError as exc:
        result.errors.append(InputError(name, node.start_mark.line + 1, str(exc)))
        return
    for key, line in builder.duplicates:
        result.errors.append(InputError(name, line, f"duplicate key {key!r}: the last value wins"))
    start = node.start_mark.line + 1
    _add_object(obj, name, start, builder.lines, "", result)


def _add_object(
    obj: Any, name: str, line: int, lines: dict[str, int], base: str, result: ReadResult
) -> None:
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
    result.documents.append(Document(obj=obj, file=name, line=line, lines=lines, base=base))


def load_yaml_with_lines(text: str) -> tuple[Any, dict[str, int]]:
    """One YAML document and its pointer->line map (for rule and config files,
    so their errors can name the line)."""
    node = yaml.compose(text, Loader=_Loader)
    if node is None:
        return None, {}
    builder = _Builder()
    return builder.build(node, "", 0), builder.lines


_constructor = yaml.constructor.SafeConstructor()
_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Builder:
    """Builds Python values from a composed YAML node, recording the line of
    every mapping value and sequence item, duplicate keys, and the expanded
    size (aliases can make a small file describe a huge object)."""

    def __init__(self) -> None:
        self.lines: dict[str, int] = {}
        self.duplicates: list[tuple[str, int]] = []
        self._built: dict[int, Any] = {}
        self._size: dict[int, int] = {}

    def build(self, node: yaml.Node, pointer: str, depth: int, line: int | None = None) -> Any:
        """``line``: where the field starts (its key's line for a mapping value)."""
        if depth > MAX_DEPTH:
            raise ManifestLimitError(f"nesting deeper than {MAX_DEPTH} levels")
        known = self._built.get(id(node))
        if known is not None:  # an alias: share the value, as PyYAML does
            return known
        self.lines[pointer] = line if line is not None else node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, pointer, depth)
        if isinstance(node, yaml.SequenceNode):
            return self._sequence(node, pointer, depth)
        return self._scalar(node)

    # The two loops below run once per field of every manifest, so they avoid
    # per-node calls where they can: scalar children (most fields) are
    # converted inline instead of through build(), and the expanded size is
    # summed as the children are visited.

    def _mapping(self, node: yaml.MappingNode, pointer: str, depth: int) -> dict[Any, Any]:
        value: dict[Any, Any] = {}
        self._built[id(node)] = value
        lines, sizes = self.lines, self._size
        child_depth = depth + 1
        size = 1
        for key_node, value_node in node.value:
            size += sizes.get(id(key_node), 1)
            if key_node.tag == _MERGE_TAG:
                merged = self.build(value_node, pointer, child_depth)
                size += sizes.get(id(value_node), 1)
                for part in merged if isinstance(merged, list) else [merged]:
                    if isinstance(part, dict):
                        for k, v in part.items():
                            value.setdefault(k, v)
                continue
            key = self._scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                key = str(key)
            key_line = key_node.start_mark.line + 1
            if key in value:
                self.duplicates.append((str(key), key_line))
            token = str(key)
            if "~" in token or "/" in token:
                token = token.replace("~", "~0").replace("/", "~1")
            child = f"{pointer}/{token}"
            if isinstance(value_node, yaml.ScalarNode) and child_depth <= MAX_DEPTH:
                lines[child] = key_line
                value[key] = (
                    value_node.value if value_node.tag == _STR_TAG else self._scalar(value_node)
                )
                size += 1
            else:
                value[key] = self.build(value_node, child, child_depth, key_line)
                size += sizes.get(id(value_node), 1)
        self._record_size(node, size)
        return value

    def _sequence(self, node: yaml.SequenceNode, pointer: str, depth: int) -> list[Any]:
        items: list[Any] = []
        self._built[id(node)] = items
        lines, sizes = self.lines, self._size
        child_depth = depth + 1
        size = 1
        for i, item in enumerate(node.value):
            child = f"{pointer}/{i}"
            if isinstance(item, yaml.ScalarNode) and child_depth <= MAX_DEPTH:
                lines[child] = item.start_mark.line + 1
                items.append(item.value if item.tag == _STR_TAG else self._scalar(item))
                size += 1
            else:
                items.append(self.build(item, child, child_depth))
                size += sizes.get(id(item), 1)
        self._record_size(node, size)
        return items

    def _record_size(self, node: yaml.Node, size: int) -> None:
        self._size[id(node)] = size
        if size > MAX_NODES_PER_DOCUMENT:
            raise ManifestLimitError(
                f"document expands to more than {MAX_NODES_PER_DOCUMENT:,} nodes "
                "(YAML aliases: a possible alias bomb)"
            )

    @staticmethod
    def _scalar(node: yaml.Node) -> Any:
        tag = node.tag
        if tag == "tag:yaml.org,2002:str":
            return node.value
        construct = _constructor.yaml_constructors.get(tag)
        if construct is None or not isinstance(node, yaml.ScalarNode):
            return node.value  # unknown tags (!Ref, !!python/...) stay plain text
        try:
            value = construct(_constructor, node)
        except (yaml.YAMLError, ValueError):
            return node.value
        if isinstance(value, (bytes, bytearray)):
            return node.value
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            return str(value)  # timestamps and the like: keep them JSON-shaped
        return value
