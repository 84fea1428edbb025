"""The PolicyReport write step against a real API server and etcd (the
control plane of tests/controlplane, where it is built): the reports of a
namespace with 3,000 pending GPU pods are accepted (one 3.4 MB report was
refused: etcd stores 1.5 MiB per object), and the reports a later run no
longer writes are pruned (issue 32, item 7); the write step's ServiceAccount
may write PolicyReports and nothing else, and the audit's may not write them
(item 10). The kubectl steps run exactly as the CronJob
gpuaudit-policyreports-apply lists them, with that ServiceAccount's token.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane import controlplane
from tests.robustness.processes import gpuaudit
from tests.robustness.test_policyreport_split import _pending_pods
from tests.test_deploy import BUILDS, DEPLOY, kustomize, pod_spec, tool_path

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
KUBECTL = shutil.which("kubectl", path=tool_path())

pytestmark = pytest.mark.skipif(
    controlplane.missing() is not None or KUBECTL is None,
    reason=f"no real control plane: {controlplane.missing()}",
)


def run_kubectl(config: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(config), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def plane(tmp_path_factory) -> Iterator[Any]:
    with controlplane.running(tmp_path_factory.mktemp("controlplane"), scheduler=False) as plane:
        admin = plane.kubeconfig(controlplane.ADMIN_TOKEN, "admin")
        for name in ("policyreports", "clusterpolicyreports"):
            proc = run_kubectl(admin, "apply", "-f", str(SCHEMAS / f"wgpolicyk8s.io_{name}.yaml"))
            assert proc.returncode == 0, proc.stderr
        established = run_kubectl(
            admin,
            "wait",
            "--for=condition=Established",
            "crd/policyreports.wgpolicyk8s.io",
            "crd/clusterpolicyreports.wgpolicyk8s.io",
        )
        assert established.returncode == 0, established.stderr
        built = subprocess.run(
            [str(KUBECTL), "kustomize", str(BUILDS["policyreports"])], capture_output=True, text=True, check=True
        ).stdout
        proc = run_kubectl(admin, "apply", "-f", "-", stdin=built)
        assert proc.returncode == 0, proc.stderr
        yield plane


def _steps() -> list[list[str]]:
    """The kubectl arguments of gpuaudit-policyreports-apply, in order."""
    docs = kustomize(str(KUBECTL), BUILDS["policyreports"])
    job = next(d for d in docs if d["kind"] == "CronJob" and d["metadata"]["name"] == "gpuaudit-policyreports-apply")
    spec = pod_spec(job)
    return [list(c["args"]) for c in [*spec["initContainers"], *spec["containers"]]]


def _publish(plane: Any, writer: Path, snapshot: dict, work: Path) -> set[tuple[str, str, str]]:
    """gpuaudit writes the reports of ``snapshot``; the three kubectl steps
    apply, label and prune them as the writer. Returns what the file held."""
    path = work / "snap.json"
    path.write_text(json.dumps(snapshot))
    reports = work / "policyreports.yaml"
    run = gpuaudit("audit", "--snapshot", str(path), "--format", f"policyreport={reports}", cwd=work, timeout=300)
    assert run.code in (0, 1, 2), run.stderr
    docs = [d for d in yaml.safe_load_all(reports.read_text()) if d]
    admin = plane.kubeconfig(controlplane.ADMIN_TOKEN, "admin")
    for namespace in {d["metadata"]["namespace"] for d in docs if d["kind"] == "PolicyReport"}:
        run_kubectl(admin, "create", "namespace", namespace)
    run_id = str(uuid.uuid4())
    for args in _steps():
        args = [
            a.replace("$(RUN_ID)", run_id).replace("/data/policyreports/policyreports.yaml", str(reports)) for a in args
        ]
        proc = run_kubectl(writer, *args)
        assert proc.returncode == 0, f"kubectl {args[0]}: {proc.stderr[-2000:]}"
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs}


def _in_cluster(plane: Any) -> set[tuple[str, str, str]]:
    found = set()
    for kind in ("PolicyReport", "ClusterPolicyReport"):
        for obj in plane.admin.list("wgpolicyk8s.io/v1alpha2", kind):
            found.add((kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]))
    return found


def test_split_reports_are_stored_and_the_stale_ones_pruned(plane, tmp_path):
    token = plane.service_account_token("gpuaudit", "gpuaudit-policyreports")
    writer = plane.kubeconfig(token, "policyreports-writer")

    crowded = _publish(plane, writer, _pending_pods(3000), tmp_path)
    assert len([k for k in crowded if k[1] == "batch"]) > 1  # split
    assert _in_cluster(plane) == crowded  # every part stored by etcd

    calm = _publish(plane, writer, _pending_pods(0), tmp_path)
    assert not [k for k in calm if k[1] == "batch"]
    assert _in_cluster(plane) == calm  # the batch namespace's reports are gone


def test_the_writer_writes_policyreports_and_nothing_else_and_gpuaudit_writes_nothing(plane, tmp_path):
    writer = plane.kubeconfig(plane.service_account_token("gpuaudit", "gpuaudit-policyreports"), "writer")
    for args in (("get", "pods", "-A"), ("get", "secrets", "-n", "gpuaudit"), ("get", "nodes")):
        proc = run_kubectl(writer, *args)
        assert proc.returncode != 0 and "forbidden" in proc.stderr, args
    reader = plane.kubeconfig(plane.service_account_token("gpuaudit", "gpuaudit"), "reader")
    report = {
        "apiVersion": "wgpolicyk8s.io/v1alpha2",
        "kind": "ClusterPolicyReport",
        "metadata": {"name": "gpuaudit-probe"},
        "results": [],
    }
    proc = run_kubectl(reader, "apply", "--server-side", "-f", "-", stdin=json.dumps(report))
    assert proc.returncode != 0 and "forbidden" in proc.stderr
    assert run_kubectl(reader, "get", "nodes").returncode == 0  # what it is for: reading
    assert (DEPLOY / "components" / "policyreports" / "rbac.yaml").is_file()
