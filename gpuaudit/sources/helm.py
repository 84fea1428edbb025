"""Helm charts, rendered offline by `helm template`, then read like any
manifest.

Each object points at the template named in the `# Source:` comment Helm
writes, at the line of a field's key where that key occurs once in the
template (else its nearest such ancestor, else line 1).

A chart from a pull request is untrusted: a link in its folder that leads
outside it, or a values file that leads outside the folders it may be read
from (``files.confined``), is refused before helm runs, since helm would
read what the link points at into an object (``.Files.Get``, a value
rendered into a name) and from there into every output.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpuaudit import files
from gpuaudit.files import FileReadError, OutsideRootError, command_line_roots, confined
from gpuaudit.kube.overrides import merge_override
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines
from gpuaudit.model import Document, InputError
from gpuaudit.sources.manifests import ReadResult, read_text
from gpuaudit.sources.render_cache import cached, render_key
from gpuaudit.sources.tools import first_line, run_tool

_MAX_CHART_YAML = 4 * 1024 * 1024
_MAX_RELEASE_NAME = 53  # helm refuses a longer release name
_NOT_IN_RELEASE_NAME = re.compile(r"[^a-z0-9-]+")


class HelmError(RuntimeError):
    """helm could not render the chart; the message says why."""


def render_helm_chart(chart: Path, values: Sequence[Path], *, label: str | None = None) -> ReadResult:
    """``helm template`` of ``chart`` with ``values`` (after the chart's own
    values.yaml); ``label`` names the chart in errors. A values file may
    lead only where ``files.command_line_roots`` allows: inside the
    repository it lies in as written, or in the folder the user named."""
    result = ReadResult()
    name = label or str(chart)
    helm = shutil.which("helm")
    if helm is None:
        result.errors.append(InputError(name, None, "not rendered: a Helm chart needs `helm` on PATH"))
        return result
    whole = Path(os.path.abspath(chart))
    roots = command_line_roots(whole, cwd=whole)  # the repository the chart lies in, else its folder
    outside = _links_outside(chart, roots)
    if outside:  # helm reads what a link points at: `.Files.Get` would carry it into the output
        where = " or ".join(str(r) for r in roots)
        result.errors.append(
            InputError(
                str(outside),
                None,
                f"not rendered: this link in chart {chart} leads outside {where} "
                f"(to {os.path.realpath(outside)}); helm would read that file",
            )
        )
        return result
    for v in values:
        try:
            confined(v, command_line_roots(v), what="values file")
        except OutsideRootError as exc:
            result.errors.append(InputError(str(v), None, f"not rendered: {exc.problem}"))
            return result
    inputs = _chart_files(chart)
    command = [helm, "template", release_name(chart), str(chart)]
    for v in values:
        command += ["--values", str(v)]
    key = render_key([helm], ["helm", *command[2:]], chart, [*inputs, *values])
    try:
        text = cached(key, lambda: _template(chart, command, values))
    except HelmError as exc:
        result.errors.append(InputError(name, None, f"not rendered: {exc}"))
        return result
    result.files += 1
    for source, block in _helm_documents(text):
        file = chart / source.split("/", 1)[1] if "/" in source else chart
        part = ReadResult()
        read_text(block, str(file), part)
        result.errors.extend(part.errors)
        result.bare.extend(part.bare)
        single = len(part.documents) == 1
        for d in part.documents:
            lines = _template_lines(file, d) if single else {}
            result.documents.append(Document(obj=d.obj, file=d.file, line=1, lines=lines))
    if not result.documents and not result.errors:  # an error read from the output says why already
        result.errors.append(InputError(name, None, _rendered_nothing(chart, values), level="warning"))
    return result


def release_name(chart: Path) -> str:
    """The release name ``helm template`` is given: the chart's folder name,
    else its Chart.yaml name, made a name helm accepts (a DNS-1123 label of
    at most 53 characters: lowercase letters, digits and '-', starting and
    ending with a letter or digit), else ``release``. Folder names often are
    not one (``otwld+ollama-helm``, ``rlhf_ppo``), and helm refuses them."""
    label = _dns_label(chart.resolve().name)
    if not label:  # a folder named "_" or "+++", or the root: its Chart.yaml's name
        try:
            label = _dns_label(_chart_yaml(chart).get("name"))
        except HelmError:
            label = ""
    return label or "release"


def _dns_label(text: object) -> str:
    """``text`` lowercased, each run of other characters one '-', trimmed of
    '-' at both ends and cut to helm's length; "" when nothing is left."""
    if not isinstance(text, str):
        return ""
    label = _NOT_IN_RELEASE_NAME.sub("-", text.lower()).strip("-")
    return label[:_MAX_RELEASE_NAME].rstrip("-")


