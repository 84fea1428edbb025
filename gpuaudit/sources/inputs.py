"""Everything `gpuaudit check` reads, cut into deployable units
(sources/units.py): files, folders, stdin, kustomize roots and Helm charts
(rendered, in parallel, from the render cache when nothing changed).

A unit that cannot be rendered is reported once, with the reason, as an
error (``render_errors="fail"``, the default: an audit that skipped a unit
is partial, exit 2) or as a warning (``"warn"``), when the unit's own
resource files that parse are judged as plain files instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from gpuaudit.files import OutsideRootError, confined, repository_root
from gpuaudit.model import InputError
from gpuaudit.sources.manifests import MANIFEST_SUFFIXES, ReadResult, read_file, read_paths
from gpuaudit.sources.units import (
    PlainFiles,
    Repository,
    Unit,
    discover,
    display,
    judged_alone,
    plain_units,
    units_for_changed,
)
from gpuaudit.sources.user_config import Config, ConfigError


class FoundFile(msgspec.Struct, frozen=True):
    """A file to read that the user did not name: found by walking a folder
    they named, or picked by pre-commit's file-type filter (--changed-files).
    One that does not read and names no apiVersion or kind is a warning,
    not an error (manifests.read_file)."""

    path: Path


# One thing to audit: a file still to read (named, or found), or what was read already.
Item = Path | FoundFile | ReadResult

# sources/kustomize.py and sources/helm.py (and subprocess, shutil and
# tempfile) are imported only when a unit is rendered: pre-commit's plain
# files never need them.


class InputOptions(msgspec.Struct, frozen=True):
    """How the input is read: the command line's choices, then the config's."""

    render: bool = True  # render kustomize roots and charts (--no-kustomize: read them as files)
    helm_charts: tuple[Path, ...] = ()  # --helm-chart: rendered with helm_values
    helm_values: tuple[Path, ...] = ()
    load_anywhere: bool = False  # kustomize may read files outside a kustomization's folder
    allow_remote: bool = False  # kustomize may fetch remote bases
    plain_files: PlainFiles = "folder"
    render_errors: str = "fail"  # fail | warn
    chart_values: Mapping[Path, tuple[tuple[Path, ...], ...]] = msgspec.field(default_factory=dict)
    changed_files: bool = False  # the paths are changed files: audit the units they touch


class ManifestOptions(msgspec.Struct, frozen=True):
    """How the command line asks for the input to be read; what it leaves
    open (None), the config's ``repository:`` decides (:meth:`resolve`)."""

    helm_charts: tuple[Path, ...] = ()
    helm_values: tuple[Path, ...] = ()
    render: bool = True
    load_anywhere: bool = False
    allow_remote: bool = False
    plain_files: PlainFiles | None = None
    render_errors: str | None = None
    changed_files: bool = False

    def resolve(self, config: Config) -> InputOptions:
        """These choices, then the config's ``repository:``. Chart values
        files the config names must lie inside the repository (the config is
        the repository's, not the user's): a ConfigError otherwise."""
        repository = config.repository or {}
        chart_values: dict[Path, tuple[tuple[Path, ...], ...]] = {}
        if config.path is not None and repository.get("charts"):
            base = config.path.parent
            roots = (repository_root(base),)
            for chart, lists in repository["charts"].items():
                try:
                    folder = confined(base / chart, roots, what="chart folder")
                    chart_values[folder] = tuple(
                        tuple(confined(base / v, roots, what="values file") for v in values) for values in lists
                    )
                except OutsideRootError as exc:
                    raise ConfigError(f"{config.path}: repository.charts: {exc}") from None
        return InputOptions(
            render=self.render,
            helm_charts=self.helm_charts,
            helm_values=self.helm_values,
            load_anywhere=self.load_anywhere,
            allow_remote=self.allow_remote,
            plain_files=self.plain_files or repository.get("plain_files") or "folder",
            render_errors=self.render_errors or repository.get("render_errors") or "fail",
            chart_values=chart_values,
            changed_files=self.changed_files,
        )


class UnitInput(msgspec.Struct):
    """One unit's input: what to read, in order."""

    name: str
    items: list[Item]
    # A folder of plain files: files in it that define one object differently
    # are alternatives, judged each as a variant of it (pipelines/check.py).
    alternatives: bool = False


