"""`gpuaudit audit` and `snapshot` against a real kube-apiserver, as the
identity deploy/'s ClusterRole binds, judged by the real RBAC authorizer.

The recorded small cluster (tests/clusters/small.json) plus one workload per
ML operator (tests/controlplane/ml.py) is loaded as an admin; `kubectl apply
-k deploy/overlays/ml-operators` installs the ServiceAccount, the base
ClusterRole, the opt-in role for the operators' custom resources and their
bindings; the audit then runs with a real token of that ServiceAccount
(TokenRequest). The
cluster's two pending pods are judged by the real kube-scheduler, so their
pending causes are parsed from this Kubernetes version's own messages.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from tests.controlplane import loader, ml
from tests.controlplane.conftest import gpuaudit, kubectl, take_snapshot

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "tests" / "clusters" / "small.json"
SA_NAMESPACE, SA_NAME = "gpuaudit", "gpuaudit"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"
PENDING = {("research", "finetune-llama-m9x3r"), ("notebooks", "notebook-alice")}


def base_role() -> dict:
    for doc in yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text()):
        if doc and doc.get("kind") == "ClusterRole":
            return doc
    raise AssertionError("deploy/base/rbac.yaml has no ClusterRole")


def operator_role() -> dict:
    """The opt-in component's role (deploy/components/ml-operators)."""
    path = ROOT / "deploy" / "components" / "ml-operators" / "rbac.yaml"
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == "ClusterRole":
            return doc
    raise AssertionError(f"{path} has no ClusterRole")


# Optional resources: forbidden, the audit warns and is not partial.
OPTIONAL_BASE = {("nvidia.com", "clusterpolicies"), ("kueue.x-k8s.io", "workloads")}


def allowed(plane, group: str, resource: str, verb: str, user: str = SA_USER) -> bool:
    review = plane.admin.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{SA_NAMESPACE}", "system:authenticated"],
                "resourceAttributes": {"group": group, "resource": resource, "verb": verb},
            },
        },
    )
    return bool(review["status"].get("allowed"))


@pytest.fixture(scope="module")
def live(control_plane, tmp_path_factory):
    """The loaded cluster: (plane, the audit's kubeconfig, a work folder)."""
    plane = control_plane
    loader.install_crds(plane.admin)
    small = json.loads(SMALL.read_text())
    counts = loader.load(plane.admin, ml.merged(small))
    assert counts["pods"] == len(small["pods"]) + 5
    applied = kubectl(plane, "apply", "-k", str(ROOT / "deploy" / "overlays" / "ml-operators"))
    assert applied.returncode == 0, applied.stderr
    plane.admin.wait("the audit's role to be in force", lambda: allowed(plane, "ray.io", "rayclusters", "list"))
    token = plane.service_account_token(SA_NAMESPACE, SA_NAME)
    config = plane.kubeconfig(token, "gpuaudit")
    # The real scheduler judges the two pending pods: wait for its verdicts.
    plane.admin.wait("FailedScheduling for both pending pods", lambda: _scheduler_verdicts(plane) >= PENDING, 90)
    return plane, config, tmp_path_factory.mktemp("live")


def _scheduler_verdicts(plane) -> set[tuple[str, str]]:
    events = plane.admin.list("v1", "Event", fieldSelector="reason=FailedScheduling")
    return {(e["involvedObject"]["namespace"], e["involvedObject"]["name"]) for e in events}


