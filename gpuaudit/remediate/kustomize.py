"""Run a real kustomize (kubectl's embedded one, or a standalone binary): the
only part of remediation that starts a program."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
LOAD_RESTRICTOR_NONE = ("--load-restrictor", "LoadRestrictionsNone")


class KustomizeError(RuntimeError):
    pass


def command() -> list[str] | None:
    """How to run kustomize here: `kubectl kustomize`, else `kustomize build`."""
    kubectl = shutil.which("kubectl")
    if kubectl:
        return [kubectl, "kustomize"]
    kustomize = shutil.which("kustomize")
    if kustomize:
        return [kustomize, "build"]
    return None


def is_package(path: Path) -> bool:
    return path.is_dir() and any((path / name).is_file() for name in KUSTOMIZATION_FILES)


def build(directory: Path, load_restrictor_none: bool = False, timeout: float = 120) -> str:
    """The YAML kustomize builds from ``directory``; KustomizeError with its message."""
    base = command()
    if base is None:
        raise KustomizeError("needs kubectl or kustomize on PATH")
    args = [*base, *(LOAD_RESTRICTOR_NONE if load_restrictor_none else ()), str(directory)]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise KustomizeError(f"kustomize build of {directory} took over {timeout:g}s") from None
    except OSError as exc:
        raise KustomizeError(f"cannot run {args[0]}: {exc}") from None
    if proc.returncode != 0:
        message = " ".join(proc.stderr.split()) or f"exit status {proc.returncode}"
        raise KustomizeError(message)
    return proc.stdout


def build_package(directory: Path) -> tuple[str, bool]:
    """Build a user's kustomize directory, as kustomize's default restrictions
    allow or, when it reads files outside its folder, without them. Returns the
    YAML and whether the restriction had to be lifted."""
    try:
        return build(directory), False
    except KustomizeError as exc:
        if "is not in or below" not in str(exc):
            raise
    return build(directory, load_restrictor_none=True), True
