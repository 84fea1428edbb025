"""Which kustomize patch set which field of a rendered object.

kustomize's ``originAnnotations`` name the file an object came from (a
base); its ``transformerAnnotations`` name, in the order they ran, the
kustomizations whose patches changed it, but not which patch or field. This
module finds those: it reads each such kustomization's patches, keeps those
aimed at the object (a strategic-merge patch by its kind and name, a patch
with a ``target:`` by the target's kind, name and labels), and walks each
patch beside the rendered object. A list of named items (containers, volumes,
env) is merged by name, as kustomize merges it, so a patch's second entry
may be the object's first. A later patch overrides an earlier one.

The result is ``Document.patched``: pointer -> (file, line, sets a value).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuaudit.files import FileReadError, read_text
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines

_MAX_PATCH_BYTES = 1024 * 1024
# Keys kustomize merges list items by (strategic merge), in the order tried.
_MERGE_KEYS = ("name", "mountPath", "containerPort", "devicePath", "key", "ip", "topologyKey")

Origins = dict[str, tuple[str, int, bool]]


class _Patch:
    """One patch of a kustomization: its content as read, where each of its
    pointers is, and what it aims at."""

    def __init__(self, content: Any, lines: Mapping[str, int], file: str, offset: int, target: Mapping[str, Any]):
        self.content, self.lines, self.file, self.offset, self.target = content, lines, file, offset, target

    def line(self, pointer: str) -> int:
        while pointer and pointer not in self.lines:
            pointer = pointer.rpartition("/")[0]
        return self.offset + self.lines.get(pointer, 1)


def patch_origins(
    obj: Mapping[str, Any],
    original_name: str,
    kustomizations: Sequence[Path],
    shown: Callable[[Path], str],
    cache: dict[Path, list[_Patch]],
) -> Origins:
    """pointer -> (file, line, sets a value) for the fields of ``obj`` (a
    rendered object whose source named it ``original_name``) that the
    patches of ``kustomizations`` (in the order they ran) set."""
    out: Origins = {}
    for file in kustomizations:
        if file not in cache:
            cache[file] = _patches_of(file, shown)
        for patch in cache[file]:
            if _aims_at(patch, obj, original_name):
                _trace(patch, obj, out)
    return out


def _patches_of(kustomization: Path, shown: Callable[[Path], str]) -> list[_Patch]:
    try:
        text = read_text(kustomization, limit=_MAX_PATCH_BYTES, what="kustomization")
        data, lines = load_yaml_with_lines(text)
    except (FileReadError, YamlLimitError, yaml.YAMLError, RecursionError):
        return []
    rows = text.splitlines()
    if not isinstance(data, dict):
        return []
    folder = kustomization.parent
    out: list[_Patch] = []
    entries: list[tuple[str, Any]] = []
    for key in ("patchesStrategicMerge", "patches", "patchesJson6902"):
        value = data.get(key)
        if isinstance(value, list):
            entries += [(f"/{key}/{i}", entry) for i, entry in enumerate(value)]
    for pointer, entry in entries:
        target = entry.get("target") if isinstance(entry, dict) else None
        target = target if isinstance(target, dict) else {}
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            out += _read_patch(folder / entry["path"], shown, target)
        elif isinstance(entry, dict) and isinstance(entry.get("patch"), str):
            at = lines.get(pointer + "/patch", 1)
            out += _parse(entry["patch"], shown(kustomization), _block_offset(rows, at), target)
        elif isinstance(entry, str) and "\n" not in entry.strip():
            out += _read_patch(folder / entry.strip(), shown, target)
        elif isinstance(entry, str):  # an inline strategic-merge patch
            out += _parse(entry, shown(kustomization), _block_offset(rows, lines.get(pointer, 1)), target)
    return out


def _read_patch(path: Path, shown: Callable[[Path], str], target: Mapping[str, Any]) -> list[_Patch]:
    try:
        text = read_text(path, limit=_MAX_PATCH_BYTES, what="patch")
    except FileReadError:
        return []
    return _parse(text, shown(path), 0, target)


def _parse(text: str, file: str, offset: int, target: Mapping[str, Any]) -> list[_Patch]:
    """A patch text may hold several strategic-merge documents, or one JSON 6902 list."""
    out = []
    try:
        for document in _documents(text):
            content, lines, first = document
            out.append(_Patch(content, lines, file, offset + first, target))
    except (YamlLimitError, yaml.YAMLError, RecursionError):
        return []
    return out


def _documents(text: str) -> list[tuple[Any, Mapping[str, int], int]]:
    """(content, its line map, lines before it) per YAML document of ``text``."""
    starts = [0] + [m.end() for m in re.finditer(r"^---[^\n]*\n", text, re.MULTILINE)]
    out = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        chunk = text[start:end]
        content, lines = load_yaml_with_lines(chunk)
        if content is not None:
            out.append((content, lines, text.count("\n", 0, start)))
    return out


def _block_offset(rows: Sequence[str], line: int) -> int:
    """Lines before an inline patch's first line: a block scalar (``|``,
    ``|-``, ``>``) starts on the line after its key."""
    row = rows[line - 1] if 0 < line <= len(rows) else ""
    return line if re.search(r":\s*[|>][-+0-9]*\s*(#.*)?$", row) else line - 1


def _aims_at(patch: _Patch, obj: Mapping[str, Any], original_name: str) -> bool:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    names = {original_name, str(meta.get("name") or "")}
    target = patch.target
    if not target and isinstance(patch.content, Mapping):  # a strategic-merge patch names its object
        target = {"kind": patch.content.get("kind"), "name": (patch.content.get("metadata") or {}).get("name")}
    if not target:
        return False
    kind = target.get("kind")
    if kind and kind != obj.get("kind"):
        return False
    name = target.get("name")
    if isinstance(name, str) and name:
        try:
            if not any(re.fullmatch(name, n) for n in names if n):
                return False
        except re.error:
            if name not in names:
                return False
    selector = target.get("labelSelector")
    if isinstance(selector, str) and selector:
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        for term in selector.split(","):
            key, _, value = term.partition("=")
            if key.strip() and labels.get(key.strip().rstrip("!")) != value.strip() and "!" not in key:
                return False
    return True


def _trace(patch: _Patch, obj: Mapping[str, Any], out: Origins) -> None:
    content = patch.content
    if isinstance(content, list):  # JSON 6902: a list of operations
        for i, op in enumerate(content):
            if not isinstance(op, Mapping) or op.get("op") not in ("add", "replace", "copy", "move"):
                continue
            path = op.get("path")
            if not isinstance(path, str) or not path.startswith("/"):
                continue
            path = path[:-2] if path.endswith("/-") else path  # an append: the list is where it is
            where = f"/{i}/value" if "value" in op else f"/{i}/path"
            out[path] = (patch.file, patch.line(where), True)
            if "value" in op:
                _walk(op["value"], _at(obj, path), path, f"/{i}/value", patch, out)
    elif isinstance(content, Mapping):
        _walk(content, obj, "", "", patch, out)


def _walk(part: Any, rendered: Any, pointer: str, in_patch: str, patch: _Patch, out: Origins) -> None:
    if isinstance(part, Mapping) and isinstance(rendered, Mapping):
        for key, value in part.items():
            if not isinstance(key, str) or key.startswith("$") or key not in rendered:
                continue
            if pointer == "" and key in ("apiVersion", "kind", "metadata"):
                continue  # what names the object, not what the patch changes
            step = "/" + key.replace("~", "~0").replace("/", "~1")
            out[pointer + step] = (patch.file, patch.line(in_patch + step), not isinstance(value, (Mapping, list)))
            _walk(value, rendered[key], pointer + step, in_patch + step, patch, out)
    elif isinstance(part, list) and isinstance(rendered, list):
        for i, item in enumerate(part):
            j = _merged_index(item, rendered, i)
            if j is None:
                continue
            leaf = not isinstance(item, (Mapping, list))
            out[f"{pointer}/{j}"] = (patch.file, patch.line(f"{in_patch}/{i}"), leaf)
            _walk(item, rendered[j], f"{pointer}/{j}", f"{in_patch}/{i}", patch, out)


def _merged_index(item: Any, rendered: list[Any], i: int) -> int | None:
    """Where a patch's list item landed in the rendered list."""
    if isinstance(item, Mapping):
        for key in _MERGE_KEYS:
            if key in item:
                found = [j for j, r in enumerate(rendered) if isinstance(r, Mapping) and r.get(key) == item[key]]
                return found[0] if found else None
    if not isinstance(item, (Mapping, list)):
        return rendered.index(item) if item in rendered else None
    return i if i < len(rendered) else None


def _at(obj: Any, pointer: str) -> Any:
    for step in pointer.strip("/").split("/"):
        step = step.replace("~1", "/").replace("~0", "~")
        if isinstance(obj, Mapping):
            obj = obj.get(step)
        elif isinstance(obj, list) and step.isdigit() and int(step) < len(obj):
            obj = obj[int(step)]
        else:
            return None
    return obj