def _rendered_nothing(chart: Path, values: Sequence[Path]) -> str:
    """Why a chart that rendered cleanly gave no object, as far as its folder
    shows. Helm renders only the files under templates/, and of those not
    helpers (``_*``) nor NOTES.txt: templates kept anywhere else (a chart
    with its templates at its root) are never rendered."""
    templates = chart / "templates"
    found = _chart_files(templates) if templates.is_dir() else []
    if any(not f.name.startswith("_") and f.name != "NOTES.txt" for f in found):
        given = f"the values of {', '.join(str(v) for v in values)}" if values else "its default values"
        return f"chart {chart} rendered no objects with {given}"
    if not templates.is_dir():
        why = "is missing"
    elif not found:
        why = "is empty"
    else:
        why = "holds only helpers (_*) and NOTES.txt"
    return f"chart {chart} rendered no objects: its templates/ folder {why}{_root_templates_hint(chart)}"


def _root_templates_hint(chart: Path) -> str:
    """Names YAML files at the chart's root that are none of Helm's own
    (Chart.yaml, values files, requirements.yaml): likely templates kept in
    the wrong place."""
    try:
        names = sorted(
            f.name
            for f in chart.iterdir()
            if f.suffix in (".yaml", ".yml")
            and f.name not in ("Chart.yaml", "requirements.yaml")
            and not f.name.startswith("values")
            and f.is_file()
        )
    except OSError:
        return ""
    if not names:
        return ""
    return f"; {len(names)} YAML file(s) at its root, such as {names[0]}, are not templates to helm"