def gather_units(
    paths: Sequence[str],
    stdin_text: str | None = None,
    options: InputOptions | None = None,
    known: Mapping[str, ReadResult] | None = None,
) -> list[UnitInput]:
    """Every unit to audit, in order: files are left to read where they are
    audited (perhaps another core: pipelines/shards.py); stdin, rendered
    units and problems come read already (a unit named "" holds problems
    that belong to no unit). ``known``: what the caller read already, by the
    name it was read under ('-' for stdin): taken as read, not read again."""
    options = options or InputOptions()
    known = known or {}
    units: list[UnitInput] = []
    problems = ReadResult()
    loose: list[Path] = []
    for path in paths:
        if path == "-":
            stdin = known.get(path) or read_paths([path], stdin_text=stdin_text)
            units.append(UnitInput("<stdin>", [stdin]))
        elif not os.path.lexists(path):
            problems.errors.append(InputError(path, None, "no such file or directory"))
        elif options.changed_files and options.render and Path(path).is_file():
            loose.append(Path(path))
        elif Path(path).is_dir():
            repository = _discover(Path(path), path, options)
            units += _render_all(repository.units, options)
            problems.errors += _template_warnings(repository, path)
        else:
            units += _plain(Path(path), path, options)
    if loose:
        units += _changed(loose, options)
    if options.helm_charts:
        from gpuaudit.sources.helm import render_helm_chart

        for chart in options.helm_charts:
            name = str(chart)
            units.append(UnitInput(name, [render_helm_chart(chart, options.helm_values, label=name)]))
    if problems.errors:
        units.insert(0, UnitInput("", [problems]))
    if known:
        units = [msgspec.structs.replace(u, items=[_known(item, known) for item in u.items]) for u in units]
    return units


def _known(item: Item, known: Mapping[str, ReadResult]) -> Item:
    if isinstance(item, FoundFile):
        return known.get(str(item.path), item)
    return known.get(str(item), item) if isinstance(item, Path) else item


def read_items(items: Sequence[Item], result: ReadResult) -> None:
    for item in items:
        if isinstance(item, Path):
            read_file(item, result)
        elif isinstance(item, FoundFile):
            read_file(item.path, result, found=True)
        else:
            result.documents.extend(item.documents)
            result.errors.extend(item.errors)
            result.bare.extend(item.bare)
            result.files += item.files


def _plain(file: Path, shown: str, options: InputOptions, *, named: bool = True) -> list[UnitInput]:
    """A file named on the command line (``named``; else one pre-commit
    picked): a files unit of its own folder (or itself)."""
    [unit] = plain_units([Path(os.path.abspath(file))], shown, Path.cwd(), options.plain_files)
    item: Item = file if named else FoundFile(file)
    if options.plain_files == "file":
        return [UnitInput(shown, [item])]
    return [UnitInput(unit.name, [item], alternatives=options.plain_files == "folder")]


def _discover(root: Path, shown: str, options: InputOptions) -> Repository:
    return discover(
        root,
        shown,
        plain_files=options.plain_files,
        chart_values=options.chart_values,
        allow_remote=options.allow_remote,
        render=options.render,
    )


def _changed(files: Sequence[Path], options: InputOptions) -> list[UnitInput]:
    """The units the changed ``files`` touch, found in the repository they lie in."""
    top = repository_root()
    repository = _discover(top, os.path.relpath(top), options)
    touched, alone = units_for_changed(repository, files)
    # A folder of plain files is judged on the files that changed: a commit
    # is not blocked by what its unchanged neighbours say.
    changed = {f.resolve() for f in files}
    touched = [
        msgspec.structs.replace(u, files=tuple(f for f in u.files if f.resolve() in changed)) if u.files else u
        for u in touched
    ]
    out = _render_all(touched, options)
    templates = {t.resolve() for t in repository.templates}
    libraries = [Path(os.path.realpath(c)) for c in repository.libraries]
    for file in alone:
        if any(file.resolve().is_relative_to(c) for c in libraries):
            continue  # a library chart's file no chart here depends on: nothing renders it
        if file.name.endswith(MANIFEST_SUFFIXES) and file.resolve() not in templates:
            shown = os.path.relpath(file)  # a manifest no unit reads (hidden folders)
            out += _plain(Path(shown), shown, options, named=False)
    return out


