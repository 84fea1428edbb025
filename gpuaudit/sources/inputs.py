"""Everything `gpuaudit check` reads: files, directories, stdin, kustomize
directories (rendered) and Helm charts (rendered).

A directory holding a kustomization is rendered as a unit when kubectl or
kustomize is on PATH; the files it consumed (its own, and bases it reaches
outside itself) are then not read again as plain manifests — a patch file
is not an object. Without either tool it says so and reads the files as
they are.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from gpuaudit.model import InputError
from gpuaudit.sources import kustomize
from gpuaudit.sources.manifests import ReadResult, iter_manifest_files, read_files, read_paths


def read_inputs(
    paths: Sequence[str],
    stdin_text: str | None = None,
    *,
    render_kustomize: bool = True,
    helm_charts: Sequence[Path] = (),
    helm_values: Sequence[Path] = (),
) -> ReadResult:
    result = ReadResult()
    plain: list[str] = []
    directories: list[str] = []
    for path in paths:
        (directories if path != "-" and Path(path).is_dir() else plain).append(path)
    _merge(result, read_paths(plain, stdin_text=stdin_text))
    for directory in directories:
        _read_directory(Path(directory), directory, render_kustomize, result)
    for chart in helm_charts:
        _merge(result, kustomize.render_helm_chart(chart, helm_values))
    return result


def _read_directory(root: Path, shown: str, render: bool, result: ReadResult) -> None:
    roots = _kustomization_dirs(root) if render else []
    consumed: set[Path] = set()
    if roots:
        command = kustomize.kustomize_command()
        if command is None:
            result.errors.append(
                InputError(
                    str(kustomize.kustomization_in(roots[0]) or roots[0]),
                    None,
                    f"{len(roots)} kustomization(s) under {shown} not rendered: neither kubectl "
                    "nor kustomize is on PATH; their files are audited as plain manifests",
                    level="warning",
                )
            )
        else:
            for directory in roots:
                rendered = kustomize.render_kustomization(directory, command, shown)
                _merge(result, rendered.result)
                consumed |= rendered.consumed
                # A directory that failed to build is not read file by file either:
                # its patches are fragments, not objects.
                consumed |= {p.resolve() for p in iter_manifest_files(directory)}
    files = [f for f in iter_manifest_files(root) if not (consumed and f.resolve() in consumed)]
    read_files(files, result)  # on all cores when there are many


def _kustomization_dirs(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        here = Path(dirpath)
        if kustomize.kustomization_in(here) is not None:
            found.append(here)
    return found


def _merge(into: ReadResult, part: ReadResult) -> None:
    into.documents.extend(part.documents)
    into.errors.extend(part.errors)
    into.bare.extend(part.bare)
    into.files += part.files
