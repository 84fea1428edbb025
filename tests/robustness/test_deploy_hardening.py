"""The deploy, as an attacker inside the cluster would probe it (issue 32,
item 10; item 7's pruning): what each pod may reach over the network, which
images run (pinned by digest, or named in the one place a release pins them),
and which token each container holds -- the PolicyReport job's gpuaudit
container read-only, the write step on its own with its own ServiceAccount.

Every build is checked: the Kustomize base, each overlay, the base with every
component, and the Helm chart with its defaults and with every component.
"""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
import yaml

from tests.test_deploy import (  # noqa: F401  (kubectl, helm, built: fixtures)
    BUILDS,
    COMPONENTS,
    DEPLOY,
    built,
    helm,
    helm_template,
    kubectl,
    kustomize,
    pod_spec,
    rules_of,
    site_build,
    workloads,
)

IMAGES = DEPLOY / "components" / "images" / "kustomization.yaml"
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
# The ports a gpuaudit pod that reads the cluster may reach: DNS, the API
# server (443 behind the service, 6443 on the control plane), Prometheus.
EGRESS = {("UDP", 53), ("TCP", 53), ("TCP", 443), ("TCP", 6443), ("TCP", 9090)}
READERS = {"audit", "report", "policyreports", "policyreports-apply"}


@pytest.fixture(scope="module")
def builds(kubectl, helm, tmp_path_factory) -> dict[str, list[dict[str, Any]]]:  # noqa: F811
    tmp = tmp_path_factory.mktemp("builds")
    out = {name: kustomize(kubectl, path) for name, path in BUILDS.items()}
    out["every component"] = site_build(kubectl, tmp, list(COMPONENTS))
    out["helm"] = helm_template(helm, tmp)
    out["helm, every component"] = helm_template(helm, tmp, *(f"{v}.enabled=true" for v in COMPONENTS.values()))
    return out


def _selects(policy: dict[str, Any], labels: dict[str, str]) -> bool:
    selector = policy["spec"].get("podSelector") or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "NotIn" and value in expr["values"]:
            return False
    return True


def _allowed(docs: list[dict[str, Any]], labels: dict[str, str], direction: str) -> set[tuple[str, int]] | None:
    """The (protocol, port) a pod may use in ``direction`` ("ingress",
    "egress"); None when no policy restricts that direction (all open)."""
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy"
        and _selects(d, labels)
        and direction.capitalize() in d["spec"].get("policyTypes", [])
    ]
    if not policies:
        return None
    allowed = set()
    for policy in policies:
        for rule in policy["spec"].get(direction) or []:
            ports = rule.get("ports")
            assert ports, f"{policy['metadata']['name']}: a rule with no ports allows every port"
            allowed |= {(p.get("protocol", "TCP"), p["port"]) for p in ports}
    return allowed


def exactly(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def _pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return obj["spec"]["template"]["metadata"]["labels"]


def test_every_pod_reaches_only_what_it_needs(builds):
    for build, docs in builds.items():
        assert any(d["kind"] == "NetworkPolicy" for d in docs), f"{build}: no NetworkPolicy"
        for obj in workloads(docs):
            labels = _pod_labels(obj)
            name = f"{build}: {obj['metadata']['name']}"
            component = labels.get("app.kubernetes.io/component")
            egress = _allowed(docs, labels, "egress")
            ingress = _allowed(docs, labels, "ingress")
            assert egress is not None and ingress is not None, f"{name}: not covered by a NetworkPolicy"
            if component in READERS:
                assert egress == EGRESS, f"{name}: egress {sorted(egress)}"
            else:  # the report server and the NVML sampler talk to nothing
                assert egress == set(), f"{name}: egress {sorted(egress)}"
            if component == "report-server":
                assert ingress == {("TCP", 8080)}, name
            else:
                assert ingress == set(), f"{name}: ingress {sorted(ingress)}"


def _images(docs: list[dict[str, Any]]) -> set[str]:
    found = set()
    for obj in workloads(docs):
        spec = pod_spec(obj)
        found |= {c["image"] for c in [*spec.get("initContainers", []), *spec["containers"]]}
    return found


def _name(image: str) -> str:
    return re.split(r"[@]", image)[0].rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image.split("@")[0]


def test_every_image_is_pinned_by_digest_or_named_in_the_one_place_a_release_pins(builds):
    component = yaml.safe_load(IMAGES.read_text())
    assert component["kind"] == "Component"
    named = {entry["name"] for entry in component["images"]}
    for build, docs in builds.items():
        for image in _images(docs):
            assert DIGEST.search(image) or _name(image) in named, f"{build}: {image}"
    # every build of deploy/ goes through it: the base's and each overlay's kustomization
    for path in [DEPLOY / "kustomization.yaml", *(DEPLOY / "overlays").glob("*/kustomization.yaml")]:
        listed = yaml.safe_load(path.read_text()).get("components") or []
        assert any(c.rstrip("/").endswith("components/images") for c in listed), path


def test_a_release_that_fills_the_digests_pins_every_image(kubectl, helm, tmp_path):  # noqa: F811
    """What the release procedure does (deploy/README.md): fill each digest in
    deploy/components/images. Then every build, Kustomize and Helm, runs
    every image by digest."""
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, symlinks=True)
    component = yaml.safe_load((copy / "components" / "images" / "kustomization.yaml").read_text())
    for number, entry in enumerate(component["images"]):
        entry["digest"] = f"sha256:{number:064x}"
    (copy / "components" / "images" / "kustomization.yaml").write_text(yaml.safe_dump(component))
    docs = kustomize(kubectl, copy) + kustomize(kubectl, copy / "overlays" / "policyreports")
    docs += helm_template(
        helm, tmp_path, *(f"{v}.enabled=true" for v in COMPONENTS.values()), chart=copy / "helm" / "gpuaudit"
    )
    images = _images(docs)
    assert images and all(DIGEST.search(i) for i in images), sorted(images)


