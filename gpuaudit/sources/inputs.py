"""Everything `gpuaudit check` reads: files, directories, stdin, kustomize
directories (rendered) and Helm charts (rendered).

A directory holding a kustomization is rendered as a unit when kubectl or
kustomize is on PATH; the files it consumed (its own, and bases it reaches
outside itself) are then not read again as plain manifests — a patch file
is not an object. Without either tool it says so and reads the files as
they are. A kustomization that reads a file outside its folder is refused
unless the user allows it (``kustomize_load_anywhere``; sources/kustomize.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from gpuaudit.model import InputError
from gpuaudit.sources.manifests import ReadResult, iter_manifest_files, read_file, read_paths

# One thing to audit: a file still to read, or what was read already.
Item = Path | ReadResult

# sources/kustomize.py (and the shutil and tempfile modules it needs) is
# imported by the functions below only when a folder may hold a
# kustomization or a chart is rendered: pre-commit's plain files never need it.


def gather_inputs(
    paths: Sequence[str],
    stdin_text: str | None = None,
    *,
    render_kustomize: bool = True,
    helm_charts: Sequence[Path] = (),
    helm_values: Sequence[Path] = (),
    kustomize_load_anywhere: bool = False,
) -> list[Item]:
    """Everything to audit, in order. Files are left to read where they are
    audited (perhaps another core: pipelines/shards.py); stdin, rendered
    kustomizations and charts, and problems come read already."""
    items: list[Item] = []
    directories: list[str] = []
    for path in paths:
        if path == "-" or not Path(path).exists():
            items.append(read_paths([path], stdin_text=stdin_text))  # stdin, or the error
        elif Path(path).is_dir():
            directories.append(path)
        else:
            items.append(Path(path))
    for directory in directories:
        items += _gather_directory(Path(directory), directory, render_kustomize, kustomize_load_anywhere)
    if helm_charts:
        from gpuaudit.sources.kustomize import render_helm_chart

        items += (render_helm_chart(chart, helm_values) for chart in helm_charts)
    return items


def read_items(items: Sequence[Item], result: ReadResult) -> None:
    for item in items:
        if isinstance(item, Path):
            read_file(item, result)
        else:
            result.documents.extend(item.documents)
            result.errors.extend(item.errors)
            result.bare.extend(item.bare)
            result.files += item.files


def _gather_directory(root: Path, shown: str, render: bool, load_anywhere: bool = False) -> list[Item]:
    roots = _kustomization_dirs(root) if render else []
    consumed: set[Path] = set()
    items: list[Item] = []
    if roots:
        from gpuaudit.sources import kustomize

        command = kustomize.kustomize_command()
        if command is None:
            problem = InputError(
                str(kustomize.kustomization_in(roots[0]) or roots[0]),
                None,
                f"{len(roots)} kustomization(s) under {shown} not rendered: neither kubectl "
                "nor kustomize is on PATH; their files are audited as plain manifests",
                level="warning",
            )
            items.append(ReadResult(errors=[problem]))
        else:
            for directory in roots:
                rendered = kustomize.render_kustomization(directory, command, shown, load_anywhere=load_anywhere)
                items.append(rendered.result)
                consumed |= rendered.consumed
                # A directory that failed to build is not read file by file either:
                # its patches are fragments, not objects.
                consumed |= {p.resolve() for p in iter_manifest_files(directory)}
    items += (f for f in iter_manifest_files(root) if not (consumed and f.resolve() in consumed))
    return items


def _kustomization_dirs(root: Path) -> list[Path]:
    from gpuaudit.sources.kustomize import kustomization_in

    found = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        here = Path(dirpath)
        if kustomization_in(here) is not None:
            found.append(here)
    return found


def enclosing_packages(paths: Sequence[str]) -> list[str]:
    """``paths`` as pre-commit passes them (changed files), with each file that
    lies in a kustomize package replaced by the package's folder: the nearest
    folder holding a kustomization, the file's own or one above it, up to the
    repository root (the nearest folder above holding ``.git``; outside a
    repository, the working directory). A patch is then audited as part of
    what it renders to, not as a fragment. A package comes once, and a file
    or package inside another one on the list is left to it. Directories,
    '-' and paths that do not exist pass unchanged."""
    out: list[str] = []
    packages: list[Path] = []  # absolute, for containment
    for path in paths:
        package = _package_of(Path(path)) if path != "-" and Path(path).is_file() else None
        if package is None:
            out.append(path)
        elif package not in packages:
            packages.append(package)
            out.append(str(package) if Path(path).is_absolute() else os.path.relpath(package))

    def inside_another(item: str) -> bool:
        full = Path(os.path.abspath(item))
        return any(full != p and full.is_relative_to(p) for p in packages)

    return [item for item in out if item == "-" or not inside_another(item)]


def _package_of(file: Path) -> Path | None:
    """The absolute folder of the kustomize package ``file`` belongs to, or None."""
    from gpuaudit.sources.kustomize import kustomization_in

    folder = Path(os.path.abspath(file)).parent
    top = _repository_root(folder) or Path(os.path.abspath(Path.cwd()))
    if not folder.is_relative_to(top):
        top = folder
    while True:
        if kustomization_in(folder) is not None:
            return folder
        if folder == top or folder.parent == folder:
            return None
        folder = folder.parent


def _repository_root(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return None
