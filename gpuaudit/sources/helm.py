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

A dependency Chart.yaml names that ``charts/`` does not hold is never
fetched, and the user's folder is never written (no ``helm dependency
build`` in it). A local one (``repository: file://../common``) whose folder
lies in the repository is copied into ``charts/`` of a temporary copy of the
chart, which is rendered instead; its templates are named where they lie.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import yaml

from gpuaudit import files
from gpuaudit.files import FileReadError, OutsideRootError, command_line_roots, confined
from gpuaudit.kube.overrides import merge_override
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines
from gpuaudit.model import Document, InputError
from gpuaudit.sources.manifests import ReadResult, read_text
from gpuaudit.sources.render_cache import cached, render_key
from gpuaudit.sources.tools import error_message, run_tool

_MAX_CHART_YAML = 4 * 1024 * 1024
_MAX_RELEASE_NAME = 53  # helm refuses a longer release name
_NOT_IN_RELEASE_NAME = re.compile(r"[^a-z0-9-]+")
_CHART_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
# The last bound of a chart's kubeVersion that caps it (`< 1.32.0-0`,
# `<= 1.31.4`, `~1.29`). (A pattern text: compiled only for such a chart.)
_KUBE_VERSION_CAP = r"(<=|<|~)\s*v?(\d+)\.(\d+)(?:\.(\d+))?"


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
    try:
        local = _local_dependencies(chart, roots)
    except HelmError as exc:
        result.errors.append(InputError(name, None, f"not rendered: {exc}"))
        return result
    for dependency in local.found.values():
        outside = _links_outside(dependency.folder, roots)
        if outside:  # the same refusal as a link in the chart's own folder
            result.errors.append(
                InputError(
                    str(outside),
                    None,
                    f"not rendered: this link in {dependency.shown}, a local dependency of chart {chart}, "
                    f"leads outside {' or '.join(str(r) for r in roots)} (to {os.path.realpath(outside)}); "
                    "helm would read that file",
                )
            )
            return result
    inputs = _chart_files(chart) + [f for d in local.found.values() for f in _chart_files(d.folder)]
    command = [helm, "template", release_name(chart), str(chart)]
    for v in values:
        command += ["--values", str(v)]
    capped = _kube_version_for(chart)
    if capped:
        command += ["--kube-version", capped]
    key = render_key([helm], ["helm", *command[2:]], chart, [*inputs, *values])
    try:
        text = cached(key, lambda: _template(chart, command, values, local))
    except HelmError as exc:
        result.errors.append(InputError(name, None, f"not rendered: {exc}"))
        return result
    result.files += 1
    vendored = cache(_vendored_subcharts)  # each chart's subcharts, read once however many files name them
    for source, block in _helm_documents(text):
        file = _source_file(chart, source, local, vendored)
        part = ReadResult()
        read_text(block, str(file), part)
        result.errors.extend(_template_error(e, file, block) for e in part.errors)
        result.bare.extend(part.bare)
        single = len(part.documents) == 1
        for d in part.documents:
            lines = _template_lines(file, d) if single else {}
            result.documents.append(Document(obj=d.obj, file=d.file, line=1, lines=lines, rendered=True))
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


def _source_file(
    chart: Path, source: str, local: LocalDependencies, vendored: Callable[[Path], Mapping[str, str]]
) -> Path:
    """The file a `# Source:` comment names (``<chart>/templates/x.yaml``,
    ``<chart>/charts/<dependency>/templates/y.yaml``), in the style the
    chart was named in; a local dependency's file where it lies, not where
    the copy put it; a vendored subchart's in its folder, at any depth
    (``vendored``: _vendored_subcharts of a chart)."""
    if "/" not in source:
        return chart
    inside = source.split("/", 1)[1]
    parts = inside.split("/", 2)
    if len(parts) == 3 and parts[0] == "charts":
        # helm names a subchart's templates by its alias, when it has one
        for d in local.missing:
            if d["name"] in local.found and parts[1] in (d["name"], d.get("alias")):
                return local.found[d["name"]].shown / parts[2]
    # and a vendored one by its alias or its Chart.yaml name, not its
    # folder's, at each level (charts/ingestor/charts/nv-ingest/charts/<alias>)
    at, rest = chart, inside
    while len(parts) == 3 and parts[0] == "charts":
        at, rest = at / "charts" / vendored(at).get(parts[1], parts[1]), parts[2]
        parts = rest.split("/", 2)
    return at / rest


def _vendored_subcharts(chart: Path) -> dict[str, str]:
    """How `# Source:` names each chart of ``chart``'s charts/ folder (its
    alias in the parent's Chart.yaml, else its own name) -> the folder it is
    in, where the two differ (charts/nemotron-nano-9b-v2 aliased nemotron)."""
    subcharts = chart / "charts"
    if not subcharts.is_dir():
        return {}
    folder_of = {}
    for sub in sorted(subcharts.iterdir()):
        if not (sub / "Chart.yaml").is_file():  # a packaged .tgz: helm names it as it unpacks it
            continue
        try:
            name = _chart_yaml(sub).get("name")
        except HelmError:  # helm has just read it to render the chart: only a file changed since fails
            continue
        if isinstance(name, str) and name != sub.name:
            folder_of[name] = sub.name
    try:
        dependencies = _chart_yaml(chart).get("dependencies") or []
    except HelmError:  # a nested chart helm read from a package, or a file changed since
        dependencies = []
    for dependency in dependencies:
        if not isinstance(dependency, Mapping):
            continue
        name, alias = dependency.get("name"), dependency.get("alias")
        if isinstance(name, str) and isinstance(alias, str) and alias != name:
            folder = folder_of.get(name, name)
            if (subcharts / folder).is_dir():
                folder_of[alias] = folder
    return folder_of


class LocalDependency(msgspec.Struct, frozen=True):
    folder: Path  # resolved: what is copied
    shown: Path  # the chart's folder joined with the path Chart.yaml gives: how files are named


class LocalDependencies(msgspec.Struct, frozen=True):
    """The dependencies ``charts/`` does not hold: those that are local
    (``file://``) charts in the repository, by name; why each other local
    one is not (outside the repository, no chart there), by name; and every
    missing one, as Chart.yaml gives it."""

    found: dict[str, LocalDependency]
    refused: dict[str, str]
    missing: list[dict[str, Any]]


def _local_dependencies(chart: Path, roots: Sequence[Path]) -> LocalDependencies:
    """The dependencies of ``chart`` that ``charts/`` does not hold, sorted
    into what can be copied in from the repository and what cannot. Helm
    reads ``file://PATH`` relative to the chart's folder (an absolute PATH
    as it is); such a folder must lie within ``roots`` (the repository),
    as any file a repository names (``files.confined``)."""
    found: dict[str, LocalDependency] = {}
    refused: dict[str, str] = {}
    missing = _missing_dependencies(chart)
    for dependency in missing:
        repository, name = dependency.get("repository"), dependency["name"]
        if not isinstance(repository, str) or not repository.startswith("file://"):
            continue
        if not _CHART_NAME.fullmatch(name):  # it names the folder it is copied to: never a path
            refused[name] = "its name is no chart name (it would name the folder it is copied to)"
            continue
        written = repository.removeprefix("file://")
        shown = Path(written) if os.path.isabs(written) else Path(os.path.normpath(chart / written))
        try:
            folder = confined(shown, roots, what="chart dependency")
        except OutsideRootError:
            refused[name] = f"that folder leads outside {' or '.join(str(r) for r in roots)}"
            continue
        if not (folder / "Chart.yaml").is_file():
            refused[name] = "that folder " + ("holds no Chart.yaml" if folder.is_dir() else "does not exist")
            continue
        found[name] = LocalDependency(folder, shown)
    return LocalDependencies(found, refused, missing)


def _template(chart: Path, command: Sequence[str], values: Sequence[Path], local: LocalDependencies) -> str:
    """`helm template`'s output. A dependency that Chart.yaml names and
    ``charts/`` does not hold stops helm even when its condition switches it
    off. Such a chart is rendered from a temporary copy: its local
    dependencies in the repository copied into its ``charts/``, the others
    switched off left out of its Chart.yaml. One that is switched on and
    cannot be copied in cannot be rendered offline: HelmError says why."""
    if not local.missing:
        return _run_helm(command)
    absent = [d for d in local.missing if d["name"] not in local.found]
    enabled = [d for d in absent if _enabled(d, chart, values)]
    if enabled:
        raise HelmError(_not_vendored(enabled, local))
    import tempfile  # only for such a chart

    with tempfile.TemporaryDirectory(prefix="gpuaudit-chart-") as tmp:
        copy = Path(tmp) / chart.resolve().name
        try:
            _prepared_copy(chart, copy, absent, local)
        except OSError as exc:
            raise HelmError(f"the chart could not be copied to render it: {exc}") from None
        text = _run_helm([*command[:3], str(copy), *command[4:]])
    return text.replace(f"# Source: {copy.name}/", f"# Source: {chart.resolve().name}/")


def _prepared_copy(chart: Path, copy: Path, absent: Sequence[Mapping[str, Any]], local: LocalDependencies) -> None:
    """``chart`` copied to ``copy``, without the dependencies ``absent`` and
    with its local ones in ``charts/``. What is written in the copy is never
    written through a link (Chart.yaml, ``charts/`` may be links into the
    repository): the link is replaced first."""
    _copy_chart(chart, copy)
    (copy / "Chart.lock").unlink(missing_ok=True)
    if absent:
        data = _chart_yaml(copy)
        data["dependencies"] = [d for d in data.get("dependencies") or () if d not in absent]
        (copy / "Chart.yaml").unlink()
        (copy / "Chart.yaml").write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    if not local.found:
        return
    charts = copy / "charts"
    if charts.is_symlink():  # a real folder of the copy's own, holding what the link held
        target = Path(os.path.realpath(charts))
        charts.unlink()
        if target.is_dir():
            _copy_chart(target, charts)
    charts.mkdir(exist_ok=True)
    for name, dependency in local.found.items():
        if os.path.lexists(charts / name):  # a file or a dangling link of that name: not the chart
            (charts / name).unlink()
        _copy_chart(dependency.folder, charts / name)


def _not_vendored(enabled: Sequence[Mapping[str, Any]], local: LocalDependencies) -> str:
    """Why the dependencies ``enabled`` (switched on, not in charts/) stop the render."""
    remote = [d["name"] for d in enabled if d["name"] not in local.refused]
    why = []
    if remote:
        why.append(
            f"its dependencies ({', '.join(remote[:5])}{', ...' if len(remote) > 5 else ''}) are not in charts/: "
            "`helm dependency build` fetches them from their repositories, which a check does not do"
        )
    for d in [d for d in enabled if d["name"] in local.refused][:3]:
        why.append(
            f"its local dependency {d['name']} ({d['repository']}) is not vendored in charts/, "
            f"and {local.refused[d['name']]}"
        )
    return "; ".join(why)


def _copy_chart(source: Path, target: Path) -> None:
    """``source`` copied to ``target``, each link in it made absolute to what
    it resolves to from ``source``. A relative link copied as it is would
    resolve from the copy's place: one that climbs to the repository's root
    from a deep chart climbs from a temporary folder to the runner's root
    (``../../../../etc/x``), past the check that confined it."""
    shutil.copytree(source, target, symlinks=True)
    for dirpath, dirnames, filenames in os.walk(target):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            if path.is_symlink():
                resolved = os.path.realpath(source / path.relative_to(target))
                path.unlink()
                path.symlink_to(resolved)


def _run_helm(command: Sequence[str]) -> str:
    try:
        proc = run_tool(command)
    except OSError as exc:  # TimeoutError included
        raise HelmError(f"helm template failed: {exc}") from None
    if proc.returncode != 0:
        raise HelmError(f"helm template failed: {error_message(proc.stderr) or f'exit status {proc.returncode}'}")
    return proc.stdout


def _chart_yaml(chart: Path) -> dict[str, Any]:
    try:
        data, _ = load_yaml_with_lines(files.read_text(chart / "Chart.yaml", limit=_MAX_CHART_YAML, what="Chart.yaml"))
    except (FileReadError, YamlLimitError, yaml.YAMLError, RecursionError) as exc:
        raise HelmError(f"its Chart.yaml cannot be read: {str(exc).splitlines()[0][:200]}") from None
    return data if isinstance(data, dict) else {}


def _kube_version_for(chart: Path) -> str | None:
    """The Kubernetes version to render ``chart`` for, or None for helm's own.
    helm renders for the newest version it knows, which a chart whose
    kubeVersion caps it refuses (`>= 1.21.0-0 < 1.32.0-0`): such a chart is
    rendered for the newest minor below its cap, as the clusters it is
    deployed to run. (Of several ranges, `a || b`, the last and newest.)"""
    try:
        constraint = _chart_yaml(chart).get("kubeVersion")
    except HelmError:
        return None  # helm says what is wrong with Chart.yaml when it runs
    if not isinstance(constraint, str) or not re.search(r"[<~]", constraint):
        return None
    caps = list(re.finditer(_KUBE_VERSION_CAP, constraint.split("||")[-1]))
    if not caps:
        return None
    op, major, minor, patch = caps[-1].groups()
    if op == "<=":
        return f"v{major}.{minor}.{patch or 0}"
    if op == "~" or (patch and int(patch) > 0):
        return f"v{major}.{minor}.0"  # ~1.29 is 1.29.x; below 1.31.4, 1.31.0
    return f"v{major}.{int(minor) - 1}.0" if int(minor) > 0 else None


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


def _line_of_only(text: str, needle: str) -> int | None:
    """The line of ``needle`` in ``text`` when it occurs there exactly once."""
    at = text.find(needle)
    if at < 0 or text.find(needle, at + 1) >= 0:
        return None
    return text.count("\n", 0, at) + 1


def _template_error(error: InputError, template: Path, block: str) -> InputError:
    """An error read from a rendered block, at its template's line: the line
    whose text the rendered line has, where exactly one line has it (a
    duplicate ``resources:`` key is often one of several in its template).
    Else no line, and the message names the rendered line, never a template
    line that merely has the same number."""
    if error.line is None:
        return error
    rendered = block.splitlines()
    text = rendered[error.line - 1] if 0 < error.line <= len(rendered) else ""
    try:
        template_lines = template.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):  # a template helm read but this cannot: no line to name
        template_lines = []
    same = [n for n, line in enumerate(template_lines, 1) if text.strip() and line.rstrip() == text.rstrip()]
    if len(same) == 1:
        return msgspec.structs.replace(error, line=same[0])
    message = f"{error.message} (line {error.line} of what helm rendered)"
    return msgspec.structs.replace(error, line=None, message=message)


def _template_lines(template: Path, doc: Document) -> dict[str, int]:
    """Lines in the template for fields whose key occurs exactly once in it:
    the rendered object's lines say nothing about the template's. Fields
    written by helpers or loops, or whose key is written more than once,
    take the line of their nearest such ancestor, or 1. Every field keeps a
    pointer: readers look at the pointers to learn what an object holds (a
    GPU request, workload_builder._resource_keys)."""
    try:
        text = template.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    lines: dict[str, int] = {}
    once: dict[str, int | None] = {}  # key -> the line of its one occurrence (a CRD template repeats keys)
    for pointer in doc.lines:  # parents before their fields, as the reader records them
        key = pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
        if key and not key.isdigit():
            if key not in once:
                once[key] = _line_of_only(text, f"{key}:")
            line = once[key]
            if line is not None:
                lines[pointer] = line
                continue
        parent = pointer.rpartition("/")[0]
        while parent and parent not in lines:
            parent = parent.rpartition("/")[0]
        lines[pointer] = lines.get(parent, 1)
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