def _template(chart: Path, command: Sequence[str], values: Sequence[Path]) -> str:
    """`helm template`'s output. A dependency that Chart.yaml names and
    ``charts/`` does not hold stops helm even when its condition switches it
    off; such a chart is rendered from a copy without those dependencies.
    One that is switched on cannot be rendered offline: HelmError says so."""
    missing = _missing_dependencies(chart)
    if missing:
        enabled = [d["name"] for d in missing if _enabled(d, chart, values)]
        if enabled:
            raise HelmError(
                f"its dependencies ({', '.join(enabled[:5])}{', ...' if len(enabled) > 5 else ''}) are not in "
                "charts/: `helm dependency build` fetches them from their repositories, which a check does not do"
            )
        import tempfile  # only for such a chart

        with tempfile.TemporaryDirectory(prefix="gpuaudit-chart-") as tmp:
            copy = Path(tmp) / chart.resolve().name
            shutil.copytree(chart, copy, symlinks=True)
            (copy / "Chart.lock").unlink(missing_ok=True)
            data = _chart_yaml(copy)
            data["dependencies"] = [d for d in data.get("dependencies") or () if d not in missing]
            (copy / "Chart.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
            text = _run_helm([*command[:3], str(copy), *command[4:]])
        return text.replace(f"# Source: {copy.name}/", f"# Source: {chart.resolve().name}/")
    return _run_helm(command)


def _run_helm(command: Sequence[str]) -> str:
    try:
        proc = run_tool(command)
    except OSError as exc:  # TimeoutError included
        raise HelmError(f"helm template failed: {exc}") from None
    if proc.returncode != 0:
        raise HelmError(f"helm template failed: {first_line(proc.stderr) or f'exit status {proc.returncode}'}")
    return proc.stdout


def _chart_yaml(chart: Path) -> dict[str, Any]:
    try:
        data, _ = load_yaml_with_lines(files.read_text(chart / "Chart.yaml", limit=_MAX_CHART_YAML, what="Chart.yaml"))
    except (FileReadError, YamlLimitError, yaml.YAMLError, RecursionError) as exc:
        raise HelmError(f"its Chart.yaml cannot be read: {str(exc).splitlines()[0][:200]}") from None
    return data if isinstance(data, dict) else {}


def _missing_dependencies(chart: Path) -> list[dict[str, Any]]:
    """The dependencies Chart.yaml names that ``charts/`` does not hold."""
    missing = []
    for dependency in _chart_yaml(chart).get("dependencies") or ():
        name = dependency.get("name") if isinstance(dependency, dict) else None
        if not isinstance(name, str):
            continue
        escaped = "".join(f"[{c}]" if c in "*?[" else c for c in name)
        if not ((chart / "charts" / name).is_dir() or any((chart / "charts").glob(f"{escaped}-*.tgz"))):
            missing.append(dependency)
    return missing


def _enabled(dependency: Mapping[str, Any], chart: Path, values: Sequence[Path]) -> bool:
    """Whether a dependency's ``condition`` (dotted paths, the first one set
    decides, as Helm reads it) is on in the chart's values and ``values``;
    no condition, or one that no values file sets: on."""
    condition = dependency.get("condition")
    if not isinstance(condition, str) or not condition.strip():
        return True
    merged: dict[str, Any] = {}
    for file in [chart / "values.yaml", *values]:
        try:
            data, _ = load_yaml_with_lines(files.read_text(file, limit=_MAX_CHART_YAML, what="values file"))
        except (FileReadError, YamlLimitError, yaml.YAMLError, RecursionError):
            continue
        if isinstance(data, dict):
            merged = merge_override(merged, data)  # later files override earlier ones, as in Helm
    for path in condition.split(","):
        value: Any = merged
        for step in path.strip().split("."):
            value = value.get(step) if isinstance(value, dict) else None
        if isinstance(value, bool):
            return value
    return True


def _chart_files(chart: Path) -> list[Path]:
    """Every file helm may read from the chart (links were refused before)."""
    out = []
    for dirpath, _, filenames in os.walk(chart):
        out += [Path(dirpath, f) for f in filenames]
    return out


def _links_outside(chart: Path, roots: Sequence[Path]) -> Path | None:
    """The first symbolic link under ``chart`` that resolves outside
    ``roots`` (the repository it lies in, else its own folder): a chart from
    a pull request could otherwise pull a runner's file into an object name
    with `.Files.Get`, as a kustomize configMapGenerator could."""
    for dirpath, dirnames, filenames in os.walk(chart):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            if path.is_symlink():
                try:
                    confined(path, roots, what="link")
                except OutsideRootError:
                    return path
    return None


def _template_lines(template: Path, doc: Document) -> dict[str, int]:
    """Lines in the template for fields whose key occurs exactly once in it:
    the rendered object's lines say nothing about the template's. Fields
    written by helpers or loops fall back to the nearest such ancestor, or 1."""
    try:
        text = template.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    rows = text.splitlines()
    lines: dict[str, int] = {}
    for pointer in doc.lines:
        key = pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
        if not key or key.isdigit():
            continue
        hits = [i for i, row in enumerate(rows, 1) if f"{key}:" in row]
        if len(hits) == 1:
            lines[pointer] = hits[0]
    return lines


def _helm_documents(stream: str) -> list[tuple[str, str]]:
    """(template path, YAML text) per `# Source:` block of `helm template` output."""
    blocks: list[tuple[str, list[str]]] = []
    for line in stream.splitlines():
        if line.startswith("# Source: "):
            blocks.append((line[len("# Source: ") :].strip(), []))
        elif blocks:
            blocks[-1][1].append(line)
    return [(source, "\n".join(lines)) for source, lines in blocks]