def _bindings(docs: list[dict[str, Any]]) -> dict[str, set[tuple[str, str, str]]]:
    """ServiceAccount name -> every (group, resource, verb) its bindings grant."""
    roles = {d["metadata"]["name"]: rules_of(d) for d in docs if d["kind"] in ("ClusterRole", "Role")}
    out: dict[str, set[tuple[str, str, str]]] = {}
    for binding in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        for subject in binding["subjects"]:
            if subject["kind"] == "ServiceAccount":
                out.setdefault(subject["name"], set()).update(roles.get(binding["roleRef"]["name"], set()))
    return out


def test_the_policyreports_gpuaudit_container_holds_a_read_only_token(builds):
    for build in ("policyreports", "every component", "helm, every component"):
        docs = builds[build]
        grants = _bindings(docs)
        for obj in workloads(docs):
            spec = pod_spec(obj)
            containers = [*spec.get("initContainers", []), *spec["containers"]]
            runs_gpuaudit = any(_name(c["image"]).endswith("gpuaudit") for c in containers)
            if spec.get("automountServiceAccountToken") is False:
                continue  # no token at all
            verbs = {v for _, _, v in grants.get(spec.get("serviceAccountName", "default"), set())}
            name = f"{build}: {obj['metadata']['name']}"
            if runs_gpuaudit:  # gpuaudit reads; no pod it runs in holds a token that writes
                assert verbs <= {"get", "list", "watch"}, f"{name}: {sorted(verbs)}"
        writer = exactly(docs, "CronJob", "gpuaudit-policyreports-apply")
        spec = pod_spec(writer)
        assert spec["serviceAccountName"] == "gpuaudit-policyreports"
        assert not any(_name(c["image"]).endswith("gpuaudit") for c in [*spec["initContainers"], *spec["containers"]])
        # the writer writes PolicyReports and nothing else, and reads nothing else
        assert {(g, r) for g, r, _ in grants["gpuaudit-policyreports"]} == {
            ("wgpolicyk8s.io", "policyreports"),
            ("wgpolicyk8s.io", "clusterpolicyreports"),
        }


def test_the_reports_a_run_no_longer_writes_are_pruned(builds):
    """Item 7: apply, label what was applied with this run's id (the pod's
    UID, through the downward API), then delete every gpuaudit report
    without it -- in that order, each step only after the one before worked."""
    docs = builds["policyreports"]
    spec = pod_spec(exactly(docs, "CronJob", "gpuaudit-policyreports-apply"))
    steps = [*spec["initContainers"], *spec["containers"]]
    assert [c["name"] for c in steps] == ["apply", "label", "prune"]
    for container in steps:
        env = {e["name"]: e for e in container.get("env", [])}
        assert env["RUN_ID"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    apply, label, prune = (c["args"] for c in steps)
    assert apply[0] == "apply" and "--server-side" in apply
    assert label[0] == "label" and "gpuaudit.io/run=$(RUN_ID)" in label and "--overwrite" in label
    assert prune[0] == "delete" and "--all-namespaces" in prune
    selector = prune[prune.index("--selector") + 1]
    assert selector == "app.kubernetes.io/managed-by=gpuaudit,gpuaudit.io/run!=$(RUN_ID)"
    assert {r.split(".")[0] for r in prune[1].split(",")} == {"policyreports", "clusterpolicyreports"}
    # the file it applies is the one the gpuaudit CronJob writes, on the data volume
    written = exactly(docs, "CronJob", "gpuaudit-policyreports")
    env = {e["name"]: e.get("value") for e in pod_spec(written)["containers"][0].get("env", [])}
    path = env["REPORTS_FILE"]
    assert f"--filename={path}" in apply and f"--filename={path}" in label
    grants = _bindings(docs)["gpuaudit-policyreports"]
    assert {v for _, _, v in grants} == {"get", "list", "create", "update", "patch", "delete"}
    script = (DEPLOY / "components" / "policyreports" / "scripts" / "policyreports.sh").read_text()
    assert "REPORTS_FILE" in script


def test_the_audit_cronjob_caps_what_it_reads_below_its_memory(builds):
    """Item 5 in the deploy: the collection stops at --max-list-bytes, a
    quarter of the 2 GiB memory limit (what is kept takes about three times
    its bytes), so a hostile API server ends in a failed Job, not an OOM kill."""
    for build, docs in builds.items():
        jobs = [d for d in docs if d["kind"] == "CronJob" and d["metadata"]["name"] != "gpuaudit-policyreports-apply"]
        for job in jobs:
            (container,) = pod_spec(job)["containers"]
            assert "--max-list-bytes=512Mi" in container["args"], f"{build}: {job['metadata']['name']}"
            assert container["resources"]["limits"]["memory"] == "2Gi"
