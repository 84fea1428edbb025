"""A repository as it is deployed: a set of units, each what one `kubectl
apply` or `helm install` would send.

- a Helm chart (a folder with ``Chart.yaml``): one unit with its
  ``values.yaml``, one more per ``ci/*-values.yaml`` (chart-testing's
  convention), per values file beside ``values.yaml`` named for a variant
  (``values-prod.yaml``) and per values list the config names; its ``charts/``
  subcharts belong to it, and it reads its local dependencies
  (``repository: file://../common``) too. A library chart (``type:
  library``) is no unit: helm installs none, and it renders no object by
  design; the charts that depend on it render it;
- a kustomize root: a kustomization that no other kustomization in the tree
  uses as a resource, base or component. Bases are judged through the roots
  that use them; a component (``kind: Component``) is never built alone;
- the remaining manifests, one unit per folder (``plain_files: folder``),
  per file, or one unit for the whole tree. A file in a kustomization's
  folder (or below it) that no kustomization reads, directly or through the
  plugin configs it names, and that holds Kubernetes objects is one of them
  (a manifest applied with `kubectl apply -f` beside the kustomization);
  one that holds none is a fragment (a patch nothing names yet), never
  judged alone.

What a unit reads is found here without running kustomize: kustomization
files are small YAML, and the map from a file to the units that use it is
what a pre-commit run on changed files needs before it renders anything
(``units_for_changed``). A unit that cannot be rendered offline (a remote
base, a file the repository does not hold) says why in ``problem``, found
here too, so nothing waits on the network. Duplicate and cross-object checks
happen inside a unit, never across units (pipelines/check.py).
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from gpuaudit.files import FileReadError, OutsideRootError, command_line_roots, confined, read_text
from gpuaudit.kube.yaml_lines import YamlLimitError, load_yaml_with_lines
from gpuaudit.sources.manifests import MANIFEST_SUFFIXES, SKIP_DIRS, ReadResult, read_file
from gpuaudit.sources.manifests import read_text as read_manifest_text

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
PlainFiles = Literal["folder", "file", "tree"]
UnitKind = Literal["kustomize", "helm", "files"]
_MAX_KUSTOMIZATION_BYTES = 1024 * 1024
_MAX_CHART_BYTES = 4 * 1024 * 1024

# A remote kustomize resource: a URL, an scp-like git address, or a path that
# starts with a host name (github.com/org/repo//dir?ref=v1). Compiled by re on
# first use: a check of plain files never needs it.
_REMOTE = r"^(?:[a-z][a-z0-9+.-]*://|git@|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+/)"

# Values files beside a chart's values.yaml that make a variant of it.
_VALUES_NAMES = ("values[-_.]*.yaml", "values[-_.]*.yml", "*[-_.]values.yaml", "*[-_.]values.yml")
# Files written for another templating tool, not Kubernetes objects yet:
# Terraform's templatefile(), and the names people give envsubst/gomplate
# /Jinja inputs.
_TEMPLATE_NAMES = ("*.tftpl", "*.tftpl.*", "*.tpl.y*ml", "*.tmpl.y*ml", "*.template.y*ml", "*.j2.y*ml", "*.gotmpl.y*ml")
_TEMPLATE_PARTS = (".tftpl", ".tpl.", ".tmpl.", ".template.", ".j2.", ".gotmpl.")


class Unit(msgspec.Struct, frozen=True):
    """One deployable unit. ``root`` is the kustomization's folder, the
    chart's folder, or the folder of a files unit (the tree's root for
    ``plain_files: tree``); paths are absolute."""

    name: str  # how every output names it: its root as the user would write it, a chart variant after it
    kind: UnitKind
    root: Path
    files: tuple[Path, ...] = ()  # a files unit's manifests
    values: tuple[Path, ...] = ()  # a chart variant's values files, after the chart's own values.yaml
    problem: str | None = None  # why it cannot be rendered here; None when it can
    # What it reads (kustomize: every kustomization it reaches and each file
    # they name; helm: its folder): for the render cache and changed files.
    reads: tuple[Path, ...] = ()
    resources: tuple[Path, ...] = ()  # kustomize: its local resource files (judged as files when unrendered)
    # helm: a variant of values files found in the chart's folder, not named
    # by the user: when another variant of its chart renders, this one's
    # failure is a warning (the chart was audited)
    found_values: bool = False
    # kustomize: the largest kustomizations it uses that render alone, judged
    # on their own when it fails to render (a cycle kustomize finds only then)
    parts: tuple[Unit, ...] = ()
    # kustomize: it (or a kustomization it uses) inflates charts of the
    # repository: built with `--enable-helm`
    inflates_helm: bool = False


class Kustomization(msgspec.Struct):
    folder: Path
    file: Path
    component: bool
    folders: list[Path]  # kustomizations it uses (resources, bases, components)
    files: list[Path]  # files it names (resources, patches, generators, ...)
    resources: list[Path]  # of those, the resource files (objects, not fragments)
    remote: list[str]  # remote resources it names
    problem: str | None = None  # unreadable, or it names something missing
    unreadable: bool = False  # what it reads is unknown: every file in its folder and below may be its fragment
    # files of its folder and below its author commented out (`# - job.yaml`),
    # and folders (`# - functionary`): deliberately not deployed, so not judged
    # as plain files or kustomize units either
    commented_out: list[Path] = msgspec.field(default_factory=list)
    # a kustomization above lists this folder in a comment (see commented_out)
    switched_off: bool = False
    # the charts its helmCharts inflate, each in the repository: rendered
    # with `--enable-helm` (a chart that would be pulled is a problem)
    helm_charts: list[Path] = msgspec.field(default_factory=list)


class Repository(msgspec.Struct):
    """What a tree holds, and which unit reads which file."""

    root: Path
    units: list[Unit]
    templates: list[Path]  # other tools' templates, skipped
    libraries: list[Path] = msgspec.field(default_factory=list)  # library charts: no unit of their own


def discover(
    root: Path,
    shown: str,
    *,
    plain_files: PlainFiles = "folder",
    chart_values: Mapping[Path, Sequence[Sequence[Path]]] | None = None,
    allow_remote: bool = False,
    render: bool = True,
) -> Repository:
    """The units under ``root`` (a folder the user named as ``shown``).
    ``render`` False (--no-kustomize): kustomizations and charts are not
    units; their files are read as plain manifests, as before rendering
    existed."""
    root = Path(os.path.abspath(root))
    kustomizations: dict[Path, Kustomization] = {}
    charts: list[Path] = []
    plain: list[Path] = []
    templates: list[Path] = []
    for folder, names in _walk(root):
        if render and "Chart.yaml" in names:
            # A subchart (under its parent's charts/) belongs to its parent;
            # a chart anywhere else in a chart's folder (an umbrella chart at
            # a repository's root, the apps' charts beside it) is one of its
            # own: helm renders no chart from outside charts/.
            parent = max((c for c in charts if folder.is_relative_to(c)), key=lambda c: len(c.parts), default=None)
            if parent is None or not folder.is_relative_to(parent / "charts"):
                charts.append(folder)
            continue
        if any(folder.is_relative_to(c) for c in charts):
            continue
        kustomization = next((folder / n for n in KUSTOMIZATION_FILES if n in names), None)
        if render and kustomization is not None:
            kustomizations[folder] = read_kustomization(kustomization, top=root)
        for name in names:
            if name.endswith(MANIFEST_SUFFIXES) and name not in KUSTOMIZATION_FILES:
                path = folder / name
                (templates if is_template_name(name) else plain).append(path)
    used = {f for k in kustomizations.values() for f in k.folders}
    for k in kustomizations.values():
        for folder in k.commented_out:
            if folder in kustomizations and folder not in used:
                kustomizations[folder].switched_off = True
    consumed = {k.file for k in kustomizations.values()}
    consumed |= {f for k in kustomizations.values() for f in k.files}
    units: list[Unit] = []
    values = {Path(os.path.realpath(c)): v for c, v in (chart_values or {}).items()}
    libraries: list[Path] = []
    for chart in charts:
        library, dependencies = read_chart_yaml(chart)
        if library:
            libraries.append(chart)
            continue
        units += chart_units(chart, shown, values.get(Path(os.path.realpath(chart)), ()), dependencies)
    done: set[Path] = set()
    for folder in sorted(kustomizations):
        k = kustomizations[folder]
        if folder in used or k.component or k.switched_off:
            continue
        unit = _kustomize_unit(k, kustomizations, shown, allow_remote)
        done.add(folder)
        if unit.problem is None:
            parts = _renderable_parts(k, kustomizations, shown, allow_remote, {folder})
            units.append(msgspec.structs.replace(unit, parts=tuple(parts)))
            continue
        parts = _renderable_parts(k, kustomizations, shown, allow_remote, done)
        if parts:
            unit = msgspec.structs.replace(unit, problem=f"{unit.problem}{judged_alone(parts)}")
        units += [unit, *parts]
    rest = [p for p in plain if p not in consumed and _is_plain(p, kustomizations, root)]
    for unit in plain_units(rest, shown, root, plain_files):
        if plain_files != "file" and unit.root in kustomizations:
            # beside a kustomization (the kustomize unit may bear the folder's name): not what it renders
            unit = msgspec.structs.replace(unit, name=f"{unit.name} [plain files]")
        units.append(unit)
    return Repository(root, units, templates, libraries)


def _is_plain(file: Path, kustomizations: Mapping[Path, Kustomization], top: Path) -> bool:
    """Whether ``file``, which no kustomization names, is a plain manifest:
    outside every kustomization's folder, always; inside one, when it holds
    Kubernetes objects (a patch or a config that nothing names yet is a
    fragment, never judged alone), unless a kustomization above it could
    not be read (then what it reads is unknown) or lists it, or a folder
    above it, in a comment (its author switched it off)."""
    packages = list(_packages_of(file, kustomizations, top))
    if not packages:
        return True
    if any(
        kustomizations[p].unreadable or kustomizations[p].switched_off or file in kustomizations[p].commented_out
        for p in packages
    ):
        return False
    return holds_objects(file)


def holds_objects(file: Path) -> bool:
    """Whether ``file`` holds at least one Kubernetes object (apiVersion and kind)."""
    read = ReadResult()
    read_file(file, read)
    return bool(read.documents)


def chart_units(
    chart: Path, shown: str, extra: Sequence[Sequence[Path]] = (), dependencies: Sequence[Path] = ()
) -> list[Unit]:
    """The variants of a chart: its defaults, each values file of its folder
    that makes one (_values_variants), each list of values files the config
    names. Whether one renders offline
    depends on its values (a dependency switched off): sources/helm.py says.
    ``dependencies``: the folders of its local dependencies, which each
    variant reads too."""
    name = display(chart, shown)
    reads = (chart, *dependencies)
    units = [Unit(name, "helm", chart, reads=reads)]
    configured = {tuple(Path(os.path.realpath(v)) for v in values_list) for values_list in extra}
    for values in _values_variants(chart):
        if (Path(os.path.realpath(values)),) not in configured:
            label = f"{name} [{values.relative_to(chart)}]"
            units.append(Unit(label, "helm", chart, values=(values,), reads=reads, found_values=True))
    for values_list in extra:
        label = f"{name} [{', '.join(display(v, shown) for v in values_list)}]"
        units.append(Unit(label, "helm", chart, values=tuple(values_list), reads=(*reads, *values_list)))
    return units


def _values_variants(chart: Path) -> list[Path]:
    """The values files a chart's folder holds for its variants:
    chart-testing's ``ci/*-values.yaml``, and beside ``values.yaml`` the
    files named for an environment or a size (``values-prod.yaml``,
    ``gpu-values.yaml``, ``values.k3s.yaml``): a chart's defaults often ask
    for no GPU, and those files are how it is deployed."""
    found = sorted(chart.glob("ci/*-values.yaml"))
    found += sorted(
        f
        for f in chart.iterdir()
        if f.is_file() and f.name != "values.yaml" and any(fnmatch.fnmatch(f.name, p) for p in _VALUES_NAMES)
    )
    return found


def read_chart_yaml(chart: Path) -> tuple[bool, list[Path]]:
    """Whether the chart in ``chart`` (an absolute folder) is a library chart,
    and the folders of its local dependencies (``repository: file://PATH``,
    PATH relative to the chart or absolute, as helm reads it). A Chart.yaml
    that cannot be read: an application chart with none (helm says what is
    wrong when it renders it)."""
    data = _chart_data(chart)
    folders = []
    for dependency in _as_list(data.get("dependencies")):
        repository = dependency.get("repository") if isinstance(dependency, dict) else None
        if isinstance(repository, str) and repository.startswith("file://"):
            folders.append(Path(os.path.normpath(chart / repository.removeprefix("file://"))))
    return data.get("type") == "library", folders


def _chart_data(chart: Path) -> dict[str, Any]:
    """A chart's Chart.yaml, read; empty when it cannot be (helm says why when it renders it)."""
    try:
        data, _ = load_yaml_with_lines(read_text(chart / "Chart.yaml", limit=_MAX_CHART_BYTES, what="Chart.yaml"))
    except (FileReadError, YamlLimitError, yaml.YAMLError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def plain_units(files: Sequence[Path], shown: str, top: Path, mode: PlainFiles) -> list[Unit]:
    """Manifests no kustomization or chart reads: one unit per folder, per
    file, or one for the tree (``top``)."""
    if not files:
        return []
    if mode == "tree":
        return [Unit(display(top, shown), "files", top, files=tuple(files), reads=tuple(files))]
    if mode == "file":
        return [Unit(display(f, shown), "files", f.parent, files=(f,), reads=(f,)) for f in files]
    by_folder: dict[Path, list[Path]] = {}
    for f in files:
        by_folder.setdefault(f.parent, []).append(f)
    return [
        Unit(display(folder, shown), "files", folder, files=tuple(fs), reads=tuple(fs))
        for folder, fs in by_folder.items()
    ]


def _kustomize_unit(k: Kustomization, known: Mapping[Path, Kustomization], shown: str, allow_remote: bool) -> Unit:
    reads: list[Path] = []
    resources: list[Path] = []
    problems: list[str] = []
    remote: list[str] = []
    inflates_helm = False
    for each in closure(k, known):
        reads += [each.file, *each.files]
        resources += each.resources
        inflates_helm = inflates_helm or bool(each.helm_charts)
        remote += each.remote
        if each.problem:
            problems.append(each.problem if each is k else f"{display(each.file, shown)}: {each.problem}")
    problem = None
    if remote and not allow_remote:
        problem = (
            f"remote base {remote[0]!r} not fetched: remote resources are off unless you allow them "
            "(--allow-remote-bases), and a CI without network cannot fetch them"
        )
    elif problems:
        problem = problems[0]
    return Unit(
        display(k.folder, shown),
        "kustomize",
        k.folder,
        problem=problem,
        reads=tuple(dict.fromkeys(reads)),
        resources=tuple(dict.fromkeys(resources)),
        inflates_helm=inflates_helm,
    )


def judged_alone(parts: Sequence[Unit]) -> str:
    """What a kustomization that does not render says of the ones it uses
    that are judged on their own instead."""
    names = ", ".join(p.name for p in parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    return f"; what it uses that renders is judged on its own: {names}"


def _renderable_parts(
    k: Kustomization, known: Mapping[Path, Kustomization], shown: str, allow_remote: bool, done: set[Path]
) -> list[Unit]:
    """The largest kustomizations under ``k`` (which cannot be rendered) that
    can: judged as units of their own, so one remote base does not leave a
    whole tree unjudged. Components never alone; each folder once."""
    out: list[Unit] = []
    for folder in k.folders:
        if folder in done:
            continue
        done.add(folder)
        child = _known_or_read(folder, known)
        if child is None or child.component:
            continue
        unit = _kustomize_unit(child, known, shown, allow_remote)
        out += [unit] if unit.problem is None else _renderable_parts(child, known, shown, allow_remote, done)
    return out


def closure(k: Kustomization, known: Mapping[Path, Kustomization]) -> list[Kustomization]:
    """``k`` and every kustomization it reaches, each once, ``k`` first. A
    folder outside the tree is read when reached (a base beside it)."""
    out: list[Kustomization] = []
    seen: set[Path] = set()
    stack = [k]
    while stack:
        each = stack.pop()
        if each.folder in seen:
            continue
        seen.add(each.folder)
        out.append(each)
        for folder in reversed(each.folders):
            if folder in seen:
                continue
            found = _known_or_read(folder, known)
            if found is not None:
                stack.append(found)
    return out


def _known_or_read(folder: Path, known: Mapping[Path, Kustomization]) -> Kustomization | None:
    """The kustomization in ``folder``: found in the tree, or read (a base outside it)."""
    if folder in known:
        return known[folder]
    file = kustomization_in(folder)
    return read_kustomization(file) if file is not None else None


def kustomization_in(directory: Path) -> Path | None:
    for name in KUSTOMIZATION_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


# A list item in a comment that names a manifest or a folder:
# `# - ./job-dual-gpu.yaml`, `# - functionary`.
_COMMENTED_ITEM = r"(?m)^\s*#+\s*-\s*['\"]?([^\s'\"#:]+?)/?['\"]?\s*$"  # compiled on first use


def _commented_out(text: str, folder: Path) -> list[Path]:
    """The manifests and kustomization folders of ``folder`` and below that
    a comment of its kustomization lists, as a resource written and then
    switched off."""
    found = []
    for name in re.findall(_COMMENTED_ITEM, text):
        path = Path(os.path.normpath(folder / name))
        if not path.is_relative_to(folder) or path == folder:
            continue
        if (path.is_file() and path.name.endswith((".yaml", ".yml", ".json"))) or (
            path.is_dir() and kustomization_in(path) is not None
        ):
            found.append(path)
    return found


def read_kustomization(file: Path, *, top: Path | None = None) -> Kustomization:
    """What a kustomization file names, resolved against its folder: every
    file kustomize reads to build it (resources, patches, generator inputs,
    replacements, CRDs, OpenAPI schemas, Helm values files, the plugin
    configs it names and the files they name). Never raises: a file that
    cannot be read says so in ``problem``. ``top``: the folder the user
    named, where the charts its helmCharts inflate may lie (as may anything
    in the repository holding it)."""
    folder = file.parent
    k = Kustomization(folder, file, False, [], [], [], [])
    try:
        text = read_text(file, limit=_MAX_KUSTOMIZATION_BYTES, what="kustomization")
        data, _ = load_yaml_with_lines(text)
    except (FileReadError, YamlLimitError, yaml.YAMLError, RecursionError) as exc:
        k.problem = f"cannot read it: {str(exc).splitlines()[0][:200]}"
        k.unreadable = True
        return k
    k.commented_out = _commented_out(text, folder)
    if not isinstance(data, dict):
        k.problem = "not a kustomization (no mapping at the top level)"
        k.unreadable = True
        return k
    k.component = data.get("kind") == "Component"
    missing: list[str] = []

    def local(entry: Any, *, resource: bool = False, folder_ok: bool = True, required: bool = True) -> Path | None:
        """The file ``entry`` names, recorded; None for a folder, a remote or a missing one."""
        if not isinstance(entry, str) or not entry.strip() or "\n" in entry.strip():
            return None  # an inline patch or plugin config
        entry = entry.strip()
        if re.match(_REMOTE, entry) and not (folder / entry).exists():
            k.remote.append(entry)
            return None
        path = Path(os.path.normpath(folder / entry))
        if path.is_dir() and folder_ok:
            k.folders.append(path)
        elif path.is_file():
            k.files.append(path)
            if resource:
                k.resources.append(path)
            return path
        elif not path.exists() and required:
            missing.append(entry)
        return None

    for entry in _strings(data.get("resources")) + _strings(data.get("bases")):
        local(entry, resource=True)
    for entry in _strings(data.get("components")):
        local(entry)
    for entry in _strings(data.get("crds")):
        local(entry, folder_ok=False)
    for key in ("patches", "patchesJson6902", "patchesStrategicMerge", "replacements"):
        for entry in _as_list(data.get(key)):
            if isinstance(entry, str) and "\n" not in entry and entry.strip().endswith(MANIFEST_SUFFIXES):
                local(entry, folder_ok=False)  # patchesStrategicMerge lists files, or inline patches
            elif isinstance(entry, dict) and isinstance(entry.get("path"), str):
                local(entry["path"], folder_ok=False)
    for key in ("configMapGenerator", "secretGenerator"):
        for generator in _as_list(data.get(key)):
            if isinstance(generator, dict):
                for entry in _generator_inputs(generator):
                    local(entry, folder_ok=False)
    openapi = data.get("openapi")
    if isinstance(openapi, dict):
        local(openapi.get("path"), folder_ok=False)
    pulled: list[str] = []
    for key in ("helmCharts", "helmChartInflationGenerator"):
        for chart in _as_list(data.get(key)):
            if isinstance(chart, dict):
                for entry in _values_files(chart):
                    local(entry, folder_ok=False)
                found = _local_chart(folder, chart, data.get("helmGlobals"), top)
                if isinstance(found, Path):
                    k.helm_charts.append(found)
                    k.files += _files_below(found)
                else:
                    pulled.append(found)
    for key in ("generators", "transformers", "validators"):
        for entry in _strings(data.get(key)):
            # A builtin plugin's config names files too (a PatchTransformer's
            # patch), relative to this kustomization; an inline config is text.
            config = entry if "\n" in entry else local(entry)
            for named in _plugin_inputs(config):
                local(named, folder_ok=False, required=False)  # a plugin's own field may be no path
    for entry in _strings(data.get("configurations")):
        local(entry)
    if pulled:
        k.problem = f"it inflates Helm chart {pulled[0]}" + (f" and {len(pulled) - 1} more" if len(pulled) > 1 else "")
    elif missing:
        k.problem = f"it reads {missing[0]!r}, which is not in the repository (a file another tool generates?)" + (
            f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        )
    return k


def _local_chart(folder: Path, entry: Mapping[str, Any], helm_globals: Any, top: Path | None) -> Path | str:
    """The chart folder a helmCharts ``entry`` inflates, when the repository
    holds it (under helmGlobals.chartHome, else the kustomization's
    `charts/`): kustomize then renders it as it is, with no pull. Otherwise
    why it cannot be rendered here: a chart kustomize would pull from its
    repository (a check fetches nothing), or one that leads outside the
    repository (helm would read what it leads to)."""
    name = entry.get("name")
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        return "with no chart name kustomize can find"
    if isinstance(helm_globals, Mapping) and helm_globals.get("configHome"):
        # helm writes its config there: a check writes nothing outside its output
        return f"{name!r} with helmGlobals.configHome set, where helm would write"
    home = helm_globals.get("chartHome") if isinstance(helm_globals, Mapping) else None
    chart = Path(os.path.normpath(folder / (home if isinstance(home, str) and home else "charts") / name))
    version, repo = entry.get("version"), entry.get("repo")
    if not (chart / "Chart.yaml").is_file():
        where = f" from {repo}" if isinstance(repo, str) and repo else ""
        return f"{name!r}, which kustomize pulls{where}: it is not in the repository, and a check fetches nothing"
    held = _chart_data(chart).get("version")
    if isinstance(repo, str) and repo and version is not None and str(version) != str(held):
        # kustomize pulls the version named when the chart at hand is another
        return f"{name!r} {version}, which kustomize pulls from {repo}: the repository holds another version"
    roots = (*command_line_roots(folder, cwd=folder), *((top,) if top is not None else ()))
    try:
        for path in (chart, *(p for p in _files_below(chart) if p.is_symlink())):
            confined(path, roots, what="Helm chart")
    except OutsideRootError as exc:
        return f"{name!r}: {exc.problem}"
    return chart


def _files_below(folder: Path) -> list[Path]:
    """Every file under ``folder`` (links not followed), in a stable order."""
    return sorted(Path(d, n) for d, _, names in os.walk(folder) for n in names)


def _generator_inputs(generator: Mapping[str, Any]) -> list[str]:
    """The files a ConfigMap or Secret generator reads (``files`` entries may be ``key=path``)."""
    files = [entry.split("=", 1)[-1] for entry in _strings(generator.get("files"))]
    return [*files, *_strings(generator.get("envs")), *_strings([generator.get("env")])]


def _values_files(chart: Mapping[str, Any]) -> list[str]:
    """The values files a ``helmCharts`` (or the older ``helmChartInflationGenerator``) entry reads."""
    return [
        *_strings([chart.get("valuesFile"), chart.get("values")]),
        *_strings(chart.get("additionalValuesFiles")),
    ]


def _plugin_inputs(config: Path | str | None) -> list[str]:
    """The files the plugin configs in ``config`` (a file, or inline text)
    name, as kustomize's builtin plugins name them: a patch (``path``,
    ``paths``), a generator's inputs, values files, replacements."""
    if config is None:
        return []
    read = ReadResult()
    if isinstance(config, Path):
        try:
            text = read_text(config, limit=_MAX_KUSTOMIZATION_BYTES, what="plugin config")
        except FileReadError:
            return []  # kustomize says why when it builds
        read_manifest_text(text, str(config), read)
    else:
        read_manifest_text(config, "inline plugin config", read)
    out: list[str] = []
    for doc in [*read.documents, *read.bare]:
        obj = doc.obj
        out += _strings([obj.get("path")]) + _strings(obj.get("paths"))
        out += _generator_inputs(obj) + _values_files(obj)
        out += [r["path"] for r in _as_list(obj.get("replacements")) if isinstance(r, dict) and "path" in r]
    return out


def units_for_changed(repository: Repository, changed: Iterable[Path]) -> tuple[list[Unit], list[Path]]:
    """The units a set of changed files touches (a base: every root that
    uses it; a template or values file: its chart; a plain file: its unit),
    and the changed files that belong to no unit (not manifests, or read by
    nothing)."""
    files = [Path(os.path.abspath(f)) for f in changed]
    touched: list[Unit] = []
    alone: list[Path] = []
    for file in files:
        package = _package_of(file, None, repository.root)
        # A plain file beside a kustomization is its plain unit's, not the kustomization's.
        hits = [u for u in repository.units if u.kind == "files" and file in u.files]
        hits = hits or [u for u in repository.units if _reads(u, file, package)]
        if not hits:
            alone.append(file)
        touched += [u for u in hits if u not in touched]
    return touched, alone


def _reads(unit: Unit, file: Path, package: Path | None) -> bool:
    if unit.kind == "helm":
        return any(file == r or file.is_relative_to(r) for r in unit.reads)
    if unit.kind == "kustomize":
        # a file in a kustomization's folder it does not name yet (a new patch), and holding no
        # object (else it is a plain file's), belongs to it too
        return file in unit.reads or (package is not None and any(r.parent == package for r in unit.reads))
    return file in unit.files


def _package_of(file: Path, kustomizations: Mapping[Path, Kustomization] | None, top: Path) -> Path | None:
    """The folder of the nearest kustomization at or above ``file``'s folder, up to ``top``."""
    return next(_packages_of(file, kustomizations, top), None)


def _packages_of(file: Path, kustomizations: Mapping[Path, Kustomization] | None, top: Path) -> Iterator[Path]:
    """The folders of the kustomizations at or above ``file``'s folder, up to ``top``, nearest first."""
    folder = file.parent
    while True:
        known = folder in kustomizations if kustomizations is not None else kustomization_in(folder) is not None
        if known:
            yield folder
        if folder == top or folder.parent == folder or not folder.is_relative_to(top):
            return
        folder = folder.parent


def is_template_name(name: str) -> bool:
    # Every template name holds one of these: most files' names are tested
    # without compiling a pattern.
    if not any(part in name for part in _TEMPLATE_PARTS):
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in _TEMPLATE_NAMES)


def display(path: Path | str, shown: str) -> str:
    """``path`` as the user would write it: relative to the working
    directory when they named what holds it (``shown``) relatively, else
    absolute."""
    return str(path) if os.path.isabs(shown) else os.path.relpath(path)


def _walk(root: Path) -> Iterator[tuple[Path, list[str]]]:
    """(folder, sorted file names) under ``root``, version control, caches
    and dependency folders left out (manifests.SKIP_DIRS); symlinked folders
    are not followed (a link may lead anywhere)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        yield Path(dirpath), sorted(filenames)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _strings(value: Any) -> list[str]:
    return [v for v in _as_list(value) if isinstance(v, str)]
