"""Fixtures that start the real control plane (tests/controlplane/controlplane.py).

Each test module gets its own etcd, kube-apiserver and kube-scheduler (module
scope): the scheduling tests need nodes of their own, so that the scheduler's
messages name only the reasons they set up. Everything skips, with the reason,
where the binaries have not been built (scripts/build-control-plane.sh, which
scripts/test.sh runs, builds them).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controlplane import controlplane
from tests.controlplane.controlplane import ControlPlane

ROOT = controlplane.ROOT


def pytest_collection_modifyitems(config, items):
    reason = controlplane.missing()
    if reason is None:
        return
    marker = pytest.mark.skip(reason=f"no real control plane: {reason}")
    for item in items:
        if "tests/controlplane" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(marker)


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory) -> Iterator[ControlPlane]:
    reason = controlplane.missing()
    if reason:
        pytest.skip(f"no real control plane: {reason}")
    with controlplane.running(tmp_path_factory.mktemp("controlplane")) as plane:
        yield plane


def gpuaudit(*args: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the installed ``gpuaudit`` as a user would: a real process."""
    exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout, check=False)


@functools.cache
def _snapshot_file_option() -> str:
    """``--output-file`` where the CLI has it, else the older ``-o``."""
    exe = shutil.which("gpuaudit") or str(Path(sys.executable).with_name("gpuaudit"))
    help_text = subprocess.run([exe, "snapshot", "--help"], capture_output=True, text=True, check=False).stdout
    return "--output-file" if "--output-file" in help_text else "-o"


def take_snapshot(config: Path, path: Path, cwd: Path) -> subprocess.CompletedProcess:
    """``gpuaudit snapshot`` of the cluster ``config`` points at, into ``path``."""
    return gpuaudit("snapshot", "--kubeconfig", str(config), _snapshot_file_option(), str(path), cwd=cwd)


def kubectl(
    plane: ControlPlane, *args: str, token: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """``kubectl`` from .tools/bin (or PATH) against the control plane."""
    exe = shutil.which("kubectl", path=str(ROOT / ".tools" / "bin")) or shutil.which("kubectl")
    if exe is None:
        pytest.skip("kubectl is not installed (scripts/install-kube-tools.py)")
    config = plane.kubeconfig(token or controlplane.ADMIN_TOKEN, "kubectl-admin" if token is None else "kubectl-user")
    return subprocess.run(
        [exe, "--kubeconfig", str(config), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def load_json(path: Path) -> dict:
    return json.loads(path.read_text())