def _audit(config: Path, cwd: Path, *args: str) -> tuple[int, dict, str]:
    proc = gpuaudit("audit", "--kubeconfig", str(config), "--format", "json", "--fail-on", "critical", *args, cwd=cwd)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _by_rule(report: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for finding in report["findings"]:
        out.setdefault(finding["rule"], []).append(finding)
    return out


def test_the_opt_in_role_covers_every_operator_this_cluster_runs():
    granted = {
        (g, r, v)
        for rule in operator_role()["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    running = {
        (g, r, v)
        for rule in ml.OPERATOR_RULES
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert running <= granted


def test_deploy_applies_to_a_real_api_server_and_its_role_never_grants_secrets(live):
    plane, _, _ = live
    sa = plane.admin.get(f"/api/v1/namespaces/{SA_NAMESPACE}/serviceaccounts/{SA_NAME}")
    assert sa["metadata"]["name"] == SA_NAME
    for verb in ("get", "list", "watch"):
        assert not allowed(plane, "", "secrets", verb), f"the audit's identity may {verb} secrets"
    for verb in ("create", "update", "patch", "delete"):
        assert not allowed(plane, "", "pods", verb), f"the audit's identity may {verb} pods"
    assert allowed(plane, "", "pods", "list")


def test_live_audit_end_to_end_as_the_deployed_service_account(live):
    _, config, work = live
    snap = work / "live-snapshot.json"
    code, report, stderr = _audit(config, work, "--save-snapshot", str(snap))

    assert code == 0, stderr  # no finding is critical; 2 would mean a partial (forbidden) read
    assert [e for e in report["errors"] if e["level"] == "error"] == []
    snapshot = json.loads(snap.read_text())
    assert snapshot["errors"] == []  # no request was forbidden
    assert snapshot["forbidden"] == []  # not even an optional one
    assert snapshot["absent"] == []  # every API the audit asks for is installed
    objects = snapshot["objects"]
    assert len(objects["nodes"]) == 8
    assert len(objects["pods"]) == 25
    # Owners all the way up, through the operators' custom resources.
    owners = {(w["kind"], w["metadata"]["name"]) for w in objects["workloads"]}
    for _, kind, name in ml.OWNERS:
        assert (kind, name) in owners, f"{kind} {name} is missing from {sorted(owners)}"
    # Device-plugin ConfigMaps: the name-pattern ones, read by name; nothing else.
    configmaps = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in objects["configmaps"]}
    assert configmaps == {("gpu-operator", "time-slicing-config"), ml.DEVICE_PLUGIN_CONFIGMAP}
    # The events are the real scheduler's, for the two pending pods only.
    events = objects["events"]
    assert {(e["involvedObject"]["namespace"], e["involvedObject"]["name"]) for e in events} == PENDING
    assert {e.get("reportingComponent") or e.get("source", {}).get("component") for e in events} == {
        "default-scheduler"
    }

    found = _by_rule(report)
    assert sorted(f["resource"]["name"] for f in found["GPA-AL-102"]) == ["finetune-llama", "notebook-alice"]
    stuck = {(f["resource"]["name"], f["resource"]["node"]) for f in found["GPA-AL-101"]}
    assert stuck == {("whisper-asr", "gpu-a100-1"), ("tts-api", "gpu-l4-1")}
    assert [f["resource"]["name"] for f in found["GPA-AL-103"]] == ["warm-h200"]
    assert "4 more needed" in found["GPA-AL-104"][0]["message"]


def test_pending_causes_come_from_the_real_schedulers_messages(live):
    plane, config, work = live
    _, report, _ = _audit(config, work, "--rules", "GPA-AL-102")
    pending = {f["resource"]["name"]: f["evidence"] for f in report["findings"]}
    messages = {
        e["involvedObject"]["name"]: e["message"]
        for e in plane.admin.list("v1", "Event", fieldSelector="reason=FailedScheduling")
    }
    # notebook-alice asks for 1 GPU without a toleration: the three untainted
    # nodes (cpu-0 and the two L4s) have no free GPU, the five others are tainted.
    assert "3 Insufficient nvidia.com/gpu" in messages["notebook-alice"], messages
    assert "5 node(s) had untolerated taint(s)" in messages["notebook-alice"], messages
    reasons = {(r["count"], r["reason"], r["cause"]) for r in pending["notebook-alice"]["pending.reasons"]}
    assert reasons == {
        (3, "Insufficient nvidia.com/gpu", "allocation"),
        (5, "node(s) had untolerated taint(s)", "placement"),
    }
    # finetune-llama wants 8 A100s: both A100 nodes are full, the rest fail its affinity.
    reasons = {(r["count"], r["reason"], r["cause"]) for r in pending["finetune-llama"]["pending.reasons"]}
    assert (2, "Insufficient nvidia.com/gpu", "allocation") in reasons, (messages, reasons)
    assert sum(count for count, _, _ in reasons) == 8


def test_snapshot_command_and_its_replay_give_the_live_audit(live):
    _, config, work = live
    snap = work / "snapshot.json"
    proc = take_snapshot(config, snap, work)
    assert proc.returncode == 0, proc.stderr
    snapshot = json.loads(snap.read_text())
    assert snapshot["errors"] == [] and snapshot["absent"] == []
    assert not any("secret" in key for key in snapshot["objects"])
    _, live_report, _ = _audit(config, work)
    replay = gpuaudit("audit", "--snapshot", str(snap), "--format", "json", "--fail-on", "critical", cwd=work)
    assert replay.returncode == 0, replay.stderr
    # The same findings (durations in messages move on between the two runs).
    assert _subjects(json.loads(replay.stdout)) == _subjects(live_report)


def _subjects(report: dict) -> list[tuple]:
    return sorted(
        (f["rule"], f["resource"]["kind"], f["resource"]["namespace"] or "", f["resource"]["name"])
        for f in report["findings"]
    )


# -- least privilege, proven by the real authorizer ------------------------------


def _grants() -> list[tuple[str, str, str, str]]:
    """(role, group, resource, verb) for every single grant the audit holds:
    the base role whole, and of the opt-in role the operators this cluster
    runs (tests/controlplane/ml.py; the others own no pod here, so nothing
    asks for them)."""
    running = {(g, r) for rule in ml.OPERATOR_RULES for g in rule["apiGroups"] for r in rule["resources"]}
    out = []
    for role, every in ((base_role(), True), (operator_role(), False)):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        if every or (group, resource) in running:
                            out.append((role["metadata"]["name"], group, resource, verb))
    return out


def _without(role: dict, group: str, resource: str, verb: str) -> dict:
    reduced = copy.deepcopy(role)
    rules = []
    for rule in reduced["rules"]:
        if group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]:
            rest_resources = [r for r in rule["resources"] if r != resource]
            rest_verbs = [v for v in rule["verbs"] if v != verb]
            if rest_resources:
                rules.append({**rule, "resources": rest_resources})
            if rest_verbs:
                rules.append({**rule, "resources": [resource], "verbs": rest_verbs})
        else:
            rules.append(rule)
    reduced["rules"] = rules
    reduced["metadata"] = {"name": role["metadata"]["name"]}
    return reduced


@pytest.mark.parametrize("grant", _grants(), ids=lambda g: f"{g[3]}-{g[2]}.{g[1] or 'core'}")
def test_every_grant_is_needed(live, grant):
    """Without any one (resource, verb) the collection names it: partial (an
    error) for a required resource, a warning (``forbidden``, naming what
    grants it) for an optional one."""
    from gpuaudit.sources.cluster import collect

    plane, config, _ = live
    role_name, group, resource, verb = grant
    role = base_role() if role_name == "gpuaudit-reader" else operator_role()
    plane.admin.apply(_without(role, group, resource, verb))
    try:
        plane.admin.wait("the reduced role", lambda: not allowed(plane, group, resource, verb))
        snapshot = collect(kubeconfig=str(config), request_timeout=10, deadline=60)
    finally:
        plane.admin.apply(role)
        plane.admin.wait("the full role", lambda: allowed(plane, group, resource, verb))
    if role_name == "gpuaudit-ml-operators" or (group, resource) in OPTIONAL_BASE:
        assert snapshot["errors"] == [], "an optional resource made the collection partial"
        warned = snapshot["forbidden"]
        assert [w["resource"] for w in warned] == [f"{resource}.{group}"], warned
        assert all(w["status"] == 403 and resource in w["endpoint"] for w in warned), warned
        grant = "ml-operators" if role_name == "gpuaudit-ml-operators" else "gpuaudit-reader"
        assert grant in warned[0]["note"], warned
        return
    assert snapshot["forbidden"] == []
    forbidden = [e for e in snapshot["errors"] if e["status"] == 403]
    assert forbidden, f"nothing failed without {verb} {resource}.{group}: the grant is not needed"
    assert all(resource in e["endpoint"] for e in forbidden), forbidden
    assert any(e["resource"] in (resource, "workloads") for e in forbidden), forbidden


def test_a_forbidden_list_makes_the_audit_exit_2_naming_it(live):
    plane, config, work = live
    role = base_role()
    plane.admin.apply(_without(role, "", "events", "list"))
    try:
        plane.admin.wait("the reduced role", lambda: not allowed(plane, "", "events", "list"))
        code, report, _ = _audit(config, work)
    finally:
        plane.admin.apply(role)
        plane.admin.wait("the full role", lambda: allowed(plane, "", "events", "list"))
    assert code == 2
    [error] = [e for e in report["errors"] if e["level"] == "error"]
    assert "events" in error["message"] and "partial" in error["message"]


def test_a_forbidden_operator_resource_is_a_warning_and_its_pods_are_still_judged(live):
    """Without the opt-in role's rayclusters: exit by findings (0 here), not 2;
    a warning naming the resource and the component; the Ray pods judged."""
    plane, config, work = live
    role = operator_role()
    _, full, _ = _audit(config, work)
    plane.admin.apply(_without(role, "ray.io", "rayclusters", "list"))
    try:
        plane.admin.wait("the reduced role", lambda: not allowed(plane, "ray.io", "rayclusters", "list"))
        code, report, stderr = _audit(config, work)
    finally:
        plane.admin.apply(role)
        plane.admin.wait("the full role", lambda: allowed(plane, "ray.io", "rayclusters", "list"))
    assert code == 0, stderr
    assert [e for e in report["errors"] if e["level"] == "error"] == []
    assert not report["summary"]["cluster"].get("partial")
    [warning] = [e for e in report["errors"] if e["level"] == "warning" and "rayclusters" in e["message"]]
    assert "rayclusters.ray.io" in warning["message"] and "deploy/components/ml-operators" in warning["message"]
    # every finding on a pod is still there (the Ray pods' owner is named from the pods)
    assert _pods(report) == _pods(full)


def _pods(report: dict) -> list[tuple]:
    return sorted((f["rule"], f.get("evidence", {}).get("pod") or "") for f in report["findings"])


def test_fix_overlay_of_the_live_cluster_passes_server_side_validation(live):
    """`gpuaudit fix --snapshot` patches the workloads as read; the real API
    server (with the CRDs installed) must accept every patched object."""
    plane, config, work = live
    snap = work / "fix-snapshot.json"
    proc = take_snapshot(config, snap, work)
    assert proc.returncode == 0, proc.stderr
    out = work / "overlay"
    fixed = gpuaudit("fix", "--snapshot", str(snap), "--out", str(out), cwd=work)
    assert fixed.returncode in (0, 1), fixed.stderr
    assert (out / "kustomization.yaml").is_file(), fixed.stdout + fixed.stderr
    dry = kubectl(plane, "apply", "--dry-run=server", "-k", str(out))
    assert dry.returncode == 0, dry.stderr
    assert "(server dry run)" in dry.stdout
    patches = sorted((out / "patches").glob("*.yaml"))
    assert patches, fixed.stdout
    # Every object the overlay patches went through the server's validation.
    assert dry.stdout.count("configured (server dry run)") == len(list((out / "base").glob("*.yaml")))


def test_policyreports_are_accepted_by_the_real_api_server(live):
    """`--format policyreport` output, applied for real with the wgpolicyk8s.io
    CRDs (../shared/reference), is valid for their schemas and reads back."""
    plane, config, work = live
    crds = [
        ROOT.parent / "shared" / "reference" / f"wgpolicyk8s.io_{name}.yaml"
        for name in ("policyreports", "clusterpolicyreports")
    ]
    if not all(path.is_file() for path in crds):
        pytest.skip("the wgpolicyk8s.io CRDs are not in ../shared/reference")
    for path in crds:
        installed = kubectl(plane, "apply", "-f", str(path))
        assert installed.returncode == 0, installed.stderr
    assert (
        kubectl(
            plane,
            "wait",
            "--for=condition=Established",
            "crd/policyreports.wgpolicyk8s.io",
            "crd/clusterpolicyreports.wgpolicyk8s.io",
        ).returncode
        == 0
    )
    reports = work / "policyreports.yaml"
    code, _, _ = _audit(config, work)  # the JSON run: the same findings
    proc = gpuaudit(
        "audit",
        "--kubeconfig",
        str(config),
        "--format",
        f"policyreport={reports}",
        "--fail-on",
        "critical",
        cwd=work,
    )
    assert proc.returncode == code == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(reports.read_text()) if d]
    items = [i for d in docs for i in (d.get("items") if d.get("kind", "").endswith("List") else [d])]
    assert {i["kind"] for i in items} <= {"PolicyReport", "ClusterPolicyReport"} and items
    applied = kubectl(plane, "apply", "--server-side", "-f", str(reports))
    assert applied.returncode == 0, applied.stderr
    got = plane.admin.list("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert {(r["metadata"]["namespace"], r["metadata"]["name"]) for r in got} == {
        (i["metadata"]["namespace"], i["metadata"]["name"]) for i in items if i["kind"] == "PolicyReport"
    }
    assert sum(len(r.get("results") or []) for r in got) > 0