def _render_all(units: Sequence[Unit], options: InputOptions) -> list[UnitInput]:
    """Each unit's input; renders run side by side (each is a subprocess)."""
    to_render = [u for u in units if u.kind != "files" and u.problem is None]
    rendered: dict[str, ReadResult] = {}
    if len(to_render) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(len(to_render), os.cpu_count() or 1)) as pool:
            results = pool.map(lambda u: _render(u, options), to_render)
            rendered = {u.name: r for u, r in zip(to_render, results, strict=True)}
    elif to_render:
        rendered = {to_render[0].name: _render(to_render[0], options)}
    # A kustomize root that failed to render: the bases it uses that render
    # alone are judged on their own, each once, unless they are units already.
    fallback = {
        p.name: p
        for unit in to_render
        if unit.kind == "kustomize" and options.render_errors != "warn" and _failed(rendered[unit.name])
        for p in unit.parts
        if p.name not in rendered
    }
    if fallback:
        rendered.update({p.name: _render(p, options) for p in fallback.values()})
        # One that fails as well adds nothing to what its root's error says.
        fallback = {name: p for name, p in fallback.items() if not _failed(rendered[name])}
    out: list[UnitInput] = []
    for unit in units:
        if unit.kind == "files":  # each file named in the style the user named the tree
            files: list[Item] = [FoundFile(Path(display(f, unit.name))) for f in unit.files]
            out.append(UnitInput(unit.name, files, alternatives=options.plain_files == "folder"))
        elif unit.problem is not None:
            out.append(_unrendered(unit, InputError(unit.name, None, unit.problem), options))
        elif _failed(rendered[unit.name]):
            first, *others = rendered[unit.name].errors  # the render failed: its first error says why
            through = _chart_rendered_through(unit, units, rendered)
            if through:
                out.append(_variant_unrendered(unit, first, through))
                continue
            parts = [p for p in unit.parts if p.name in fallback]
            if parts:
                first = msgspec.structs.replace(first, message=first.message + judged_alone(parts))
            out.append(_unrendered(unit, first, options, others))
        else:
            out.append(UnitInput(unit.name, [rendered[unit.name]]))
    for part in fallback.values():
        out.append(UnitInput(part.name, [rendered[part.name]]))
    return out


def _failed(result: ReadResult) -> bool:
    return not result.documents and any(e.level == "error" for e in result.errors)


def _chart_rendered_through(unit: Unit, units: Sequence[Unit], rendered: Mapping[str, ReadResult]) -> list[str]:
    """The other variants of ``unit``'s chart that rendered, where ``unit`` is
    its defaults or a values file found beside them (not one the user named):
    a chart whose defaults need values its values files give (a `required`
    value) is audited through those files."""
    if unit.kind != "helm" or (unit.values and not unit.found_values):
        return []
    return [
        u.name
        for u in units
        if u.kind == "helm" and u.root == unit.root and u.name != unit.name and u.name in rendered
        if rendered[u.name].documents
    ]


def _variant_unrendered(unit: Unit, why: InputError, through: Sequence[str]) -> UnitInput:
    reason = why.message.removeprefix("not rendered: ")
    variants = ", ".join(through)
    message = f"helm unit not rendered: {reason}; its chart is audited as {variants}"
    return UnitInput(unit.name, [ReadResult(errors=[InputError(why.file, why.line, message, "warning")])])


def _render(unit: Unit, options: InputOptions) -> ReadResult:
    """The unit rendered (no object and an error when it could not be)."""
    if unit.kind == "helm":
        from gpuaudit.sources.helm import render_helm_chart

        return render_helm_chart(Path(display(unit.root, unit.name)), unit.values, label=unit.name)
    from gpuaudit.sources import kustomize

    command = kustomize.kustomize_command()
    if command is None:
        return ReadResult(errors=[InputError(unit.name, None, "neither kubectl nor kustomize is on PATH")])
    return kustomize.render_kustomization(
        unit.root,
        command,
        unit.name,
        load_anywhere=options.load_anywhere,
        reads=unit.reads,
        enable_helm=unit.inflates_helm,
    )


def _unrendered(unit: Unit, why: InputError, options: InputOptions, others: Sequence[InputError] = ()) -> UnitInput:
    """A unit that could not be rendered, reported where ``why`` points (the
    kustomization kustomize refused, else the unit): an error (fail), or a
    warning and its plain resource files judged as files (warn)."""
    reason = why.message.removeprefix("not rendered: ")
    if options.render_errors == "warn":
        files = [Path(display(f, unit.name)) for f in unit.resources if f.name.endswith(MANIFEST_SUFFIXES)]
        also = (
            f"; its {len(files)} resource file(s) are judged as plain files, without its patches"
            if files
            else "; it has no plain resource file to judge"
        )
        problem = InputError(why.file, why.line, f"{unit.kind} unit not rendered: {reason}{also}", "warning")
        return UnitInput(unit.name, [ReadResult(errors=[problem, *others]), *files])
    problem = InputError(
        why.file,
        why.line,
        f"{unit.kind} unit not rendered, not audited: {reason} (--render-errors warn judges its plain files instead)",
    )
    return UnitInput(unit.name, [ReadResult(errors=[problem, *others])])


def _template_warnings(repository: Repository, shown: str) -> list[InputError]:
    if not repository.templates:
        return []
    first = display(repository.templates[0], shown)
    return [
        InputError(
            first,
            None,
            f"{len(repository.templates)} file(s) under {shown} are templates for another tool "
            "(Terraform's .tftpl, .tpl/.tmpl/.template/.j2 files): not objects until rendered, skipped",
            "warning",
        )
    ]
