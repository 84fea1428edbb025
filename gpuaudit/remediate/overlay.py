"""The overlay's files: kustomization.yaml, one patch file per change, new
objects, and copies of inputs that live outside the overlay. Pure: it returns
relative paths and contents; the fix command writes them, inside DIR only.

`resources:` names kustomize directories by relative path (kustomize loads a
base from anywhere) and manifest files by relative path when they are inside
the overlay; files outside it are copied into base/, because kustomize refuses
files outside a kustomization's folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit.kube.podspecs import group_of
from gpuaudit.remediate.plan import Change, Plan
from gpuaudit.safetext import one_line

KUSTOMIZE_API = "kustomize.config.k8s.io/v1beta1"
_UNSAFE = re.compile(r"[^a-z0-9.-]+")
_REGEX_SPECIAL = re.compile(r"([\\.+*?()|\[\]{}^$])")


class Overlay(msgspec.Struct):
    files: dict[str, str] = msgspec.field(default_factory=dict)  # relative path -> text
    copies: dict[str, Path] = msgspec.field(default_factory=dict)  # relative path -> file to copy
    patch_paths: dict[int, str] = msgspec.field(default_factory=dict)  # change number -> path
    resource_paths: dict[int, list[str]] = msgspec.field(default_factory=dict)
    resources: list[str] = msgspec.field(default_factory=list)  # the kustomization's entries


def safe_name(text: str, limit: int = 48) -> str:
    """A file-name part from an object name: lower case, [a-z0-9.-] only, no
    leading dots, so no name can climb out of the overlay."""
    name = _UNSAFE.sub("-", text.lower()).strip(".-")
    name = re.sub(r"-{2,}", "-", name)[:limit].strip(".-")
    return name or "object"


def regex_literal(text: str) -> str:
    """kustomize matches patch target names as anchored regular expressions."""
    return _REGEX_SPECIAL.sub(r"\\\1", text)


def layout(plan: Plan, root: Path) -> Overlay:
    overlay = Overlay()
    root = root.resolve()
    outside = [s.path.resolve() for s in plan.sources if s.kind == "file" and not _inside(root, s.path)]
    common = Path(os.path.commonpath([str(p.parent) for p in outside])) if outside else None
    for source in plan.sources:
        if source.kind == "generated":
            relative = f"base/{safe_name(str(source.path), limit=96)}.yaml"
            overlay.files[relative] = source.content or ""
            overlay.resources.append(relative)
            continue
        path = source.path.resolve()
        if source.kind == "kustomize" or _inside(root, path):
            overlay.resources.append(Path(os.path.relpath(path, root)).as_posix())
        else:
            assert common is not None
            relative = "base/" + path.relative_to(common).as_posix()
            overlay.copies[relative] = path
            overlay.resources.append(relative)
    patch_entries = []
    for change in plan.changes:
        kind, name = change.target[1], change.target[3]
        patch_path = (
            f"patches/{change.number:02d}-{safe_name(change.remediation)}-{safe_name(kind)}-{safe_name(name)}.yaml"
        )
        overlay.patch_paths[change.number] = patch_path
        overlay.files[patch_path] = _patch_text(change)
        # A strategic-merge patch names its object (apiVersion, kind, name,
        # namespace): kustomize matches it by that, ten times faster than a
        # target selector with thousands of patches. JSON 6902 needs a target.
        assert change.patch is not None
        smp = change.patch.format == "strategic-merge"
        patch_entries.append({"path": patch_path} if smp else {"path": patch_path, "target": target(change)})
        for obj in change.new_objects:
            meta = obj.get("metadata") or {}
            path = (
                f"resources/{change.number:02d}-{safe_name(str(obj.get('kind')))}-"
                f"{safe_name(str(meta.get('name')))}.yaml"
            )
            overlay.resource_paths.setdefault(change.number, []).append(path)
            note = f"# Added by gpuaudit fix: see change {change.number} in REVIEW.md.\n"
            overlay.files[path] = note + dump(obj)
            overlay.resources.append(path)
    overlay.files["kustomization.yaml"] = _kustomization(plan, overlay, patch_entries)
    return overlay


def target(change: Change) -> dict[str, str]:
    api_version, kind, namespace, name = change.target
    out: dict[str, str] = {}
    group = group_of(api_version)
    if group:
        out["group"] = group
    out["version"] = api_version.rpartition("/")[2]
    out["kind"] = kind
    if namespace:
        out["namespace"] = regex_literal(namespace)
    out["name"] = regex_literal(name)
    return out


def build_command(plan: Plan, directory: str) -> str:
    flag = " --load-restrictor LoadRestrictionsNone" if plan.load_restrictor_none else ""
    return f"kubectl kustomize{flag} {directory}"


def _kustomization(plan: Plan, overlay: Overlay, patch_entries: list[dict[str, Any]]) -> str:
    findings = len(plan.fixed_findings)
    header = (
        f"# Generated by gpuaudit fix: {len(plan.changes)} change(s) for {findings} finding(s).\n"
        "# Read REVIEW.md before merging. Build it with:\n"
        f"#   {build_command(plan, '.')}\n"
    )
    if plan.load_restrictor_none:
        header += "# (a base reads files outside its own folder, so the build needs that flag)\n"
    body: dict[str, Any] = {
        "apiVersion": KUSTOMIZE_API,
        "kind": "Kustomization",
        "resources": overlay.resources,
        "patches": patch_entries,
    }
    return header + dump(body)


def _patch_text(change: Change) -> str:
    assert change.patch is not None
    kind = "strategic merge" if change.patch.format == "strategic-merge" else "JSON 6902"
    header = (
        f"# {one_line(change.rendered.summary)}\n"
        f"# Fixes {', '.join(change.rules)}; {kind} patch. "
        f"See change {change.number} in REVIEW.md.\n"
    )
    return header + dump(change.patch.document)


def _inside(root: Path, path: Path) -> bool:
    path = path.resolve()
    return path == root or root in path.parents


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump(value: Any, sort_keys: bool = False) -> str:
    return yaml.dump(
        value,
        Dumper=_Dumper,
        sort_keys=sort_keys,
        default_flow_style=False,
        allow_unicode=True,
        width=100,
    )
